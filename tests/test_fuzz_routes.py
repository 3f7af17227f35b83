"""No input gives a 5xx (issue 21 #2): lone surrogates, control characters and odd shapes on every route.

A lone surrogate in ``audio_path`` used to be a 500 with two tracebacks (os.stat's UnicodeEncodeError), and one
in ``options`` a 500 only after the worker had started and loaded its models. Refused now where the JSON and form
fields are read: 400 ``invalid_request`` naming the field, with no worker started. Against a real daemon with
the fake engine; hypothesis drives every route make_app serves.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hasrd.app import make_app
from hasrd.context import Daemon
from tests.daemon import Hasrd, write_wav


@pytest.fixture(scope="module")
def daemon(module_tmp: str) -> Iterator[Hasrd]:
    # no hub is reachable, and a fuzzed DELETE /api/delete must find only this test's own models
    d = Hasrd(os.path.join(module_tmp, "s.sock"), env={
        "HASR_MAX_UPLOAD_MB": "0.5", "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": os.path.join(module_tmp, "hf"),
        "XDG_DATA_HOME": os.path.join(module_tmp, "data")})
    yield d
    assert d.stop() == 0


@pytest.fixture(scope="module")
def wav(module_tmp: str) -> str:
    return write_wav(os.path.join(module_tmp, "a.wav"), 0.3)


def served_routes() -> list[tuple[str, str]]:
    """(method, path) of every HTTP route, from the app itself: a route added later is fuzzed too."""
    from starlette.routing import Route

    app = make_app(Daemon.__new__(Daemon))
    out = []
    for r in app.routes:
        if isinstance(r, Route):
            for m in sorted(r.methods or ()):
                if m != "HEAD":
                    out.append((m, r.path.replace("{model_id:path}", "whisper-1")))
    return out


ROUTES = served_routes()
SURROGATES = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
CONTROLS = st.characters(max_codepoint=0x1F) | st.sampled_from(["\x7f", "\x85", "\u2028", "\ufeff"])
TEXT = st.text(SURROGATES | CONTROLS | st.characters(), max_size=12)
SCALAR = TEXT | st.integers() | st.floats(allow_nan=False) | st.booleans() | st.none()
JSONISH = st.recursive(SCALAR, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
                       max_leaves=8)
FIELDS = ["audio_path", "language", "options", "model", "keep_alive", "prompt", "response_format", "path",
          "temperature", "stream", "hasr_events", "timestamp_granularities[]", "include[]", "max_line_chars"]


def _json_body(draw: Any, wav: str) -> bytes:
    obj = draw(st.dictionaries(st.sampled_from(FIELDS) | TEXT, JSONISH, max_size=4))
    if draw(st.booleans()):
        obj["audio_path"] = draw(st.sampled_from([wav, "/nonexistent/x.wav", wav + "\x00"])) + draw(TEXT)
    if draw(st.booleans()):
        obj.setdefault("options", {})
        if isinstance(obj["options"], dict):
            obj["options"][draw(TEXT)] = draw(TEXT)
    return json.dumps(obj).encode()  # ensure_ascii: a lone surrogate travels as its \\udXXX escape


@st.composite
def requests(draw: Any, wav: str) -> tuple[str, str, dict[str, str], Any, Any]:
    method, path = draw(st.sampled_from(ROUTES))
    kind = draw(st.sampled_from(["json", "form", "multipart", "raw"]))
    headers: dict[str, str] = {}
    content: Any = None
    files: Any = None
    if kind == "json":
        content = _json_body(draw, wav)
        headers["content-type"] = "application/json"
    elif kind == "raw":
        content = draw(st.binary(max_size=64))
        headers["content-type"] = draw(st.sampled_from(["application/json", "multipart/form-data",
                                                        "application/x-www-form-urlencoded", "text/plain"]))
    else:
        fields = draw(st.dictionaries(st.sampled_from(FIELDS), TEXT, max_size=4))
        data = {k: v.encode("utf-8", "surrogatepass") for k, v in fields.items()}  # the bytes a client sends
        if kind == "form":
            from urllib.parse import urlencode

            content = urlencode(data).encode()
            headers["content-type"] = "application/x-www-form-urlencoded"
        else:
            name = draw(TEXT).encode("utf-8", "surrogatepass").decode("latin-1")
            files = {"file": (name, draw(st.sampled_from([Path(wav).read_bytes(), b"", b"\x00" * 100])))}
            return method, path, headers, {k: v.decode("latin-1") for k, v in data.items()}, files
    return method, path, headers, content, files


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(data=st.data())
def test_no_request_on_any_route_gets_a_5xx(daemon: Hasrd, wav: str, data: Any) -> None:
    method, path, headers, content, files = data.draw(requests(wav))
    if path == "/api/stop" and method == "POST":
        method = "GET"  # 405: a stop would end the daemon under test
    with daemon.client(timeout=30) as c:
        if path == "/api/events" and method == "GET":
            with c.stream(method, path) as r:
                status = r.status_code
        elif files is not None:
            r = c.request(method, path, data=content, files=files)
            status = r.status_code
        else:
            r = c.request(method, path, content=content, headers=headers)
            status = r.status_code
    assert status < 500, (method, path, content, files, status, r.text[:500] if hasattr(r, "text") else "")


@pytest.mark.parametrize("body,param", [
    ({"audio_path": "/path/to/x\ud800.wav"}, "audio_path"),
    ({"audio_path": "WAV", "options": {"prompt": "\ud800"}}, "options.prompt"),
    ({"audio_path": "WAV", "options": {"\udfff": 1}}, "a key of options"),
    ({"audio_path": "WAV", "language": "en\udcff"}, "language"),
    ({"audio_path": "WAV\x00"}, "audio_path"),
])
def test_a_lone_surrogate_is_a_400_naming_its_field_before_any_worker_starts(daemon: Hasrd, wav: str,
                                                                             body: dict[str, Any],
                                                                             param: str) -> None:
    with daemon.client() as c:
        c.post("/api/unload")
        raw = json.dumps(body).replace("WAV", wav)
        for accept in ("application/json", "application/x-ndjson"):
            r = c.post("/transcribe", content=raw, headers={"content-type": "application/json", "accept": accept})
            assert r.status_code == 400, r.text
            assert r.json()["error"]["code"] == "invalid_request" and r.json()["error"]["param"] == param
        assert c.get("/api/ps").json()["state"] == "stopped"  # no worker was started for it
    assert "Traceback" not in daemon.log()


def test_a_path_with_a_surrogate_escaped_byte_still_names_its_file(daemon: Hasrd, module_tmp: str) -> None:
    raw = os.path.join(os.fsencode(module_tmp), b"x\xff.wav")
    write_wav(os.fsdecode(raw), 0.3)
    with daemon.client() as c:
        r = c.post("/transcribe", content=json.dumps({"audio_path": os.fsdecode(raw)}),
                   headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text

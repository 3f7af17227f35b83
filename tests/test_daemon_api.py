"""The daemon's HTTP API over a real Unix socket, with the fake engine behind it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest

from tests.daemon import Hasrd, write_wav


@pytest.fixture
def daemon(short_tmp: str) -> Iterator[Hasrd]:
    d = Hasrd(os.path.join(short_tmp, "s.sock"), env={"HASR_MAX_UPLOAD_MB": "1", "HASR_STALL_SEC": "3"})
    yield d
    assert d.stop() == 0, d.log()


@pytest.fixture
def wav(short_tmp: str) -> str:
    return write_wav(os.path.join(short_tmp, "a.wav"), 2.0)


def test_health_answers_idle_before_any_request_and_no_worker_runs(daemon: Hasrd) -> None:
    h = daemon.get("/health")
    assert h["status"] == "idle" and h["model_loaded"] is False and h["engine"] == "fake"
    assert daemon.get("/api/ps")["state"] == "stopped"


def test_transcribe_returns_the_seed_result_with_timings(daemon: Hasrd, wav: str) -> None:
    with daemon.client() as c:
        r = c.post("/transcribe", json={"audio_path": wav, "language": "Chinese"})
    assert r.status_code == 200, r.text
    res = r.json()
    assert res["audio_path"] == wav and res["language"] == "Chinese"
    assert res["final"] and res["draft"] and isinstance(res["sent_windows"], list)
    assert {"queue_s", "load_s", "decode_s", "total_s"} <= set(res["timings"])
    assert res["timings"]["load_s"] > 0  # this request started the worker
    assert daemon.get("/health")["status"] == "ok"


def test_transcribe_streams_ndjson_events_ending_with_done(daemon: Hasrd, wav: str) -> None:
    with daemon.client() as c, c.stream("POST", "/transcribe", json={"audio_path": wav},
                                        headers={"Accept": "application/x-ndjson"}) as r:
        assert r.headers["content-type"].startswith("application/x-ndjson")
        events = [json.loads(line) for line in r.iter_lines() if line]
    kinds = [e["event"] for e in events]
    assert kinds[0] == "loading" and kinds[-1] == "done"
    assert {"progress", "draft", "sentence"} <= set(kinds)
    assert events[-1]["result"]["final"] == "".join(e["text"] for e in events if e["event"] == "sentence")


@pytest.mark.parametrize("fmt,check", [
    ("json", lambda r: r.json()["text"]),
    ("text", lambda r: r.text.strip() and r.headers["content-type"].startswith("text/plain")),
    ("srt", lambda r: r.text.startswith("1\n00:00:00,000 --> ")),
    ("vtt", lambda r: r.text.startswith("WEBVTT")),
    ("verbose_json", lambda r: r.json()["segments"] and r.json()["duration"] == 2.0),
])
def test_openai_endpoint_renders_every_response_format(daemon: Hasrd, wav: str, fmt: str, check: object) -> None:
    with daemon.client() as c:
        r = c.post("/v1/audio/transcriptions", data={"path": wav, "response_format": fmt})
    assert r.status_code == 200, r.text
    assert check(r)  # type: ignore[operator]


@pytest.mark.parametrize("hasr_events", [False, True])
def test_openai_endpoint_accepts_an_upload_and_streams_sse(daemon: Hasrd, wav: str, hasr_events: bool) -> None:
    with daemon.client() as c, open(wav, "rb") as f:
        r = c.post("/v1/audio/transcriptions", files={"file": ("a b 会议.wav", f, "audio/wav")},
                   data={"stream": "true", **({"hasr_events": "true"} if hasr_events else {})})
    assert r.headers["content-type"].startswith("text/event-stream")
    datas = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
    assert datas[-1] == "[DONE]"
    types = [json.loads(x)["type"] for x in datas[:-1]]
    assert "transcript.text.delta" in types and types[-1] == "transcript.text.done"
    if hasr_events:  # asked for (hasrctl does): hasr's own events too
        assert "hasr.draft" in types and "hasr.progress" in types
    else:  # by default only what OpenAI's SDK knows
        assert set(types) == {"transcript.text.delta", "transcript.text.done"}


def test_the_openai_python_sdk_works_over_the_socket(daemon: Hasrd, wav: str) -> None:
    import httpx
    import openai

    http = httpx.Client(transport=httpx.HTTPTransport(uds=daemon.sock))
    sdk = openai.OpenAI(api_key="unused", base_url="http://hasr/v1", http_client=http)
    with open(wav, "rb") as f:
        as_json = sdk.audio.transcriptions.create(model="hasr", file=f)
    assert as_json.text
    with open(wav, "rb") as f:
        as_text = sdk.audio.transcriptions.create(model="hasr", file=f, response_format="text")
    assert str(as_text).strip() == as_json.text
    with open(wav, "rb") as f:
        as_srt = sdk.audio.transcriptions.create(model="hasr", file=f, response_format="srt")
    assert "-->" in str(as_srt)
    assert [m.id for m in sdk.models.list()][0] == "hasr"


def test_curl_gets_health_and_a_transcription(daemon: Hasrd, wav: str) -> None:
    curl = shutil.which("curl")
    assert curl, "curl is installed by .ci/run"
    out = subprocess.run([curl, "-sf", "--unix-socket", daemon.sock, "http://hasr/health"], capture_output=True,
                         text=True, check=True).stdout
    assert json.loads(out)["status"] in ("idle", "ok")
    out = subprocess.run([curl, "-sf", "--unix-socket", daemon.sock, "http://hasr/v1/audio/transcriptions",
                          "-F", f"file=@{wav}", "-F", "response_format=text"], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip()


def test_a_file_name_with_spaces_and_cjk_characters_works(daemon: Hasrd, short_tmp: str) -> None:
    path = write_wav(os.path.join(short_tmp, "周会 记录 01.wav"), 1.0)
    with daemon.client() as c:
        r = c.post("/transcribe", json={"audio_path": path})
    assert r.status_code == 200 and r.json()["audio_path"] == path


def test_health_is_never_blocked_by_a_transcription(daemon: Hasrd, short_tmp: str) -> None:
    """/health answers while a job runs (it says so: "ok", busy), many times over, not once the job is done:
    counted in answers during the job, not in seconds each took on this machine."""
    path = write_wav(os.path.join(short_tmp, "long.wav"), 6.0)
    done = threading.Event()

    def slow() -> None:
        with daemon.client(300) as c:
            c.post("/transcribe", json={"audio_path": path, "options": {"fake": {"rtf": 0.7}}})  # 4.2 s paced
        done.set()

    t = threading.Thread(target=slow)
    t.start()
    answers = 0
    with daemon.client(120) as c:
        while daemon.get("/api/ps")["running"] != 1:
            assert not done.is_set()
            time.sleep(0.02)
        while not done.is_set():
            h = c.get("/health").json()
            if not done.is_set():  # answered while the job still ran
                assert h["status"] == "ok", h
                answers += 1
            time.sleep(0.05)
    t.join()
    assert answers >= 3, answers  # a blocked /health would have answered at most once, after the job


def test_lifecycle_endpoints_load_unload_version_and_models(daemon: Hasrd) -> None:
    with daemon.client() as c:
        ps = c.post("/api/load", json={"keep_alive": 60}).json()
        assert ps["state"] == "ready" and ps["pid"] and ps["ttl_sec"] == 60 and ps["identity"]["engine"] == "fake"
        assert c.post("/api/unload").json() == {"state": "stopped", "workers": []}
        assert c.get("/api/version").json()["protocol"] >= 1
        assert c.get("/v1/models").json()["data"][0]["id"] == "hasr"
        r = c.get("/nope")
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
        r = c.get("/transcribe")
        assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"


def test_events_stream_starts_with_the_current_state_and_follows_changes(daemon: Hasrd, wav: str) -> None:
    seen: list[dict[str, object]] = []

    def follow() -> None:
        with daemon.client() as c, c.stream("GET", "/api/events") as r:
            for line in r.iter_lines():
                if line:
                    seen.append(json.loads(line))
                    if seen[-1]["state"] == "stopped" and len(seen) > 2:
                        return

    t = threading.Thread(target=follow, daemon=True)
    t.start()
    time.sleep(0.3)
    with daemon.client() as c:
        c.post("/transcribe", json={"audio_path": wav, "options": {"fake": {"rtf": 0.3}}})
        c.post("/api/unload")
    t.join(10)
    states = [s["state"] for s in seen]
    assert states[0] == "stopped" and "starting" in states and "ready" in states and states[-1] == "stopped"
    assert any(s.get("job") and str(s["status_text"]).startswith("transcribing a.wav") for s in seen)


def test_loading_phases_reach_a_streaming_request(short_tmp: str) -> None:
    d = Hasrd(os.path.join(short_tmp, "p.sock"), env={"HASR_FAKE_LOAD_SEC": "0.5"})
    try:
        wav = write_wav(os.path.join(short_tmp, "b.wav"), 0.5)
        with d.client() as c, c.stream("POST", "/transcribe", json={"audio_path": wav},
                                       headers={"Accept": "application/x-ndjson"}) as r:
            events = [json.loads(line) for line in r.iter_lines() if line]
        phases = [e["phase"] for e in events if e["event"] == "loading"]
        assert len(phases) >= 3 and any(p.startswith("loading fake models") for p in phases), phases
    finally:
        d.stop()


def test_an_events_follower_neither_keeps_the_daemon_alive_nor_blocks_its_exit(short_tmp: str) -> None:
    d = Hasrd(os.path.join(short_tmp, "e.sock"), args=["--idle-exit", "0.5"])
    lines: list[str] = []

    def follow() -> None:
        try:
            with d.client() as c, c.stream("GET", "/api/events") as r:
                for line in r.iter_lines():
                    lines.append(line)
        except Exception:  # noqa: BLE001 - the stream ends with the daemon
            pass

    t = threading.Thread(target=follow, daemon=True)
    t.start()
    assert d.proc.wait(10) == 0, d.log()  # idle exit despite the open stream
    t.join(5)
    assert not t.is_alive() and lines and json.loads(lines[0])["state"] == "stopped"
    assert not os.path.exists(d.sock)


def test_an_exiting_daemon_leaves_a_newer_daemons_socket_alone(short_tmp: str) -> None:
    sock = os.path.join(short_tmp, "r.sock")
    old = Hasrd(sock)
    os.unlink(sock)  # as if it had been replaced: a new daemon binds the same path
    new = Hasrd(sock)
    try:
        assert old.stop() == 0
        assert os.path.exists(sock) and new.get("/health")["status"] == "idle"
    finally:
        new.stop()


def test_an_unknown_engine_is_refused_at_start(short_tmp: str) -> None:
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "hasrd.server", "--socket", os.path.join(short_tmp, "x.sock")],
                       env={**os.environ, "HASR_ENGINE": "nonsense"}, capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "HASR_ENGINE='nonsense'" in r.stderr and "whisper" in r.stderr


def test_a_client_disconnecting_from_a_stream_leaves_the_worker_loaded(daemon: Hasrd, short_tmp: str) -> None:
    import socket as so
    wav = write_wav(os.path.join(short_tmp, "long.wav"), 10.0)
    with daemon.client() as c:
        pid = c.post("/api/load").json()["pid"]
    body = json.dumps({"audio_path": wav, "options": {"fake": {"rtf": 1.0}}}).encode()
    s = so.socket(so.AF_UNIX, so.SOCK_STREAM)
    s.connect(daemon.sock)
    s.sendall(b"POST /transcribe HTTP/1.1\r\nHost: hasr\r\nAccept: application/x-ndjson\r\n"
              b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    s.recv(4096)  # the stream has started
    time.sleep(0.5)
    s.close()
    deadline = time.monotonic() + 10
    while daemon.get("/api/ps")["running"] and time.monotonic() < deadline:
        time.sleep(0.05)
    ps = daemon.get("/api/ps")
    assert ps["state"] == "ready" and ps["pid"] == pid and ps["running"] == 0
    assert "died" not in daemon.log()


def test_a_chunked_upload_over_the_limit_is_stopped_at_the_limit(daemon: Hasrd) -> None:
    sent = 0

    def chunks():  # type: ignore[no-untyped-def]
        nonlocal sent
        yield b"--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"x.wav\"\r\n\r\n"
        for _ in range(200):  # 200 x 64 KiB = 12.5 MB against a 1 MB limit
            sent += 65536
            yield b"\0" * 65536
        yield b"\r\n--b--\r\n"

    import httpx
    with daemon.client() as c:
        try:
            r = c.post("/v1/audio/transcriptions", content=chunks(),
                       headers={"Content-Type": "multipart/form-data; boundary=b"})
        except httpx.TransportError:  # the daemon answered 413 and closed before we finished sending
            assert sent < 200 * 65536, "the daemon read the whole oversized upload"
        else:
            assert r.status_code == 413 and r.json()["error"]["code"] == "too_large"
    assert daemon.get("/health")["status"] == "idle"

"""The daemon starts as fast as a bare Starlette app (issue 32 #10) because a route's modules are imported when
the route first runs: pinned here by what a running daemon holds in sys.modules, not by timing
(benchmarks/daemon_start.py times it)."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator

import pytest

from tests.daemon import Hasrd, write_wav

# On SIGUSR1 the daemon writes its sys.modules to $MODULES_OUT (the event loop wakes for it within its tick).
DUMP = """
import json, os, signal, sys

def _dump(*_):
    out = os.environ["MODULES_OUT"]
    with open(out + ".tmp", "w") as f:
        json.dump(sorted(sys.modules), f)
    os.rename(out + ".tmp", out)

signal.signal(signal.SIGUSR1, _dump)
"""

# Never in the daemon before a request needs them: PyAV (~55 modules, a tenth of a second), numpy (the decode
# path does without it), model downloads, and the GPU stack (invariant 1: never at all).
HEAVY = ("av", "numpy", "huggingface_hub", "requests", "faster_whisper", "ctranslate2", "torch", "vllm", "r2t2",
         "opencc", "onnxruntime", "tokenizers")
GPU = ("faster_whisper", "ctranslate2", "torch", "vllm", "r2t2", "onnxruntime", "tokenizers")
# hasr's own modules that only a transcription, the OpenAI or Realtime routes or a pull import.
LAZY = ("hasrd.audio", "hasrd.resample", "hasrd.jobs", "hasrd.formats", "hasrd.subtitles", "hasrd.openai_api",
        "hasrd.realtime", "hasrd.realtime_events", "hasrd.languages", "hasrd.pull", "hasrd.download", "hasrd.worker")


@pytest.fixture
def daemon(short_tmp: str) -> Iterator[Hasrd]:
    d = Hasrd(os.path.join(short_tmp, "s.sock"), env={"MODULES_OUT": os.path.join(short_tmp, "modules.json")},
              prelude=DUMP)
    yield d
    assert d.stop() == 0, d.log()


def modules(d: Hasrd) -> set[str]:
    out = os.path.join(os.path.dirname(d.sock), "modules.json")
    if os.path.exists(out):
        os.unlink(out)
    d.proc.send_signal(signal.SIGUSR1)
    end = time.monotonic() + 30
    while not os.path.exists(out):
        assert time.monotonic() < end and d.proc.poll() is None, d.log()
        time.sleep(0.02)
    with open(out) as f:
        return set(json.load(f))


def loaded(mods: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in mods if any(m == n or m.startswith(n + ".") for n in names))


def test_a_started_daemon_has_imported_no_route_module_and_nothing_heavy(daemon: Hasrd, short_tmp: str) -> None:
    for path in ("/health", "/api/ps", "/api/version"):  # what the tray and `hasrctl status` ask
        with daemon.client() as c:
            assert c.get(path).status_code == 200
    mods = modules(daemon)
    assert {"hasrd.app", "hasrd.api", "hasrd.scheduler"} <= mods  # the dump sees the daemon itself
    assert loaded(mods, HEAVY) == [] and loaded(mods, LAZY) == []

    # A transcription imports its modules when it first runs; the GPU stack and numpy never come.
    wav = write_wav(os.path.join(short_tmp, "a.wav"), 1.0)
    with daemon.client() as c:
        r = c.post("/transcribe", json={"audio_path": wav})
    assert r.status_code == 200, r.text
    mods = modules(daemon)
    assert {"av", "hasrd.audio", "hasrd.jobs", "hasrd.formats"} <= mods
    assert loaded(mods, ("numpy", "huggingface_hub", *GPU)) == []


@pytest.mark.parametrize("method,path,body,module", [
    ("GET", "/v1/models", None, "hasrd.openai_api"),
    ("GET", "/v1/models/whisper-1", None, "hasrd.openai_api"),
    ("POST", "/v1/audio/transcriptions", None, "hasrd.openai_api"),  # no form: 400, as before
    ("POST", "/api/pull", {}, "hasrd.pull"),  # no model named: 400
    ("DELETE", "/api/delete", {"model": "no-such-model"}, "hasrd.pull"),
])
def test_a_lazy_route_answers_its_first_call_as_it_always_did(daemon: Hasrd, method: str, path: str,
                                                              body: object, module: str) -> None:
    assert module not in modules(daemon)
    with daemon.client() as c:
        first = c.request(method, path, json=body)
        again = c.request(method, path, json=body)
    assert first.status_code == again.status_code and first.json() == again.json(), first.text
    assert module in modules(daemon)

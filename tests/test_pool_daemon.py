"""The worker pool through a real daemon: parallel requests on two workers, models by name (real faster-whisper
on the embedded base and on a copy of it installed under another name), unknown models refused before any
work, `/api/ps` and `hasrctl ps` / `models` naming every worker and model."""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from cliutil import hasrctl
from conftest import wait_until
from daemon import Hasrd, write_wav
from live_client import LiveClient
from speech import DATA, cache_home, model_dir


def env_of(h: Hasrd, **extra: str) -> dict[str, str]:
    return {**os.environ, "HASR_SOCKET": h.sock, **extra}


def test_two_requests_run_at_once_on_two_workers_and_ps_names_both(short_tmp: str) -> None:
    h = Hasrd(os.path.join(short_tmp, "s"), env={"HASR_MAX_WORKERS": "2", "HASR_FAKE_RTF": "1.5"})
    try:
        wav = write_wav(os.path.join(short_tmp, "a.wav"), 2.0)
        codes: list[int] = []

        def job() -> None:
            with h.client(120) as c:
                codes.append(c.post("/transcribe", json={"audio_path": wav}).status_code)

        threads = [threading.Thread(target=job) for _ in range(2)]
        for t in threads:
            t.start()
        assert wait_until(lambda: h.get("/api/ps")["running"] == 2, timeout=60)  # both at the same moment
        ps = h.get("/api/ps")
        workers = ps["workers"]
        assert len(workers) == 2 and len({w["pid"] for w in workers}) == 2
        for w in workers:
            assert {"pid", "model", "engine", "device", "gpu_uuid", "state", "busy", "job", "rss_mb",
                    "expires_in_s"} <= set(w), w
            assert w["busy"] and w["device"] == "cpu" and w["rss_mb"] > 0 and w["job"]["name"] == "a.wav"
        assert ps["status_text"].startswith("2 workers: ")
        out = hasrctl("ps", env=env_of(h))
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        assert lines[0].split() == ["NAME", "PID", "PROCESSOR", "SIZE", "STATE", "UNTIL"]
        assert sum(1 for ln in lines[1:] if str(workers[0]["pid"]) in ln or str(workers[1]["pid"]) in ln) == 2
        assert all("busy" in ln and "CPU" in ln for ln in lines[1:3])
        for t in threads:
            t.join(120)
        assert codes == [200, 200]
        status = hasrctl("status", env=env_of(h))
        assert status.returncode == 0
    finally:
        h.stop()


def test_an_unknown_model_is_404_on_every_route_before_any_worker_starts(short_tmp: str) -> None:
    h = Hasrd(os.path.join(short_tmp, "s"), env={"HASR_MAX_WORKERS": "2"})
    try:
        wav = write_wav(os.path.join(short_tmp, "a.wav"), 1.0)
        with h.client() as c:
            r = c.post("/transcribe", json={"audio_path": wav, "options": {"model": "no-such-model"}})
            assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found", r.text
            assert "base" in r.json()["error"]["message"]  # what is installed
            r = c.post("/v1/audio/transcriptions", data={"model": "large-v9", "path": wav})
            assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
            assert c.get("/v1/models/large-v9").status_code == 404
            r = c.post("/api/load", json={"model": "/nonexistent/dir"})
            assert r.status_code == 404
        lc = LiveClient(h.sock)
        lc.update(language="zh")
        lc.send({"type": "transcription_session.update", "session": {"input_audio_transcription": {
            "model": "no-such-model"}}})
        assert lc.wait_for("error")["error"]["code"] == "model_not_found"
        lc.close()
        ps = h.get("/api/ps")
        assert ps["workers"] == [] and ps["state"] == "stopped"
        assert "stopped -> starting" not in h.log()  # no worker was ever started
        out = hasrctl("ps", env=env_of(h))
        assert out.returncode == 0 and "no workers" in out.stdout
    finally:
        h.stop()


@pytest.fixture
def two_models(tmp_path: Path) -> Path:
    """$XDG_DATA_HOME with a copy of the embedded base installed as the model ``mybase``."""
    data = tmp_path / "data"
    shutil.copytree(model_dir(), data / "hasr" / "models" / "mybase")
    return data


def whisper(sock: str, data: Path, workers: int) -> Hasrd:
    return Hasrd(sock, env={"HASR_ENGINE": "whisper", "HASR_FW_MODEL": model_dir(), "HASR_FW_DEVICE": "cpu",
                            "XDG_DATA_HOME": str(data), "XDG_CACHE_HOME": cache_home(),
                            "HASR_MAX_WORKERS": str(workers)})


def transcribe(h: Hasrd, wav: str, model: str = "") -> dict[str, Any]:
    with h.client(300) as c:
        r = c.post("/transcribe", json={"audio_path": wav, "language": "en",
                                        "options": {"model": model} if model else {}})
    assert r.status_code == 200, r.text
    result: dict[str, Any] = r.json()
    return result


def test_a_request_naming_another_model_loads_it_beside_the_first_with_the_same_words(
        short_tmp: str, two_models: Path) -> None:
    h = whisper(os.path.join(short_tmp, "s"), two_models, 2)
    try:
        wav = str(DATA / "en_quick_brown_fox.flac")
        default = transcribe(h, wav)
        mine = transcribe(h, wav, "mybase")
        assert default["final"] == mine["final"] and "fox" in mine["final"]
        workers = h.get("/api/ps")["workers"]
        assert sorted(w["model"] for w in workers)[1] == "mybase" and len(workers) == 2
        assert default["worker"]["pid"] != mine["worker"]["pid"]
        models = hasrctl("models", env=env_of(h))
        assert models.returncode == 0 and "mybase" in models.stdout and "directory" in models.stdout
        listed = {m["id"]: m for m in h.get("/v1/models")["data"]}
        assert listed["mybase"]["path"].endswith("/hasr/models/mybase") and listed["mybase"]["size_mb"] > 100
        assert {"hasr", "whisper-1", "base"} <= set(listed)
    finally:
        h.stop()


def test_with_one_worker_allowed_another_model_takes_the_idle_workers_place(short_tmp: str, two_models: Path) -> None:
    h = whisper(os.path.join(short_tmp, "s"), two_models, 1)
    try:
        wav = str(DATA / "en_hello_world.flac")
        first = transcribe(h, wav)
        second = transcribe(h, wav, "mybase")
        assert second["final"] == first["final"]
        workers = h.get("/api/ps")["workers"]
        assert [w["model"] for w in workers] == ["mybase"] and workers[0]["pid"] == second["worker"]["pid"]
        assert h.log().count(" (1 of 1)") == 2, h.log()  # the evicted worker is not counted: no "(2 of 1)"
        assert not os.path.exists(f"/proc/{first['worker']['pid']}/status") or wait_until(
            lambda: not os.path.exists(f"/proc/{first['worker']['pid']}/status"), timeout=10)
        with h.client() as c:  # unloading one model's workers leaves none here
            r = c.post("/api/unload", json={"model": "mybase"})
        assert r.status_code == 200 and r.json()["workers"] == []
    finally:
        h.stop()


def test_an_idle_daemon_with_two_workers_still_exits_and_loses_nothing(short_tmp: str) -> None:
    """The idle exit waits for every worker's TTL; requests arriving meanwhile are all served."""
    h = Hasrd(os.path.join(short_tmp, "s"), env={"HASR_MAX_WORKERS": "2", "HASR_IDLE_TTL_SEC": "0.5"},
              args=["--idle-exit", "1.5"])
    wav = write_wav(os.path.join(short_tmp, "a.wav"), 0.5)
    try:
        codes: list[int] = []

        def job() -> None:
            try:
                with h.client(60) as c:
                    codes.append(c.post("/transcribe", json={"audio_path": wav,
                                                             "options": {"fake": {"rtf": 1.0}}}).status_code)
            except httpx.TransportError:
                codes.append(-1)

        threads = [threading.Thread(target=job) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert codes == [200] * 4
        deadline = time.monotonic() + 60
        while h.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert h.proc.returncode == 0, h.log()
        assert "idle for 1.5 s" in h.log()
    finally:
        h.stop()

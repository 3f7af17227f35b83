"""Bad input gets a clear 4xx with its own code, the daemon stays healthy, and no worker is started.

Also the 5xx paths: a load that fails (503 + Retry-After), a full queue (503), a crashing worker (500) and a
hung one (504) — each followed by a request that works.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
import wave
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import need
from tests.daemon import Hasrd, client, write_wav
from tests.test_audio import write_media


@pytest.fixture(scope="module")
def tmpdir_m() -> Iterator[str]:
    import shutil
    import tempfile
    d = tempfile.mkdtemp(prefix="h", dir="/tmp")
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def daemon(tmpdir_m: str) -> Iterator[Hasrd]:
    d = Hasrd(os.path.join(tmpdir_m, "s.sock"), env={"HASR_MAX_UPLOAD_MB": "0.5"})
    yield d
    assert d.stop() == 0


def make_bad(kind: str, d: str) -> str:
    p = os.path.join(d, kind)
    if kind == "dir":
        os.makedirs(p, exist_ok=True)
    elif kind == "loop":
        if not os.path.islink(p):
            os.symlink(p + "2", p)
            os.symlink(p, p + "2")
    elif kind == "empty.wav":
        open(p, "wb").close()
    elif kind == "noframes.wav":
        with wave.open(p, "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(16000)
    elif kind == "random.wav":
        with open(p, "wb") as f:
            f.write(random.Random(1).randbytes(50_000))
    elif kind == "notes.mp3":
        with open(p, "w") as f:
            f.write("this is a text file, not an mp3\n" * 200)
    elif kind == "header_only.mp3":
        full = write_media(Path(d) / "full.mp3", "libmp3lame", fmt="mp3", rate=16000, seconds=2.0)
        with open(full, "rb") as f, open(p, "wb") as g:
            g.write(f.read()[:40])
    elif kind == "video.mp4":
        write_media(Path(p), fmt="mp4", video="mpeg4", audio_stream=False)
    return p


BAD_PATHS = [
    ("relative/a.wav", "path_not_absolute"),
    ("/nonexistent/hasr/a.wav", "file_not_found"),
    ("dir", "not_a_file"),
    ("loop", "symlink_loop"),
    ("empty.wav", "empty_file"),
    ("noframes.wav", "no_audio_frames"),
    ("random.wav", "undecodable"),
    ("notes.mp3", "undecodable"),
    ("header_only.mp3", "undecodable"),
    ("video.mp4", "no_audio_stream"),
]


def assert_untouched(daemon: Hasrd) -> None:
    assert daemon.get("/health")["status"] == "idle"
    assert daemon.get("/api/ps")["state"] == "stopped", "bad input must not start a worker"


@pytest.mark.parametrize("name,code", BAD_PATHS)
def test_bad_paths_get_a_400_with_their_own_code_and_wake_no_worker(daemon: Hasrd, tmpdir_m: str, name: str,
                                                                    code: str) -> None:
    path = name if name.startswith(("relative", "/")) else make_bad(name, tmpdir_m)
    with daemon.client() as c:
        r = c.post("/transcribe", json={"audio_path": path})
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["code"] == code and err["message"]
        r2 = c.post("/v1/audio/transcriptions", data={"path": path})
        assert r2.status_code == 400 and r2.json()["error"]["code"] == code
    assert_untouched(daemon)


@pytest.mark.parametrize("body,code", [
    (b"{not json", "bad_request"),
    (b"[1, 2]", "bad_request"),
    (b"{}", "path_required"),
    (b'{"audio_path": 5}', "path_required"),
    (b'{"audio_path": "/a.wav", "options": 3}', "bad_request"),
])
def test_malformed_requests_get_a_400(daemon: Hasrd, body: bytes, code: str) -> None:
    with daemon.client() as c:
        r = c.post("/transcribe", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["code"] == code
    assert_untouched(daemon)


@pytest.mark.parametrize("options,param", [
    ({"task": "bogus"}, "options.task"),
    ({"temperature": "abc"}, "options.temperature"),
    ({"temperature": float("nan")}, "options.temperature"),  # JSON's NaN, which Python's json accepts
    ({"temperature": 1.5}, "options.temperature"),
    ({"word_timestamps": "yes"}, "options.word_timestamps"),
    ({"max_line_width": 1e400}, "max_line_width"),  # an infinite number: was a 500
    ({"wordtimestamps": True}, "options.wordtimestamps"),  # a misspelt option is not silently ignored
])
def test_a_bad_option_is_400_invalid_option_naming_it_and_wakes_no_worker(daemon: Hasrd, tmpdir_m: str,
                                                                           options: dict[str, object],
                                                                           param: str) -> None:
    wav = write_wav(os.path.join(tmpdir_m, "opt.wav"), 0.5)
    with daemon.client() as c:
        r = c.post("/transcribe", content=json.dumps({"audio_path": wav, "options": options}),
                   headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == "invalid_option" and err["param"] == param and param.split(".")[-1] in err["message"]
    assert_untouched(daemon)


@pytest.mark.parametrize("keep", [float("inf"), float("-inf"), float("nan"), 1e400, "inf", "nan", 1e30])
def test_a_keep_alive_that_is_not_a_finite_number_of_seconds_is_400_and_loads_nothing(daemon: Hasrd,
                                                                                       keep: object) -> None:
    body = json.dumps({"keep_alive": keep})  # Infinity, NaN: what Python's json writes and reads
    with daemon.client() as c:
        r = c.post("/api/load", content=body, headers={"Content-Type": "application/json"})
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["code"] == "bad_request" and err["param"] == "keep_alive" and "for ever" in err["message"]
        assert "Infinity" not in c.get("/api/ps").text
    assert_untouched(daemon)


LONG = "m" * 300  # a path component over NAME_MAX (255 bytes): the file system refuses it


@pytest.mark.parametrize("name", [LONG, "/tmp/" + LONG, "org/" + LONG, "/tmp/a\0b"])  # a NUL byte too
def test_a_model_name_the_file_system_refuses_is_404_on_every_route_without_a_traceback(
        daemon: Hasrd, tmpdir_m: str, name: str) -> None:
    wav = write_wav(os.path.join(tmpdir_m, "long.wav"), 0.5)
    with daemon.client() as c:
        answers = [
            c.post("/transcribe", json={"audio_path": wav, "options": {"model": name}}),
            c.post("/v1/audio/transcriptions", data={"path": wav, "model": name}),
            c.get(f"/v1/models/{name}".replace("\0", "%00")),
            c.post("/api/load", json={"model": name}),
            c.post("/api/unload", json={"model": name}),
        ]
    for r in answers:
        assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found", (r.request.url, r.text)
    assert_untouched(daemon)
    assert "Traceback" not in daemon.log()


def test_an_upload_over_the_size_limit_is_413(daemon: Hasrd) -> None:
    with daemon.client() as c:
        r = c.post("/v1/audio/transcriptions", files={"file": ("big.wav", b"\0" * 800_000, "audio/wav")})
    assert r.status_code == 413 and r.json()["error"]["code"] == "too_large"
    assert "HASR_MAX_UPLOAD_MB" in r.json()["error"]["message"]
    assert_untouched(daemon)


def test_an_unknown_response_format_is_400(daemon: Hasrd, tmpdir_m: str) -> None:
    wav = write_wav(os.path.join(tmpdir_m, "ok.wav"), 0.5)
    with daemon.client() as c:
        r = c.post("/v1/audio/transcriptions", data={"path": wav, "response_format": "docx"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "unknown_format"
    assert "srt" in r.json()["error"]["message"]
    assert_untouched(daemon)


def test_an_upload_of_random_bytes_is_undecodable(daemon: Hasrd) -> None:
    with daemon.client() as c:
        r = c.post("/v1/audio/transcriptions",
                   files={"file": ("x.mp3", random.Random(2).randbytes(20_000), "audio/mpeg")})
    # Random bytes may probe as some container (then it holds no audio stream) or as nothing at all.
    assert r.status_code == 400 and r.json()["error"]["code"] in ("undecodable", "no_audio_stream")
    assert_untouched(daemon)


def as_nobody() -> None:
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)


def test_a_caller_with_another_uid_is_refused_with_403(tmpdir_m: str) -> None:
    need(os.getuid() == 0, "needs root to act as another user")
    d = Hasrd(os.path.join(tmpdir_m, "o.sock"))
    try:
        os.chmod(d.sock, 0o777)  # let nobody reach the socket at all: the uid check must still refuse
        out = subprocess.run(["curl", "-s", "--unix-socket", d.sock, "http://hasr/transcribe", "-d", "{}"],
                             capture_output=True, text=True, timeout=30, preexec_fn=as_nobody)
        assert '"code":"forbidden"' in out.stdout and "uid 65534" in out.stdout, out
        assert d.get("/api/ps")["state"] == "stopped"
    finally:
        d.stop()


def test_an_unreadable_file_is_permission_denied_for_a_daemon_running_as_nobody(tmpdir_m: str) -> None:
    need(os.getuid() == 0, "needs root to start the daemon as another user")
    import av  # noqa: F401  (imported before the fork: the child cannot read /root's site-packages)

    import concurrent.futures.thread  # noqa: F401  (asyncio.to_thread's pool, imported on first use)
    import uvicorn.lifespan.off  # noqa: F401  (uvicorn imports these lazily)
    import uvicorn.lifespan.on  # noqa: F401

    import hasrd.api
    import hasrd.app
    import hasrd.audio
    import hasrd.jobs  # noqa: F401  (the routes' modules load when a route first runs: here, before the fork)
    import hasrd.server

    wav = write_wav(os.path.join(tmpdir_m, "secret.wav"), 0.5)
    os.chmod(wav, 0o600)
    sockdir = os.path.join(tmpdir_m, "nb")
    os.makedirs(sockdir, exist_ok=True)
    os.chown(sockdir, 65534, 65534)
    sock = os.path.join(sockdir, "s.sock")
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the daemon, as nobody
        try:
            as_nobody()
            os.environ.update({"HASR_ENGINE": "fake", "HOME": "/", "XDG_CONFIG_HOME": sockdir})
            hasrd.server.main(["--socket", sock])
        finally:
            os._exit(0)
    try:
        for _ in range(200):
            if os.path.exists(sock):
                break
            time.sleep(0.05)
        with client(sock) as c:
            r = c.post("/transcribe", json={"audio_path": wav})
            assert r.status_code == 400 and r.json()["error"]["code"] == "permission_denied", r.text
            assert c.get("/api/ps").json()["state"] == "stopped"
    finally:
        os.kill(pid, 15)
        os.waitpid(pid, 0)


# ---- 5xx paths ------------------------------------------------------------------------------------------------


def transcribe(sock: str, wav: str, options: dict[str, object] | None = None) -> httpx.Response:
    with client(sock) as c:
        return c.post("/transcribe", json={"audio_path": wav, "options": options or {}})


def test_a_failing_load_is_503_with_retry_after_and_then_fatal(short_tmp: str) -> None:
    d = Hasrd(os.path.join(short_tmp, "s.sock"), env={"HASR_FAKE_FAIL_LOAD": "model_unavailable:no weights at /w",
                                                      "HASR_MAX_LOAD_FAILURES": "2"})
    try:
        wav = write_wav(os.path.join(short_tmp, "a.wav"), 0.5)
        r = transcribe(d.sock, wav)
        assert r.status_code == 503 and "no weights at /w" in r.json()["error"]["message"]
        assert int(r.headers["Retry-After"]) >= 1
        r = transcribe(d.sock, wav)
        assert r.status_code == 503
        h = d.get("/health")
        assert h["status"] == "error" and "no weights" in h["error"]
        r = transcribe(d.sock, wav)
        assert r.status_code == 503 and r.json()["error"]["code"] == "fatal"
        assert d.get("/api/ps")["state"] == "fatal"
    finally:
        d.stop()


def test_a_daemon_whose_load_failed_once_still_exits_when_idle(short_tmp: str) -> None:
    d = Hasrd(os.path.join(short_tmp, "b.sock"), env={"HASR_FAKE_FAIL_LOAD": "model_unavailable:nope"},
              args=["--idle-exit", "0.5"])
    wav = write_wav(os.path.join(short_tmp, "a.wav"), 0.5)
    assert transcribe(d.sock, wav).status_code == 503
    h = d.get("/health")
    assert h["status"] == "idle" and h["error"] == "nope" and h["loading"] is False
    assert d.proc.wait(10) == 0


def test_crash_timeout_and_queue_full_each_get_their_status_and_the_next_request_works(short_tmp: str) -> None:
    d = Hasrd(os.path.join(short_tmp, "s.sock"), env={"HASR_WORKER_PARALLEL": "1",  # one job a worker: the queue
                                                      "HASR_STALL_SEC": "0.5", "HASR_MAX_QUEUE": "1"})
    try:
        wav = write_wav(os.path.join(short_tmp, "a.wav"), 0.5)
        r = transcribe(d.sock, wav, {"fake": {"crash": True}})
        assert r.status_code == 500 and r.json()["error"]["code"] == "worker_crashed"
        assert transcribe(d.sock, wav).status_code == 200
        r = transcribe(d.sock, wav, {"fake": {"hang": True}})
        assert r.status_code == 504 and r.json()["error"]["code"] == "stalled"
        assert "HASR_STALL_SEC" in r.json()["error"]["message"]
        assert transcribe(d.sock, wav).status_code == 200
        results: list[int] = []

        def slow() -> None:
            results.append(transcribe(d.sock, wav, {"fake": {"rtf": 0.8}}).status_code)

        threads = [threading.Thread(target=slow) for _ in range(2)]
        for t in threads:
            t.start()
            time.sleep(0.15)
        r = transcribe(d.sock, wav)
        assert r.status_code == 503 and r.json()["error"]["code"] == "queue_full" and "Retry-After" in r.headers
        for t in threads:
            t.join()
        assert results == [200, 200]
        assert d.get("/health")["status"] == "ok"
    finally:
        d.stop()


def test_an_unknown_language_is_refused_before_decoding_or_loading(daemon: Hasrd, tmpdir_m: str) -> None:
    wav = write_wav(os.path.join(tmpdir_m, "lang.wav"), 0.5)
    with daemon.client() as c:
        r = c.post("/transcribe", json={"audio_path": wav, "language": "Klingon"})
        assert r.status_code == 400 and r.json()["error"]["code"] == "unknown_language"
        r = c.post("/v1/audio/transcriptions", data={"path": wav, "language": "tlh-Latn"})
        assert r.status_code == 400 and r.json()["error"]["code"] == "unknown_language"
        assert c.post("/transcribe", json={"audio_path": wav, "language": "zh-CN"}).status_code == 200
        c.post("/api/unload")
    assert_untouched(daemon)


def test_a_file_name_that_is_not_utf8_still_gets_its_result(daemon: Hasrd, tmpdir_m: str) -> None:
    import json

    raw = os.path.join(os.fsencode(tmpdir_m), b"bad\xffname.wav")
    write_wav(os.fsdecode(raw), 0.5)
    body = json.dumps({"audio_path": os.fsdecode(raw)})  # Python clients escape the byte as \udcff
    with daemon.client() as c:
        with c.stream("POST", "/transcribe", content=body, headers={"Accept": "application/x-ndjson",
                                                                   "Content-Type": "application/json"}) as r:
            events = [json.loads(line) for line in r.iter_lines() if line]
        assert events[-1]["event"] == "done", events[-1]
        assert events[-1]["result"]["audio_path"].endswith("bad\\xffname.wav")
        r = c.post("/transcribe", content=body, headers={"Content-Type": "application/json"})
        assert r.status_code == 200 and r.json()["final"]
        c.post("/api/unload")


def test_a_socket_directory_owned_by_another_user_is_refused(tmpdir_m: str) -> None:
    need(os.getuid() == 0, "needs root to create a directory owned by another user")
    planted = os.path.join(tmpdir_m, "planted")
    os.makedirs(planted, exist_ok=True)
    os.chown(planted, 65534, 65534)
    r = subprocess.run([sys.executable, "-m", "hasrd.server", "--socket", os.path.join(planted, "s.sock")],
                       env={**os.environ, "HASR_ENGINE": "fake"}, capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "belongs to uid 65534" in r.stderr


def test_the_default_socket_place_must_be_private_and_ours(tmpdir_m: str) -> None:
    need(os.getuid() == 0, "needs root to create a directory owned by another user")
    planted = os.path.join(tmpdir_m, "rt-planted")
    os.makedirs(planted, exist_ok=True)
    os.chown(planted, 65534, 65534)
    env = {**os.environ, "HASR_ENGINE": "fake", "XDG_RUNTIME_DIR": planted}
    env.pop("HASR_SOCKET", None)
    r = subprocess.run([sys.executable, "-m", "hasrd.server"], env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "belongs to uid 65534" in r.stderr
    ours = os.path.join(tmpdir_m, "rt-open")
    os.makedirs(os.path.join(ours, "hasr"), exist_ok=True)
    os.chmod(ours, 0o755)
    os.chmod(os.path.join(ours, "hasr"), 0o755)
    d = Hasrd(os.path.join(ours, "hasr", "hasrd.sock"), env={"XDG_RUNTIME_DIR": ours})
    try:  # our own directory, too open: made private, with a warning; the runtime dir itself is left alone
        assert os.stat(os.path.join(ours, "hasr")).st_mode & 0o777 == 0o700
        assert os.stat(ours).st_mode & 0o777 == 0o755
        assert "made it private" in d.log()
    finally:
        d.stop()


def test_an_error_naming_a_file_that_is_not_utf8_is_still_a_clean_400(daemon: Hasrd) -> None:
    import json

    body = json.dumps({"audio_path": os.fsdecode(b"/nonexistent/hasr/x\xff.wav")})  # sent as \udcff
    with daemon.client() as c:
        r = c.post("/transcribe", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "file_not_found"

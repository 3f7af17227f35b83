"""hasrctl against a real hasrd (fake engine) on a temporary socket: formats, outputs, stdin, bad input."""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import srt
import webvtt

from hasrd.formats import lines, render
from hasrd.transcript import from_json
from tests.cliutil import REPO, cli_env, hasrctl, one_line, show
from tests.daemon import Hasrd, write_wav

FINAL = "今天天气很好。我们去公园散步"  # the fake engine's default script, truncated sentence cut at "|"
TEXT = "今天天气很好。\n我们去公园散步\n"  # what the CLI's text format writes: one sentence a line


@pytest.fixture(scope="module")
def base(module_tmp: str) -> str:
    return module_tmp


@pytest.fixture(scope="module")
def daemon(base: str) -> Iterator[Hasrd]:
    d = Hasrd(os.path.join(base, "s.sock"))
    yield d
    assert d.stop() == 0, d.log()


@pytest.fixture(scope="module")
def env(base: str, daemon: Hasrd) -> dict[str, str]:
    return cli_env(base, HASR_SOCKET=daemon.sock)


@pytest.fixture(scope="module")
def wav(base: str) -> str:
    return write_wav(os.path.join(base, "a.wav"), 3.0)


@pytest.fixture
def work(base: str) -> Iterator[str]:
    d = tempfile.mkdtemp(dir=base)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_the_transcript_alone_goes_to_stdout(env: dict[str, str], wav: str) -> None:
    res = hasrctl("transcribe", wav, env=env)
    assert res.returncode == 0, show(res)
    assert res.stdout == TEXT
    assert one_line(res.stderr).startswith(f"hasrctl: {wav}: ok, 3.0 s of audio in ")  # the summary, on stderr


def test_a_single_file_with_a_language_given_prints_its_summary_line_and_quiet_none(env: dict[str, str],
                                                                                     wav: str) -> None:
    """Issue 32 #8: with -l the summary line was missing (it came only with a detected language)."""
    res = hasrctl("transcribe", "-l", "zh", wav, env=env)
    assert res.returncode == 0 and res.stdout == TEXT, show(res)
    line = one_line(res.stderr)
    assert line.startswith(f"hasrctl: {wav}: ok, 3.0 s of audio in ") and "real time" in line, line
    quiet = hasrctl("transcribe", "-q", "-l", "zh", wav, env=env)
    assert quiet.returncode == 0 and quiet.stdout == TEXT and quiet.stderr == "", show(quiet)


class _CountingRelay:
    """A Unix socket that relays every connection to the daemon's and counts the transcriptions asked."""

    def __init__(self, path: str, target: str) -> None:
        import socket
        import threading

        self.path, self.target, self.transcriptions = path, target, 0
        self.server = socket.socket(socket.AF_UNIX)
        self.server.bind(path)
        self.server.listen(16)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket
        import threading

        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX)
            upstream.connect(self.target)
            threading.Thread(target=self._pipe, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, False), daemon=True).start()

    def _pipe(self, src: Any, dst: Any, request: bool) -> None:
        first = True
        try:
            while data := src.recv(65536):
                if request and first and data.startswith((b"POST /transcribe", b"POST /v1/audio/")):
                    self.transcriptions += 1
                first = False
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.server.close()


def test_several_formats_are_rendered_from_one_transcription(env: dict[str, str], wav: str, work: str) -> None:
    """Issue 32 #3: -f txt,srt -f vtt (repeated -f accumulate) and -f all: one request to the daemon, a file per
    format, each what the shared renderer makes of that one result."""
    relay = _CountingRelay(os.path.join(work, "r.sock"), env["HASR_SOCKET"])
    try:
        out = os.path.join(work, "out")
        res = hasrctl("transcribe", "-f", "txt,srt", "-f", "vtt", "-o", out, wav,
                      env={**env, "HASR_SOCKET": relay.path})
        assert res.returncode == 0 and res.stdout == "", show(res)
        assert relay.transcriptions == 1
        assert sorted(os.listdir(out)) == ["a.srt", "a.txt", "a.vtt"]
        assert f"-> {out}/a.txt, {out}/a.srt, {out}/a.vtt" in one_line(res.stderr)
        local = shutil.copy(wav, os.path.join(work, "b.wav"))
        res = hasrctl("transcribe", "-f", "all", "--beside", local, env={**env, "HASR_SOCKET": relay.path})
        assert res.returncode == 0, show(res)
        assert relay.transcriptions == 2
    finally:
        relay.close()
    result = from_json(json.loads(Path(work, "b.json").read_text())["hasr"])  # -f all's json: verbose_json
    assert Path(work, "b.txt").read_text() == lines(result) == Path(out, "a.txt").read_text()
    assert Path(work, "b.srt").read_text() == render(result, "srt") == Path(out, "a.srt").read_text()
    assert Path(work, "b.vtt").read_text() == render(result, "vtt") == Path(out, "a.vtt").read_text()


def test_several_formats_need_files_not_stdout_nor_one_file(env: dict[str, str], wav: str, work: str) -> None:
    """Several formats cannot share stdout or one -o FILE: exit 2 before any transcription, saying what works."""
    for args in (["-f", "txt,srt"], ["-f", "srt", "-f", "vtt", "-o", "-"], ["-f", "all", "-o", f"{work}/t.srt"],
                 ["-f", "json,verbose_json", "-o", f"{work}/d/"]):
        res = hasrctl("transcribe", *args, wav, env=env)
        assert res.returncode == 2 and res.stdout == "", show(res)
        line = one_line(res.stderr)
        assert ("-o DIR" in line and "--beside" in line) or "need a directory" in line or "NAME.json" in line, line
    assert sorted(os.listdir(work)) == []  # nothing written
    res = hasrctl("transcribe", "-f", "txt,srt", "-o", f"{work}/subs", wav, env=env)  # no suffix: a directory
    assert res.returncode == 0 and sorted(os.listdir(f"{work}/subs")) == ["a.srt", "a.txt"], show(res)
    again = hasrctl("transcribe", "-f", "vtt,srt", "-o", f"{work}/subs", wav, env=env)  # a.srt exists: nothing
    assert again.returncode == 2 and "--force" in one_line(again.stderr)
    assert sorted(os.listdir(f"{work}/subs")) == ["a.srt", "a.txt"]


def test_json_and_verbose_json_carry_the_text_and_segments(env: dict[str, str], wav: str) -> None:
    assert json.loads(hasrctl("transcribe", "-f", "json", wav, env=env).stdout) == {
        "text": FINAL, "usage": {"type": "duration", "seconds": 3}}
    doc = json.loads(hasrctl("transcribe", "-f", "verbose_json", "-l", "Chinese", wav, env=env).stdout)
    assert doc["task"] == "transcribe" and doc["text"] == FINAL and doc["language"] == "chinese"
    assert doc["duration"] == pytest.approx(3.0)
    assert "".join(s["text"] for s in doc["segments"]) == FINAL
    assert doc["hasr"]["audio_path"] == wav and doc["hasr"]["engine"] == "fake"


def test_srt_output_parses_and_covers_the_audio(env: dict[str, str], wav: str) -> None:
    res = hasrctl("transcribe", "--format", "SRT", wav, env=env)
    assert res.returncode == 0, show(res)
    subs = list(srt.parse(res.stdout))
    assert "".join(s.content for s in subs) == FINAL
    assert subs[0].start == timedelta(0) and subs[-1].end == timedelta(seconds=3)
    assert all(a.end <= b.start for a, b in zip(subs, subs[1:], strict=False))


def test_vtt_output_parses_and_matches_the_srt_times(env: dict[str, str], wav: str) -> None:
    res = hasrctl("transcribe", "-f", "vtt", wav, env=env)
    assert res.stdout.startswith("WEBVTT\n")
    cues = webvtt.from_buffer(io.StringIO(res.stdout)).captions
    subs = list(srt.parse(hasrctl("transcribe", "-f", "srt", wav, env=env).stdout))
    assert [c.text for c in cues] == [s.content for s in subs]
    assert [c.start_in_seconds for c in cues] == [int(s.start.total_seconds()) for s in subs]


def test_every_format_equals_the_shared_renderer_of_the_result(env: dict[str, str], wav: str) -> None:
    result = from_json(json.loads(hasrctl("transcribe", "-f", "verbose_json", wav, env=env).stdout)["hasr"])
    for fmt in ("text", "json", "srt", "vtt"):
        want = lines(result) if fmt == "text" else render(result, fmt)
        assert hasrctl("transcribe", "-f", fmt, wav, env=env).stdout == want


def test_txt_is_text_as_batch_names_it(env: dict[str, str], wav: str, short_tmp: str) -> None:
    """`hasrctl batch -f txt` and `transcribe -f txt` name one format: the same lines, in NAME.txt."""
    assert hasrctl("transcribe", "-f", "txt", wav, env=env).stdout == TEXT
    res = hasrctl("transcribe", "-f", "TXT", "-o", short_tmp, wav, env=env)
    assert res.returncode == 0, show(res)
    assert (Path(short_tmp) / (Path(wav).stem + ".txt")).read_text() == TEXT


def test_output_directory_gets_name_dot_ext_and_is_never_overwritten(env: dict[str, str], wav: str,
                                                                      work: str) -> None:
    second = write_wav(os.path.join(work, "会议 记录.wav"), 1.0)
    out = os.path.join(work, "out")
    os.mkdir(out)
    res = hasrctl("transcribe", "-f", "srt", "-o", out, wav, second, env=env)
    assert res.returncode == 0, show(res)
    assert res.stdout == ""
    assert sorted(os.listdir(out)) == ["a.srt", "会议 记录.srt"]
    assert len(res.stderr.splitlines()) == 2 and "a.wav: ok" in res.stderr and "-> " in res.stderr
    assert list(srt.parse(Path(out, "a.srt").read_text()))
    Path(out, "a.srt").write_text("mine\n")
    again = hasrctl("transcribe", "-f", "srt", "-o", out, wav, env=env)
    assert again.returncode == 2 and "--force" in one_line(again.stderr)
    assert Path(out, "a.srt").read_text() == "mine\n"
    forced = hasrctl("transcribe", "-f", "srt", "-o", out, "--force", wav, env=env)
    assert forced.returncode == 0 and Path(out, "a.srt").read_text() != "mine\n"


def test_output_file_and_beside_the_input(env: dict[str, str], wav: str, work: str) -> None:
    target = os.path.join(work, "x.txt")
    assert hasrctl("transcribe", "-o", target, wav, env=env).returncode == 0
    assert Path(target).read_text() == TEXT
    local = shutil.copy(wav, os.path.join(work, "b.wav"))
    res = hasrctl("transcribe", "--beside", "-f", "vtt", local, env=env)
    assert res.returncode == 0 and Path(work, "b.vtt").read_text().startswith("WEBVTT")


def test_stdin_is_uploaded(env: dict[str, str], wav: str) -> None:
    data = Path(wav).read_bytes()
    res = hasrctl("transcribe", "-", env=env, stdin=data)
    assert res.returncode == 0, show(res)
    assert res.stdout == TEXT
    subs = list(srt.parse(hasrctl("transcribe", "-f", "srt", "-", env=env, stdin=data).stdout))
    assert "".join(s.content for s in subs) == FINAL


def test_empty_stdin_is_exit_2(env: dict[str, str]) -> None:
    res = hasrctl("transcribe", "-", env=env, stdin=b"")
    assert res.returncode == 2 and "empty" in one_line(res.stderr)


def test_several_files_with_one_bad_one(env: dict[str, str], wav: str, work: str) -> None:
    bad = os.path.join(work, "notes.mp3")
    Path(bad).write_text("this is text, not audio\n")
    res = hasrctl("transcribe", wav, bad, wav, env=env)
    assert res.returncode == 1, show(res)
    assert res.stdout == TEXT * 2
    lines = res.stderr.splitlines()
    assert len(lines) == 3
    assert [(": ok, " in ln) for ln in lines] == [True, False, True]  # a temp dir name may hold "ok"
    assert "notes.mp3" in lines[1] and "decoded" in lines[1]


@pytest.mark.parametrize("kind", ["missing", "directory", "empty", "random", "text_as_mp3", "no_frames"])
def test_each_bad_input_is_exit_2_with_one_clear_line(env: dict[str, str], work: str, kind: str) -> None:
    path = os.path.join(work, {"missing": "gone.wav", "directory": "d.wav", "empty": "e.wav",
                               "random": "r.wav", "text_as_mp3": "t.mp3", "no_frames": "n.wav"}[kind])
    if kind == "directory":
        os.mkdir(path)
    elif kind == "empty":
        open(path, "wb").close()
    elif kind == "random":
        Path(path).write_bytes(random.Random(5).randbytes(40_000))
    elif kind == "text_as_mp3":
        Path(path).write_text("not an mp3 at all\n" * 20)
    elif kind == "no_frames":
        write_wav(path, 0.0)
    res = hasrctl("transcribe", path, env=env)
    assert res.returncode == 2, show(res)
    assert res.stdout == ""
    line = one_line(res.stderr)
    assert line.startswith("hasrctl: ") and os.path.basename(path) in line and "Traceback" not in line


def test_a_relative_path_is_resolved_by_the_cli(env: dict[str, str], wav: str, work: str) -> None:
    shutil.copy(wav, os.path.join(work, "rel.wav"))
    res = hasrctl("transcribe", "-f", "verbose_json", "rel.wav", env=env, cwd=work)
    assert res.returncode == 0, show(res)
    assert json.loads(res.stdout)["hasr"]["audio_path"] == os.path.join(work, "rel.wav")


def test_forced_progress_shows_loading_and_audio_seconds(base: str, wav: str) -> None:
    d = Hasrd(os.path.join(base, "p.sock"), env={"HASR_FAKE_LOAD_SEC": "0.6", "HASR_FAKE_RTF": "0.3"})
    try:
        env = cli_env(base, HASR_SOCKET=d.sock)
        res = hasrctl("transcribe", "--progress", wav, env=env)
        upload = hasrctl("transcribe", "--progress", "-", env=env, stdin=Path(wav).read_bytes())
    finally:
        assert d.stop() == 0
    for r in (res, upload):  # a path and an upload (stdin) show the same
        assert r.returncode == 0 and r.stdout == TEXT, show(r)
        assert "/3.0 s audio" in r.stderr and "[####" in r.stderr
        assert "\r\x1b[Khasrctl: " in r.stderr and r.stderr.endswith(" real time\n")  # the bar erased, the summary
    assert "loading: starting worker" in res.stderr  # a cold start shows the loading phase


def test_a_failed_load_is_exit_1_with_the_reason(base: str, wav: str) -> None:
    d = Hasrd(os.path.join(base, "f.sock"), env={"HASR_FAKE_FAIL_LOAD": "model_unavailable:no weights here"})
    try:
        res = hasrctl("transcribe", wav, env=cli_env(base, HASR_SOCKET=d.sock))
    finally:
        assert d.stop() == 0
    assert res.returncode == 1, show(res)
    assert "no weights here" in one_line(res.stderr)


def test_status_load_unload_and_stop(base: str) -> None:
    d = Hasrd(os.path.join(base, "l.sock"))
    env = cli_env(base, HASR_SOCKET=d.sock)
    try:
        res = hasrctl("status", env=env)
        assert res.returncode == 0 and "stopped" in res.stdout and d.sock in res.stdout, show(res)
        res = hasrctl("load", "--keep-alive", "120", env=env)
        assert res.returncode == 0 and "ready" in res.stdout, show(res)
        res = hasrctl("status", env=env)
        assert "ready (worker pid" in res.stdout and "fake" in res.stdout and "unload in" in res.stdout
        ps = json.loads(hasrctl("status", "--json", env=env).stdout)
        assert ps["state"] == "ready" and ps["pid"] > 0 and ps["socket"] == d.sock
        assert 100 < ps["expires_in_s"] <= 120
        assert hasrctl("unload", env=env).returncode == 0
        assert json.loads(hasrctl("status", "--json", env=env).stdout)["state"] == "stopped"
        res = hasrctl("stop", env=env)
        assert res.returncode == 0 and "stopped" in res.stdout, show(res)
        assert d.proc.wait(10) == 0
        assert hasrctl("status", env=env).returncode == 3
    finally:
        d.stop()


def test_status_watch_follows_the_events(base: str, wav: str) -> None:
    d = Hasrd(os.path.join(base, "w.sock"), env={"HASR_FAKE_RTF": "0.2"})
    env = cli_env(base, HASR_SOCKET=d.sock)
    watch = subprocess.Popen([sys.executable, "-m", "hasrctl", "status", "--watch", "--json"], env=env,
                             cwd=str(REPO), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(0.5)
        assert hasrctl("transcribe", wav, env=env).returncode == 0
        time.sleep(0.3)
        assert hasrctl("stop", env=env).returncode == 0
        out, err = watch.communicate(timeout=20)
    finally:
        watch.kill() if watch.poll() is None else None
        d.stop()
    events = [json.loads(line) for line in out.splitlines()]
    health = [e["health"] for e in events]
    assert health[0] == "idle" and "busy" in health, health
    assert watch.returncode == 0 and "exited" in err


def test_status_names_the_selected_engine_its_models_and_why() -> None:
    from hasrctl.client import pool_status
    from hasrctl.status import _describe

    ps = {"state": "ready", "pid": 42, "engine": "auto", "load_s": 61.5, "queue": 0, "in_flight": 0,
          "identity": {"engine": "hybrid", "device": "cuda", "compute_type": "float16", "selected_by": "auto",
                       "auto_reason": "R2T2, CUDA and both models are available",
                       "models": {"draft": {"path": "/m/Confucius4-R2T2", "name": "Confucius4-R2T2",
                                            "load": {"max_model_len": 4096}},
                                  "final": {"path": "/c/models--Systran--faster-whisper-large-v3/snapshots/0123abcd"
                                                    "ef0123456789", "name": "large-v3",
                                            "revision": "0123abcdef0123456789", "source": "hf-cache"}}}}
    rows = dict(_describe(pool_status(ps), "/run/user/1/hasr/hasrd.sock"))
    assert rows["engine"] == "hybrid on cuda (float16) (HASR_ENGINE=auto)"
    assert rows["models"] == ("draft Confucius4-R2T2 (/m/Confucius4-R2T2), final large-v3@0123abcdef01 "
                              "(/c/models--Systran--faster-whisper-large-v3/snapshots/0123abcdef0123456789)")
    assert rows["why"] == "R2T2, CUDA and both models are available"
    assert not any("{" in v for v in rows.values())
    idle = dict(_describe(pool_status({"state": "stopped", "engine": "auto", "identity": {}}), "/s"))
    assert idle["engine"] == "auto; chosen when the models load" and "models" not in idle and "workers" not in idle
    pool = dict(_describe(pool_status({**ps, "max_workers": 2, "workers": [
        {"model": "base", "pid": 42, "busy": True, "state": "ready"},
        {"model": "large-v3", "pid": 43, "busy": False, "state": "starting"}]}), "/s"))
    assert pool["workers"] == "2 of 2: base (pid 42, busy), large-v3 (pid 43, starting)"


def test_status_of_an_auto_daemon_shows_what_auto_chose(base: str) -> None:
    from tests.speech import cache_home, model_dir

    model_dir()  # the embedded model, verified once into the test cache
    d = Hasrd(os.path.join(base, "auto.sock"), env={"HASR_ENGINE": "auto", "XDG_CACHE_HOME": cache_home(),
                                                   "HASR_FW_DEVICE": "cpu"})
    env = cli_env(base, HASR_SOCKET=d.sock)
    try:
        assert hasrctl("load", env=env, timeout=120).returncode == 0
        res = hasrctl("status", env=env)
    finally:
        d.stop()
    assert res.returncode == 0, show(res)
    rows = {line.split(None, 1)[0]: line.split(None, 1)[1] for line in res.stdout.splitlines() if line.strip()}
    assert rows["engine"].startswith("whisper on cpu") and rows["engine"].endswith("(HASR_ENGINE=auto)"), rows
    assert rows["models"].startswith("final whisper-base") and "{" not in res.stdout, res.stdout
    assert rows["why"].startswith("hybrid unavailable"), rows

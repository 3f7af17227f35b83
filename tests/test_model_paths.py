"""A caller who may not name files (over TCP, a HASR_SHARED_GROUP member) naming a model directory (issue 39 #1).

Real daemons with a real TCP listener, real worker processes, real files and links. What the worker opens is
watched with inotify on the planted directory: nothing in it may ever be opened, whatever the answer says.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import need, wait_until
from tests.daemon import TcpHasrd, write_wav

IN_OPEN, IN_ACCESS = 0x20, 0x01
NOBODY = 65534


class Watch:
    """inotify on one directory: whether anything in it (or it) was opened or read since the watch began."""

    def __init__(self, path: Path) -> None:
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        assert self.fd >= 0
        assert self.libc.inotify_add_watch(self.fd, str(path).encode(), IN_OPEN | IN_ACCESS) >= 0

    def opened(self) -> list[str]:
        """The names opened or read in the directory since the watch began ("" for the directory itself)."""
        try:
            raw = os.read(self.fd, 65536)
        except BlockingIOError:
            return []
        names, at = [], 0
        while at < len(raw):
            _wd, _mask, _cookie, size = struct.unpack_from("iIII", raw, at)
            names.append(raw[at + 16:at + 16 + size].rstrip(b"\0").decode())
            at += 16 + size
        return names

    def close(self) -> None:
        os.close(self.fd)


def fake_model(d: Path) -> Path:
    """A directory with a model's files whose model.bin is no model (what another user plants)."""
    d.mkdir(parents=True)
    for name in ("config.json", "tokenizer.json", "vocabulary.txt", "preprocessor_config.json"):
        (d / name).write_text("{}\n")
    (d / "model.bin").write_bytes(b"\x06\x00\x00\x00planted")
    return d


def own_model(d: Path) -> Path:
    """The daemon's user's model directory: links to the embedded whisper base's files (0755, its own)."""
    from tests.speech import model_dir

    d.mkdir(parents=True)
    os.chmod(d, 0o755)
    for f in Path(model_dir()).iterdir():
        (d / f.name).symlink_to(f)
    return d


class TcpDaemon(TcpHasrd):
    """hasrd with a TCP socket (whisper on the CPU, real workers); its output in ``base``/d.log."""

    def __init__(self, base: Path, env: dict[str, str]) -> None:
        from tests.speech import cache_home

        self.log = base / "d.log"
        super().__init__(str(base), {"HASR_ENGINE": "whisper", "HASR_FW_DEVICE": "cpu",
                                     "XDG_CACHE_HOME": cache_home(), **env}, log=str(self.log))

    def transcribe(self, model: str, wav: str) -> httpx.Response:
        with self.http(120) as c, open(wav, "rb") as f:
            return c.post("/v1/audio/transcriptions", data={"model": model}, files={"file": ("a.wav", f)})

    def text(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture
def base(short_tmp: str) -> Iterator[Path]:
    need(os.getuid() == 0, "needs root to plant files as another user")
    os.chmod(short_tmp, 0o755)
    yield Path(short_tmp)


def test_a_link_re_pointed_after_the_check_never_makes_the_worker_open_the_planted_model(base: Path) -> None:
    """The check passes a link to the owner's model; the link is re-pointed to a planted model before the worker
    starts loading (the worker's interpreter waits for it): the worker loads what was checked, and opens
    nothing of the planted model."""
    mine = own_model(base / "own" / "base")
    theirs = base / "theirs"
    theirs.mkdir()
    planted = fake_model(theirs / "planted")
    link = theirs / "m"
    link.symlink_to(mine)
    for p in (theirs, planted, *planted.iterdir()):
        os.lchown(p, NOBODY, NOBODY)
    os.lchown(link, NOBODY, NOBODY)
    gate = base / "gate"
    gate.mkdir()
    wrapper = base / "python"  # the worker's interpreter: holds the worker back until the link is re-pointed
    wrapper.write_text(f'#!/bin/sh\ntouch {gate}/started\nwhile [ ! -e {gate}/go ]; do sleep 0.02; done\n'
                       f'exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    wav = write_wav(str(base / "a.wav"), 1.0)
    watch = Watch(planted)
    daemon = TcpDaemon(base, {"HASR_WORKER_PYTHON": str(wrapper)})
    answer: list[httpx.Response] = []
    try:
        asking = threading.Thread(target=lambda: answer.append(daemon.transcribe(str(link), wav)))
        asking.start()
        assert wait_until((gate / "started").exists, 60), daemon.text()  # checked, a worker is starting
        tmp = theirs / "m.new"
        tmp.symlink_to(planted)
        os.replace(tmp, link)  # what the other user does now
        (gate / "go").touch()
        asking.join(120)
        assert answer and answer[0].status_code == 200, (answer and answer[0].text, daemon.text())
        assert watch.opened() == [], "the planted model was looked at"
    finally:
        (gate / "go").touch()  # a wrapper still waiting goes on, and its worker ends with the daemon
        daemon.close()
        watch.close()


@pytest.mark.parametrize("case", ["sticky", "their_file", "group_writable", "missing", "no_model_bin", "bad_bin",
                                  "loop", "nul", "crowded"])
def test_every_model_path_a_stranger_may_not_use_gets_one_answer_and_nothing_is_opened(base: Path,
                                                                                        case: str) -> None:
    """A world-writable sticky directory of the owner's (/tmp for a root daemon) with planted files, a planted
    file in the owner's directory, a group-writable one, the owner's paths that hold no model, a NUL byte (was a
    500) and a directory of more files than a model has (not walked): the same 403 (the answer tells nothing of
    what exists), and nothing of them is opened by a worker."""
    d = base / ("m\0" if case == "nul" else "m")
    if case == "sticky":
        fake_model(d)
        os.chmod(d, 0o1777)
        for f in d.iterdir():
            os.chown(f, NOBODY, NOBODY)
    elif case == "their_file":
        fake_model(d)
        os.chown(d / "model.bin", NOBODY, NOBODY)
    elif case == "group_writable":
        fake_model(d)
        os.chmod(d / "config.json", 0o664)
    elif case == "no_model_bin":
        fake_model(d)
        (d / "model.bin").unlink()
    elif case == "bad_bin":
        fake_model(d)
    elif case == "loop":
        d.symlink_to(base / "m2")
        (base / "m2").symlink_to(d)
    elif case == "crowded":  # the owner's good model among 64 other files
        own_model(d)
        for i in range(64):
            (d / f"{i}.txt").write_text("")
    watched = d if d.is_dir() else base
    watch = Watch(watched)
    wav = write_wav(str(base / "a.wav"), 0.5)
    daemon = TcpDaemon(base, {})
    try:
        r = daemon.transcribe(str(d), wav)
        assert r.status_code == 403, r.text
        body = r.json()["error"]
        assert body["param"] == "model" and str(d) not in body["message"], body
        assert body["message"] == ("this caller may name a model only by its name (GET /v1/models lists them) "
                                   "or by a model directory that nobody but the daemon's user can change")
        ps = subprocess.run(["curl", "-s", "--unix-socket", str(base / "s.sock"), "http://hasr/api/ps"],
                            capture_output=True, text=True, timeout=30).stdout
        assert '"workers":[]' in ps, ps  # no worker was started for it
        if case in ("sticky", "their_file", "group_writable"):  # the daemon may list the directory, no more
            assert [name for name in watch.opened() if name] == []
    finally:
        daemon.close()
        watch.close()
        shutil.rmtree(base / "m", ignore_errors=True)


def test_a_strangers_path_to_a_model_only_the_owner_can_change_is_served(base: Path) -> None:
    """The rule does not refuse what is safe: the owner's own model directory, named by a stranger, loads."""
    mine = own_model(base / "own" / "base")
    wav = write_wav(str(base / "a.wav"), 1.0)
    daemon = TcpDaemon(base, {})
    try:
        r = daemon.transcribe(str(mine), wav)
        assert r.status_code == 200, (r.text, daemon.text())
    finally:
        daemon.close()

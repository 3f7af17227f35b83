"""hasr-tray's single-instance guard and its daemon autostart, without a display.

The X side (a second ``hasr-tray`` leaves one icon and shows the first one's drop window) is in test_tray_x.py.
"""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

os.environ.setdefault("PYSTRAY_BACKEND", "dummy")  # importing pystray without DISPLAY raises otherwise

from tests.cliutil import REPO  # noqa: E402
from tests.conftest import pid_alive, wait_until  # noqa: E402
from tests.daemon import write_wav  # noqa: E402
from tray import single  # noqa: E402
from tray.client import Client  # noqa: E402
from tray.jobs import DONE, Jobs  # noqa: E402


@pytest.fixture
def runtime(short_tmp: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    run = Path(short_tmp, "run")
    run.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(run))
    monkeypatch.setenv("DISPLAY", ":77")
    return run


def test_the_second_tray_asks_the_first_to_show_its_window(runtime: Path) -> None:
    first = single.claim()
    assert first is not None
    shown = threading.Event()
    first.serve(shown.set)
    try:
        assert single.claim() is None  # the lock is held: this display has its tray
        assert single.show_running(timeout=5) and shown.wait(5)
        assert single.running_pid() == os.getpid()
        lock, sock = single.paths()
        assert stat.S_IMODE(os.stat(sock).st_mode) == 0o600 and stat.S_IMODE(os.stat(lock).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(runtime / "hasr").st_mode) == 0o700
        other = single.claim({"DISPLAY": ":78"})  # another display has its own tray
        assert other is not None
        other.close()
    finally:
        first.close()
    again = single.claim()  # the lock went with the first tray
    assert again is not None
    again.close()


def test_a_killed_trays_socket_is_taken_over(runtime: Path) -> None:
    dead = single.claim()
    assert dead is not None
    os.close(dead.lock_fd)  # as if it were SIGKILLed: the kernel drops the lock, the socket file stays
    dead.listener.close()
    assert single.paths()[1].exists()
    assert not single.show_running(timeout=0.3)
    new = single.claim()
    assert new is not None
    shown = threading.Event()
    new.serve(shown.set)
    try:
        assert single.show_running(timeout=5) and shown.wait(5)
    finally:
        new.close()


def test_the_guard_refuses_a_runtime_directory_someone_else_could_control(runtime: Path) -> None:
    from hasrctl.discovery import UnsafeDir

    (runtime / "hasr").mkdir(mode=0o755)
    os.chmod(runtime / "hasr", 0o755)
    with pytest.raises(UnsafeDir, match="0755"):
        single.claim()


def test_the_tray_starts_the_daemon_as_hasrctl_does(runtime: Path, short_tmp: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Autostart for a dropped file: hasrctl's (idle exit, hasrd.log beside the socket, the autostart lock)."""
    for key in [k for k in os.environ if k.startswith(("HASR_", "LISTEN_", "NOTIFY_"))]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("HASR_ENGINE", "fake")
    monkeypatch.setenv("HASR_IDLE_EXIT_SEC", "1.5")
    monkeypatch.setenv("HASR_IDLE_TTL_SEC", "0.5")
    monkeypatch.setenv("XDG_CONFIG_HOME", os.path.join(short_tmp, "cfg"))
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    sock = str(runtime / "hasr" / "hasrd.sock")
    wav = write_wav(os.path.join(short_tmp, "a.wav"), 0.5)
    done = threading.Event()
    jobs = Jobs(Client(sock), lambda: ("txt", ""), lambda j: done.set() if j.state not in ("queued", "running")
                else None, lambda *a, **k: None, autostart=True)
    [job] = jobs.add([wav])
    assert done.wait(60), job.detail
    assert job.state == DONE, job.detail
    log = runtime / "hasr" / "hasrd.log"
    assert log.is_file() and stat.S_IMODE(log.stat().st_mode) == 0o600
    from hasrctl.client import peer_pid

    pid = peer_pid(sock)
    assert pid is not None
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert b"--idle-exit" in argv and argv[argv.index(b"--idle-exit") + 1] == b"1.5", argv
    assert os.getsid(pid) == pid  # detached in its own session
    try:
        assert wait_until(lambda: not pid_alive(pid), timeout=30), "the tray-started hasrd never exits"
    finally:
        if pid_alive(pid):
            os.kill(pid, 15)
    assert f"ready on {sock}" in log.read_text(errors="replace")  # its output went to the log

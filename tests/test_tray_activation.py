"""The tray against a socket-activated daemon that exits on idle and comes back, as under systemd.

The test plays systemd: it owns the listening socket, starts ``hasrd`` (LISTEN_FDS=1) when a connection
waits, reads its sd_notify datagrams (READY=1 -> active, STOPPING=1 -> deactivating), and answers the tray's
``systemctl --user show`` through a stand-in ``systemctl`` on PATH. The tray itself runs unchanged.
"""

from __future__ import annotations

import os
import select
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.test_tray_x import REPO, Desktop, _x_tools, background, desktop, make_wav, start_tray  # noqa: F401
from tray.client import Client

SYSTEMCTL = """#!/bin/sh
# stand-in for `systemctl [--user] show --property=Id,LoadState,ActiveState hasrd.socket hasrd.service`, fed by
# the test's activator: the socket always listens, the service is active while the activator says so
service=inactive; [ -e "$HASR_TEST_ACTIVE" ] && service=active
printf 'Id=hasrd.socket\\nLoadState=loaded\\nActiveState=active\\n\\nId=hasrd.service\\nLoadState=loaded\\n'
printf 'ActiveState=%s\\n' "$service"
"""
WRAP = ("import os, sys; fd = int(sys.argv[1]); fd != 3 and os.dup2(fd, 3); "
        "os.environ.update(LISTEN_FDS='1', LISTEN_PID=str(os.getpid())); os.execv(sys.argv[2], sys.argv[2:])")


class Activator:
    """Socket activation for ``hasrd --engine fake``: spawns it when a client waits and none runs."""

    def __init__(self, desk: Desktop, knobs: dict[str, str]) -> None:
        run = Path(desk.env["XDG_RUNTIME_DIR"]) / "hasr"
        run.mkdir(mode=0o700)
        self.path = str(run / "hasrd.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(16)
        self.notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.notify.bind(str(desk.dir / "notify"))
        self.active = desk.dir / "service-active"
        self.env = {**desk.env, "NOTIFY_SOCKET": str(desk.dir / "notify"), **knobs}
        self.log = desk.dir / "hasrd.log"
        self.spawns = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _spawn(self) -> None:
        fd = self.listener.fileno()
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-c", WRAP, str(fd), sys.executable, "-m", "hasrd",
                                          "--engine", "fake"], pass_fds=(fd,), env=self.env, cwd=REPO,
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        self.spawns += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            readable, _, _ = select.select([self.listener, self.notify], [], [], 0.05)
            if self.notify in readable:
                msg = self.notify.recv(4096).decode("utf-8", "replace")
                if "READY=1" in msg:
                    self.active.touch()
                if "STOPPING=1" in msg:
                    self.active.unlink(missing_ok=True)
            if self.proc is not None and self.proc.poll() is not None:
                self.active.unlink(missing_ok=True)
                self.proc = None
            if self.proc is None and self.listener in readable:
                self._spawn()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:  # still finishing accepted work: do not let cleanup fail the test
                os.killpg(self.proc.pid, 9)
                self.proc.wait(10)
        self.listener.close()
        self.notify.close()


def test_the_tray_follows_a_daemon_that_exits_on_idle_and_comes_back_without_waking_it(desktop: Desktop) -> None:
    bin_dir = desktop.dir / "bin"
    bin_dir.mkdir()
    (bin_dir / "systemctl").write_text(SYSTEMCTL)
    (bin_dir / "systemctl").chmod(0o755)
    act = Activator(desktop, {"HASR_IDLE_EXIT_SEC": "1", "HASR_FAKE_LOAD_SEC": "1", "HASR_FAKE_RTF": "1.0"})
    tray = start_tray(desktop, None, env={"PATH": f"{bin_dir}:{os.environ['PATH']}",
                                          "HASR_TEST_ACTIVE": str(act.active)})
    client = Client(act.path, timeout=30)
    wav = make_wav(desktop.dir / "会议.wav", 2.0)
    try:
        icon = desktop.icon_window()
        desktop.wait_state(icon, "idle", "daemon asleep")
        time.sleep(1.5)
        assert act.spawns == 0, "the tray woke a sleeping daemon"

        for round_ in (1, 2):
            background(lambda: client.transcribe(str(wav)))
            desktop.wait_state(icon, "loading", "loading models")
            desktop.wait_state(icon, "busy", "transcribing 会议.wav")
            desktop.wait_state(icon, "ok", "ready")
            assert act.spawns == round_
            client.unload()  # worker gone: the daemon idles, exits after 1 s, and the tray lets it sleep
            desktop.wait_state(icon, "idle", "daemon asleep", timeout=30)
            woken = act.spawns
            time.sleep(2)
            assert act.spawns == woken, "the tray woke a sleeping daemon"
        assert tray.alive()
    finally:
        tray.stop()
        act.close()

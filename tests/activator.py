"""A fake service manager: owns the listening socket and a NOTIFY_SOCKET, starts hasrd on demand.

Plays what systemd's socket unit + Type=notify service do (notes/systemd-testing.md, level 0): the listener
is passed as fd 3 with LISTEN_FDS=1 / LISTEN_FDNAMES / LISTEN_PID (set by `sh -c 'LISTEN_PID=$$ exec ...'`,
since exec keeps the pid); notifications are recorded with the sender's pid from SCM_CREDENTIALS; when the
daemon has exited and the listener is readable again, a new instance is started.
"""

from __future__ import annotations

import os
import select
import socket
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field


@dataclass
class Note:
    pid: int
    fields: dict[str, str]
    at: float = field(default_factory=time.monotonic)


class Activator:
    def __init__(self, base: str, env: dict[str, str] | None = None) -> None:
        self.path = os.path.join(base, "s.sock")
        self.notify_path = os.path.join(base, "n.sock")
        self.log_path = os.path.join(base, "d.log")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(128)
        self.notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.notify.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.notify.bind(self.notify_path)
        self.env = dict(os.environ)
        self.env.update({"HASR_ENGINE": "fake", "NOTIFY_SOCKET": self.notify_path, "LISTEN_FDS": "1",
                         "LISTEN_FDNAMES": "hasrd"})
        self.env.update(env or {})
        self.notes: list[Note] = []
        self.started: list[subprocess.Popen[bytes]] = []
        self.exits: list[int] = []
        self._stop = threading.Event()
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - the children's log, closed in close()
        self._threads = [threading.Thread(target=self._recv_notes, daemon=True),
                         threading.Thread(target=self._supervise, daemon=True)]
        for t in self._threads:
            t.start()

    def _spawn(self) -> subprocess.Popen[bytes]:
        lfd = self.listener.fileno()

        def child() -> None:
            os.dup2(lfd, 3)
            os.set_inheritable(3, True)

        proc = subprocess.Popen(["sh", "-c", 'LISTEN_PID=$$ exec "$@"', "sh", sys.executable, "-m", "hasrd.server"],
                                env=self.env, pass_fds=(3,) if lfd == 3 else (), preexec_fn=child,
                                stdout=self._log, stderr=subprocess.STDOUT, close_fds=lfd != 3 and False)
        return proc

    def _supervise(self) -> None:
        current: subprocess.Popen[bytes] | None = None
        while not self._stop.is_set():
            if current is not None and current.poll() is not None:
                self.exits.append(current.returncode)
                current = None
            if current is None:
                readable, _, _ = select.select([self.listener], [], [], 0.02)
                if readable and not self._stop.is_set():
                    current = self._spawn()
                    self.started.append(current)
            else:
                time.sleep(0.01)
        if current is not None and current.poll() is None:
            current.terminate()
            current.wait(20)
            self.exits.append(current.returncode)

    def _recv_notes(self) -> None:
        self.notify.settimeout(0.1)
        while not self._stop.is_set():
            try:
                data, anc, _flags, _addr = self.notify.recvmsg(4096, socket.CMSG_SPACE(struct.calcsize("3i")))
            except TimeoutError:
                continue
            except OSError:
                return
            pid = 0
            for level, kind, payload in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                    pid = struct.unpack("3i", payload[:12])[0]
            fields = dict(line.split("=", 1) for line in data.decode("utf-8").splitlines() if "=" in line)
            self.notes.append(Note(pid, fields))

    def notes_from(self, pid: int) -> list[Note]:
        return [n for n in self.notes if n.pid == pid]

    def statuses(self) -> list[str]:
        return [n.fields["STATUS"] for n in self.notes if "STATUS" in n.fields]

    def wait_for(self, pred, timeout: float = 20.0) -> bool:  # type: ignore[no-untyped-def]
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if pred():
                return True
            time.sleep(0.02)
        return bool(pred())

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(30)
        self.listener.close()
        self.notify.close()
        self._log.close()

    def log(self) -> str:
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

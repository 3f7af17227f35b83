"""Run a real hasrd on a temporary socket for tests, and talk to it over the Unix socket."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import wave
from typing import Any

import httpx
import numpy as np


def write_wav(path: str, seconds: float = 1.0, rate: int = 16000, channels: int = 1) -> str:
    n = int(seconds * rate)
    t = np.arange(n) / rate
    mono = (np.sin(2 * np.pi * 220 * t) * 8000).astype("<i2")
    data = np.repeat(mono[:, None], channels, axis=1) if channels > 1 else mono
    with wave.open(path, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(data.tobytes())
    return path


def client(sock: str, timeout: float = 60.0) -> httpx.Client:
    return httpx.Client(transport=httpx.HTTPTransport(uds=sock), base_url="http://hasr", timeout=timeout)


class Hasrd:
    """``hasrd --socket PATH`` as a subprocess; ``env`` adds HASR_* settings and fake-engine knobs; ``prelude``
    is Python run in the daemon's process before hasrd.server (to look inside it)."""

    def __init__(self, sock: str, env: dict[str, str] | None = None, args: list[str] | None = None,
                 prelude: str = "") -> None:
        self.sock = sock
        self.log_path = sock + ".log"
        full = dict(os.environ)
        full.update({"HASR_ENGINE": "fake", "HASR_BACKOFF_BASE_SEC": "0.05"})
        full.update(env or {})
        self.logf = open(self.log_path, "ab")  # noqa: SIM115 - the daemon's log, closed in stop()
        run = ([sys.executable, "-c", prelude + "\nimport runpy\n"
                "runpy.run_module('hasrd.server', run_name='__main__', alter_sys=True)\n"] if prelude
               else [sys.executable, "-m", "hasrd.server"])
        self.proc = subprocess.Popen([*run, "--socket", sock, *(args or [])], env=full, stdout=self.logf,
                                     stderr=subprocess.STDOUT)
        self.wait_ready()

    def wait_ready(self, timeout: float = 20.0) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"hasrd exited with {self.proc.returncode}:\n{self.log()}")
            try:
                with client(self.sock, 2) as c:
                    if c.get("/health").status_code == 200:
                        return
            except (httpx.TransportError, OSError):
                pass
            time.sleep(0.05)
        raise RuntimeError(f"hasrd did not answer within {timeout} s:\n{self.log()}")

    def client(self, timeout: float = 60.0) -> httpx.Client:
        return client(self.sock, timeout)

    def get(self, path: str) -> Any:
        with self.client() as c:
            return c.get(path).json()

    def log(self) -> str:
        self.logf.flush()
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.logf.close()
        return self.proc.returncode


def whisper_hasrd(sock: str) -> Hasrd:
    """hasrd with the whisper engine on the CPU with the embedded model (real faster-whisper)."""
    from speech import model_dir

    return Hasrd(sock, env={"HASR_ENGINE": "whisper", "HASR_FW_MODEL": model_dir(), "HASR_FW_DEVICE": "cpu"})


class TcpHasrd:
    """hasrd socket-activated as systemd starts it with the unit's optional TCP socket: a Unix socket (``sock``)
    and a TCP one on 127.0.0.1 (``port``), LISTEN_FDNAMES=hasrd:tcp; ``env`` adds settings (the fake engine by
    default); ``log``: a file for its output."""

    def __init__(self, base: str, env: dict[str, str] | None = None, log: str | None = None) -> None:
        self.sock = os.path.join(base, "s.sock")
        self.unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.unix.bind(self.sock)
        self.unix.listen(8)
        self.tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.tcp.bind(("127.0.0.1", 0))
        self.tcp.listen(8)
        self.port = self.tcp.getsockname()[1]
        fds = (self.unix.fileno(), self.tcp.fileno())

        def child() -> None:  # the listeners at fds 3 and 4, as systemd passes them
            for i, fd in enumerate(fds):
                os.dup2(fd, 100 + i)
            for i in range(len(fds)):
                os.dup2(100 + i, 3 + i)
                os.set_inheritable(3 + i, True)

        full = {**os.environ, "HASR_ENGINE": "fake", "LISTEN_FDS": "2", "LISTEN_FDNAMES": "hasrd:tcp", **(env or {})}
        self.logf = open(log, "ab") if log else None  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(["sh", "-c", 'LISTEN_PID=$$ exec "$@"', "sh", sys.executable, "-m",
                                      "hasrd.server"], env=full, preexec_fn=child, close_fds=False,
                                     stdout=self.logf, stderr=subprocess.STDOUT if log else None)

    def http(self, timeout: float = 60.0) -> httpx.Client:
        """A client over the TCP socket (no SO_PEERCRED: a caller who may not name files)."""
        return httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=timeout)

    def close(self) -> int:
        """SIGTERM, and its exit code."""
        self.proc.terminate()
        code = self.proc.wait(30)
        if self.logf:
            self.logf.close()
        self.unix.close()
        self.tcp.close()
        return code

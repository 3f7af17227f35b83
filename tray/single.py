"""One hasr-tray per display: a second start asks the running one to show its drop window, then exits 0.

The running tray holds an flock on ``$XDG_RUNTIME_DIR/hasr/tray-DISPLAY.lock`` for as long as it lives (the
kernel drops it when the process ends, however it ends, so a lock is never stale) and listens on
``tray-DISPLAY.sock`` beside it. A second start finds the lock taken, connects, sends ``show`` and waits for
``ok``. The directory is the daemon's socket directory, checked the same way (ours, 0700; see
hasrctl.discovery), so no other user can answer in the tray's place.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

log = logging.getLogger("hasr.tray.single")


def display_key(env: Mapping[str, str] | None = None) -> str:
    """The display this tray belongs to, as a file name part (":0" -> "0", "wayland-0" -> "wayland-0")."""
    env = os.environ if env is None else env
    name = env.get("DISPLAY") or env.get("WAYLAND_DISPLAY") or "none"
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name.lstrip(":")) or "none"


def paths(env: Mapping[str, str] | None = None) -> tuple[Path, Path]:
    """(lock, socket) for this display, in the checked (and if need be created) runtime directory."""
    from hasrctl import discovery
    from hasrd.config import default_socket

    d = discovery.secure_dir(default_socket(), create=True)
    key = display_key(env)
    return d / f"tray-{key}.lock", d / f"tray-{key}.sock"


class Instance:
    """This process is the tray of its display: it holds the lock and answers later starts."""

    def __init__(self, lock_fd: int, listener: socket.socket, sock_path: Path) -> None:
        self.lock_fd, self.listener, self.sock_path = lock_fd, listener, sock_path
        self._ino = os.stat(sock_path).st_ino
        self._closed = threading.Event()

    def serve(self, on_show: Callable[[], None]) -> None:
        """Answer ``show`` requests (from any thread: ``on_show`` must hand over to the UI thread itself)."""
        threading.Thread(target=self._serve, args=(on_show,), name="hasr-tray-single", daemon=True).start()

    def _serve(self, on_show: Callable[[], None]) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with conn:
                try:
                    conn.settimeout(2.0)
                    request = conn.recv(64).strip()
                    if request == b"show":
                        log.info("another hasr-tray was started: showing the drop window")
                        on_show()
                    conn.sendall(b"ok\n" if request == b"show" else b"?\n")
                except OSError:
                    continue

    def close(self) -> None:
        self._closed.set()
        try:
            if os.stat(self.sock_path).st_ino == self._ino:
                os.unlink(self.sock_path)
        except OSError:
            pass
        self.listener.close()
        os.close(self.lock_fd)


def claim(env: Mapping[str, str] | None = None) -> Instance | None:
    """This process's Instance when no other tray runs on this display; None when one does."""
    from hasrctl.discovery import open_private

    lock_path, sock_path = paths(env)
    fd = open_private(lock_path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        with contextlib.suppress(FileNotFoundError):
            os.unlink(sock_path)  # left by a tray that was killed: we hold the lock, so it is nobody's
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            listener.bind(str(sock_path))
        finally:
            os.umask(old)
        listener.listen(8)
        return Instance(fd, listener, sock_path)
    except BaseException:
        os.close(fd)
        raise


def running_pid(env: Mapping[str, str] | None = None) -> int | None:
    try:
        return int(paths(env)[0].read_text().strip())
    except (OSError, ValueError):
        return None


def show_running(env: Mapping[str, str] | None = None, timeout: float = 5.0) -> bool:
    """Ask the running tray to show its drop window; False when it did not answer within ``timeout``."""
    _lock, sock_path = paths(env)
    deadline = time.monotonic() + timeout
    while True:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(max(0.1, deadline - time.monotonic()))
            s.connect(str(sock_path))
            s.sendall(b"show\n")
            return s.recv(16).strip() == b"ok"
        except (FileNotFoundError, ConnectionRefusedError):
            pass  # it holds the lock but is not listening yet (or just quit)
        except OSError:
            return False
        finally:
            s.close()
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)

"""Following the daemon without keeping it alive.

The events-connection policy:

* While something happens (the worker is loading, loaded, busy, failed, or jobs are queued) the tray holds
  ``GET /api/events`` open and shows every snapshot as it comes.
* When a snapshot says the daemon is quiet (worker stopped, nothing queued or running) the tray closes the
  stream, because an open connection counts as activity and would keep the daemon from its idle exit. It then
  probes ``GET /health`` every ``poll_sec`` (one short connection) and reopens the stream as soon as the
  answer is not quiet (a transcription from hasrctl, a preload).
* When nothing listens on the socket the tray shows "daemon not running" and keeps probing; a refused
  connection starts nothing.
* When systemd owns the socket (``hasrd.socket`` active) and ``hasrd.service`` is inactive, the daemon is
  asleep: connecting would start it, so the tray asks systemd instead and does not connect at all.
* A stream that ends (the daemon exited on idle, or restarted) is followed by an immediate probe.

``Watcher.poke()`` cuts a wait short (the user just asked for a transcription).
"""

from __future__ import annotations

import http.client
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from hasrd import config
from tray.client import Client, DaemonDown, DaemonError, EventStream
from tray.state import ASLEEP, BROKEN, DOWN, Link, from_health, is_quiet

Publish = Callable[["Mapping[str, Any] | Link"], None]


class SystemdProbe:
    """Whether systemd holds the daemon's socket while the service is stopped (asked at most once a poll)."""

    def __init__(self, socket_path: str, recheck_sec: float = 60.0) -> None:
        self.user = socket_path != config.SYSTEM_SOCKET
        self.applies = socket_path in (config.default_socket(), config.SYSTEM_SOCKET)
        self.systemctl = shutil.which("systemctl") if self.applies else None
        self.recheck_sec = recheck_sec
        self._socket_unit: tuple[float, bool] | None = None

    def _active(self, unit: str) -> bool:
        argv = [str(self.systemctl)] + (["--user"] if self.user else []) + ["is-active", "--quiet", unit]
        try:
            return subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, timeout=3).returncode == 0
        except (OSError, subprocess.SubprocessError):
            return False

    def __call__(self) -> bool:
        if not self.systemctl:
            return False
        now = time.monotonic()
        if self._socket_unit is None or now - self._socket_unit[0] > self.recheck_sec:
            self._socket_unit = (now, self._active("hasrd.socket"))
        return self._socket_unit[1] and not self._active("hasrd.service")


class Watcher:
    """Runs in its own thread and calls ``publish`` with each snapshot, or a Link when there is none."""

    def __init__(self, client: Client, publish: Publish, poll_sec: float = 3.0,
                 asleep: Callable[[], bool] | None = None) -> None:
        self.client, self.publish, self.poll_sec = client, publish, poll_sec
        self.asleep = asleep or SystemdProbe(client.path)
        self._stop = threading.Event()
        self._poke = threading.Event()
        self._stream: EventStream | None = None
        self._thread: threading.Thread | None = None
        self.streaming = False  # for tests and the debug log: is a stream held right now?

    def start(self) -> Watcher:
        self._thread = threading.Thread(target=self.run, name="hasr-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._poke.set()
        stream = self._stream
        if stream is not None:
            stream.close()

    def poke(self) -> None:
        """Probe now instead of at the end of the current wait."""
        self._poke.set()

    def _wait(self) -> None:
        self._poke.wait(self.poll_sec)
        self._poke.clear()

    def _follow(self) -> bool:
        """Hold the stream until it ends (False) or says the daemon is quiet (True)."""
        stream = self.client.events()
        self._stream, self.streaming = stream, True
        try:
            for snap in stream:
                if self._stop.is_set():
                    return True
                self.publish(snap)
                if is_quiet(snap):
                    return True
            return False
        except (OSError, ValueError, http.client.HTTPException):
            return False  # the daemon went away mid-stream (idle exit, restart): probe again at once
        finally:
            self._stream, self.streaming = None, False
            stream.close()

    def step(self) -> bool:
        """One probe (and a followed stream if there is activity); True when the caller should wait."""
        try:
            if self.asleep():
                self.publish(Link(ASLEEP))
                return True
            snap = from_health(self.client.health())
            if is_quiet(snap):
                self.publish(snap)
                return True
            return self._follow()
        except DaemonDown as e:
            self.publish(Link(DOWN, str(e)))
        except (DaemonError, OSError, ValueError, http.client.HTTPException) as e:
            self.publish(Link(BROKEN, str(e) or type(e).__name__))
        return True

    def run(self) -> None:
        while not self._stop.is_set():
            if self.step() and not self._stop.is_set():
                self._wait()

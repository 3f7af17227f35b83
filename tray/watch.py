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
  asleep: connecting would start it, so the tray asks systemd instead and does not connect at all. systemd
  is asked at every probe, so a socket unit stopped (or failed) is shown as "not running" at the next probe,
  with the command that brings it back.
* A stream that ends (the daemon exited on idle, or restarted) is followed by an immediate probe.

``Watcher.poke()`` cuts a wait short (the user just asked for a transcription).
"""

from __future__ import annotations

import shutil
import subprocess
import threading
from collections.abc import Callable

from hasrd import config
from hasrd.status import PoolStatus
from tray.client import Client, DaemonDown, DaemonError, EventStream
from tray.state import ASLEEP, BROKEN, DOWN, Link, from_health, is_quiet

UNIT_SOCKET, UNIT_SERVICE = "hasrd.socket", "hasrd.service"
Publish = Callable[[PoolStatus | Link], None]


class SystemdProbe:
    """What systemd says about the daemon's socket, asked at every probe (one ``systemctl show`` for both
    units, so a socket stopped a moment ago is never shown as asleep).

    Calling it answers whether the daemon is asleep (``hasrd.socket`` listening, ``hasrd.service`` not
    running); ``socket_state`` keeps what the socket unit was: ``""`` when systemd does not apply (another
    socket path, no systemctl, no manager, the unit not installed), else its ActiveState (``active``,
    ``inactive``, ``failed``, ...).
    """

    def __init__(self, socket_path: str) -> None:
        self.user = socket_path != config.SYSTEM_SOCKET
        self.applies = socket_path in (config.default_socket(), config.SYSTEM_SOCKET)
        self.systemctl = shutil.which("systemctl") if self.applies else None
        self.socket_state = ""

    def units(self) -> dict[str, dict[str, str]]:
        """``{unit: {"LoadState": ..., "ActiveState": ...}}`` for hasrd.socket and hasrd.service; empty when
        systemd cannot be asked."""
        argv = [str(self.systemctl)] + (["--user"] if self.user else []) + [
            "show", "--property=Id,LoadState,ActiveState", UNIT_SOCKET, UNIT_SERVICE]
        try:
            res = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=3)
        except (OSError, subprocess.SubprocessError):
            return {}
        if res.returncode != 0:
            return {}
        out: dict[str, dict[str, str]] = {}
        for block in res.stdout.split("\n\n"):
            props = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
            if props.get("Id"):
                out[props["Id"]] = props
        return out

    def __call__(self) -> bool:
        if not self.systemctl:
            return False
        units = self.units()
        sock, service = units.get(UNIT_SOCKET, {}), units.get(UNIT_SERVICE, {})
        loaded = sock.get("LoadState") == "loaded"
        self.socket_state = sock.get("ActiveState", "") if loaded else ""
        return self.socket_state == "active" and service.get("ActiveState") != "active"

    def hint(self) -> str:
        """How to bring a stopped socket unit back (empty while it is active or systemd does not apply)."""
        if self.socket_state in ("", "active"):
            return ""
        word = "failed" if self.socket_state == "failed" else "stopped"
        user = " --user" if self.user else ""
        return f"{UNIT_SOCKET} {word}: systemctl{user} restart {UNIT_SOCKET}"


class Watcher:
    """Runs in its own thread and calls ``publish`` with each snapshot, or a Link when there is none."""

    def __init__(self, client: Client, publish: Publish, poll_sec: float = 3.0,
                 asleep: Callable[[], bool] | None = None, hint: Callable[[], str] | None = None) -> None:
        """``asleep`` and ``hint`` default to a :class:`SystemdProbe` of the client's socket."""
        self.client, self.publish, self.poll_sec = client, publish, poll_sec
        self.asleep: Callable[[], bool]
        self.hint: Callable[[], str]
        if asleep is None:
            probe = SystemdProbe(client.path)
            self.asleep, self.hint = probe, probe.hint
        else:
            self.asleep, self.hint = asleep, hint or (lambda: "")
        self._stop = threading.Event()
        self._poke = threading.Event()
        self._stream: EventStream | None = None
        self._thread: threading.Thread | None = None

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
        self._stream = stream
        try:
            for snap in stream:
                if self._stop.is_set():
                    return True
                self.publish(snap)
                if is_quiet(snap):
                    return True
            return False
        except (OSError, ValueError):
            return False  # the daemon went away mid-stream (idle exit, restart): probe again at once
        finally:
            self._stream = None
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
            self.publish(Link(DOWN, str(e), self.hint()))
        except (DaemonError, OSError, ValueError) as e:
            self.publish(Link(BROKEN, str(e) or type(e).__name__))
        return True

    def run(self) -> None:
        while not self._stop.is_set():
            if self.step() and not self._stop.is_set():
                self._wait()

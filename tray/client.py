"""hasrd for the tray, through hasrctl's client (hasrctl.client: HTTP/1.1 over the Unix socket).

``Client.events()`` follows ``GET /api/events`` (NDJSON snapshots, decoded as the daemon's PoolStatus) and can be
closed from another thread; ``Client.health()`` answers ``GET /health`` as its Health;
``Client.transcribe()`` follows ``POST /transcribe`` as ``hasrctl transcribe`` does (hasrctl.transcribe.by_path),
its progress shown by a View. Failures are ``DaemonDown`` (nothing listens: not running) or ``DaemonError``
(the daemon answered with ``{"error": {"code", "message"}}``, something unreadable, or the connection broke).
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from hasrctl import client as cli
from hasrctl.terminal import View
from hasrd.status import Health, PoolStatus, decode
from hasrd.transcript import Transcript

if TYPE_CHECKING:
    from hasrd.options import Options

log = logging.getLogger("hasr.tray.client")


class DaemonDown(Exception):
    """Nothing accepts connections on the socket."""


class DaemonError(Exception):
    """The daemon answered with an error (``code`` and a human ``message``)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


@contextlib.contextmanager
def _tray_errors() -> Iterator[None]:
    """hasrctl.client's errors as the tray's: a refused or missing socket is DaemonDown, the rest DaemonError."""
    try:
        yield
    except cli.Unreachable as e:
        if isinstance(e.__cause__, (FileNotFoundError, ConnectionRefusedError)):
            raise DaemonDown(e.message) from None
        raise DaemonError("unreachable", e.message) from None
    except cli.DaemonError as e:
        raise DaemonError(e.code, e.detail) from None
    except cli.CliError as e:
        raise DaemonError("connection_lost", e.message) from None


class EventStream:
    """An open ``GET /api/events``: iterate for snapshots; ``close()`` from any thread ends it."""

    def __init__(self, resp: cli.Response) -> None:
        self._resp = resp
        self._closed = threading.Event()

    def __iter__(self) -> Iterator[PoolStatus]:
        try:
            for line in self._resp.lines():
                if self._closed.is_set():
                    return
                if line.strip():
                    yield decode(json.loads(line), PoolStatus)
        except cli.CliError as e:  # the connection broke, or was closed from another thread
            if not self._closed.is_set():
                raise OSError(e.message) from None
        finally:
            self.close()

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        with contextlib.suppress(OSError):
            self._resp.sock.shutdown(socket.SHUT_RDWR)
        self._resp.close()


class Client:
    """hasrd over ``path``; ``timeout`` bounds connecting and short requests."""

    def __init__(self, path: str, timeout: float = 10.0) -> None:
        self.path, self.timeout = path, timeout
        self._client = cli.Client(path, connect_timeout=timeout)

    def request(self, method: str, url: str, body: Any = None) -> Any:
        """One JSON request; the decoded answer or DaemonError."""
        data = None if body is None else json.dumps(body).encode("utf-8")
        headers = {"Content-Type": "application/json"} if data is not None else {}
        with _tray_errors():
            return self._client.request(method, url, data, headers, self.timeout).json()

    def health(self) -> Health:
        return decode(self.request("GET", "/health"), Health)

    def unload(self) -> dict[str, Any]:
        return dict(self.request("POST", "/api/unload"))

    def events(self) -> EventStream:
        """Open the snapshot stream (no read timeout: snapshots come only on changes)."""
        with _tray_errors():
            resp = self._client.request("GET", "/api/events", timeout=self.timeout)
        resp.sock.settimeout(None)
        return EventStream(resp)

    def transcribe(self, path: str, language: str = "", view: View | None = None,
                   options: Options | None = None) -> Transcript:
        """Transcribe the file at absolute ``path`` with ``options`` (the drop window's speakers); ``view`` sees its
        queued/loading/progress events."""
        from hasrctl.transcribe import by_path

        with _tray_errors():
            return by_path(self._client, path, language or None, view or View(), options)


def start_daemon(socket_path: str, timeout: float = 30.0) -> None:
    """Start hasrd on ``socket_path`` as ``hasrctl`` does and wait until it answers (hasrctl.discovery: a
    systemd socket unit when one exists, else ``hasrd --socket PATH --idle-exit HASR_IDLE_EXIT_SEC`` detached,
    its output in ``hasrd.log`` beside the socket, one start at a time under the autostart lock).

    DaemonDown with the reason when no daemon could be started.
    """
    from hasrctl import discovery
    from hasrd import config

    try:
        idle_exit = config.load().idle_exit_sec
    except config.ConfigError as e:
        raise DaemonDown(f"cannot start hasrd: {e}") from None
    try:
        discovery.find(socket_path, autostart=True, idle_exit=idle_exit, timeout=timeout,
                       say=lambda line: log.info("%s", line))
    except cli.CliError as e:
        raise DaemonDown(e.message) from None

"""A small synchronous HTTP/1.1 client for hasrd's Unix socket (the standard library, and hasrd.status's Structs).

``Client.events()`` follows ``GET /api/events`` (NDJSON snapshots, decoded as the daemon's PoolStatus) and can be
closed from another thread; ``Client.health()`` answers ``GET /health`` as its Health;
``Client.transcribe()`` runs ``POST /transcribe`` with ``Accept: application/x-ndjson`` so that progress
arrives as it happens. Failures are ``DaemonDown`` (nothing listens: not running) or ``DaemonError``
(the daemon answered with ``{"error": {"code", "message"}}`` or something unreadable).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

from hasrd.status import Health, PoolStatus, decode

Event = dict[str, Any]
log = logging.getLogger("hasr.tray.client")


class DaemonDown(Exception):
    """Nothing accepts connections on the socket."""


class DaemonError(Exception):
    """The daemon answered with an error (``code`` and a human ``message``)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float | None) -> None:
        super().__init__("hasrd", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except (FileNotFoundError, ConnectionRefusedError) as e:
            sock.close()
            raise DaemonDown(f"nothing listens on {self._path} ({e.strerror})") from None
        except OSError:
            sock.close()
            raise
        self.sock = sock


def _error_of(status: int, body: bytes) -> DaemonError:
    try:
        err = json.loads(body)["error"]
        return DaemonError(str(err.get("code") or status), str(err.get("message") or err))
    except (ValueError, KeyError, TypeError, AttributeError):
        text = body.decode("utf-8", "replace").strip()[:200]
        return DaemonError(f"http_{status}", text or f"HTTP {status}")


class EventStream:
    """An open ``GET /api/events``: iterate for snapshots; ``close()`` from any thread ends it."""

    def __init__(self, conn: _UnixConnection, resp: http.client.HTTPResponse) -> None:
        self._conn, self._resp = conn, resp
        self._closed = threading.Event()

    def __iter__(self) -> Iterator[PoolStatus]:
        try:
            while not self._closed.is_set():
                line = self._resp.readline()
                if not line:
                    return
                line = line.strip()
                if line:
                    yield decode(json.loads(line), PoolStatus)
        except Exception:  # closing from another thread surfaces as assorted errors inside http.client
            if not self._closed.is_set():
                raise
        finally:
            self.close()

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        sock = self._conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._conn.close()


class Client:
    """hasrd over ``path``; ``timeout`` bounds connecting and short requests."""

    def __init__(self, path: str, timeout: float = 10.0) -> None:
        self.path, self.timeout = path, timeout

    def _open(self, method: str, url: str, body: Any = None, headers: dict[str, str] | None = None,
              timeout: float | None = None) -> tuple[_UnixConnection, http.client.HTTPResponse]:
        conn = _UnixConnection(self.path, self.timeout if timeout is None else timeout)
        data = None if body is None else json.dumps(body).encode("utf-8")
        hdrs = {"Content-Type": "application/json"} if data is not None else {}
        hdrs.update(headers or {})
        try:
            conn.request(method, url, body=data, headers=hdrs)
            return conn, conn.getresponse()
        except BaseException:
            conn.close()
            raise

    def request(self, method: str, url: str, body: Any = None) -> Any:
        """One JSON request; the decoded answer or DaemonError."""
        conn, resp = self._open(method, url, body)
        try:
            raw = resp.read()
        finally:
            conn.close()
        if resp.status >= 400:
            raise _error_of(resp.status, raw)
        try:
            return json.loads(raw) if raw else {}
        except ValueError:
            raise DaemonError("bad_answer", f"{url} answered something that is not JSON") from None

    def health(self) -> Health:
        return decode(self.request("GET", "/health"), Health)

    def unload(self) -> dict[str, Any]:
        return dict(self.request("POST", "/api/unload"))

    def events(self) -> EventStream:
        """Open the snapshot stream (no read timeout: snapshots come only on changes)."""
        conn, resp = self._open("GET", "/api/events", timeout=self.timeout)
        if resp.status >= 400:
            raw = resp.read()
            conn.close()
            raise _error_of(resp.status, raw)
        if conn.sock is not None:
            conn.sock.settimeout(None)
        return EventStream(conn, resp)

    def transcribe(self, path: str, language: str = "", on_event: Callable[[Event], None] | None = None,
                   cancel: threading.Event | None = None) -> dict[str, Any]:
        """Transcribe the file at absolute ``path``; ``on_event`` sees queued/loading/progress events."""
        body: dict[str, Any] = {"audio_path": path}
        if language:
            body["language"] = language
        conn, resp = self._open("POST", "/transcribe", body, {"Accept": "application/x-ndjson"})
        try:
            if conn.sock is not None:
                conn.sock.settimeout(None)
            if resp.status >= 400:
                raise _error_of(resp.status, resp.read())
            if "ndjson" not in (resp.getheader("Content-Type") or ""):
                return dict(json.loads(resp.read()))  # a daemon that does not stream: the result itself
            for line in resp:
                if cancel is not None and cancel.is_set():
                    raise DaemonError("cancelled", "cancelled by the user")
                if not line.strip():
                    continue
                ev = json.loads(line)
                kind = ev.get("event")
                if kind == "done":
                    return dict(ev.get("result") or {})
                if kind == "error":
                    err = ev.get("error") or {}
                    raise DaemonError(str(err.get("code") or "error"), str(err.get("message") or err))
                if on_event is not None:
                    on_event(ev)
            raise DaemonError("incomplete", "the daemon closed the connection before the result")
        except (OSError, ValueError, http.client.HTTPException) as e:
            raise DaemonError("connection_lost", f"lost the daemon mid-transcription: {e}") from e
        finally:
            conn.close()


def start_daemon(socket_path: str, timeout: float = 30.0) -> None:
    """Start hasrd on ``socket_path`` as ``hasrctl`` does and wait until it answers (hasrctl.discovery: a
    systemd socket unit when one exists, else ``hasrd --socket PATH --idle-exit HASR_IDLE_EXIT_SEC`` detached,
    its output in ``hasrd.log`` beside the socket, one start at a time under the autostart lock).

    DaemonDown with the reason when no daemon could be started.
    """
    from hasrctl import discovery
    from hasrctl.client import CliError
    from hasrd import config

    try:
        idle_exit = config.load().idle_exit_sec
    except config.ConfigError as e:
        raise DaemonDown(f"cannot start hasrd: {e}") from None
    try:
        discovery.find(socket_path, autostart=True, idle_exit=idle_exit, timeout=timeout,
                       say=lambda line: log.info("%s", line))
    except CliError as e:
        raise DaemonDown(e.message) from None

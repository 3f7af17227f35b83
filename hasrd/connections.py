"""The daemon's connections: who is calling (SO_PEERCRED), how many may be open, how long a request may take
to arrive, which ones only observe, and a log that stays readable under a flood.

uvicorn's h11 protocol does the HTTP; :class:`PeerProtocol` adds what a local service on a shared machine
needs around it (issue 11: a flood of idle connections used to exhaust 1,024 descriptors, lock /health out
and log 23,870 tracebacks).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import resource
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

log = logging.getLogger("hasrd")

DRAIN_WAIT_SEC = 2.0  # how long an accepted connection with no request yet may take to send one at exit
PEEKS_PER_ACCEPT = 4  # at most this many candidates are looked at when a connection over the cap arrives
TOO_LARGE_DRAIN_SEC = 10.0  # after a message over the size limit: how long its rest is read and discarded
SHUTDOWN_HOOK = "hasr.on_shutdown"  # a WebSocket scope's key: called at the daemon's stop instead of a close
OBSERVE = frozenset({"/health", "/api/ps", "/api/version", "/api/events"})  # GETs that only observe


def peer_of(transport: asyncio.BaseTransport) -> tuple[str, int] | None:
    """``("peer:PID:GID", UID)`` of a Unix-socket peer (SO_PEERCRED); None over TCP."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family == socket.AF_UNIX:
        try:
            creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        except OSError:
            return None
        pid, uid, gid = struct.unpack("3i", creds)
        return (f"peer:{pid}:{gid}", uid)
    return None


class PeerWebSocket(WebSocketsSansIOProtocol):
    """uvicorn's WebSocket protocol (the ``websockets`` library, sans-I/O) with the peer's credentials in
    ``scope["client"]``, as :class:`PeerProtocol` gives them to HTTP requests.

    Two departures from uvicorn's: at the daemon's stop a connection whose application left a shutdown hook in
    its scope (``SHUTDOWN_HOOK``: a live session finishing the speech it received) is asked to close itself
    instead of being closed with 1012 at once, and closed anyway once the seconds the hook returns (plus a
    margin) are past; a message over the size limit is answered with an ``error`` event before the 1009 close
    the ``websockets`` library sends, instead of the bare close."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.client = peer_of(transport) or self.client  # type: ignore[assignment]

    def shutdown(self) -> None:
        hook = getattr(self, "scope", {}).get(SHUTDOWN_HOOK)
        if hook is not None and self.handshake_complete and not self.close_sent and not self.transport.is_closing():
            grace = float(hook())
            self.loop.call_later(grace + 2.0, self._shutdown_now)
            return
        super().shutdown()

    def _shutdown_now(self) -> None:
        if not self.transport.is_closing():
            super().shutdown()

    def handle_parser_exception(self) -> None:
        sent = self.conn.close_sent
        if sent is None or sent.code != 1009 or not self.handshake_complete or self.transport.is_closing():
            super().handle_parser_exception()
            return
        from websockets.frames import Frame, Opcode

        from hasrd.realtime_events import too_large_event

        ev = json.dumps(too_large_event()).encode()
        self.queue.put_nowait({"type": "websocket.disconnect", "code": sent.code, "reason": sent.reason})
        # the error ahead of the close frame; then the rest of the message is read and discarded for a while
        # instead of closing at once: a client still sending it would meet a reset and could lose both unread
        self.transport.write(Frame(Opcode.TEXT, ev).serialize(mask=False) + b"".join(self.conn.data_to_send()))
        self.close_sent = True
        self.close_timer = self.loop.call_later(TOO_LARGE_DRAIN_SEC, self.transport.close)


class PeerProtocol(H11Protocol):
    """uvicorn's h11 protocol plus SO_PEERCRED, a connection cap, read timeouts and a gentler exit.

    - SO_PEERCRED: ``scope["client"]`` is ``("peer:PID:GID", UID)`` on the Unix socket.
    - The cap (:meth:`configure`): past ``max_connections`` open connections, a new one closes the oldest
      connection that is not in a request and has no request waiting unread (a flood of idle connections cannot
      lock /health out, nor use up the daemon's file descriptors); when every connection is in a request, the new
      one gets a 503.
    - Read timeouts: a request's headers must arrive within ``read_timeout`` seconds of the connection (or of
      the previous response), and its body may not stall longer than that; else 408 and close. Such a
      connection would otherwise hold the daemon's idle exit for ever.
    - Observation: a connection whose requests were all GETs of OBSERVE (/health, /api/ps, /api/version,
      /api/events) neither holds the daemon's idle exit nor restarts its clock (:meth:`working`,
      :meth:`last_work`); a tray polling /health must not keep a socket-activated daemon alive.
    - At exit, a connection accepted just before whose request has not arrived yet gets DRAIN_WAIT_SEC to send
      it instead of being closed: the client already connected, so closing it would lose its request.
    """

    max_connections = 1024
    read_timeout = 30.0
    on_activity: Callable[[], None] = staticmethod(lambda: None)
    _open: dict[PeerProtocol, None] = {}
    _evictable: dict[PeerProtocol, None] = {}  # between requests, oldest idle first (an ordered set)
    _shed: list[Burst] = []  # the Burst that counts connections closed by the cap (one per server)
    _got_data = False
    _draining = False
    _evicted = False
    _refusing = False
    _worked = False  # carried a request that is not observation
    _observed = False  # carried an observation request
    _cycle_seen: Any = None
    _work_ended = [0.0]  # when the last working connection closed (time.monotonic())

    @classmethod
    def configure(cls, max_connections: int, read_timeout: float,
                  on_activity: Callable[[], None] = lambda: None) -> type[PeerProtocol]:
        """A subclass with its own limits and connection registry (one per server)."""
        return type("HasrProtocol", (cls,), {"max_connections": max_connections, "read_timeout": read_timeout,
                                             "on_activity": staticmethod(on_activity), "_open": {}, "_evictable": {},
                                             "_shed": [], "_work_ended": [0.0]})

    @classmethod
    def working(cls) -> int:
        """Open connections that hold the daemon up: any but those that have only observed."""
        return sum(1 for c in cls._open if c._worked or not c._observed)

    @classmethod
    def last_work(cls) -> float:
        return cls._work_ended[0]

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.client = peer_of(transport) or self.client
        self._last_data = self._waiting_since = self.loop.time()
        self._open[self] = None
        self._evictable[self] = None
        self._read_timer: asyncio.TimerHandle | None = self.loop.call_later(self.read_timeout, self._check_read)
        if len(self._open) > self.max_connections:
            victim = self._victim()
            if victim is not None:
                victim._drop()
            else:  # answered once its request is in: closing on unread data would reset it unanswered
                self._refusing = True
                self._open.pop(self, None)
                self._evictable.pop(self, None)
                self.loop.call_later(1.0, self._refuse)
        self.on_activity()

    def _victim(self) -> PeerProtocol | None:
        """The connection to close for a new one over the cap: the one idle longest with no request waiting
        unread. Bounded work per accept (issue 21: scanning and peeking every open connection on each accept
        cost over-cap x cap syscalls during a burst and stalled the loop until the watchdog fired): at most
        PEEKS_PER_ACCEPT candidates, taken from the front of the ordered set; one found with a request waiting
        leaves the set until its next response, so each connection is peeked at most once per idle spell."""
        for _ in range(PEEKS_PER_ACCEPT):
            candidate = next((c for c in self._evictable if c is not self), None)
            if candidate is None:
                return None
            self._evictable.pop(candidate, None)
            if candidate._between_requests() and not candidate._request_waiting():
                return candidate
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self._open.pop(self, None)
        self._evictable.pop(self, None)
        if self._worked:
            self._work_ended[0] = time.monotonic()
        if self._read_timer is not None:
            self._read_timer.cancel()
        self.on_activity()

    def data_received(self, data: bytes) -> None:
        if self._refusing:
            self._refuse()
            return
        self._got_data = True
        self._last_data = self.loop.time()
        self._evictable.pop(self, None)
        super().data_received(data)
        if self.cycle is not None and self.cycle is not self._cycle_seen:  # a new request
            self._cycle_seen = self.cycle
            scope = self.cycle.scope
            if scope.get("method") == "GET" and scope.get("path") in OBSERVE:
                self._observed = True
            elif not self._worked:
                self._worked = True
                self.on_activity()
        if self._draining and self.cycle is not None:
            self.cycle.keep_alive = False

    def handle_websocket_upgrade(self, event: h11.Request) -> None:
        """A WebSocket (/v1/realtime) leaves the cap and the read timeouts: a live session is admitted and
        bounded like a job (HASR_MAX_QUEUE) and has its own idle limit (HASR_LIVE_IDLE_SEC)."""
        self._open.pop(self, None)
        self._evictable.pop(self, None)
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None
        super().handle_websocket_upgrade(event)

    def on_response_complete(self) -> None:
        self._waiting_since = self.loop.time()
        if self.conn.their_state is h11.SEND_BODY and not self.transport.is_closing():
            # Answered before its body was read (413, a malformed form): reading and discarding the rest (up
            # to HASR_MAX_UPLOAD_MB) would hold the connection and the idle exit, and end in a 408 nobody asked
            # for (issue 21 #4). Close instead.
            self.transport.close()
        super().on_response_complete()
        if not self._evicted and not self.transport.is_closing() and self in self._open:
            self._evictable.pop(self, None)
            self._evictable[self] = None  # to the back: idle from now

    def _request_waiting(self) -> bool:
        """Whether bytes the loop has not read yet wait on this connection: in a burst of accepts, a client
        that connected first and sent its request at once is still "between requests" here."""
        sock = self.transport.get_extra_info("socket")
        if sock is None:
            return False
        try:
            with socket.socket(fileno=os.dup(sock.fileno())) as peek:  # a second descriptor, to peek with
                return bool(peek.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
        except OSError:  # nothing waiting (EAGAIN), or the connection is gone: either way no request
            return False

    def _refuse(self) -> None:
        if not self.transport.is_closing():
            self._drop(b"503 Service Unavailable", f"too many connections ({self.max_connections}, "
                                                   f"HASR_MAX_CONNECTIONS), every one in a request; try again")

    def _between_requests(self) -> bool:
        return not self._evicted and (self.cycle is None or self.cycle.response_complete)

    def _check_read(self) -> None:
        """The read timeouts, on one timer per connection that is moved to the next deadline."""
        self._read_timer = None
        if self.transport.is_closing():
            return
        now = self.loop.time()
        if self._between_requests():
            deadline = max(self._waiting_since, 0.0) + self.read_timeout
            what = "its request's headers did not arrive"
        elif self.cycle is not None and self.cycle.more_body and not self.cycle.response_started:
            deadline = self._last_data + self.read_timeout
            what = "its request's body stalled"
        else:  # the app is answering: its own business
            deadline = now + self.read_timeout
            what = ""
        if now < deadline:
            self._read_timer = self.loop.call_later(deadline - now, self._check_read)
            return
        log.debug("closing a connection: %s within %g s", what, self.read_timeout)
        self._drop(b"408 Request Timeout", f"{what} within {self.read_timeout:g} s (HASR_READ_TIMEOUT_SEC)")

    def _drop(self, status: bytes = b"", message: str = "") -> None:
        """Close this connection, with a last JSON error response when ``status`` is given (nothing was sent
        on it since its last response, so the client can read one)."""
        self._evicted = True
        self._open.pop(self, None)
        self._evictable.pop(self, None)
        if status:
            body = json.dumps({"error": {"code": "too_many_connections" if status.startswith(b"503") else
                                         "request_timeout", "message": message}}).encode()
            head = (b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\nconnection: close\r\n"
                    + (b"retry-after: 5\r\n" if status.startswith(b"503") else b"")
                    + b"content-length: " + str(len(body)).encode() + b"\r\n\r\n")
            with contextlib.suppress(Exception):
                self.transport.write(head + body)
        if status.startswith(b"503") or not status:
            self._count_shed()
        self.transport.close()

    def _count_shed(self) -> None:
        """The first connection shed logs at once; the rest of the flood is counted and reported when it ends."""
        if not self._shed:
            self._shed.append(Burst(f"connection(s) closed by the connection cap ({self.max_connections}, "
                                    f"HASR_MAX_CONNECTIONS)"))
        self._shed[0].note(f"connection cap ({self.max_connections}, HASR_MAX_CONNECTIONS) reached: closing the "
                           f"oldest idle connections (or answering 503); the count follows when the flood is over")

    def shutdown(self) -> None:
        if self.cycle is None and not self._got_data and not self._draining:
            self._draining = True
            asyncio.get_running_loop().call_later(DRAIN_WAIT_SEC, self._late_close)
            return
        super().shutdown()

    def _late_close(self) -> None:
        if self.cycle is None and not self.transport.is_closing():
            self.transport.close()


BURST_QUIET_SEC = 5.0  # a burst of one kind of log line is over after this long without one


class Burst:
    """One kind of event that a flood can repeat (a malformed request, a connection shed): the first of a burst
    is logged at once, the rest are counted, and when none came for BURST_QUIET_SEC one line reports the burst
    ("312 invalid HTTP requests in the last 5 s"), so 5,000 of them write two lines, not 5,000 (issue 21 #5)."""

    def __init__(self, what: str, quiet: float = BURST_QUIET_SEC) -> None:
        self.what, self.quiet = what, quiet
        self.count = 0
        self.started = self.last = 0.0
        self.timer: asyncio.TimerHandle | None = None

    def note(self, first_line: str | None = None) -> bool:
        """Count one; True when it opens a burst (the caller logs it; ``first_line`` is logged here)."""
        now = time.monotonic()
        self.last = now
        self.count += 1
        opened = self.count == 1
        if opened:
            self.started = now
            if first_line:
                log.warning("%s", first_line)
        if self.timer is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return opened
            self.timer = loop.call_later(self.quiet, self._check)
        return opened

    def _check(self) -> None:
        self.timer = None
        now = time.monotonic()
        if now - self.last < self.quiet:
            self.timer = asyncio.get_running_loop().call_later(self.quiet - (now - self.last), self._check)
            return
        if self.count > 1:
            log.warning("%d %s in the last %.0f s (the burst is over)", self.count, self.what,
                        max(1.0, self.last - self.started))
        self.count = 0


class BurstFilter(logging.Filter):
    """A log line that a flood repeats (uvicorn's "Invalid HTTP request received." per malformed request),
    collapsed into bursts (:class:`Burst`): the first is kept, the rest are reported when the burst is over."""

    def __init__(self, needle: str, what: str, quiet: float = BURST_QUIET_SEC) -> None:
        super().__init__()
        self.needle = needle
        self.burst = Burst(what, quiet)

    def filter(self, record: logging.LogRecord) -> bool:
        if self.needle not in str(record.msg):
            return True
        return self.burst.note()


class RateLimited(logging.Filter):
    """Collapse a repeated log message (asyncio's "socket.accept() out of system resource", logged with a
    traceback at every accept while file descriptors are exhausted) to one line per ``interval`` seconds."""

    def __init__(self, needle: str, interval: float = 60.0) -> None:
        super().__init__()
        self.needle, self.interval = needle, interval
        self.last = -interval
        self.dropped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if self.needle not in str(record.msg):
            return True
        now = time.monotonic()
        if now - self.last < self.interval:
            self.dropped += 1
            return False
        self.last = now
        record.msg = f"{record.msg} (no more file descriptors; {self.dropped} more like this not logged; " \
                     f"raise LimitNOFILE or lower HASR_MAX_CONNECTIONS)"
        record.exc_info = None
        record.exc_text = None
        self.dropped = 0
        return True


def raise_nofile(want: int = 65536) -> int:
    """Raise the soft file-descriptor limit towards the hard one (the units set LimitNOFILE); return it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    return int(soft)

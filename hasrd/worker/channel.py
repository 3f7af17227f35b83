"""The worker's end of the daemon's socketpair (a leaf module): framed writes under a lock, and the reader thread
that keeps the channel live: it answers ``Ping``, flags ``Cancel``, routes a live session's frames to that
session, collects the file descriptors that come with ``Transcribe``, and ends the process when the daemon's end
closes (the daemon died or gave up on us)."""

from __future__ import annotations

import array
import os
import queue
import socket
import sys
import threading

from hasrd import protocol as p

Inbox = queue.Queue[p.DaemonMsg]


class Channel:
    """The worker's end of the socketpair: framed writes under a lock, a reader thread with fd passing."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.wlock = threading.Lock()
        self.inbox: Inbox = queue.Queue()  # jobs to start, and Shutdown
        self.fds: list[int] = []
        self.fds_lock = threading.Lock()
        self.cancelled: set[int] = set()
        self.sessions: dict[int, Inbox] = {}  # live sessions' frames, by request id
        self.shutdown = threading.Event()
        self.ignore_shutdown = False

    def send(self, msg: p.Msg) -> None:
        data = p.encode(msg)
        with self.wlock:
            self.sock.sendall(data)

    def reader(self) -> None:
        buf = bytearray()
        fd_size = array.array("i").itemsize
        while True:
            try:
                data, anc, _flags, _addr = self.sock.recvmsg(1 << 16, socket.CMSG_SPACE(16 * fd_size))
            except InterruptedError:  # pragma: no cover
                continue
            except OSError:
                data, anc = b"", []
            for level, kind, payload in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds = array.array("i")
                    fds.frombytes(payload[: len(payload) - (len(payload) % fd_size)])
                    with self.fds_lock:
                        self.fds.extend(fds)
            if not data:
                # The daemon's end is closed: it died or abandoned us. Nobody will read a result.
                os._exit(0)
            buf += data
            try:
                frames = p.split_frames(buf)
                for body in frames:
                    self.dispatch(p.decode_daemon(body))
            except p.FrameError as e:
                print(f"hasr worker: {e}; exiting", file=sys.stderr, flush=True)
                os._exit(65)

    def dispatch(self, msg: p.DaemonMsg) -> None:
        match msg:
            case p.Ping():
                self.send(p.Pong(nonce=msg.nonce))
            case p.Cancel():
                self.cancelled.add(msg.id)
            case p.Shutdown():
                if not self.ignore_shutdown:
                    self.shutdown.set()
                    self.inbox.put(msg)
            case p.LiveAudio() | p.LiveCommit() | p.LiveEnd():
                session = self.sessions.get(msg.id)
                if session is not None:  # else a session that already failed or was cancelled: nothing to do
                    session.put(msg)
            case p.LiveStart():  # its frames may arrive before its thread starts
                self.sessions.setdefault(msg.id, queue.Queue())
                self.inbox.put(msg)
            case _:
                self.inbox.put(msg)

    def take_fd(self) -> int:
        with self.fds_lock:
            if not self.fds:
                raise OSError("Transcribe said pcm=fd but no file descriptor arrived with it")
            return self.fds.pop(0)

    def cancelled_or_shut(self, req_id: int) -> bool:
        """Whether job ``req_id`` was cancelled, or the worker is shutting down (its jobs see that as a cancel)."""
        return req_id in self.cancelled or self.shutdown.is_set()

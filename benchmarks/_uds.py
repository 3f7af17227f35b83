"""One HTTP/1.1 request over the daemon's Unix socket, with nothing but the standard library (shared by the
benchmarks, so that the client's own cost stays out of what they measure)."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from typing import Any


def http(sock: str, method: str = "GET", path: str = "/health", body: bytes = b"") -> tuple[int, bytes]:
    """(status, body) of one request on a fresh connection."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(sock)
        s.sendall(f"{method} {path} HTTP/1.1\r\nHost: hasr\r\nContent-Length: {len(body)}\r\n"
                  f"Content-Type: application/json\r\nConnection: close\r\n\r\n".encode() + body)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    finally:
        s.close()
    head, _, payload = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), payload


def http_json(sock: str, method: str = "GET", path: str = "/health", body: bytes = b"") -> tuple[int, Any]:
    status, payload = http(sock, method, path, body)
    return status, json.loads(payload or b"{}")


def transcribe_events(sock: str, request: dict[str, Any],
                      on_event: Callable[[dict[str, Any], float], None]) -> tuple[socket.socket, threading.Thread]:
    """POST /transcribe asking for NDJSON events; a thread calls ``on_event(event, time.monotonic())`` for each
    as it arrives and ends with the stream. Closing the returned socket is the client leaving."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sock)
    body = json.dumps(request).encode()
    s.sendall(f"POST /transcribe HTTP/1.1\r\nHost: hasr\r\nAccept: application/x-ndjson\r\nContent-Type: "
              f"application/json\r\nConnection: close\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)

    def read() -> None:
        buf = b""
        try:
            while chunk := s.recv(65536):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip().startswith(b"{"):  # chunk sizes and blank lines are not events
                        on_event(json.loads(line), time.monotonic())
        except OSError:
            pass  # the socket was closed here: the client left

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return s, reader

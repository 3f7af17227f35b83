"""One HTTP/1.1 request over the daemon's Unix socket, with nothing but the standard library (shared by the
benchmarks, so that the client's own cost stays out of what they measure)."""

from __future__ import annotations

import json
import socket
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

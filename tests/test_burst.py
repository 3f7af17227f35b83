"""A burst of connections over the cap costs bounded work per accept (issue 21, defect 1).

The cap used to scan every open connection and MSG_PEEK each one between requests on every accept over it:
during a burst none had been read yet, so the loop made over-cap x cap syscalls (756,198 peeks for 2,000
connections) and systemd's watchdog killed the daemon. The structural property is tested here, on the real
protocol class serving a real Unix socket, by counting the peeks (the one per-connection syscall of the cap)
through a seam; benchmarks/burst.py measures the latency.
"""

from __future__ import annotations

import asyncio
import os
import resource
import socket
import threading
from typing import Any

import uvicorn

from hasrd import connections
from hasrd.connections import PeerProtocol
from tests.conftest import wait_until


async def _ok(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"ok"})


def _serve(path: str, cap: int) -> tuple[type[PeerProtocol], uvicorn.Server, threading.Thread]:
    protocol = PeerProtocol.configure(cap, 30.0)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    sock.listen(4096)
    server = uvicorn.Server(uvicorn.Config(_ok, http=protocol, lifespan="off", log_config=None, access_log=False,
                                           backlog=4096))
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
    thread.start()
    assert wait_until(lambda: server.started, 20)
    return protocol, server, thread


def test_a_burst_over_the_cap_peeks_a_bounded_number_of_connections_per_accept(short_tmp: str,
                                                                              monkeypatch: Any) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 4096)), hard))
    peeks = [0]
    real = PeerProtocol._request_waiting

    def counted(self: PeerProtocol) -> bool:
        peeks[0] += 1
        return real(self)

    monkeypatch.setattr(PeerProtocol, "_request_waiting", counted)
    cap, burst = 64, 700
    path = os.path.join(short_tmp, "b.sock")
    protocol, server, thread = _serve(path, cap)
    clients: list[socket.socket] = []
    try:
        for _ in range(burst):  # every one connects and sends its request before the loop reads any
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(path)
            s.sendall(b"GET /health HTTP/1.1\r\nHost: hasr\r\n\r\n")
            clients.append(s)
        answered = 0
        for s in clients:
            s.settimeout(30)
            with_answer = s.recv(64)
            answered += with_answer.startswith(b"HTTP/1.1 ")
        over = burst - cap
        # Each accept over the cap looks at PEEKS_PER_ACCEPT candidates at most; a candidate found with a
        # request waiting leaves the ordered set, so the whole burst peeks at most once per connection more.
        assert peeks[0] <= min(over * connections.PEEKS_PER_ACCEPT, burst + over), peeks[0]
        assert answered == burst  # each got an answer: its response, or a 503 after its request was read
    finally:
        for s in clients:
            s.close()
        server.should_exit = True
        thread.join(30)

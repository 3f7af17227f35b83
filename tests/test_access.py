"""One access rule on every route (issue 21 #6).

/health, /api/version (with the daemon's pid) and /v1/models used to answer any uid that could connect (a 0666
socket, the optional TCP socket), and over TCP neither Host nor Origin was checked, so a web page could reach
the daemon by DNS rebinding and run uploads on the user's CPU.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import need
from tests.daemon import Hasrd, TcpHasrd, client
from tests.test_daemon_errors import as_nobody

READS = ["/health", "/api/version", "/v1/models", "/v1/models/whisper-1"]


def test_a_stranger_on_an_open_socket_is_refused_on_every_read(short_tmp: str) -> None:
    need(os.getuid() == 0, "needs root to act as another user")
    os.chmod(short_tmp, 0o755)
    d = Hasrd(os.path.join(short_tmp, "s.sock"))
    try:
        os.chmod(d.sock, 0o666)
        for path in READS:
            out = subprocess.run(["curl", "-s", "-w", "\n%{http_code}", "--unix-socket", d.sock, f"http://hasr{path}"],
                                 capture_output=True, text=True, timeout=30, preexec_fn=as_nobody).stdout
            assert out.endswith("\n403") and '"code":"forbidden"' in out and "uid 65534" in out, (path, out)
            assert str(d.proc.pid) not in out.rsplit("\n", 1)[0] or path != "/api/version"
        with d.client() as c:  # the owner (the tray) keeps every read
            for path in READS:
                assert c.get(path).status_code == 200, path
    finally:
        d.stop()


@pytest.fixture
def tcp_daemon(short_tmp: str) -> Iterator[tuple[int, str]]:
    """An activated daemon with the unit's optional TCP socket and an allowed origin."""
    d = TcpHasrd(short_tmp, {"HASR_ALLOWED_ORIGINS": "http://localhost:3000, http://127.0.0.1:5173/"})
    try:
        yield d.port, d.sock
    finally:
        assert d.close() == 0


@pytest.mark.parametrize("headers,status", [
    ({}, 200),  # Host: 127.0.0.1:PORT, what any local client sends
    ({"Host": "localhost:PORT"}, 200),
    ({"Host": "evil.example:PORT"}, 403),  # DNS rebinding: the page's own name
    ({"Host": "127.0.0.1:1"}, 403),
    ({"Host": ""}, 403),
    ({"Origin": "http://evil.example"}, 403),  # a cross-site page
    ({"Origin": "null"}, 403),
    ({"Origin": "http://localhost:3000"}, 200),  # named in HASR_ALLOWED_ORIGINS
    ({"Origin": "http://127.0.0.1:5173"}, 200),
])
def test_over_tcp_the_host_must_be_the_bound_address_and_a_browser_origin_must_be_allowed(
        tcp_daemon: tuple[int, str], headers: dict[str, str], status: int) -> None:
    port, unix_path = tcp_daemon
    headers = {k: v.replace("PORT", str(port)) for k, v in headers.items()}
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as c:
        for path in ("/health", "/v1/models", "/api/version"):
            r = c.get(path, headers=headers)
            assert r.status_code == status, (path, headers, r.text)
            if status == 403:
                assert r.json()["error"]["code"] == "forbidden"
        r = c.post("/v1/audio/transcriptions", headers=headers, files={"file": ("a.wav", b"RIFF")})
        assert (r.status_code == 403) == (status == 403), r.text
    with client(unix_path) as c:  # the Unix socket has no Host rule: its callers are known by uid
        assert c.get("/health", headers={"Host": "evil.example", "Origin": "http://evil.example"}).status_code == 200

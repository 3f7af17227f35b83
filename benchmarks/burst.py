"""/health latency after a burst of connections (issue 21 #1), for this tree and, with --against REV, for an older
revision extracted with `git archive` into a temporary directory.

Each burst: N connections to the daemon's Unix socket, each sending `GET /health` at once (the daemon reads none
of them before the burst is queued), then a probe on a fresh connection, repeated on 503 (the cap answers "every
connection is in a request, retry") until /health says 200. Printed: the probe's latency from the end of the
burst, and how many of the burst's connections got an answer. Bounded: at most 4,000 connections, each wait at
most --limit seconds, the daemon's socket only.

    python3 benchmarks/burst.py                      # this tree, 1,000-4,000
    python3 benchmarks/burst.py --against 8336699~1  # and the code before the bounded cap, for a ratio
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def start(tree: str, sock: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "HASR_ENGINE": "fake", "PYTHONPATH": tree}
    proc = subprocess.Popen([sys.executable, "-m", "hasrd.server", "--socket", sock], cwd=tree, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    end = time.monotonic() + 30
    while time.monotonic() < end:
        if probe(sock, 2) == 200:
            return proc
        time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"hasrd in {tree} did not start")


def probe(sock: str, limit: float) -> int:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(limit)
    try:
        s.connect(sock)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: hasr\r\nConnection: close\r\n\r\n")
        head = s.recv(16)
        return int(head[9:12]) if head.startswith(b"HTTP/1.1 ") else 0
    except OSError:
        return 0
    finally:
        s.close()


def burst(sock: str, n: int, limit: float) -> tuple[float, int]:
    """(seconds from the burst's end to a 200 from /health, or -1; connections of the burst answered)."""
    conns = []
    for _ in range(n):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(limit)
        s.connect(sock)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: hasr\r\n\r\n")
        conns.append(s)
    t0 = time.monotonic()
    latency = -1.0
    while time.monotonic() - t0 < limit:
        code = probe(sock, max(0.1, limit - (time.monotonic() - t0)))
        if code == 200:
            latency = time.monotonic() - t0
            break
        if code != 503:
            break
        time.sleep(0.05)
    answered = 0
    for s in conns:
        with contextlib.suppress(OSError):
            answered += s.recv(16).startswith(b"HTTP/1.1 ")
        s.close()
    return latency, answered


def run(tree: str, sizes: list[int], limit: float) -> dict[int, float]:
    out = {}
    for n in sizes:
        base = tempfile.mkdtemp(prefix="hb", dir="/tmp")
        sock = os.path.join(base, "s.sock")
        proc = start(tree, sock)
        try:
            latency, answered = burst(sock, n, limit)
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            shutil.rmtree(base, ignore_errors=True)
        shown = f"{latency:6.2f} s" if latency >= 0 else f"> {limit:g} s (no answer)"
        print(f"  {n:5d} connections: /health after {shown}; {answered}/{n} of the burst answered", flush=True)
        out[n] = latency if latency >= 0 else limit
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,2000,3000,4000")
    ap.add_argument("--against", metavar="REV", help="also measure this git revision's hasrd")
    ap.add_argument("--limit", type=float, default=60.0, help="longest wait for /health (seconds)")
    a = ap.parse_args()
    sizes = [min(4000, int(x)) for x in a.sizes.split(",")]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 9000)), hard))  # the daemon inherits it
    print(f"this tree ({ROOT}):")
    now = run(ROOT, sizes, a.limit)
    if a.against:
        old = tempfile.mkdtemp(prefix="hbold", dir="/tmp")
        try:
            archive = subprocess.run(["git", "-C", ROOT, "archive", a.against, "hasrd"], capture_output=True,
                                     check=True).stdout
            subprocess.run(["tar", "-x", "-C", old], input=archive, check=True)
            print(f"{a.against}:")
            before = run(old, sizes, a.limit)
        finally:
            shutil.rmtree(old, ignore_errors=True)
        for n in sizes:
            print(f"  {n:5d}: {before[n] / max(now[n], 1e-3):.0f}x faster now ({before[n]:.2f} s -> {now[n]:.2f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

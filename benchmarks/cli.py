"""``hasrctl status`` wall time against a running daemon (target: median <= 0.15 s).

The client must not import the server or GPU stacks; this measures what a person waits for, process start
included. Runs a fake-engine hasrd on a temporary socket, then ``hasrctl status`` N times.

    python benchmarks/cli.py [--runs 20]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGET_S = 0.15


def wait_for(path: str, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        s = socket.socket(socket.AF_UNIX)
        try:
            s.connect(path)
            return
        except OSError:
            time.sleep(0.05)
        finally:
            s.close()
    raise SystemExit(f"hasrd did not come up on {path}")


def command() -> list[str]:
    """The installed console script next to this interpreter (what a person runs), else python -m hasrctl."""
    script = Path(sys.executable).parent / "hasrctl"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "hasrctl"]


def timed(cmd: list[str], env: dict[str, str], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        res = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        out.append(time.perf_counter() - t0)
        if res.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed ({res.returncode}): {res.stderr.decode().strip()}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    base = tempfile.mkdtemp(prefix="h", dir="/tmp")
    sock = os.path.join(base, "s.sock")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HASR_")}
    env.update({"HASR_ENGINE": "fake", "HASR_SOCKET": sock, "XDG_CONFIG_HOME": base,
                "PYTHONPATH": str(REPO) + os.pathsep + env.get("PYTHONPATH", "")})
    with open(os.path.join(base, "hasrd.log"), "wb") as log:
        daemon = subprocess.Popen([sys.executable, "-m", "hasrd.server", "--socket", sock], env=env, stdout=log,
                                  stderr=subprocess.STDOUT, cwd=str(REPO))
    try:
        wait_for(sock)
        cmd = [*command(), "status"]
        timed(cmd, env, 3)  # warm the page cache and .pyc files
        status = timed(cmd, env, args.runs)
        bare = timed([sys.executable, "-c", "pass"], env, args.runs)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(30)
        shutil.rmtree(base, ignore_errors=True)
    med, p90 = statistics.median(status), sorted(status)[int(0.9 * (len(status) - 1))]
    print(f"command: {' '.join(cmd)}  ({args.runs} runs, {os.cpu_count()} cpus)")
    print(f"hasrctl status  median {med * 1000:6.1f} ms  p90 {p90 * 1000:6.1f} ms  min {min(status) * 1000:6.1f} ms")
    print(f"python -c pass  median {statistics.median(bare) * 1000:6.1f} ms  (interpreter start alone)")
    print(f"target          median <= {TARGET_S * 1000:.0f} ms: {'ok' if med <= TARGET_S else 'MISSED'} "
          f"(ratio {med / TARGET_S:.2f})")
    return 0 if med <= TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())

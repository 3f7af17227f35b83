"""Spawn → first ``/health``: hasrd beside a bare Starlette app under uvicorn, side by side (issue 32 #10).

Each trial spawns, in alternating order, (a) ``python -m hasrd --socket PATH`` (fake engine: /health never needs
a worker, and none starts) and (b) a bare Starlette app with one /health route under ``uvicorn.run(uds=PATH)``,
and times from the spawn to the first 200 from ``GET /health`` over the Unix socket (polled every 2 ms with a
standard-library client). Prints the medians, their ratio (goal ≤ 1.2), the modules each process holds once
/health has answered (asked with SIGUSR1 in a separate, untimed run), the CPU time each had used by then (its
ratio is what a loaded machine distorts least), the packages only hasrd imports with
their import time (``python -X importtime``), and the load average, since only the ratio means anything on a
busy machine.

    python3 benchmarks/daemon_start.py [--runs 10] [--list]

The daemon comes from this checkout (PYTHONPATH is set to it), whatever hasr is installed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _uds import http  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

BARE = """\
import sys

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


async def health(request: Request) -> JSONResponse:
    return JSONResponse({"status": "idle"})


uvicorn.run(Starlette(routes=[Route("/health", health)]), uds=sys.argv[1], log_level="warning")
"""

HASRD = "import runpy; runpy.run_module('hasrd', run_name='__main__', alter_sys=True)"

# Prepended for the module count: on SIGUSR1, write sys.modules to $MODULES_OUT (the loop wakes for it).
COUNT = """\
import json, os, runpy, signal, sys
def _dump(*_):
    with open(os.environ["MODULES_OUT"] + ".tmp", "w") as f:
        json.dump(sorted(sys.modules), f)
    os.rename(os.environ["MODULES_OUT"] + ".tmp", os.environ["MODULES_OUT"])
signal.signal(signal.SIGUSR1, _dump)
"""


def env_for(base: str) -> dict[str, str]:
    # Bytecode caches as an installed package has them (pip compiles site-packages; uvicorn's and starlette's
    # are there): without them every start would compile hasrd's sources and measure the compiler.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
            "HASR_ENGINE": "fake", "XDG_CONFIG_HOME": base, "XDG_DATA_HOME": base, "XDG_CACHE_HOME": base}


def command(which: str, sock: str, prelude: str = "") -> list[str]:
    if which == "hasrd":
        return [sys.executable, "-c", prelude + HASRD, "--socket", sock] if prelude else \
            [sys.executable, "-m", "hasrd", "--socket", sock]
    return [sys.executable, "-c", prelude + BARE, sock]


def wait_health(proc: subprocess.Popen[bytes], sock: str, timeout: float = 30.0) -> None:
    end = time.perf_counter() + timeout
    while time.perf_counter() < end:
        try:
            if http(sock)[0] == 200:
                return
        except (FileNotFoundError, ConnectionRefusedError, ConnectionResetError, IndexError):
            pass
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}")
        time.sleep(0.002)
    raise RuntimeError(f"{proc.args!r}: no /health within {timeout} s")


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def cpu_s(pid: int) -> float:
    """CPU seconds the process has run (all its threads; the scheduler's nanoseconds, not clock ticks)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
            total += int(f.read().split()[0])
    return total / 1e9


def one(which: str, base: str, n: int) -> tuple[float, float]:
    """(wall, CPU) seconds from the spawn to the first /health answered."""
    sock = os.path.join(base, f"{which}{n}.sock")
    t0 = time.perf_counter()
    proc = subprocess.Popen(command(which, sock), env=env_for(base), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_health(proc, sock)
        wall = time.perf_counter() - t0
        return wall, cpu_s(proc.pid)
    finally:
        stop(proc)


def modules_at_health(which: str, base: str) -> list[str]:
    sock = os.path.join(base, f"{which}-count.sock")
    out = os.path.join(base, f"{which}-modules.json")
    proc = subprocess.Popen(command(which, sock, COUNT), env={**env_for(base), "MODULES_OUT": out},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_health(proc, sock)
        proc.send_signal(signal.SIGUSR1)
        end = time.monotonic() + 20
        while not os.path.exists(out) and time.monotonic() < end:
            time.sleep(0.01)
        with open(out) as f:
            mods: list[str] = json.load(f)
        return mods
    finally:
        stop(proc)


def import_times(code: str, base: str) -> dict[str, int]:
    """Cumulative µs of each module's first import (``python -X importtime``)."""
    err = subprocess.run([sys.executable, "-X", "importtime", "-c", code], env=env_for(base),
                         capture_output=True, text=True, check=True).stderr
    times: dict[str, int] = {}
    for line in err.splitlines():
        m = re.match(r"import time:\s+\d+ \|\s+(\d+) \|\s*(\S+)", line)
        if m:
            times.setdefault(m.group(2), int(m.group(1)))
    return times


HASRD_IMPORT = "import hasrd.server"
BARE_IMPORT = "import uvicorn, starlette.applications, starlette.requests, starlette.responses, starlette.routing"


def import_wall(code: str, base: str) -> float:
    """Seconds the import statement takes in a fresh interpreter, best of 3."""
    timed = f"import time; t = time.perf_counter(); {code}; print(time.perf_counter() - t)"
    return min(float(subprocess.run([sys.executable, "-c", timed], env=env_for(base), capture_output=True,
                                    text=True, check=True).stdout) for _ in range(3))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10, help="trials of each, alternating (default 10)")
    ap.add_argument("--list", action="store_true", help="list every module only hasrd holds at /health")
    args = ap.parse_args()
    where = subprocess.run([sys.executable, "-c", "import hasrd; print(hasrd.__file__)"], env=env_for(ROOT),
                           capture_output=True, text=True, check=True).stdout.strip()
    load0 = os.getloadavg()
    times: dict[str, list[float]] = {"hasrd": [], "bare": []}
    cpus: dict[str, list[float]] = {"hasrd": [], "bare": []}
    with tempfile.TemporaryDirectory(prefix="hasr-start-") as base:
        for name in ("hasrd", "bare"):  # warm the page cache and write the bytecode caches, untimed
            one(name, base, -1)
        for i in range(args.runs):
            for name in (("hasrd", "bare") if i % 2 == 0 else ("bare", "hasrd")):
                wall, cpu = one(name, base, i)
                times[name].append(wall)
                cpus[name].append(cpu)
        load1 = os.getloadavg()
        mods = {name: modules_at_health(name, base) for name in ("hasrd", "bare")}
        hasrd_t = import_times(HASRD_IMPORT, base)
        hasrd_imp = import_wall(HASRD_IMPORT, base)
        bare_imp = import_wall(BARE_IMPORT, base)
    med = {k: statistics.median(v) for k, v in times.items()}
    cpu_med = {k: statistics.median(v) for k, v in cpus.items()}
    print(f"hasrd from {where}")
    print(f"load average {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f} before, "
          f"{load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f} after ({os.cpu_count()} CPUs)")
    print(f"spawn → first /health, median of {args.runs} (alternating):")
    for name in ("hasrd", "bare"):
        v = times[name]
        print(f"  {name:6s} {med[name] * 1000:7.1f} ms  (min {min(v) * 1000:.1f}, max {max(v) * 1000:.1f})  "
              f"CPU {cpu_med[name] * 1000:6.1f} ms  {len(mods[name])} modules at /health")
    ratio = med["hasrd"] / med["bare"]
    cpu_ratio = cpu_med["hasrd"] / cpu_med["bare"]
    print(f"  ratio hasrd / bare {ratio:.2f}  (goal ≤ 1.2: {'met' if ratio <= 1.2 else 'NOT met'}); "
          f"of the CPU time {cpu_ratio:.2f} (what a busy machine distorts least)")
    only = sorted(set(mods["hasrd"]) - set(mods["bare"]))
    roots: dict[str, int] = {}
    for m in only:
        root = m.split(".")[0]
        roots[root] = roots.get(root, 0) + 1
    print(f"modules only hasrd holds at /health: {len(only)}; by package: "
          + ", ".join(f"{r} {n}" for r, n in sorted(roots.items(), key=lambda kv: (-kv[1], kv[0]))))
    bare_roots = {m.split(".")[0] for m in mods["bare"]}
    heavy = sorted(((t, m) for m, t in hasrd_t.items() if "." not in m and m not in bare_roots and m != "hasrd"),
                   reverse=True)[:10]
    print("packages only hasrd imports, by import time (python -X importtime -c 'import hasrd.server'): "
          + ", ".join(f"{m} {t / 1000:.1f} ms" for t, m in heavy))
    print(f"import alone, best of 3: hasrd.server {hasrd_imp * 1000:.1f} ms, "
          f"the bare app's uvicorn + starlette {bare_imp * 1000:.1f} ms")
    if args.list:
        print("\n".join(only))


if __name__ == "__main__":
    main()

"""Worker start-up and round-trip overhead with the fake engine (issue 2).

Prints medians over N runs of: spawn → Hello, spawn → Ready, and the round trip of a minimal transcription
(one 160 ms chunk) through WorkerProcess, next to a bare `python -c pass` start measured in the same run so
the Hello time can be read as a multiple of the interpreter's own start-up. Target: Hello < 0.2 s.

    python benchmarks/worker_spawn.py [--runs 20]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

from hasrd import protocol as p  # noqa: E402
from hasrd.pcm import PcmBuffer  # noqa: E402
from hasrd.workerproc import WorkerProcess  # noqa: E402


async def one_run(rounds: int) -> tuple[float, float, list[float]]:
    t0 = time.perf_counter()
    w = await WorkerProcess.spawn("fake")
    msg = await w.hs.queue.get()
    assert isinstance(msg, p.Hello)
    t_hello = time.perf_counter() - t0
    await w.hs.queue.put(msg)  # let handshake() see it
    await w.handshake(30, 30)
    t_ready = time.perf_counter() - t0
    trips = []
    with PcmBuffer.from_array(np.zeros(2560, dtype=np.float32)) as pcm:
        for _ in range(rounds):
            t1 = time.perf_counter()
            await w.transcribe(pcm)
            trips.append(time.perf_counter() - t1)
    await w.stop()
    return t_hello, t_ready, trips


def bare_python() -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--trips", type=int, default=10, help="round trips per worker")
    args = ap.parse_args()
    hellos, readies, trips, bare = [], [], [], []
    for _ in range(args.runs):
        bare.append(bare_python())
        h, r, t = asyncio.run(one_run(args.trips))
        hellos.append(h)
        readies.append(r)
        trips.extend(t)
    med = statistics.median
    print(f"runs: {args.runs} workers, {len(trips)} round trips")
    print(f"bare `python -c pass`       median {med(bare) * 1000:7.1f} ms")
    print(f"spawn -> Hello              median {med(hellos) * 1000:7.1f} ms   "
          f"({med(hellos) / med(bare):.2f}x bare python; target < 200 ms: {'OK' if med(hellos) < 0.2 else 'MISSED'})")
    print(f"spawn -> Ready (fake load)  median {med(readies) * 1000:7.1f} ms   ({med(readies) / med(bare):.2f}x bare)")
    print(f"round trip, 160 ms of audio median {med(trips) * 1000:7.2f} ms   (p90 "
          f"{sorted(trips)[int(len(trips) * 0.9)] * 1000:.2f} ms)")


if __name__ == "__main__":
    main()

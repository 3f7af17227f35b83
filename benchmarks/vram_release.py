"""Does unloading give all VRAM back? Run on a GPU host (issue 2).

The fake engine allocates HASR_FAKE_ALLOC_MB on the GPU with torch while loaded. Readings of the GPU's used
memory (NVML, or nvidia-smi) are taken before loading, while loaded, and after the runner's stop (which
ends the worker process). For contrast, the same allocation freed *in process* (del + empty_cache) is
measured in a child process that stays alive: the CUDA context's memory stays behind, which is why hasr
unloads by ending the worker.

    python benchmarks/vram_release.py [--mb 4096]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from hasrd import config  # noqa: E402
from hasrd.gpu import list_gpus  # noqa: E402
from hasrd.runner import Runner  # noqa: E402
from hasrd.workerenv import worker_env
from hasrd.workerproc import WorkerProcess  # noqa: E402


def used_mb(index: int = 0) -> int:
    for g in list_gpus():
        if g.index == index and g.total_mb is not None and g.free_mb is not None:
            return g.total_mb - g.free_mb
    raise SystemExit("no GPU reading (NVML / nvidia-smi)")


def settle(index: int = 0, wait: float = 1.0) -> int:
    time.sleep(wait)
    return used_mb(index)


async def through_hasr(mb: int) -> tuple[int, int, int, float]:
    env = worker_env(os.environ, {"HASR_FAKE_ALLOC_MB": str(mb)})

    async def spawn(report: object) -> WorkerProcess:
        return await WorkerProcess.spawn("fake", env=env)

    runner = Runner(config.Settings(engine="fake", load_timeout_sec=120), spawn)
    before = settle()
    await runner.ready()
    loaded = settle()
    t0 = time.monotonic()
    await runner.stop()
    unload_s = time.monotonic() - t0
    after = settle()
    return before, loaded, after, unload_s


IN_PROCESS = """
import sys, time, torch
x = torch.empty(int(sys.argv[1]) * 2**20, dtype=torch.uint8, device="cuda"); x.fill_(1); torch.cuda.synchronize()
print("loaded", flush=True); sys.stdin.readline()
del x; torch.cuda.empty_cache(); torch.cuda.synchronize()
print("freed", flush=True); sys.stdin.readline()
"""


def in_process(mb: int) -> tuple[int, int, int]:
    before = settle()
    p = subprocess.Popen([sys.executable, "-c", IN_PROCESS, str(mb)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    assert p.stdout and p.stdin
    p.stdout.readline()
    loaded = settle()
    p.stdin.write("\n")
    p.stdin.flush()
    p.stdout.readline()
    freed = settle()
    p.stdin.write("\n")
    p.stdin.flush()
    p.wait()
    return before, loaded, freed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=4096)
    args = ap.parse_args()
    b, loaded, a, s = asyncio.run(through_hasr(args.mb))
    print(f"hasr worker ({args.mb} MB allocated): before {b} MB, loaded {loaded} MB (+{loaded - b}), "
          f"after unload {a} MB (residue {a - b:+d} MB), unload took {s:.2f} s")
    b2, l2, f2 = in_process(args.mb)
    print(f"in-process del + empty_cache:        before {b2} MB, loaded {l2} MB (+{l2 - b2}), after free "
          f"{f2} MB (residue {f2 - b2:+d} MB while the process lives)")
    print(f"returned by ending the worker: {100 * (loaded - a) / max(1, loaded - b):.1f}% of what loading took")


if __name__ == "__main__":
    main()

"""Where a request runs: the worker pool's decisions as pure functions over plain values (no processes, no
NVML), so that every rule is tested with fake inventories (tests/test_placement.py).

The rules (docs/ARCHITECTURE.md "The worker pool"; Ollama's scheduler is the model):

A worker holds up to ``capacity`` jobs at once (HASR_WORKER_PARALLEL, :func:`parallel_for`) and decodes them
together; it is *busy* while it holds at least one job or is being stopped, *idle* otherwise.

1. A request goes to an idle worker of its model (ready before loading, then the most recently used).
2. Otherwise a new worker starts, if fewer than ``max_workers`` run and a device can hold the model: the GPU
   with the most free memory that fits it (a pinned GPU only), else the CPU when the model may run there.
   Spreading before packing: where workers may be added (the CPU's default of 2, several GPUs) a second job
   gets its own worker and cores; one GPU (one worker) packs every job into its worker's batches.
2b. Otherwise it joins a worker of its model with room (fewer jobs than its capacity, not being stopped): ready
   before loading, then the one with fewer jobs, then the most recently used.
3. Otherwise, when the model has no worker yet, the least recently used IDLE worker of another model is
   stopped to make room, if stopping it makes room; a worker holding a job is never stopped for another
   request, and none is stopped to start a second worker of a model whose workers are full (that request
   waits for room in one of them).
4. Otherwise the request waits (its queue position is reported) until a job ends or a worker stops; when none
   of ours is busy (nothing will free), it starts where the most memory is free instead of waiting for ever.
5. A model that no device could hold even empty is refused at once, with the numbers: waiting cannot help.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

CPU = "cpu"


@dataclass(frozen=True)
class Device:
    """A place a worker can run: the CPU, or one GPU (by UUID) with its memory in MB."""

    name: str  # "cpu" or a GPU UUID
    free_mb: int  # free now, less what workers of ours that have not measured themselves yet will take
    total_mb: int


@dataclass(frozen=True)
class Seat:
    """A worker as the scheduler sees it."""

    key: int
    model: str
    device: str
    ready: bool
    last_used: float
    mb: int  # what it holds (measured, or the estimate until it is)
    jobs: int = 0  # jobs running or reserved on it (loading for one counts)
    capacity: int = 1  # jobs it may hold at once (its HASR_WORKER_PARALLEL)
    stopping: bool = False  # being stopped (TTL, unload, eviction): nobody new gets it

    @property
    def busy(self) -> bool:
        """It holds at least one job or is being stopped: never stopped for another request."""
        return self.jobs > 0 or self.stopping

    @property
    def room(self) -> bool:
        """It can take one more job now."""
        return not self.stopping and self.jobs < self.capacity


@dataclass(frozen=True)
class Decision:
    kind: Literal["use", "start", "evict", "wait", "refuse"]
    worker: int | None = None  # use: the worker
    device: str | None = None  # start / evict: where the new worker goes
    victim: int | None = None  # evict: the worker stopped first
    reason: str = ""


def fits(device: Device, need_mb: int) -> bool:
    return need_mb <= device.free_mb


def best_device(devices: Sequence[Device], need_mb: int, gpu_only: bool = False) -> Device | None:
    """The GPU with the most free memory that holds ``need_mb``; else the CPU (unless ``gpu_only``)."""
    gpus = sorted((d for d in devices if d.name != CPU and fits(d, need_mb)), key=lambda d: (-d.free_mb, d.name))
    if gpus:
        return gpus[0]
    if not gpu_only:
        for d in devices:
            if d.name == CPU and fits(d, need_mb):
                return d
    return None


def choose(seats: Sequence[Seat], model: str, need_mb: int, devices: Sequence[Device], max_workers: int,
           gpu_only: bool = False, name: str = "") -> Decision:
    """The decision for one request for ``model`` (needing ``need_mb`` on a device), given the workers now;
    ``name`` is how a refusal names the model (default: ``model``)."""
    mine = [s for s in seats if s.model == model and s.room]
    idle_mine = [s for s in mine if s.jobs == 0]
    if idle_mine:
        best = max(idle_mine, key=lambda s: (s.ready, s.last_used))
        return Decision("use", worker=best.key)
    if mine and len(seats) < max_workers and best_device(devices, need_mb, gpu_only) is not None:
        # spread before packing: on a 2-core CPU a live session sharing a worker with a file got its first words
        # 15.5 s after the onset, against 2.5 s on a worker of its own (benchmarks/parallel.py, pool.py)
        d = best_device(devices, need_mb, gpu_only)
        assert d is not None
        return Decision("start", device=d.name)
    if mine:
        best = max(mine, key=lambda s: (s.ready, -s.jobs, s.last_used))
        return Decision("use", worker=best.key)
    candidates = [d for d in devices if d.name != CPU or not gpu_only]
    if not candidates or all(need_mb > d.total_mb for d in candidates):
        biggest = max((d.total_mb for d in candidates), default=0)
        where = "GPU" if gpu_only else "device"
        return Decision("refuse", reason=f"{name or model} needs about {need_mb} MB and no {where} of this machine "
                                         f"has that much (the largest has {biggest} MB)")
    if len(seats) < max_workers:
        d = best_device(devices, need_mb, gpu_only)
        if d is not None:
            return Decision("start", device=d.name)
    if any(s.model == model for s in seats):
        # its own workers are full and will have room soon: stopping another model's idle worker to start a
        # second one of this model thrashed (two models, two workers: 89 evictions in 200 requests, issue 31 #19)
        return Decision("wait", reason="its workers are full")
    # make room: the least recently used idle worker whose stop lets the new one start (at the cap: any)
    by_name = {d.name: d for d in candidates}
    idle = sorted((s for s in seats if not s.busy and s.device in by_name), key=lambda s: s.last_used)
    for victim in idle:
        dev = by_name[victim.device]
        if fits(Device(dev.name, dev.free_mb + victim.mb, dev.total_mb), need_mb):
            return Decision("evict", victim=victim.key, device=dev.name)
    if not any(s.busy for s in seats):
        # nothing of ours will free memory (the estimate is a guess, and others' use may never change): start
        # where the most is free rather than wait for ever; the spawn's VRAM wait and the worker take it from there
        most = max(candidates, key=lambda d: (d.free_mb, d.name != CPU))
        if len(seats) < max_workers:
            return Decision("start", device=most.name)
        if idle:
            return Decision("evict", victim=idle[0].key, device=idle[0].device)
    return Decision("wait", reason="every worker is full" if len(seats) >= max_workers
                    else "no device has room until a worker stops")


def default_max_workers(gpus: int) -> int:
    """HASR_MAX_WORKERS=0: one per GPU; on a CPU-only machine 2, so live never waits behind a file."""
    return gpus if gpus > 0 else 2


PARALLEL_CPU = 4
PARALLEL_GPU = 32
BATCH_CPU = 8
BATCH_GPU = 32
STREAMS_CPU = 1
STREAMS_GPU = 3


def _auto(name: str, setting: int, default: int) -> int:
    """A setting where 0 means auto (``default``, by device); a negative one is a mistake."""
    if setting < 0:
        raise ValueError(f"{name}={setting}: must be 0 (auto) or more")
    return setting or default


def parallel_for(device: str, setting: int) -> int:
    """Jobs one worker on ``device`` ("cpu" or a GPU UUID) holds at once: HASR_WORKER_PARALLEL, or for 0 (auto)
    4 on the CPU and 32 on a GPU (16 files and 16 live sessions at once: docs/CONFIG.md)."""
    return _auto("HASR_WORKER_PARALLEL", setting, PARALLEL_CPU if device == CPU else PARALLEL_GPU)


def batch_for(device: str, setting: int) -> int:
    """Windows one batched decode step of a worker on ``device`` takes across its jobs: HASR_WORKER_BATCH, or for
    0 (auto) 8 on the CPU and 32 on a GPU (the worker reads it)."""
    return _auto("HASR_WORKER_BATCH", setting, BATCH_CPU if device == CPU else BATCH_GPU)


def streams_for(device: str, setting: int) -> int:
    """Model calls one worker on ``device`` runs at once: HASR_WORKER_STREAMS, or for 0 (auto) 1 on the CPU (one
    call already takes every core) and 3 on a GPU (CTranslate2 replicas sharing the weights, one CUDA stream
    each; one kept for live and short jobs)."""
    return _auto("HASR_WORKER_STREAMS", setting, STREAMS_CPU if device == CPU else STREAMS_GPU)

"""The pool's small types (hasrd.scheduler): its hold on one runner (:class:`RunnerRef`: reservations, capacity,
keep-alive and expiry timer, and the :class:`~hasrd.placement.Seat` placement sees), a request waiting for a worker
(:class:`Waiter`) and one admitted request (:class:`Lease`); and where a request for a model goes, as placement sees
the pool's workers (:func:`decide`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from hasrd import placement
from hasrd.lifecycle import SETTING, KeepAlive, State
from hasrd.modelspec import ModelSpec
from hasrd.runnerapi import PoolRunner


@dataclass(eq=False)
class RunnerRef:
    """The pool's hold on one runner: its reservations, its keep-alive and its expiry timer."""

    key: int
    spec: ModelSpec
    device: str
    runner: PoolRunner
    need_mb: int
    last_used: float
    capacity: int = 1  # jobs its worker may hold at once (HASR_WORKER_PARALLEL for its device)
    refs: int = 0  # requests handed this worker and not finished: its jobs, running or about to
    retiring: asyncio.Task[None] | None = None  # being stopped (TTL, unload, eviction): nobody new gets it
    after: asyncio.Future[None] | None = None  # an evicted worker whose memory this one waits for
    held_mb: int = 0  # GPU memory its process group holds, measured once it is ready (0: not yet)
    keep_alive: KeepAlive = SETTING
    last_state: State = State.STOPPED
    timer: asyncio.TimerHandle | None = None
    free: asyncio.Event = field(default_factory=asyncio.Event)  # set while refs == 0

    def seat(self) -> placement.Seat:
        """What placement sees: its jobs and capacity; one being retired or stopping has no room."""
        r = self.runner
        return placement.Seat(self.key, self.spec.key, self.device, r.state == State.READY, self.last_used,
                              self.held_mb or self.need_mb, jobs=self.refs, capacity=self.capacity,
                              stopping=self.retiring is not None or r.state == State.STOPPING)

    @property
    def coming(self) -> bool:
        """It will take memory the device's free figure does not show yet: loading, or about to."""
        r = self.runner
        return r.state == State.STARTING or (r.pid is None and self.refs > 0
                                             and r.state in (State.STOPPED, State.BACKOFF))


@dataclass
class Waiter:
    spec: ModelSpec
    live: bool
    fut: asyncio.Future[RunnerRef] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class Lease:
    """One admitted request: counted in the pool's ``in_flight`` until :meth:`release` (idempotent); while it
    lasts, its model's workers do not expire (it may be decoding its audio, not routed yet)."""

    def __init__(self, release: Callable[[], None]) -> None:
        self._release = release
        self.released = False
        self.let_go: Callable[[], None] = lambda: None  # lets go of what it holds while it waits (its audio)

    def running(self) -> None:
        """Its job is on a worker now: what it held while it waited is let go (hasrd.audiobudget)."""
        self.let_go()

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.let_go()
            self._release()


def decide(refs: Collection[RunnerRef], spec: ModelSpec, inventory: list[placement.Device], measured: Mapping[str, int],
           max_workers: int) -> placement.Decision:
    """Where a request for ``spec`` goes (hasrd.placement.choose), from the pool's workers, the machine's free
    memory (``inventory``) and what a loaded worker of each model measured (``measured``, MB by model key)."""
    fatal = [r for r in refs if r.spec.key == spec.key and r.runner.state == State.FATAL and r.retiring is None]
    if fatal and not fatal[0].refs:
        return placement.Decision("use", worker=fatal[0].key)  # its requests hear the kept reason
    # What workers still loading (or about to) will take is not out of the free figure yet; a loaded worker's is
    # (read again whenever a worker is ready or stops), and the CPU's MemAvailable counts every process that runs.
    devices = [placement.Device(d.name, max(0, d.free_mb - (0 if d.name == placement.CPU else sum(
        r.need_mb for r in refs if r.device == d.name and r.coming))), d.total_mb) for d in inventory]
    gpus = any(d.name != placement.CPU for d in devices)
    # a GPU engine on a machine without GPUs goes to the CPU, and the worker says what it lacks (or runs there: the
    # hybrid with a scripted draft in tests), as a single worker always did
    seats = [r.seat() for r in refs if r.runner.state != State.FATAL]
    return placement.choose(seats, spec.key, need_mb(spec, measured, gpus), devices, max_workers,
                            gpu_only=spec.gpu_only and gpus, name=spec.name)


def need_mb(spec: ModelSpec, measured: Mapping[str, int], gpu: bool) -> int:
    """The memory a worker of ``spec`` is counted to take: what one measured, else the estimate (on a machine with
    GPUs a whisper model is placed by what it takes on one: they are tried first)."""
    return measured.get(spec.key) or (spec.gpu_need_mb if spec.gpu_need_mb and gpu else spec.need_mb)

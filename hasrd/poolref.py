"""The pool's small types (hasrd.scheduler): its hold on one runner (:class:`RunnerRef`: reservations, capacity,
keep-alive and expiry timer, and the :class:`~hasrd.placement.Seat` placement sees), a request waiting for a worker
(:class:`Waiter`) and one admitted request (:class:`Lease`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
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

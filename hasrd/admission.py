"""The pool's admission (hasrd.scheduler): a request is admitted (a :class:`~hasrd.poolref.Lease`) before its audio is
decoded and released exactly once. Admitted requests are the daemon's ``in_flight`` (its exit waits for them), and
per model what holds that model's workers from expiring. Bounded: HASR_MAX_QUEUE may wait beyond the jobs the
workers may hold (HASR_MAX_WORKERS x HASR_WORKER_PARALLEL); refused while the daemon stops, and for a model being
deleted (``withdrawn``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from hasrd import errors
from hasrd.poolref import Lease


class Admission:
    def __init__(self, max_queue: int, capacity: int, changed: Callable[[str, bool], None]) -> None:
        """``capacity``: the jobs the pool's workers may hold at once; ``changed(model key, released)``: a request
        for that model was admitted, or released (its workers' expiry is decided again)."""
        self.max_queue = max_queue
        self.capacity = capacity
        self.changed = changed
        self.in_flight = 0
        self.holding: dict[str, int] = {}  # model key -> admitted requests for it
        self.withdrawn: dict[str, str] = {}  # model key -> why its requests are refused now (a delete runs)
        self.closing = False  # the daemon stops: nothing new is admitted
        self.idle = asyncio.Event()  # set while nothing is admitted
        self.idle.set()

    def admit(self, key: str) -> Lease:
        """Admit a request for the model ``key`` from now until its lease is released."""
        if self.closing:
            raise errors.ShuttingDown("the daemon is shutting down", retry_after=1)
        if self.in_flight >= self.max_queue + self.capacity:
            raise errors.QueueFull(f"the queue is full: {self.in_flight} transcriptions are already running or "
                                   f"waiting ({self.capacity} may run at once, HASR_MAX_QUEUE={self.max_queue} "
                                   f"more may wait); try again later", retry_after=5)
        self.refuse_withdrawn(key)
        self.in_flight += 1
        self.holding[key] = self.holding.get(key, 0) + 1
        self.idle.clear()
        self.changed(key, False)
        return Lease(lambda: self._release(key))

    def holds(self, key: str) -> int:
        """Requests admitted for the model ``key`` now."""
        return self.holding.get(key, 0)

    def refuse_withdrawn(self, key: str) -> None:
        if key in self.withdrawn:
            raise errors.ModelBusy(self.withdrawn[key], param="model")

    def _release(self, key: str) -> None:
        self.in_flight -= 1
        self.holding[key] -= 1
        if self.in_flight == 0:
            self.idle.set()
        self.changed(key, True)

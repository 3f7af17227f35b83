"""When and how the pool's workers stop (hasrd.scheduler): the keep-alive and expiry, one timer per worker armed
while nothing holds it, that stops the worker when its TTL runs out (HASR_IDLE_TTL_SEC, or the keep-alive an
/api/load set); and the stop itself, for the TTL, an unload or an eviction: once the worker's running jobs are
done (nobody new is handed it), after which it leaves the pool. Nothing holds a worker when it has no reservation
and no admitted request for its model; the TTL counts from the end of the last one (hasrd.policy.unload_in).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from hasrd import policy
from hasrd.poolref import RunnerRef
from hasrd.status import State
from hasrd.tasks import Tasks

log = logging.getLogger("hasrd.scheduler")


class Expiry:
    def __init__(self, setting: float, clock: Callable[[], float], tasks: Tasks, *, held: Callable[[str], int],
                 closing: Callable[[], bool], gone: Callable[[RunnerRef], None]) -> None:
        """``setting``: HASR_IDLE_TTL_SEC; ``tasks``: the pool's (a stop runs in one); ``held``: requests admitted
        for a model (by its key); ``closing``: the daemon is exiting (no timer is armed); ``gone``: a worker
        stopped and leaves the pool."""
        self.setting = setting
        self.clock = clock
        self.tasks = tasks
        self.held = held
        self.closing = closing
        self.gone = gone

    def ttl(self, ref: RunnerRef | None) -> float | None:
        """``ref``'s TTL (None: kept alive for ever): its keep-alive's, else (or without a worker) the setting."""
        return ref.keep_alive.ttl(self.setting) if ref is not None else self.setting

    def expires_in(self, ref: RunnerRef) -> float | None:
        """Seconds until the TTL stops ``ref``'s worker (None: not loaded, held, or kept alive for ever)."""
        if ref.runner.state != State.READY or ref.retiring is not None:
            return None
        return policy.unload_in(self.clock(), ref.last_used, self.ttl(ref), ref.refs + self.held(ref.spec.key))

    def disarm(self, ref: RunnerRef) -> None:
        if ref.timer is not None:
            ref.timer.cancel()
            ref.timer = None

    def arm(self, ref: RunnerRef) -> None:
        """(Re)arm ``ref``'s timer from what holds it now; disarmed while anything does."""
        self.disarm(ref)
        left = self.expires_in(ref)
        if left is not None and not self.closing():
            ref.timer = asyncio.get_running_loop().call_later(max(0.0, left), self._due, ref)

    def _due(self, ref: RunnerRef) -> None:
        ref.timer = None
        left = self.expires_in(ref)
        if left is None:
            return
        if left > 0:  # the clock moved differently from the loop's timer
            self.arm(ref)
            return
        log.info("worker %d idle for %.1f s (ttl %s): unloading", ref.key, self.clock() - ref.last_used,
                 self.ttl(ref))
        self.retire(ref)

    def retire(self, ref: RunnerRef) -> asyncio.Task[None]:
        """Stop ``ref``'s worker once its running jobs are done (nobody new is handed it), then it leaves the pool."""
        if ref.retiring is None:
            self.disarm(ref)
            ref.retiring = self.tasks.spawn(self._retire(ref), f"hasr-retire-{ref.key}")
        return ref.retiring

    async def _retire(self, ref: RunnerRef) -> None:
        try:
            await ref.free.wait()
            await ref.runner.clear_failure()
            await ref.runner.stop()
        finally:
            self.disarm(ref)
            self.gone(ref)

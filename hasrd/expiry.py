"""The pool's keep-alive and expiry (hasrd.scheduler): one timer per worker, armed while nothing holds it, that
hands the worker back to the pool to be stopped when its TTL runs out (HASR_IDLE_TTL_SEC, or the keep-alive an
/api/load set). Nothing holds a worker when it has no reservation and no admitted request for its model; the TTL
counts from the end of the last one (hasrd.policy.unload_in).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from hasrd import policy
from hasrd.poolref import RunnerRef
from hasrd.status import State

log = logging.getLogger("hasrd.scheduler")


class Expiry:
    def __init__(self, setting: float, clock: Callable[[], float], *, held: Callable[[str], int],
                 closing: Callable[[], bool], expired: Callable[[RunnerRef], object]) -> None:
        """``setting``: HASR_IDLE_TTL_SEC; ``held``: requests admitted for a model (by its key); ``closing``: the
        daemon is exiting (no timer is armed); ``expired``: stop this worker, its TTL ran out."""
        self.setting = setting
        self.clock = clock
        self.held = held
        self.closing = closing
        self.expired = expired

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
        self.expired(ref)

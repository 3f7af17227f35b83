"""State fan-out: the pool's latest snapshot (a :class:`~hasrd.status.PoolStatus`), pushed to /api/events subscribers
and to sd_notify STATUS=."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from hasrd.status import PoolStatus

Feed = asyncio.Queue[PoolStatus | None]  # a subscriber's snapshots; None: the daemon is exiting


class Broadcaster:
    """Keeps the latest snapshot; each subscriber gets every change (a slow one loses old ones, not new)."""

    def __init__(self, on_status: Callable[[str], object] | None = None, maxsize: int = 64,
                 on_subscribers: Callable[[], object] = lambda: None) -> None:
        """``on_status``: the STATUS= line changed; ``on_subscribers``: a follower came or went (the idle exit
        counts followers apart)."""
        self.latest: PoolStatus | None = None
        self.on_status = on_status
        self.maxsize = maxsize
        self.on_subscribers = on_subscribers
        self._subs: set[Feed] = set()
        self._last_status = ""
        self.closed = False

    def publish(self, snap: PoolStatus) -> None:
        if snap == self.latest:
            return
        self.latest = snap
        for q in list(self._subs):
            if q.full():
                with contextlib.suppress(asyncio.QueueEmpty):
                    q.get_nowait()
            q.put_nowait(snap)
        if snap.status_text != self._last_status and self.on_status:
            self._last_status = snap.status_text
            self.on_status(snap.status_text)

    def close(self) -> None:
        """End every stream (the daemon is exiting): subscribers get None and stop."""
        self.closed = True
        for q in list(self._subs):
            while q.full():
                q.get_nowait()
            q.put_nowait(None)

    def subscribe(self) -> Feed:
        q: Feed = asyncio.Queue(self.maxsize)
        if self.latest is not None:
            q.put_nowait(self.latest)
        self._subs.add(q)
        self.on_subscribers()
        return q

    def unsubscribe(self, q: Feed) -> None:
        self._subs.discard(q)
        self.on_subscribers()

"""State fan-out: one latest snapshot, pushed to /api/events subscribers and to sd_notify STATUS=."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any


class Broadcaster:
    """Keeps the latest snapshot; each subscriber gets every change (a slow one loses old ones, not new)."""

    def __init__(self, on_status: Callable[[str], object] | None = None, maxsize: int = 64) -> None:
        self.latest: dict[str, Any] = {}
        self.on_status = on_status
        self.maxsize = maxsize
        self._subs: set[asyncio.Queue[dict[str, Any]]] = set()
        self._last_status = ""
        self.closed = False
        self.on_subscribers: Callable[[], None] = lambda: None  # the idle exit counts followers apart

    def publish(self, snap: dict[str, Any]) -> None:
        if snap == self.latest:
            return
        self.latest = snap
        for q in list(self._subs):
            if q.full():
                with contextlib.suppress(asyncio.QueueEmpty):
                    q.get_nowait()
            q.put_nowait(snap)
        text = str(snap.get("status_text") or "")
        if text != self._last_status and self.on_status:
            self._last_status = text
            self.on_status(text)

    def close(self) -> None:
        """End every stream (the daemon is exiting): subscribers get an empty snapshot and stop."""
        self.closed = True
        for q in list(self._subs):
            while q.full():
                q.get_nowait()
            q.put_nowait({})

    def subscribe(self) -> asyncio.Queue[dict[str, Any]]:
        q: asyncio.Queue[dict[str, Any]] = asyncio.Queue(self.maxsize)
        if self.latest:
            q.put_nowait(self.latest)
        self._subs.add(q)
        self.on_subscribers()
        return q

    def unsubscribe(self, q: asyncio.Queue[dict[str, Any]]) -> None:
        self._subs.discard(q)
        self.on_subscribers()

    @property
    def subscribers(self) -> int:
        return len(self._subs)

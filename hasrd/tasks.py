"""Background tasks that an owner (a runner, the pool) keeps until they end and cancels when it closes: a load, a stop,
a death watch, a measurement. A task's failure is its owner's to keep or to raise to whoever awaits it (its waiters
may all have gone: a client left), never "exception was never retrieved"."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class Tasks:
    def __init__(self) -> None:
        self._running: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, T], name: str) -> asyncio.Task[T]:
        task = asyncio.create_task(coro, name=name)
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
        return task

    async def cancel(self) -> None:
        """Cancel every task still running and wait for them to end."""
        for task in list(self._running):
            task.cancel()
        await asyncio.gather(*self._running, return_exceptions=True)

"""The one queue policy of hasr, the pool's (scheduler.py): first come first served, except that live sessions
go ahead of waiting files (in their own order), and every waiter that listens hears its position whenever it
changes (a ``jobevents.Queued``).

A plain container: it decides the order and tells positions; its owner decides when the head is served.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from hasrd.jobevents import EventSink, Queued

T = TypeVar("T")


@dataclass
class _Entry(Generic[T]):
    item: T
    live: bool
    on_event: EventSink | None
    told: int = 0


@dataclass
class WaitQueue(Generic[T]):
    _entries: list[_Entry[T]] = field(default_factory=list)

    def add(self, item: T, *, live: bool = False, on_event: EventSink | None = None) -> int:
        """Queue ``item`` (a live session ahead of every waiting file, behind earlier live sessions); tell
        every listener whose place changed, the new one included. Returns its position (1 = next)."""
        at = sum(1 for e in self._entries if e.live) if live else len(self._entries)
        self._entries.insert(at, _Entry(item, live, on_event))
        self.tell()
        return at + 1

    def remove(self, item: T) -> bool:
        """Take ``item`` out wherever it is (it left or was served); the rest hear their new places."""
        for i, e in enumerate(self._entries):
            if e.item is item:
                del self._entries[i]
                self.tell()
                return True
        return False

    def tell(self) -> None:
        """Send a ``queued`` event to every listener whose position differs from the one it was last told."""
        for i, e in enumerate(self._entries):
            if e.on_event is not None and e.told != i + 1:
                e.told = i + 1
                e.on_event(Queued(i + 1))

    def __iter__(self) -> Iterator[T]:
        return iter([e.item for e in self._entries])

    def __len__(self) -> int:
        return len(self._entries)

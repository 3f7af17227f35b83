"""The pool's queue policy (hasrd/waitqueue.py), with plain values."""

from __future__ import annotations

from typing import Any

from hasrd.waitqueue import WaitQueue


def test_files_are_first_come_first_served_and_live_sessions_go_ahead_of_them_in_their_own_order() -> None:
    q: WaitQueue[str] = WaitQueue()
    assert q.add("f1") == 1 and q.add("f2") == 2
    assert q.add("l1", live=True) == 1
    assert q.add("l2", live=True) == 2  # behind the earlier live session, ahead of the files
    assert q.add("f3") == 5
    assert list(q) == ["l1", "l2", "f1", "f2", "f3"] and len(q) == 5


def test_every_listener_hears_its_place_when_it_changes_and_only_then() -> None:
    heard: dict[str, list[int]] = {"f1": [], "f2": [], "l1": []}

    def sink(name: str) -> Any:
        return lambda ev: heard[name].append(ev.position)

    q: WaitQueue[str] = WaitQueue()
    q.add("f1", on_event=sink("f1"))
    q.add("f2", on_event=sink("f2"))
    q.add("quiet")  # no listener: never told, never in the way
    q.add("l1", live=True, on_event=sink("l1"))  # the files move back one place each
    assert heard == {"f1": [1, 2], "f2": [2, 3], "l1": [1]}
    assert q.remove("l1")  # served: the files move up
    assert heard["f1"] == [1, 2, 1] and heard["f2"] == [2, 3, 2]
    assert q.remove("f1") and not q.remove("f1")  # it left; the second time there is nothing to take
    assert heard["f2"] == [2, 3, 2, 1] and list(q) == ["f2", "quiet"]
    assert "f2" in list(q) and "f1" not in list(q) and bool(q)

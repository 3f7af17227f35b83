"""The last STATUS a daemon sends says why it exits: systemd shows it (``systemctl --user status hasrd``) after
the process is gone. Played against the real sd_notify datagram socket of tests/activator.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.activator import Activator, Note
from tests.daemon import client


@pytest.fixture
def activator(short_tmp: str) -> Iterator[Activator]:
    a = Activator(short_tmp, env={"HASR_IDLE_EXIT_SEC": "0.4", "HASR_IDLE_TTL_SEC": "0.15"})
    yield a
    a.close()


def _after_stopping(notes: list[Note]) -> list[Note]:
    first = next(i for i, n in enumerate(notes) if n.fields.get("STOPPING") == "1")
    return notes[first:]


def test_after_an_idle_exit_the_last_status_is_the_reason_not_unloading(activator: Activator) -> None:
    with client(activator.path) as c:
        assert c.get("/health").json()["status"] == "idle"
    assert activator.wait_for(lambda: activator.exits == [0]), activator.log()
    notes = activator.notes_from(activator.started[0].pid)
    statuses = [n.fields["STATUS"] for n in notes if "STATUS" in n.fields]
    assert statuses[-1] == "idle for 0.4 s, exiting", statuses  # was "unloading", sent after the reason
    stopping = _after_stopping(notes)
    assert stopping[0].fields.get("STATUS") == "idle for 0.4 s, exiting"
    assert all(n.fields["STATUS"].endswith("(idle for 0.4 s, exiting)") or n.fields["STATUS"] ==
               "idle for 0.4 s, exiting" for n in stopping if "STATUS" in n.fields), statuses


def test_a_stop_with_a_loaded_worker_says_it_unloads_and_why_then_why(short_tmp: str) -> None:
    act = Activator(short_tmp, env={"HASR_IDLE_EXIT_SEC": "600"})
    try:
        with client(act.path) as c:
            assert c.post("/api/load", json={"keep_alive": -1}).json()["state"] == "ready"
            assert c.post("/api/stop").json() == {"stopping": True, "now": False}
        assert act.wait_for(lambda: act.exits == [0], timeout=60), act.log()
        notes = act.notes_from(act.started[0].pid)
    finally:
        act.close()
    why = "stop requested over the API, exiting"
    after = [n.fields["STATUS"] for n in _after_stopping(notes) if "STATUS" in n.fields]
    assert after[0] == why and after[-1] == why, after
    assert f"unloading ({why})" in after, after  # what it still did, with the reason beside it
    assert all(s == why or s.endswith(f"({why})") for s in after), after

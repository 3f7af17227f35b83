"""Socket activation with a fake activator: READY from the daemon's pid, STATUS, idle exit, re-activation,
and no request lost around idle exits under concurrent load."""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Iterator

import pytest

from tests.activator import Activator
from tests.daemon import client, write_wav


@pytest.fixture
def activator(short_tmp: str) -> Iterator[Activator]:
    a = Activator(short_tmp, env={"HASR_IDLE_EXIT_SEC": "0.4", "HASR_IDLE_TTL_SEC": "0.15"})
    yield a
    a.close()


def test_ready_comes_from_the_daemon_pid_and_status_follows_a_transcription(activator: Activator,
                                                                           short_tmp: str) -> None:
    wav = write_wav(os.path.join(short_tmp, "会议 1.wav"), 2.0)
    with client(activator.path) as c:
        r = c.post("/transcribe", json={"audio_path": wav, "options": {"fake": {"rtf": 0.5}}})
    assert r.status_code == 200, activator.log()
    daemon = activator.started[0]
    assert activator.wait_for(lambda: activator.exits), activator.log()
    notes = activator.notes_from(daemon.pid)
    assert any(n.fields.get("READY") == "1" for n in notes), activator.notes
    ready_at = next(i for i, n in enumerate(notes) if n.fields.get("READY") == "1")
    statuses = [n.fields["STATUS"] for n in notes[ready_at:] if "STATUS" in n.fields]
    assert statuses[0] == "idle"
    assert any(s.startswith("loading") or s.startswith("starting") for s in statuses), statuses
    assert any(s.startswith("transcribing 会议 1.wav") and s.endswith("%") for s in statuses), statuses
    assert "unloading" in statuses
    stopping = [i for i, n in enumerate(notes) if n.fields.get("STOPPING") == "1"]
    assert stopping and stopping[0] > ready_at
    assert activator.exits == [0]


def test_idle_exit_then_the_next_connection_activates_a_new_instance(activator: Activator) -> None:
    with client(activator.path) as c:
        assert c.get("/health").json()["status"] == "idle"
    assert activator.wait_for(lambda: activator.exits == [0]), activator.log()
    first = activator.started[0].pid
    with client(activator.path) as c:
        assert c.get("/health").status_code == 200
    assert len(activator.started) == 2 and activator.started[1].pid != first
    second = activator.started[1].pid
    assert activator.wait_for(lambda: any(n.fields.get("READY") == "1" for n in activator.notes_from(second)))
    assert activator.wait_for(lambda: activator.exits == [0, 0])


@pytest.mark.parametrize("workers, models, parallel", [(1, 1, 1), (2, 2, 1), (1, 1, 4)])
def test_no_request_is_lost_across_idle_exits_under_concurrent_load(short_tmp: str, workers: int, models: int,
                                                                    parallel: int) -> None:
    """With the pool too: two workers and two models (every other client names ``base``), so exits come while
    workers of either model stop on their own TTLs, load, or are stopped to make room; and one worker holding
    the clients' requests together (HASR_WORKER_PARALLEL=4, issue 30)."""
    act = Activator(short_tmp, env={"HASR_IDLE_EXIT_SEC": "0.3", "HASR_IDLE_TTL_SEC": "0.1",
                                    "HASR_MAX_WORKERS": str(workers), "HASR_WORKER_PARALLEL": str(parallel)})
    wav = write_wav(os.path.join(short_tmp, "a.wav"), 0.5)
    failures: list[str] = []
    done = 0
    lock = threading.Lock()

    # Rounds: every client sends one request at a small random offset, then all pause for a time drawn
    # around the moment the daemon decides to exit (worker TTL 0.1 s + idle exit 0.3 s after the last
    # request), so requests keep landing just before, during and just after an exit.
    barrier = threading.Barrier(6)
    pauses = random.Random(7).choices([0.0, 0.1, 0.35, 0.42, 0.5, 0.6, 0.9], k=40)

    def worker(seed: int) -> None:
        nonlocal done
        rng = random.Random(seed)
        for i in range(40):
            time.sleep(rng.uniform(0, 0.08))
            try:
                with client(act.path, timeout=60) as c:
                    model = "base" if models > 1 and seed % 2 else ""
                    r = c.post("/transcribe", json={"audio_path": wav, "options": {"model": model}})
                if r.status_code != 200 or not r.json().get("final"):
                    failures.append(f"client {seed} #{i}: {r.status_code} {r.text[:200]}")
            except Exception as e:  # noqa: BLE001 - every failure counts
                failures.append(f"client {seed} #{i}: {type(e).__name__}: {e}")
            with lock:
                done += 1
            barrier.wait(120)
            time.sleep(pauses[i])

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(6)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(600)
    finally:
        act.close()
    assert done == 240
    assert failures == [], "\n".join(failures[:10]) + "\n" + act.log()[-3000:]
    assert len(act.started) >= 5, f"only {len(act.started)} activations: the load should cross idle exits"
    assert all(code == 0 for code in act.exits), act.exits


def test_sigterm_takes_the_idle_exit_path_and_finishes_the_running_request(short_tmp: str) -> None:
    act = Activator(short_tmp, env={"HASR_IDLE_EXIT_SEC": "60"})
    wav = write_wav(os.path.join(short_tmp, "a.wav"), 1.5)
    results: list[int] = []
    try:
        t = threading.Thread(target=lambda: results.append(
            client(act.path).post("/transcribe", json={"audio_path": wav, "options": {"fake": {"rtf": 1.0}}})
            .status_code))
        t.start()
        assert act.wait_for(lambda: any(s.startswith("transcribing") for s in act.statuses()))
        act.started[0].terminate()
        t.join(30)
        assert results == [200]
        assert act.wait_for(lambda: act.exits == [0])
        assert any(n.fields.get("STOPPING") == "1" for n in act.notes_from(act.started[0].pid))
    finally:
        act.close()


def test_an_optional_tcp_socket_from_the_unit_is_served_but_may_not_name_paths(short_tmp: str) -> None:
    from tests.daemon import TcpHasrd

    d = TcpHasrd(short_tmp)
    try:
        wav = write_wav(os.path.join(short_tmp, "a.wav"), 0.5)
        with d.http(30) as c:
            assert c.get("/health").json()["status"] == "idle"
            r = c.post("/transcribe", json={"audio_path": wav})
            assert r.status_code == 403 and "upload" in r.json()["error"]["message"]
            with open(wav, "rb") as f:
                r = c.post("/v1/audio/transcriptions", files={"file": ("a.wav", f)})
            assert r.status_code == 200 and r.json()["text"]
            r = c.post("/api/stop")
            assert r.status_code == 403 and "Unix socket" in r.json()["error"]["message"]
        with client(d.sock) as c:
            assert c.post("/transcribe", json={"audio_path": wav}).status_code == 200
    finally:
        assert d.close() == 0


def test_watchdog_pings_arrive_when_systemd_asks_for_them(short_tmp: str) -> None:
    act = Activator(short_tmp, env={"HASR_IDLE_EXIT_SEC": "60", "WATCHDOG_USEC": "200000"})
    try:
        with client(act.path) as c:
            assert c.get("/health").status_code == 200
        pid = act.started[0].pid
        assert act.wait_for(lambda: sum(n.fields.get("WATCHDOG") == "1" for n in act.notes_from(pid)) >= 4, 5)
    finally:
        act.close()


def test_a_second_sigterm_stops_at_once_even_while_the_worker_loads(short_tmp: str) -> None:
    act = Activator(short_tmp, env={"HASR_IDLE_EXIT_SEC": "60", "HASR_FAKE_LOAD_SEC": "600"})
    wav = write_wav(os.path.join(short_tmp, "a.wav"), 1.0)
    results: list[object] = []
    try:
        t = threading.Thread(target=lambda: results.append(
            client(act.path).post("/transcribe", json={"audio_path": wav})))
        t.start()
        assert act.wait_for(lambda: any(s.startswith("loading fake models") for s in act.statuses()))
        daemon = act.started[0]
        daemon.terminate()
        # the first SIGTERM is under way: the daemon said why it exits (the worker is still loading)
        assert act.wait_for(lambda: "signal SIGTERM, exiting" in act.statuses(), 120)
        daemon.terminate()
        t.join(120)
        # ended within two minutes, where the load alone takes ten: the second SIGTERM did not wait for it
        assert act.wait_for(lambda: act.exits == [0], 120)
        r = results[0]
        assert r.status_code == 503 and r.json()["error"]["code"] == "shutting_down", r.text  # type: ignore
        assert "stopped while the models were loading" in r.json()["error"]["message"]  # type: ignore
    finally:
        act.close()

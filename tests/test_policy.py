"""Lifecycle policy as pure functions: backoff, fatal, the watchdog, TTL, idle exit, health and status lines."""

from __future__ import annotations

from hasrd import policy
from hasrd.poolstatus import status_text
from hasrd.status import JobStatus, RunnerStatus, State


def test_backoff_doubles_from_the_base_and_stops_at_the_cap() -> None:
    assert [policy.next_backoff(n, 0.5, 4.0) for n in range(0, 6)] == [0.0, 0.5, 1.0, 2.0, 4.0, 4.0]


def test_fatal_after_max_consecutive_failures_and_never_when_disabled() -> None:
    assert not policy.is_fatal(4, 5) and policy.is_fatal(5, 5)
    assert not policy.is_fatal(100, 0)


def test_the_watchdog_waits_for_progress_not_for_a_budget_of_time() -> None:
    # started 1000 s ago, progress 10 s ago: 110 s left of a 120 s stall time, however long the job has run
    assert policy.watchdog_wait(now=2000, started=1000, last_progress=1990, stall=120, cap=0) == (110, "stalled")
    assert policy.watchdog_wait(now=2000, started=1000, last_progress=1870, stall=120, cap=0)[0] <= 0
    # the optional hard cap acts first when it is nearer
    assert policy.watchdog_wait(now=2000, started=1000, last_progress=1990, stall=120, cap=1050) == (50, "cap")


def test_an_idle_daemon_exits_idle_exit_after_the_last_request_not_after_the_worker_unload() -> None:
    # quiet since t=0, worker already unloaded by its TTL: exit at 1800, not at TTL + 1800
    assert policy.idle_exit_in(now=900, quiet_since=0, idle_exit=1800, loaded=False, unload_in=None) == 900
    assert policy.idle_exit_in(now=1800, quiet_since=0, idle_exit=1800, loaded=False, unload_in=None) == 0
    # a worker kept loaded past that holds the daemon until it unloads; one kept for ever holds it for ever
    assert policy.idle_exit_in(now=100, quiet_since=0, idle_exit=1800, loaded=True, unload_in=3500) == 3500
    assert policy.idle_exit_in(now=100, quiet_since=0, idle_exit=1800, loaded=True, unload_in=None) is None
    assert policy.idle_exit_in(now=100, quiet_since=None, idle_exit=1800, loaded=False, unload_in=None) is None


def test_ttl_counts_from_last_use_and_never_fires_while_busy_or_kept_alive() -> None:
    assert policy.unload_in(now=110, last_used=100, ttl=15, in_flight=0) == 5
    assert policy.unload_in(now=115, last_used=100, ttl=15, in_flight=0) == 0  # due now
    assert policy.unload_in(now=10_000, last_used=100, ttl=15, in_flight=1) is None
    assert policy.unload_in(now=10_000, last_used=100, ttl=None, in_flight=0) is None
    assert policy.unload_in(now=100, last_used=100, ttl=0, in_flight=0) == 0


def test_health_follows_the_seed_semantics() -> None:
    assert [policy.health_status(s, busy=False) for s in State] == [
        "idle", "loading", "ok", "idle", "idle", "error"]  # backoff: nothing loads until the next request
    assert [policy.health_status(s, busy=True) for s in (State.READY, State.STOPPING)] == ["busy", "idle"]


def test_status_lines_say_the_state_in_words() -> None:
    assert status_text(RunnerStatus(State.STOPPED)) == "idle"
    assert status_text(RunnerStatus(State.STARTING, phase="loading models", elapsed_s=12.4)) == "loading models 12 s"
    assert status_text(RunnerStatus(State.READY, jobs=(JobStatus("会议.wav", progress=0.4),))) == \
        "transcribing 会议.wav 40%"
    live = JobStatus("live session", live=True, done_s=41.0, total_s=42.2)
    assert status_text(RunnerStatus(State.READY, jobs=(live,)), queue=1) == "live session (42 s of audio) (+1 queued)"
    assert status_text(RunnerStatus(State.STARTING, phase="loading fake models 0.4 s", elapsed_s=0.4)) == \
        "loading fake models 0.4 s"
    a, b = JobStatus("a.wav", progress=0.4), JobStatus("b.wav")
    assert status_text(RunnerStatus(State.READY, jobs=(a, b, b))) == \
        "transcribing a.wav 40% and 2 more"  # the worker holds two more jobs beside it
    assert status_text(RunnerStatus(State.STOPPING)) == "unloading"
    assert status_text(RunnerStatus(State.FATAL, error="no GPU")) == "error: no GPU"


def test_a_cancelled_job_is_waited_for_as_long_as_its_worker_takes_to_load_while_someone_waits() -> None:
    assert policy.cancel_grace(60.0, 1.2, waiting=1) == 1.2  # whisper base on the CPU: not killed after 0.5 s
    assert policy.cancel_grace(60.0, 5.6, waiting=1) == 5.6  # a busy machine's reload (issue 39 #10)
    assert policy.cancel_grace(60.0, 0.1, waiting=1) == policy.QUICK_CANCEL_SEC  # at least that
    assert policy.cancel_grace(60.0, 1.2, waiting=0) == 60.0  # nobody waits: it finishes and stays warm
    assert policy.cancel_grace(60.0, 75.0, waiting=3) == 60.0  # vLLM compiles: up to the configured grace
    assert policy.cancel_grace(60.0, None, waiting=1) == 60.0  # not measured: no guess
    assert policy.cancel_grace(0.2, 1.0, waiting=1) == 0.2  # a shorter configured grace still holds
    assert policy.cancel_grace(60.0, 1.2, waiting=1, others=1) == 60.0  # killing it would fail its other jobs

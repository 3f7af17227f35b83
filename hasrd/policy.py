"""Lifecycle policy as pure functions of plain values, so every decision is unit-tested without processes."""

from __future__ import annotations

from hasrd.status import State


def next_backoff(failures: int, base: float, cap: float) -> float:
    """Delay before the next load attempt after ``failures`` consecutive failed loads (1 → base, doubling)."""
    if failures <= 0:
        return 0.0
    return float(min(cap, base * (2 ** (failures - 1))))


def is_fatal(failures: int, max_failures: int) -> bool:
    return max_failures > 0 and failures >= max_failures


QUICK_CANCEL_SEC = 0.5


def cancel_grace(configured: float, load_s: float | None, waiting: int, others: int = 0) -> float:
    """How long a cancelled job may take to stop before its worker is killed (asked again at every moment of the
    wait: someone may start waiting, the worker's other jobs may end).

    A worker notices a Cancel only between decoder calls, and one call of the whisper engine on the CPU is a
    batch of VAD clips: a queued request waited 8.5-13.3 s behind a client that had left. When someone waits,
    the worker gets as long as loading it again takes (its own load time; QUICK_CANCEL_SEC at least): killed
    sooner, it would cost a reload that a moment's wait would have saved (one vanished client in four had its
    worker killed after 0.5 s and reloaded in 5.6 s, issue 39 #10); waited for longer, the reload would have
    been quicker. Either way the one waiting never waits more than twice the better of the two (the ski-rental
    rule). A worker that loads slowly (vLLM compiles for 40-90 s) gets up to the configured grace
    (HASR_CANCEL_GRACE_SEC). Nobody waiting: the worker finishes its call and stays warm. A worker that holds
    ``others`` jobs besides the cancelled one gets the configured grace: killing it would fail them all.
    """
    if others <= 0 and waiting > 0 and load_s is not None and load_s >= 0:
        return min(configured, max(QUICK_CANCEL_SEC, load_s))
    return configured


def watchdog_wait(now: float, started: float, last_progress: float, stall: float,
                  cap: float) -> tuple[float, str]:
    """How long a job may still run before the watchdog acts, and what it would be: "stalled" (no progress
    for ``stall`` seconds) or "cap" (``cap`` seconds since the start; 0 = no cap)."""
    left, why = last_progress + stall - now, "stalled"
    if cap > 0 and started + cap - now < left:
        left, why = started + cap - now, "cap"
    return left, why


def unload_in(now: float, last_used: float, ttl: float | None, in_flight: int) -> float | None:
    """Seconds until an idle worker should be unloaded; <= 0 means now; None means not while this holds.

    ``ttl is None`` is keep-alive forever. A worker with any request admitted (queued, loading or running)
    is never due: the TTL counts from the end of the last request.
    """
    if ttl is None or in_flight > 0:
        return None
    return (last_used + ttl) - now


def idle_exit_in(now: float, quiet_since: float | None, idle_exit: float, loaded: bool,
                 unload_in: float | None) -> float | None:
    """Seconds until an idle daemon exits (<= 0: now); None: not while this holds.

    ``quiet_since``: when the last connection, request, load or stop ended (None: not quiet). A ``loaded``
    worker whose TTL ends later than that (``unload_in``; None: kept alive for ever) holds the daemon until it
    is unloaded.
    """
    if quiet_since is None:
        return None
    left = quiet_since + idle_exit - now
    if loaded:
        if unload_in is None:
            return None
        left = max(left, unload_in)
    return left


def health_status(state: State, busy: bool) -> str:
    """The pool's health from its state: the seed's idle | loading | ok | error, and busy while a job runs on a
    ready worker (/api/events; /health says ok and ``busy``)."""
    if state == State.READY:
        return "busy" if busy else "ok"
    return {State.STARTING: "loading", State.FATAL: "error"}.get(state, "idle")  # backoff's reason is in "error"

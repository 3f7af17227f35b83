"""The pool's status view: the :class:`~hasrd.status.PoolStatus` that /api/ps, /api/events, the STATUS= line and the
tray read, built in one place from each worker's :class:`~hasrd.status.RunnerStatus` and the pool's hold on it
(its reservations, its expiry), with the STATUS= line in words and the seed's /health. Functions of the pool's parts
(hasrd.scheduler calls them with its refs); the Structs themselves are hasrd.status's, which the clients share.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from hasrd import placement, policy
from hasrd.expiry import Expiry
from hasrd.poolref import RunnerRef
from hasrd.status import UNSET, Health, PoolStatus, RunnerStatus, State, WorkerStatus

# which worker's fields the pool shows at its top level: a busy one, else the most active
ORDER = {State.READY: 0, State.STARTING: 1, State.STOPPING: 2, State.FATAL: 3, State.BACKOFF: 4, State.STOPPED: 5}


def status_text(st: RunnerStatus, queue: int = 0) -> str:
    """A worker's STATUS= line: "idle", "loading models 12 s", "transcribing 会议.wav 40%" (" and 2 more" while
    it holds others; " (+1 queued)" while requests wait), "unloading"."""
    if st.job:
        text = st.job.text() + (f" and {len(st.jobs) - 1} more" if len(st.jobs) > 1 else "")  # decoded beside it
        return text + (f" (+{queue} queued)" if queue else "")
    if st.state == State.STARTING:
        phase = st.phase or "loading models"
        if "loading" not in phase or phase.endswith(" s"):  # some engines count the seconds themselves
            return phase
        return f"{phase} {int(st.elapsed_s)} s"
    if st.state == State.BACKOFF:
        return f"load failed ({st.failures or 1}x): {st.error or ''}; the next request retries"
    if st.state == State.FATAL:
        return f"error: {st.error or 'loading failed repeatedly'}"
    return {State.STOPPING: "unloading", State.READY: "ready"}.get(st.state, "idle")


def pool_text(top: RunnerStatus, workers: list[WorkerStatus], queue: int) -> str:
    """The pool's STATUS= line: its one active worker's line; several summarised ("2 workers: base transcribing
    x.wav 40%, base live session (12 s of audio)")."""
    active = [w for w in workers if w.state != State.STOPPED]
    if len(active) <= 1:
        return status_text(top, queue)
    text = f"{len(active)} workers: " + ", ".join(f"{w.model} {w.status_text}" for w in active)
    return text + (f" (+{queue} queued)" if queue else "")


def worker_status(ref: RunnerRef, st: RunnerStatus, expires_in: float | None) -> WorkerStatus:
    """One worker as /api/ps lists it: its runner's status and the pool's view of it."""
    cpu = ref.device == placement.CPU
    return WorkerStatus(
        id=ref.key, model=ref.spec.name, engine=ref.spec.engine, device="cpu" if cpu else "cuda",
        gpu_uuid=None if cpu else ref.device, state=st.state, pid=st.pid, busy=bool(st.jobs) or ref.refs > 0,
        running=len(st.jobs), job=st.job, jobs=list(st.jobs), expires_in_s=_left(expires_in), load_s=st.load_s,
        error=st.error, need_mb=ref.need_mb, rss_mb=rss_mb(st.pid) if cpu else UNSET,
        vram_mb=UNSET if cpu else (st.vram_mb or ref.held_mb or None), status_text=status_text(st))


def pool_status(refs: Iterable[RunnerRef], expiry: Expiry, *, engine: str, in_flight: int, queue: int,
                max_workers: int, idle_seconds: float) -> PoolStatus:
    """The pool at this moment: the most active worker's fields (what the tray and /health always had: its first
    job as ``job``), the pool's counts (``running``: jobs on every worker; ``jobs``: all of them, live sessions
    first), and every worker under ``workers``."""
    seen = sorted(((r, r.runner.status()) for r in refs), key=lambda v: v[0].key)
    workers = [worker_status(r, st, expiry.expires_in(r)) for r, st in seen]
    jobs = sorted((j for _, s in seen for j in s.jobs), key=lambda j: not j.live)
    top = min(seen, key=lambda v: (v[1].job is None, ORDER[v[1].state], v[0].key), default=None)
    st, expires_in, ttl = RunnerStatus(State.STOPPED), None, expiry.ttl(None)
    if top is not None:
        st, expires_in, ttl = top[1], expiry.expires_in(top[0]), expiry.ttl(top[0])
        idle_seconds = round(expiry.clock() - top[0].last_used, 1)
    state = pool_state([s.state for _, s in seen])
    return PoolStatus(
        state=state, health=policy.health_status(state, busy=bool(jobs)), status_text=pool_text(st, workers, queue),
        pid=st.pid, engine=engine, identity=dict(st.identity), load_s=st.load_s, vram_mb=st.vram_mb,
        expires_in_s=_left(expires_in), expires_at=None if expires_in is None else time.time() + max(0.0, expires_in),
        phase=st.phase, elapsed_s=st.elapsed_s, expected_s=st.expected_s, job=st.job, error=st.error,
        error_code=st.error_code, failures=st.failures, idle_seconds=0.0 if in_flight else idle_seconds, ttl_sec=ttl,
        running=len(jobs), jobs=jobs, in_flight=in_flight, queue=queue, max_workers=max_workers, workers=workers)


def health(ps: PoolStatus) -> Health:
    """The seed's /health, from the pool's snapshot."""
    return Health(status="ok" if ps.health == "busy" else ps.health, model_loaded=ps.state == State.READY,
                  engine=ps.engine, loading=ps.state == State.STARTING, idle_seconds=ps.idle_seconds,
                  ttl_sec=ps.ttl_sec, busy=ps.running > 0, queue=ps.queue, error=ps.error)


def pool_state(states: list[State]) -> State:
    """The pool in one word, for the seed's /health and the idle exit: the most active worker's state."""
    return min(states, key=ORDER.__getitem__, default=State.STOPPED)


def _left(seconds: float | None) -> float | None:
    return None if seconds is None else round(max(0.0, seconds), 3)


def rss_mb(pid: int | None) -> int | None:
    if not pid:
        return None
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) // 1024
    except OSError:
        return None
    return None

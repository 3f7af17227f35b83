"""What /api/ps, /health, the STATUS= line and the tray read: a runner's frozen :class:`RunnerStatus` (with its
:class:`JobStatus` values, as hasrd.runner.Runner.status() fills them) and the pool's JSON, built here in one place
from those and the pool's own counts (pure functions, no pool object). The status values live here, beside what
renders them, so that the runner's module holds only its lifecycle and this one imports no runner.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hasrd import placement, policy
from hasrd.lifecycle import State

# which worker's line the pool shows when it shows one: the most active
ORDER = {State.READY: 0, State.STARTING: 1, State.STOPPING: 2, State.FATAL: 3, State.BACKOFF: 4, State.STOPPED: 5}


@dataclass(frozen=True)
class JobStatus:
    """A job a runner is running, as the status line and /api/ps show it."""

    name: str
    live: bool = False
    done_s: float = 0.0
    total_s: float = 0.0
    progress: float = 0.0
    phase: str = "decoding"  # what the worker does now (protocol.Phase)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "done_s": self.done_s, "total_s": self.total_s,
                               "progress": self.progress, "phase": self.phase}
        if self.live:
            out["live"] = True
        return out


@dataclass(frozen=True)
class RunnerStatus:
    """A runner at one moment: what /api/ps, the STATUS= line and the tray read."""

    state: State
    pid: int | None = None
    identity: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    load_s: float | None = None
    phase: str = ""  # STARTING only
    elapsed_s: float = 0.0  # STARTING only: since the load began
    expected_s: float = 0.0  # STARTING only: what the last load took, or what the engine expects
    jobs: tuple[JobStatus, ...] = ()  # what its worker holds now: live sessions first, then in start order
    error: str | None = None  # BACKOFF and FATAL: the kept reason
    error_code: str | None = None
    failures: int = 0

    @property
    def job(self) -> JobStatus | None:
        """The first of its jobs, a live session first, or None: what one status line shows."""
        return next((j for j in self.jobs if j.live), self.jobs[0] if self.jobs else None)

    @property
    def vram_mb(self) -> int | None:
        v = self.identity.get("vram_mb")
        return int(v) if v is not None else None


@dataclass(frozen=True)
class WorkerView:
    """One worker of the pool as /api/ps lists it: its runner's status and the pool's view of it."""

    key: int
    model: str
    engine: str
    device: str  # "cpu" or a GPU UUID
    status: RunnerStatus
    reserved: int  # requests handed this worker and not finished
    need_mb: int
    held_mb: int
    expires_in_s: float | None
    ttl_sec: float | None
    idle_seconds: float
    rss_mb: int | None = None


def runner_json(st: RunnerStatus, *, engine: str, expires_in_s: float | None, ttl_sec: float | None,
                idle_seconds: float) -> dict[str, Any]:
    """One runner's fields, as a single worker's daemon always reported them."""
    snap: dict[str, Any] = {
        "state": st.state.value,
        "health": "busy" if (st.job and st.state == State.READY) else policy.health_status(st.state.value),
        "pid": st.pid,
        "engine": engine,
        "identity": dict(st.identity),
        "load_s": st.load_s,
        "vram_mb": st.vram_mb,
        "expires_in_s": round(max(0.0, expires_in_s), 3) if expires_in_s is not None else None,
        "expires_at": (time.time() + max(0.0, expires_in_s)) if expires_in_s is not None else None,
        "running": len(st.jobs),
        "phase": st.phase,
        "elapsed_s": st.elapsed_s,
        "expected_s": st.expected_s,
        "job": st.job.to_json() if st.job else None,  # the first of "jobs" (a live session first)
        "jobs": [j.to_json() for j in st.jobs],
        "error": st.error,
        "error_code": st.error_code,
        "idle_seconds": idle_seconds,
        "ttl_sec": ttl_sec,
        "failures": st.failures,
    }
    snap["status_text"] = policy.status_text(snap)
    return snap


def worker_row(w: WorkerView) -> dict[str, Any]:
    st = w.status
    snap = runner_json(st, engine=w.engine, expires_in_s=w.expires_in_s, ttl_sec=w.ttl_sec,
                       idle_seconds=w.idle_seconds)
    row: dict[str, Any] = {
        "id": w.key, "pid": st.pid, "model": w.model, "engine": w.engine,
        "device": "cpu" if w.device == placement.CPU else "cuda",
        "gpu_uuid": None if w.device == placement.CPU else w.device, "state": st.state.value,
        "busy": st.job is not None or w.reserved > 0, "running": snap["running"], "job": snap["job"],
        "jobs": snap["jobs"], "expires_in_s": snap["expires_in_s"],
        "load_s": st.load_s, "error": st.error, "need_mb": w.need_mb}
    if w.device == placement.CPU:
        row["rss_mb"] = w.rss_mb
    else:
        row["vram_mb"] = st.vram_mb or w.held_mb or None
    row["status_text"] = snap["status_text"]
    return row


def pool_state(states: list[State]) -> State:
    """The pool in one word, for the seed's /health and the idle exit: the most active worker's state."""
    for s in (State.READY, State.STARTING, State.STOPPING, State.FATAL, State.BACKOFF):
        if s in states:
            return s
    return State.STOPPED


def pool_json(workers: list[WorkerView], *, engine: str, in_flight: int, queue: int, max_workers: int,
              ttl_setting: float, idle_seconds: float) -> dict[str, Any]:
    """The most active worker's fields (what the tray and /health always had: its first job as ``job``), the
    pool's counts (``running``: jobs on every worker; ``jobs``: all of them, live sessions first), and every
    worker under ``workers``."""
    ordered = sorted(workers, key=lambda w: (w.status.job is None, ORDER[w.status.state], w.key))
    if ordered:
        top = ordered[0]
        snap = runner_json(top.status, engine=engine, expires_in_s=top.expires_in_s, ttl_sec=top.ttl_sec,
                           idle_seconds=top.idle_seconds if not in_flight else 0.0)
    else:
        snap = runner_json(RunnerStatus(State.STOPPED), engine=engine, expires_in_s=None, ttl_sec=ttl_setting,
                           idle_seconds=idle_seconds if not in_flight else 0.0)
    state = pool_state([w.status.state for w in workers])
    jobs = sorted((j for w in sorted(workers, key=lambda w: w.key) for j in w.status.jobs), key=lambda j: not j.live)
    snap.update(in_flight=in_flight, queue=queue, workers=[worker_row(w) for w in sorted(workers, key=lambda w: w.key)],
                max_workers=max_workers, running=len(jobs), jobs=[j.to_json() for j in jobs], state=state.value)
    snap["health"] = "busy" if jobs and state == State.READY else policy.health_status(state.value)
    snap["status_text"] = policy.pool_status_text(snap)
    return snap


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

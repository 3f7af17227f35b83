"""The pool's status as Structs: what ``/health``, ``/api/ps`` and ``/api/events`` send (docs/API.md). The daemon
builds them (hasrd.poolstatus, from each runner's :class:`RunnerStatus`) and encodes them once, at the route;
hasrctl and the tray decode the JSON into the same Structs (:func:`decode`), as a result is a
:class:`~hasrd.transcript.Transcript` at both ends.

A leaf module: msgspec only, so the CLI and the tray import it without anything of the daemon.
"""

from __future__ import annotations

import enum
from typing import Any, TypeVar

import msgspec
from msgspec import UNSET, UnsetType

T = TypeVar("T")


class State(str, enum.Enum):
    """A worker's state (hasrd.lifecycle holds the transitions and says what happens in each)."""

    STOPPED = "stopped"
    STARTING = "starting"
    READY = "ready"
    STOPPING = "stopping"
    BACKOFF = "backoff"
    FATAL = "fatal"


class JobStatus(msgspec.Struct, frozen=True):
    """A job a worker runs (a file, or a live session), as the status line, /api/ps and the tray show it."""

    name: str
    live: bool = False
    done_s: float = 0.0
    total_s: float = 0.0
    progress: float = 0.0
    phase: str = "decoding"  # what the worker does now (a Progress frame's phase)

    def text(self) -> str:
        """``transcribing 会议.wav 40%``; a live session has no end to be a percentage of: how long it listened."""
        if self.live:
            return f"live session ({self.total_s:.0f} s of audio)"
        progress = self.progress or (self.done_s / self.total_s if self.total_s else 0.0)
        return f"transcribing {self.name or 'audio'} {int(round(100 * min(1.0, progress)))}%"


class RunnerStatus(msgspec.Struct, frozen=True):
    """A runner at one moment (hasrd.runner.Runner.status): what the pool shows of its worker."""

    state: State
    pid: int | None = None
    identity: dict[str, Any] = {}  # what the worker's Ready said of its engine, models and device
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


class WorkerStatus(msgspec.Struct, kw_only=True):
    """One worker of ``/api/ps``'s ``workers`` (``hasrctl ps`` prints them as a table)."""

    id: int = 0
    model: str = ""
    engine: str = ""
    device: str = "cpu"  # "cpu" | "cuda"
    gpu_uuid: str | None = None
    state: State = State.STOPPED
    pid: int | None = None
    busy: bool = False  # a job runs on it, or a request was handed it
    running: int = 0
    job: JobStatus | None = None
    jobs: list[JobStatus] = []
    expires_in_s: float | None = None
    load_s: float | None = None
    error: str | None = None
    need_mb: int = 0  # the memory placement counted on when it started the worker
    rss_mb: int | None | UnsetType = UNSET  # a CPU worker's resident memory
    vram_mb: int | None | UnsetType = UNSET  # a GPU worker's memory
    status_text: str = ""


class PoolStatus(msgspec.Struct, kw_only=True):
    """A snapshot of ``/api/events`` (and ``/api/ps``, with the last three fields): the most active worker's fields
    (a busy one, else a ready or loading one), the pool's counts and every worker. ``health`` is idle | loading |
    ok | busy | error; ``status_text`` the sd_notify STATUS line."""

    state: State = State.STOPPED
    health: str = "idle"
    status_text: str = "idle"
    pid: int | None = None
    engine: str = ""
    identity: dict[str, Any] = {}
    load_s: float | None = None
    vram_mb: int | None = None
    expires_in_s: float | None = None
    expires_at: float | None = None
    phase: str = ""
    elapsed_s: float = 0.0
    expected_s: float = 0.0
    job: JobStatus | None = None
    error: str | None = None
    error_code: str | None = None
    failures: int = 0
    idle_seconds: float = 0.0
    ttl_sec: float | None = None
    running: int = 0  # jobs running on every worker
    jobs: list[JobStatus] = []  # all of them, live sessions first
    in_flight: int = 0  # admitted requests: decoding, queued or running
    queue: int = 0
    max_workers: int = 1
    workers: list[WorkerStatus] = []
    daemon_pid: int | UnsetType = UNSET
    queued_audio_mb: float | UnsetType = UNSET
    max_queued_audio_mb: float | UnsetType = UNSET


class Health(msgspec.Struct, kw_only=True):
    """The seed's ``/health``: always answered, in every state."""

    status: str = "idle"  # idle | loading | ok | error
    model_loaded: bool = False
    engine: str = ""
    loading: bool = False
    idle_seconds: float = 0.0
    ttl_sec: float | None = None
    busy: bool = False
    queue: int = 0
    error: str | None = None


def decode(obj: Any, kind: type[T]) -> T:
    """What the daemon sent (decoded JSON) as ``kind``; ValueError saying which field when it is not one (a daemon
    of another version). Unknown fields are left out, so a newer daemon's answer still reads."""
    try:
        return msgspec.convert(obj, kind)
    except msgspec.ValidationError as e:
        raise ValueError(f"the daemon's answer cannot be read ({e}): is hasrd the same version as this client? "
                         f"`hasrctl stop` restarts it on the next request") from None

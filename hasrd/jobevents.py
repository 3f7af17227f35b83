"""What a job tells whoever waits on it, typed from the worker to the route that renders it.

The worker's events arrive as the protocol's own Structs (``Progress``, ``Draft``, ``Sentence``, ``Turn``) and
travel as they are; the daemon adds its own (``Loading``, ``Queued``) and a stream's end (``Done``,
``Failed``). Consumers ``match`` on the type; nobody reads them by string keys. :func:`to_json` is the one
place that gives each its JSON shape (docs/API.md: /transcribe's NDJSON events, whose shape hasrctl reads).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from hasrd.protocol import Draft, Progress, Sentence, Turn
from hasrd import transcript
from hasrd.transcript import Transcript


class Loading(msgspec.Struct, frozen=True):
    """The worker this job waits for is loading: ``phase`` as the engine tells it."""

    phase: str
    elapsed_s: float = 0.0
    expected_s: float | None = None  # what the last load took, or what the engine expects (when known)


class Queued(msgspec.Struct, frozen=True):
    """The job waits for a worker; 1 = next. Sent whenever the position changes."""

    position: int


class Done(msgspec.Struct, frozen=True):
    """A stream's last event: the job's result."""

    result: Transcript


class Failed(msgspec.Struct, frozen=True):
    """A stream's last event when the job failed: the error body (``errors.HasrError.to_json()``)."""

    body: dict[str, Any]


JobEvent = Progress | Draft | Sentence | Turn | Loading | Queued
StreamEvent = JobEvent | Done | Failed
EventSink = Callable[[JobEvent], None]


def to_json(ev: StreamEvent) -> dict[str, Any]:
    """The event as /transcribe streams it: ``{"event": kind, ...}``."""
    match ev:
        case Progress(done_s=done, total_s=total, phase=phase):
            return {"event": "progress", "done_s": done, "total_s": total, "phase": phase}
        case Draft(text=text, segment=segment):
            return {"event": "draft", "text": text, "segment": segment}
        case Sentence():
            said = {"event": "sentence", "index": ev.index, "text": ev.text, "engine": ev.engine,
                    "start_s": ev.start_s, "end_s": ev.end_s, "segment": ev.segment}
            return {**said, "speaker": ev.speaker} if ev.speaker else said
        case Turn():
            return {"event": "turn", "segment": ev.segment, "kind": ev.kind, "start_s": ev.start_s,
                    "end_s": ev.end_s, "text": ev.text}
        case Loading(phase=phase, elapsed_s=elapsed, expected_s=expected):
            out: dict[str, Any] = {"event": "loading", "phase": phase, "elapsed_s": elapsed}
            if expected is not None:
                out["expected_s"] = expected
            return out
        case Queued(position=position):
            return {"event": "queued", "position": position}
        case Done(result=result):
            return {"event": "done", "result": transcript.to_json(result)}
        case Failed(body=body):
            return {"event": "error", **body}
    raise TypeError(f"not a job event: {ev!r}")

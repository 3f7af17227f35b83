"""The worker lifecycle's vocabulary, as plain values a runner owns: the one table of transitions between its
states (``State`` itself is in hasrd.status, which the clients read too), the keep-alive a load may set, and what
a failed job had made final.

What happens in each state (hasrd.runner.Runner), and the only transitions allowed (:data:`TRANSITIONS`; any
other raises :class:`IllegalTransition`):

    STOPPED   no worker. :meth:`Runner.ready` starts one                            -> STARTING
    STARTING  one load in flight; every caller of ready() waits for that same load (single flight).
              Ready                                                                 -> READY
              failure                                                               -> BACKOFF, or FATAL after N
              the daemon was forced to stop meanwhile                               -> STOPPED
    READY     serving the jobs its holder runs (several at once).
              :meth:`Runner.stop` (the TTL, /api/unload, an eviction, daemon exit)  -> STOPPING
              the worker died, stalled or ignored Cancel (its jobs fail)            -> STOPPED
    STOPPING  Shutdown, SIGTERM, SIGKILL of the worker's process group              -> STOPPED
    BACKOFF   a load failed: the next ready() waits out the delay (doubling)        -> STARTING
              :meth:`Runner.clear_failure` (/api/unload)                             -> STOPPED
    FATAL     N failed loads in a row: ready() fails at once with the kept reason (health "error").
              :meth:`Runner.retry_now` (/api/load) or clear_failure                 -> STOPPED
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from hasrd import errors
from hasrd.jobevents import JobEvent
from hasrd.protocol import Progress, Sentence
from hasrd.status import State


TRANSITIONS: dict[State, frozenset[State]] = {
    State.STOPPED: frozenset({State.STARTING}),
    State.STARTING: frozenset({State.READY, State.BACKOFF, State.FATAL, State.STOPPED}),
    State.READY: frozenset({State.STOPPING, State.STOPPED}),
    State.STOPPING: frozenset({State.STOPPED}),
    State.BACKOFF: frozenset({State.STARTING, State.STOPPED}),
    State.FATAL: frozenset({State.STOPPED}),
}


class IllegalTransition(RuntimeError):
    """A bug in the runner: a state change the table does not allow."""


def check_transition(old: State, new: State) -> None:
    if new != old and new not in TRANSITIONS[old]:
        raise IllegalTransition(f"worker state {old.value} -> {new.value} is not allowed")


@dataclass(frozen=True)
class KeepAlive:
    """How long an idle worker stays loaded: the setting (HASR_IDLE_TTL_SEC), N seconds, or forever.

    Set by ``/api/load``; it belongs to the worker that is loaded, so it goes back to the setting when that
    worker is stopped (not later: a keep-alive asked for while the worker was being stopped is for the next).
    """

    mode: Literal["setting", "seconds", "forever"] = "setting"
    seconds: float = 0.0

    @classmethod
    def parse(cls, seconds: float | None) -> KeepAlive:
        """None: the setting; < 0: forever; else that many seconds."""
        if seconds is None:
            return SETTING
        return FOREVER if seconds < 0 else cls("seconds", float(seconds))

    def ttl(self, setting: float) -> float | None:
        return {"setting": setting, "seconds": self.seconds, "forever": None}[self.mode]


SETTING = KeepAlive()
FOREVER = KeepAlive("forever")


class Partial:
    """The sentences a job made final, kept so that a failure can still hand them to the client."""

    def __init__(self) -> None:
        self.sentences: list[dict[str, Any]] = []
        self.done_s = 0.0

    def add(self, ev: JobEvent) -> None:
        match ev:
            case Sentence():
                self.sentences.append({"index": ev.index, "text": ev.text, "engine": ev.engine,
                                       "start_s": ev.start_s, "end_s": ev.end_s})
            case Progress(done_s=done):
                self.done_s = max(self.done_s, done)

    def attach(self, e: errors.HasrError, language: str) -> None:
        if not self.sentences:
            return
        from hasrd.languages import UnknownLanguage, join_sentences, resolve

        try:
            code = resolve(language)[1] if language else ""
        except UnknownLanguage:
            code = ""
        e.partial = {"text": join_sentences([str(s["text"]) for s in self.sentences], code),
                     "sentences": self.sentences, "done_s": round(self.done_s, 3)}
        e.message += (f" ({len(self.sentences)} sentence{'s' if len(self.sentences) != 1 else ''} up to "
                      f"{self.done_s:.0f} s were final: kept in error.partial)")

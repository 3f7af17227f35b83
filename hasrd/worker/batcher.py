"""One decode loop per worker: every job's model steps in, batched model calls out (vLLM's engine core in small;
docs/ARCHITECTURE.md "One worker, many jobs" tells how it is built, what calls go through it and the lanes).

Each job runs in its own thread and calls the model as if it were alone; :meth:`Batcher.run` queues the step and
blocks the job's thread until the loop has run a batch holding it (:func:`hasrd.worker.batchpolicy.next_batch`
chooses which steps run together).

- The job a step belongs to is the calling thread's :class:`JobTag` (:func:`bound`); a thread a job starts binds
  the same tag (:func:`current` before the start). A thread with no tag is a job of its own, not live.
- A cancelled job's waiting steps leave before the next batch is chosen (it frees its share within one batch);
  its thread gets ``EngineError("cancelled")``. A failed batch of several steps is run again step by step, so one
  job's bad input fails that job alone.
- Bounded by construction: a job thread waits on one step at a time (the hybrid: one per thread it runs).
- A step may run :meth:`Batcher.alone` (whisper's alignment; R2T2's streaming calls, which are also ``serial``:
  vLLM's ``LLM`` takes one call at a time, so no two run at once in two lanes).
- Phase: jobs call encode, detect, generate and align in turn, so two jobs one step apart would alternate for
  ever and never share a call (measured: 0 shared batches of 20 for two files). Hence ``linger``: once two jobs
  share a step they stay in step.
"""

from __future__ import annotations

import contextlib
import itertools
import sys
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from hasrd.errors import EngineError
from hasrd.worker.batchpolicy import Allow, Wait, may_start, next_batch, urgent

P = TypeVar("P")
R = TypeVar("R")
Execute = Callable[[list[Any]], list[Any]]
"""Runs one model call for several steps' payloads; returns one result per payload, in order."""


def _never() -> bool:
    return False


@dataclass(frozen=True)
class JobTag:
    """Whose step this is: the request id, whether it is live, and how to ask whether it was cancelled."""

    id: int
    live: bool = False
    cancelled: Callable[[], bool] = _never
    short: bool = False  # at most one 30 s window of audio: served ahead of long files (batchpolicy)


_local = threading.local()


def current() -> JobTag | None:
    """The job the calling thread works for (None: none was bound)."""
    return getattr(_local, "tag", None)


@contextlib.contextmanager
def bound(tag: JobTag | None) -> Iterator[None]:
    """Work for ``tag`` in this thread while the block runs."""
    before = current()
    _local.tag = tag
    try:
        yield
    finally:
        _local.tag = before


@dataclass(eq=False)
class _Step:
    wait: Wait
    payload: object
    execute: Execute
    tag: JobTag
    serial: bool = False
    done: threading.Event = field(default_factory=threading.Event)
    result: object = None
    error: BaseException | None = None

    def finish(self, result: object = None, error: BaseException | None = None) -> None:
        self.result, self.error = result, error
        self.done.set()


@dataclass
class Stats:
    """What the loop did (the worker's identity and the benchmarks read it)."""

    batches: int = 0
    steps: int = 0
    items: int = 0
    shared: int = 0  # batches that held steps of more than one job
    largest: int = 0  # most items in one batch
    busy_s: float = 0.0  # running model calls (summed over lanes)
    idle_s: float = 0.0  # waiting for a step, or for a lane it may take
    linger_s: float = 0.0  # waiting for the jobs just served (see the module docstring)
    kinds: dict[str, list[float]] = field(default_factory=dict)  # kind -> [calls, items, seconds] (benchmarks)

    def line(self) -> str:
        """One line for a benchmark: the totals and, per kind of call, calls / items / seconds."""
        per = ", ".join(f"{k} {int(c)} calls {int(i)} items {s:.2f} s" for k, (c, i, s) in sorted(self.kinds.items()))
        return (f"{self.batches} batches ({self.shared} shared, largest {self.largest}), busy {self.busy_s:.2f} s, "
                f"idle {self.idle_s:.2f} s, linger {self.linger_s:.2f} s; {per}")


def _each(calls: list[Callable[[], R]]) -> list[R]:
    return [call() for call in calls]


def _cancelled() -> EngineError:
    return EngineError("cancelled", "the request was cancelled")


class Batcher:
    """The worker's decode loop (a daemon thread, started by the first step): calls of up to ``max_items`` items.
    With ``lanes`` > 1 it runs up to that many model calls at once, each in a lane thread (the model must take
    concurrent calls: CTranslate2 with ``inter_threads`` = lanes), and keeps one lane for live and short jobs
    (batchpolicy.may_start)."""

    def __init__(self, max_items: int, *, lanes: int = 1, poll_s: float = 0.1, linger: float = 0.1,
                 linger_max_s: float = 0.02) -> None:
        self.max_items = max(1, int(max_items))
        self.lanes = max(1, int(lanes))
        self.poll_s = poll_s
        self.linger, self.linger_max_s = linger, linger_max_s
        self._last_jobs: set[int] = set()  # the jobs of the batch that ended last, and how long it took
        self._last_s = 0.0
        self.stats = Stats()
        self._cv = threading.Condition()
        self._waiting: list[_Step] = []
        self._served: dict[int, int] = {}
        self._in_flight: list[list[_Step]] = []  # the calls running now, each its steps (lead first)
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None

    def run(self, key: Hashable, items: int, payload: P, execute: Callable[[list[P]], list[R]], *,
            serial: bool = False) -> R:
        """One model step for the calling thread's job: wait until a batch ran it, return its result (or raise
        its error; ``EngineError("cancelled")`` once the job is cancelled before its step ran)."""
        tag = current() or JobTag(-threading.get_ident())
        if tag.cancelled():
            raise _cancelled()
        step = _Step(Wait(next(self._seq), tag.id, tag.live, key, max(1, items), self.stats.batches, tag.short),
                     payload, execute, tag, serial)
        with self._cv:
            self._waiting.append(step)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="hasr-batcher", daemon=True)
                self._thread.start()
            self._cv.notify_all()
        while not step.done.wait(self.poll_s):
            if tag.cancelled():
                with self._cv:
                    if step in self._waiting:  # not taken yet: leave now (a running batch is waited for)
                        self._waiting.remove(step)
                        step.finish(error=_cancelled())
        if step.error is not None:
            raise step.error
        return cast(R, step.result)

    def alone(self, kind: str, items: int, call: Callable[[], R], *, serial: bool = False) -> R:
        """``call()`` as a step that shares no call (a key of its own), ordered with every other step; ``serial``:
        never while another serial call runs (see the module docstring)."""
        return self.run((kind, next(self._seq)), items, call, _each, serial=serial)

    def waiting(self) -> int:
        with self._cv:
            return len(self._waiting)

    def _eligible(self) -> list[_Step]:
        """The waiting steps that may run now (under the lock): a serial step waits while a serial call runs."""
        busy = any(c[0].serial for c in self._in_flight)
        return [s for s in self._waiting if not (busy and s.serial)]

    def _allowed(self, steps: list[_Step]) -> Allow:
        """What a lane may take of ``steps`` now (under the lock): batchpolicy.may_start over the loop's counts."""
        if not steps:
            return "none"
        return may_start(self.lanes, len(self._in_flight), sum(not urgent(c[0].wait) for c in self._in_flight),
                         any(urgent(s.wait) for s in steps), any(not urgent(s.wait) for s in steps))

    def _take(self) -> list[_Step]:
        """The next batch, chosen under the lock once a lane may take it; cancelled jobs' steps leave first."""
        with self._cv:
            while True:
                for s in [s for s in self._waiting if s.tag.cancelled()]:
                    self._waiting.remove(s)
                    s.finish(error=_cancelled())
                allowed = self._allowed(self._eligible())
                if allowed != "none":
                    if allowed != "urgent":  # a live or short step goes at once; files may wait for their peers
                        t0 = time.monotonic()
                        self._linger()  # releases the lock: what waits, and so what may go, can change
                        self.stats.linger_s += time.monotonic() - t0
                    eligible = self._eligible()
                    allowed = self._allowed(eligible)
                    chosen = [] if allowed == "none" else next_batch(
                        [s.wait for s in eligible], self._served, self.max_items, self.stats.batches,
                        allow=allowed, mix=self.lanes <= 1)
                    if chosen:
                        break
                t0 = time.monotonic()
                self._cv.wait(self.poll_s if self._waiting else None)
                self.stats.idle_s += time.monotonic() - t0
            by_wait = {id(s.wait): s for s in self._waiting}
            steps = [by_wait[id(w)] for w in chosen]
            self._waiting = [s for s in self._waiting if s not in steps]
            n = self.stats.batches = self.stats.batches + 1
            for s in steps:
                self._served[s.wait.job] = n
            if len(self._served) > 4096:  # forget jobs that wait for nothing (they have ended)
                live_jobs = {s.wait.job for s in self._waiting} | {s.wait.job for s in steps}
                self._served = {j: b for j, b in self._served.items() if j in live_jobs}
            self._in_flight.append(steps)
            return steps

    def _linger(self) -> None:
        """Wait (under the lock) a little for the jobs just served to ask again, while the batch has room; a job
        whose next step already runs in another lane cannot ask, and is not waited for."""
        deadline = time.monotonic() + min(self.linger_max_s, self.linger * self._last_s)
        while sum(s.wait.items for s in self._waiting) < self.max_items:
            running = {s.wait.job for c in self._in_flight for s in c}
            expected = self._last_jobs - running
            if not expected or expected <= {s.wait.job for s in self._waiting}:
                return
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._cv.wait(left)

    def _loop(self) -> None:
        lanes = ThreadPoolExecutor(self.lanes, thread_name_prefix="hasr-lane") if self.lanes > 1 else None
        while True:
            steps = self._take()
            items = sum(s.wait.items for s in steps)
            st = self.stats
            st.steps += len(steps)
            st.items += items
            st.largest = max(st.largest, items)
            if len({s.wait.job for s in steps}) > 1:
                st.shared += 1
            if lanes is None:
                self._call(steps, items)
            else:
                lanes.submit(self._call, steps, items)

    def _call(self, steps: list[_Step], items: int) -> None:
        """Run one batch (in the loop's thread, or a lane's), then free its lane and count it. No step is left
        waiting: whatever escapes (a bug of ours) fails the steps not yet answered and is written to stderr."""
        t0 = time.monotonic()
        try:
            self._execute(steps)
        except BaseException as e:  # noqa: BLE001 - a lane thread's error would vanish in its future
            print(f"hasr worker: decode loop: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
            for s in steps:
                if not s.done.is_set():
                    s.finish(error=EngineError("runtime_failure", f"the decode loop failed: {e}"))
        finally:
            with self._cv:
                self._in_flight.remove(steps)
                self._last_jobs = {s.wait.job for s in steps}
                self._last_s = time.monotonic() - t0
                st = self.stats
                st.busy_s += self._last_s
                key = steps[0].wait.key
                kind = st.kinds.setdefault(str(key[0] if isinstance(key, tuple) and key else key), [0, 0, 0.0])
                kind[0] += 1
                kind[1] += items
                kind[2] += self._last_s
                self._cv.notify_all()

    @staticmethod
    def _execute(steps: list[_Step]) -> None:
        try:
            results = steps[0].execute([s.payload for s in steps])
            answers = list(zip(steps, results, strict=True))
        except BaseException as e:  # noqa: BLE001 - handed to the waiting job threads
            if len(steps) == 1:
                steps[0].finish(error=e)
                return
            for s in steps:  # one job's bad input fails that job alone: run each again on its own
                Batcher._execute([s])
            return
        for s, r in answers:
            s.finish(result=r)


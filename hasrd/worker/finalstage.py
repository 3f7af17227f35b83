"""v2c's final stage (v2c.py, "Stage 2"): a segment's sentence windows settled in order, faster-whisper only where
a window is truncated, each sentence emitted once it and every earlier one are settled; and the job's heartbeat
while one faster-whisper call runs.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable, Iterator

import numpy as np

from hasrd.transcript import TimedSentence
from hasrd.worker import batcher
from hasrd.worker.engine import Emitter, EngineError
from hasrd.worker.sentences import CHUNK, SR, Window, choose, window_span

WindowFn = Callable[[np.ndarray], str]

HEARTBEAT_SEC = 1.0


class Heartbeat:
    """The job's progress, re-sent while one faster-whisper call runs, so that the daemon's stall watchdog
    (HASR_STALL_SEC) measures silence, not the length of a single call on a slow device.

    ``report`` is the one way this job's progress reaches the emitter (a lock keeps the draft loop's reports and
    the beats from interleaving); ``during()`` beats every ``every`` seconds from a small daemon thread while the
    block runs, and ``again()`` re-sends the current position (once per settled window).
    """

    def __init__(self, emit: Emitter, every: float = HEARTBEAT_SEC) -> None:
        self.emit, self.every = emit, max(0.05, every)
        self.lock = threading.Lock()
        self.last: tuple[float, float] | None = None

    def report(self, done_s: float, total_s: float) -> None:
        with self.lock:
            self.last = (done_s, total_s)
            self.emit.progress(done_s, total_s)

    def again(self) -> None:
        with self.lock:
            if self.last is not None:
                self.emit.progress(*self.last)

    @contextlib.contextmanager
    def during(self) -> Iterator[None]:
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(self.every):
                self.again()

        t = threading.Thread(target=beat, name="hasr-v2c-heartbeat", daemon=True)
        t.start()
        try:
            yield
        finally:
            stop.set()
            t.join()


class FinalStage:
    """Stage 2 for one segment: settles windows in order and emits each sentence once it and all earlier are.

    ``segment``: the long-audio segment these windows belong to, carried by each ``sentence`` event (as the
    segment's ``draft`` events carry it). ``heartbeat``: the job's progress, kept alive while a window runs.
    """

    def __init__(self, pcm: np.ndarray, window_fn: WindowFn | None, mode: str, emit: Emitter,
                 cancelled: Callable[[], bool], *, index0: int = 0, offset: int = 0, segment: int = 0,
                 heartbeat: Heartbeat | None = None) -> None:
        self.pcm, self.window_fn, self.mode, self.emit, self.cancelled = pcm, window_fn, mode, emit, cancelled
        self.index0, self.offset, self.segment, self.heartbeat = index0, offset, segment, heartbeat
        self.current: TimedSentence | None = None
        self.windows: list[Window] = []
        self.settled: list[TimedSentence | None] = []
        self.next_emit = 0
        self.emitted = 0
        self.fw_calls = 0
        self.fw_s = 0.0
        self.error: BaseException | None = None
        self.lock = threading.Lock()
        self.deferred: list[int] = []
        self.queue: queue.Queue[int | None] = queue.Queue()
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        if mode == "thread" and window_fn is not None:
            # its windows are the job's: they batch with it and leave when it is cancelled (batcher.JobTag)
            self.thread = threading.Thread(target=self._worker, args=(batcher.current(),), name="hasr-v2c-final",
                                           daemon=True)
            self.thread.start()

    def submit(self, w: Window) -> None:
        """A window closed: settle it now when that is free, else per the mode."""
        self.check()
        with self.lock:
            k = len(self.windows)
            self.windows.append(w)
            self.settled.append(None)
        if self.window_fn is None or w.truncated_by is None or self.mode == "inline":
            self._settle(k)
        elif self.mode == "after":
            self.deferred.append(k)
        else:
            self.queue.put(k)

    def check(self) -> None:
        """Re-raise a failure of the final-stage thread in the caller."""
        if self.error is not None:
            raise self.error

    def close(self) -> list[TimedSentence]:
        """Wait until every window is settled; return the per-sentence entries in order."""
        for k in self.deferred:
            if self.cancelled():
                raise EngineError("cancelled", "the request was cancelled")
            self._settle(k)
        self.deferred = []
        if self.thread is not None:
            self.queue.put(None)
            while self.thread.is_alive():
                self.thread.join(0.1)
                if self.cancelled():
                    raise EngineError("cancelled", "the request was cancelled")
        self.check()
        if any(s is None for s in self.settled):
            if self.cancelled():
                raise EngineError("cancelled", "the request was cancelled")
            raise RuntimeError("the v2c final stage ended with unsettled windows")
        return [s for s in self.settled if s is not None and s.text]

    def abort(self) -> None:
        """Stop the thread after its current window (cancel, error, or normal end)."""
        self.stop.set()
        if self.thread is not None and self.thread.is_alive():
            self.queue.put(None)

    def _worker(self, tag: batcher.JobTag | None = None) -> None:
        try:
            with batcher.bound(tag):
                self._settle_queued()
        except BaseException as e:  # handed to the draft loop via check()
            self.error = e

    def _settle_queued(self) -> None:
        while not self.stop.is_set():
            k = self.queue.get()
            if k is None or self.cancelled():
                return
            self._settle(k)

    def _settle(self, k: int) -> None:
        w = self.windows[k]
        fw_text: str | None = None
        if self.window_fn is not None and w.truncated_by is not None:
            a0, a1 = window_span(w.start_chunk, w.end_chunk, len(self.pcm))
            t0 = time.monotonic()
            with self.heartbeat.during() if self.heartbeat is not None else contextlib.nullcontext():
                fw_text = self.window_fn(self.pcm[a0:a1])
            with self.lock:
                self.fw_s += time.monotonic() - t0
                self.fw_calls += 1
            if self.heartbeat is not None:
                self.heartbeat.again()  # progress per window
        text, engine = choose(w.text, fw_text, w.truncated_by)
        start_s = round((self.offset + w.open_chunk * CHUNK) / SR, 3)  # the draft's clock: contiguous cues
        end_s = round((self.offset + min(len(self.pcm), (w.end_chunk + 1) * CHUNK)) / SR, 3)
        with self.lock:
            self.settled[k] = TimedSentence(text=text, engine=engine, start_s=start_s, end_s=end_s,
                                            truncated_by=w.truncated_by)
            while (not self.stop.is_set() and self.next_emit < len(self.settled)
                   and self.settled[self.next_emit] is not None):
                s = self.settled[self.next_emit]
                assert s is not None
                if s.text:  # a withdrawn tail that faster-whisper found silent is no sentence
                    self.current = s  # the entry being emitted (an emitter may read its truncated_by)
                    self.emit.sentence(self.index0 + self.emitted, s.text, s.engine, s.start_s, s.end_s,
                                       segment=self.segment)
                    self.emitted += 1
                self.next_emit += 1

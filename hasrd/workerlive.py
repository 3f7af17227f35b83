"""A live session's handle on a worker (hasrd.workerproc): starting it, audio in, commit and end, the cancel when
the client leaves, and the live stall watchdog. Events come out through the worker's ``on_event`` like a file's.

Its own module because a live session is a client of the worker's channel, not part of it: it opens its request
through :class:`~hasrd.workerproc.WorkerProcess` (which owns the ids), sends through it and reads the ``Pending``
entry the reader updates, so this module imports workerproc and workerproc never imports it back.
"""

from __future__ import annotations

import asyncio
import time

from hasrd import errors
from hasrd import protocol as p
from hasrd.jobevents import EventSink
from hasrd.options import Options
from hasrd.transcript import Transcript
from hasrd.workerproc import Pending, Watch, WorkerProcess


class LiveSession:
    """The daemon's side of one live session: audio in, events out through the worker's ``on_event``.

    ``done`` resolves with the result after :meth:`end`, or fails: the engine refused, the worker died, or it
    stalled. The watchdog: audio (or the end) was sent, and the worker reported nothing on it for
    ``watch.stall_sec`` (HASR_STALL_SEC; 0: never) while it was due; silence from the client is no stall.
    """

    def __init__(self, worker: WorkerProcess, pend: Pending, watch: Watch) -> None:
        self.worker = worker
        self.pend = pend
        self.done = pend.future
        self.watch = watch
        self.sent_at = 0.0  # when audio was last sent that the worker has not reported on yet
        self.ended = False
        self._watchdog_task = asyncio.ensure_future(self._watchdog()) if watch.stall_sec > 0 else None

    @classmethod
    async def start(cls, worker: WorkerProcess, *, language: str = "", options: Options | None = None,
                    on_event: EventSink | None = None, watch: Watch) -> LiveSession:
        """Start a live session on ``worker`` (beside any other job it holds), under the live stall watchdog."""
        pend = worker.open(on_event)
        try:
            await worker.send(p.LiveStart(id=pend.id, language=language, options=options or Options()))
        except BaseException:
            worker.close(pend)
            raise
        return cls(worker, pend, watch)

    async def audio(self, pcm_f32: bytes) -> None:
        if self.done.done():
            return
        self._due()
        await self.worker.send(p.LiveAudio(id=self.pend.id, pcm=pcm_f32))

    async def commit(self) -> None:
        if not self.done.done():
            await self.worker.send(p.LiveCommit(id=self.pend.id))

    def _due(self) -> None:
        """Something was sent that the worker must report on; the clock starts unless it already runs."""
        if not self.sent_at or self.pend.last_seen >= self.sent_at:
            self.sent_at = time.monotonic()

    async def _watchdog(self) -> None:
        stall = self.watch.stall_sec
        while not self.done.done():
            await asyncio.wait([self.done], timeout=min(1.0, stall))
            if (not self.done.done() and self.sent_at > self.pend.last_seen
                    and time.monotonic() - self.pend.last_seen > stall):
                self.worker.kill(f"it reported nothing on live audio for {stall:g} s (HASR_STALL_SEC) and was killed")
                self.done.set_exception(errors.Stalled(
                    f"the worker reported nothing on the live audio for {stall:g} s (HASR_STALL_SEC) and was "
                    f"killed; raise HASR_STALL_SEC if this machine is that slow"))

    async def end(self) -> Transcript:
        """Finish: the last utterance is closed and every final sentence comes out; then the result."""
        if not self.ended and not self.done.done():
            self.ended = True
            self._due()
            await self.worker.send(p.LiveEnd(id=self.pend.id))
        return await asyncio.shield(self.done)

    async def cancel(self) -> None:
        """The client left: stop the session and wait until the worker is free (or killed for ignoring it)."""
        try:
            if not self.done.done():
                await self.worker.cancel_and_wait(self.pend, self.watch)
        finally:
            self.close()

    def close(self) -> None:
        if self._watchdog_task is not None:
            self._watchdog_task.cancel()
        self.worker.close(self.pend)

"""A live session's handle on a worker (hasrd.workerproc): starting it, audio in, commit and end, the cancel when
the client leaves, and the live stall watchdog. Events come out through the worker's ``on_event`` like a file's.

Its own module because a live session is a client of the worker's channel, not part of it: it sends through
:class:`~hasrd.workerproc.WorkerProcess` and reads the same ``Pending`` entry the reader updates, so this module
imports workerproc and workerproc never imports it back.
"""

from __future__ import annotations

import asyncio
import time

from hasrd import errors
from hasrd import protocol as p
from hasrd.jobevents import EventSink
from hasrd.options import Options
from hasrd.transcript import Transcript
from hasrd.workerproc import Pending, WorkerProcess


class LiveSession:
    """The daemon's side of one live session: audio in, events out through the worker's ``on_event``.

    ``done`` resolves with the result after :meth:`end`, or fails: the engine refused, the worker died, or it
    stalled. The watchdog: audio (or the end) was sent, and the worker reported nothing on it for
    ``stall_sec`` (HASR_STALL_SEC; 0: never) while it was due; silence from the client is no stall.
    """

    def __init__(self, worker: WorkerProcess, req_id: int, pend: Pending, stall_sec: float = 0.0) -> None:
        self.worker = worker
        self.id = req_id
        self.pend = pend
        self.done = pend.future
        self.stall_sec = stall_sec
        self.sent_at = 0.0  # when audio was last sent that the worker has not reported on yet
        self.ended = False
        self._watch = asyncio.ensure_future(self._watchdog()) if stall_sec > 0 else None

    @classmethod
    async def start(cls, worker: WorkerProcess, *, language: str = "", options: Options | None = None,
                    on_event: EventSink | None = None, stall_sec: float = 0.0) -> LiveSession:
        """Start a live session on ``worker`` (beside any other job it holds), under the live stall watchdog."""
        req_id = next(worker.ids)
        fut: asyncio.Future[Transcript] = asyncio.get_running_loop().create_future()
        pend = Pending(fut, on_event, last_seen=time.monotonic())
        worker.pending[req_id] = pend
        try:
            await worker.send(p.LiveStart(id=req_id, language=language, options=options or Options()))
        except BaseException:
            worker.pending.pop(req_id, None)
            raise
        return cls(worker, req_id, pend, stall_sec)

    async def audio(self, pcm_f32: bytes) -> None:
        if self.done.done():
            return
        self._due()
        await self.worker.send(p.LiveAudio(id=self.id, pcm=pcm_f32))

    async def commit(self) -> None:
        if not self.done.done():
            await self.worker.send(p.LiveCommit(id=self.id))

    def _due(self) -> None:
        """Something was sent that the worker must report on; the clock starts unless it already runs."""
        if not self.sent_at or self.pend.last_seen >= self.sent_at:
            self.sent_at = time.monotonic()

    async def _watchdog(self) -> None:
        while not self.done.done():
            await asyncio.wait([self.done], timeout=min(1.0, self.stall_sec))
            if (not self.done.done() and self.sent_at > self.pend.last_seen
                    and time.monotonic() - self.pend.last_seen > self.stall_sec):
                self.worker.kill(f"it reported nothing on live audio for {self.stall_sec:g} s (HASR_STALL_SEC) "
                                 f"and was killed")
                self.done.set_exception(errors.Stalled(
                    f"the worker reported nothing on the live audio for {self.stall_sec:g} s (HASR_STALL_SEC) "
                    f"and was killed; raise HASR_STALL_SEC if this machine is that slow"))

    async def end(self) -> Transcript:
        """Finish: the last utterance is closed and every final sentence comes out; then the result."""
        if not self.ended and not self.done.done():
            self.ended = True
            self._due()
            await self.worker.send(p.LiveEnd(id=self.id))
        return await asyncio.shield(self.done)

    async def cancel(self) -> None:
        """The client left: stop the session and wait until the worker is free (or killed for ignoring it)."""
        try:
            if not self.done.done():
                await self.worker.cancel_and_wait(self.id, self.done)
        finally:
            self.close()

    def close(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
        self.worker.pending.pop(self.id, None)
        if self.done.done() and not self.done.cancelled():
            self.done.exception()  # retrieved

"""One transcription request from admission to its answer, for every route that takes audio (/transcribe and
the OpenAI routes): admitted before its audio is decoded (so neither the TTL nor the idle exit acts under it),
decoded in a thread (at most DECODES_AT_ONCE at a time), transcribed by the pool, answered whole or streamed;
the client going away cancels whatever step it is in, and the admission is released exactly once.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass
from collections.abc import AsyncIterator, Callable
from typing import IO, TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response

from hasrd import errors
from hasrd.context import Daemon, check_path_access, shown
from hasrd.formats import annotate
from hasrd.intake import LeasedStream, cancel_and_wait, check_path, decode, until_disconnected
from hasrd.jobevents import Done, EventSink, Failed, JobEvent, StreamEvent
from hasrd.modelspec import ModelSpec
from hasrd.options import Options
from hasrd.pcm import PcmBuffer
from hasrd.poolref import Lease
from hasrd.transcript import Transcript

if TYPE_CHECKING:
    from hasrd.audio import AudioInfo  # PyAV: imported in a thread, by the first check or decode (intake.py)

log = logging.getLogger("hasrd.api")

Render = Callable[[StreamEvent], bytes | None]


@dataclass(frozen=True)
class Job:
    """What a request asks for, checked: its audio (a named file's path, or an upload), the name shown for it, the
    language, the engine options and the model."""

    source: str | IO[bytes]
    name: str
    language: str
    options: Options
    model: ModelSpec

    @classmethod
    async def of_file(cls, d: Daemon, request: Request, path: str, language: str, options: Options,
                      model: ModelSpec) -> Job:
        """A job on a file the request names: this caller may name files, and the file is checked (absolute,
        there, readable: intake.check_path) before the request waits for anything."""
        check_path_access(d, request)
        await check_path(path)
        return cls(path, shown(os.path.basename(path)), language, options, model)


async def run_job(d: Daemon, pcm: PcmBuffer, info: AudioInfo, job: Job, *, lease: Lease,
                  on_event: EventSink | None) -> Transcript:
    t0 = time.monotonic()
    try:
        result = await d.pool.transcribe(pcm, name=job.name, language=job.language, options=job.options,
                                         on_event=on_event, lease=lease, model=job.model)
    finally:
        pcm.close()
    annotate(result, audio_path=shown(job.source) if isinstance(job.source, str) else None, language=job.language,
             duration_s=info.duration_s)
    decode_s = round(info.decode_s, 4)
    result.timings.decode_s = decode_s
    result.timings.total_s = round(time.monotonic() - t0 + decode_s, 4)
    return result


def stream_job(d: Daemon, pcm: PcmBuffer, info: AudioInfo, render: Render, job: Job, *,
               lease: Lease) -> AsyncIterator[bytes]:
    """Run a job while yielding its events rendered by ``render``; the client leaving cancels the job."""
    async def gen() -> AsyncIterator[bytes]:
        q: asyncio.Queue[JobEvent] = asyncio.Queue()
        task = asyncio.create_task(run_job(d, pcm, info, job, lease=lease, on_event=q.put_nowait))
        getter: asyncio.Future[JobEvent] = asyncio.get_running_loop().create_future()
        try:
            while True:
                getter = asyncio.create_task(q.get())
                done, _ = await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
                if getter in done:
                    out = render(getter.result())
                    if out:
                        yield out
                    continue
                getter.cancel()
                while not q.empty():
                    out = render(q.get_nowait())
                    if out:
                        yield out
                final: StreamEvent
                try:
                    final = Done(task.result())
                except errors.HasrError as e:
                    final = Failed(e.to_json())
                except Exception as e:  # the stream must end with an error event, never just stop
                    log.exception("transcription failed")
                    final = Failed(errors.WorkerError(f"{type(e).__name__}: {e}").to_json())
                out = render(final)
                if out:
                    yield out
                return
        finally:
            getter.cancel()
            if task.done() and not task.cancelled():
                task.exception()  # retrieved (it was rendered as an error event, or the client left)
            await cancel_and_wait(task)
    return gen()


async def admitted(d: Daemon, request: Request, job: Job, render: Render | None, media_type: str,
                   respond: Callable[[Transcript], Response]) -> Response:
    """Admit, decode and run one job; ``render`` streams its events (None: one response at the end)."""
    lease = d.pool.admit(job.model)
    handed_on = False
    try:
        pcm, info = await until_disconnected(request, decode(d, job.source, job.name, lease,
                                                             channels=job.options.speakers == "channels"))
        if render is not None:
            handed_on = True  # the response releases the lease, however it ends
            return LeasedStream(stream_job(d, pcm, info, render, job, lease=lease), lease, pcm,
                                media_type=media_type, headers={"Cache-Control": "no-cache"})
        return respond(await until_disconnected(request, run_job(d, pcm, info, job, lease=lease, on_event=None)))
    finally:
        if not handed_on:
            lease.release()

"""What arrives with a request, before it becomes a job: its JSON body (bounded in size and depth), a named
file (checked before any wait), the audio decoded to a memfd (in a thread, a bounded number at a time,
stopped when the client leaves), and the client's disconnect (which cancels whatever step the request is in).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, TypeVar

import anyio
from starlette.requests import Request
from starlette.responses import StreamingResponse

from hasrd import errors
from hasrd.pcm import PcmBuffer
from hasrd.supervisor import Lease

if TYPE_CHECKING:
    from hasrd.api import Daemon

T = TypeVar("T")


async def check_path(path: str) -> None:
    """A named file's checks (absolute, exists, regular, readable, non-empty) before the request waits for
    anything: a typo is answered at once, not after the decodes ahead of it."""
    from hasrd import audio

    await asyncio.to_thread(audio.check_path, path)


async def decode(d: Daemon, source: Any, name: str) -> tuple[PcmBuffer, dict[str, Any]]:
    """Decode to a memfd in a thread, at most DECODES_AT_ONCE at a time (a burst of long files cannot pin all
    memory and cores); map every failure to a typed 4xx. Cancelling stops the decode at its next packet."""
    from hasrd import audio

    async with d.decode_slots:
        stop = threading.Event()

        def work() -> tuple[PcmBuffer, dict[str, Any]]:
            fd, info = audio.decode_to_memfd(source, max_audio_sec=d.settings.max_audio_sec, name=name,
                                             stop=stop.is_set)
            buf = PcmBuffer(fd)
            buf.frames = info.frames
            return buf, info.to_json()

        fut = asyncio.get_running_loop().run_in_executor(None, work)
        fut.add_done_callback(_close_if_abandoned)
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            stop.set()  # the thread stops at its next packet; the done callback closes what it made
            fut.abandoned = True  # type: ignore[attr-defined]
            raise


def _close_if_abandoned(fut: asyncio.Future[tuple[PcmBuffer, dict[str, Any]]]) -> None:
    if getattr(fut, "abandoned", False) and not fut.cancelled() and fut.exception() is None:
        fut.result()[0].close()
    elif not fut.cancelled():
        fut.exception()  # retrieved: the awaiting request got it, or left


async def until_disconnected(request: Request, work: Awaitable[T]) -> T:
    """Run ``work`` while watching the connection: the client going away (the OpenAI SDK's default
    non-streaming call, Ctrl-C on curl) cancels it at once, which cancels the job in the worker and frees its
    place in the queue. The body must have been read: what the server delivers next is the disconnect."""
    task: asyncio.Future[T] = asyncio.ensure_future(work)
    watcher: asyncio.Future[Any] = asyncio.ensure_future(_disconnect(request))
    try:
        await asyncio.wait([task, watcher], return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            return task.result()
        raise errors.Cancelled("the client went away; the transcription was cancelled")
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
            with anyio.CancelScope(shield=True):  # wait for the worker to acknowledge, uncancelled
                with contextlib.suppress(BaseException):
                    await task


async def _disconnect(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


class LeasedStream(StreamingResponse):
    """A streamed job's response: its admission and PCM are released when the response ends, however it
    ends, even if the stream never started (the client left before the first byte)."""

    def __init__(self, content: AsyncIterator[bytes], lease: Lease, pcm: PcmBuffer, **kw: Any) -> None:
        super().__init__(content, **kw)
        self.lease, self.pcm = lease, pcm

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                with contextlib.suppress(BaseException):
                    await self.body_iterator.aclose()  # type: ignore[attr-defined]
            self.pcm.close()
            self.lease.release()


MAX_JSON_BYTES = 1 << 20
MAX_JSON_DEPTH = 16


async def read_json(request: Request, example: str) -> Any:
    """The body as JSON: 413 past MAX_JSON_BYTES (counted while reading, never read whole first), 400 when it
    is not JSON or nests deeper than MAX_JSON_DEPTH."""
    length = request.headers.get("content-length", "")
    too_big = errors.TooLarge(f"the JSON body is over the {MAX_JSON_BYTES // 1024} KiB limit")
    if length.isdigit() and int(length) > MAX_JSON_BYTES:
        raise too_big
    raw = bytearray()
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_JSON_BYTES:
            raise too_big
    if not raw.strip():
        return None
    try:
        obj = json.loads(bytes(raw))
    except RecursionError:
        raise errors.BadRequest(f"the JSON body nests deeper than {MAX_JSON_DEPTH} levels") from None
    except (ValueError, UnicodeDecodeError):
        raise errors.BadRequest(f"the body must be JSON like {example}") from None
    if json_depth(obj) > MAX_JSON_DEPTH:
        raise errors.BadRequest(f"the JSON body nests deeper than {MAX_JSON_DEPTH} levels")
    return obj


def json_depth(obj: Any) -> int:
    """How deeply lists and objects nest (a scalar is 0), without recursion."""
    deepest, todo = 0, [(obj, 1)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            deepest = max(deepest, depth)
            todo.extend((x, depth + 1) for x in item if isinstance(x, (dict, list)))
    return deepest

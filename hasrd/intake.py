"""What arrives with a request, before it becomes a job: its JSON body (bounded in size and depth), a named
file (checked before any wait), the audio decoded to a memfd (in a thread, a bounded number at a time,
stopped when the client leaves), and the client's disconnect (which cancels whatever step the request is in).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
from collections.abc import AsyncIterator, Awaitable
from typing import IO, TYPE_CHECKING, Any, TypeVar

import anyio
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from hasrd import errors
from hasrd.pcm import PcmBuffer
from hasrd.poolref import Lease

if TYPE_CHECKING:
    from hasrd.audio import AudioInfo
    from hasrd.context import Daemon

T = TypeVar("T")


async def check_path(path: str) -> None:
    """A named file's checks (absolute, exists, regular, readable, non-empty) before the request waits for
    anything: a typo is answered at once, not after the decodes ahead of it. audio.py (PyAV) is imported in
    the thread, the first time: the daemon starts without it and the loop never waits for it."""

    def check() -> None:
        from hasrd import audio

        audio.check_path(path)

    await asyncio.to_thread(check)


async def decode(d: Daemon, source: str | IO[bytes], name: str, lease: Lease,
                 channels: bool = False) -> tuple[PcmBuffer, AudioInfo]:
    """Decode to a memfd in a thread, at most DECODES_AT_ONCE at a time (a burst of long files cannot pin all
    memory and cores); map every failure to a typed 4xx. Cancelling stops the decode at its next packet. What
    is decoded counts against HASR_MAX_QUEUED_AUDIO_MB until the lease's job is on a worker (audiobudget.py):
    past it, QueueFull while it decodes. ``channels``: keep the channels apart (speakers="channels"); a file with
    one channel, or more than audio.MAX_CHANNELS, is InvalidSpeakers."""
    async with d.decode_slots:
        stop = threading.Event()
        hold = d.queued_audio.hold(d.settings.max_queued_audio_mb)
        lease.let_go = hold.drop

        def more(frames: int) -> bool:
            hold.grow(frames * 4)
            return stop.is_set()

        def work() -> tuple[PcmBuffer, AudioInfo]:
            from hasrd import audio  # in the thread, as check_path does

            fd, info = audio.decode_to_memfd(source, max_audio_sec=d.settings.max_audio_sec, name=name, stop=more,
                                             keep_channels=channels)
            buf = PcmBuffer(fd)
            buf.frames, buf.channels = info.frames, info.kept_channels
            try:
                if channels:
                    audio.check_channels(info, name)
                hold.grow(info.frames * 4 * info.kept_channels)  # the last packets too
            except BaseException:
                buf.close()
                raise
            return buf, info

        fut = asyncio.get_running_loop().run_in_executor(None, work)
        fut.add_done_callback(_close_if_abandoned)
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            stop.set()  # the thread stops at its next packet; the done callback closes what it made
            fut.abandoned = True  # type: ignore[attr-defined]
            raise


def _close_if_abandoned(fut: asyncio.Future[tuple[PcmBuffer, AudioInfo]]) -> None:
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
        await cancel_and_wait(task)


async def cancel_and_wait(task: asyncio.Future[Any]) -> None:
    """Cancel ``task`` if it still runs, and wait, uncancelled, until it has ended (the worker acknowledged)."""
    if not task.done():
        task.cancel()
        with anyio.CancelScope(shield=True), contextlib.suppress(BaseException):
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

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
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


def check_path_text(path: str, field: str) -> None:
    """A path a client names may hold any byte but NUL: one that is not UTF-8 arrives as a surrogate escape
    (\\udc80-\\udcff, what os.fsdecode makes of it) and works. A lone surrogate that no byte maps to (\\ud800)
    names no file; refused here with a 400 naming the field (issue 21 #2: os.stat raised a 500)."""
    try:
        os.fsencode(path)
    except UnicodeEncodeError:
        raise errors.BadRequest(f"{field} holds a lone surrogate (\\u{ord(path[_bad_at(path)]):04x}) that names "
                                f"no file: send the path as valid UTF-8, or its undecodable bytes as \\udc80-"
                                f"\\udcff escapes", code="invalid_request", param=field) from None
    if "\0" in path:
        raise errors.BadRequest(f"{field} holds a NUL character, which no file name can hold",
                                code="invalid_request", param=field)


def _bad_at(text: str) -> int:
    return next((i for i, ch in enumerate(text) if 0xD800 <= ord(ch) <= 0xDFFF), 0)


def check_text(obj: Any, field: str = "body", paths: tuple[str, ...] = ()) -> None:
    """Every string of a request (keys and values, at any depth) must be encodable as UTF-8: a lone surrogate
    (JSON's "\\ud800") cannot reach the worker, whose protocol refuses it only after the models were loaded
    (issue 21 #2). 400 ``invalid_request`` naming the field, before anything starts. The top-level keys in
    ``paths`` follow the path rule instead (:func:`check_path_text`)."""
    todo: list[tuple[Any, str]] = [(obj, field)]
    while todo:
        item, where = todo.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise errors.BadRequest(f"{where} holds a lone surrogate (\\u{ord(item[_bad_at(item)]):04x}), "
                                        f"which is not valid Unicode text", code="invalid_request",
                                        param=where) from None
        elif isinstance(item, dict):
            for key, value in item.items():
                name = str(key) if where == field else f"{where}.{key}"
                todo.append((str(key), f"a key of {where}" if _unencodable(str(key)) else where))
                if where == field and key in paths and isinstance(value, str):
                    check_path_text(value, str(key))
                else:
                    todo.append((value, name.encode("utf-8", "backslashreplace").decode("utf-8")))
        elif isinstance(item, list):
            todo.extend((x, f"{where}[{i}]") for i, x in enumerate(item))


def _unencodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


async def read_json(request: Request, example: str, paths: tuple[str, ...] = ()) -> Any:
    """The body as JSON: 413 past MAX_JSON_BYTES (counted while reading, never read whole first), 400 when it
    is not JSON, nests deeper than MAX_JSON_DEPTH or holds a string that is not valid Unicode (the keys in
    ``paths`` may hold surrogate escapes of file-name bytes: :func:`check_text`)."""
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
    check_text(obj, paths=paths)
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

"""The HTTP API of DESIGN.md over the daemon's socket (Starlette app; uvicorn serves it).

Every error is ``{"error": {"code", "message"}}`` with its status; 503 carries Retry-After. Audio is
validated and decoded here, before the supervisor (and so the worker) is touched: bad input never wakes
the GPU. Decoding runs in a thread so /health is never blocked.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, AsyncGenerator, AsyncIterator, Callable

import anyio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse as _StarletteJSON
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from hasrd import __version__, errors, formats
from hasrd import protocol as proto
from hasrd.config import Settings
from hasrd.events import Broadcaster
from hasrd.pcm import PcmBuffer
from hasrd.supervisor import Supervisor

log = logging.getLogger("hasrd.api")
DECODES_AT_ONCE = 2


@dataclass
class Daemon:
    settings: Settings
    supervisor: Supervisor
    events: Broadcaster
    request_stop: Callable[[], None] = lambda: None
    uid: int = field(default_factory=os.getuid)
    group_socket: bool = False  # the socket is group-accessible (system-wide install)
    decode_slots: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(DECODES_AT_ONCE))


def error_response(e: errors.HasrError) -> JSONResponse:
    headers = {}
    if e.status == 503:
        headers["Retry-After"] = str(int(max(1, round(e.retry_after or 5))))
    return JSONResponse(e.to_json(), status_code=e.status, headers=headers)


def caller_uid(request: Request) -> int | None:
    """The peer's uid, put in scope["client"] by the daemon's protocol class (SO_PEERCRED)."""
    client = request.scope.get("client")
    if client and isinstance(client[0], str) and client[0].startswith("peer:"):
        return int(client[1])
    return None


def check_access(d: Daemon, request: Request, *, control: bool = False) -> None:
    """Only the daemon's owner (or root, or the socket's group in a system-wide install) may call.

    A TCP caller (the unit's optional TCP socket) cannot be identified: it may transcribe uploads and read
    state, but not control the daemon (``control``: load, unload, stop).
    """
    uid = caller_uid(request)
    if uid is None:
        if control:
            raise errors.Forbidden("a caller over TCP cannot be identified, so it may not load, unload or stop "
                                   "the daemon; use the Unix socket")
        return
    if uid in (d.uid, 0) or d.group_socket:
        return
    raise errors.Forbidden(f"uid {uid} may not use this daemon (it belongs to uid {d.uid})")


def check_path_access(d: Daemon, request: Request) -> None:
    uid = caller_uid(request)
    if uid is None:
        raise errors.Forbidden("a caller over TCP cannot be identified, so the daemon will not open files for it: "
                               "upload the audio instead of naming a path (the `file` field)")
    if uid not in (d.uid, 0):
        raise errors.Forbidden("this daemon runs as another user and would read the file with its rights: "
                               "upload the audio instead of naming a path (the `file` field)")


async def decode(d: Daemon, source: Any, name: str) -> tuple[PcmBuffer, dict[str, Any]]:
    """Validate and decode to a memfd in a thread; map every failure to a typed 4xx.

    A request the queue would refuse is refused first (no decoding for nothing), and at most
    DECODES_AT_ONCE decodes run together, so a burst of long files cannot pin all memory and cores.
    """
    from hasrd import audio

    d.supervisor.check_admission()
    async with d.decode_slots:
        d.supervisor.check_admission()
        return await _decode(d, source, name, audio)


async def _decode(d: Daemon, source: Any, name: str, audio: Any) -> tuple[PcmBuffer, dict[str, Any]]:

    def work() -> tuple[PcmBuffer, dict[str, Any]]:
        fd, info = audio.decode_to_memfd(source, max_audio_sec=d.settings.max_audio_sec, name=name)
        buf = PcmBuffer(fd)
        buf.frames = info.frames
        return buf, info.to_json()

    return await asyncio.to_thread(work)


def dumps(obj: Any) -> bytes:
    """JSON as UTF-8 for every response and stream. A file name that is not UTF-8 arrives as surrogate
    escapes (in a path, or in an error message naming it): it must never turn an answer into a 500."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "backslashreplace")


class JSONResponse(_StarletteJSON):
    def render(self, content: Any) -> bytes:
        return dumps(content)


def jsonl(obj: Any) -> bytes:
    return dumps(obj) + b"\n"


def shown(path: str) -> str:
    """A path as text that can always be encoded (bytes that are not UTF-8 become \\xNN)."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def check_language(language: str) -> str:
    """Refuse an unknown language before any audio is decoded or any worker is started (invariant 2)."""
    from hasrd.languages import UnknownLanguage, resolve

    try:
        resolve(language)
    except UnknownLanguage as e:
        raise errors.UnknownLanguage(str(e)) from None
    return language


async def run_job(d: Daemon, pcm: PcmBuffer, info: dict[str, Any], *, name: str, audio_path: str | None,
                  language: str, options: dict[str, Any], on_event: Callable[[dict[str, Any]], None] | None
                  ) -> dict[str, Any]:
    t0 = time.monotonic()
    try:
        result = await d.supervisor.transcribe(pcm, name=name, language=language, options=options,
                                               on_event=on_event)
    finally:
        pcm.close()
    result["audio_path"] = shown(audio_path) if audio_path is not None else None
    result.setdefault("language", language)
    result.setdefault("duration_s", info.get("duration_s"))
    timings = dict(result.get("timings") or {})
    timings["decode_s"] = round(float(info.get("decode_s") or 0), 4)
    timings["total_s"] = round(time.monotonic() - t0 + timings["decode_s"], 4)
    result["timings"] = timings
    return result


def stream_job(d: Daemon, pcm: PcmBuffer, info: dict[str, Any], render: Callable[[dict[str, Any]], bytes | None],
               **job: Any) -> AsyncIterator[bytes]:
    """Run a job while yielding its events rendered by ``render``; the client leaving cancels the job."""
    async def gen() -> AsyncIterator[bytes]:
        q: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        task = asyncio.create_task(run_job(d, pcm, info, on_event=q.put_nowait, **job))
        getter: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
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
                try:
                    final = {"event": "done", "result": task.result()}
                except errors.HasrError as e:
                    final = {"event": "error", **e.to_json()}
                except Exception as e:  # the stream must end with an error event, never just stop
                    log.exception("transcription failed")
                    final = {"event": "error", "error": {"code": "runtime_failure",
                                                         "message": f"{type(e).__name__}: {e}"}}
                out = render(final)
                if out:
                    yield out
                return
        finally:
            getter.cancel()
            if task.done() and not task.cancelled():
                task.exception()  # retrieved (it was rendered as an error event, or the client left)
            if not task.done():
                task.cancel()
                with anyio.CancelScope(shield=True):  # wait for the worker to acknowledge, uncancelled
                    try:
                        await task
                    except BaseException:
                        pass
    return gen()


# ---- seed-compatible ----------------------------------------------------------------------------------------


async def health(request: Request) -> Response:
    d: Daemon = request.app.state.daemon
    try:
        snap = d.supervisor.snapshot()
        return JSONResponse({
            "status": "ok" if snap["health"] == "busy" else snap["health"],
            "model_loaded": snap["state"] == "ready",
            "engine": d.settings.engine,
            "loading": snap["state"] == "starting",
            "idle_seconds": snap["idle_seconds"],
            "ttl_sec": snap["ttl_sec"],
            "busy": bool(snap["running"]),
            "queue": snap["queue"],
            "error": snap["error"],
        })
    except Exception as e:  # never raises
        return JSONResponse({"status": "error", "model_loaded": False, "error": str(e)})


async def transcribe(request: Request) -> Response:
    d: Daemon = request.app.state.daemon
    check_access(d, request)
    try:
        body = await request.json()
    except (ValueError, UnicodeDecodeError):
        raise errors.BadRequest("the body must be JSON like {\"audio_path\": \"/abs/file.wav\"}") from None
    if not isinstance(body, dict):
        raise errors.BadRequest("the body must be a JSON object")
    path = body.get("audio_path")
    if not isinstance(path, str) or not path:
        raise errors.InvalidAudio("audio_path is required: an absolute path to an audio file", code="path_required")
    language = body.get("language") or d.settings.language
    options = body.get("options") or {}
    if not isinstance(language, str) or not isinstance(options, dict):
        raise errors.BadRequest("language must be a string and options an object")
    check_language(language)
    check_path_access(d, request)
    name = shown(os.path.basename(path))
    pcm, info = await decode(d, path, name)
    job: dict[str, Any] = dict(name=name, audio_path=path, language=language, options=options)
    if "application/x-ndjson" in request.headers.get("accept", ""):
        return StreamingResponse(stream_job(d, pcm, info, jsonl, **job), media_type="application/x-ndjson")
    return JSONResponse(await run_job(d, pcm, info, on_event=None, **job))


# ---- OpenAI-compatible --------------------------------------------------------------------------------------


async def openai_transcriptions(request: Request) -> Response:
    d: Daemon = request.app.state.daemon
    check_access(d, request)
    limit = int(d.settings.max_upload_mb * 1024 * 1024)
    length = request.headers.get("content-length")
    if length and length.isdigit() and int(length) > limit + 65536:
        raise errors.TooLarge(f"the upload is {_mb(int(length))}; the limit is "
                              f"{_mb(limit)} (HASR_MAX_UPLOAD_MB)")
    ctype = request.headers.get("content-type", "")
    if not ctype.startswith(("multipart/form-data", "application/x-www-form-urlencoded")):
        raise errors.BadRequest("send multipart/form-data with a `file` (upload) or `path` field")
    form = await read_form(request, limit)
    fmt = str(form.get("response_format") or "json")
    formats.check(fmt)
    language = check_language(str(form.get("language") or d.settings.language))
    stream = str(form.get("stream") or "").lower() in ("true", "1", "yes")
    options: dict[str, Any] = {}
    if form.get("prompt"):
        options["prompt"] = str(form.get("prompt"))
    if "word" in [str(v) for v in form.getlist("timestamp_granularities[]")]:
        options["word_timestamps"] = True
    upload = form.get("file")
    path = form.get("path")
    if upload is not None and not isinstance(upload, str):
        f = upload.file
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(0)
        if size > limit:
            raise errors.TooLarge(f"the upload is {_mb(size)}; the limit is {_mb(limit)} (HASR_MAX_UPLOAD_MB)")
        name = shown(upload.filename or "upload")
        pcm, info = await decode(d, f, name)
        audio_path = None
    elif isinstance(path, str) and path:
        check_path_access(d, request)
        name = shown(os.path.basename(path))
        pcm, info = await decode(d, path, name)
        audio_path = path
    else:
        raise errors.InvalidAudio("send the audio as a `file` upload or name it with `path`", code="path_required")
    await form.close()
    job: dict[str, Any] = dict(name=name, audio_path=audio_path, language=language, options=options)
    if stream:
        return StreamingResponse(stream_job(d, pcm, info, sse, **job), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})
    result = await run_job(d, pcm, info, on_event=None, **job)
    body = formats.render(result, fmt)
    return Response(body, media_type=formats.content_type(fmt))


async def read_form(request: Request, limit: int) -> Any:
    """Parse the form while counting bytes: a chunked upload over the limit stops at the limit, not after
    it has been spooled to disk whole."""
    from starlette.formparsers import FormParser, MultiPartException, MultiPartParser

    async def limited() -> AsyncGenerator[bytes, None]:
        seen = 0
        async for chunk in request.stream():
            seen += len(chunk)
            if seen > limit + 65536:
                raise errors.TooLarge(f"the upload is over the {_mb(limit)} limit (HASR_MAX_UPLOAD_MB)")
            yield chunk

    try:
        if request.headers.get("content-type", "").startswith("multipart/form-data"):
            return await MultiPartParser(request.headers, limited(), max_files=1, max_fields=32).parse()
        return await FormParser(request.headers, limited()).parse()
    except MultiPartException as e:
        raise errors.BadRequest(f"malformed form: {e.message}") from None


def _mb(n: float) -> str:
    mb = n / 2**20
    return f"{mb:.1f} MB" if mb < 10 else f"{mb:.0f} MB"


def sse(ev: dict[str, Any]) -> bytes | None:
    kind = ev.get("event")
    if kind == "sentence":
        data: Any = {"type": "transcript.text.delta", "delta": ev["text"], "hasr": ev}
    elif kind == "draft":
        data = {"type": "hasr.draft", "text": ev["text"], "segment": ev.get("segment", 0)}
    elif kind == "progress":
        data = {"type": "hasr.progress", "done_s": ev["done_s"], "total_s": ev["total_s"]}
    elif kind in ("queued", "loading"):
        data = {"type": f"hasr.{kind}", **{k: v for k, v in ev.items() if k != "event"}}
    elif kind == "done":
        data = {"type": "transcript.text.done", "text": ev["result"].get("final", ""), "hasr": ev["result"]}
        return b"data: " + dumps(data) + b"\n\ndata: [DONE]\n\n"
    elif kind == "error":
        data = {"type": "error", "error": ev["error"]}
    else:
        return None
    return b"data: " + dumps(data) + b"\n\n"


async def models(request: Request) -> Response:
    return JSONResponse({"object": "list", "data": [{"id": "hasr", "object": "model", "owned_by": "hasr"}]})


# ---- lifecycle ----------------------------------------------------------------------------------------------


async def ps(request: Request) -> Response:
    d: Daemon = request.app.state.daemon
    check_access(d, request)
    snap = d.supervisor.snapshot()
    if snap["pid"] and str(snap["identity"].get("device") or "").startswith("cuda"):
        from hasrd import gpu

        pids = {int(x) for x in os.listdir("/proc") if x.isdigit() and _pgid(int(x)) == snap["pid"]}
        snap["vram_mb"] = await asyncio.to_thread(gpu.process_vram_mb, pids | {snap["pid"]})
    return JSONResponse({**snap, "daemon_pid": os.getpid()})


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


async def load(request: Request) -> Response:
    d: Daemon = request.app.state.daemon
    check_access(d, request, control=True)
    keep: float | None | bool = False
    raw = await request.body()
    if raw.strip():
        try:
            body = json.loads(raw)
        except ValueError:
            raise errors.BadRequest("the body must be JSON like {\"keep_alive\": 600}") from None
        if isinstance(body, dict) and body.get("keep_alive") is not None:
            try:
                k = float(body["keep_alive"])
            except (TypeError, ValueError):
                raise errors.BadRequest("keep_alive must be a number of seconds (<0 = forever)") from None
            keep = None if k < 0 else k
    return JSONResponse(await d.supervisor.load(keep))


async def unload(request: Request) -> Response:
    d: Daemon = request.app.state.daemon
    check_access(d, request, control=True)
    await d.supervisor.unload()
    return JSONResponse({"state": d.supervisor.state.value})


async def stop(request: Request) -> Response:
    d: Daemon = request.app.state.daemon
    check_access(d, request, control=True)
    asyncio.get_running_loop().call_soon(d.request_stop)
    return JSONResponse({"stopping": True})


async def events(request: Request) -> Response:
    d: Daemon = request.app.state.daemon
    check_access(d, request)

    async def gen() -> AsyncIterator[bytes]:
        q = d.events.subscribe()
        try:
            if not d.events.latest:
                yield jsonl(d.supervisor.snapshot())
            while not d.events.closed:
                snap = await q.get()
                if not snap:  # the daemon is exiting: end the stream so the connection closes
                    return
                yield jsonl(snap)
        finally:
            d.events.unsubscribe(q)

    return StreamingResponse(gen(), media_type="application/x-ndjson", headers={"Cache-Control": "no-cache"})


async def version(request: Request) -> Response:
    return JSONResponse({"version": __version__, "protocol": proto.PROTOCOL_VERSION, "pid": os.getpid()})


# ---- app ----------------------------------------------------------------------------------------------------


async def hasr_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, errors.HasrError)
    if exc.status >= 500:
        log.warning("%s %s: %s", request.method, request.url.path, exc.message)
    return error_response(exc)


async def http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "bad_request")
    msg = {404: f"no such endpoint: {request.url.path}",
           405: f"{request.method} is not allowed on {request.url.path}"}.get(exc.status_code, str(exc.detail))
    return JSONResponse({"error": {"code": code, "message": msg}}, status_code=exc.status_code)


async def internal_error(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return JSONResponse({"error": {"code": "internal", "message": f"{type(exc).__name__}: {exc}"}},
                        status_code=500)


def make_app(d: Daemon) -> Starlette:
    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/transcribe", transcribe, methods=["POST"]),
        Route("/v1/audio/transcriptions", openai_transcriptions, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/api/ps", ps, methods=["GET"]),
        Route("/api/load", load, methods=["POST"]),
        Route("/api/unload", unload, methods=["POST"]),
        Route("/api/stop", stop, methods=["POST"]),
        Route("/api/events", events, methods=["GET"]),
        Route("/api/version", version, methods=["GET"]),
    ]
    app = Starlette(routes=routes, exception_handlers={errors.HasrError: hasr_error, HTTPException: http_error,
                                                       Exception: internal_error})
    app.state.daemon = d
    return app

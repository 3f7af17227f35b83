"""The HTTP API (docs/ARCHITECTURE.md "HTTP API"; docs/API.md) over the daemon's socket (Starlette; uvicorn serves it).

Every error is ``{"error": {"code", "message", "type", "param"}}`` with its status; 503 carries Retry-After. Audio is
validated and decoded here, before the worker is touched: bad input never wakes the GPU. A request's order:
JSON (intake.py: at most MAX_JSON_BYTES, MAX_JSON_DEPTH deep) and fields checked, a named file checked, then admitted
(counted by the supervisor, so neither the TTL nor the idle exit acts under it), then decoded in a thread (at
most DECODES_AT_ONCE at a time), then transcribed. The client going away cancels whatever step it is in, for
plain and streamed responses alike, and the admission is released exactly once.
"""

from __future__ import annotations

import asyncio
import grp
import json
import logging
import os
import pwd
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable

import anyio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse as _StarletteJSON
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute

from hasrd import __version__, errors, modelspec, subtitles
from hasrd import protocol as proto
from hasrd.config import Settings
from hasrd.events import Broadcaster
from hasrd.intake import LeasedStream, check_path, decode, read_json, until_disconnected
from hasrd.pcm import PcmBuffer
from hasrd.lifecycle import KeepAlive
from hasrd.modelspec import ModelSpec
from hasrd.scheduler import Pool, PoolLease

log = logging.getLogger("hasrd.api")
DECODES_AT_ONCE = 2


@dataclass
class Daemon:
    settings: Settings
    supervisor: Pool  # the worker pool (hasrd.scheduler): one Supervisor per worker below it
    events: Broadcaster
    request_stop: Callable[[], None] = lambda: None
    uid: int = field(default_factory=os.getuid)
    group_socket: bool = False  # the socket is group-accessible
    shared_gid: int | None = None  # HASR_SHARED_GROUP's gid: its members may use a group-accessible socket
    decode_slots: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(DECODES_AT_ONCE))


def error_response(e: errors.HasrError) -> JSONResponse:
    headers = {}
    if e.status == 503:
        headers["Retry-After"] = str(int(max(1, round(e.retry_after or 5))))
    if e.status == 413:  # refused before the body was read: close rather than read and discard the rest of it
        headers["Connection"] = "close"  # (a connection kept open would linger, then get an unsolicited 408)
    return JSONResponse(e.to_json(), status_code=e.status, headers=headers)


def caller_uid(request: Request) -> int | None:
    """The peer's uid, put in scope["client"] by the daemon's protocol class (SO_PEERCRED)."""
    client = request.scope.get("client")
    if client and isinstance(client[0], str) and client[0].startswith("peer:"):
        return int(client[1])
    return None


def caller_gid(request: Request) -> int | None:
    client = request.scope.get("client")
    if client and isinstance(client[0], str) and client[0].startswith("peer:") and client[0].count(":") == 2:
        return int(client[0].rsplit(":", 1)[1])
    return None


def in_group(uid: int, gid: int | None, group: int) -> bool:
    """Whether a caller belongs to ``group``: its primary gid (from the socket), or the group's member list
    (the user database: /proc of other users is hidden under ProtectProc=invisible)."""
    if gid == group:
        return True
    try:
        name = pwd.getpwuid(uid).pw_name
        return name in grp.getgrgid(group).gr_mem or pwd.getpwuid(uid).pw_gid == group
    except KeyError:
        return False


def check_access(d: Daemon, request: Request, *, control: bool = False, names: bool = False) -> None:
    """Who may call. The daemon's owner and root: everything. Members of HASR_SHARED_GROUP on a
    group-accessible socket (the system-wide install): transcriptions and state, not ``control`` (load, unload,
    stop). A TCP caller cannot be identified: transcriptions of uploads only, nothing that ``names`` files or
    jobs (/api/ps, /api/events) and no control.
    """
    uid = caller_uid(request)
    if uid is None:
        check_tcp_origin(d, request)
        if control:
            raise errors.Forbidden("a caller over TCP cannot be identified, so it may not load, unload or stop "
                                   "the daemon; use the Unix socket")
        if names:
            raise errors.Forbidden(f"{request.url.path} is not served over TCP: it names the files being "
                                   f"transcribed; use the Unix socket")
        return
    if uid in (d.uid, 0):
        return
    member = d.group_socket and d.shared_gid is not None and in_group(uid, caller_gid(request), d.shared_gid)
    if member and not control:
        return
    if member:
        raise errors.Forbidden(f"uid {uid} may not load, unload or stop this daemon: only its owner (uid {d.uid}) "
                               f"and root may")
    raise errors.Forbidden(f"uid {uid} may not use this daemon (it belongs to uid {d.uid}"
                           + ("; members of HASR_SHARED_GROUP may" if d.shared_gid is not None else "") + ")")


LOOPBACK = ("127.0.0.1", "::1", "localhost")


def check_tcp_origin(d: Daemon, request: Request) -> None:
    """Over TCP, a web page must not be able to use the daemon (issue 21 #6): DNS rebinding sends the page's own
    host name as Host, so only the bound address (or localhost on a loopback socket) is accepted; a browser
    sends Origin with a cross-site request, refused unless HASR_ALLOWED_ORIGINS names it."""
    server = request.scope.get("server") or ("", 0)
    bound_host, bound_port = str(server[0] or ""), int(server[1] or 0)
    host = request.headers.get("host", "")
    name, _, port = host.rpartition(":") if not host.endswith("]") else (host, "", "")
    if not name or not port.isdigit():
        name, port = host, ""
    name = name.strip("[]").lower()
    if port and bound_port and int(port) != bound_port:
        name = ""
    hosts = {bound_host.lower()} | (set(LOOPBACK) if bound_host in LOOPBACK else set())
    if not name or name not in hosts:
        raise errors.Forbidden(f"over TCP the Host header must name the address the daemon listens on "
                               f"({bound_host}:{bound_port}), not {host!r}")
    origin = request.headers.get("origin")
    if origin is not None:
        allowed = {o.strip().rstrip("/") for o in d.settings.allowed_origins.split(",") if o.strip()}
        if origin.rstrip("/") not in allowed:
            raise errors.Forbidden(f"requests from web pages (Origin {origin}) are refused; name the origin in "
                                   f"HASR_ALLOWED_ORIGINS to allow it")


def check_path_access(d: Daemon, request: Request) -> None:
    uid = caller_uid(request)
    if uid is None:
        raise errors.Forbidden("a caller over TCP cannot be identified, so the daemon will not open files for it: "
                               "upload the audio instead of naming a path (the `file` field)")
    if uid not in (d.uid, 0):
        raise errors.Forbidden("this daemon runs as another user and would read the file with its rights: "
                               "upload the audio instead of naming a path (the `file` field)")


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


async def run_job(d: Daemon, pcm: PcmBuffer, info: dict[str, Any], *, lease: PoolLease, name: str,
                  audio_path: str | None, language: str, options: dict[str, Any],
                  on_event: Callable[[dict[str, Any]], None] | None, model: ModelSpec | None = None
                  ) -> dict[str, Any]:
    t0 = time.monotonic()
    try:
        result = await d.supervisor.transcribe(pcm, name=name, language=language, options=options,
                                               on_event=on_event, lease=lease, model=model)
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
                    final = {"event": "error", **errors.WorkerError(f"{type(e).__name__}: {e}").to_json()}
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
    check_access(d, request)  # the same rule as every route: the daemon's state is its owner's business
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
    body = await read_json(request, '{"audio_path": "/abs/file.wav"}', paths=("audio_path",))
    if not isinstance(body, dict):
        raise errors.BadRequest("the body must be a JSON object like {\"audio_path\": \"/abs/file.wav\"}")
    path = body.get("audio_path")
    if not isinstance(path, str) or not path:
        raise errors.InvalidAudio("audio_path is required: an absolute path to an audio file", code="path_required")
    language = body.get("language") or d.settings.language
    options = body.get("options") or {}
    if not isinstance(language, str) or not isinstance(options, dict):
        raise errors.BadRequest("language must be a string and options an object")
    spec = modelspec.resolve(str(options.get("model") or body.get("model") or ""), d.settings)
    subtitles.rules_from(options)  # subtitle limits are checked here too (docs/API.md), not when a file is done
    check_language(language)
    check_path_access(d, request)
    await check_path(path)
    name = shown(os.path.basename(path))
    job: dict[str, Any] = dict(name=name, audio_path=path, language=language, options=options, model=spec)
    stream = "application/x-ndjson" in request.headers.get("accept", "")
    return await admitted(d, request, path, job, jsonl if stream else None, "application/x-ndjson", JSONResponse)


async def admitted(d: Daemon, request: Request, source: Any, job: dict[str, Any],
                   render: Callable[[dict[str, Any]], bytes | None] | None, media_type: str,
                   respond: Callable[[dict[str, Any]], Response]) -> Response:
    """Admit, decode and run one job; ``render`` streams its events (None: one response at the end)."""
    lease = d.supervisor.admit(job.get("model"))
    handed_on = False
    try:
        pcm, info = await until_disconnected(request, decode(d, source, job["name"]))
        if render is not None:
            handed_on = True  # the response releases the lease, however it ends
            return LeasedStream(stream_job(d, pcm, info, render, lease=lease, **job), lease, pcm,
                                media_type=media_type, headers={"Cache-Control": "no-cache"})
        return respond(await until_disconnected(request, run_job(d, pcm, info, on_event=None, lease=lease, **job)))
    finally:
        if not handed_on:
            lease.release()


# ---- lifecycle ----------------------------------------------------------------------------------------------


async def ps(request: Request) -> Response:
    d: Daemon = request.app.state.daemon
    check_access(d, request, names=True)
    snap = d.supervisor.snapshot()
    for w in snap["workers"]:  # each GPU worker's VRAM, measured now (NVML or nvidia-smi; its process group)
        if w["pid"] and w["device"] == "cuda":
            w["vram_mb"] = await asyncio.to_thread(_group_vram_mb, int(w["pid"]))
    if snap["pid"] and str(snap["identity"].get("device") or "").startswith("cuda"):
        snap["vram_mb"] = await asyncio.to_thread(_group_vram_mb, int(snap["pid"]))
    return JSONResponse({**snap, "daemon_pid": os.getpid()})


def _group_vram_mb(pid: int) -> int | None:
    from hasrd import gpu

    pids = {int(x) for x in os.listdir("/proc") if x.isdigit() and _pgid(int(x)) == pid}
    return gpu.process_vram_mb(pids | {pid})


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


async def load(request: Request) -> Response:
    d: Daemon = request.app.state.daemon
    check_access(d, request, control=True)
    body = await read_json(request, '{"keep_alive": 600, "model": "base"}')
    keep: KeepAlive | None = None
    spec = _model_of(d, body)
    if isinstance(body, dict) and body.get("keep_alive") is not None:
        k = body["keep_alive"]
        if isinstance(k, bool) or not isinstance(k, (int, float, str)):
            raise errors.BadRequest("keep_alive must be a number of seconds (<0 = forever)")
        try:
            keep = KeepAlive.parse(float(k))
        except ValueError:
            raise errors.BadRequest("keep_alive must be a number of seconds (<0 = forever)") from None
    elif body is not None and not isinstance(body, dict):
        raise errors.BadRequest("the body must be a JSON object like {\"keep_alive\": 600}")
    return JSONResponse(await d.supervisor.load(keep, model=spec))


def _model_of(d: Daemon, body: Any) -> ModelSpec | None:
    """A load's or an unload's ``model`` (hasrd.modelspec), or None: the default (load), every worker (unload)."""
    name = body.get("model") if isinstance(body, dict) else None
    if name is None:
        return None
    if not isinstance(name, str):
        raise errors.BadRequest("model must be a string: a model's name (GET /v1/models lists them)")
    return modelspec.resolve(name, d.settings)


async def unload(request: Request) -> Response:
    d: Daemon = request.app.state.daemon
    check_access(d, request, control=True)
    body = await read_json(request, '{"model": "base"}')
    if body is not None and not isinstance(body, dict):
        raise errors.BadRequest("the body must be empty or a JSON object like {\"model\": \"base\"}")
    await d.supervisor.unload(_model_of(d, body))
    return JSONResponse({"state": d.supervisor.state.value, "workers": d.supervisor.workers()})


async def stop(request: Request) -> Response:
    d: Daemon = request.app.state.daemon
    check_access(d, request, control=True)
    asyncio.get_running_loop().call_soon(d.request_stop)
    return JSONResponse({"stopping": True})


async def events(request: Request) -> Response:
    d: Daemon = request.app.state.daemon
    check_access(d, request, names=True)

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
    check_access(request.app.state.daemon, request)
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
    return JSONResponse({"error": {"code": code, "message": msg, "type": "invalid_request_error", "param": None}},
                        status_code=exc.status_code)


async def client_gone(request: Request, exc: Exception) -> Response:
    """The client closed the connection (or was timed out) before its request arrived whole: expected, so
    neither a traceback nor a 500; nobody reads this answer."""
    return JSONResponse(errors.Cancelled("the client went away").to_json(), status_code=499)


async def internal_error(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return JSONResponse(errors.HasrError(f"{type(exc).__name__}: {exc}").to_json(), status_code=500)


def make_app(d: Daemon) -> Starlette:
    from hasrd import openai_api, pull, realtime  # they build on this module (imported by server.py at start)

    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/transcribe", transcribe, methods=["POST"]),
        Route("/v1/audio/transcriptions", openai_api.openai_transcriptions, methods=["POST"]),
        Route("/v1/audio/translations", openai_api.openai_translations, methods=["POST"]),
        Route("/v1/models", openai_api.models, methods=["GET"]),
        Route("/v1/models/{model_id:path}", openai_api.model, methods=["GET"]),
        Route("/api/ps", ps, methods=["GET"]),
        Route("/api/load", load, methods=["POST"]),
        Route("/api/unload", unload, methods=["POST"]),
        Route("/api/stop", stop, methods=["POST"]),
        Route("/api/events", events, methods=["GET"]),
        Route("/api/version", version, methods=["GET"]),
        WebSocketRoute("/v1/realtime", realtime.realtime),
        *pull.routes(),
    ]
    app = Starlette(routes=routes, exception_handlers={errors.HasrError: hasr_error, HTTPException: http_error,
                                                       ClientDisconnect: client_gone, Exception: internal_error})
    app.state.daemon = d
    return app

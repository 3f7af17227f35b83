"""The daemon's own routes (docs/ARCHITECTURE.md "HTTP API"; docs/API.md): the seed's /health and /transcribe, and
the lifecycle (/api/ps, /api/load, /api/unload, /api/stop, /api/events, /api/version). Starlette; uvicorn serves
it; app.py puts every route module together.

Every error is ``{"error": {"code", "message", "type", "param"}}`` with its status; 503 carries Retry-After. Audio is
validated and decoded before the worker is touched: bad input never wakes the GPU. A request's order:
JSON (intake.py: at most MAX_JSON_BYTES, MAX_JSON_DEPTH deep) and fields checked, a named file checked, then the
job pipeline (jobs.py).
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
from typing import Any
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from hasrd import __version__, errors, gpu, poolstatus
from hasrd import protocol as proto
from hasrd.context import (Daemon, JSONResponse, check_access, check_language, jsonl, preload, resolve_model,
                           speakers_of)
from hasrd.intake import read_json
from hasrd.jobevents import StreamEvent, to_json
from hasrd.lifecycle import KeepAlive
from hasrd.modelspec import ModelSpec
from hasrd.options import parse as parse_options
from hasrd.status import Health

log = logging.getLogger("hasrd.api")

MAX_KEEP_ALIVE_SEC = 366 * 86400  # a year: longer is "for ever" (keep_alive < 0)


# ---- seed-compatible ----------------------------------------------------------------------------------------


async def health(request: Request) -> Response:
    d: Daemon = request.app.state.daemon
    check_access(d, request)  # the same rule as every route: the daemon's state is its owner's business
    try:
        return JSONResponse(poolstatus.health(d.pool.snapshot()))
    except Exception as e:  # never raises
        return JSONResponse(Health(status="error", error=str(e)))


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
    if not isinstance(language, str):
        raise errors.BadRequest("language must be a string", param="language")
    options = parse_options(body.get("options"))  # every option checked here, once: no worker wakes for a bad one
    spec = resolve_model(d, request, options.model or str(body.get("model") or ""))
    options = speakers_of(d, request, options)
    check_language(language)
    await preload("hasrd.jobs")  # the job pipeline (formats, subtitles): not imported by a daemon that only idles
    from hasrd.jobs import Job, admitted

    job = await Job.of_file(d, request, path, language, options, spec)
    stream = "application/x-ndjson" in request.headers.get("accept", "")
    return await admitted(d, request, job, ndjson if stream else None, "application/x-ndjson", JSONResponse)


def ndjson(ev: StreamEvent) -> bytes:
    """/transcribe's stream: one JSON event a line (jobevents.to_json's shapes)."""
    return jsonl(to_json(ev))


# ---- lifecycle ----------------------------------------------------------------------------------------------


async def ps(request: Request) -> Response:
    d: Daemon = request.app.state.daemon
    check_access(d, request, names=True)
    snap = d.pool.snapshot()
    for w in snap.workers:  # each GPU worker's VRAM, measured now (NVML or nvidia-smi; its process group)
        if w.pid and w.device == "cuda":
            w.vram_mb = await asyncio.to_thread(gpu.group_vram_mb, w.pid)
            if w.pid == snap.pid:  # the most active worker's, shown at the top too
                snap.vram_mb = w.vram_mb
    snap.daemon_pid, snap.queued_audio_mb = os.getpid(), d.queued_audio.held_mb
    snap.max_queued_audio_mb = d.settings.max_queued_audio_mb
    return JSONResponse(snap)


async def load(request: Request) -> Response:
    d: Daemon = request.app.state.daemon
    check_access(d, request, control=True)
    body = await read_json(request, '{"keep_alive": 600, "model": "base"}')
    keep: KeepAlive | None = None
    spec = _model_of(d, request, body)
    if isinstance(body, dict) and body.get("keep_alive") is not None:
        k = body["keep_alive"]
        wrong = errors.BadRequest(f"keep_alive must be a number of seconds up to a year (< 0 = for ever), not {k!r}",
                                  param="keep_alive")
        if isinstance(k, bool) or not isinstance(k, (int, float, str)):
            raise wrong
        try:
            seconds = float(k)
        except (ValueError, OverflowError):
            raise wrong from None
        if not math.isfinite(seconds) or seconds > MAX_KEEP_ALIVE_SEC:  # inf, NaN and 1e400 put Infinity in JSON
            raise wrong
        keep = KeepAlive.parse(seconds)
    elif body is not None and not isinstance(body, dict):
        raise errors.BadRequest("the body must be a JSON object like {\"keep_alive\": 600}")
    return JSONResponse(await d.pool.load(keep, model=spec))


def _model_of(d: Daemon, request: Request, body: Any) -> ModelSpec | None:
    """A load's or an unload's ``model`` (hasrd.modelspec), or None: the default (load), every worker (unload)."""
    name = body.get("model") if isinstance(body, dict) else None
    if name is None:
        return None
    if not isinstance(name, str):
        raise errors.BadRequest("model must be a string: a model's name (GET /v1/models lists them)")
    return resolve_model(d, request, name)


async def unload(request: Request) -> Response:
    d: Daemon = request.app.state.daemon
    check_access(d, request, control=True)
    body = await read_json(request, '{"model": "base"}')
    if body is not None and not isinstance(body, dict):
        raise errors.BadRequest("the body must be empty or a JSON object like {\"model\": \"base\"}")
    await d.pool.unload(_model_of(d, request, body))
    snap = d.pool.snapshot()
    return JSONResponse({"state": snap.state, "workers": snap.workers})


async def stop(request: Request) -> Response:
    d: Daemon = request.app.state.daemon
    check_access(d, request, control=True)
    body = await read_json(request, '{"now": true}')
    now = body.get("now", False) if isinstance(body, dict) else False if body is None else None
    if not isinstance(now, bool):
        raise errors.BadRequest("the body must be empty or a JSON object like {\"now\": true}", param="now")
    asyncio.get_running_loop().call_soon(d.request_stop, now)
    return JSONResponse({"stopping": True, "now": now})


async def events(request: Request) -> Response:
    d: Daemon = request.app.state.daemon
    check_access(d, request, names=True)

    async def gen() -> AsyncIterator[bytes]:
        q = d.events.subscribe()  # the latest snapshot first (the pool's now before any), even while exiting
        try:
            if d.events.latest is None:
                yield jsonl(d.pool.snapshot())
            while not q.empty() or not d.events.closed:
                snap = await q.get()
                if snap is None:  # the daemon is exiting: end the stream so the connection closes
                    return
                yield jsonl(snap)
        finally:
            d.events.unsubscribe(q)

    return StreamingResponse(gen(), media_type="application/x-ndjson", headers={"Cache-Control": "no-cache"})


async def version(request: Request) -> Response:
    check_access(request.app.state.daemon, request)
    return JSONResponse({"version": __version__, "protocol": proto.PROTOCOL_VERSION, "pid": os.getpid()})

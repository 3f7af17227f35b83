"""The Starlette application: every route module's routes, and the one place foreign exceptions become hasr's
error answers (a HasrError its status, Starlette's 404/405 theirs, a client gone 499, anything else 500).

The daemon starts as fast as a bare Starlette app (issue 32 #10; docs/ARCHITECTURE.md "Start-up"): api.py's
routes (/health, the lifecycle) are imported here, every other route module when its route first runs
(:func:`lazy`), so PyAV, the OpenAI and Realtime routes, formats and subtitles, model downloads are not
imported by a daemon that only answers /health. Still no import circle: no route module imports this one.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Awaitable, Callable

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from hasrd import api, errors
from hasrd.context import Daemon, JSONResponse, error_response, preload

log = logging.getLogger("hasrd.api")


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


def lazy(module: str, name: str) -> Callable[[Request], Awaitable[Response]]:
    """The route ``module.name``, its module imported when the route first runs (in a thread: /health keeps
    answering meanwhile); from then on a call costs one dict lookup more than the function itself."""

    async def endpoint(request: Request) -> Response:
        await preload(module)
        handler: Callable[[Request], Awaitable[Response]] = getattr(sys.modules[module], name)
        return await handler(request)

    endpoint.__name__ = endpoint.__qualname__ = name
    return endpoint


def lazy_ws(module: str, name: str) -> Callable[[WebSocket], Awaitable[None]]:
    """:func:`lazy` for a WebSocket route."""

    async def endpoint(ws: WebSocket) -> None:
        await preload(module)
        handler: Callable[[WebSocket], Awaitable[None]] = getattr(sys.modules[module], name)
        await handler(ws)

    endpoint.__name__ = endpoint.__qualname__ = name
    return endpoint


def make_app(d: Daemon) -> Starlette:
    routes = [
        Route("/health", api.health, methods=["GET"]),
        Route("/transcribe", api.transcribe, methods=["POST"]),
        Route("/v1/audio/transcriptions", lazy("hasrd.openai_api", "openai_transcriptions"), methods=["POST"]),
        Route("/v1/audio/translations", lazy("hasrd.openai_api", "openai_translations"), methods=["POST"]),
        Route("/v1/models", lazy("hasrd.openai_api", "models"), methods=["GET"]),
        Route("/v1/models/{model_id:path}", lazy("hasrd.openai_api", "model"), methods=["GET"]),
        Route("/api/ps", api.ps, methods=["GET"]),
        Route("/api/load", api.load, methods=["POST"]),
        Route("/api/unload", api.unload, methods=["POST"]),
        Route("/api/stop", api.stop, methods=["POST"]),
        Route("/api/events", api.events, methods=["GET"]),
        Route("/api/version", api.version, methods=["GET"]),
        WebSocketRoute("/v1/realtime", lazy_ws("hasrd.realtime", "realtime")),
        # model management (hasrd/pull.py; the download itself in hasrd/download.py)
        Route("/api/pull", lazy("hasrd.pull", "pull"), methods=["POST"]),
        Route("/api/delete", lazy("hasrd.pull", "delete"), methods=["DELETE"]),
    ]
    app = Starlette(routes=routes, exception_handlers={errors.HasrError: hasr_error, HTTPException: http_error,
                                                       ClientDisconnect: client_gone, Exception: internal_error})
    app.state.daemon = d
    return app

"""The Starlette application: every route module's routes, and the one place foreign exceptions become hasr's
error answers (a HasrError its status, Starlette's 404/405 theirs, a client gone 499, anything else 500)."""

from __future__ import annotations

import logging

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route, WebSocketRoute

from hasrd import api, errors, openai_api, pull, realtime
from hasrd.context import Daemon, JSONResponse, error_response

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


def make_app(d: Daemon) -> Starlette:
    routes = [
        Route("/health", api.health, methods=["GET"]),
        Route("/transcribe", api.transcribe, methods=["POST"]),
        Route("/v1/audio/transcriptions", openai_api.openai_transcriptions, methods=["POST"]),
        Route("/v1/audio/translations", openai_api.openai_translations, methods=["POST"]),
        Route("/v1/models", openai_api.models, methods=["GET"]),
        Route("/v1/models/{model_id:path}", openai_api.model, methods=["GET"]),
        Route("/api/ps", api.ps, methods=["GET"]),
        Route("/api/load", api.load, methods=["POST"]),
        Route("/api/unload", api.unload, methods=["POST"]),
        Route("/api/stop", api.stop, methods=["POST"]),
        Route("/api/events", api.events, methods=["GET"]),
        Route("/api/version", api.version, methods=["GET"]),
        WebSocketRoute("/v1/realtime", realtime.realtime),
        *pull.routes(),
    ]
    app = Starlette(routes=routes, exception_handlers={errors.HasrError: hasr_error, HTTPException: http_error,
                                                       ClientDisconnect: client_gone, Exception: internal_error})
    app.state.daemon = d
    return app

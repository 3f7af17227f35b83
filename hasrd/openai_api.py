"""The OpenAI-compatible endpoints: /v1/audio/transcriptions, /v1/audio/translations, /v1/models[/{id}].

Field by field as OpenAI's API reference has them (docs/API.md has the table); the job itself runs through
the same admission, decoding and pool as /transcribe (``jobs.admitted``).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncGenerator
from typing import Any, Literal

from starlette.requests import Request
from starlette.responses import Response

from hasrd import errors, formats, modelspec, subtitles, transcript
from hasrd.context import (Daemon, JSONResponse, check_access, check_language, check_path_access, dumps,
                           resolve_model, shown)
from hasrd.intake import check_path, check_path_text, check_text
from hasrd.jobevents import Done, Failed, Loading, Queued, StreamEvent, to_json
from hasrd.jobs import Job, admitted
from hasrd.options import Options
from hasrd.protocol import Draft, Progress, Sentence

STARTED = int(time.time())


def form_options(form: Any, task: Literal["transcribe", "translate"]) -> Options:
    """The engine options of an OpenAI form: prompt, temperature, word timestamps, logprobs, the task."""
    raw = form.get("temperature")
    t = 0.0
    if raw not in (None, ""):
        try:
            t = float(str(raw))
        except ValueError:
            t = -1.0
        if not 0.0 <= t <= 1.0:  # NaN too
            raise errors.BadRequest(f"temperature must be a number from 0 to 1, not {raw!r}", param="temperature")
    grains = [str(v) for v in form.getlist("timestamp_granularities[]")]
    include = [str(v) for v in form.getlist("include[]")]
    # word probabilities are the logprobs faster-whisper has
    words = "word" in grains or "logprobs" in include
    return Options(task=task, prompt=str(form.get("prompt") or ""), temperature=t, word_timestamps=words)


async def openai_transcriptions(request: Request) -> Response:
    return await openai_audio(request, "transcribe")


async def openai_translations(request: Request) -> Response:
    """whisper's translate task: any language in, English text out (the whisper and hybrid engines)."""
    return await openai_audio(request, "translate")


async def openai_audio(request: Request, task: Literal["transcribe", "translate"]) -> Response:
    d: Daemon = request.app.state.daemon
    check_access(d, request)
    limit = int(d.settings.max_upload_mb * 1024 * 1024)
    length = request.headers.get("content-length")
    if length and length.isdigit():
        _check_size(int(length), limit)  # what the client announces, refused before a byte of it is read
    ctype = request.headers.get("content-type", "")
    if not ctype.startswith(("multipart/form-data", "application/x-www-form-urlencoded")):
        raise errors.BadRequest("send multipart/form-data with a `file` (upload) or `path` field")
    form = await read_form(request, limit)
    for key, value in form.multi_items():  # no string that is not valid Unicode reaches the worker (issue 21 #2)
        check_text(key, "a form field's name")
        if isinstance(value, str):
            (check_path_text if key == "path" else check_text)(value, key)
        elif value.filename:
            check_path_text(value.filename, key)
    spec = resolve_model(d, request, str(form.get("model") or ""))
    fmt = str(form.get("response_format") or "json")
    try:
        formats.check(fmt)
    except errors.HasrError as e:
        e.param = "response_format"
        raise
    rules = subtitles.rules_from(form, subtitles.configured(d.settings))
    try:
        language = check_language(str(form.get("language") or d.settings.language))
    except errors.HasrError as e:
        e.param = "language"
        raise
    stream = str(form.get("stream") or "").lower() in ("true", "1", "yes")
    hasr_events = str(form.get("hasr_events") or "").lower() in ("true", "1", "yes")
    options = form_options(form, task)
    include_logprobs = "logprobs" in [str(v) for v in form.getlist("include[]")]
    upload = form.get("file")
    path = form.get("path")
    if upload is not None and not isinstance(upload, str):
        name = shown(upload.filename or "upload")
        source: Any = upload.file
        audio_path = None
    elif isinstance(path, str) and path:
        check_path_access(d, request)
        await check_path(path)
        name = shown(os.path.basename(path))
        source = audio_path = path
    else:
        raise errors.InvalidAudio("send the audio as a `file` upload or name it with `path`", code="path_required",
                                  param="file")
    job = Job(name=name, audio_path=audio_path, language=language, options=options, model=spec)
    try:
        return await admitted(d, request, source, job, SseRenderer(hasr_events) if stream else None,
                              "text/event-stream",
                              lambda result: Response(formats.render(result, fmt, include_logprobs, rules),
                                                      media_type=formats.content_type(fmt)))
    finally:
        await form.close()


async def read_form(request: Request, limit: int) -> Any:
    """Parse the form while counting bytes: a chunked upload over the limit stops at the limit, not after
    it has been spooled to disk whole."""
    from starlette.formparsers import FormParser, MultiPartException, MultiPartParser

    async def limited() -> AsyncGenerator[bytes, None]:
        seen = 0
        async for chunk in request.stream():
            seen += len(chunk)
            _check_size(seen, limit, whole=False)
            yield chunk

    try:
        if request.headers.get("content-type", "").startswith("multipart/form-data"):
            return await MultiPartParser(request.headers, limited(), max_files=1, max_fields=32).parse()
        return await FormParser(request.headers, limited()).parse()
    except MultiPartException as e:
        raise errors.BadRequest(f"malformed form: {e.message}") from None


FORM_SLACK = 65536  # the form's other fields and its part headers, on top of HASR_MAX_UPLOAD_MB


def _check_size(n: int, limit: int, whole: bool = True) -> None:
    """The one size rule of an upload: a request body of at most HASR_MAX_UPLOAD_MB plus FORM_SLACK. Applied to
    the announced Content-Length (``whole``) and to the bytes as they arrive (a chunked body announces none)."""
    if n > limit + FORM_SLACK:
        said = f"the upload is {_mb(n)}" if whole else "the upload is larger"
        raise errors.TooLarge(f"{said}; the limit is {_mb(limit)} (HASR_MAX_UPLOAD_MB)", param="file")


def _mb(n: float) -> str:
    mb = n / 2**20
    return f"{mb:.1f} MB" if mb < 10 else f"{mb:.0f} MB"


class SseRenderer:
    """Job events as OpenAI's transcription stream: ``transcript.text.delta`` per final sentence (the deltas
    concatenate exactly to ``transcript.text.done``'s text, see formats.DeltaJoiner), then the done event with
    ``usage`` (and hasr's whole result under ``hasr``), then ``[DONE]``. hasr's own events (``hasr.queued``,
    ``hasr.loading``, ``hasr.draft``, ``hasr.progress``) only when the form asked for them (``hasr_events=true``,
    as hasrctl does): the OpenAI SDK parses every event of a stream as one of its three types, so an event it
    does not know would reach its caller as an empty segment."""

    def __init__(self, hasr_events: bool) -> None:
        self.hasr_events = hasr_events
        self.joiner = formats.DeltaJoiner()

    def __call__(self, ev: StreamEvent) -> bytes | None:
        match ev:
            case Sentence(text=text):
                delta = self.joiner.add(text)
                return _sse({"type": "transcript.text.delta", "delta": delta, "hasr": to_json(ev)}) if delta else None
            case Done(result=result):
                rest, text = self.joiner.done(result.final)
                head = _sse({"type": "transcript.text.delta", "delta": rest}) if rest else b""
                done = {"type": "transcript.text.done", "text": text, "usage": formats.usage(result),
                        "hasr": transcript.to_json(result)}
                return head + _sse(done) + b"data: [DONE]\n\n"
            case Failed(body=body):
                return _sse({"type": "error", "error": body["error"]}) + b"data: [DONE]\n\n"
            case Draft() | Progress() | Queued() | Loading() if self.hasr_events:
                # hasr's own events: the NDJSON shape, "event" named as a type of hasr's
                fields = to_json(ev)
                return _sse({"type": f"hasr.{fields.pop('event')}", **fields})
        return None


def _sse(data: dict[str, Any]) -> bytes:
    return b"data: " + dumps(data) + b"\n\n"


def _model(m: dict[str, Any]) -> dict[str, Any]:
    return {"id": m["id"], "object": "model", "created": STARTED, "owned_by": "hasr", "kind": m["kind"],
            "path": m["path"], "size_mb": m["size_mb"]}


async def models(request: Request) -> Response:
    check_access(request.app.state.daemon, request)
    found = await asyncio.to_thread(modelspec.installed)
    return JSONResponse({"object": "list", "data": [_model(m) for m in found]})


async def model(request: Request) -> Response:
    d: Daemon = request.app.state.daemon
    check_access(d, request)
    name = str(request.path_params["model_id"])
    resolve_model(d, request, name)  # 404 model_not_found for a name hasr does not serve
    found = {m["id"]: m for m in await asyncio.to_thread(modelspec.installed)}
    return JSONResponse(_model(found.get(name) or {"id": name, "kind": "model", "path": None, "size_mb": None}))

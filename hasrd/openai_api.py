"""The OpenAI-compatible endpoints: /v1/audio/transcriptions, /v1/audio/translations, /v1/models[/{id}].

Field by field as OpenAI's API reference has them (docs/API.md has the table). The form is read once into a
:class:`Form` and checked once into a :class:`Transcription` (the job, and how its answer is rendered); the job
itself runs through the same admission, decoding and pool as /transcribe (``jobs.admitted``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any, Literal

import msgspec
from starlette.datastructures import FormData, UploadFile
from starlette.requests import Request
from starlette.responses import Response

from hasrd import errors, formats, modelspec, subtitles, transcript
from hasrd.context import (Daemon, JSONResponse, check_access, check_language, dumps, resolve_model, shown,
                           speakers_of)
from hasrd.formats import Format
from hasrd.intake import check_path_text, check_text
from hasrd.jobevents import Done, Failed, Loading, Queued, StreamEvent, to_json
from hasrd.jobs import Job, admitted
from hasrd.options import Options
from hasrd.options import parse as parse_options
from hasrd.protocol import Draft, Progress, Sentence
from hasrd.transcript import Transcript

STARTED = int(time.time())
YES = ("true", "1", "yes")


class Form(msgspec.Struct, kw_only=True):
    """The form's text fields as they arrive (the upload, ``file``, apart; the cue limits are read by
    subtitles.rules_from); a field hasr does not know, or knows and ignores (``chunking_strategy``), is left out."""

    model: str = ""
    response_format: str = ""
    language: str = ""
    prompt: str = ""
    temperature: str = ""
    stream: str = ""
    hasr_events: str = ""
    path: str = ""
    include: list[str] = msgspec.field(default_factory=list, name="include[]")
    speaker_names: list[str] = msgspec.field(default_factory=list, name="known_speaker_names[]")
    speakers: str = ""  # hasr's: auto, channels or a number (diarized_json alone means auto)
    speaker_model: str = ""
    granularities: list[str] = msgspec.field(default_factory=list, name="timestamp_granularities[]")


@dataclass(frozen=True)
class Transcription:
    """One transcription or translation request, checked: the job, and how its answer is rendered."""

    job: Job
    fmt: Format
    logprobs: bool  # include[]=logprobs: json gives each word's logprob
    rules: subtitles.CueRules  # srt's and vtt's cue limits
    stream: bool  # Server-Sent Events instead of one answer
    hasr_events: bool  # hasr's own events in that stream too

    def respond(self, result: Transcript) -> Response:
        return Response(formats.render(result, self.fmt, self.logprobs, self.rules), media_type=self.fmt.content_type)


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
    try:
        asked = await parse(d, request, form, task)
        return await admitted(d, request, asked.job, SseRenderer(asked.hasr_events) if asked.stream else None,
                              "text/event-stream", asked.respond)
    finally:
        await form.close()


async def parse(d: Daemon, request: Request, form: FormData, task: Literal["transcribe", "translate"]) -> Transcription:
    """The form checked, each field once, before any work: its text, the model, the format, the cue limits, the
    language, the temperature, then the audio (a named file is checked last: intake.check_path)."""
    fields: dict[str, Any] = {}
    upload: str | UploadFile | None = None
    for key, value in form.multi_items():  # no string that is not valid Unicode reaches the worker (issue 21 #2)
        check_text(key, "a form field's name")
        if isinstance(value, str):
            (check_path_text if key == "path" else check_text)(value, key)
        elif value.filename:
            check_path_text(value.filename, key)
        if key == "file":
            upload = value
        elif key.endswith("[]"):
            fields.setdefault(key, []).append(value)
        else:
            fields[key] = value  # the last one, as a form's get()
    try:
        got = msgspec.convert(fields, Form)
    except msgspec.ValidationError as e:  # a file under a text field's name
        raise errors.BadRequest(f"the form's text fields must be text: {e}") from None
    spec = resolve_model(d, request, got.model)
    fmt = formats.check(got.response_format or "json", param="response_format")
    rules = subtitles.rules_from(fields, subtitles.configured(d.settings))  # max_line_width ... as they came
    language = check_language(got.language or d.settings.language, param="language")
    logprobs = "logprobs" in got.include  # word probabilities are the logprobs faster-whisper has
    options = Options(task=task, prompt=got.prompt, temperature=_temperature(got.temperature),
                      word_timestamps="word" in got.granularities or logprobs)
    options = speakers_of(d, request, _with_speakers(options, got), diarized=fmt is Format.DIARIZED_JSON)
    if isinstance(upload, UploadFile):
        job = Job(upload.file, shown(upload.filename or "upload"), language, options, spec)
    elif got.path:
        job = await Job.of_file(d, request, got.path, language, options, spec)
    else:
        raise errors.InvalidAudio("send the audio as a `file` upload or name it with `path`", code="path_required",
                                  param="file")
    return Transcription(job, fmt, logprobs, rules, got.stream.lower() in YES, got.hasr_events.lower() in YES)


def _with_speakers(options: Options, got: Form) -> Options:
    """The form's speaker fields, checked as /transcribe's options are (a number arrives as text)."""
    raw: dict[str, Any] = {}
    if got.speakers.strip():
        value = got.speakers.strip().lower()
        raw["speakers"] = int(value) if value.isdigit() else value
    if got.speaker_names:
        raw["speaker_names"] = got.speaker_names
    if got.speaker_model:
        raw["speaker_model"] = got.speaker_model
    if not raw:
        return options
    given = parse_options(raw, where="form")
    return msgspec.structs.replace(options, speakers=given.speakers, speaker_names=given.speaker_names,
                                   speaker_model=given.speaker_model)


def _temperature(raw: str) -> float:
    """faster-whisper's temperature from 0 to 1 (none: 0, beam search, the same text each time); else 400."""
    if not raw:
        return 0.0
    try:
        t = float(raw)
    except ValueError:
        t = -1.0
    if not 0.0 <= t <= 1.0:  # NaN too
        raise errors.BadRequest(f"temperature must be a number from 0 to 1, not {raw!r}", param="temperature")
    return t


async def read_form(request: Request, limit: int) -> FormData:
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


def _model(m: modelspec.Installed) -> dict[str, Any]:
    return {"id": m.id, "object": "model", "created": STARTED, "owned_by": "hasr", "kind": m.kind, "path": m.path,
            "size_mb": m.size_mb}


async def models(request: Request) -> Response:
    check_access(request.app.state.daemon, request)
    found = await asyncio.to_thread(modelspec.installed)
    return JSONResponse({"object": "list", "data": [_model(m) for m in found]})


async def model(request: Request) -> Response:
    d: Daemon = request.app.state.daemon
    check_access(d, request)
    name = str(request.path_params["model_id"])
    resolve_model(d, request, name)  # 404 model_not_found for a name hasr does not serve
    found = {m.id: m for m in await asyncio.to_thread(modelspec.installed)}
    return JSONResponse(_model(found.get(name) or modelspec.Installed(name, "model")))

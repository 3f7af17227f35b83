"""One transcription through the daemon, following its event stream.

A file on disk goes by absolute path to ``POST /transcribe`` as NDJSON events (queued, loading, progress,
draft, sentence, done | error), so nothing is uploaded and the view can follow along. Standard input, and a
file the daemon may not read itself (403 from a system daemon running as another user), are uploaded to
``/v1/audio/transcriptions`` with ``stream=true``: the same events as Server-Sent Events, and the full result
in ``transcript.text.done``'s ``hasr``.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, BinaryIO

import msgspec

from hasrctl.client import Client, CliError, DaemonError, UsageError, multipart
from hasrctl.output import STDIN
from hasrctl.terminal import View
from hasrd.options import Options
from hasrd.transcript import Transcript, from_json


class ErrorBody(msgspec.Struct):
    """An ``error`` event's body (hasrd.errors.HasrError.to_json)."""

    code: str | None = None
    message: str | None = None
    partial: dict[str, Any] | None = None


class Event(msgspec.Struct):
    """One event of /transcribe's NDJSON (``event``: hasrd.jobevents.to_json), the OpenAI SSE or the Realtime
    WebSocket (``type``): the fields hasrctl reads of them."""

    event: str = ""
    type: str = ""
    position: int | None = None
    phase: str | None = None
    elapsed_s: float | None = None
    done_s: float | None = None
    total_s: float | None = None
    text: str | None = None
    segment: int | None = None
    index: int | None = None
    delta: str | None = None
    item_id: str = "item_0"  # Realtime: ``item_<session>_<N>``, N the utterance
    result: Any = None
    hasr: dict[str, Any] | None = None  # SSE: a delta's sentence, or the done event's whole result
    error: ErrorBody = msgspec.field(default_factory=ErrorBody)


def _feed(kind: str, ev: Event, view: View) -> None:
    """One progress event (NDJSON ``event`` or SSE ``hasr.*`` type) to the view; unknown kinds are ignored."""
    if kind == "queued":
        view.queued(ev.position or 0)
    elif kind == "loading":
        view.loading(ev.phase or "", ev.elapsed_s)
    elif kind == "progress":
        view.progress(ev.done_s or 0.0, ev.total_s or 0.0, ev.phase or "decoding")
    elif kind == "draft":
        view.draft(ev.text or "", ev.segment)
    elif kind == "sentence":
        view.sentence(ev.index or 0, ev.text or "")


def _finish(view: View, result: Any) -> Transcript:
    """The daemon's result object, read once (CliError saying so for a daemon of another version), its text and
    sentences shown by the view."""
    try:
        doc = from_json(result)
    except ValueError as e:
        raise CliError(str(e)) from None
    view.finish(doc.final, doc.texts() or None)
    return doc


def _error(ev: Event) -> DaemonError:
    return DaemonError(ev.error.code or "runtime_failure", ev.error.message or "failed", partial=ev.error.partial)


def _follow(events: Any, view: View) -> Transcript:
    """Feed NDJSON events to the view; the result of ``done``, or the ``error`` as a DaemonError."""
    for ev in (msgspec.convert(e, Event) for e in events):
        if ev.event == "done":
            return _finish(view, ev.result)
        if ev.event == "error":
            raise _error(ev)
        _feed(ev.event, ev, view)
    raise CliError("hasrd ended the event stream without a result (did it exit?)")


def by_path(client: Client, path: str, language: str | None, view: View, options: Options | None = None) -> Transcript:
    asked = msgspec.to_builtins(options) if options is not None else None  # what differs from the defaults
    body = json.dumps({"audio_path": path, **({"language": language} if language else {}),
                       **({"options": asked} if asked else {})}).encode()
    headers = {"Content-Type": "application/json", "Accept": "application/x-ndjson"}
    resp = client.request("POST", "/transcribe", body, headers, timeout=None)
    try:
        return _follow(resp.ndjson(), view)
    except ValueError as e:
        raise CliError(f"hasrd sent a malformed event: {e}") from None


def _read_all(stream: BinaryIO, limit_mb: float) -> bytes:
    limit = int(limit_mb * 1024 * 1024)
    data = stream.read(limit + 1)
    if len(data) > limit:
        raise UsageError(f"stdin holds more than {limit_mb:g} MB (HASR_MAX_UPLOAD_MB)")
    return data


def _follow_sse(events: Any, view: View) -> Transcript:
    """Feed the OpenAI-style SSE events to the view; the result from ``transcript.text.done``."""
    deltas = 0
    for ev in (msgspec.convert(e, Event) for e in events):
        kind = ev.type
        if kind == "transcript.text.delta":  # a sentence's (with it under ``hasr``), or the rest of the text
            view.sentence(int((ev.hasr or {}).get("index", deltas)), ev.delta or "")
            deltas += 1
        elif kind == "transcript.text.done":
            return _finish(view, ev.hasr)
        elif kind == "error":
            raise _error(ev)
        elif kind.startswith("hasr."):
            _feed(kind[5:], ev, view)
    raise CliError("hasrd ended the event stream without a result (did it exit?)")


def by_upload(client: Client, data: bytes, filename: str, language: str | None, view: View,
              options: Options | None = None) -> Transcript:
    """Upload audio bytes to the OpenAI endpoint, streaming (SSE) so the view can follow as for a path."""
    opts = options or Options()
    fields: dict[str, str | list[str]] = {
        "model": opts.model or "hasr", "response_format": "verbose_json", "stream": "true", "hasr_events": "true",
        "language": language or "", "prompt": opts.prompt,
        "timestamp_granularities[]": "word" if opts.word_timestamps else "",
        "speakers": "" if opts.speakers is None else str(opts.speakers), "known_speaker_names[]": opts.speaker_names,
        "speaker_model": opts.speaker_model}
    endpoint = "/v1/audio/translations" if opts.task == "translate" else "/v1/audio/transcriptions"
    body, ctype = multipart({k: v for k, v in fields.items() if v}, "file", filename, data)
    resp = client.request("POST", endpoint, body, {"Content-Type": ctype}, timeout=None)
    try:
        return _follow_sse(resp.sse(), view)
    except ValueError as e:
        raise CliError(f"hasrd sent a malformed event: {e}") from None


def run(client: Client, source: str, language: str | None, view: View, max_upload_mb: float,
        options: Options | None = None) -> Transcript:
    """Transcribe one input ("-" = stdin) and return the daemon's result object."""
    if source == STDIN:
        data = _read_all(sys.stdin.buffer, max_upload_mb)
        if not data:
            raise UsageError("stdin is empty: no audio to transcribe")
        return by_upload(client, data, "stdin", language, view, options)
    try:
        return by_path(client, source, language, view, options)
    except DaemonError as e:
        if e.code != "forbidden":
            raise
    # The daemon runs as someone else and may not open our file: send the bytes instead.
    if os.path.getsize(source) > max_upload_mb * 1024 * 1024:
        raise UsageError(f"{source}: hasrd may not read it and it is too large to upload")
    with open(source, "rb") as f:
        return by_upload(client, f.read(), os.path.basename(source), language, view, options)

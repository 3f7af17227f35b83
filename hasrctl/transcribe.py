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


def _feed(kind: str, ev: dict[str, Any], view: View) -> None:
    """One progress event (NDJSON ``event`` or SSE ``hasr.*`` type) to the view; unknown kinds are ignored."""
    if kind == "queued":
        view.queued(int(ev.get("position") or 0))
    elif kind == "loading":
        view.loading(str(ev.get("phase") or ""), ev.get("elapsed_s"))
    elif kind == "progress":
        view.progress(float(ev.get("done_s") or 0), float(ev.get("total_s") or 0),
                      str(ev.get("phase") or "decoding"))
    elif kind == "draft":
        seg = ev.get("segment")
        view.draft(str(ev.get("text") or ""), int(seg) if isinstance(seg, int) else None)
    elif kind == "sentence":
        view.sentence(int(ev.get("index") or 0), str(ev.get("text") or ""))


def _finish(view: View, result: Any) -> Transcript:
    """The daemon's result object, read once (CliError saying so for a daemon of another version), its text and
    sentences shown by the view."""
    try:
        doc = from_json(result)
    except ValueError as e:
        raise CliError(str(e)) from None
    view.finish(doc.final, doc.texts() or None)
    return doc


def _error(ev: dict[str, Any]) -> DaemonError:
    err = ev.get("error") or {}
    return DaemonError(str(err.get("code") or "runtime_failure"), str(err.get("message") or "failed"),
                       partial=err.get("partial"))


def _follow(events: Any, view: View) -> Transcript:
    """Feed NDJSON events to the view; the result of ``done``, or the ``error`` as a DaemonError."""
    for ev in events:
        kind = str(ev.get("event") or "")
        if kind == "done":
            return _finish(view, ev.get("result"))
        if kind == "error":
            raise _error(ev)
        _feed(kind, ev, view)
    raise CliError("hasrd ended the event stream without a result (did it exit?)")


def by_path(client: Client, path: str, language: str | None, view: View, options: Options | None = None) -> Transcript:
    asked = msgspec.to_builtins(options) if options is not None else None  # what differs from the defaults
    body = json.dumps({"audio_path": path, **({"language": language} if language else {}),
                       **({"options": asked} if asked else {})}).encode()
    headers = {"Content-Type": "application/json", "Accept": "application/x-ndjson"}
    resp = client.request("POST", "/transcribe", body, headers, timeout=None)
    if resp.content_type != "application/x-ndjson":
        return _finish(view, resp.json())
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
    sentences: list[dict[str, Any]] = []
    for ev in events:
        kind = str(ev.get("type") or "")
        if kind == "transcript.text.delta":
            seg = ev.get("hasr") if isinstance(ev.get("hasr"), dict) else {"text": ev.get("delta")}
            sentences.append(seg)
            view.sentence(int(seg.get("index", len(sentences) - 1)), str(ev.get("delta") or ""))
        elif kind == "transcript.text.done":
            result = ev.get("hasr")
            if not isinstance(result, dict):  # a plain OpenAI server: text and sentences only
                result = {"final": str(ev.get("text") or ""), "per_sentence": sentences}
            return _finish(view, result)
        elif kind == "error":
            raise _error(ev)
        elif kind.startswith("hasr."):
            _feed(kind[5:], ev, view)
    raise CliError("hasrd ended the event stream without a result (did it exit?)")


def by_upload(client: Client, data: bytes, filename: str, language: str | None, view: View,
              options: Options | None = None) -> Transcript:
    """Upload audio bytes to the OpenAI endpoint, streaming (SSE) so the view can follow as for a path."""
    opts = options or Options()
    fields = {"model": opts.model or "hasr", "response_format": "verbose_json", "stream": "true",
              "hasr_events": "true", "language": language or "", "prompt": opts.prompt,
              "timestamp_granularities[]": "word" if opts.word_timestamps else ""}
    endpoint = "/v1/audio/translations" if opts.task == "translate" else "/v1/audio/transcriptions"
    body, ctype = multipart({k: v for k, v in fields.items() if v}, "file", filename, data)
    resp = client.request("POST", endpoint, body, {"Content-Type": ctype}, timeout=None)
    if resp.content_type == "application/json":  # no streaming there: verbose_json at once
        doc = resp.json()
        return _finish(view, doc.get("hasr") if isinstance(doc.get("hasr"), dict) else {
            "final": str(doc.get("text") or ""), "duration_s": doc.get("duration"),
            "per_sentence": [{"text": s.get("text"), "start_s": s.get("start"), "end_s": s.get("end")}
                             for s in doc.get("segments") or []]})
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

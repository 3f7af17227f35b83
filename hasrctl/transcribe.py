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

from hasrctl.client import Client, CliError, DaemonError, UsageError, multipart
from hasrctl.output import STDIN
from hasrctl.terminal import View


def _payload(language: str | None, options: dict[str, Any] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if language:
        out["language"] = language
    if options:
        out["options"] = options
    return out


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


def texts_of(result: dict[str, Any]) -> list[str] | None:
    """The result's sentences (a line each on the final screen), when it has them."""
    items = result.get("per_sentence")
    if not isinstance(items, list) or not items:
        return None
    return [str(s.get("text") or "") for s in items if isinstance(s, dict)]


def _error(ev: dict[str, Any]) -> DaemonError:
    err = ev.get("error") or {}
    return DaemonError(str(err.get("code") or "runtime_failure"), str(err.get("message") or "failed"),
                       partial=err.get("partial"))


def _follow(events: Any, view: View) -> dict[str, Any]:
    """Feed NDJSON events to the view; the result of ``done``, or the ``error`` as a DaemonError."""
    for ev in events:
        kind = str(ev.get("event") or "")
        if kind == "done":
            result = dict(ev.get("result") or {})
            view.finish(result.get("final"), texts_of(result))
            return result
        if kind == "error":
            raise _error(ev)
        _feed(kind, ev, view)
    raise CliError("hasrd ended the event stream without a result (did it exit?)")


def by_path(client: Client, path: str, language: str | None, view: View,
            options: dict[str, Any] | None = None) -> dict[str, Any]:
    body = json.dumps({"audio_path": path, **_payload(language, options)}).encode()
    headers = {"Content-Type": "application/json", "Accept": "application/x-ndjson"}
    resp = client.request("POST", "/transcribe", body, headers, timeout=None)
    if resp.content_type != "application/x-ndjson":
        result = dict(resp.json())
        view.finish(result.get("final"), texts_of(result))
        return result
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


def _follow_sse(events: Any, view: View) -> dict[str, Any]:
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
            view.finish(result.get("final"), texts_of(result))
            return dict(result)
        elif kind == "error":
            raise _error(ev)
        elif kind.startswith("hasr."):
            _feed(kind[5:], ev, view)
    raise CliError("hasrd ended the event stream without a result (did it exit?)")


def by_upload(client: Client, data: bytes, filename: str, language: str | None, view: View,
              options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Upload audio bytes to the OpenAI endpoint, streaming (SSE) so the view can follow as for a path."""
    opts = dict(options or {})
    fields = {"model": str(opts.get("model") or "hasr"), "response_format": "verbose_json", "stream": "true",
              "hasr_events": "true"}
    if language:
        fields["language"] = language
    if opts.get("prompt"):
        fields["prompt"] = str(opts["prompt"])
    if opts.get("word_timestamps"):
        fields["timestamp_granularities[]"] = "word"
    endpoint = "/v1/audio/translations" if opts.get("task") == "translate" else "/v1/audio/transcriptions"
    body, ctype = multipart(fields, "file", filename, data)
    resp = client.request("POST", endpoint, body, {"Content-Type": ctype}, timeout=None)
    if resp.content_type == "application/json":  # no streaming there: verbose_json at once
        doc = resp.json()
        result = doc.get("hasr") if isinstance(doc.get("hasr"), dict) else {
            "final": str(doc.get("text") or ""), "duration_s": doc.get("duration"),
            "per_sentence": [{"text": s.get("text"), "start_s": s.get("start"), "end_s": s.get("end")}
                             for s in doc.get("segments") or []]}
        view.finish(result.get("final"), texts_of(result))
        return dict(result)
    try:
        return _follow_sse(resp.sse(), view)
    except ValueError as e:
        raise CliError(f"hasrd sent a malformed event: {e}") from None


def run(client: Client, source: str, language: str | None, view: View, max_upload_mb: float,
        options: dict[str, Any] | None = None) -> dict[str, Any]:
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

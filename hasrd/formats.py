"""Output formats shared by the daemon (``response_format``) and ``hasrctl`` (``--format``).

Pure functions over the result object of docs/API.md, importing only the standard library so that the CLI
stays fast to start. Every rendering ends with a newline, so that it pipes and concatenates cleanly.
"""

from __future__ import annotations

import json
import math
from typing import Any

from hasrd.errors import UnknownFormat

FORMATS = ("json", "text", "srt", "vtt", "verbose_json")

_CONTENT_TYPES = {
    "json": "application/json",
    "text": "text/plain; charset=utf-8",
    "srt": "application/x-subrip; charset=utf-8",
    "vtt": "text/vtt; charset=utf-8",
    "verbose_json": "application/json",
}

_EXTENSIONS = {"json": "json", "text": "txt", "srt": "srt", "vtt": "vtt", "verbose_json": "json"}


def check(fmt: str) -> str:
    """The canonical name of ``fmt`` (case and surrounding blanks ignored), or UnknownFormat naming the valid ones."""
    name = fmt.strip().lower() if isinstance(fmt, str) else ""
    if name not in FORMATS:
        raise UnknownFormat(f"unknown format {fmt!r}: use one of {', '.join(FORMATS)}")
    return name


def content_type(fmt: str) -> str:
    return _CONTENT_TYPES[check(fmt)]


def extension(fmt: str) -> str:
    """File name extension without the dot: txt, json, srt, vtt (verbose_json is json too)."""
    return _EXTENSIONS[check(fmt)]


def _seconds(value: Any) -> float:
    """A finite, non-negative number of seconds (missing or garbage values count as 0)."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        return 0.0
    return x if math.isfinite(x) and x > 0 else 0.0


def segments(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Timed segments ``{id, start, end, text}`` from ``per_sentence``.

    Times are clamped so that they never go backwards (end >= start); a result without ``per_sentence`` but
    with text becomes one segment spanning the whole audio, so subtitles are never silently empty.
    """
    out: list[dict[str, Any]] = []
    for item in result.get("per_sentence") or []:
        text = str(item.get("text") or "").strip()
        if not text:
            continue
        start = _seconds(item.get("start_s"))
        end = max(start, _seconds(item.get("end_s")))
        out.append({"id": len(out), "start": start, "end": end, "text": text})
    if not out:
        text = str(result.get("final") or "").strip()
        if text:
            out.append({"id": 0, "start": 0.0, "end": _seconds(result.get("duration_s")), "text": text})
    return out


def timestamp(seconds: float, sep: str = ",") -> str:
    """``HH:MM:SS<sep>mmm``: sep "," for SRT, "." for WebVTT; rounded to the millisecond."""
    ms = int(round(_seconds(seconds) * 1000))
    h, ms = divmod(ms, 3_600_000)
    m, ms = divmod(ms, 60_000)
    s, ms = divmod(ms, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


def _cue_text(text: str) -> str:
    # A blank line ends a cue in both formats; keep each cue's text on non-empty lines.
    return "\n".join(line.strip() for line in text.splitlines() if line.strip())


def _srt(result: dict[str, Any]) -> str:
    blocks = []
    for seg in segments(result):
        span = f"{timestamp(seg['start'])} --> {timestamp(seg['end'])}"
        blocks.append(f"{seg['id'] + 1}\n{span}\n{_cue_text(seg['text'])}\n")
    return "\n".join(blocks)


def _vtt_escape(text: str) -> str:
    # WebVTT cue text is markup: & and < must be escaped, and "-->" may not appear at all.
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _vtt(result: dict[str, Any]) -> str:
    blocks = ["WEBVTT\n"]
    for seg in segments(result):
        span = f"{timestamp(seg['start'], '.')} --> {timestamp(seg['end'], '.')}"
        blocks.append(f"{span}\n{_vtt_escape(_cue_text(seg['text']))}\n")
    return "\n".join(blocks)


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False) + "\n"


def words(result: dict[str, Any]) -> list[dict[str, Any]] | None:
    """OpenAI's top-level ``words`` ``[{word, start, end}]`` from the sentences' ``words``; None when no sentence
    carries any (word timestamps were not asked for, or the engine has none).

    Words are stripped of whisper's leading space, empty ones dropped; times are clamped like segments'.
    """
    out: list[dict[str, Any]] = []
    found = False
    for item in result.get("per_sentence") or []:
        items = item.get("words") if isinstance(item, dict) else None
        if not isinstance(items, list):
            continue
        found = True
        for w in items:
            if not isinstance(w, dict):
                continue
            text = str(w.get("word") or "").strip()
            if not text:
                continue
            start = _seconds(w.get("start"))
            out.append({"word": text, "start": start, "end": max(start, _seconds(w.get("end")))})
    return out if found else None


def verbose(result: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's verbose_json shape (``words`` too when the sentences carry them), with hasr's whole result
    under ``hasr``."""
    doc: dict[str, Any] = {
        "task": "transcribe",
        "language": result.get("language"),
        "duration": result.get("duration_s"),
        "text": result.get("final") or "",
        "segments": segments(result),
    }
    ws = words(result)
    if ws is not None:
        doc["words"] = ws
    doc["hasr"] = result
    return doc


def render(result: dict[str, Any], fmt: str) -> str:
    """The result object rendered as ``fmt`` (one of FORMATS); UnknownFormat otherwise."""
    name = check(fmt)
    final = str(result.get("final") or "")
    if name == "text":
        return final + "\n"
    if name == "json":
        return _dumps({"text": final})
    if name == "verbose_json":
        return _dumps(verbose(result))
    if name == "srt":
        return _srt(result)
    return _vtt(result)

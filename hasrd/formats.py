"""Output formats shared by the daemon (``response_format``) and ``hasrctl`` (``--format``).

Pure functions over the result object of docs/API.md (``hasrd.transcript.Transcript``), importing only the
standard library at import (subtitles and msgspec once a rendering needs them) so that the CLI stays fast to
start. Every rendering ends with a newline, so that it pipes and concatenates cleanly.
"""

from __future__ import annotations

import enum
import json
import math
from typing import TYPE_CHECKING, Any

from hasrd.errors import UnknownFormat
from hasrd.languages import is_mark, spaced

if TYPE_CHECKING:  # the CLI imports this module at start (FORMATS): subtitles and msgspec load when used
    from hasrd import subtitles
    from hasrd.transcript import Transcript, UnsetType


class Format(str, enum.Enum):
    """An output format, as ``response_format`` and ``hasrctl --format`` name it: checked once, where the name
    arrives (:func:`check`), then carried as this."""

    JSON = "json"
    TEXT = "text"
    SRT = "srt"
    VTT = "vtt"
    VERBOSE_JSON = "verbose_json"
    DIARIZED_JSON = "diarized_json"  # OpenAI's: segments with speakers (asks for speakers by itself)

    def __str__(self) -> str:  # as a person writes it, "srt", in messages and file names
        return self.value

    @property
    def content_type(self) -> str:
        return _CONTENT_TYPES[self]

    @property
    def extension(self) -> str:
        """File name extension without the dot: txt, json, srt, vtt (verbose_json is json too)."""
        return _EXTENSIONS[self]


FORMATS = tuple(f.value for f in Format)

_CONTENT_TYPES = {
    "json": "application/json",
    "text": "text/plain; charset=utf-8",
    "srt": "application/x-subrip; charset=utf-8",
    "vtt": "text/vtt; charset=utf-8",
    "verbose_json": "application/json",
    "diarized_json": "application/json",
}

_EXTENSIONS = {"json": "json", "text": "txt", "srt": "srt", "vtt": "vtt", "verbose_json": "json",
               "diarized_json": "json"}


def check(fmt: str, param: str | None = None) -> Format:
    """The format ``fmt`` names (case and surrounding blanks ignored), or UnknownFormat naming the valid ones
    (and ``param``, the request's field)."""
    name = fmt.strip().lower() if isinstance(fmt, str) else ""
    if name not in FORMATS:
        raise UnknownFormat(f"unknown format {fmt!r}: use one of {', '.join(FORMATS)}", param=param)
    return Format(name)


def _seconds(value: float | None) -> float:
    """A finite, non-negative number of seconds (a missing, negative or infinite one counts as 0)."""
    return float(value) if value is not None and math.isfinite(value) and value > 0 else 0.0


def _score(value: float | UnsetType) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None


def segments(result: Transcript) -> list[dict[str, Any]]:
    """Timed segments from ``per_sentence``, with OpenAI's verbose_json fields: ``id, seek, start, end, text,
    tokens, temperature, avg_logprob, compression_ratio, no_speech_prob``.

    Times are clamped so that they never go backwards (end >= start); a result without ``per_sentence`` but
    with text becomes one segment spanning the whole audio, so subtitles are never silently empty. Sentences
    faster-whisper did not decode (R2T2 draft text) have no tokens or scores: ``tokens`` is [] and the scores
    are null (docs/API.md).
    """
    out: list[dict[str, Any]] = []
    for item in result.per_sentence:
        text = item.text.strip()
        if not text:
            continue
        start = _seconds(item.start_s)
        end = max(start, _seconds(item.end_s))
        seek = item.seek if isinstance(item.seek, int) and item.seek else round(start * 100)
        seg = {"id": len(out), "seek": seek, "start": start, "end": end, "text": text,
               "tokens": list(item.tokens) if isinstance(item.tokens, list) else [],
               "temperature": _score(item.temperature), "avg_logprob": _score(item.avg_logprob),
               "compression_ratio": _score(item.compression_ratio), "no_speech_prob": _score(item.no_speech_prob)}
        if isinstance(item.speaker, str):
            seg["speaker"] = item.speaker
        out.append(seg)
    if not out:
        text = result.final.strip()
        if text:
            out.append({"id": 0, "seek": 0, "start": 0.0, "end": _seconds(result.duration_s), "text": text,
                        "tokens": [], "temperature": None, "avg_logprob": None, "compression_ratio": None,
                        "no_speech_prob": None})
    return out


def usage(result: Transcript) -> dict[str, Any]:
    """OpenAI's usage object of audio models: the seconds of audio billed (here: transcribed)."""
    return {"type": "duration", "seconds": int(math.ceil(_seconds(result.duration_s)))}


def logprobs(result: Transcript) -> list[dict[str, Any]] | None:
    """``include[]=logprobs``: one entry per word ``{token, logprob, bytes}`` from faster-whisper's word
    probabilities; None where the engine has none (draft sentences, no word timestamps)."""
    out: list[dict[str, Any]] = []
    for item in result.per_sentence:
        for w in item.words if isinstance(item.words, list) else []:
            out.append({"token": w.word, "logprob": math.log(max(float(w.probability), 1e-12)),
                        "bytes": list(w.word.encode("utf-8"))})
    return out or None


def openai_language(result: Transcript) -> str | None:
    """The language as OpenAI names it in verbose_json: lower-case English name ("english"); translations are
    always "english"."""
    if result.task == "translate":
        return "english"
    return result.language.lower() if result.language else None


class DeltaJoiner:
    """Sentence texts in, ``transcript.text.delta`` strings out, which concatenate exactly to the
    ``transcript.text.done`` text (clients append deltas; the SDK's helpers do).

    A sentence after the first is prefixed with a space unless one side of the join is in a script written
    without spaces (CJK, Thai, ...) and a mark (。 . ，) ends or begins the join: ``languages.gap``'s rule, decided
    per join because the language may be known only at the end. :meth:`done` gives the rest of the engine's final text
    as a last delta, and the done text: the engine's final text whenever the deltas could reach it.
    """

    def __init__(self) -> None:
        self.text = ""

    def add(self, sentence: str) -> str:
        piece = sentence.strip()
        if not piece:
            return ""
        prev = self.text[-1:]
        both_spaced = bool(prev) and spaced(prev) and spaced(piece[0])
        delta = (" " if prev and (both_spaced or not (is_mark(prev) or is_mark(piece[0]))) else "") + piece
        self.text += delta
        return delta

    def done(self, final: str) -> tuple[str, str]:
        """(a last delta, possibly "", and the done text)."""
        final = final.strip()
        if final.startswith(self.text):
            rest, self.text = final[len(self.text):], final
            return rest, final
        return "", self.text


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


def _vtt_escape(text: str) -> str:
    # WebVTT cue text is markup: & and < must be escaped, and "-->" may not appear at all.
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _subtitles(result: Transcript, rules: subtitles.CueRules | None, vtt: bool) -> str:
    """SRT (numbered cues, ``00:00:01,000``) or WebVTT (a header, ``00:00:01.000``, escaped text); no cue ends
    after the audio, when the result says where it ends. A speaker is named before a cue's text: ``A: `` in SRT,
    a voice tag ``<v A>`` in WebVTT."""
    from hasrd import subtitles

    cues = subtitles.cues(segments(result), rules, _seconds(result.duration_s) or None, result.language)
    sep, blocks = (".", ["WEBVTT\n"]) if vtt else (",", [])
    for k, cue in enumerate(cues, 1):
        span = f"{timestamp(cue.start, sep)} --> {timestamp(cue.end, sep)}"
        text = _cue_text(cue.text)
        if vtt:
            voice = f"<v {_vtt_escape(cue.speaker)}>" if cue.speaker else ""
            blocks.append(f"{span}\n{voice}{_vtt_escape(text)}\n")
        else:
            blocks.append(f"{k}\n{span}\n{cue.speaker + ': ' if cue.speaker else ''}{text}\n")
    return "\n".join(blocks)


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False) + "\n"


def words(result: Transcript) -> list[dict[str, Any]] | None:
    """OpenAI's top-level ``words`` ``[{word, start, end}]`` from the sentences' ``words``; None when no sentence
    carries any (word timestamps were not asked for, or the engine has none).

    Words are stripped of whisper's leading space, empty ones dropped; times are clamped like segments'.
    """
    out: list[dict[str, Any]] = []
    found = False
    for item in result.per_sentence:
        if not isinstance(item.words, list):
            continue
        found = True
        for w in item.words:
            text = w.word.strip()
            if not text:
                continue
            start = _seconds(w.start)
            out.append({"word": text, "start": start, "end": max(start, _seconds(w.end))})
    return out if found else None


def verbose(result: Transcript) -> dict[str, Any]:
    """OpenAI's verbose_json shape (``words`` too when the sentences carry them), with hasr's whole result
    under ``hasr``."""
    doc: dict[str, Any] = {
        "task": "translate" if result.task == "translate" else "transcribe",
        "language": openai_language(result),
        "duration": result.duration_s,
        "text": result.final,
        "segments": segments(result),
        "usage": usage(result),
    }
    ws = words(result)
    if ws is not None:
        doc["words"] = ws
    from hasrd.transcript import to_json

    doc["hasr"] = to_json(result)
    return doc


def annotate(result: Transcript, *, audio_path: str | None, language: str, duration_s: float) -> Transcript:
    """The fields the daemon adds to a worker's result (the file shown, the language asked, the decoded
    duration), in one place for the daemon's jobs and ``hasrctl batch``'s actors."""
    result.audio_path = audio_path
    if not result.language:
        result.language = language
    if result.duration_s is None:
        result.duration_s = duration_s
    return result


def turns(result: Transcript) -> list[tuple[str, str]]:
    """(speaker, text) per turn: a speaker's consecutive sentences joined as the transcript joins them; [] when
    the result has no speakers."""
    out: list[tuple[str, str]] = []
    for seg in segments(result):
        who = seg.get("speaker")
        if who is None:
            return []
        if out and out[-1][0] == who:
            joiner = DeltaJoiner()
            joiner.text = out[-1][1]
            out[-1] = (who, joiner.text + joiner.add(seg["text"]))
        else:
            out.append((who, seg["text"]))
    return out


def speaker_text(result: Transcript) -> str | None:
    """The transcript in speaker turns, ``A: …`` a line; None when the result has no speakers."""
    ts = turns(result)
    return "".join(f"{who}: {text}\n" for who, text in ts) if ts else None


def lines(result: Transcript) -> str:
    """The transcript as people read it in a terminal or a .txt file: one sentence a line, or one speaker turn a
    line (``A: …``) where speakers were asked for (the OpenAI ``text`` format stays one string: :func:`render`)."""
    said = speaker_text(result)
    if said is not None:
        return said
    texts = [seg["text"] for seg in segments(result)]
    return "\n".join(texts) + "\n"


def diarized(result: Transcript) -> dict[str, Any]:
    """OpenAI's diarized_json: ``{task, duration, text, segments: [{type, id, start, end, text, speaker}], usage}``
    (a sentence without a speaker, from a result that has none, is speaker "A")."""
    segs = [{"type": "transcript.text.segment", "id": f"seg_{seg['id']}", "start": seg["start"], "end": seg["end"],
             "text": seg["text"], "speaker": seg.get("speaker", "A")} for seg in segments(result)]
    return {"task": "transcribe", "duration": _seconds(result.duration_s), "text": result.final, "segments": segs,
            "usage": usage(result)}


def render(result: Transcript, fmt: Format, include_logprobs: bool = False,
           rules: subtitles.CueRules | None = None) -> str:
    """The result object rendered as ``fmt``. ``include_logprobs`` (OpenAI's ``include[]=logprobs``) adds
    ``logprobs`` to json; ``rules`` are the subtitle cue limits of srt and vtt (subtitles.py; default: 2 lines of
    42 Latin / 16 CJK characters, 0.83-7 s)."""
    match fmt:
        case Format.TEXT:
            return speaker_text(result) or result.final + "\n"
        case Format.DIARIZED_JSON:
            return _dumps(diarized(result))
        case Format.JSON:
            doc: dict[str, Any] = {"text": result.final, "usage": usage(result)}
            if include_logprobs:
                doc["logprobs"] = logprobs(result) or []
            return _dumps(doc)
        case Format.VERBOSE_JSON:
            return _dumps(verbose(result))
        case Format.SRT:
            return _subtitles(result, rules, vtt=False)
    return _subtitles(result, rules, vtt=True)

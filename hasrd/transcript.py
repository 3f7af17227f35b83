"""The result of a transcription: one ``Transcript`` Struct, built by every engine and read by every route.

Engines (whisper, v2c: hybrid, r2t2 and fake, and each engine's live session) fill the fields they know; the
worker sends the Struct as it is in its ``Result`` frame; the daemon adds its own fields (``audio_path``,
``worker``, the request's ``timings``) and every route renders from it (``formats.py``, the OpenAI stream, the
Realtime ``hasr.done``). Its JSON is the result object of docs/API.md.

A field that only some engines fill defaults to ``UNSET`` and is left out of the JSON when unset, so the object
says what an engine knew rather than a null it never measured (the whisper engine's ``language_code``, the R2T2
engines' ``bar_signal``, a live session's ``turns``). Fields every engine has are always there.

A leaf module: msgspec and hasrd.status (another leaf) only (the worker imports it before ``Hello``, the CLI to render
what the daemon sent).
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from hasrd.status import decode

__all__ = ["UNSET", "UnsetType", "Timings", "TimedSentence", "Transcript", "TurnRecord", "Window", "Word", "WorkerInfo",
           "from_json", "numbers", "to_json"]


class Word(msgspec.Struct):
    """A word of a sentence (``options.word_timestamps``): faster-whisper's text, times and probability."""

    word: str
    start: float
    end: float
    probability: float


class TimedSentence(msgspec.Struct, kw_only=True):
    """One sentence of ``per_sentence``: the timed list srt, vtt and verbose_json are made of.

    ``engine`` is "fw" (faster-whisper's text) or "draft" (R2T2's, kept). The decoder's scores, ``seek`` and
    ``tokens`` are there where faster-whisper decoded the sentence's audio as a file; ``truncated_by`` where v2c
    judged the sentence; ``segment`` in a live session (the utterance)."""

    text: str
    engine: str = ""
    start_s: float = 0.0
    end_s: float = 0.0
    truncated_by: str | None | UnsetType = UNSET
    segment: int | UnsetType = UNSET
    avg_logprob: float | UnsetType = UNSET
    no_speech_prob: float | UnsetType = UNSET
    compression_ratio: float | UnsetType = UNSET
    temperature: float | UnsetType = UNSET
    seek: int | UnsetType = UNSET
    tokens: list[int] | UnsetType = UNSET
    words: list[Word] | UnsetType = UNSET
    speaker: str | UnsetType = UNSET  # who said it, where speakers were asked for (channels or diarization)


class Window(msgspec.Struct, kw_only=True):
    """The audio a sentence window covered, in 0.16 s chunks (``sent_windows``); v2c says what sent it to
    faster-whisper (``truncated_by``: "bar", "no_end_mark", or None when the draft was kept)."""

    text: str
    start_chunk: int
    end_chunk: int
    truncated_by: str | None | UnsetType = UNSET


class TurnRecord(msgspec.Struct, kw_only=True):
    """A live session's utterance: where speech started and stopped, and its final text once completed."""

    segment: int
    start_s: float
    end_s: float | None = None
    text: str | None = None


class Timings(msgspec.Struct, kw_only=True):
    """Seconds spent: the engine's (``draft_s``, ``final_s``, ``fw_s``, a live ``session_s``), the pool's
    (``queue_s``, ``load_s``, ``work_s``) and the request's (``decode_s`` of the audio, ``total_s``)."""

    draft_s: float | UnsetType = UNSET
    final_s: float | UnsetType = UNSET
    fw_s: float | UnsetType = UNSET
    session_s: float | UnsetType = UNSET
    queue_s: float | UnsetType = UNSET
    load_s: float | UnsetType = UNSET
    work_s: float | UnsetType = UNSET
    decode_s: float | UnsetType = UNSET
    diarize_s: float | UnsetType = UNSET  # telling the speakers apart (windows, embeddings, clusters)
    total_s: float | UnsetType = UNSET


class WorkerInfo(msgspec.Struct):
    """Which worker served the request (added by the pool)."""

    model: str
    device: str
    pid: int | None


class Transcript(msgspec.Struct, kw_only=True):
    """The result object of docs/API.md."""

    engine: str = ""
    language: str = ""
    final: str = ""
    draft: str = ""
    per_sentence: list[TimedSentence] = msgspec.field(default_factory=list)
    sent_windows: list[Window] = msgspec.field(default_factory=list)
    fw_calls: int = 0
    first_text_s: float | None = None
    duration_s: float | None = None
    timings: Timings = msgspec.field(default_factory=Timings)
    # what some engines know
    segments: int | UnsetType = UNSET  # silence-split segments of long audio (v2c), or a live session's utterances
    language_code: str | UnsetType = UNSET
    language_probability: float | None | UnsetType = UNSET
    language_detected: bool | UnsetType = UNSET
    decoding: str | UnsetType = UNSET  # whisper: "batched" | "sequential"
    task: str | UnsetType = UNSET  # whisper: "transcribe" | "translate"
    bar_signal: str | UnsetType = UNSET  # R2T2: "generation" | "state_text"
    note: str | UnsetType = UNSET  # why the hybrid ran faster-whisper alone
    options: dict[str, Any] | UnsetType = UNSET  # the fake engine: the options that reached the worker
    live: bool | UnsetType = UNSET
    turns: list[TurnRecord] | UnsetType = UNSET
    decodes: int | UnsetType = UNSET  # live whisper: decodes run
    # the Chinese script (zhscript.py: the worker converts every text)
    script: str | None | UnsetType = UNSET
    script_conversion: str | None | UnsetType = UNSET
    script_note: str | UnsetType = UNSET
    # who spoke (speakers.py): "channels" (one speaker per channel) or "diarized"; the labels in order of first words
    speaker_mode: str | UnsetType = UNSET
    speakers: list[str] | UnsetType = UNSET
    # added by the daemon
    audio_path: str | None | UnsetType = UNSET
    worker: WorkerInfo | UnsetType = UNSET

    def texts(self) -> list[str]:
        """The sentences' texts, in order."""
        return [s.text for s in self.per_sentence]


def numbers(obj: Any) -> Any:
    """msgspec's ``enc_hook`` for numpy values: faster-whisper hands out numpy.float64 times and probabilities
    (and ``round`` keeps them numpy), which msgspec refuses; a scalar becomes its Python number, an array a
    list. Duck-typed, so that this module imports no numpy."""
    if hasattr(obj, "tolist"):
        return obj.tolist()
    # msgspec's enc_hook protocol: NotImplementedError means "not mine", and msgspec raises its own TypeError
    raise NotImplementedError(f"cannot encode objects of type {type(obj).__name__}")


def to_json(t: Transcript) -> dict[str, Any]:
    """The result object as JSON-ready builtins (unset fields left out)."""
    out: dict[str, Any] = msgspec.to_builtins(t, enc_hook=numbers)
    return out


def from_json(obj: Any) -> Transcript:
    """A result object the daemon sent (decoded JSON) as a Transcript (hasrd.status.decode: ValueError saying which
    field when it is not one; unknown fields left out, so a newer daemon's result still reads)."""
    return decode(obj, Transcript)

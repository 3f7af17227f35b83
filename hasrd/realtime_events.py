"""The Realtime transcription protocol's vocabulary: client settings, server events, and the audio format.

What ``realtime.py`` (which runs the sessions) speaks in, importing nothing of it: what a ``session.update`` may
say and how it is checked, the events the daemon sends (a worker's live events as an utterance's item events:
:class:`ItemEvents`), OpenAI's one PCM format (PCM16 mono at 24 kHz) converted to the worker's 16 kHz float32,
and the limits a session lives under (docs/API.md "Live transcription").

Every client event that cannot be applied is a :class:`BadEvent`: the session answers it with an ``error`` event
and goes on. Nothing a client sends may raise anything else (a ``"rate": "abc"`` once killed the session's
reader without a word).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import av

from hasrd import errors
from hasrd.formats import DeltaJoiner
from hasrd.jobevents import JobEvent, Loading, Queued
from hasrd.languages import UnknownLanguage, resolve
from hasrd.modelspec import ModelSpec
from hasrd.protocol import Draft, Sentence, Turn
from hasrd.resample import frames_bytes, s16_mono_frame

IN_RATE = 24000
OUT_RATE = 16000
OUT_BYTES_PER_S = OUT_RATE * 4  # what the worker takes: float32 mono at 16 kHz
MAX_MESSAGE = 16 * 1024 * 1024  # uvicorn's ws_max_size: a larger client event closes the connection (1009)
RESAMPLE_PIECE = IN_RATE * 2  # bytes of PCM16 resampled at a time (1 s), so one huge append has a small peak

_events = itertools.count(1)


class BadEvent(Exception):
    def __init__(self, code: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.param = code, message, param


class Pcm16To16k:
    """24 kHz PCM16 mono in, 16 kHz float32 mono out, streaming (FFmpeg's resampler through PyAV), a second at
    a time so that one large append never holds several converted copies of itself at once."""

    def __init__(self) -> None:
        self.resampler = av.AudioResampler(format="flt", layout="mono", rate=OUT_RATE)

    def convert(self, data: bytes) -> bytes:
        if len(data) % 2:
            raise BadEvent("invalid_audio", f"PCM16 audio is 2 bytes a sample; this chunk has {len(data)} bytes",
                           "audio")
        view = memoryview(data)
        return b"".join(frames_bytes(self.resampler.resample(s16_mono_frame(bytes(view[i:i + RESAMPLE_PIECE]),
                                                                            IN_RATE)), 4)
                        for i in range(0, len(data), RESAMPLE_PIECE))


def event(kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": kind, "event_id": f"event_{next(_events)}", **fields}


def error_event(code: str, message: str, param: str | None = None, kind: str = "invalid_request_error",
                event_id: str | None = None) -> dict[str, Any]:
    return event("error", error={"type": kind, "code": code, "message": message, "param": param,
                                 "event_id": event_id})


def too_large_event() -> dict[str, Any]:
    """What a client hears before the 1009 close of a message over :data:`MAX_MESSAGE`."""
    return error_event("message_too_large", f"a client event may be at most {MAX_MESSAGE // 2**20} MiB of JSON "
                       f"(an append of about {MAX_MESSAGE * 3 // 4 // (IN_RATE * 2) // 60} minutes of 24 kHz PCM16); "
                       f"send audio in smaller appends (OpenAI's clients send 20-200 ms each)", "audio")


def usage(start_s: float, end_s: float) -> dict[str, Any]:
    """The ``usage`` of a completed transcript: the utterance's seconds of audio (OpenAI's duration usage)."""
    return {"type": "duration", "seconds": round(max(0.0, end_s - start_s), 3)}


def _object(value: Any, param: str) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise BadEvent("invalid_value", f"{param} must be an object, not {type(value).__name__}", param)
    return value


def _string(value: Any, param: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise BadEvent("invalid_value", f"{param} must be a string, not {type(value).__name__}", param)
    return value


def _integer(value: Any, param: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise BadEvent("invalid_value", f"{param} must be a number, not {value!r}", param)
    try:
        return int(float(value))
    except (TypeError, ValueError, OverflowError):
        raise BadEvent("invalid_value", f"{param} must be a number, not {value!r}", param) from None


class Config:
    """What the client asked for in its session updates. :meth:`update` checks the whole event before it
    changes anything, so a refused update leaves the session as it was."""

    def __init__(self, beta: bool, resolve: Callable[[str], ModelSpec | None] = lambda name: None) -> None:
        self.beta = beta
        self.resolve = resolve  # a model's name -> what runs it (hasrd.modelspec), or ModelNotFound
        self.spec: ModelSpec | None = None  # None: the default
        self.model = "gpt-4o-transcribe"
        self.language = ""
        self.prompt = ""
        self.silence_ms = 500

    def update(self, event: dict[str, Any]) -> None:
        s = _object(event.get("session"), "session")
        if s is None:
            raise BadEvent("invalid_value", "session must be an object", "session")
        if event["type"] == "session.update":
            audio = _object(s.get("audio"), "session.audio") or {}
            inp = _object(audio.get("input"), "session.audio.input") or {}
            fmt = inp.get("format")
            tr = _object(inp.get("transcription"), "session.audio.input.transcription")
            td = _object(inp.get("turn_detection"), "session.audio.input.turn_detection")
            if fmt is not None:
                rate = _integer(fmt.get("rate", IN_RATE), "session.audio.input.format.rate") \
                    if isinstance(fmt, dict) else 0
                if not isinstance(fmt, dict) or fmt.get("type") != "audio/pcm" or rate != IN_RATE:
                    raise BadEvent("unsupported_audio_format", f"hasr takes audio/pcm at 24000 Hz (PCM16 mono), "
                                   f"not {fmt!r}", "session.audio.input.format")
        else:
            fmt = s.get("input_audio_format")
            tr = _object(s.get("input_audio_transcription"), "session.input_audio_transcription")
            td = _object(s.get("turn_detection"), "session.turn_detection")
            if fmt is not None and fmt != "pcm16":
                raise BadEvent("unsupported_audio_format", f"hasr takes input_audio_format pcm16 (24 kHz mono), "
                               f"not {fmt!r}", "session.input_audio_format")
        model, language, prompt, silence_ms = self.model, self.language, self.prompt, self.silence_ms
        spec = self.spec
        if tr is not None:
            model = _string(tr.get("model"), "model") or model
            try:
                spec = self.resolve(model)
            except errors.ModelNotFound as e:
                raise BadEvent("model_not_found", e.message, "model") from None
            language = _string(tr.get("language"), "language")
            try:
                resolve(language)
            except UnknownLanguage as e:  # refused at the update, not at the first audio as invalid_audio
                raise BadEvent("unknown_language", str(e), "language") from None
            prompt = _string(tr.get("prompt"), "prompt")
        if td is not None and td.get("silence_duration_ms") is not None:
            silence_ms = _integer(td["silence_duration_ms"], "turn_detection.silence_duration_ms")
            if not 100 <= silence_ms <= 10000:
                raise BadEvent("invalid_value", f"silence_duration_ms must be 100-10000, not {silence_ms}",
                               "turn_detection.silence_duration_ms")
        self.model, self.language, self.prompt, self.silence_ms = model, language, prompt, silence_ms
        self.spec = spec

    def session(self, sid: str) -> dict[str, Any]:
        tr = {"model": self.model, "language": self.language or None, "prompt": self.prompt}
        td = {"type": "server_vad", "silence_duration_ms": self.silence_ms, "prefix_padding_ms": 300}
        if self.beta:
            return {"id": sid, "object": "realtime.transcription_session", "input_audio_format": "pcm16",
                    "input_audio_transcription": tr, "turn_detection": td}
        return {"id": sid, "object": "realtime.transcription_session", "type": "transcription",
                "audio": {"input": {"format": {"type": "audio/pcm", "rate": IN_RATE}, "transcription": tr,
                                    "turn_detection": td}}}


class ItemEvents:
    """A live session's worker events as the Realtime server events of its items, an item an utterance
    (``item_<session>_<n>``): speech started and stopped, committed and created, the transcript's deltas (they
    concatenate to its ``completed`` transcript: formats.DeltaJoiner) and hasr's own ``hasr.*`` events."""

    def __init__(self, sid: str) -> None:
        self.sid = sid
        self.joiners: dict[int, DeltaJoiner] = {}
        self.spans: dict[int, list[float]] = {}  # utterance -> [start_s, end_s]

    def item(self, seg: int) -> str:
        return f"item_{self.sid[10:]}_{seg}"

    def events(self, ev: JobEvent) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        match ev:
            case Turn(segment=seg, kind="started", start_s=start):
                item = self.item(seg)
                self.joiners[seg] = DeltaJoiner()
                self.spans[seg] = [start, start]
                out.append(event("input_audio_buffer.speech_started", item_id=item, audio_start_ms=int(start * 1000)))
            case Turn(segment=seg, kind="stopped", end_s=end):
                item = self.item(seg)
                self.spans.setdefault(seg, [0.0, 0.0])[1] = end
                prev = self.item(seg - 1) if seg else None
                out += [event("input_audio_buffer.speech_stopped", item_id=item, audio_end_ms=int(end * 1000)),
                        event("input_audio_buffer.committed", item_id=item, previous_item_id=prev),
                        event("conversation.item.created", previous_item_id=prev,
                              item={"id": item, "object": "realtime.item", "type": "message", "status": "completed",
                                    "role": "user", "content": [{"type": "input_audio", "transcript": None}]})]
            case Turn(segment=seg, text=text):  # completed
                joiner = self.joiners.pop(seg, DeltaJoiner())
                start, end = self.spans.pop(seg, [0.0, 0.0])
                out.append(event("conversation.item.input_audio_transcription.completed", item_id=self.item(seg),
                                 content_index=0, transcript=joiner.text or text, usage=usage(start, end)))
            case Sentence(segment=seg):
                item = self.item(seg)
                delta = self.joiners.setdefault(seg, DeltaJoiner()).add(ev.text)
                out.append(event("hasr.sentence", item_id=item, index=ev.index, text=ev.text, engine=ev.engine,
                                 start_s=ev.start_s, end_s=ev.end_s))
                if delta:
                    out.append(event("conversation.item.input_audio_transcription.delta", item_id=item,
                                     content_index=0, delta=delta))
            case Draft(segment=seg, text=text):
                out.append(event("hasr.draft", item_id=self.item(seg), text=text))
            case Queued(position=position):
                out.append(event("hasr.queued", position=position))
            case Loading(phase=phase, elapsed_s=elapsed):
                out.append(event("hasr.loading", phase=phase, elapsed_s=elapsed))
        return out

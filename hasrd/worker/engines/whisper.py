"""faster-whisper: loading a model, v2c window transcription, and the whisper-only engine.

Windows (hybrid): the seed's call exactly, ``transcribe(window, language=<code>, beam_size=5,
vad_filter=False)``, on a numpy view of the request's PCM (no temporary files).

Whole files (whisper engine): Silero VAD on, timestamps per segment, optional word timestamps
(``options={"word_timestamps": true}``), ``options["prompt"]`` (the OpenAI ``prompt``; ``"initial_prompt"`` is
read too) as faster-whisper's ``initial_prompt`` for every piece, and a bounded temperature fallback (0.0, 0.2,
0.4) without conditioning on previous text and a token cap for short pieces, so a 5 s clip cannot turn into
15 s of retries (notes/models.md) and one hallucination cannot feed the next window. Silence gives no
segments, hence an empty transcript. Long input goes through segment.py first, so the mel spectrogram never
covers more than HASR_WHISPER_SEGMENT_SEC.

The v2c windows never get the prompt: they are the seed's call verbatim, and a prompt on a short fragment of a
truncated sentence invites whisper to echo or continue it (hybrid.py).

faster-whisper returns numpy.float64 times and probabilities once word timestamps are on (segment times
included); the worker channel (msgspec) cannot encode those, so every number is made a float where it is read
and the result goes through :func:`~hasrd.worker.engines.plain_result`.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable

import numpy as np

from hasrd.config import Settings
from hasrd.worker import segment
from hasrd.models import FwModel, resolve_fw
from hasrd.worker.engines import Emitter, EngineError, plain_result
from hasrd.languages import NAMES, UnknownLanguage, join_sentences, resolve

SR = 16000
WINDOW_KW: dict[str, Any] = {"beam_size": 5, "vad_filter": False}
TEMPERATURES = (0.0, 0.2, 0.4)
TOKENS_PER_S = 16
WHOLE_KW: dict[str, Any] = {
    "beam_size": 5, "vad_filter": True, "vad_parameters": {"min_silence_duration_ms": 500},
    "temperature": TEMPERATURES, "compression_ratio_threshold": 2.4, "log_prob_threshold": -1.0,
    "no_speech_threshold": 0.6, "condition_on_previous_text": False,
}


def compute_type_for(device: str, setting: str) -> str:
    """float16 on CUDA, int8 on the CPU, unless a compute type is configured."""
    if setting and setting != "default":
        return setting
    return "float16" if device == "cuda" else "int8"


def load_model(model: FwModel, device: str, compute_type: str, device_index: int = 0) -> Any:
    """WhisperModel(...) with failures mapped to protocol codes and sentences."""
    from faster_whisper import WhisperModel

    try:
        if model.files is not None:
            return WhisperModel(model.name, device=device, device_index=device_index, compute_type=compute_type,
                                files=dict(model.files))
        return WhisperModel(model.path or model.name, device=device, device_index=device_index,
                            compute_type=compute_type, local_files_only=True)
    except (RuntimeError, ValueError, OSError) as e:
        msg = str(e)
        if "out of memory" in msg.lower():
            raise EngineError("out_of_memory", f"faster-whisper ran out of memory loading {model.name} on "
                                               f"{device}: {msg}") from None
        if device == "cuda" and ("cuda" in msg.lower() or "libcu" in msg.lower()):
            raise EngineError("model_unavailable",
                              f"faster-whisper cannot use CUDA ({msg}); CTranslate2 needs the CUDA 12 libraries "
                              f"(pip install nvidia-cublas-cu12 where only CUDA 13 is installed), or set "
                              f"HASR_FW_DEVICE=cpu") from None
        raise EngineError("model_unavailable", f"faster-whisper could not load {model.path or model.name} on "
                                               f"{device} ({compute_type}): {msg}") from None


def whisper_code(model: Any, code: str) -> str | None:
    """The language code this model accepts ('' -> None = detect); Cantonese falls back to Chinese."""
    if not code:
        return None
    codes = list(getattr(model, "supported_languages", []) or [])
    n = getattr(getattr(model, "model", None), "num_languages", None)
    if isinstance(n, int) and 0 < n < len(codes):  # "yue" is the 100th: large-v3 has it, base does not
        codes = codes[:n]
    supported = set(codes)
    if supported and code not in supported:
        if code == "yue" and "zh" in supported:
            return "zh"
        raise EngineError("invalid_audio", f"this faster-whisper model does not know {NAMES.get(code, code)} "
                                           f"({code!r})")
    return code


def token_cap(seconds: float) -> int | None:
    """Tokens one decode of a short piece may produce: twice fast speech, so that noise VAD took for speech
    cannot loop a repetition up to the 448-token limit in each of the fallback passes (none from 27 s on)."""
    return None if seconds >= 27 else int(TOKENS_PER_S * seconds + 16)


def window_fn(model: Any, code: str | None) -> Callable[[np.ndarray], str]:
    """v2c's final stage: one window -> its text (the seed's parameters)."""

    def transcribe_window(audio: np.ndarray) -> str:
        if len(audio) == 0:
            return ""
        segments, _info = model.transcribe(audio, language=code, **WINDOW_KW)
        return "".join(str(s.text) for s in segments).strip()

    return transcribe_window


def prompt_of(options: dict[str, Any]) -> str | None:
    """The initial prompt a request asks for: ``options["prompt"]`` (the OpenAI field), else "initial_prompt"."""
    for key in ("prompt", "initial_prompt"):
        if options.get(key):
            return str(options[key])
    return None


def language_of(language: str) -> tuple[str, str]:
    try:
        return resolve(language)
    except UnknownLanguage as e:
        raise EngineError("invalid_audio", str(e)) from None


class WhisperEngine:
    """faster-whisper alone: whole files with VAD, segments with timestamps."""

    name = "whisper"

    def __init__(self, settings: Settings, fw_spec: str, device: str, compute_type: str,
                 identity: dict[str, Any] | None = None) -> None:
        self.settings = settings
        self.fw_spec = fw_spec  # HASR_FW_MODEL's syntax; '' = the embedded model
        self.device = device
        self.compute_type = compute_type
        self.extra = dict(identity or {})
        self.model: Any = None

    def load(self, phase: Callable[[str], None]) -> dict[str, Any]:
        self.model_ref = resolve_fw(self.fw_spec, phase)
        phase(f"loading faster-whisper {self.model_ref.name} on {self.device} ({self.compute_type})")
        self.model = load_model(self.model_ref, self.device, self.compute_type)
        ident = {"engine": "whisper", "models": {"final": self.model_ref.describe()}, "device": self.device,
                 "compute_type": self.compute_type}
        ident.update(self.extra)
        return ident

    def transcribe(self, pcm: np.ndarray, language: str, options: dict[str, Any], emit: Emitter,
                   cancelled: Callable[[], bool]) -> dict[str, Any]:
        name, code = language_of(language or self.settings.language)
        fw_code = whisper_code(self.model, code)
        kw = dict(WHOLE_KW, word_timestamps=bool(options.get("word_timestamps")), initial_prompt=prompt_of(options))
        n = len(pcm)
        total_s = round(n / SR, 3)
        per_sentence: list[dict[str, Any]] = []
        windows: list[dict[str, Any]] = []
        first_text_s: float | None = None
        calls = 0
        t0 = time.monotonic()
        pieces = segment.speech_ranges(segment.iter_segments(pcm, self.settings.whisper_segment_sec))
        for start, end in pieces:
            if cancelled():
                raise EngineError("cancelled", "the request was cancelled")
            offset = start / SR
            segments, info = self.model.transcribe(pcm[start:end], language=fw_code,
                                                   max_new_tokens=token_cap((end - start) / SR), **kw)
            calls += 1
            for s in segments:  # lazy: decoding happens while iterating
                if cancelled():
                    raise EngineError("cancelled", "the request was cancelled")
                text = str(s.text).strip()
                seg_start, seg_end = float(s.start), float(s.end)  # numpy.float64 with word timestamps
                emit.progress(round(min(offset + seg_end, total_s), 3), total_s)
                if not text:
                    continue
                start_s, end_s = round(offset + seg_start, 3), round(offset + seg_end, 3)
                entry: dict[str, Any] = {"text": text, "engine": "fw", "start_s": start_s, "end_s": end_s}
                if s.words:
                    entry["words"] = [{"word": str(w.word), "start": round(offset + float(w.start), 3),
                                       "end": round(offset + float(w.end), 3),
                                       "probability": round(float(w.probability), 4)} for w in s.words]
                if first_text_s is None:
                    first_text_s = end_s
                emit.sentence(len(per_sentence), text, "fw", start_s, end_s)
                per_sentence.append(entry)
                c0 = int(start_s / 0.16)
                windows.append({"text": text, "start_chunk": c0,
                                "end_chunk": max(c0, math.ceil(end_s / 0.16) - 1)})
            if fw_code is None and info.language:  # detected once, then kept for the following pieces
                fw_code = str(info.language)
                name, code = NAMES.get(fw_code, fw_code), fw_code
        emit.progress(total_s, total_s)
        elapsed = time.monotonic() - t0
        return plain_result({
            "engine": "whisper",
            "language": name,
            "language_code": code,
            "draft": "",
            "final": join_sentences([p["text"] for p in per_sentence], code),
            "sent_windows": windows,
            "fw_calls": calls,
            "first_text_s": first_text_s,
            "per_sentence": per_sentence,
            "duration_s": total_s,
            "timings": {"draft_s": 0.0, "final_s": round(elapsed, 4), "fw_s": round(elapsed, 4)},
        })

    def close(self) -> None:
        self.model = None

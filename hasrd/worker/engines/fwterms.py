"""faster-whisper's terms and hasr's, both ways, for every engine that decodes with it (whisper, hybrid, the R2T2
draft's language): a request's language (the code the model accepts) and prompt; v2c's one-window decode; and a
decoded segment back as hasr's timed words and ``per_sentence`` entries.

v2c's windows (hybrid) are the seed's call exactly, ``transcribe(window, language=<code>, beam_size=5,
vad_filter=False)``, on a numpy view of the request's PCM (no temporary files), and never get the prompt: a
prompt on a short fragment of a truncated sentence invites whisper to echo or continue it (hybrid.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from hasrd import transcript
from hasrd.languages import NAMES, UnknownLanguage, resolve
from hasrd.options import Options
from hasrd.transcript import TimedSentence
from hasrd.worker import resegment
from hasrd.worker.engine import EngineError
from hasrd.worker.textrules import RETRY_KW, clean_text, collapse_loops, looped, token_cap

SR = 16000
WINDOW_KW: dict[str, Any] = {"beam_size": 5, "vad_filter": False}
NO_SPEECH_PROB = 0.6  # whisper's rule: a segment this likely silent and this unsure is dropped
LOG_PROB_FLOOR = -1.0

if TYPE_CHECKING:
    from faster_whisper import WhisperModel
    from faster_whisper.transcribe import Segment


def whisper_code(model: WhisperModel, code: str) -> str | None:
    """The language code this model accepts ('' -> None = detect); Cantonese falls back to Chinese."""
    if not code:
        return None
    supported = set(model_codes(model))  # "yue" is the 100th: large-v3 has it, base does not
    if supported and code not in supported:
        if code == "yue" and "zh" in supported:
            return "zh"
        raise EngineError("invalid_audio", f"this faster-whisper model does not know {NAMES.get(code, code)} "
                                           f"({code!r})")
    return code


def window_fn(model: WhisperModel, code: str | None) -> Callable[[np.ndarray], str]:
    """v2c's final stage: one window -> its text (the seed's parameters), under whisper's text rules as every
    other decode: a token cap for its length (a 7 s window looped for 45.8 s of fallback decoding on the CPU),
    a window whose text loops decoded once more (:func:`unlooped`) and a loop that stays said once (issue 31 #12,
    38 #1)."""

    def transcribe_window(audio: np.ndarray) -> str:
        if len(audio) == 0:
            return ""

        def decode(**extra: int) -> str:
            segments, _info = model.transcribe(audio, language=code, max_new_tokens=token_cap(len(audio) / SR),
                                               **WINDOW_KW, **extra)
            return clean_text("".join(str(s.text) for s in segments))

        return collapse_loops(unlooped(decode))

    return transcribe_window


def unlooped(decode: Callable[..., str]) -> str:
    """``decode()``'s text, or where it loops (textrules.looped: faster-whisper's own fallback misses Chinese loops)
    a second decode that may not repeat any four tokens, when that one does not loop. A window too short to cut
    (the hybrid's sentences, a live utterance) gets this instead of the files' halves (mending.py)."""
    text = decode()
    if not looped(text):
        return text
    again = decode(**RETRY_KW)
    return again if not looped(again) else text


def is_no_speech(segment: Segment) -> bool:
    """Whisper's no-speech rule, which the batched pipeline and a live decode without VAD must apply themselves
    ("you" from the silence after the speech)."""
    return float(segment.no_speech_prob) > NO_SPEECH_PROB and float(segment.avg_logprob) < LOG_PROB_FLOOR


def prompt_of(options: Options) -> str | None:
    """The initial prompt a request asks for: ``prompt`` (the OpenAI field), else ``initial_prompt``."""
    return options.prompt or options.initial_prompt or None


def language_of(language: str) -> tuple[str, str]:
    try:
        return resolve(language)
    except UnknownLanguage as e:
        raise EngineError("invalid_audio", str(e)) from None


def model_codes(model: WhisperModel) -> list[str]:
    """The language codes this model can write (base lacks 'yue', large-v3 has it)."""
    codes = list(getattr(model, "supported_languages", []) or [])
    n = getattr(getattr(model, "model", None), "num_languages", None)
    if isinstance(n, int) and 0 < n < len(codes):
        codes = codes[:n]
    return codes


def timed_words(seg: Segment, offset: float, source: int) -> list[resegment.Word]:
    """A decoded segment's words on the file's clock; a segment without words becomes one word of its text."""
    if seg.words:
        return [resegment.Word(clean_text(str(w.word), strip=False), round(offset + float(w.start), 3),
                               round(offset + float(w.end), 3), float(w.probability), source) for w in seg.words]
    text = clean_text(str(seg.text), strip=False)
    return [resegment.Word(text, round(offset + float(seg.start), 3), round(offset + float(seg.end), 3), 1.0,
                           source)] if text.strip() else []


def sentence_entry(piece: resegment.Piece, text: str, sources: list[Any], tokenize: Callable[[str], list[int]],
                   want_words: bool) -> TimedSentence:
    """One ``per_sentence`` entry: the piece's text and times, the scores of the decoder segment most of its
    words came from, and its own text's tokens (a decoder segment may hold several sentences)."""
    counts: dict[int, int] = {}
    for w in piece.words:
        counts[w.source] = counts.get(w.source, 0) + 1
    main = sources[max(counts, key=lambda k: counts[k])]
    raw = "".join(w.text for w in piece.words)
    tokens = tokenize(raw if raw.strip() == text else " " + text)
    entry = TimedSentence(text=text, engine="fw", start_s=round(float(piece.start), 3),
                          end_s=round(float(piece.end), 3), avg_logprob=round(float(main.avg_logprob), 4),
                          no_speech_prob=round(float(main.no_speech_prob), 4),
                          compression_ratio=round(float(main.compression_ratio), 4),
                          temperature=float(main.temperature or 0.0), seek=int(round(piece.start * 100)),
                          tokens=[int(t) for t in tokens])
    if want_words:
        entry.words = [transcript.Word(w.text, round(float(w.start), 3), round(float(w.end), 3),
                                       round(float(w.probability), 4)) for w in piece.words]
    return entry

"""What whisper's raw text needs before anyone reads it, for files and live sessions alike (a leaf module): no
invisible characters, a decoding loop said once, and a cap on the tokens one short piece may produce."""

from __future__ import annotations

import re
import unicodedata
import zlib

TOKENS_PER_S = 16
MAX_CAP = 448 - 224 - 8
CAP_STEP = 32


def token_cap(seconds: float) -> int | None:
    """Tokens one decode of a short piece may produce: twice fast speech, so that noise VAD took for speech
    cannot loop a repetition up to the 448-token limit in each of the fallback passes (none from 27 s on)."""
    if seconds >= 27:
        return None
    # faster-whisper refuses prompt + max_new_tokens > 448 (the model's context); an initial prompt keeps at
    # most 223 tokens (half the context, less one) plus a few task tokens, so a cap must leave room for that
    # rounded up to a multiple of CAP_STEP: the cap is part of a decode step's key in the worker's decode loop
    # (ct2batch), so live sessions (and files' retried clips) at similar lengths share one model call
    return min(-(-int(TOKENS_PER_S * seconds + 16) // CAP_STEP) * CAP_STEP, MAX_CAP)


_INVISIBLE = {"\ufffd", "\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad"}


# a phrase of 2-30 characters said four or more times in a row, spaces or commas between them or not
_LOOP = re.compile(r"(\S.{1,29}?)(?:[\s,，、]*\1){3,}")
_STUTTER = re.compile(r"(\S)\1{7,}")  # one character eight or more times


def clean_text(text: str, strip: bool = True) -> str:
    """Text without replacement characters and zero-width or other invisible format characters."""
    out = "".join(ch for ch in text if ch not in _INVISIBLE and unicodedata.category(ch) != "Cf")
    return " ".join(out.split()) if strip else out


def collapse_loops(text: str) -> str:
    """A decoding loop said once: whisper repeats a phrase until its token limit when it loses the audio (on
    hard speech its own compression-ratio rule misses Chinese loops: 寫下範圍的 x5 compresses only 2.25 times).
    People do not say one phrase four times in a row, nor one character eight times."""
    return _STUTTER.sub(r"\1", _LOOP.sub(r"\1", text))


COMPRESSION_RATIO = 2.4  # whisper's rule: text that compresses more than this is a decoding loop
RETRY_KW: dict[str, int] = {"no_repeat_ngram_size": 4}  # a loop's second decode: no four tokens said twice
CJK_RUN = 24  # Chinese this long ...
CJK_DISTINCT = 1 / 3  # ... of fewer distinct characters than this is a loop of a few characters reshuffled


def compression_ratio(text: str) -> float:
    """faster-whisper's ``get_compression_ratio``: UTF-8 length over zlib-compressed length."""
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data)) if data else 0.0


def looped(text: str) -> bool:
    """Whether a decode's text is a loop, to be decoded again (files, the hybrid's windows, live): whisper's
    compression-ratio rule (which misses Chinese loops), a phrase said four times in a row even with spaces or
    commas between (:func:`collapse_loops` changes it), or 24 Chinese characters and more written with fewer than a
    third of them distinct ("妃妃王殿儿 两个小庙 妻妻妃妻妳妃妳妳妻妾..." where whisper base lost the audio; ordinary
    Chinese repeats far fewer)."""
    if not text.strip():
        return False
    if compression_ratio(text.strip()) > COMPRESSION_RATIO or collapse_loops(text) != text:
        return True
    han = [ch for ch in text if "\u4e00" <= ch <= "\u9fff"]
    return len(han) >= CJK_RUN and len(set(han)) < CJK_DISTINCT * len(han)

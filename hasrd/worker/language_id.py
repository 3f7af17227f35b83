"""Which language a file is in, when the request does not say: a vote over several windows of speech.

faster-whisper's own detection looks at the first 30 s of the input, silence and music included, and takes
one window's answer: on synthetic Mandarin after a pause whisper base says Thai. Here Silero VAD (bundled with
faster-whisper) first picks the speech out of the first minutes, then up to DETECT_WINDOWS windows of 30 s of
speech each give their language probabilities, which are summed; the language with the largest sum wins, and
its mean probability is reported. Only languages the model can write are counted.

Two windows that agree with at least SURE probability each settle the vote at once (the other windows could
not change it but by a freak): a clear English or German file starts decoding about two window detections
(1.5 s on a busy 2-core CPU) sooner. espeak Mandarin, the case the vote is for, never gets there (its windows say
Chinese 0.88 or Thai 0.7-0.85).

A favoured language wins a close race: Chinese, English and the desktop's locale language (LANG, LC_ALL,
LANGUAGE) take the vote when their summed probability is at least FAVOUR_RATIO of the winner's. Measured on
espeak-ng Mandarin (benchmarks/corpus.py), whisper base hears Thai in most 30 s windows (1-, 3- and 5-minute
files: Thai summed 1.54, 2.22, 1.75 against Chinese 0.03, 0.9, 0.75), so a plain vote said Thai on all three
and the first window alone on one in three; English and the other audioeval languages are not close races and
keep their answer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from faster_whisper import WhisperModel

    from hasrd.protocol import Phase
    from hasrd.worker.vad import Part

SR = 16000
SCAN_SEC = 600.0  # look for speech in the first ten minutes only (VAD costs time on a 4-hour file)
WINDOW_SEC = 30.0
DETECT_WINDOWS = 4
SCAN = int(SCAN_SEC * SR)
NEED = int(DETECT_WINDOWS * WINDOW_SEC * SR)  # samples of speech the vote wants
SURE = 0.95  # two windows agreeing at least this sure end the vote
FAVOURED = ("zh", "en")
FAVOUR_RATIO = 0.25


def locale_language(env: dict[str, str] | None = None) -> str:
    """The two-letter language of the desktop's locale ("" for C / POSIX)."""
    import os

    e = os.environ if env is None else env
    for key in ("LC_ALL", "LC_MESSAGES", "LANG", "LANGUAGE"):
        value = (e.get(key) or "").split(":")[0]
        code = value.split("_")[0].split(".")[0].lower()
        if code and code not in ("c", "posix"):
            return code
    return ""


def speech_of(pcm: np.ndarray, known: tuple[Sequence[tuple[int, int]], int] | None = None) -> np.ndarray:
    """The speech in the first SCAN_SEC of ``pcm``, concatenated (the whole scan when VAD hears none).

    ``known``: speech spans (samples) the caller's VAD already found in ``pcm[:covered]``, as (spans, covered).
    They are used instead of a VAD pass of our own when they hold enough speech for the vote or cover all there
    is to scan (the whisper engine's first pieces: Silero then runs once per sample of a file, not twice).
    """
    head = np.asarray(pcm[:SCAN], dtype=np.float32)
    need = NEED
    if known is not None:
        spans, covered = known
        speech = gather(head, spans, need)
        if len(speech) >= need or covered >= len(head):
            return speech if len(speech) else head[:need]
    from faster_whisper.vad import VadOptions, get_speech_timestamps

    found = get_speech_timestamps(head, VadOptions(min_silence_duration_ms=500))
    speech = gather(head, [(s["start"], s["end"]) for s in found], need)
    return speech if len(speech) else head[:need]


def gather(head: np.ndarray, spans: Sequence[tuple[int, int]], need: int) -> np.ndarray:
    """The spans' audio joined, up to ``need`` samples (empty when there are none)."""
    parts: list[np.ndarray] = []
    got = 0
    for a, b in spans:
        piece = head[a:b]
        if len(piece) == 0:
            continue
        parts.append(piece)
        got += len(piece)
        if got >= need:
            break
    return np.concatenate(parts)[:need] if parts else np.zeros(0, np.float32)


def vote(window_probs: list[list[tuple[str, float]]], allowed: set[str] | None = None,
         favoured: tuple[str, ...] = ()) -> tuple[str, float]:
    """(language, mean probability) with the largest probability summed over windows, a favoured language
    winning a close race (see the module docstring); pure."""
    totals: dict[str, float] = {}
    for probs in window_probs:
        for lang, p in probs:
            if allowed is None or lang in allowed:
                totals[lang] = totals.get(lang, 0.0) + float(p)
    if not totals:
        return "", 0.0
    best = max(totals, key=lambda k: totals[k])
    close = [f for f in favoured if f in totals and totals[f] >= FAVOUR_RATIO * totals[best]]
    if best not in favoured and close:
        best = max(close, key=lambda k: totals[k])
    return best, totals[best] / max(1, len(window_probs))


def settled(window_probs: list[list[tuple[str, float]]], allowed: set[str] | None = None) -> bool:
    """Whether the windows so far decide the vote: two or more, every one naming the same (allowed) language
    first with at least SURE (a dissenting earlier window could still win the favour rule); pure."""
    if len(window_probs) < 2:
        return False
    tops = []
    for probs in window_probs:
        kept = [(lang, p) for lang, p in probs if allowed is None or lang in allowed]
        if not kept:
            return False
        tops.append(max(kept, key=lambda lp: lp[1]))
    return len({lang for lang, _p in tops}) == 1 and min(p for _lang, p in tops) >= SURE


def detect(model: WhisperModel, pcm: np.ndarray, allowed: set[str] | None = None,
           cancelled: Callable[[], bool] = lambda: False,
           known: tuple[Sequence[tuple[int, int]], int] | None = None,
           beat: Callable[[], None] = lambda: None) -> tuple[str, float]:
    """The language of ``pcm`` for this WhisperModel: (code, probability); ("", 0.0) for no audio. ``known``:
    see :func:`speech_of`; ``beat`` is called before each window's detection (the job is alive)."""
    speech = speech_of(pcm, known)
    if len(speech) == 0:
        return "", 0.0
    step = int(WINDOW_SEC * SR)
    probs: list[list[tuple[str, float]]] = []
    for a in range(0, len(speech), step):
        piece = speech[a:a + step]
        if probs and len(piece) < 2 * SR:  # a short tail adds noise, not evidence
            break
        if cancelled():
            break
        beat()
        _lang, _p, all_probs = model.detect_language(audio=piece, language_detection_segments=1)
        probs.append([(str(lang), float(p)) for lang, p in all_probs])
        if settled(probs, allowed):
            break
    favoured = tuple(dict.fromkeys([*FAVOURED, locale_language()]))
    return vote(probs, allowed, tuple(f for f in favoured if f))


def of_pieces(model: WhisperModel, pcm: np.ndarray, parts: Iterator[Part], allowed: set[str],
              cancelled: Callable[[], bool], beat: Callable[[Phase], None]) -> tuple[str, float, list[Part]]:
    """The vote over a file's first pieces, VAD'd ahead of the decoder (vad.piece_spans): pieces are read from
    ``parts`` until they hold the speech the vote wants or pass SCAN -> (code, probability, the pieces read, which
    the caller decodes first). ``beat`` tells the job's phase while it runs."""
    ahead: list[Part] = []
    known: list[tuple[int, int]] = []
    covered = len(pcm)  # all of it, unless the vote has enough speech first
    for part in parts:
        ahead.append(part)
        beat("finding_speech")
        known += [(part[0] + int(round(a * SR)), part[0] + int(round(b * SR))) for a, b in part[2]]
        if sum(b - a for a, b in known) >= NEED or part[1] >= SCAN:
            covered = part[1]
            break
    beat("detecting_language")
    code, probability = detect(model, pcm, allowed, cancelled, known=(known, covered),
                               beat=lambda: beat("detecting_language"))
    return code, probability, ahead

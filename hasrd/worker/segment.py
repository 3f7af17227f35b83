"""Long audio: cut at silences into segments of at most ``max_sec``, in bounded memory.

Why: one R2T2 streaming state re-feeds its audio from the start on every chunk and holds only ~4-5 minutes at
max_model_len 4096; faster-whisper computes the mel spectrogram of its whole input at once. So long input is
cut into segments, each handled on its own with its offset.

How: walk the audio in blocks of ``max_sec``; run faster-whisper's bundled Silero VAD on the block only (a view
of the caller's array, which may be an mmap of a 4-hour memfd: never copied whole); cut in the middle of the
longest pause in the block's second half, or, in unbroken sound, at its quietest 160 ms chunk. Cuts fall on
the 160 ms chunk grid so that v2c's chunk indices stay global. Audio no longer than ``max_sec`` is one
segment and VAD is not run at all (short requests behave exactly as the seed).

The whisper engine cuts by :func:`quiet_pieces` instead, before any VAD runs (worker/vad.py says why).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

SR = 16000
CHUNK = 2560  # the v2c chunk (160 ms): segment starts are multiples of it
MIN_PAUSE_S = 0.3  # shorter pauses are not cut points

Spans = Sequence[tuple[int, int]]
VadFn = Callable[[np.ndarray], Spans]


@dataclass(frozen=True)
class Segment:
    start: int  # samples, a multiple of CHUNK
    end: int
    speech: bool  # False: VAD heard nothing in it (callers may skip it)


def silero_spans(block: np.ndarray) -> list[tuple[int, int]]:
    """Speech (start, end) sample spans of ``block`` from faster-whisper's Silero VAD (offline, CPU)."""
    from faster_whisper.vad import VadOptions, get_speech_timestamps

    opts = VadOptions(min_silence_duration_ms=int(MIN_PAUSE_S * 1000), speech_pad_ms=100)
    return [(int(s["start"]), int(s["end"])) for s in get_speech_timestamps(block, opts, sampling_rate=SR)]


def pauses(spans: Spans, length: int) -> list[tuple[int, int]]:
    """The silent stretches of a block of ``length`` samples, given its speech spans."""
    out: list[tuple[int, int]] = []
    prev = 0
    for s, e in sorted(spans):
        if s > prev:
            out.append((prev, s))
        prev = max(prev, e)
    if prev < length:
        out.append((prev, length))
    return out


def pick_cut(spans: Spans, length: int, min_len: int, align: int = CHUNK) -> int | None:
    """Where to end a segment inside a block: mid-point of the longest pause after ``min_len``; None if none.

    Pure: ``spans`` are speech spans relative to the block start. The cut is a multiple of ``align`` in
    (0, length]. Ties go to the later pause (longer segments, fewer draft resets).
    """
    best: tuple[int, int] | None = None
    for s, e in pauses(spans, length):
        if e - s < MIN_PAUSE_S * SR:
            continue
        mid = (s + e) // 2
        if mid < min_len:
            continue
        if best is None or (e - s, mid) >= best:
            best = (e - s, mid)
    if best is None:
        return None
    cut = int(round(best[1] / align)) * align
    if cut > length:
        cut -= align
    return cut if cut > 0 else None


def quietest_cut(block: np.ndarray, min_len: int, align: int = CHUNK) -> int:
    """Fallback in unbroken sound: the start of the quietest aligned chunk after ``min_len``."""
    first = -(-min_len // align)
    last = len(block) // align
    if last <= first:
        return max(align, (len(block) // align) * align)
    energy = [float(np.mean(np.square(block[k * align:(k + 1) * align], dtype=np.float64)))
              for k in range(first, last)]
    return (first + int(np.argmin(energy))) * align


def quiet_pieces(pcm: np.ndarray, max_sec: float, align: int = CHUNK) -> list[tuple[int, int]]:
    """``pcm`` as consecutive (start, end) pieces of at most ``max_sec``, each ending at the quietest aligned chunk
    of its block's second half (:func:`quietest_cut`); one piece when it is no longer. Pure and cheap (an energy
    per chunk), so the pieces are the same whatever runs when."""
    n = len(pcm)
    max_len = max(align, int(max_sec * SR) // align * align)
    out: list[tuple[int, int]] = []
    pos = 0
    while n - pos > max_len:
        cut = quietest_cut(pcm[pos:pos + max_len], max_len // 2, align)
        out.append((pos, pos + cut))
        pos += cut
    out.append((pos, n))
    return out


def has_speech(spans: Spans, start: int, end: int) -> bool:
    return any(s < end and e > start for s, e in spans)


def iter_segments(pcm: np.ndarray, max_sec: float, *, vad: VadFn | None = None) -> Iterator[Segment]:
    """Yield segments covering ``pcm`` in order; each at most ``max_sec`` long (and at least one chunk)."""
    n = len(pcm)
    max_len = max(CHUNK, int(max_sec * SR) // CHUNK * CHUNK)
    if n <= max_len:
        yield Segment(0, n, True)
        return
    vad = vad or silero_spans
    pos = 0
    while pos < n:
        block = pcm[pos:pos + max_len]
        spans = vad(block)
        if n - pos <= max_len:
            yield Segment(pos, n, has_speech(spans, 0, len(block)))
            return
        cut = pick_cut(spans, len(block), max_len // 2) or quietest_cut(block, max_len // 2)
        yield Segment(pos, pos + cut, has_speech(spans, 0, cut))
        pos += cut


def speech_ranges(segments: Iterable[Segment]) -> Iterator[tuple[int, int]]:
    """(start, end) of the segments with speech, lazily: what v2c and the whisper engine work on."""
    return ((s.start, s.end) for s in segments if s.speech)

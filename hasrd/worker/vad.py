"""Silero VAD for the whisper engine: once per sample of a file, its pieces side by side.

Why: on a GPU the decoder is fast and the CPU's VAD is hasr's bottleneck. Measured on the H200 host
(notes/gpu.md, benchmarks/gpu_real.py): Silero took 0.8 s of a 5-minute file's 1.7 s in the engine, and the file
had gone through it three times (the language vote's scan, the long-audio cut, then each piece's clips).

How: the file is cut into pieces before any VAD runs (segment.quiet_pieces), each VAD'd on its own, from a quiet
start, by a few threads side by side and ahead of the decoder (:func:`piece_spans`); the spans give the clips, the
silences the sentences are cut at, and the language vote's speech. ONNX Runtime lets go of the GIL while it runs,
and each piece's spans are the same whichever thread ran it when: the text does not depend on timing.
(More intra-op threads for one Silero run gained nothing past the machine's cores and lost beyond them: 60 s took
0.089 s with 1 thread, 0.085 s with 2, 0.192 s with 4 on a 2-core machine.)
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Generator, Iterable

import numpy as np

SR = 16000
CLIP_SEC = 30.0  # whisper's window: a clip of speech is at most this long
MIN_SILENCE = 0.5  # VadOptions(min_silence_duration_ms=500): two spans are apart only across this much silence
MAX_WORKERS = 8


def default_workers() -> int:
    """Threads that VAD pieces side by side: the CPUs this process may use, at most MAX_WORKERS."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        n = os.cpu_count() or 1
    return max(1, min(MAX_WORKERS, n))


Part = tuple[int, int, list[tuple[float, float]]]


def piece_spans(pcm: np.ndarray, pieces: Iterable[tuple[int, int]], workers: int) -> Generator[Part, None, None]:
    """(start, end, speech spans in seconds from the piece's start) for each piece, in order (a piece without
    speech has no spans: the caller still hears that it passed, issue 32 #1); the pieces are VAD'd by
    ``workers`` threads, up to twice that many ahead of the caller. Closing the generator (a cancelled request)
    drops the pieces not yet started."""
    from concurrent.futures import Future, ThreadPoolExecutor
    from faster_whisper.vad import get_vad_model

    get_vad_model()  # one session for every thread (its cache is not locked: build it before they start)
    pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="hasr-vad")
    pending: deque[tuple[tuple[int, int], Future[list[tuple[float, float]]]]] = deque()
    todo = iter(pieces)

    def submit() -> None:
        for piece in todo:
            pending.append((piece, pool.submit(speech_spans, pcm[piece[0]:piece[1]])))
            return

    try:
        for _ in range(2 * max(1, workers)):
            submit()
        while pending:
            (start, end), future = pending.popleft()
            submit()
            yield start, end, future.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def prime() -> None:
    """Build Silero's session and run it once (a worker's load does this beside the model's)."""
    speech_spans(np.zeros(SR, np.float32))


def speech_spans(audio: np.ndarray) -> list[tuple[float, float]]:
    """Silero VAD's speech spans (seconds; padded as faster-whisper pads them, so a gap between two is silence)."""
    from faster_whisper.vad import VadOptions, get_speech_timestamps

    spans = get_speech_timestamps(audio, VadOptions(min_silence_duration_ms=500, max_speech_duration_s=CLIP_SEC))
    return [(sp["start"] / SR, sp["end"] / SR) for sp in spans]


def silences(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The silences between VAD spans: the gap between two spans, centred where it is and never shorter than
    the VAD's minimum silence (padding makes spans touch across a pause of less than twice the pad, and the
    pads are not exact, so the gap is the one sure part)."""
    out = []
    for (_a0, a1), (b0, _b1) in zip(spans, spans[1:], strict=False):
        centre, half = (a1 + b0) / 2, max(MIN_SILENCE / 2, (b0 - a1) / 2)
        out.append((round(centre - half, 3), round(centre + half, 3)))
    return out


def merge_clips(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Speech as contiguous clips of at most 30 s: neighbouring VAD spans merged while they fit."""
    clips: list[list[float]] = []
    for s0, s1 in spans:
        if clips and s1 - clips[-1][0] <= CLIP_SEC:
            clips[-1][1] = s1
        else:
            clips.append([s0, s1])
    return [(c0, c1) for c0, c1 in clips]


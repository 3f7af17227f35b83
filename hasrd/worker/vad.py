"""Silero VAD for the whisper engine: run once per sample of a file, on more than one CPU thread.

Why: on a GPU the decoder is fast and the CPU's VAD is hasr's bottleneck. Measured on the H200 host (notes/gpu.md):
Silero took 0.6 s of a 5-minute file's 1.9 s, and the file went through it three times (the language vote's scan,
the long-audio cut, then each piece's clips). Now the segmenter's VAD of a block (segment.py) is kept with the
segment, and a piece's clips and the language vote are taken from it; a piece no one has VAD'd yet gets one pass.

Threads: faster-whisper builds its Silero session with one intra-op thread. :func:`use_threads` gives the cached
session more; ONNX Runtime then splits the encoder's convolutions over them, and the probabilities are the same to
the bit (measured: max difference 0.0 with 1 and 2 threads; 0.88 -> 0.61 s for 5 minutes on 2 cores). The VAD runs
between decoder calls of the same worker, never beside them, so the threads do not compete with the decoder.
"""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np

SR = 16000
CLIP_SEC = 30.0  # whisper's window: a clip of speech is at most this long
MIN_SILENCE = 0.5  # VadOptions(min_silence_duration_ms=500): two spans are apart only across this much silence
MAX_THREADS = 4


def default_threads() -> int:
    """The VAD's threads: the CPUs this process may use, at most MAX_THREADS (more gains little on 5 minutes)."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        n = os.cpu_count() or 1
    return max(1, min(MAX_THREADS, n))


def use_threads(n: int) -> int:
    """Give faster-whisper's cached Silero session ``n`` intra-op threads; returns the threads it now has (1 when
    this faster-whisper keeps its session elsewhere: the VAD still works, on one thread)."""
    from faster_whisper import vad as fw_vad

    model = fw_vad.get_vad_model()
    session = getattr(model, "session", None)
    if n <= 1 or session is None:
        return 1
    import onnxruntime

    opts = onnxruntime.SessionOptions()
    opts.inter_op_num_threads = 1
    opts.intra_op_num_threads = n
    opts.enable_cpu_mem_arena = False
    opts.log_severity_level = 4
    path = os.path.join(fw_vad.get_assets_path(), "silero_vad_v6.onnx")
    if not os.path.exists(path):
        return 1
    model.session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"], sess_options=opts)
    return n


def speech_spans(audio: np.ndarray) -> list[tuple[float, float]]:
    """Silero VAD's speech spans (seconds; padded as faster-whisper pads them, so a gap between two is silence)."""
    from faster_whisper.vad import VadOptions, get_speech_timestamps

    spans = get_speech_timestamps(audio, VadOptions(min_silence_duration_ms=500, max_speech_duration_s=CLIP_SEC))
    return [(sp["start"] / SR, sp["end"] / SR) for sp in spans]


def sample_spans(block: np.ndarray) -> list[tuple[int, int]]:
    """:func:`speech_spans` in samples: what segment.iter_segments cuts by, so that its VAD serves the clips too."""
    return [(int(round(a * SR)), int(round(b * SR))) for a, b in speech_spans(block)]


def seconds(spans: Sequence[tuple[int, int]], offset: int = 0) -> list[tuple[float, float]]:
    """Sample spans (relative to ``offset``) as seconds."""
    return [((offset + a) / SR, (offset + b) / SR) for a, b in spans]


def silences(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The silences between VAD spans: the gap between two spans, centred where it is and never shorter than
    the VAD's minimum silence (padding makes spans touch across a pause of less than twice the pad, and the
    pads are not exact, so the gap is the one sure part)."""
    out = []
    for (_a0, a1), (b0, _b1) in zip(spans, spans[1:]):
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


def speech_clips(audio: np.ndarray) -> list[tuple[float, float]]:
    """Speech as contiguous clips of at most 30 s (seconds)."""
    return merge_clips(speech_spans(audio))

"""Long audio is cut at silences into bounded segments on the 160 ms grid, without copying the input."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from speech import load

from hasrd.worker import segment

SR = 16000
CH = segment.CHUNK


def test_pick_cut_takes_the_middle_of_the_longest_pause_in_the_second_half() -> None:
    spans = [(0, 10 * SR), (11 * SR, 40 * SR), (42 * SR, 59 * SR)]  # pauses 10-11, 40-42, 59-60
    cut = segment.pick_cut(spans, 60 * SR, 30 * SR)
    assert cut is not None and cut % CH == 0 and abs(cut - 41 * SR) <= CH // 2
    # a pause before min_len does not count; a short one (< 0.3 s) neither
    assert segment.pick_cut([(0, 10 * SR), (11 * SR, 60 * SR)], 60 * SR, 30 * SR) is None
    assert segment.pick_cut([(0, 40 * SR), (40 * SR + 1000, 60 * SR)], 60 * SR, 30 * SR) is None
    # trailing silence at the end of the block is a pause too
    assert segment.pick_cut([(0, 50 * SR)], 60 * SR, 30 * SR) == round(55 * SR / CH) * CH


def test_the_quietest_chunk_is_the_fallback_in_unbroken_sound() -> None:
    block = np.ones(60 * SR, np.float32)
    block[300 * CH:301 * CH] = 0.01
    assert segment.quietest_cut(block, 30 * SR) == 300 * CH


def test_short_audio_is_one_segment_and_vad_is_not_run() -> None:
    def vad(block: np.ndarray) -> list[tuple[int, int]]:
        raise AssertionError("VAD must not run on short audio")

    segs = list(segment.iter_segments(np.zeros(60 * SR, np.float32), 60, vad=vad))
    assert segs == [segment.Segment(0, 60 * SR, True)]


def test_segments_cover_the_audio_in_order_on_the_chunk_grid_and_mark_silence() -> None:
    n = 200 * SR + 123
    speech = [(s * SR, (s + 20) * SR) for s in range(0, 200, 25)] + [(190 * SR, n)]

    def vad(block: np.ndarray) -> list[tuple[int, int]]:
        # the block is a view of the caller's array: find where it starts
        start = (block.__array_interface__["data"][0] - pcm.__array_interface__["data"][0]) // 4
        return [(max(s, start) - start, min(e, start + len(block)) - start) for s, e in speech
                if s < start + len(block) and e > start]

    pcm = np.zeros(n, np.float32)
    segs = list(segment.iter_segments(pcm, 60, vad=vad))
    assert segs[0].start == 0 and segs[-1].end == n
    for a, b in zip(segs, segs[1:], strict=False):
        assert a.end == b.start
    for s in segs:
        assert s.start % CH == 0 and 0 < s.end - s.start <= 60 * SR
        # cut in a pause
        assert s.end == n or any(e <= s.end <= st for (_, e), (st, _) in zip(speech, speech[1:], strict=False))
    assert all(s.speech for s in segs)
    silent = list(segment.iter_segments(np.zeros(130 * SR, np.float32), 60, vad=lambda b: []))
    assert [s.speech for s in silent] == [False] * len(silent) and list(segment.speech_ranges(silent)) == []


def test_real_vad_cuts_three_clips_apart_at_their_pauses() -> None:
    gap = np.zeros(int(1.5 * SR), np.float32)
    clips = [load("en_quick_brown_fox"), load("zh_pangrama"), load("en_espeak_park")]
    pcm = np.concatenate([clips[0], gap, clips[1], gap, clips[2]])
    starts = [0, len(clips[0]) + len(gap), len(clips[0]) + len(clips[1]) + 2 * len(gap)]
    segs = list(segment.iter_segments(pcm, 6.0))
    assert len(segs) == 3 and all(s.speech for s in segs)
    for s, st in zip(segs[1:], starts[1:], strict=True):
        assert st - len(gap) < s.start < st  # inside the pause before the clip


def test_ten_minutes_are_segmented_without_copying_the_input() -> None:
    clip = np.concatenate([load("en_espeak_park"), np.zeros(SR, np.float32)])
    pcm = np.tile(clip, int(600 * SR / len(clip)) + 1)[: 600 * SR]
    pcm.setflags(write=False)  # like the worker's mmap of the memfd
    tracemalloc.start()
    try:
        segs = list(segment.iter_segments(pcm, 60.0))
        _cur, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(segs) >= 10 and max(s.end - s.start for s in segs) <= 60 * SR
    assert peak < pcm.nbytes / 3, f"segmenting 10 min ({pcm.nbytes >> 20} MB) peaked at {peak >> 20} MB"


@pytest.mark.parametrize("max_sec", [0.1, 1.0])
def test_tiny_limits_still_make_progress(max_sec: float) -> None:
    segs = list(segment.iter_segments(np.random.default_rng(0).normal(0, 0.1, 5 * SR).astype(np.float32), max_sec))
    assert segs[-1].end == 5 * SR and all(s.end > s.start for s in segs)


def test_quiet_pieces_end_at_the_quietest_chunk_of_each_blocks_second_half() -> None:
    pcm = np.ones(150 * SR, np.float32)
    for quiet in (40, 85, 140):  # quiet chunks: the cuts go there, not at the block ends
        pcm[quiet * SR:quiet * SR + CH] = 0.01
    a, b, c = (q * SR // CH * CH for q in (40, 85, 140))
    assert segment.quiet_pieces(pcm, 60) == [(0, a), (a, b), (b, c), (c, 150 * SR)]
    assert segment.quiet_pieces(pcm[:60 * SR], 60) == [(0, 60 * SR)]  # short: one piece


def test_pieces_are_vad_d_side_by_side_in_order_and_a_close_drops_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading
    import time

    from hasrd.worker import vad

    threads: set[str] = set()
    started: list[int] = []

    def fake_spans(audio: np.ndarray) -> list[tuple[float, float]]:
        started.append(len(audio))
        threads.add(threading.current_thread().name)
        time.sleep(0.05 if len(audio) == SR else 0.0)  # the first piece is the slowest: order must still hold
        return [] if len(audio) == 3 * SR else [(0.0, len(audio) / SR)]

    monkeypatch.setattr(vad, "speech_spans", fake_spans)
    pcm = np.zeros(20 * SR, np.float32)
    pieces = [(0, SR), (SR, 3 * SR), (3 * SR, 6 * SR), (6 * SR, 10 * SR)]
    got = list(vad.piece_spans(pcm, pieces, 3))
    assert [(a, b) for a, b, _ in got] == pieces  # in order, the speechless one too (its progress is told)
    assert [bool(spans) for _a, _b, spans in got] == [True, True, False, True]
    assert all(t.startswith("hasr-vad") for t in threads)

    def boom(audio: np.ndarray) -> list[tuple[float, float]]:
        raise RuntimeError("VAD failed")

    monkeypatch.setattr(vad, "speech_spans", boom)
    with pytest.raises(RuntimeError, match="VAD failed"):
        list(vad.piece_spans(pcm, pieces, 2))
    monkeypatch.setattr(vad, "speech_spans", fake_spans)
    started.clear()
    many = [(k * SR, (k + 1) * SR) for k in range(100)]
    gen = vad.piece_spans(pcm, many, 2)
    next(gen)
    gen.close()  # a cancelled request: what was not started never runs
    assert len(started) <= 2 * 2 + 1

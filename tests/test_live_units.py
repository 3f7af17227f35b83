"""The live session's pure parts: local agreement, sentence cuts, the session audio and the streaming VAD."""

from __future__ import annotations

import numpy as np
from speech import load

from hasrd.worker.live import FRAME, Audio, StreamingVad
from hasrd.worker.live_whisper import Word, agreed, sentence_cut

SR = 16000


def words(*texts: str) -> list[Word]:
    return [Word(t, i * 1000, i * 1000 + 900) for i, t in enumerate(texts)]


def test_two_decodes_agree_on_their_common_words_whatever_the_case_and_punctuation() -> None:
    assert agreed(words(" The", " quick", " brown"), words(" the", " quick,", " fox")) == 2
    assert agreed(words(" The"), words(" A", " quick")) == 0
    assert agreed([], words(" The")) == 0


def test_a_sentence_is_cut_at_the_last_stable_word_that_ends_one() -> None:
    w = words(" It", " rains.", " We", " stay", " home.", " Then")
    assert sentence_cut(w, 6) == 5
    assert sentence_cut(w, 4) == 2  # "home." is not stable yet
    assert sentence_cut(w, 1) == 0


def test_the_session_audio_keeps_absolute_positions_after_trimming() -> None:
    a = Audio()
    a.append(np.arange(100_000, dtype=np.float32))
    a.trim(60_000)
    assert a.start == 60_000 and len(a) == 100_000
    assert a[60_000:60_003].tolist() == [60_000.0, 60_001.0, 60_002.0]
    assert a[0:10].size == 0  # forgotten
    a.append(np.full(10, -1.0, np.float32))
    assert a[99_999:100_002].tolist() == [99_999.0, -1.0, -1.0]


def test_the_streaming_vad_finds_each_utterance_however_the_audio_is_cut_into_pieces() -> None:
    gap = np.zeros(SR, np.float32)
    pcm = np.concatenate([gap, load("en_quick_brown_fox"), gap, load("en_hello_world"), gap])
    whole = StreamingVad("silero").feed(pcm)
    vad = StreamingVad("silero")
    pieces: list[tuple[str, int]] = []
    for i in range(0, len(pcm), 1234):  # pieces that are no multiple of Silero's window
        pieces += vad.feed(pcm[i:i + 1234])
    assert [k for k, _ in pieces] == [k for k, _ in whole]
    # the same scores as one pass, up to the rounding of ONNX's batch sizes: at most a window apart
    assert all(abs(a - b) <= FRAME for (_, a), (_, b) in zip(pieces, whole))
    assert [k for k, _ in whole] == ["start", "end", "start", "end"]
    assert all(at % FRAME == 0 for _, at in whole)
    assert abs(whole[0][1] - SR) < 0.3 * SR  # speech starts after the first second of silence


def test_the_energy_vad_needs_no_model() -> None:
    tone = (0.3 * np.sin(np.arange(SR) / 5)).astype(np.float32)
    events = StreamingVad("energy", silence_ms=300).feed(np.concatenate([np.zeros(SR, np.float32), tone,
                                                                         np.zeros(SR, np.float32)]))
    assert [k for k, _ in events] == ["start", "end"] and abs(events[0][1] - SR) <= FRAME

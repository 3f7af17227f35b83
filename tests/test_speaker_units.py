"""The speakers' pure parts on plain values: windows, clustering, the timeline, names, the channel gate, echoes,
the filterbank and the speaker model's checks (diarize.py, channels.py, speakermodel.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import speakernet

from hasrd.worker import channels, diarize
from hasrd.worker.speakermodel import BadSpeakerModel, SpeakerModel, check, fbank


def voices(counts: list[int], dim: int = 16, spread: float = 0.15, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Unit embeddings around len(counts) orthogonal centres (``counts`` windows each, interleaved in turns)."""
    rng = np.random.default_rng(seed)
    centres = np.eye(dim)[: len(counts)]
    truth = np.concatenate([[k] * c for k, c in enumerate(counts)])
    emb = centres[truth] + spread * rng.standard_normal((len(truth), dim))
    return emb / np.linalg.norm(emb, axis=1, keepdims=True), truth


def same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    return len({(x, y) for x, y in zip(a, b, strict=True)}) == len(set(a)) == len(set(b))


def test_windows_cover_each_region_to_its_end_and_skip_blips() -> None:
    wins = diarize.windows([(0.0, 4.0), (5.0, 5.2), (6.0, 7.0)])
    assert wins[0] == (0.0, 1.5) and (2.5, 4.0) in wins and (6.0, 7.0) in wins
    assert all(not (5.0 <= s < 5.2) for s, _ in wins)  # 0.2 s is no window
    assert all(e - s <= diarize.WIN + 1e-9 for s, e in wins)


@pytest.mark.parametrize("counts", [[20, 20], [15, 25, 10], [30, 8, 8, 8]])
def test_the_number_of_voices_is_estimated_and_every_window_clustered_right(counts: list[int]) -> None:
    emb, truth = voices(counts)
    labels = diarize.cluster(emb)
    assert same_partition(labels, truth)
    assert labels[0] == 0  # numbered in order of first window


def test_a_few_stray_windows_are_not_a_speaker_when_the_number_is_estimated() -> None:
    emb, _ = voices([40, 40])
    odd = np.zeros((1, emb.shape[1]))
    odd[0, -1] = 1.0  # one window unlike anybody (a cough)
    labels = diarize.cluster(np.vstack([emb, odd]))
    assert len(set(labels)) == 2


def test_a_number_asked_is_given_and_more_than_the_audio_holds_is_refused() -> None:
    emb, truth = voices([20, 20, 20])
    assert same_partition(diarize.cluster(emb, 3), truth)
    assert len(set(diarize.cluster(emb, 2))) == 2
    with pytest.raises(diarize.TooManySpeakers, match="seems to hold 3 voices"):
        diarize.cluster(emb, 4)
    with pytest.raises(diarize.TooManySpeakers, match="speech enough for 2"):
        diarize.cluster(emb[:2], 3)
    assert len(diarize.cluster(emb[:0])) == 0


def test_the_timeline_gives_each_moment_the_nearest_windows_voice_and_words_their_majority() -> None:
    wins = [(0.0, 1.5), (0.75, 2.25), (3.0, 4.5)]
    tl = diarize.Timeline.of(wins, np.array([0, 0, 1]), 5.0)
    assert tl.who(0.2, 0.6) == 0 and tl.who(3.2, 4.0) == 1
    assert tl.who(2.5, 2.9) in (0, 1)  # a gap: the nearest voice heard
    assert tl.who(2.0, 3.6) == 1  # most of the span is the second voice's
    assert diarize.Timeline.of([], np.zeros(0, dtype=int), 2.0).who(0.0, 1.0) == -1


def test_names_come_from_the_request_then_letters_never_twice() -> None:
    assert diarize.names(3, []) == ["A", "B", "C"]
    assert diarize.names(3, ["Ann"]) == ["Ann", "A", "B"]
    assert diarize.names(2, ["B", "Ann", "Cy"]) == ["B", "Ann"]
    assert diarize.names(3, ["B"]) == ["B", "A", "C"]


def stereo(levels: list[tuple[float, float]], block: float = 0.5) -> np.ndarray:
    """A tone per stretch of ``block`` seconds at the (left, right) amplitudes given."""
    n = int(block * 16000)
    t = np.arange(n) / 16000
    parts = [np.stack([a * np.sin(2 * np.pi * 200 * t), b * np.sin(2 * np.pi * 300 * t)], axis=1)
             for a, b in levels]
    return np.concatenate(parts).astype(np.float32)


def test_bleed_is_gated_off_the_quiet_channel_and_overlap_kept_on_both() -> None:
    pcm = stereo([(0.5, 0.05), (0.0, 0.0), (0.05, 0.5), (0.0, 0.0), (0.5, 0.4)])
    left, right = channels.gated(pcm)
    half, edge = 8000, 3500  # a block of 0.5 s; the gate holds 0.2 s and fades 10 ms around what it keeps
    assert np.abs(left[:half]).max() > 0.4 and np.abs(right[:half - edge]).max() == 0  # bleed gone
    assert np.abs(right[2 * half:3 * half]).max() > 0.4 and np.abs(left[2 * half + edge:3 * half - edge]).max() == 0
    assert np.abs(left[4 * half:]).max() > 0.4 and np.abs(right[4 * half:]).max() > 0.3  # both talk: both kept
    assert len(left) == len(pcm)


def test_the_gate_fades_instead_of_clicking() -> None:
    pcm = stereo([(0.5, 0.0), (0.0, 0.5)], block=1.0)
    left, _ = channels.gated(pcm)
    edge = np.abs(np.diff(left[16000:20000]))
    assert edge.max() < 0.1


def test_an_echo_of_a_sentence_stays_only_on_the_loudest_channel() -> None:
    pcm = stereo([(0.5, 0.1), (0.1, 0.5)], block=2.0)
    said = [channels.Said(0, 0.0, 2.0, "Hello there, how are you?"),
            channels.Said(1, 0.1, 1.9, "hello there how are you"),
            channels.Said(1, 2.0, 4.0, "Fine, thanks."), channels.Said(0, 2.0, 4.0, "Something else entirely.")]
    kept = channels.drop_echoes(said, pcm)
    assert [s.channel for s in kept] == [0, 1, 0] and kept[1].text == "Fine, thanks."


def test_fbank_has_kaldis_shape_and_takes_the_mean_out() -> None:
    pcm = np.sin(2 * np.pi * 440 * np.arange(16000) / 16000).astype(np.float32) * 0.3
    f = fbank(pcm)
    assert f.shape == (98, 80) and f.dtype == np.float32
    assert np.allclose(f.mean(axis=0), 0, atol=1e-4)
    assert fbank(pcm[:300]).shape == (0, 80)


def test_the_speaker_model_check_names_what_is_wrong(tmp_path: Path) -> None:
    good = speakernet.build(tmp_path / "good.onnx")
    assert check(str(good)) == len(speakernet.F0S)
    (tmp_path / "text.onnx").write_text("hello")
    cases = {tmp_path / "text.onnx": "not an ONNX model", tmp_path / "none.onnx": "is not a file",
             speakernet.build(tmp_path / "f40.onnx", feat_dim=40): "takes 40 features",
             speakernet.build(tmp_path / "frames.onnx", per_frame=True): "one vector"}
    for path, words in cases.items():
        with pytest.raises(BadSpeakerModel, match=words):
            check(str(path))


def test_embeddings_are_unit_vectors_whatever_the_window_lengths(tmp_path: Path) -> None:
    model = SpeakerModel(str(speakernet.build(tmp_path / "m.onnx")))
    rng = np.random.default_rng(1)
    wins = [rng.standard_normal(n).astype(np.float32) * 0.1 for n in (24000, 8000, 24000, 100)]
    emb = model.embed(wins)
    assert emb.shape == (4, model.dim)
    assert np.allclose(np.linalg.norm(emb[:3], axis=1), 1.0, atol=1e-5)
    assert np.allclose(emb[3], 0)  # too short for one frame: no voice


def test_a_change_of_voice_moves_to_the_widest_pause_near_it() -> None:
    # words of 0.3 s; a 0.3 s pause before word 4 (a turn); the windows put the change one word late, then early
    starts = [0.0, 0.35, 0.7, 1.05, 1.65, 2.0, 2.35]
    ends = [s + 0.3 for s in starts]
    assert diarize.settle(starts, ends, [0, 0, 0, 0, 0, 1, 1]) == [0, 0, 0, 0, 1, 1, 1]
    assert diarize.settle(starts, ends, [0, 0, 0, 1, 1, 1, 1]) == [0, 0, 0, 0, 1, 1, 1]
    assert diarize.settle(starts, ends, [0, 0, 0, 0, 1, 1, 1]) == [0, 0, 0, 0, 1, 1, 1]  # already at the pause
    far = [0.0, 0.35, 0.7, 1.05, 1.4, 1.75, 2.1, 2.45, 3.05]  # the only pause is 1.4 s past the change: out of reach
    assert diarize.settle(far, [s + 0.3 for s in far], [0, 0, 0, 0, 1, 1, 1, 1, 1]) == [0, 0, 0, 0, 1, 1, 1, 1, 1]


def test_windows_across_turn_changes_make_no_voice_of_their_own() -> None:
    emb, _ = voices([20, 20], spread=0.05)
    blend = emb[0] + emb[-1] + 2 * np.eye(emb.shape[1])[-1]  # two voices at once sound like neither (nor like silence)
    mixed = blend / np.linalg.norm(blend)
    seq: list[np.ndarray] = []
    for turn in range(4):  # a turn of 10 windows of one voice, then the 2 windows (1.5 s every 0.75 s) across a change
        first = (turn // 2) * 10 + (0 if turn % 2 == 0 else 20)
        seq += list(emb[first:first + 10]) + ([mixed] * 2 if turn < 3 else [])
    centres = np.arange(len(seq)) * diarize.HOP
    assert len(set(diarize.cluster(np.array(seq)))) == 3  # by sound alone they are a third voice...
    assert len(set(diarize.cluster(np.array(seq), None, centres))) == 2  # ...but nowhere do they hold the floor


def test_a_speaker_named_twice_is_refused_before_any_work() -> None:
    from hasrd.errors import InvalidOption
    from hasrd.options import parse

    assert parse({"speakers": 2, "speaker_names": ["Ann", "Bob"]}).speaker_names == ["Ann", "Bob"]
    with pytest.raises(InvalidOption, match="names a speaker twice"):
        parse({"speakers": 2, "speaker_names": ["Ann", "Ann"]})

"""The whisper engine's clips (hasrd/worker/engines/clips.py): speech packed into windows with its long pauses
shortened, and the decoded times put back on the file's clock. The engine tests run real faster-whisper with the
embedded model on 16-bit files (as a daemon reads them) and compare with the same engine whose clips keep every
pause (KEEP_SEC = MAX_GAP_SEC: main's clips), on this machine: int8 kernels differ between instruction sets."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from speech import CLIPS, SR, error_rate, load, model_dir

from hasrd import config
from hasrd.subtitles import is_cjk_text
from hasrd.transcript import to_json
from hasrd.worker import vad
from hasrd.worker.engine import NullEmitter
from hasrd.worker.engines import clips
from hasrd.worker.engines.clips import Clip
from hasrd.worker.engines.whisper import WhisperEngine


def test_a_clip_keeps_short_pauses_shortens_long_ones_and_maps_times_back() -> None:
    clip = Clip((1.0, 2.0))
    clip.add((2.2, 3.0))  # a 0.2 s pause: kept whole, one stretch of the file
    assert clip.parts == [(SR, 3 * SR)] and clip.size == 2 * SR
    clip.add((4.0, 5.0))  # a 1 s pause: 0.3 s of it stays, its middle 0.7 s is left out
    assert clip.parts == [(SR, int(3.15 * SR)), (int(3.85 * SR), 5 * SR)] and clip.size == int(3.3 * SR)
    assert (clip.start, clip.end) == (1.0, 5.0)
    pcm = np.arange(6 * SR, dtype=np.float32)
    audio = clip.audio(pcm)
    assert len(audio) == clip.size and audio[int(2.15 * SR)] == int(3.85 * SR)
    assert [clip.to_file(t) for t in (0.0, 1.0, 2.5)] == [1.0, 2.0, 4.2]
    assert clip.to_file(2.15) == 3.85 and clip.to_file(2.15, end=True) == 3.15  # the seam: a start after, an end before
    assert clip.to_file(3.3, end=True) == 5.0
    # a window holds 30 s of the clip's audio, not of the file: 20 s + 0.3 s + 9.5 s fits where 31 s of file lie
    assert Clip((0.0, 20.0)).fits((21.5, 31.0)) and not Clip((0.0, 20.0)).fits((21.5, 31.3))
    long = Clip((0.0, 1.0))
    long.add((3.5, 4.0))  # a pause longer than MAX_GAP_SEC stays whole, as in the clips before packing
    assert long.parts == [(0, 4 * SR)] and long.size == 4 * SR
    assert not Clip((0.0, 1.0)).fits((29.5, 30.5))  # 30.5 s of audio


def pcm16(pieces: list[np.ndarray], pause: float) -> np.ndarray:
    """The pieces joined by ``pause`` seconds of silence, through 16 bits as a WAV file holds them."""
    gap = np.zeros(int(pause * SR), np.float32)
    pcm = np.concatenate([x for p in pieces for x in (p, gap)][:-1])
    return (np.clip(pcm, -1, 1) * 32767).astype("<i2").astype(np.float32) / 32768


@pytest.fixture(scope="module")
def whisper() -> WhisperEngine:
    e = WhisperEngine(config.load(env={}), model_dir(), "cpu", "int8")
    e.load(lambda s: None)
    return e


def both(e: WhisperEngine, pcm: np.ndarray, lang: str, monkeypatch: pytest.MonkeyPatch
         ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The sentences with packed clips, and with clips that keep every pause (word times on)."""

    def run() -> list[dict[str, Any]]:
        r = to_json(e.transcribe(pcm, lang, {"word_timestamps": True}, NullEmitter(), lambda: False))
        return list(r["per_sentence"])

    packed = run()
    with monkeypatch.context() as m:
        m.setattr(clips, "KEEP_SEC", clips.MAX_GAP_SEC)
        whole = run()
    return packed, whole


def shortened(pcm: np.ndarray) -> float:
    """Seconds of silence the file's one clip leaves out."""
    spans = vad.speech_spans(pcm)
    clip = Clip(spans[0])
    for span in spans[1:]:
        assert clip.fits(span)
        clip.add(span)
    return (round(clip.end * SR) - round(clip.start * SR) - clip.size) / SR


def test_english_with_a_long_pause_left_out_keeps_its_text_and_its_times(whisper: WhisperEngine,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    fox, park = load("en_quick_brown_fox"), load("en_espeak_park")
    pcm = pcm16([fox, park], 1.9)
    assert shortened(pcm) >= 0.6  # the clip is really packed: without its times mapped back they would be off
    packed, whole = both(whisper, pcm, "en", monkeypatch)
    # not the same text: whisper base hears the park's "nice" packed and "ice" with the whole pause (measured),
    # as any change of a window's audio may move a word where it hesitates; the same sentences, no worse
    assert len(packed) == len(whole) == 3, (packed, whole)
    ref = " ".join(CLIPS[n][1] for n in ("en_quick_brown_fox", "en_espeak_park"))
    assert error_rate("en", ref, " ".join(s["text"] for s in packed)) <= error_rate(
        "en", ref, " ".join(s["text"] for s in whole)) + 0.05
    park_at = (len(fox) + int(1.9 * SR)) / SR
    spans = [(0.0, len(fox) / SR), (park_at, park_at + len(park) / SR)]
    for p, w in zip(packed, whole, strict=True):
        assert abs(p["start_s"] - w["start_s"]) <= 0.2 and abs(p["end_s"] - w["end_s"]) <= 0.2, (p, w)
        inside = [s for s in spans if s[0] - 0.3 <= p["start_s"] < p["end_s"] <= s[1] + 0.3]
        assert inside, (p, spans)
        assert all(inside[0][0] - 0.3 <= x["start"] <= x["end"] <= inside[0][1] + 0.3 for x in p["words"]), p
    assert packed[-1]["start_s"] >= park_at - 0.3  # the park, on the file's clock


def test_ordinary_pauses_stay_whole_so_the_text_is_the_same(whisper: WhisperEngine,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Three English clips with 0.8 s pauses (tests/test_transcripts.py's shape): the silences between their VAD
    spans are shorter than KEEP_SEC, so the clip is main's and so is every word and time."""
    pcm = pcm16([load(n) for n in ("en_hello_world", "en_quick_brown_fox", "en_espeak_park")], 0.8)
    assert shortened(pcm) == 0.0
    packed, whole = both(whisper, pcm, "en", monkeypatch)
    assert packed == whole


def test_chinese_keeps_every_pause_and_its_first_clip_whole_where_english_is_packed(
        whisper: WhisperEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 38: packing was the first bad commit of the Mandarin regression (436753b): languages written without
    spaces keep every pause, and a long file's first clip whole (clips.packs), so their text is the text of clips
    that keep every pause, word for word; English with the same pauses is packed."""
    from hasrd.worker.engines import whisper as wmod

    assert not clips.packs("zh") and not clips.packs("ja") and clips.packs("en") and clips.packs(None)
    names = ["zh_jishu", "zh_nihao_shijie", "zh_pangrama"]
    pcm = pcm16([load(n) for n in names], 1.5)
    seen: list[Clip] = []
    decode = whisper._decode

    def tee(pcm: Any, code: Any, options: Any, stream: Any, track: Any) -> Any:
        def each() -> Any:
            for c in stream:
                if isinstance(c, Clip):
                    seen.append(c)
                yield c
        return decode(pcm, code, options, each(), track)

    monkeypatch.setattr(whisper, "_decode", tee)
    packed, whole = both(whisper, pcm, "zh", monkeypatch)
    assert packed == whole and len(packed) == 3 and all(is_cjk_text(s["text"]) for s in packed), packed
    assert seen and not any(c.packed for c in seen)
    assert all(c.size == round(c.end * SR) - round(c.start * SR) for c in seen)  # nothing left out
    seen.clear()
    english = pcm16([load(n) for n in ("en_quick_brown_fox", "en_espeak_park")], 1.5)
    whisper.transcribe(english, "en", {}, NullEmitter(), lambda: False)
    assert seen and all(c.packed for c in seen) and seen[0].size < round(seen[0].end * SR) - round(seen[0].start * SR)
    long = np.concatenate([pcm] * 6)  # over a minute: Chinese keeps its first clip whole too
    assert len(long) > wmod.SHORT_FIRST_AFTER * SR
    seen.clear()
    whisper.transcribe(long, "zh", {}, NullEmitter(), lambda: False)
    assert seen[0].end - seen[0].start > wmod.FIRST_CLIP_SEC, [(c.start, c.end) for c in seen]

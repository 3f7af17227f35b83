"""Mending a whisper clip whose decode looped or skipped speech (hasrd/worker/engines/mending.py, the whisper
engine's ``_mended``): the symptoms and the cut as pure functions, then the engine's recursion over a decoder
that misbehaves on request (it skips the first span of any clip longer than one span, or loops on one)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from hasrd import config
from hasrd.worker.engines import mending
from hasrd.worker.engines.clips import Clip
from hasrd.worker.engines.whisper import WhisperEngine, quietest
from hasrd.worker.textrules import collapse_loops, looped


def test_loops_are_told_by_compression_by_a_phrase_said_again_with_spaces_between_and_by_few_chinese_characters(
        ) -> None:
    assert looped("殿下殿下殿下 殿下 殿下 殿下")  # issue 38's mp4: the phrase again and again, spaces between
    assert looped("太多祝福,太多祝福,太多祝福,太多祝福")
    # a few characters reshuffled: a 3-minute file's retried clip at 0bb1bfc (its compression ratio 1.70)
    assert looped("妃妃王殿儿 两个小庙 妻妻妃妻妳妃妳妳妻妾妃妾妾妳妾妻妒妒妃妒妳妒妖妒妾妒妓妒妝"
                  "妒妅妒妇妒妻妓妓妖妖妓妳妓妝妓妘妒")
    assert looped("the same words " * 20)  # whisper's own rule: compresses more than 2.4 times
    for fine in ("我每天早上七点起床，然后去跑步。这家饭店的菜非常好吃，价格也不贵。奶奶喜欢在院子里种花。",
                 "The weather is nice today, so we are going for a walk in the park.", "yes yes yes", "谢谢谢谢", ""):
        assert not looped(fine), fine
    assert collapse_loops("殿下殿下殿下 殿下 殿下") == "殿下"


def test_a_span_of_speech_without_words_is_a_gap_also_where_the_whole_clip_got_none() -> None:
    spans = [(0.0, 3.0), (4.0, 9.0), (10.0, 14.0)]
    skipped_first = [(4.1, 4.6), (5.0, 8.8), (10.2, 13.5)]
    assert mending.uncovered(spans, skipped_first) == pytest.approx([3.0, 0.7, 0.7])
    assert mending.symptom("我每天早上七点起床", spans, skipped_first) == "gap"
    assert mending.symptom("我每天早上七点起床", spans, [(0.2, 2.9)] + skipped_first) is None
    # whisper base's no-speech rule dropped whole clips of Mandarin that Silero heard as speech
    assert mending.symptom("", spans, []) == "gap"
    assert mending.symptom("hi", [(0.0, 0.8), (1.0, 5.0)], [(1.0, 4.9)]) is None  # shorter than GAP_SEC
    assert mending.symptom("殿下" * 30, spans, [(0.0, 14.0)]) == "loop"


def test_a_clip_is_cut_where_the_speech_on_both_sides_is_even_and_one_span_at_its_quietest_moment() -> None:
    spans = [(0.0, 5.0), (6.0, 7.0), (8.0, 9.0), (10.0, 15.0)]
    assert mending.halves(spans, lambda a, b: 0.0) == ([(0.0, 5.0), (6.0, 7.0)], [(8.0, 9.0), (10.0, 15.0)])
    assert mending.halves([(0.0, 9.0)], lambda a, b: 4.2) == ([(0.0, 4.2)], [(4.2, 9.0)])
    assert mending.halves([(0.0, 9.0)], lambda a, b: 0.5) == ([(0.0, 2.0)], [(2.0, 9.0)])  # each keeps 2 s
    assert mending.halves([(0.0, 3.9)], lambda a, b: 2.0) is None  # too short to cut
    pcm = np.ones(16000 * 10, np.float32)
    pcm[int(6.3 * 16000):int(6.4 * 16000)] = 0.0
    assert quietest(pcm, 3.0, 7.0) == pytest.approx(6.35)


@dataclass
class Seg:
    text: str
    start: float
    end: float
    words: list[Any] = field(default_factory=list)


@dataclass
class W:
    word: str
    start: float
    end: float


class Decoder:
    """Decodes a clip as one segment with a word per span, named by its start ("s4.0"); on request it skips the
    first span of clips of several spans (whisper starting late in a window) or loops on single spans."""

    def __init__(self, skip: bool = False, loop_at: float | None = None) -> None:
        self.skip, self.loop_at = skip, loop_at
        self.calls: list[tuple[list[tuple[float, float]], dict[str, Any]]] = []

    def __call__(self, parts: list[Clip], **extra: Any) -> list[list[Any]]:
        out = []
        for clip in parts:
            self.calls.append((list(clip.spans), extra))
            spans = clip.spans[1:] if self.skip and len(clip.spans) > 1 else clip.spans
            if self.loop_at is not None and clip.spans[0][0] == self.loop_at and not extra:
                out.append([Seg("殿下" * 40, clip.spans[0][0], clip.spans[-1][1],
                                [W("殿下", clip.spans[0][0], clip.spans[-1][1])])])
                continue
            words = [W(f"s{a:.1f} ", a, b) for a, b in spans]
            out.append([Seg("".join(w.word for w in words), spans[0][0], spans[-1][1], words)])
        return out


def engine() -> WhisperEngine:
    return WhisperEngine(config.load(env={}), "", "cpu", "int8")


def text(moved: list[Any]) -> str:
    return "".join(m.text for m in moved)


def test_a_clip_that_skipped_its_first_span_is_decoded_again_in_halves_until_every_span_has_words() -> None:
    spans = [(0.0, 3.0), (4.0, 7.0), (8.0, 11.0), (12.0, 15.0)]
    clip = Clip.of(spans, packed=False)
    pcm = np.zeros(16 * 16000, np.float32)
    decode = Decoder(skip=True)
    moved = engine()._mended(pcm, clip, decode([clip])[0], decode)
    # every span was heard by some decode: the halves, and their halves, until a part is one span
    assert text(moved) == "s0.0 s4.0 s8.0 s12.0 "
    assert [c[0] for c in decode.calls] == [spans, spans[:2], spans[2:], spans[:1], spans[1:2], spans[2:3],
                                            spans[3:]]
    assert all(not extra for _spans, extra in decode.calls)  # no sampling, no other settings: the same text again


def test_a_part_that_loops_and_cannot_be_cut_gets_one_decode_that_may_not_repeat_and_a_good_clip_none() -> None:
    pcm = np.zeros(16 * 16000, np.float32)
    clip = Clip.of([(0.0, 3.0), (4.0, 7.0)], packed=False)
    decode = Decoder(loop_at=4.0)
    first = [[Seg("殿下" * 40, 0.0, 7.0, [W("殿下", 0.0, 7.0)])]]  # the whole clip looped
    moved = engine()._mended(pcm, clip, first[0], decode)
    assert text(moved) == "s0.0 s4.0 "
    assert decode.calls[-1] == ([(4.0, 7.0)], {"no_repeat_ngram_size": 4})
    fine = Decoder()
    good = fine([clip])[0]
    assert engine()._mended(pcm, clip, good, fine) is good and len(fine.calls) == 1


class Looping:
    """faster-whisper's ``transcribe`` that loops "殿下" until asked not to repeat four tokens (whisper base on
    Mandarin: issue 38's mp4), then says "殿下好"; every call's extra settings are recorded."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def transcribe(self, audio: np.ndarray, **kw: Any) -> tuple[Any, Any]:
        self.calls.append({k: v for k, v in kw.items() if k == "no_repeat_ngram_size"})
        said = ["殿下", "好"] if kw.get("no_repeat_ngram_size") else ["殿下"] * 12
        n = len(audio) / 16000
        words = [W(t, k * n / len(said), (k + 1) * n / len(said)) for k, t in enumerate(said)]
        seg = Seg("".join(said), 0.0, n, words)
        seg.no_speech_prob, seg.avg_logprob = 0.01, -0.2  # type: ignore[attr-defined]
        return iter([seg]), type("Info", (), {"language": "zh"})()


def test_a_hybrid_window_that_loops_is_decoded_once_more_without_repeats() -> None:
    from hasrd.worker.engines.fwterms import window_fn

    model = Looping()
    assert window_fn(model, "zh")(np.zeros(16000 * 3, np.float32)) == "殿下好"
    assert model.calls == [{}, {"no_repeat_ngram_size": 4}]


def test_a_live_decode_that_loops_is_decoded_once_more_without_repeats() -> None:
    from test_live_units import Events, quiet, tone

    from hasrd.worker.live_whisper import WhisperLive

    model = Looping()
    ev = Events()
    live = WhisperLive(model, "zh", "transcribe", None, ev, lambda: False, {"vad": "energy"})
    pcm = np.concatenate([quiet(1.0), tone(3.0), quiet(1.5)])
    for i in range(0, len(pcm), 2560):
        live.feed(pcm[i:i + 2560])
    live.finish()
    assert ev.sentences == ["殿下好"] and {"no_repeat_ngram_size": 4} in model.calls
    assert all(extra == {} for extra in model.calls[::2])  # each loop's first decode is the usual one

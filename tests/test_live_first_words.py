"""A live session's first words come as fast as the rest (issue 21 #8).

Measured in fresh processes with the embedded whisper base on two cores: the first faster-whisper decode pays
little one-off cost (0.05-0.2 s over the second; Silero's first load and run 0.03 s), less than a warm-up
decode that removes it costs (0.6-0.8 s, on the path of the first request or session). What made the first
words slow: the first utterance of a session, met by an idle worker, was decoded once on its onset alone (0.1 s
past the VAD's onset: no word yet, most of a second spent), and without a language that first decode encoded
the audio twice (once to detect the language). These pin the two fixes: the first decode waits until the
speech can hold a word, and the detection's encoding is the decode's (:class:`OneEncoding`).
"""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from speech import SR, load, model_dir
from test_live_units import Events

from hasrd.worker.live_whisper import FIRST_S, OneEncoding, WhisperLive
from hasrd.transcript import to_json


class Word:
    def __init__(self, word: str, start: float, end: float) -> None:
        self.word, self.start, self.end, self.probability = word, start, end, 0.9


class HearsLikeWhisper:
    """A fake faster-whisper that, like whisper base, hears a word only in 0.25 s of speech or more (here: of
    the tone), and records how much speech each decode had."""

    def __init__(self) -> None:
        self.speech: list[float] = []

    def transcribe(self, audio: np.ndarray, **kw: Any) -> tuple[Any, Any]:
        loud = np.flatnonzero(np.abs(audio) > 0.01)
        speech = (loud[-1] - loud[0]) / SR if len(loud) else 0.0
        self.speech.append(speech)
        n = int(speech / 0.25)
        words = [Word(" word", 0.1 * i, 0.1 * i + 0.1) for i in range(n)]
        seg = SimpleNamespace(words=words, no_speech_prob=0.01, avg_logprob=-0.2)
        return iter([seg] if words else []), SimpleNamespace(language="en")


def tone(seconds: float) -> np.ndarray:
    return (0.3 * np.sin(np.arange(int(seconds * SR)) / 5)).astype(np.float32)


def test_an_utterances_first_decode_waits_until_the_speech_can_hold_a_word() -> None:
    model = HearsLikeWhisper()
    ev = Events()
    live = WhisperLive(model, "en", "transcribe", None, ev, lambda: False, {"vad": "energy"})
    pcm = np.concatenate([np.zeros(SR, np.float32), tone(2.0), np.zeros(SR, np.float32)])
    for i in range(0, len(pcm), 1024):  # 64 ms pieces into an idle worker: every step is due on time
        live.feed(pcm[i:i + 1024])
        if any(ev.drafts):
            break
    assert model.speech[0] >= FIRST_S - 0.07  # not the onset alone (it was 0.1 s)
    assert ev.drafts[0] != "" and len(model.speech) == 1  # so the first decode already shows words


def test_the_detections_encoding_is_served_once_to_an_input_one_frame_apart() -> None:
    calls: list[np.ndarray] = []

    def encode(features: np.ndarray) -> str:
        calls.append(features)
        return f"encoded {len(calls)}"

    a = np.random.default_rng(1).standard_normal((80, 3000)).astype(np.float32)
    last = a.copy()
    last[:, 120] = -1.0  # the decode's input: the audio's last frame zero-padded away
    memo = OneEncoding(encode)
    assert memo(a) == "encoded 1" and memo(last) == "encoded 1" and memo(last) == "encoded 2"
    assert memo.reused == 1

    two = a.copy()
    two[:, 5:7] = 0.0
    for other in (two, a[:, :2999], a[None]):  # two frames apart, another shape: encoded as usual
        memo = OneEncoding(encode)
        memo(a)
        assert memo(other) != "encoded 1" and memo.reused == 0


@pytest.fixture(scope="module")
def whisper() -> Iterator[Any]:
    from hasrd import models
    from hasrd.worker.engines.fwload import load_model

    yield load_model(models.resolve_fw(model_dir()), "cpu", "int8")


@pytest.fixture
def encodes(whisper: Any, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The real encoder's runs (CTranslate2's encode of a 30 s window, most of a decode's cost)."""
    runs: list[int] = []
    real = type(whisper).encode

    def counted(self: Any, features: Any) -> Any:
        runs.append(1)
        return real(self, features)

    monkeypatch.setattr(type(whisper), "encode", counted)
    return runs


def text_of(model: Any, audio: np.ndarray, language: str | None) -> tuple[str, str]:
    segments, info = model.transcribe(audio, language=language, beam_size=1, temperature=0.0, vad_filter=False,
                                      word_timestamps=True, condition_on_previous_text=False)
    return "".join(s.text for s in segments), str(info.language)


def test_a_decode_that_detects_the_language_encodes_once_and_says_the_same(whisper: Any,
                                                                          encodes: list[int]) -> None:
    audio = np.concatenate([np.zeros(6400, np.float32), load("en_quick_brown_fox")])
    given = text_of(whisper, audio, "en")
    encodes.clear()
    text_of(whisper, audio, None)
    assert len(encodes) == 2  # faster-whisper alone: one to detect, one to decode
    encodes.clear()
    with OneEncoding.on(whisper) as memo:
        detected = text_of(whisper, audio, None)
    assert len(encodes) == 1 and memo is not None and memo.reused == 1
    assert detected == given
    assert "encode" not in vars(whisper)  # the model is as it was


def test_the_first_utterance_of_a_session_without_a_language_shows_words_from_its_first_decode(
        whisper: Any, encodes: list[int]) -> None:
    ev = Events()
    live = WhisperLive(whisper, None, "transcribe", None, ev, lambda: False, {})
    pcm = np.concatenate([np.zeros(int(0.8 * SR), np.float32), load("en_quick_brown_fox"),
                          np.zeros(SR, np.float32)])
    for i in range(0, len(pcm), 2560):  # 160 ms pieces, as the Realtime client sends them
        live.feed(pcm[i:i + 2560])
        if live.decodes == 1:
            assert ev.drafts[-1]  # the first decode already heard words
    result = to_json(live.finish())
    assert result["language_code"] == "en"
    assert ev.sentences == ["The quick brown fox jumps over the lazy dog."]
    assert len(encodes) == live.decodes  # detecting the language cost no encoding of its own

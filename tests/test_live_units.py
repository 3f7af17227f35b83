"""The live session's pure parts (local agreement, sentence cuts, the session audio, the streaming VAD), and
WhisperLive driven by a fake faster-whisper: the file path's loop rules and the beam of a final."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np
from speech import load

from hasrd.worker.live import FRAME, Audio, StreamingVad
from hasrd.transcript import to_json
from hasrd.worker.live_whisper import PAUSE_BEAM, WhisperLive, Word, agreed, sentence_cut

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
    assert all(abs(a - b) <= FRAME for (_, a), (_, b) in zip(pieces, whole, strict=True))
    assert [k for k, _ in whole] == ["start", "end", "start", "end"]
    assert all(at % FRAME == 0 for _, at in whole)
    assert abs(whole[0][1] - SR) < 0.3 * SR  # speech starts after the first second of silence


def test_the_energy_vad_needs_no_model() -> None:
    tone = (0.3 * np.sin(np.arange(SR) / 5)).astype(np.float32)
    events = StreamingVad("energy", silence_ms=300).feed(np.concatenate([np.zeros(SR, np.float32), tone,
                                                                         np.zeros(SR, np.float32)]))
    assert [k for k, _ in events] == ["start", "end"] and abs(events[0][1] - SR) <= FRAME


# ---- WhisperLive driven by a fake faster-whisper: what it decodes, and what it says ---------------------------


class FakeWord:
    def __init__(self, word: str, start: float, end: float) -> None:
        self.word, self.start, self.end, self.probability = word, start, end, 0.9


class FakeSegment:
    no_speech_prob, avg_logprob = 0.01, -0.2

    def __init__(self, words: list[FakeWord]) -> None:
        self.words = words
        self.text = "".join(w.word for w in words)


class FakeModel:
    """``transcribe`` as faster-whisper's: ``say(seconds, beam)`` gives the words (spread over the audio) and
    every call is recorded as (seconds of audio, beam_size)."""

    def __init__(self, say: Callable[[float, int], list[str]]) -> None:
        self.say = say
        self.calls: list[tuple[float, int]] = []

    def transcribe(self, audio: np.ndarray, **kw: Any) -> tuple[Any, Any]:
        seconds, beam = len(audio) / SR, int(kw["beam_size"])
        self.calls.append((seconds, beam))
        texts = self.say(seconds, beam)
        span = seconds / max(1, len(texts))
        words = [FakeWord(t, i * span, (i + 1) * span) for i, t in enumerate(texts)]
        return iter([FakeSegment(words)] if words else []), SimpleNamespace(language=kw.get("language") or "en")


class Events:
    def __init__(self) -> None:
        self.drafts: list[str] = []
        self.sentences: list[str] = []
        self.turns: list[tuple[int, str, str]] = []

    def progress(self, done_s: float, total_s: float, phase: str = "decoding") -> None:
        pass

    def draft(self, text: str, segment: int = 0) -> None:
        self.drafts.append(text)

    def sentence(self, index: int, text: str, engine: str, start_s: float, end_s: float, segment: int = 0) -> None:
        self.sentences.append(text)

    def turn(self, segment: int, kind: str, start_s: float = 0.0, end_s: float = 0.0, text: str = "") -> None:
        self.turns.append((segment, kind, text))


def tone(seconds: float) -> np.ndarray:
    return (0.3 * np.sin(np.arange(int(seconds * SR)) / 5)).astype(np.float32)


def quiet(seconds: float) -> np.ndarray:
    return np.zeros(int(seconds * SR), np.float32)


def live_session(model: FakeModel, pcm: np.ndarray, piece_s: float = 0.16, language: str | None = "zh",
                 **options: Any) -> Events:
    """One session over ``pcm`` fed in pieces of ``piece_s`` (a worker that fell behind gets big pieces: the
    audio that waited during a decode is fed as one), with the energy VAD (a tone is speech)."""
    ev = Events()
    live = WhisperLive(model, language, "transcribe", None, ev, lambda: False, {"vad": "energy", **options})
    step = int(piece_s * SR)
    for i in range(0, len(pcm), step):
        live.feed(pcm[i:i + step])
    live.finish()
    return ev


def test_a_decoding_loop_in_a_live_sentence_and_draft_is_said_once_as_in_files() -> None:
    # whisper base on Mandarin fed in 160 ms pieces: "殿下" 15 times in a row
    model = FakeModel(lambda s, beam: ["殿下"] * min(15, int(s * 5)))
    ev = live_session(model, np.concatenate([quiet(1.0), tone(3.0), quiet(1.5)]))
    assert ev.sentences == ["殿下"]
    assert ev.turns[-1] == (0, "completed", "殿下")
    assert ev.drafts and all("殿下殿下殿下殿下" not in d for d in ev.drafts)  # drafts too
    assert any(d == "殿下" for d in ev.drafts)


def test_the_same_live_sentence_four_times_back_to_back_is_said_once() -> None:
    model = FakeModel(lambda s, beam: [" Thank", " you."] * 5 if s > 1.5 else [])
    ev = live_session(model, np.concatenate([quiet(1.0), tone(3.0), quiet(1.5)]), language="en")
    assert ev.sentences == ["Thank you."]
    assert ev.turns[-1] == (0, "completed", "Thank you.")


def test_a_sentence_said_twice_is_kept_twice() -> None:
    model = FakeModel(lambda s, beam: [" Yes.", " Yes."] if s > 1.0 else [])
    ev = live_session(model, np.concatenate([quiet(1.0), tone(2.0), quiet(1.5)]), language="en")
    assert ev.sentences == ["Yes.", "Yes."]


def by_beam(seconds: float, beam: int) -> list[str]:
    """Words that say which beam decoded them (no sentence end: local agreement cuts nothing before the end)."""
    return [" greedy", " words"] if beam == 1 else [" beam", f" {beam}"]


def test_a_worker_that_fell_behind_still_finals_with_the_pause_beam() -> None:
    # the whole utterance and its pause arrive as one piece (audio coalesced behind a slow decode): no decode at
    # the pause ran, so the final is decoded at the utterance's end, with beam 5 as at a pause, not greedy
    model = FakeModel(by_beam)
    pcm = np.concatenate([quiet(1.0), tone(2.0), quiet(1.0)])
    ev = live_session(model, pcm, piece_s=len(pcm) / SR)
    assert ev.sentences == ["beam 5"]
    assert [beam for _, beam in model.calls] == [PAUSE_BEAM]


def test_a_greedy_step_that_reached_the_pause_is_not_the_final() -> None:
    # half-second pieces: the last step's greedy decode covers the speech's end, and the next piece holds the
    # whole pause: the final is still a beam decode
    model = FakeModel(by_beam)
    ev = live_session(model, np.concatenate([quiet(1.0), tone(2.0), quiet(1.5)]), piece_s=0.5)
    assert 1 in [beam for _, beam in model.calls[:-1]]  # there were greedy steps
    assert model.calls[-1][1] == PAUSE_BEAM
    assert ev.sentences == ["beam 5"]


def test_the_decode_at_the_pause_is_the_final_without_another() -> None:
    model = FakeModel(by_beam)
    ev = live_session(model, np.concatenate([quiet(1.0), tone(2.0), quiet(1.5)]), piece_s=0.064)
    assert ev.sentences == ["beam 5"]
    assert model.calls[-1][1] == PAUSE_BEAM and model.calls[-2][1] == 1  # the pause's decode, after greedy steps


def committed(model: FakeModel, pcm: np.ndarray, tail: np.ndarray, hurry: bool) -> Events:
    """``pcm`` fed in 64 ms pieces, then ``tail`` as one piece (what waited behind a decode) and a commit."""
    ev = Events()
    live = WhisperLive(model, "en", "transcribe", None, ev, lambda: False, {"vad": "energy", "silence_ms": 2000})
    for i in range(0, len(pcm), 1024):
        live.feed(pcm[i:i + 1024])
    live.feed(tail, hurry=hurry)
    live.commit()
    live.finish()
    return ev


def test_a_commit_queued_behind_audio_skips_that_audios_draft_and_decodes_the_utterance_once() -> None:
    """Issue 31 #4: drafts due for audio that a commit follows were decoded before the commit was acted on."""
    slow = FakeModel(by_beam)
    committed(slow, np.concatenate([quiet(0.5), tone(1.0)]), tone(1.5), hurry=False)
    assert [beam for _, beam in slow.calls[-2:]] == [1, PAUSE_BEAM]  # a greedy draft, then the commit's decode
    fast = FakeModel(by_beam)
    ev = committed(fast, np.concatenate([quiet(0.5), tone(1.0)]), tone(1.5), hurry=True)
    assert len(fast.calls) == len(slow.calls) - 1 and fast.calls[-1] == (slow.calls[-1][0], PAUSE_BEAM)
    assert ev.sentences == ["beam 5"]  # the whole utterance, decoded once with the final's beam


def test_a_commit_during_the_pause_that_was_decoded_takes_that_decode_as_the_final() -> None:
    """The speech stopped, the pause's beam decode ran, and the client committed before the VAD's end (a long
    silence_ms): the commit needs no decode of its own."""
    model = FakeModel(by_beam)
    ev = committed(model, np.concatenate([quiet(0.5), tone(2.0), quiet(0.4)]), quiet(0.1), hurry=True)
    assert model.calls[-1][1] == PAUSE_BEAM and model.calls[-2][1] == 1  # greedy steps, then the pause's
    assert ev.sentences == ["beam 5"] and ev.turns[-1] == (0, "completed", "beam 5")
    again = FakeModel(by_beam)  # speech after that pause: its decode is no final for the commit
    committed(again, np.concatenate([quiet(0.5), tone(2.0), quiet(0.4), tone(0.5)]), tone(0.1), hurry=True)
    assert again.calls[-1][0] > again.calls[-2][0] and again.calls[-1][1] == PAUSE_BEAM


def test_final_beam_decodes_every_final_at_the_utterance_end_with_that_beam() -> None:
    for final_beam, pieces in ((3, 0.064), (1, 4.0), (1, 0.064)):
        model = FakeModel(by_beam)
        ev = live_session(model, np.concatenate([quiet(1.0), tone(2.0), quiet(1.0)]), piece_s=pieces,
                          final_beam=final_beam)
        assert model.calls[-1][1] == final_beam
        assert ev.sentences == (["greedy words"] if final_beam == 1 else [f"beam {final_beam}"])


class _Heard:
    def __init__(self) -> None:
        self.sentences: list[tuple[float, float]] = []

    def progress(self, done_s: float, total_s: float, phase: str = "decoding") -> None:
        pass

    def draft(self, text: str, segment: int = 0) -> None:
        pass

    def sentence(self, index: int, text: str, engine: str, start_s: float, end_s: float, segment: int = 0) -> None:
        self.sentences.append((start_s, end_s))

    def turn(self, segment: int, kind: str, start_s: float = 0.0, end_s: float = 0.0, text: str = "") -> None:
        pass


def test_a_final_decoded_past_its_utterances_end_still_ends_within_its_turn() -> None:
    """Issue 31 #8: utterances are decoded a few chunks past the end the VAD found, and a sentence ended after
    its turn (whose end_s says where the utterance stopped)."""
    from hasrd.worker.live import LiveBase

    class Bare(LiveBase):
        def _opened(self, seg: int, start: int) -> None:
            pass

        def _advance(self, upto: int) -> None:
            pass

        def _closed(self, seg: int, end: int) -> None:
            self.say(seg, "Hello there.", "fw", 0.95, 2.47)  # decoded up to 2.47 s; the VAD ended it at 2.0 s

    heard = _Heard()
    live = Bare(heard, lambda: False, {"vad": "energy"})  # type: ignore[arg-type]
    live.audio.append(np.zeros(3 * 16000, np.float32))
    live._open(16000)
    live._close(32000)
    assert heard.sentences == [(1.0, 2.0)] and live.sentences[0].end_s == live.turns[0].end_s == 2.0
    r = to_json(live.result())
    assert r["first_text_s"] == 3.0 and r["segments"] == 1 and r["language_detected"] is False
    assert {"draft", "sent_windows", "fw_calls", "first_text_s", "segments", "per_sentence", "final"} <= set(r)


def test_a_language_detected_on_too_little_speech_is_checked_again_once_there_is_enough() -> None:
    """Issue 31 #5: a live session's language was fixed by its first decode (0.3 s past the onset): the same
    English file sent all at once came back in Japanese in 1 run of 6. It is detected again as the audio grows
    (each time on at least twice the audio), until a detection had LANGUAGE_RECHECK_S of it."""
    from hasrd.worker.live_whisper import LANGUAGE_RECHECK_S

    class Unsure(FakeModel):
        """Hears Japanese in under a second of audio, English in more; records the language each call got."""

        languages: list[str | None] = []
        heard: list[str] = []

        def transcribe(self, audio: np.ndarray, **kw: Any) -> tuple[Any, Any]:
            self.languages.append(kw.get("language"))
            segments, _ = super().transcribe(audio, **kw)
            heard = kw.get("language") or ("ja" if len(audio) < SR else "en")
            self.heard.append(heard)
            return segments, SimpleNamespace(language=heard, language_probability=0.6)

    model = Unsure(lambda seconds, beam: ["word"] * max(1, int(seconds)))
    ev = Events()
    live = WhisperLive(model, None, "transcribe", None, ev, lambda: False, {"vad": "energy"})
    pcm = np.concatenate([quiet(0.5), tone(LANGUAGE_RECHECK_S + 3), quiet(1.0)])
    for i in range(0, len(pcm), 2560):  # 160 ms appends, as the daemon hands them on
        live.feed(pcm[i:i + 2560])
    r = to_json(live.finish())
    assert model.languages[0] is None  # the first decode detected ...
    assert r["language_code"] == "en" and r["language_detected"] is True  # ... and a later one corrected it
    assert "ja" in model.heard and "ja" not in model.languages[model.heard.index("en"):]  # corrected for good
    asked = WhisperLive(Unsure(lambda s, b: ["w"]), "zh", "transcribe", None, Events(), lambda: False,
                        {"vad": "energy"})
    for i in range(0, len(pcm), 2560):
        asked.feed(pcm[i:i + 2560])
    assert asked.finish().language_code == "zh"  # a language asked for is never detected


class Located:
    """faster-whisper's ``transcribe`` as far as times go: one word over where the audio is loud, at its true
    place in the audio it was given ("hello there." with beam search, without its mark greedy)."""

    def transcribe(self, audio: np.ndarray, **kw: Any) -> tuple[Any, Any]:
        loud = np.nonzero(np.abs(audio) > 0.01)[0]
        if not len(loud):
            return iter([]), SimpleNamespace(language="en")
        text = " hello there." if int(kw["beam_size"]) > 1 else " hello there"
        return iter([FakeSegment([FakeWord(text, loud[0] / SR, loud[-1] / SR)])]), SimpleNamespace(language="en")


class Timed(Events):
    def __init__(self) -> None:
        super().__init__()
        self.timed: list[tuple[int, str, float, float]] = []

    def sentence(self, index: int, text: str, engine: str, start_s: float, end_s: float, segment: int = 0) -> None:
        super().sentence(index, text, engine, start_s, end_s, segment)
        self.timed.append((segment, text, start_s, end_s))


def fed(live: WhisperLive, *chunks: np.ndarray) -> None:
    for chunk in chunks:
        for i in range(0, len(chunk), 1600):
            live.feed(chunk[i:i + 1600])


def test_a_final_decoded_from_before_the_utterance_keeps_the_words_true_times() -> None:
    """Review of issue 31 #4: the final's decode starts up to a second before the utterance, but between
    utterances less than that was kept: the decode got less audio than it counted, and its words came out up to
    0.43 s early."""
    for gap in (2.4, 2.6, 2.8, 3.7):
        ev = Timed()
        live = WhisperLive(Located(), "en", "transcribe", None, ev, lambda: False, {"vad": "energy"})
        fed(live, quiet(0.5), tone(1.0), quiet(gap), tone(1.0), quiet(1.0))
        live.finish()
        (seg, _text, start, end) = ev.timed[-1]
        assert seg == 1 and abs(start - (1.5 + gap)) < 0.05 and abs(end - (2.5 + gap)) < 0.05, (gap, ev.timed)


def test_speech_after_a_commit_is_the_next_utterance_not_lost() -> None:
    ev = Timed()
    live = WhisperLive(Located(), "en", "transcribe", None, ev, lambda: False, {"vad": "energy"})
    fed(live, quiet(0.5), tone(2.0))
    live.commit()  # mid-speech: the speech goes on
    fed(live, tone(2.0), quiet(1.0))
    live.finish()
    assert [t[:2] for t in ev.turns if t[1] == "completed"] == [(0, "completed"), (1, "completed")]
    assert [(s, round(a, 1), round(b, 1)) for s, _t, a, b in ev.timed] == [(0, 0.5, 2.5), (1, 2.5, 4.5)]


def test_a_commit_after_speech_the_vad_scored_between_its_thresholds_decodes_that_speech_too() -> None:
    """A pause was decoded, then speech scored 0.35-0.5 (neither speech nor quiet to the VAD's hysteresis):
    the commit took the pause's decode as the final and the last second was never decoded."""
    ev = Timed()
    live = WhisperLive(Located(), "en", "transcribe", None, ev, lambda: False, {"vad": "energy", "silence_ms": 2000})

    def scores(windows: np.ndarray) -> np.ndarray:
        base = live.vad.pos // FRAME
        t = (base + np.arange(len(windows))) * FRAME / SR
        return np.select([t < 0.5, t < 1.5, t < 1.8, t < 2.8], [0.0, 0.9, 0.0, 0.45], 0.0).astype(np.float32)

    live.vad.scores = scores  # type: ignore[method-assign]
    fed(live, quiet(0.5), tone(1.0), quiet(0.3), tone(1.0))
    live.commit()
    live.finish()
    assert ev.timed and max(b for _s, _t, _a, b in ev.timed) > 2.7, ev.timed

"""The default engine's decoding: the same text every time, clean text, moving progress, speech-only language votes.

Real faster-whisper with the embedded whisper base on espeak-ng speech built by benchmarks/corpus.py (Mandarin
through pinyin: the hard case where temperature fallback used to sample without a seed and loops happened).
"""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from speech import SR, load, model_dir, with_path
from workerclient import WorkerClient

from hasrd import config
from hasrd.transcript import to_json
from hasrd import protocol as p
from hasrd.worker import language_id
from hasrd.worker.engine import NullEmitter
from hasrd.worker.engines.whisper import WhisperEngine
from hasrd.worker.textrules import clean_text, collapse_loops
from hasrd.worker.vad import merge_clips, speech_spans

_spec = importlib.util.spec_from_file_location("hasr_corpus", Path(__file__).parent.parent / "benchmarks" / "corpus.py")
assert _spec is not None and _spec.loader is not None
corpus = importlib.util.module_from_spec(_spec)
sys.modules["hasr_corpus"] = corpus
_spec.loader.exec_module(corpus)


@pytest.fixture(scope="module")
def mandarin() -> np.ndarray:
    """About 40 s of espeak-ng Mandarin sentences with pauses (seeded: the same audio on every machine)."""
    pcm, _text = corpus.long_file(corpus.ZH[:8], "zh", 0.66, seed=11)
    return pcm


def worker_texts(pcm: np.ndarray, times: int, **env: str) -> list[str]:
    w = WorkerClient("whisper", env={"HASR_FW_MODEL": model_dir(), "HASR_FW_DEVICE": "cpu",
                                     "PYTHONPATH": with_path(), **env})
    try:
        assert isinstance(w.handshake()[-1], p.Ready)
        out = []
        for i in range(times):
            _events, res = w.transcribe(i + 1, pcm, language="zh")
            assert isinstance(res, p.Result), res
            out.append(to_json(res.result)["final"])
        return out
    finally:
        w.close()


@pytest.mark.parametrize("batch", ["4", "0"])
def test_the_same_file_gives_the_same_text_every_time_in_one_worker_and_in_a_fresh_one(
        mandarin: np.ndarray, batch: str) -> None:
    first = worker_texts(mandarin, 3, HASR_WHISPER_BATCH=batch)
    again = worker_texts(mandarin, 1, HASR_WHISPER_BATCH=batch)
    assert first[0] and len(set(first + again)) == 1, first + again


def test_text_never_carries_replacement_or_zero_width_characters_and_loops_are_said_once() -> None:
    assert clean_text("你\ufffd好\u200d\u200d\u200d世界\u200b ") == "你好世界"
    assert clean_text("a\u2060b\ufeffc") == "abc"
    assert collapse_loops("准备书" * 12) == "准备书"
    assert collapse_loops("鶴" * 40).count("鶴") < 8
    for fine in ("谢谢谢谢", "一二三四五六七八九十", "yes yes yes", "哈哈哈哈哈"):
        assert collapse_loops(fine) == fine


def test_progress_starts_at_zero_and_moves_while_a_long_file_is_decoded(mandarin: np.ndarray) -> None:
    w = WorkerClient("whisper", env={"HASR_FW_MODEL": model_dir(), "HASR_FW_DEVICE": "cpu",
                                     "HASR_WHISPER_BATCH": "1", "PYTHONPATH": with_path()})
    try:
        assert isinstance(w.handshake()[-1], p.Ready)
        events, res = w.transcribe(1, mandarin, language="zh")
    finally:
        w.close()
    assert isinstance(res, p.Result)
    done = [e.done_s for e in events if isinstance(e, p.Progress)]
    assert done[0] == 0.0 and done[-1] == pytest.approx(len(mandarin) / SR, abs=0.01)
    clips = merge_clips(speech_spans(mandarin))
    assert len(clips) >= 2 and len(set(done)) >= len(clips) + 1  # 0, then one per 30 s clip as it is decoded
    assert done == sorted(done)


def test_the_language_vote_counts_only_speech_and_sums_over_windows() -> None:
    assert language_id.vote([[("th", 0.6), ("ko", 0.4)], [("ko", 0.9), ("th", 0.1)]]) == ("ko", pytest.approx(0.65))
    assert language_id.vote([[("yue", 0.7), ("zh", 0.3)]], allowed={"zh", "en"}) == ("zh", pytest.approx(0.3))
    assert language_id.vote([]) == ("", 0.0)


def test_english_after_a_long_silence_is_detected_from_its_speech_with_a_probability() -> None:
    e = WhisperEngine(config.load(env={}), model_dir(), "cpu", "int8")
    e.load(lambda s: None)
    rng = np.random.default_rng(3)
    quiet = (0.001 * rng.standard_normal(40 * SR)).astype(np.float32)  # 40 s: whisper's own first 30 s hear none
    pcm = np.concatenate([quiet, load("en_espeak_park"), load("en_quick_brown_fox")])
    seen: list[Any] = []

    class Rec:
        def progress(self, done_s: float, total_s: float, phase: str = "decoding") -> None:
            seen.append(done_s)

        def draft(self, text: str, segment: int = 0) -> None:
            pass

        def sentence(self, index: int, text: str, engine: str, start_s: float, end_s: float) -> None:
            pass

    r = to_json(e.transcribe(pcm, "", {}, Rec(), lambda: False))
    assert r["language_code"] == "en" and r["language"] == "English" and r["language_detected"] is True
    assert 0.5 < r["language_probability"] <= 1.0
    assert "park" in r["final"].lower()


@pytest.mark.parametrize("batch", ["2", "0"])
def test_progress_moves_through_silence_and_names_each_phase_before_the_first_words(batch: str) -> None:
    """Issue 32 #1: progress came only per decoded segment, so a long speechless stretch (and the language vote)
    sent nothing and a 3-hour recording was killed as stalled. Now each piece the VAD passed moves it, and the
    phases before the first words say what runs."""
    e = WhisperEngine(config.load(env={"HASR_WHISPER_SEGMENT_SEC": "20", "HASR_WHISPER_BATCH": batch}),
                      model_dir(), "cpu", "int8")
    e.load(lambda s: None)
    rng = np.random.default_rng(5)
    quiet = (0.001 * rng.standard_normal(100 * SR)).astype(np.float32)  # five pieces without speech
    pcm = np.concatenate([quiet, load("en_quick_brown_fox"), quiet[:5 * SR]])
    events: list[tuple[str, float, str]] = []

    class Rec:
        def progress(self, done_s: float, total_s: float, phase: str = "decoding") -> None:
            events.append(("progress", done_s, phase))

        def draft(self, text: str, segment: int = 0) -> None:
            pass

        def sentence(self, index: int, text: str, engine: str, start_s: float, end_s: float) -> None:
            events.append(("sentence", start_s, text))

    r = e.transcribe(pcm, "", {}, Rec(), lambda: False)
    assert "fox" in r.final.lower() and r.language_code == "en"
    first_words = next(i for i, ev in enumerate(events) if ev[0] == "sentence")
    before = events[:first_words]
    phases = [ph for kind, _done, ph in before if kind == "progress"]
    assert phases[0] == "finding_speech" and phases.index("detecting_language") < phases.index("decoding")
    silent = [done for kind, done, ph in before if kind == "progress" and ph == "decoding" and 0 < done < 100]
    assert len(silent) >= 3 and silent == sorted(silent)  # the speechless pieces moved the bar, forwards
    done = [d for kind, d, _ph in events if kind == "progress"]
    assert done == sorted(done) and done[-1] == pytest.approx(len(pcm) / SR, abs=0.01)  # never backwards


def test_a_clip_just_under_27_s_with_a_long_prompt_stays_inside_the_model_context(mandarin: np.ndarray) -> None:
    """The token cap for short pieces plus whisper's prompt once passed 448 tokens: faster-whisper raised
    ValueError ("exceeds the max_length") for a 26.9 s piece, and the request failed."""
    from hasrd.worker.textrules import MAX_CAP, token_cap

    assert token_cap(26.9) == MAX_CAP and MAX_CAP + 224 + 8 <= 448
    e = WhisperEngine(config.load(env={"HASR_WHISPER_BATCH": "0"}), model_dir(), "cpu", "int8")
    e.load(lambda s: None)
    prompt = "会议纪要：" + "，".join(corpus.ZH) * 3  # far past the 223 tokens whisper keeps of a prompt
    r = to_json(e.transcribe(mandarin[: int(26.9 * SR)], "zh", {"prompt": prompt}, NullEmitter(), lambda: False))
    assert r["final"]


def test_a_favoured_language_wins_a_close_race_but_not_a_clear_one() -> None:
    # espeak Mandarin as whisper base hears it over three windows (measured): mostly Thai, Chinese close behind
    windows = [[("zh", 0.88), ("th", 0.07)], [("th", 0.85), ("zh", 0.05)], [("th", 0.7), ("zh", 0.1)]]
    assert language_id.vote(windows)[0] == "th"
    assert language_id.vote(windows, favoured=("zh", "en"))[0] == "zh"
    spanish = [[("es", 0.68), ("en", 0.1), ("it", 0.1)]]  # a clear answer is kept
    assert language_id.vote(spanish, favoured=("zh", "en"))[0] == "es"
    assert language_id.locale_language({"LANG": "de_DE.UTF-8"}) == "de"
    assert language_id.locale_language({"LANG": "C.UTF-8"}) == ""


def test_a_cancel_stops_a_long_transcription_within_one_batch_and_the_worker_keeps_its_model(
        mandarin: np.ndarray) -> None:
    long = np.concatenate([mandarin] * 4)  # ~160 s: far more work than one batch
    w = WorkerClient("whisper", env={"HASR_FW_MODEL": model_dir(), "HASR_FW_DEVICE": "cpu", "PYTHONPATH": with_path()})
    try:
        assert isinstance(w.handshake()[-1], p.Ready)
        w.sock.settimeout(120)
        w.submit(1, long, language="zh")
        t_start = time.monotonic()
        while True:  # the first clip is decoded alone: progress moves within seconds
            m = w.recv()
            if isinstance(m, p.Progress) and m.done_s > 0:
                break
        first_clip = time.monotonic() - t_start
        w.send(p.Cancel(id=1))
        t0 = time.monotonic()
        events, end = w.collect(1)
        took = time.monotonic() - t0
        print(f"cancel acknowledged after {took:.2f} s (the first clip took {first_clip:.2f} s)")
        assert isinstance(end, p.Failed) and end.code == "cancelled", end
        done = max([e.done_s for e in events if isinstance(e, p.Progress)] or [0.0])
        assert done < len(long) / SR * 0.6  # it stopped early, not at the end
        # the worker stopped the job itself (no kill): the same process serves the next request below
        _events, res = w.transcribe(2, load("zh_nihao_shijie"), language="zh")  # the same process, model loaded
        assert isinstance(res, p.Result) and to_json(res.result)["final"]
        assert w.proc.poll() is None
    finally:
        w.close()


def test_silero_hears_each_sample_of_a_long_file_once_not_three_times(mandarin: np.ndarray,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The language vote, the long-audio cut and each piece's clips share one VAD pass (hasrd/worker/vad.py):
    on a GPU the CPU's VAD was most of a long file's time, and the file went through Silero three times."""
    from faster_whisper import vad as fw_vad

    heard: list[int] = []
    real = fw_vad.get_speech_timestamps

    def counting(audio: np.ndarray, *a: Any, **kw: Any) -> Any:
        heard.append(len(audio))
        return real(audio, *a, **kw)

    monkeypatch.setattr(fw_vad, "get_speech_timestamps", counting)
    from faster_whisper import BatchedInferencePipeline

    batches: list[int] = []
    real_batch = BatchedInferencePipeline.transcribe

    def counting_batches(self: Any, audio: np.ndarray, *a: Any, **kw: Any) -> Any:
        batches.append(len(kw["clip_timestamps"]))
        return real_batch(self, audio, *a, **kw)

    monkeypatch.setattr(BatchedInferencePipeline, "transcribe", counting_batches)
    from hasrd.worker.engines import mending

    monkeypatch.setattr(mending, "symptom", lambda *a: None)  # only the file's own batches (no clip mended)
    long = np.concatenate([mandarin] * 3)  # ~2 minutes, cut into pieces of at most 50 s
    engine = WhisperEngine(config.load({"HASR_WHISPER_SEGMENT_SEC": "50", "HASR_WHISPER_BATCH": "4"}), "", "cpu",
                           "int8")
    engine.load(lambda phase: None)
    result = to_json(engine.transcribe(long, "", {}, NullEmitter(), lambda: False))  # no language: the vote runs too
    assert result["language_detected"] and result["final"]  # (whisper base hears espeak Mandarin as Thai)
    # each cut's block is at most 50 s and starts at the last cut (past half the block): < 2x, where it was > 3x
    assert sum(heard) < 2 * len(long), (sum(heard) / len(long), heard)
    # the vote took its speech from the first piece's spans: no VAD call covers the file's head a second time
    assert sum(1 for n in heard if n >= 50 * SR - 2560) <= len(long) // (25 * SR)
    # a batch takes clips across pieces: full batches of 4 after the first clip (alone, on the CPU)
    assert batches[0] == 1 and all(n == 4 for n in batches[1:-1]) and 1 <= batches[-1] <= 4, batches
    assert len(result["per_sentence"]) >= len(batches)


def test_the_batch_follows_the_device_unless_set() -> None:
    from hasrd.worker.engines.fwload import batch_for

    assert batch_for("cpu", -1) == 2 and batch_for("cuda", -1) == 16
    assert batch_for("cuda", 0) == 0 and batch_for("cpu", 8) == 8
    assert WhisperEngine(config.load({}), "", "cuda", "float16").batch == 16
    assert WhisperEngine(config.load({"HASR_WHISPER_BATCH": "4"}), "", "cuda", "float16").batch == 4


def test_two_sure_windows_that_agree_settle_the_language_vote_and_doubtful_ones_do_not() -> None:
    """Issue 32 #2 (first words sooner): the vote stops after two windows that agree at >= SURE; the espeak
    Mandarin windows the vote exists for (Chinese 0.88, Thai 0.85) go on to all four."""
    sure = [[("en", 0.98), ("de", 0.01)], [("en", 0.97)]]
    assert language_id.settled(sure) and not language_id.settled(sure[:1])
    assert not language_id.settled([[("zh", 0.88), ("th", 0.07)], [("th", 0.85), ("zh", 0.05)]])
    assert not language_id.settled([[("en", 0.98)], [("de", 0.97)]])  # sure, but of two languages
    assert not language_id.settled([[("yue", 0.97)], [("yue", 0.96)]], allowed={"zh", "en"})
    # a first window that dissents keeps the vote going: with three windows the favour rule would hand it to zh
    dissent = [[("zh", 0.6), ("de", 0.3)], [("de", 0.96)], [("de", 0.97)]]
    assert not language_id.settled(dissent)
    assert language_id.vote(dissent + [[("de", 0.97)]], favoured=("zh", "en"))[0] == "de"


def test_a_clear_english_file_is_voted_from_two_windows_not_four() -> None:
    """The real model on 2 minutes of English speech: two detections, English, the same answer the four-window
    vote gave."""
    from faster_whisper import WhisperModel

    model = WhisperModel(model_dir(), device="cpu", compute_type="int8")
    calls: list[int] = []
    real = model.detect_language

    def counted(*args: Any, **kw: Any) -> Any:
        calls.append(1)
        return real(*args, **kw)

    model.detect_language = counted  # type: ignore[method-assign]
    speech = np.concatenate([load("en_espeak_park"), load("en_quick_brown_fox"), load("en_hello_world")] * 20)
    assert len(language_id.speech_of(speech)) >= language_id.NEED  # enough speech for all four windows
    lang, prob = language_id.detect(model, speech)
    assert lang == "en" and prob >= language_id.SURE and len(calls) == 2, (lang, prob, calls)


def test_a_long_file_on_the_cpu_shows_its_first_words_from_a_short_first_clip() -> None:
    """Issue 32 #2: the first clip of a file over a minute is at most FIRST_CLIP_SEC of speech (about 25 tokens
    of beam search, not 90, before the first words); a short file keeps its one whole clip (cut in two, its text
    would change and cost a second window). The clips are read where the engine hands them to its decoder."""
    from hasrd.worker.engines import whisper as wmod

    e = WhisperEngine(config.load(env={}), model_dir(), "cpu", "int8")
    e.load(lambda s: None)
    decode = e._decode
    seen: list[tuple[float, float]] = []  # each clip's stretch of the file

    def tee(pcm: Any, code: Any, options: Any, clips: Any, track: Any) -> Any:
        def each() -> Any:
            for c in clips:
                if not isinstance(c, wmod.Passed):
                    seen.append((c.start, c.end))
                yield c
        return decode(pcm, code, options, each(), track)

    e._decode = tee  # type: ignore[method-assign]
    gap = np.zeros(int(0.8 * SR), np.float32)
    one = np.concatenate([x for name in ("en_hello_world", "en_quick_brown_fox", "en_espeak_park")
                          for x in (load(name), gap)])
    long = np.concatenate([one] * int(np.ceil(wmod.SHORT_FIRST_AFTER * SR / len(one)) + 1))
    r = e.transcribe(long, "en", {}, NullEmitter(), lambda: False)
    assert "fox" in r.final.lower()
    first = seen[0][1] - seen[0][0]
    assert first <= wmod.FIRST_CLIP_SEC and max(c1 - c0 for c0, c1 in seen[1:]) > wmod.FIRST_CLIP_SEC, seen
    seen.clear()
    short = np.concatenate([one, one])  # under a minute: one whole clip
    assert len(short) < wmod.SHORT_FIRST_AFTER * SR
    e.transcribe(short, "en", {}, NullEmitter(), lambda: False)
    assert seen[0][1] - seen[0][0] > wmod.FIRST_CLIP_SEC, seen
    # under a minute with pauses of 1.8 s: its speech, the pauses shortened, fills one window though the
    # stretch of the file is longer (the first clip is packed like the others)
    seen.clear()
    pause = np.zeros(int(1.8 * SR), np.float32)
    spaced = np.concatenate([x for _ in range(3) for name in ("en_quick_brown_fox", "en_espeak_park")
                             for x in (load(name), pause)])
    assert 31 * SR < len(spaced) < wmod.SHORT_FIRST_AFTER * SR
    e.transcribe(spaced, "en", {}, NullEmitter(), lambda: False)
    assert len(seen) == 1 and seen[0][1] - seen[0][0] > 30, seen

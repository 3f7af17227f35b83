"""The v2c pipeline on scripted drafts: windows, the symptom gate, padding, times, modes, cancel (no models)."""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import numpy as np
from msgspec import to_builtins
import pytest

from hasrd.worker import v2c
from hasrd.options import Options
from hasrd.transcript import to_json
from hasrd.worker.engine import EngineError
from hasrd.worker.engines.fake import FakeEngine
from hasrd.worker.scripted import ScriptedDraft

CH = v2c.CHUNK
LAG = v2c.LAG_CHUNKS


class State:
    def __init__(self) -> None:
        self.text = ""


class ListDraft:
    """Per chunk i: ``snaps[i]`` becomes state.text (None = nothing new, returns ""); ``final`` after finish."""

    def __init__(self, snaps: list[str | None], final: str | None = None, silent: set[int] | None = None) -> None:
        self.snaps, self.final, self.silent = snaps, final, silent or set()
        self.calls: list[dict[str, Any]] = []
        self.init_kwargs: dict[str, Any] = {}
        self.i = 0

    def init_streaming_state(self, **kw: Any) -> State:
        self.init_kwargs = kw
        return State()

    def streaming_transcribe(self, pcm16k: np.ndarray, state: State,
                             max_new_tokens: int | None = None) -> tuple[str, str]:
        self.calls.append({"n": len(pcm16k), "dtype": pcm16k.dtype, "max_new_tokens": max_new_tokens})
        snap = self.snaps[self.i] if self.i < len(self.snaps) else None
        i, self.i = self.i, self.i + 1
        if snap is None:
            return "", ""
        state.text = snap
        return ("", "") if i in self.silent else (snap, snap)

    def finish_streaming_transcribe(self, state: State, max_new_tokens: int | None = None) -> str:
        print("R2T2 prints its final text to stdout")
        if self.final is not None:
            state.text = self.final
        return state.text


class Rec:
    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.segments: list[int] = []  # the segment of each draft event

    def progress(self, done_s: float, total_s: float, phase: str = "decoding") -> None:
        self.events.append(("progress", done_s, total_s))

    def draft(self, text: str, segment: int = 0) -> None:
        self.events.append(("draft", text))
        self.segments.append(segment)

    def sentence(self, index: int, text: str, engine: str, start_s: float, end_s: float, segment: int = 0) -> None:
        self.events.append(("sentence", index, text, engine, start_s, end_s))

    def sentences(self) -> list[tuple[Any, ...]]:
        return [e for e in self.events if e[0] == "sentence"]


class FW:
    """A window transcriber that records the audio it got and answers per call."""

    def __init__(self, answers: list[str] | None = None, delay: float = 0.0) -> None:
        self.answers = list(answers or [])
        self.spans: list[int] = []
        self.delay = delay

    def __call__(self, audio: np.ndarray) -> str:
        self.spans.append(len(audio))
        if self.delay:
            time.sleep(self.delay)
        return self.answers.pop(0) if self.answers else f"fw{len(self.spans)}"


def run(draft: Any, n_chunks: int, fw: Any = None, mode: str = "inline", tail: int = 0,
        **kw: Any) -> tuple[dict[str, Any], Rec]:
    pcm = np.zeros(max(0, n_chunks * CH - tail), dtype=np.float32)
    rec = Rec()
    out = v2c.run(draft, pcm, "Chinese", fw, emit=rec, mode=mode, **kw)
    return to_json(v2c.result("hybrid-asr-v2c", "Chinese", "zh", out, len(pcm))), rec


def test_complete_sentences_keep_the_draft_and_never_call_faster_whisper() -> None:
    fw = FW()
    r, rec = run(ListDraft([None, "今天", "今天天气好。", None, "今天天气好。走吧！"]), 5, fw)
    assert fw.spans == [] and r["fw_calls"] == 0
    assert [(p["text"], p["engine"]) for p in r["per_sentence"]] == [("今天天气好。", "draft"), ("走吧！", "draft")]
    assert r["final"] == "今天天气好。走吧！" and r["draft"] == "今天天气好。走吧！"
    # the second window opened at chunk 3; its audio reaches LAG_CHUNKS back (clamped at chunk 0) ...
    assert r["sent_windows"] == [{"text": "今天天气好。", "start_chunk": 0, "end_chunk": 2, "truncated_by": None},
                                 {"text": "走吧！", "start_chunk": 0, "end_chunk": 4, "truncated_by": None}]
    # ... while the sentence times stay on the draft's clock, contiguous
    assert [(p["start_s"], p["end_s"]) for p in r["per_sentence"]] == [(0.0, 0.48), (0.48, 0.8)]
    assert r["first_text_s"] == pytest.approx(0.32)


def test_a_pipe_suffix_sends_the_window_to_faster_whisper_and_its_text_wins() -> None:
    fw = FW(["我们去公园散步吧。"])
    r, _ = run(ListDraft(["好。", None, "好。我们去公园散步|吧。"]), 3, fw)
    assert r["fw_calls"] == 1 and len(fw.spans) == 1
    assert r["per_sentence"][0] == {"text": "好。", "engine": "draft", "start_s": 0.0, "end_s": 0.16,
                                    "truncated_by": None}
    assert r["per_sentence"][1]["text"] == "我们去公园散步吧。" and r["per_sentence"][1]["engine"] == "fw"
    assert r["per_sentence"][1]["truncated_by"] == "bar"


def test_a_sentence_without_an_end_mark_is_truncated_and_re_transcribed() -> None:
    fw = FW(["你好世界"])
    r, _ = run(ListDraft([None, "你好", "你好世界"]), 3, fw)
    assert r["sent_windows"] == [{"text": "你好世界", "start_chunk": 0, "end_chunk": 2, "truncated_by": "no_end_mark"}]
    assert r["per_sentence"][0]["engine"] == "fw" and r["fw_calls"] == 1


def test_empty_faster_whisper_text_falls_back_to_the_draft_cut_at_the_pipe() -> None:
    r, _ = run(ListDraft(["我们去公园散步|吧。"]), 2, FW([""]))
    assert r["per_sentence"][0] == {"text": "我们去公园散步", "engine": "fw", "start_s": 0.0, "end_s": 0.16,
                                    "truncated_by": "bar"}
    assert r["final"] == "我们去公园散步"


def test_text_after_the_last_mark_becomes_the_last_window_after_finish() -> None:
    fw = FW(["然后呢"])
    r, _ = run(ListDraft(["好。", None, "好。然后", None], final="好。然后呢"), 4, fw)
    assert r["sent_windows"] == [{"text": "好。", "start_chunk": 0, "end_chunk": 0, "truncated_by": None},
                                 {"text": "然后呢", "start_chunk": 0, "end_chunk": 3,  # 1 - LAG, clamped
                                  "truncated_by": "no_end_mark"}]
    assert [p["engine"] for p in r["per_sentence"]] == ["draft", "fw"] and r["final"] == "好。然后呢"
    assert fw.spans == [4 * CH]  # chunks 0-3, padding clamped at both ends
    assert r["per_sentence"][1]["start_s"] == pytest.approx(0.16)


def test_several_pipes_in_one_window_cut_at_the_first() -> None:
    r, _ = run(ListDraft(["甲|乙|丙。"]), 1, FW([""]))
    assert r["per_sentence"][0]["text"] == "甲"


def test_a_pipe_left_in_the_state_text_marks_its_sentence_which_closes_at_its_end_mark() -> None:
    # An older R2T2 leaves "|" in state.text. The seed closed a window on every growth while "|" was anywhere
    # in it (fragments: one fw call per chunk); here the "|" marks the open sentence, which ends at its mark.
    r, _ = run(ListDraft(["甲|乙", "甲|乙丙", None, "甲|乙丙丁。", "甲|乙丙丁。戊"]), 5, FW(["", ""]))
    assert [(w["text"], w["truncated_by"]) for w in r["sent_windows"]] == [("甲|乙丙丁。", "bar"),
                                                                          ("戊", "no_end_mark")]
    assert r["fw_calls"] == 2 and [p["text"] for p in r["per_sentence"]] == ["甲", "戊"]


def test_an_empty_fixed_text_commits_nothing_but_the_draft_is_still_shown() -> None:
    # chunk 0 changes state.text but fixed_text is "": nothing is committed, so no window closes there
    r, rec = run(ListDraft(["好。", "好。走。"], silent={0}), 2, FW())
    assert r["sent_windows"] == [{"text": "好。走。", "start_chunk": 0, "end_chunk": 1, "truncated_by": None}]
    assert [e for e in rec.events if e[0] == "draft"] == [("draft", "好。"), ("draft", "好。走。")]
    assert r["first_text_s"] == pytest.approx(0.16)


def test_empty_audio_gives_an_empty_result_without_calls() -> None:
    fw = FW()
    d = ListDraft([], final="")
    r, rec = run(d, 0, fw)
    assert d.calls == [] and fw.spans == []
    assert r["final"] == "" and r["sent_windows"] == [] and r["per_sentence"] == [] and r["first_text_s"] is None
    assert rec.events[-1] == ("progress", 0.0, 0.0)


def test_one_chunk_of_audio_makes_one_window_over_all_of_it() -> None:
    fw = FW(["一"])
    r, _ = run(ListDraft([None], final="一"), 1, fw, tail=1000)
    assert r["sent_windows"] == [{"text": "一", "start_chunk": 0, "end_chunk": 0, "truncated_by": "no_end_mark"}]
    assert fw.spans == [CH - 1000]  # the whole clip; the padding is clamped at both ends
    assert r["per_sentence"][0]["end_s"] == round((CH - 1000) / 16000, 3)


def test_window_padding_is_0_32_s_and_clamped_at_both_ends() -> None:
    n = 20 * CH
    assert v2c.window_span(0, 3, n) == (0, 4 * CH + 5120)
    assert v2c.window_span(5, 9, n) == (5 * CH - 5120, 10 * CH + 5120)
    assert v2c.window_span(15, 19, n) == (15 * CH - 5120, n)
    fw = FW(["", "", ""])
    snaps: list[str | None] = [None] * 30
    snaps[1], snaps[12], snaps[25] = "甲|。", "甲|。乙|。", "甲|。乙|。丙|。"
    r, _ = run(ListDraft(snaps), 30, fw)
    # closes at 1, 12, 25 -> windows [0,1] [2-LAG (clamped to 0),12] [13-LAG,25]; nothing after 25, no last window
    assert [(w["start_chunk"], w["end_chunk"]) for w in r["sent_windows"]] == [(0, 1), (0, 12), (13 - LAG, 25)]
    assert fw.spans == [2 * CH + 5120, 13 * CH + 5120, (13 + LAG) * CH + 2 * 5120]


@pytest.mark.parametrize("lag", [0, 3, LAG, LAG + 2])
def test_a_lagging_draft_still_gives_faster_whisper_the_sentence_from_its_true_start(lag: int) -> None:
    """R2T2 writes a sentence some chunks after it is spoken. Audio (chunks): A 0-9, B 11-25, C 28-36 of 40.
    The draft shows each text ``lag`` chunks late: A (complete) closes at 9+lag, B (truncated by "|") at
    25+lag, C (no end mark) arrives at finish. fw must hear B and C from their first chunk."""
    a, b, c = "今天天气很好。", "我们去公园散步|吧。", "最后一句"
    snaps: list[str | None] = [None] * 40
    snaps[2 + lag], snaps[9 + lag] = a[:2], a  # A grows, then closes with its mark
    snaps[13 + lag], snaps[25 + lag] = a + b[:3], a + b  # B grows (no mark, no "|" yet), then closes
    heard: list[set[int]] = []

    def fw(audio: np.ndarray) -> str:
        heard.append({int(v) - 1 for v in np.unique(audio)})  # chunk k holds the value k + 1
        return f"fw{len(heard)}"

    pcm = np.repeat(np.arange(1, 41, dtype=np.float32), CH)
    rec = Rec()
    out = v2c.run(ListDraft(snaps, final=a + b + c), pcm, "Chinese", fw, emit=rec, mode="inline")
    r = to_json(v2c.result("hybrid-asr-v2c", "Chinese", "zh", out, len(pcm)))
    assert [w["text"] for w in r["sent_windows"]] == [a, b, c]
    assert [p["engine"] for p in r["per_sentence"]] == ["draft", "fw", "fw"] and r["fw_calls"] == 2
    # the window rule: audio from LAG_CHUNKS before the chunk after the previous close
    assert r["sent_windows"][1] == {"text": b, "start_chunk": max(0, 9 + lag + 1 - LAG), "end_chunk": 25 + lag,
                                    "truncated_by": "bar"}
    assert r["sent_windows"][2] == {"text": c, "start_chunk": 25 + lag + 1 - LAG, "end_chunk": 39,
                                    "truncated_by": "no_end_mark"}
    # what matters: B and C were heard whole, from their true first chunk (LAG_CHUNKS + 0.32 s of padding
    # cover a draft up to 0.8 + 0.32 s late)
    assert set(range(11, 26)) <= heard[0] and set(range(28, 37)) <= heard[1]
    # times stay on the draft's clock: B starts where A ended
    assert [(p["start_s"], p["end_s"]) for p in r["per_sentence"]] == [
        (0.0, round((10 + lag) * 0.16, 3)), (round((10 + lag) * 0.16, 3), round((26 + lag) * 0.16, 3)),
        (round((26 + lag) * 0.16, 3), 6.4)]
    if lag >= 4:  # starting at the chunk after the close (the previous rule) would cut B's first syllables
        a0, _ = v2c.window_span(9 + lag + 1, 25 + lag, len(pcm))
        assert a0 > 11 * CH


def test_chunk_indices_and_times_are_contiguous_and_consistent() -> None:
    rng = random.Random(7)
    for _ in range(30):
        n = rng.randint(1, 60)
        text, snaps = "", list[str | None]()
        for _ in range(n):
            if rng.random() < 0.4:
                text += rng.choice(["字", "词", "。", "？", "|", "a"])
                snaps.append(text)
            else:
                snaps.append(None)
        r, rec = run(ListDraft(snaps), n, FW(), tail=rng.randint(0, CH - 1))
        ws, ps = r["sent_windows"], r["per_sentence"]
        assert len(ws) == len(ps) == len(rec.sentences())
        prev_end = -1
        for w, p in zip(ws, ps, strict=True):
            # the audio window reaches LAG chunks back from the chunk after the previous close
            assert w["start_chunk"] == max(0, prev_end + 1 - LAG) and w["start_chunk"] <= w["end_chunk"] < n
            # the sentence starts on the draft's clock at that chunk (the last window stays inside the audio)
            assert p["start_s"] == pytest.approx(min(prev_end + 1, n - 1) * 0.16)
            assert p["end_s"] == pytest.approx(min(r["duration_s"], (w["end_chunk"] + 1) * 0.16))
            prev_end = w["end_chunk"]
        # cues follow each other: each sentence starts where the previous ended (bar the end-of-audio clamp)
        for a, b in zip(ps, ps[1:], strict=False):
            assert b["start_s"] == pytest.approx(a["end_s"]) or b["start_s"] == pytest.approx((n - 1) * 0.16)
        assert "".join(w["text"] for w in ws) == r["draft"]
        assert r["fw_calls"] == sum(w["truncated_by"] is not None for w in ws)


def test_the_selection_rule_is_a_pure_symptom_gate() -> None:
    assert v2c.choose("好。", "FW") == ("好。", "draft")
    assert v2c.choose("好|吧。", "FW") == ("FW", "fw")
    assert v2c.choose("好|吧。", "") == ("好", "fw")
    assert v2c.choose("没有句号", "FW") == ("FW", "fw")
    assert v2c.choose("没有句号", "") == ("没有句号", "fw")
    assert v2c.choose("Why?", "FW") == ("Why?", "draft")
    assert v2c.choose("a|b", None) == ("a", "draft")  # draft-only engine
    assert all(v2c.truncation(t) is not None for t in ("", "abc.", "a|b。"))  # "." is not in the seed's SENT_END


def test_the_draft_model_gets_the_seed_parameters_and_160_ms_float32_chunks(capfd: pytest.CaptureFixture[str]) -> None:
    d = ListDraft([None] * 3, final="好。")
    run(d, 3, FW(), tail=100)
    assert d.init_kwargs == {"context": "", "language": "Chinese", "unfixed_chunk_num": 0, "unfixed_token_num": 1,
                             "chunk_size_sec": 0.160}
    assert [c["n"] for c in d.calls] == [CH, CH, CH - 100]
    assert all(c["dtype"] == np.float32 and c["max_new_tokens"] == 4 for c in d.calls)
    out, err = capfd.readouterr()
    assert out == "" and "R2T2 prints" in err


class SlowDraft(ListDraft):
    """A ListDraft that takes a seeded random time per chunk, so the final-stage thread interleaves with it."""

    def __init__(self, snaps: list[str | None], rng: random.Random, max_delay: float) -> None:
        super().__init__(snaps)
        self.rng, self.max_delay = rng, max_delay

    def streaming_transcribe(self, pcm16k: np.ndarray, state: State,
                             max_new_tokens: int | None = None) -> tuple[str, str]:
        time.sleep(self.rng.uniform(0, self.max_delay))
        return super().streaming_transcribe(pcm16k, state, max_new_tokens)


@pytest.mark.parametrize("seed", range(12))
def test_thread_inline_and_after_modes_return_the_same_result(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(1, 50)
    text, snaps = "", list[str | None]()
    for _ in range(n):
        text += rng.choice(["字", "。", "|", "", ""])
        snaps.append(text or None)
    # chunk k holds the value k + 1, so the fw text names exactly the samples it was given
    pcm = np.repeat(np.arange(1, n + 1, dtype=np.float32), CH)[:n * CH - rng.randint(0, CH - 1)]
    results = []
    for mode in v2c.MODES:
        delays = random.Random(seed + 1000)  # the same per-window delays (and draft delays) in every mode
        on_main: list[bool] = []

        def fw(audio: np.ndarray, delays: random.Random = delays, on_main: list[bool] = on_main) -> str:
            on_main.append(threading.current_thread() is threading.main_thread())
            time.sleep(delays.uniform(0.0, 0.008))  # fw lags the draft by a different time per window
            return f"<{int(audio[0])}-{int(audio[-1])}:{len(audio)}>"

        rec = Rec()
        out = v2c.run(SlowDraft(list(snaps), random.Random(seed + 2000), 0.002), pcm, "Chinese", fw, emit=rec,
                      mode=mode)
        r = to_json(v2c.result("hybrid-asr-v2c", "Chinese", "zh", out, len(pcm)))
        assert len(on_main) == r["fw_calls"] == sum(v2c.truncation(w["text"]) is not None for w in r["sent_windows"])
        assert all(m == (mode != "thread") for m in on_main)  # thread mode really ran fw beside the draft
        assert [e[1] for e in rec.sentences()] == list(range(len(r["per_sentence"])))  # emitted in order
        results.append((r["per_sentence"], r["sent_windows"], r["fw_calls"], r["final"], rec.sentences()))
    assert results[0] == results[1] == results[2]


def test_sentences_are_emitted_in_order_while_the_draft_continues() -> None:
    gate = threading.Event()
    seen: list[int] = []

    def slow_fw(audio: np.ndarray) -> str:
        gate.wait(5)
        return "慢"

    class Draft(ListDraft):
        def streaming_transcribe(self, pcm16k: np.ndarray, state: State,
                             max_new_tokens: int | None = None) -> tuple[str, str]:
            seen.append(self.i)
            if self.i == 6:
                gate.set()  # the fw thread was still busy with window 0 while we went on
            return super().streaming_transcribe(pcm16k, state, max_new_tokens)

    r, rec = run(Draft(["甲|。", None, "甲|。乙。", None, None, None, None, None]), 8, slow_fw, mode="thread")
    assert seen == list(range(8))
    assert [e[1:4] for e in rec.sentences()] == [(0, "慢", "fw"), (1, "乙。", "draft")]
    assert r["final"] == "慢 乙。"  # whisper's sentence ended without 。: a space, not one run-on sentence


def test_cancel_is_checked_between_chunks() -> None:
    calls = {"n": 0}

    def cancelled() -> bool:
        calls["n"] += 1
        return calls["n"] > 3

    d = ListDraft([None] * 10)
    with pytest.raises(EngineError) as e:
        v2c.run(d, np.zeros(10 * CH, np.float32), "Chinese", FW(), emit=Rec(), cancelled=cancelled)
    assert e.value.code == "cancelled" and len(d.calls) == 3


def test_a_failing_final_stage_thread_reaches_the_caller() -> None:
    def broken(audio: np.ndarray) -> str:
        raise RuntimeError("CUDA failed")

    with pytest.raises(RuntimeError, match="CUDA failed"):
        run(ListDraft(["甲|。"] + [None] * 30), 31, broken, mode="thread")


def test_segments_carry_their_offsets_into_windows_and_times() -> None:
    class PerSegment(ListDraft):
        def init_streaming_state(self, **kw: Any) -> State:
            self.i = 0  # a fresh state per segment
            return super().init_streaming_state(**kw)

    pcm = np.zeros(10 * CH, np.float32)
    rec = Rec()
    out = v2c.run(PerSegment([None, "好。", None, None]), pcm, "Chinese", FW(), emit=rec,
                  segments=[(0, 4 * CH), (6 * CH, 10 * CH)])
    assert to_builtins(out.sent_windows) == [{"text": "好。", "start_chunk": 0, "end_chunk": 1, "truncated_by": None},
                                {"text": "好。", "start_chunk": 6, "end_chunk": 7, "truncated_by": None}]
    assert [(p.start_s, p.end_s) for p in out.per_sentence] == [(0.0, 0.32), (0.96, 1.28)]
    assert [e[1] for e in rec.sentences()] == [0, 1] and out.first_text_s == pytest.approx(0.32)
    assert rec.segments == [0, 1]  # each segment's draft says which segment it belongs to
    with pytest.raises(ValueError):
        v2c.run(PerSegment([]), pcm, "Chinese", None, emit=rec, segments=[(100, 200)])


def test_the_scripted_draft_closes_one_window_per_script_sentence() -> None:
    script = "今天天气很好。我们去公园散步|吧。最后一句没有句号"
    pcm = np.zeros(16000 * 3, np.float32)
    out = v2c.run(ScriptedDraft(script, len(pcm)), pcm, "Chinese", FW([""] * 5), emit=Rec())
    assert [w.text for w in out.sent_windows] == ["今天天气很好。", "我们去公园散步|吧。", "最后一句没有句号"]
    assert [p.engine for p in out.per_sentence] == ["draft", "fw", "fw"] and out.fw_calls == 2


def test_the_fake_engine_runs_through_v2c_with_its_default_script() -> None:
    rec = Rec()
    r = to_json(FakeEngine(env={}).transcribe(np.zeros(32000, np.float32), "Chinese", Options(), rec, lambda: False))
    assert r["final"] == "今天天气很好。我们去公园散步" and r["fw_calls"] == 1
    assert r["draft"] == "今天天气很好。我们去公园散步|吧。"
    assert [(p["engine"], p["start_s"]) for p in r["per_sentence"]] == [("draft", 0.0),
                                                                      ("fw", r["per_sentence"][0]["end_s"])]
    assert rec.events[-1] == ("progress", 2.0, 2.0)


def test_replacement_characters_from_the_drafts_finish_reach_neither_drafts_nor_finals() -> None:
    """Issue 31 #11: R2T2's finish decodes the rolled-back prefix without the replacement-character loop its
    streaming step has: `我们明天见。�麒麟` reached the draft events and the final."""
    r, rec = run(ListDraft(["我们明天见。", None], final="我们明天见。\ufffd好的\u200b。"), 3, FW())
    texts = [e[1] for e in rec.events if e[0] == "draft"] + [e[2] for e in rec.sentences()]
    texts += [r["final"], r["draft"]] + [p["text"] for p in r["per_sentence"]] + [w["text"] for w in r["sent_windows"]]
    assert not [t for t in texts if "\ufffd" in t or "\u200b" in t], texts
    assert r["final"] == "我们明天见。好的。" and r["fw_calls"] == 0  # still a closed sentence: the draft's


def test_the_drafts_finish_is_covered_by_the_heartbeat() -> None:
    """Issue 31 #12: R2T2's finish (up to 64 tokens) sent no progress, so a slow device's finish could run
    into the stall watchdog (HASR_STALL_SEC) of a healthy worker."""
    seen: list[int] = []

    class SlowFinish(ListDraft):
        def finish_streaming_transcribe(self, state: State, max_new_tokens: int | None = None) -> str:
            seen.append(len(rec.events))
            time.sleep(0.5)
            seen.append(len(rec.events))
            return super().finish_streaming_transcribe(state, max_new_tokens)

    rec = Rec()
    pcm = np.zeros(3 * CH, dtype=np.float32)
    v2c.run(SlowFinish(["好。", None], final="好。"), pcm, "Chinese", FW(), emit=rec, mode="inline",
            heartbeat_s=0.05)
    during = rec.events[seen[0]:seen[1]]
    assert len(during) >= 3 and all(e[0] == "progress" for e in during), during

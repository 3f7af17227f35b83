"""The hybrid engine on the CPU: a scripted (or stand-in R2T2) draft + the real faster-whisper final stage.

Audio: three Chinese clips with 1 s pauses. The draft scripts are laid out so that sentence k's window covers
clip k: sentence 1 is complete (its draft text must survive untouched), sentence 2 carries ``|`` and sentence
3 has no end mark, so exactly those two windows go to faster-whisper, whose text must be the clip's speech.
Measured CER of those fw sentences with whisper base (int8): jishu window 0.00, pangrama window 0.375
(whisper writes some traditional characters); thresholds 0.40 / 0.50. The scripted draft does not lag the
audio, so each window, reaching v2c.LAG_CHUNKS (0.8 s) + 0.32 s back for R2T2's lag, also hears the last
~0.5 s of the previous clip; fw did not carry any of it into the text. (With windows starting at the chunk
after the previous close the jishu window measured 0.10.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from speech import CLIPS, SR, STAND_IN, error_rate, load, model_dir, with_path
from workerclient import WorkerClient

from hasrd import config
from hasrd.languages import join_sentences
from hasrd.options import Fake, Options
from hasrd.transcript import to_json
from hasrd import protocol as p
from hasrd.worker.engine import NullEmitter
from hasrd.worker.engines.hybrid import HybridEngine

NAMES = ["zh_nihao_shijie", "zh_jishu", "zh_pangrama"]
MAX_CER = {"zh_jishu": 0.40, "zh_pangrama": 0.50}
GAP = np.zeros(SR, np.float32)


@pytest.fixture(scope="module")
def audio() -> tuple[np.ndarray, list[float]]:
    """The three clips with pauses, and the mid-points of the pauses (s) plus the end."""
    clips = [load(n) for n in NAMES]
    pcm = np.concatenate([clips[0], GAP, clips[1], GAP, clips[2]])
    b1 = (len(clips[0]) + len(GAP) / 2) / SR
    b2 = (len(clips[0]) + len(clips[1]) + 1.5 * len(GAP)) / SR
    return pcm, [b1, b2, len(pcm) / SR]


def script_for(bounds: list[float]) -> list[str]:
    """Sentences whose lengths follow the pauses (10 characters a second), so windows fall on the clips."""
    lens = [round(10 * (b - a)) for a, b in zip([0.0] + bounds, bounds, strict=False)]
    return ["你好世界" + "嗯" * (lens[0] - 5) + "。", "一二三|" + "嗯" * (lens[1] - 5) + "。",
            "天地玄黄" + "嗯" * (lens[2] - 4)]


def check(r: dict[str, Any], drafts: list[str]) -> None:
    """fw_calls == truncated windows, and fw text replaces exactly those sentences."""
    assert [w["text"] for w in r["sent_windows"]] == drafts
    assert [s["engine"] for s in r["per_sentence"]] == ["draft", "fw", "fw"] and r["fw_calls"] == 2
    assert r["per_sentence"][0]["text"] == drafts[0]
    for s, name in zip(r["per_sentence"][1:], NAMES[1:], strict=True):
        assert "嗯" not in s["text"] and "|" not in s["text"]
        assert error_rate("zh", CLIPS[name][1], s["text"]) <= MAX_CER[name], (name, s["text"])
    # sentences joined by the language's rule: nothing after 。, a space where whisper wrote no end mark
    assert r["final"] == join_sentences([s["text"] for s in r["per_sentence"]], "zh")


def scripted(mode: str = "thread") -> HybridEngine:
    s = config.load(env={"HASR_DRAFT": "scripted", "HASR_V2C_FINAL": mode})
    e = HybridEngine(s, model_dir(), "cpu", "int8", env={})
    e.load(lambda s: None)
    return e


def test_scripted_draft_with_real_faster_whisper_replaces_exactly_the_truncated_sentences(audio: Any) -> None:
    pcm, bounds = audio
    drafts = script_for(bounds)
    e = scripted()
    r = to_json(e.transcribe(pcm, "Chinese", Options(fake=Fake(script="".join(drafts))), NullEmitter(), lambda: False))
    assert r["engine"] == "hybrid-asr-v2c" and r["language"] == "Chinese"
    check(r, drafts)
    for s, b in zip(r["per_sentence"], bounds, strict=True):  # windows end at the chunk where the pause was reached
        assert abs(s["end_s"] - b) <= 0.2


def test_the_final_stage_in_a_thread_gives_the_sequential_result(audio: Any) -> None:
    pcm, bounds = audio
    opts = Options(fake=Fake(script="".join(script_for(bounds))))
    results = [to_json(scripted(mode).transcribe(pcm, "Chinese", opts, NullEmitter(), lambda: False))
               for mode in ("thread", "after")]
    for key in ("per_sentence", "sent_windows", "final", "fw_calls", "draft"):
        assert results[0][key] == results[1][key]


def test_the_hybrid_engine_drives_a_stand_in_r2t2_with_real_faster_whisper(
        audio: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    pcm, bounds = audio
    weights = tmp_path / "Confucius4-R2T2"
    weights.mkdir()
    (weights / "config.json").write_text(json.dumps({}))
    # R2T2 writes "|" after 一二三 for a while (the library cuts it out of state.text), then the rest of the
    # sentence; the observed generation marks sentence 2 as truncated although no "|" is left in the draft.
    snaps = ["你好世界。", "你好世界。一二三|四五。", "你好世界。一二三四五。", "你好世界。一二三四五。天地玄黄宇宙"]
    times = [bounds[0] - 0.2, (bounds[0] + bounds[1]) / 2, bounds[1] - 0.2, bounds[2] - 0.05]
    (weights / "script.tsv").write_text("".join(f"{t:.2f}\t{s}\n" for t, s in zip(times, snaps, strict=True)),
                                        encoding="utf-8")
    monkeypatch.delitem(sys.modules, "r2t2", raising=False)
    monkeypatch.syspath_prepend(str(STAND_IN / "real"))
    s = config.load(env={"HASR_R2T2_MODEL": str(weights)})
    e = HybridEngine(s, model_dir(), "cpu", "int8", cuda=lambda: (True, "stand-in"), env={})
    ident = e.load(lambda s: None).identity
    assert ident["models"]["draft"]["path"] == str(weights) and ident["models"]["final"]["path"] == model_dir()
    r = to_json(e.transcribe(pcm, "zh", Options(), NullEmitter(), lambda: False))
    check(r, ["你好世界。", "一二三四五。", "天地玄黄宇宙"])
    assert [s["truncated_by"] for s in r["per_sentence"]] == [None, "bar", "no_end_mark"]


def test_through_the_worker_subprocess_fw_calls_match_the_truncated_windows(audio: Any) -> None:
    pcm, bounds = audio
    drafts = script_for(bounds)
    w = WorkerClient("hybrid", env={"HASR_DRAFT": "scripted", "HASR_FAKE_SCRIPT": "".join(drafts),
                                    "HASR_FW_MODEL": model_dir(), "HASR_FW_DEVICE": "cpu",
                                    "PYTHONPATH": with_path()})
    try:
        ready = w.handshake()[-1]
        assert isinstance(ready, p.Ready), ready
        assert ready.identity["models"]["draft"]["name"] == "scripted"
        events, res = w.transcribe(1, pcm, language="Chinese")
        assert isinstance(res, p.Result), res
        check(to_json(res.result), drafts)
        sent = [e for e in events if isinstance(e, p.Sentence)]
        assert [(e.index, e.engine) for e in sent] == [(0, "draft"), (1, "fw"), (2, "fw")]
        assert any(isinstance(e, p.Draft) for e in events)
    finally:
        w.close()


def test_a_language_r2t2_does_not_know_runs_faster_whisper_alone_with_a_note(
        audio: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    pcm, _bounds = audio
    weights = tmp_path / "Confucius4-R2T2"
    weights.mkdir()
    (weights / "config.json").write_text("{}")
    (weights / "script.tsv").write_text("0.5\t你好。\n", encoding="utf-8")
    monkeypatch.delitem(sys.modules, "r2t2", raising=False)
    monkeypatch.syspath_prepend(str(STAND_IN / "real"))
    e = HybridEngine(config.load(env={"HASR_R2T2_MODEL": str(weights)}), model_dir(), "cpu", "int8",
                     cuda=lambda: (True, "stand-in"), env={})
    e.load(lambda s: None)
    calls = e.draft.generate_calls
    # Whisper knows it, R2T2 not
    r = to_json(e.transcribe(pcm[: 3 * SR], "Swahili", Options(), NullEmitter(), lambda: False))
    assert e.draft.generate_calls == calls  # the draft was never asked
    assert r["engine"] == "whisper" and r["language"] == "Swahili" and "R2T2 does not know Swahili" in r["note"]
    assert r["fw_calls"] >= 1

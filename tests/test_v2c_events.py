"""v2c's events and result fields (issue 21, defect 7): sentence events numbered by their long-audio segment,
progress kept alive while one faster-whisper window runs, first_text_s within the audio, and
``language_detected`` only when R2T2 named a language. No models: scripted drafts and a window function that
waits on the events it must see."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from speech import STAND_IN

from hasrd import config
from hasrd.options import Options
from hasrd.transcript import to_json
from hasrd.worker import v2c
from hasrd.worker.engines.r2t2 import R2T2Engine
from test_v2c import ListDraft

CH = v2c.CHUNK


class Rec:
    """An emitter like the worker's: ``sentence`` takes the segment."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.progress_seen = threading.Condition()
        self.n_progress = 0

    def progress(self, done_s: float, total_s: float, phase: str = "decoding") -> None:
        with self.progress_seen:
            self.events.append(("progress", done_s, total_s))
            self.n_progress += 1
            self.progress_seen.notify_all()

    def draft(self, text: str, segment: int = 0) -> None:
        self.events.append(("draft", text, segment))

    def sentence(self, index: int, text: str, engine: str, start_s: float, end_s: float, segment: int = 0) -> None:
        self.events.append(("sentence", index, text, segment))


class Snaps:
    """One ListDraft per segment (v2c opens a fresh state per segment: each segment's draft starts again)."""

    def __init__(self, per_segment: list[list[str | None]]) -> None:
        self.drafts = [ListDraft(s) for s in per_segment]
        self.k = -1

    def init_streaming_state(self, **kw: Any) -> Any:
        self.k += 1
        return self.drafts[self.k].init_streaming_state(**kw)

    def streaming_transcribe(self, pcm16k: np.ndarray, state: Any, max_new_tokens: int | None = None) -> Any:
        return self.drafts[self.k].streaming_transcribe(pcm16k, state, max_new_tokens)

    def finish_streaming_transcribe(self, state: Any, max_new_tokens: int | None = None) -> str:
        return self.drafts[self.k].finish_streaming_transcribe(state, max_new_tokens)


def test_sentence_events_carry_the_segment_their_draft_events_carry() -> None:
    seg = 10  # chunks per segment
    snaps = [["你好。"] * seg, [None, "一二。"] + ["一二。"] * (seg - 2), ["天地。"] * seg]
    rec = Rec()
    pcm = np.zeros(3 * seg * CH, np.float32)
    out = v2c.run(Snaps(snaps), pcm, "Chinese", None, emit=rec, mode="inline",
                  segments=[(k * seg * CH, (k + 1) * seg * CH) for k in range(3)])
    sents = [e for e in rec.events if e[0] == "sentence"]
    assert [(e[1], e[2], e[3]) for e in sents] == [(0, "你好。", 0), (1, "一二。", 1), (2, "天地。", 2)]
    drafts = {e[1]: e[2] for e in rec.events if e[0] == "draft"}
    assert drafts == {"你好。": 0, "一二。": 1, "天地。": 2}
    assert out.segments == 3


@pytest.mark.parametrize("mode", v2c.MODES)
def test_progress_goes_on_while_one_long_window_runs(mode: str) -> None:
    """The window call returns only once the heartbeat sent three progress events during it: without one it
    never would (the test's own state, no wall time), and the daemon's stall watchdog would fire."""
    rec = Rec()
    calls: list[int] = []

    def slow_window(audio: np.ndarray) -> str:
        with rec.progress_seen:
            start = rec.n_progress
            ok = rec.progress_seen.wait_for(lambda: rec.n_progress >= start + 3, timeout=60)
        calls.append(rec.n_progress - start)
        assert ok, "no progress while the window ran"
        return "<fw>"

    snaps: list[str | None] = [None, "你好", "你好世界"] + [None] * 7  # no end mark: one truncated window
    out = v2c.run(ListDraft(snaps), np.zeros(10 * CH, np.float32), "Chinese", slow_window, emit=rec, mode=mode,
                  heartbeat_s=0.05)
    assert out.fw_calls == 1 and calls and calls[0] >= 3
    assert [p.text for p in out.per_sentence] == ["<fw>"]
    progress = [e for e in rec.events if e[0] == "progress"]
    assert progress[-1] == ("progress", 1.6, 1.6)
    assert all(a[1] <= b[1] for a, b in zip(progress, progress[1:], strict=False))  # beats re-send, never go back


def test_first_text_s_is_never_past_the_end_of_the_audio() -> None:
    # 7.068 s: the last chunk is short; the text appears only at the finish or in the last chunk
    n = int(7.068 * 16000)
    chunks = v2c.n_chunks(n)
    for snaps, final in (([None] * chunks, "你好。"), ([None] * (chunks - 1) + ["你好"], "你好。")):
        out = v2c.run(ListDraft(snaps, final), np.zeros(n, np.float32), "Chinese", None, emit=Rec(), mode="inline")
        assert out.first_text_s == 7.068
    out = v2c.run(ListDraft([None, "你"] + [None] * (chunks - 2), "你好。"), np.zeros(n, np.float32), "Chinese",
                  None, emit=Rec(), mode="inline", segments=[(0, 44 * CH), (44 * CH, n)])
    assert out.first_text_s == 0.32


@pytest.fixture
def silent_r2t2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The library-like stand-in whose model never writes a language tag (nothing it could name)."""
    import sys

    d = tmp_path / "Confucius4-R2T2"
    d.mkdir()
    (d / "config.json").write_text("{}")
    (d / "script.tsv").write_text("".join(f"@{i}\t\n" for i in range(64)), encoding="utf-8")
    monkeypatch.delitem(sys.modules, "r2t2", raising=False)
    monkeypatch.syspath_prepend(str(STAND_IN / "real"))
    yield d


def test_language_detected_is_false_when_r2t2_named_no_language(silent_r2t2: Path) -> None:
    from hasrd.worker.engine import NullEmitter

    eng = R2T2Engine(config.load(env={"HASR_R2T2_MODEL": str(silent_r2t2)}), cuda=lambda: (True, "stand-in"))
    eng.load(lambda s: None)
    r = to_json(eng.transcribe(np.zeros(int(1.0 * 16000), np.float32), "", Options(), NullEmitter(), lambda: False))
    assert r["language"] == "" and r["language_detected"] is False and r["final"] == ""

"""The live draft session's result (issue 21, defect 7): the file result's fields that docs/API.md promises,
``sent_windows``, ``truncated_by`` per sentence and ``language``, from a DraftLive over the library-like R2T2
stand-in and real speech (silero VAD cuts the utterances), with a recording window function."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from speech import SR, load
from test_v2c_r2t2 import stand_in

from hasrd.worker.engines.r2t2 import observing
from hasrd.transcript import to_json
from hasrd.worker.live_draft import DraftLive


class Rec:
    def __init__(self) -> None:
        self.sentences: list[dict[str, Any]] = []

    def progress(self, done_s: float, total_s: float, phase: str = "decoding") -> None:
        pass

    def draft(self, text: str, segment: int = 0) -> None:
        pass

    def sentence(self, index: int, text: str, engine: str, start_s: float, end_s: float, segment: int = 0) -> None:
        self.sentences.append({"index": index, "text": text, "engine": engine, "segment": segment})

    def turn(self, segment: int, kind: str, start_s: float = 0.0, end_s: float = 0.0, text: str = "") -> None:
        pass


@pytest.mark.parametrize("language", ["Chinese", None])
def test_the_live_result_has_sent_windows_truncated_by_and_the_language(language: str | None) -> None:
    # per utterance: "你好" with a "|" the library hides, then "你好世界" without an end mark -> truncated
    model = observing(stand_in.R2T2ASRModel)([(0.5, "你好|"), (1.2, "你好世界")], {}, {}, {}, 4)
    heard: list[tuple[int, int]] = []

    def fw(audio: np.ndarray) -> str:
        heard.append((len(heard), len(audio)))
        return f"<fw{len(heard)}>"

    gap = np.zeros(SR, np.float32)
    pcm = np.concatenate([gap, load("zh_nihao_shijie"), gap, load("zh_jishu"), gap])
    rec = Rec()
    live = DraftLive(model, language, fw, "inline", rec, lambda: False, {}, code="zh" if language else "")
    for i in range(0, len(pcm), 2560):
        live.feed(pcm[i:i + 2560])
    r = to_json(live.finish())
    assert r["language"] == "Chinese"  # asked for, or what R2T2 named
    ws = r["sent_windows"]
    assert len(ws) == 2 and [w["truncated_by"] for w in ws] == ["bar", "bar"]
    assert all(set(w) == {"text", "start_chunk", "end_chunk", "truncated_by"} for w in ws)
    assert ws[0]["end_chunk"] < ws[1]["start_chunk"] + 5 and ws[0]["start_chunk"] <= ws[0]["end_chunk"]
    assert [(s["text"], s["engine"], s["truncated_by"]) for s in r["per_sentence"]] == [
        ("<fw1>", "fw", "bar"), ("<fw2>", "fw", "bar")]
    assert r["fw_calls"] == 2 == len(heard)



def test_replacement_characters_of_the_drafts_finish_reach_no_live_sentence() -> None:
    """Issue 31 #11, live: R2T2's finish (at each utterance's end) decodes without the replacement-character
    loop of its streaming step; what it decoded into U+FFFD is never shown."""
    from test_v2c import ListDraft

    gap = np.zeros(SR, np.float32)
    pcm = np.concatenate([gap, load("zh_nihao_shijie"), gap])
    model = ListDraft(["你好。"] * 2, final="你好。\ufffd世界\u200b。")
    rec = Rec()
    live = DraftLive(model, "Chinese", lambda audio: "<fw>", "inline", rec, lambda: False, {}, code="zh")
    for i in range(0, len(pcm), 2560):
        live.feed(pcm[i:i + 2560])
    r = to_json(live.finish())
    texts = [s["text"] for s in rec.sentences] + [s["text"] for s in r["per_sentence"]] + [r["final"]]
    assert "世界。" in r["final"] and not [t for t in texts if "\ufffd" in t or "\u200b" in t], texts

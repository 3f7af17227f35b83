"""The Chinese script the user receives, through the real worker and daemon: the fake engine for every tag and
HASR_ZH_SCRIPT, a live session over /v1/realtime, real faster-whisper on Mandarin, and the routes refusing tags
that are not languages before any work.

"Only simplified" / "only traditional" are checked with OpenCC's own tables (t2s / s2t leave the text as it is).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from daemon import Hasrd, write_wav
from live_client import LiveClient, pcm16_24k
from speech import SR, load, model_dir, with_path
from workerclient import WorkerClient

from hasrd.languages import join_sentences
from hasrd import protocol as p
from hasrd.transcript import to_json
from hasrd import zhscript as z

# Traditional characters, ASCII marks and a space between characters: what whisper writes for Mandarin.
SCRIPT = "這個軟件很好, 我们走吧.信息在哪里?"
EXPECTED = {
    "zh": ("这个软件很好，我们走吧。信息在哪里？", "simplified", "t2s"),
    "zh-CN": ("这个软件很好，我们走吧。信息在哪里？", "simplified", "t2s"),
    "zh-Hans": ("这个软件很好，我们走吧。信息在哪里？", "simplified", "t2s"),
    "Mandarin": ("这个软件很好，我们走吧。信息在哪里？", "simplified", "t2s"),
    "zh-TW": ("這個軟體很好，我們走吧。資訊在哪裡？", "traditional", "s2twp"),
    "zh-HK": ("這個軟件很好，我們走吧。信息在哪裏？", "traditional", "s2hk"),
    "zh-Hant": ("這個軟件很好，我們走吧。信息在哪裏？", "traditional", "s2t"),
    "yue": ("這個軟件很好，我們走吧。信息在哪裏？", "traditional", "s2hk"),
    "": ("这个软件很好，我们走吧。信息在哪里？", "simplified", "t2s"),  # detected Chinese: the setting
    "en": (SCRIPT, None, None),  # not Chinese: not touched
}
ASCII_NEXT_TO_HAN = re.compile(r"[\u4e00-\u9fff]\s*[,.?!:;()]|[,?!:;()]\s*[\u4e00-\u9fff]")
SPACE_BETWEEN_HAN = re.compile(r"[\u4e00-\u9fff]\s+[\u4e00-\u9fff]")


def simplified_only(text: str) -> bool:
    return z.opencc("t2s")(text) == text and not ASCII_NEXT_TO_HAN.search(text) and not SPACE_BETWEEN_HAN.search(text)


def traditional_only(text: str) -> bool:
    return z.opencc("s2t")(text) == text and not ASCII_NEXT_TO_HAN.search(text) and not SPACE_BETWEEN_HAN.search(text)


def texts_of(events: list[p.WorkerMsg]) -> tuple[list[str], list[str]]:
    return ([e.text for e in events if isinstance(e, p.Sentence)], [e.text for e in events if isinstance(e, p.Draft)])


def test_the_fake_engine_through_the_worker_writes_each_tags_script_everywhere() -> None:
    w = WorkerClient("fake", env={"HASR_FAKE_SCRIPT": SCRIPT, "HASR_ZH_SCRIPT": "simplified", "HASR_LANGUAGE": ""})
    try:
        assert isinstance(w.handshake()[-1], p.Ready)
        for i, (tag, (want, script, conversion)) in enumerate(EXPECTED.items(), 1):
            events, res = w.transcribe(i, np.zeros(2 * SR, np.float32), language=tag)
            assert isinstance(res, p.Result), (tag, res)
            r = to_json(res.result)
            sentences, drafts = texts_of(events)
            assert r["final"] == want and "".join(s["text"] for s in r["per_sentence"]) == want, tag
            assert sentences == [s["text"] for s in r["per_sentence"]], tag
            assert drafts and drafts[-1] == want and r["draft"] == want, tag
            assert [x["text"] for x in r["sent_windows"]] == [want], tag
            assert (r["script"], r["script_conversion"]) == (script, conversion), tag
    finally:
        w.close()


def test_hasr_zh_script_decides_for_a_plain_zh_and_detected_chinese_but_not_for_a_tag() -> None:
    for setting, plain in [("traditional", "這個軟件很好，我們走吧。信息在哪裏？"),
                           ("as-is", "這個軟件很好，我们走吧。信息在哪里？")]:
        w = WorkerClient("fake", env={"HASR_FAKE_SCRIPT": SCRIPT, "HASR_ZH_SCRIPT": setting, "HASR_LANGUAGE": ""})
        try:
            w.handshake()
            got = {}
            for i, tag in enumerate(["zh", "Chinese", "", "zh-CN", "zh-TW"], 1):
                _events, res = w.transcribe(i, np.zeros(2 * SR, np.float32), language=tag)
                assert isinstance(res, p.Result), res
                got[tag] = (to_json(res.result)["final"], to_json(res.result)["script"])
        finally:
            w.close()
        assert got["zh"] == got["Chinese"] == got[""] == (plain, setting)
        assert got["zh-CN"] == (EXPECTED["zh-CN"][0], "simplified")
        assert got["zh-TW"] == (EXPECTED["zh-TW"][0], "traditional")


# ---- the daemon ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fake(module_tmp: str) -> Iterator[Hasrd]:
    h = Hasrd(os.path.join(module_tmp, "s"), env={"HASR_FAKE_SCRIPT": SCRIPT, "HASR_LIVE_IDLE_SEC": "10"})
    try:
        yield h
    finally:
        h.stop()


@pytest.mark.parametrize("tag", ["zh-XX-foo", "zh-Latn", "zh-hakka", "chinese-tw"])
def test_a_tag_that_is_not_a_language_is_refused_before_any_work(fake: Hasrd, tmp_path: Path, tag: str) -> None:
    wav = write_wav(str(tmp_path / "a.wav"), 0.5)
    with fake.client() as c:
        served = c.get("/api/ps").json()
        for r in (c.post("/transcribe", json={"audio_path": wav, "language": tag}),
                  c.post("/v1/audio/transcriptions", data={"path": wav, "language": tag})):
            assert r.status_code == 400, r.text
            err = r.json()["error"]
            assert err["code"] == "unknown_language" and tag in err["message"]
            assert "'zh-TW'" in err["message"] and "'Chinese'" in err["message"]
        assert c.get("/api/ps").json().get("pid") == served.get("pid")  # no worker started for it


def test_the_http_routes_pass_the_tag_through_to_the_worker(fake: Hasrd, tmp_path: Path) -> None:
    wav = write_wav(str(tmp_path / "a.wav"), 2.0)
    with fake.client(120) as c:
        r = c.post("/transcribe", json={"audio_path": wav, "language": "zh-TW"})
        assert r.status_code == 200, r.text
        assert r.json()["final"] == EXPECTED["zh-TW"][0] and r.json()["script"] == "traditional"
        r = c.post("/v1/audio/transcriptions", data={"path": wav, "language": "zh-HK", "response_format": "json"})
        assert r.status_code == 200 and r.json()["text"] == EXPECTED["zh-HK"][0], r.text
        r = c.post("/v1/audio/transcriptions", data={"path": wav, "language": "zh", "response_format": "text"})
        assert r.status_code == 200 and r.text.strip() == EXPECTED["zh"][0]


def test_a_live_session_in_zh_tw_sends_taiwan_script_in_every_event(fake: Hasrd) -> None:
    gap = np.zeros(int(1.2 * SR), np.float32)
    c = LiveClient(fake.sock)
    try:
        c.wait_for("transcription_session.created")
        c.update(language="zh-TW")
        c.feed(pcm16_24k(np.concatenate([gap, load("en_quick_brown_fox"), gap])), realtime=False)
        result = c.finish()
    finally:
        c.close()
    want = EXPECTED["zh-TW"][0]
    sentences = [s["text"] for s in c.of("hasr.sentence")]
    assert "".join(sentences) == want and all(traditional_only(s) for s in sentences)
    drafts = [d for d in c.of("hasr.draft") if d.get("text")]
    assert drafts and all(traditional_only(d["text"]) for d in drafts)
    completed = c.of("conversation.item.input_audio_transcription.completed")
    assert [e["transcript"] for e in completed] == [want]
    assert result["final"] == want and result["turns"][0]["text"] == want
    assert result["script"] == "traditional" and result["script_conversion"] == "s2twp"


# ---- real faster-whisper ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mandarin() -> np.ndarray:
    """Mandarin that whisper base writes in traditional characters with ASCII marks (measured in-process:
    "今天天天氣很好,我們去公園散步吧!請問我這場怎麼走?..."): four espeak-ng sentences and a Kokoro clip."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("hasr_corpus",
                                                  Path(__file__).parent.parent / "benchmarks" / "corpus.py")
    assert spec is not None and spec.loader is not None
    corpus = sys.modules.get("hasr_corpus") or importlib.util.module_from_spec(spec)
    if "hasr_corpus" not in sys.modules:
        sys.modules["hasr_corpus"] = corpus
        spec.loader.exec_module(corpus)
    gap = np.zeros(int(0.6 * SR), np.float32)
    parts = []
    for sentence in (corpus.ZH[0], corpus.ZH[3], corpus.ZH[12], corpus.ZH[15]):
        parts += [corpus.speak(sentence, "zh"), gap]
    return np.concatenate(parts + [load("zh_pangrama"), gap])


def test_real_whisper_on_mandarin_gives_simplified_for_zh_and_traditional_for_zh_tw(mandarin: np.ndarray) -> None:
    w = WorkerClient("whisper", env={"HASR_FW_MODEL": model_dir(), "HASR_FW_DEVICE": "cpu", "HASR_LANGUAGE": "",
                                     "HASR_ZH_SCRIPT": "simplified", "PYTHONPATH": with_path()})
    results: dict[str, dict[str, Any]] = {}
    try:
        ready = w.handshake()[-1]
        assert isinstance(ready, p.Ready), ready
        for i, tag in enumerate(["zh", "zh-TW"], 1):
            events, res = w.transcribe(i, mandarin, language=tag)
            assert isinstance(res, p.Result), res
            sentences, _drafts = texts_of(events)
            assert sentences == [s["text"] for s in to_json(res.result)["per_sentence"]]
            results[tag] = to_json(res.result)
    finally:
        w.close()
    zh, tw = results["zh"], results["zh-TW"]
    # a sentence whisper ended without a mark is followed by a space (issue 32 #8), the only space between Han
    assert z.has_han(zh["final"]) and all(simplified_only(s["text"]) for s in zh["per_sentence"]), zh["final"]
    # whisper base writes this audio with 23 traditional characters and 8 ASCII marks (measured in-process)
    assert sum(c in "，。？！" for c in zh["final"]) >= 3 and sum(c in "，。？！" for c in tw["final"]) >= 3
    assert all(traditional_only(s["text"]) for s in tw["per_sentence"]), tw["final"]
    assert z.script_of(tw["final"])[0] == "traditional", tw["final"]
    assert zh["final"] != tw["final"]  # the same decoding, written two ways
    for r, script in ((zh, "simplified"), (tw, "traditional")):
        assert r["final"] == join_sentences([s["text"] for s in r["per_sentence"]], "zh") and r["script"] == script

"""Engine code against a stub WhisperModel (no model, fast): what reaches faster-whisper, and that everything an
engine sends over the worker channel can be encoded (faster-whisper hands out numpy.float64)."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from hasrd import config
from hasrd import protocol as p
from hasrd.options import Options
from hasrd.transcript import TimedSentence, Transcript, Word, to_json
from hasrd.worker.engines.fake import FakeEngine
from hasrd.worker.engines.hybrid import HybridEngine
from hasrd.worker.engines.whisper import WhisperEngine
from hasrd.languages import UnknownLanguage, resolve

SR = 16000


class StubWhisper:
    """Records every ``transcribe`` call's keyword arguments; answers one segment per call with numpy.float64
    times and probabilities, as faster-whisper 1.x does once word timestamps are on."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def transcribe(self, audio: np.ndarray, **kw: Any) -> tuple[Any, Any]:
        self.calls.append(kw)
        dur = np.float64(len(audio) / SR)
        words = None
        if kw.get("word_timestamps"):
            words = [SimpleNamespace(word=" hello", start=np.float64(0.1), end=np.float64(0.4),
                                     probability=np.float64(0.91234567)),
                     SimpleNamespace(word=" world", start=np.float64(0.4), end=dur, probability=np.float32(0.5))]
        seg = SimpleNamespace(text=" hello world", start=np.float64(0.0), end=dur, words=words,
                              avg_logprob=np.float64(-0.2), no_speech_prob=np.float64(0.01),
                              compression_ratio=np.float64(1.2), temperature=0.0)
        return iter([seg]), SimpleNamespace(language=kw.get("language") or "en")


class Wire:
    """An Emitter that encodes every event as the worker does (msgspec msgpack), so numpy values fail here."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []

    def progress(self, done_s: float, total_s: float, phase: str = "decoding") -> None:
        self.frames.append(p.encode(p.Progress(id=1, done_s=done_s, total_s=total_s)))

    def draft(self, text: str, segment: int = 0) -> None:
        self.frames.append(p.encode(p.Draft(id=1, text=text, segment=segment)))

    def sentence(self, index: int, text: str, engine: str, start_s: float, end_s: float, segment: int = 0) -> None:
        self.frames.append(p.encode(p.Sentence(id=1, index=index, text=text, engine=engine, start_s=start_s,
                                               end_s=end_s, segment=segment)))


def whisper_engine(stub: StubWhisper, monkeypatch: pytest.MonkeyPatch) -> WhisperEngine:
    """The sequential path (HASR_WHISPER_BATCH=0) calls ``model.transcribe`` per VAD clip: the stub sees each call.
    The VAD hears the whole (silent) input as one clip, as it would a short utterance."""
    from hasrd.worker import vad

    monkeypatch.setattr(vad, "speech_spans", lambda audio: [(0.0, len(audio) / SR)] if len(audio) else [])
    e = WhisperEngine(config.load(env={"HASR_WHISPER_BATCH": "0"}), "", "cpu", "int8")
    e.model = stub  # no load(): the stub stands in for WhisperModel
    return e


def crossed(r: Transcript) -> dict[str, Any]:
    """The result as the daemon reads it: encoded into a worker frame (a TypeError here was runtime_failure
    through the daemon), decoded, as JSON builtins."""
    msg = p.decode_worker(p.encode(p.Result(id=1, result=r))[4:])
    assert isinstance(msg, p.Result)
    return to_json(msg.result)


def all_plain(obj: Any) -> bool:
    if isinstance(obj, dict):
        return all(all_plain(k) and all_plain(v) for k, v in obj.items())
    if isinstance(obj, list):
        return all(all_plain(v) for v in obj)
    return obj is None or type(obj) in (str, int, float, bool)


def test_the_prompt_reaches_faster_whisper_as_initial_prompt(monkeypatch: pytest.MonkeyPatch) -> None:
    stub = StubWhisper()
    e = whisper_engine(stub, monkeypatch)
    pcm = np.zeros(2 * SR, np.float32)
    e.transcribe(pcm, "en", {"prompt": "Hasr, R2T2, faster-whisper."}, Wire(), lambda: False)
    e.transcribe(pcm, "en", {}, Wire(), lambda: False)
    e.transcribe(pcm, "en", {"initial_prompt": "older key"}, Wire(), lambda: False)  # what /transcribe once took
    assert [c["initial_prompt"] for c in stub.calls] == ["Hasr, R2T2, faster-whisper.", None, "older key"]
    # the clip is the engine's own VAD's (hasrd/worker/vad.py): faster-whisper is not asked to run Silero again
    assert all(c["language"] == "en" and c["beam_size"] == 5 and not c["vad_filter"] for c in stub.calls)


def test_word_timestamps_from_numpy_values_cross_the_worker_channel(monkeypatch: pytest.MonkeyPatch) -> None:
    stub = StubWhisper()
    wire = Wire()
    r = whisper_engine(stub, monkeypatch).transcribe(np.zeros(2 * SR, np.float32), "en", {"word_timestamps": True},
                                                     wire, lambda: False)
    assert stub.calls[0]["word_timestamps"] is True
    r = crossed(r)
    assert all_plain(r)
    (s,) = r["per_sentence"]
    assert s["words"] == [{"word": " hello", "start": 0.1, "end": 0.4, "probability": 0.9123},
                          {"word": " world", "start": 0.4, "end": 2.0, "probability": 0.5}]
    # a sentence is timed by its words now (the decoder's segment began at 0.0, its first word at 0.1)
    assert (s["start_s"], s["end_s"]) == (0.1, 2.0) and type(r["first_text_s"]) is float
    assert len(wire.frames) >= 3  # progress and sentence events were encoded too
    sentence = [m for m in map(p.decode_worker, (f[4:] for f in wire.frames)) if isinstance(m, p.Sentence)]
    assert [(m.text, m.start_s, m.end_s) for m in sentence] == [("hello world", 0.1, 2.0)]


def test_numpy_values_in_a_result_cross_the_channel_as_python_numbers() -> None:
    r = Transcript(duration_s=np.float64(1.5), fw_calls=np.int64(2), options={"a": np.arange(3)},  # type: ignore[arg-type]
                   per_sentence=[TimedSentence(text="a", engine="fw", start_s=np.float32(0.25),  # type: ignore[arg-type]
                                               end_s=round(np.float64(1.23456), 3),
                                               words=[Word("a", np.float64(0.25), 1.0, np.float32(0.5))])])  # type: ignore[arg-type]
    got = crossed(r)
    assert all_plain(got) and got["duration_s"] == 1.5 and got["fw_calls"] == 2 and got["options"] == {"a": [0, 1, 2]}
    assert got["per_sentence"] == [{"text": "a", "engine": "fw", "start_s": 0.25, "end_s": 1.235,
                                    "words": [{"word": "a", "start": 0.25, "end": 1.0, "probability": 0.5}]}]
    assert all_plain(to_json(r))  # the batch actor renders without the channel


def test_hybrid_windows_get_the_seed_call_and_never_the_prompt() -> None:
    stub = StubWhisper()
    e = HybridEngine(config.load(env={"HASR_DRAFT": "scripted", "HASR_V2C_FINAL": "inline"}), "", "cpu", "int8",
                     env={})
    e.script, e.fw = "今天天气很好。我们去公园散步|吧。最后一句", stub  # no load(): scripted draft + stub fw
    wire = Wire()
    r = crossed(e.transcribe(np.zeros(3 * SR, np.float32), "Chinese", Options(prompt="会议纪要", word_timestamps=True),
                             wire, lambda: False))
    assert r["fw_calls"] == 2 and [s["engine"] for s in r["per_sentence"]] == ["draft", "fw", "fw"]
    assert [{k: v for k, v in c.items() if k != "max_new_tokens"} for c in stub.calls] == [
        {"language": "zh", "beam_size": 5, "vad_filter": False}] * 2
    assert all(0 < c["max_new_tokens"] <= 16 * 3 + 16 for c in stub.calls)  # whisper's cap for a short window
    assert all_plain(r)


def test_the_fake_engine_result_is_plain() -> None:
    r = crossed(FakeEngine(env={}).transcribe(np.zeros(SR, np.float32), "zh", Options(), Wire(), lambda: False))
    assert all_plain(r) and r["engine"] == "fake" and r["per_sentence"]


def test_the_daemon_can_check_a_language_without_importing_anything_heavy() -> None:
    code = ("import sys; from hasrd.languages import resolve, UnknownLanguage; resolve('zh-CN'); "
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('numpy', 'msgspec', 'av', 'faster_whisper', 'ctranslate2', 'torch', 'vllm', 'r2t2')); "
            "print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    assert resolve("zh-CN") == ("Chinese", "zh") and resolve("Cantonese") == ("Cantonese", "yue")
    assert resolve("") == resolve("auto") == ("", "")
    with pytest.raises(UnknownLanguage) as e:
        resolve("Klingon")
    assert isinstance(e.value, ValueError) and "Klingon" in str(e.value) and "'Chinese'" in str(e.value)


@pytest.mark.parametrize("content", [b"not a model at all", b"\x06\x00\x00\x00" + b"\xff" * 16])
def test_a_model_that_does_not_load_is_explained_without_what_was_read_from_its_file(
        tmp_path: Any, capfd: pytest.CaptureFixture[str], content: bytes) -> None:
    """CTranslate2's message quotes the file ("binary version v544501614" is "not " read as a number, "File
    model.bin is incomplete ..."): a caller who named the directory learns only what kind of failure it was;
    the daemon's log has the whole message."""
    from hasrd.models import FwModel
    from hasrd.worker.engine import EngineError
    from hasrd.worker.engines.fwload import load_model

    (tmp_path / "model.bin").write_bytes(content)
    with pytest.raises(EngineError) as e:
        load_model(FwModel(str(tmp_path), str(tmp_path), "", "directory"), "cpu", "int8")
    assert e.value.code == "model_unavailable" and str(tmp_path) in e.value.message
    assert "model.bin" in e.value.message and "version v" not in e.value.message and "buffer" not in e.value.message
    assert "failed:" in capfd.readouterr().err  # the whole reason, for the log


def test_a_hybrid_window_that_loops_is_said_once() -> None:
    """Issue 31 #12: the hybrid's faster-whisper windows skipped whisper's text rules (`...啾啾啾啾啾啾啾啾`)."""
    from hasrd.worker.engines.fwterms import window_fn

    class Looping(StubWhisper):
        def transcribe(self, audio: np.ndarray, **kw: Any) -> tuple[Any, Any]:
            self.calls.append(kw)
            return iter([SimpleNamespace(text="好的。" + "啾" * 40)]), SimpleNamespace(language="zh")

    stub = Looping()
    text = window_fn(stub, "zh")(np.zeros(7 * SR, np.float32))
    assert text.startswith("好的。啾") and len(text) <= 5, text  # the loop said once, as whisper's rule says it
    assert stub.calls[0]["max_new_tokens"] == 16 * 7 + 16

"""The R2T2 engine's own code against a stand-in ``r2t2`` (tests/stand_in): imports, load call, draft-only v2c."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from speech import STAND_IN, with_path
from workerclient import WorkerClient

from hasrd import config
from hasrd.options import Options
from hasrd.transcript import to_json
from hasrd import protocol as p
from hasrd.worker.engine import EngineError, NullEmitter
from hasrd.worker.engines.r2t2 import R2T2Engine, import_r2t2

# R2T2 hears "你好世界。" and then writes "|" after "今天" for the rest of the audio: the library cuts it there, so
# the draft never gets past "今天" (the seed's silent loss of a truncated sentence's end).
SCRIPT = "0.48\t你好\n0.96\t你好世界。\n1.6\t你好世界。今天|天\n2.4\t你好世界。今天|天气好\n"


def use(monkeypatch: pytest.MonkeyPatch, which: str | None) -> None:
    monkeypatch.delitem(sys.modules, "r2t2", raising=False)  # restored (removed) after the test
    if which:
        monkeypatch.syspath_prepend(str(STAND_IN / which))


@pytest.fixture
def weights(tmp_path: Path) -> Path:
    d = tmp_path / "Confucius4-R2T2"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"architectures": ["Qwen3ASRForConditionalGeneration"]}))
    (d / "script.tsv").write_text(SCRIPT, encoding="utf-8")
    return d


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    use(monkeypatch, "real")
    yield


def engine(weights: Path, cuda: bool = True) -> R2T2Engine:
    return R2T2Engine(config.load(env={"HASR_R2T2_MODEL": str(weights)}), cuda=lambda: (cuda, "stand-in"))


def test_a_missing_r2t2_package_says_what_to_install_and_where(monkeypatch: pytest.MonkeyPatch) -> None:
    use(monkeypatch, None)
    with pytest.raises(EngineError) as e:
        import_r2t2()
    assert e.value.code == "model_unavailable"
    assert "confucius4-r2t2" in e.value.message
    assert "git+https://github.com/netease-youdao/Confucius4-R2T2" in e.value.message
    assert "HASR_WORKER_PYTHON" in e.value.message


def test_the_install_hint_is_the_readme_recipe_and_installs_nothing_unpublished() -> None:
    import re

    from hasrd.worker.engines.r2t2 import INSTALL

    readme = (Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")
    venv = "~/.local/share/hasr/gpu-venv"
    assert f"-m venv {venv}" in INSTALL and f"-m venv {venv}" in readme
    pip = re.search(r"/bin/pip install (.*?) \(", INSTALL)
    assert pip is not None and pip.group(1).split() == [
        "'git+https://github.com/netease-youdao/Confucius4-R2T2'", "faster-whisper", "msgspec", "numpy"]
    assert "install 'git+https://github.com/netease-youdao/Confucius4-R2T2'" in readme
    assert "faster-whisper msgspec numpy" in readme
    assert f"HASR_WORKER_PYTHON={venv}/bin/python" in INSTALL and "/gpu/" not in INSTALL


def test_the_unrelated_pypi_r2t2_package_is_told_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    use(monkeypatch, "unrelated")
    with pytest.raises(EngineError) as e:
        import_r2t2()
    assert e.value.code == "model_unavailable"
    assert "unrelated" in e.value.message and "pip uninstall r2t2" in e.value.message


def test_r2t2_is_loaded_with_the_seed_parameters_verbatim(stand_in: None, weights: Path) -> None:
    eng = engine(weights)
    ident = eng.load(lambda s: None).identity
    cls = import_r2t2()
    assert cls.loads[-1] == {"model": str(weights), "gpu_memory_utilization": 0.35, "max_model_len": 4096,
                             "max_new_tokens": 4}
    assert ident["engine"] == "r2t2" and ident["models"]["draft"]["path"] == str(weights)


def test_no_usable_cuda_is_model_unavailable_pointing_at_the_whisper_engine(stand_in: None, weights: Path) -> None:
    with pytest.raises(EngineError) as e:
        engine(weights, cuda=False).load(lambda s: None)
    assert e.value.code == "model_unavailable" and "CUDA" in e.value.message and "--engine whisper" in e.value.message


def test_missing_weights_say_how_to_download_them(stand_in: None, tmp_path: Path) -> None:
    with pytest.raises(EngineError) as e:
        engine(tmp_path / "nothing").load(lambda s: None)
    assert "hf download netease-youdao/Confucius4-R2T2" in e.value.message


def test_the_draft_alone_cuts_truncated_sentences_at_the_pipe_and_keeps_stdout_clean(
        stand_in: None, weights: Path, capfd: pytest.CaptureFixture[str]) -> None:
    eng = engine(weights)
    eng.load(lambda s: None)
    pcm = np.zeros(int(2.6 * 16000), np.float32)
    r = to_json(eng.transcribe(pcm, "zh", Options(), NullEmitter(), lambda: False))  # "zh" must reach R2T2 as "Chinese"
    assert r["engine"] == "r2t2" and r["language"] == "Chinese" and r["fw_calls"] == 0
    assert [(w["text"], w["truncated_by"]) for w in r["sent_windows"]] == [("你好世界。", None), ("今天", "bar")]
    assert [(s["text"], s["engine"]) for s in r["per_sentence"]] == [("你好世界。", "draft"), ("今天", "draft")]
    assert r["first_text_s"] == pytest.approx(0.48) and r["bar_signal"] == "generation"
    out, err = capfd.readouterr()
    assert out == "" and "finish state.text=你好世界。今天" in err  # R2T2's print, moved to stderr


def test_no_language_lets_r2t2_detect_it(stand_in: None, weights: Path) -> None:
    import r2t2  # the stand-in

    eng = engine(weights)
    eng.load(lambda s: None)
    seen: list[Any] = []
    orig = r2t2.R2T2ASRModel.init_streaming_state

    def spy(self: Any, **kw: Any) -> Any:
        seen.append(kw["language"])
        return orig(self, **kw)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(r2t2.R2T2ASRModel, "init_streaming_state", spy)
        r = to_json(eng.transcribe(np.zeros(int(2.6 * 16000), np.float32), "", Options(), NullEmitter(), lambda: False))
    assert seen == [None]  # auto-detection, not the seed's fixed "Chinese"
    assert r["language"] == "Chinese" and r["language_detected"] is True  # what R2T2 said it heard
    assert r["final"] == "你好世界。今天"


def test_a_language_r2t2_does_not_know_is_refused_by_the_draft_alone_with_the_way_out(
        stand_in: None, weights: Path) -> None:
    eng = engine(weights)
    eng.load(lambda s: None)
    for lang, says in (("Swahili", "R2T2 does not know Swahili"), ("Klingon", "unknown language")):
        with pytest.raises(EngineError) as e:
            eng.transcribe(np.zeros(16000, np.float32), lang, Options(), NullEmitter(), lambda: False)
        assert e.value.code == "invalid_audio" and says in e.value.message


def test_the_load_warms_r2t2_up_with_silent_chunks_and_a_finish_per_language(stand_in: None, weights: Path) -> None:
    eng = engine(weights)
    phases: list[str] = []
    ident = eng.load(phases.append).identity
    assert any("warming up" in ph for ph in phases) and ident["warm_up_s"] >= 0
    # 3 decoded chunks + the finish's decode, for Chinese and for English
    assert eng.draft.generate_calls == 8 and ident["bar_signal"] == "generation"


def test_the_worker_reports_the_unrelated_package_as_a_load_failure(weights: Path) -> None:
    w = WorkerClient("r2t2", env={"PYTHONPATH": with_path(STAND_IN / "unrelated", STAND_IN / "cuda"),
                                  "HASR_R2T2_MODEL": str(weights)})
    try:
        last = w.handshake()[-1]
        assert isinstance(last, p.LoadFailed) and last.code == "model_unavailable" and "unrelated" in last.message
    finally:
        w.close()


def test_the_worker_serves_the_r2t2_engine_with_the_stand_in(weights: Path) -> None:
    w = WorkerClient("r2t2", env={"PYTHONPATH": with_path(STAND_IN / "real", STAND_IN / "cuda"),
                                  "HASR_R2T2_MODEL": str(weights)})
    try:
        ready = w.handshake()[-1]
        assert isinstance(ready, p.Ready) and ready.identity["engine"] == "r2t2"
        events, res = w.transcribe(1, np.zeros(int(2.6 * 16000), np.float32), language="Chinese")
        assert isinstance(res, p.Result) and to_json(res.result)["final"] == "你好世界。今天"
        assert [e.text for e in events if isinstance(e, p.Sentence)] == ["你好世界。", "今天"]
        assert any(isinstance(e, p.Draft) for e in events)
    finally:
        w.close()


def test_close_ends_the_engine_thread_r2t2_left_running(stand_in: None, weights: Path) -> None:
    (weights / "script.tsv").write_text(SCRIPT + "!engine_thread\t\n", encoding="utf-8")
    eng = engine(weights)
    eng.load(lambda s: None)
    core = eng.draft.model.llm_engine.engine_core
    assert core.thread.is_alive() and not core.thread.daemon  # what kept the worker from exiting
    eng.close()
    assert core.shutdowns == 1 and not core.thread.is_alive() and eng.draft is None


@pytest.mark.parametrize("kind", ["r2t2", "hybrid"])
def test_a_shutdown_ends_the_worker_by_itself_with_r2t2_loaded_many_times_in_a_row(weights: Path, kind: str) -> None:
    """The stand-in's engine core runs a non-daemon thread until it is shut down (vLLM's background engine):
    after Shutdown the worker must exit on its own, with status 0, every time (no SIGTERM, no kill)."""
    import subprocess

    from speech import model_dir

    (weights / "script.tsv").write_text(SCRIPT + "!engine_thread\t\n", encoding="utf-8")
    env = {"PYTHONPATH": with_path(STAND_IN / "real", STAND_IN / "cuda"), "HASR_R2T2_MODEL": str(weights),
           "HASR_FW_MODEL": model_dir(), "HASR_FW_DEVICE": "cpu"}
    for round_ in range(5 if kind == "r2t2" else 2):
        w = WorkerClient(kind, env=env)
        try:
            ready = w.handshake()[-1]
            assert isinstance(ready, p.Ready), ready
            if round_ % 2 == 0:  # with and without a job served first
                _events, res = w.transcribe(1, np.zeros(int(2.6 * 16000), np.float32), language="Chinese")
                assert isinstance(res, p.Result), res
            w.send(p.Shutdown())
            try:  # the channel stays open: the worker must leave because of the Shutdown, not an EOF
                rc = w.proc.wait(120)
            except subprocess.TimeoutExpired:
                raise AssertionError(f"round {round_}: the worker did not exit after Shutdown") from None
            assert rc == 0, (round_, rc)
        finally:
            w.close()


@pytest.mark.parametrize("heard, script", [("Cantonese", "traditional"), ("Chinese", "simplified")])
def test_the_streamed_sentences_are_in_the_results_script_when_r2t2_names_the_language(
        tmp_path: Path, heard: str, script: str) -> None:
    """Issue 31 #10: with no language asked and R2T2 naming Cantonese, the sentence events were simplified
    while per_sentence and final were traditional (s2hk): the emitter was never told what the draft heard."""
    d = tmp_path / "Confucius4-R2T2"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"architectures": ["Qwen3ASRForConditionalGeneration"]}))
    script_tsv = f"!language\t{heard}\n0.48\t这个\n0.96\t这个软件很好。\n1.6\t这个软件很好。我们走吧。\n"
    (d / "script.tsv").write_text(script_tsv, encoding="utf-8")
    w = WorkerClient("r2t2", env={"PYTHONPATH": with_path(STAND_IN / "real", STAND_IN / "cuda"),
                                  "HASR_R2T2_MODEL": str(d), "HASR_LANGUAGE": "", "HASR_ZH_SCRIPT": "simplified"})
    try:
        assert isinstance(w.handshake()[-1], p.Ready)
        events, res = w.transcribe(1, np.zeros(int(2.6 * 16000), np.float32), language="")
        assert isinstance(res, p.Result), res
        r = to_json(res.result)
        sent = [e.text for e in events if isinstance(e, p.Sentence)]
        assert r["language_detected"] is True and r["script"] == script
        assert sent and sent == [s["text"] for s in r["per_sentence"]], (sent, r["per_sentence"])
        assert ("這個" in r["final"]) == (script == "traditional")
    finally:
        w.close()

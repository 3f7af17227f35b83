"""One decode loop per worker, and every engine's model calls through it (issue 40 #1): faster-whisper's calls (the
whisper engine, the hybrid's windows), R2T2's streaming calls (the hybrid's draft, with the library-like stand-in)
and the fake engine's draft all run on the loop's thread, as steps of the job that asked; and a live session's
step goes ahead of a file's step that waited longer, for the hybrid's draft as for whisper."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from speech import STAND_IN, load, model_dir

from hasrd import config
from hasrd.options import Options
from hasrd.worker import batcher
from hasrd.worker.batcher import Batcher, JobTag
from hasrd.worker.engine import Engine, NullEmitter
from hasrd.worker.engines.fake import FakeEngine
from hasrd.worker.engines.hybrid import HybridEngine
from hasrd.worker.engines.whisper import WhisperEngine
from hasrd.worker.scripted import ScriptedDraft

LOOP_THREADS = ("hasr-batcher", "hasr-lane")
Step = tuple[str, int, bool]  # the kind of call, the job, live


class Recording(Batcher):
    """The worker's decode loop, recording the steps of every call it runs (lead first); with ``hold`` it keeps
    the first call running until ``release`` (so that other steps queue behind it)."""

    def __init__(self, max_items: int, lanes: int, hold: bool = False) -> None:
        super().__init__(max_items, lanes=lanes)
        self.calls: list[list[Step]] = []
        self.holding, self.released = threading.Event(), threading.Event()
        if not hold:
            self.released.set()

    def _execute(self, steps: list[Any]) -> None:  # type: ignore[override]
        key = steps[0].wait.key
        self.calls.append([(str(key[0]), s.wait.job, s.wait.live) for s in steps])
        self.holding.set()
        assert self.released.wait(120)
        Batcher._execute(steps)

    def kinds(self) -> set[str]:
        return {kind for call in self.calls for kind, _job, _live in call}


def started(engine: Engine, hold: bool = False) -> Recording:
    """``engine`` loaded, with its decode loop sized as the load reports (hasrd.worker.engines.load), recording."""
    loaded = engine.load(lambda phase: None)
    loop = Recording(loaded.batch, loaded.lanes, hold)
    engine.attach(loop)
    return loop


def spy(obj: Any, name: str, threads: list[str]) -> None:
    """Record the thread each call of ``obj.name`` runs in."""
    real = getattr(obj, name)

    def call(*args: Any, **kw: Any) -> Any:
        threads.append(threading.current_thread().name)
        return real(*args, **kw)

    setattr(obj, name, call)


class Model:
    """A CTranslate2 model whose calls are watched (its own attributes cannot be set)."""

    def __init__(self, inner: Any, threads: list[str]) -> None:
        self.inner, self.threads = inner, threads

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name not in ("encode", "generate", "align", "detect_language"):
            return attr

        def call(*args: Any, **kw: Any) -> Any:
            self.threads.append(threading.current_thread().name)
            return attr(*args, **kw)

        return call


def watch_whisper(model: Any, threads: list[str]) -> None:
    """Record the thread of every CTranslate2 call of a loaded (and attached) faster-whisper model."""
    batched = model.model  # ct2batch.BatchedWhisper
    batched._model = Model(batched._model, threads)


@pytest.fixture
def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """R2T2 weights for the stand-in library: Chinese heard, the last sentence without an end mark (so its window
    goes to faster-whisper)."""
    weights = tmp_path / "Confucius4-R2T2"
    weights.mkdir()
    (weights / "config.json").write_text(json.dumps({}))
    (weights / "script.tsv").write_text("0.5\t你好\n1.0\t你好世界。\n2.0\t你好世界。天地玄黄\n", encoding="utf-8")
    monkeypatch.delitem(sys.modules, "r2t2", raising=False)
    monkeypatch.syspath_prepend(str(STAND_IN / "real"))
    yield weights


def whisper() -> WhisperEngine:
    return WhisperEngine(config.load(env={}), model_dir(), "cpu", "int8")


def hybrid(weights: Path) -> HybridEngine:
    return HybridEngine(config.load(env={"HASR_R2T2_MODEL": str(weights)}), model_dir(), "cpu", "int8",
                        cuda=lambda: (True, "stand-in"), env={})


def on_loop(threads: list[str]) -> bool:
    return bool(threads) and all(t.startswith(LOOP_THREADS) for t in threads)


def transcribe(engine: Engine, pcm: np.ndarray, language: str, job: int) -> Any:
    with batcher.bound(JobTag(job)):
        return engine.transcribe(pcm, language, Options(word_timestamps=True), NullEmitter(), lambda: False)


def test_whisper_calls_faster_whisper_only_through_the_loop() -> None:
    e = whisper()
    loop = started(e)
    threads: list[str] = []
    watch_whisper(e.model, threads)
    assert transcribe(e, load("en_hello_world"), "en", 1).final
    assert {"encode", "generate", "align"} <= loop.kinds()
    assert {job for call in loop.calls for _kind, job, _live in call} == {1}
    assert on_loop(threads), threads


def test_the_hybrid_calls_r2t2_and_faster_whisper_only_through_the_loop(stand_in: Path) -> None:
    e = hybrid(stand_in)
    loop = started(e)
    r2t2: list[str] = []
    fw: list[str] = []
    spy(e.draft, "_streaming_generate", r2t2)  # the one model call per chunk of the stand-in library
    watch_whisper(e.fw, fw)
    pcm = np.concatenate([load("zh_nihao_shijie"), np.zeros(8000, np.float32), load("zh_jishu")])
    r = transcribe(e, pcm, "zh", 1)
    assert r.fw_calls >= 1 and r.final  # the last sentence has no end mark: faster-whisper re-transcribed it
    assert {"draft", "encode", "generate"} <= loop.kinds()
    assert {job for call in loop.calls for _kind, job, _live in call} == {1}
    assert all(len(call) == 1 for call in loop.calls if call[0][0] == "draft")  # R2T2's calls are never shared
    assert on_loop(r2t2), r2t2
    assert on_loop(fw), fw


def test_the_fake_engine_drafts_through_the_loop_as_r2t2_does(monkeypatch: pytest.MonkeyPatch) -> None:
    e = FakeEngine(env={})
    loop = started(e)
    threads: list[str] = []
    real = ScriptedDraft.streaming_transcribe

    def watched(self: ScriptedDraft, *args: Any, **kw: Any) -> tuple[str, str]:
        threads.append(threading.current_thread().name)
        return real(self, *args, **kw)

    monkeypatch.setattr(ScriptedDraft, "streaming_transcribe", watched)
    assert transcribe(e, np.zeros(32000, np.float32), "zh", 1).final
    assert loop.kinds() == {"draft"} and all(len(call) == 1 for call in loop.calls)
    assert on_loop(threads), threads


class Heard(NullEmitter):
    def turn(self, segment: int, kind: str, start_s: float = 0.0, end_s: float = 0.0, text: str = "") -> None:
        pass


def until(what: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 120
    while not what() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert what()


@pytest.mark.parametrize("kind", ["whisper", "hybrid"])
def test_a_live_step_goes_ahead_of_a_file_step_that_waited_longer(kind: str, stand_in: Path) -> None:
    e = whisper() if kind == "whisper" else hybrid(stand_in)
    language, speech = ("en", load("en_hello_world")) if kind == "whisper" else ("zh", load("zh_nihao_shijie"))
    loop = started(e, hold=True)
    done: dict[int, Any] = {}

    def file(job: int) -> None:
        done[job] = transcribe(e, speech, language, job)

    def live() -> None:
        with batcher.bound(JobTag(3, live=True)):
            session = e.live(language, Options(), Heard(), lambda: False)
            session.feed(speech)
            done[3] = session.finish()

    threads = [threading.Thread(target=file, args=(1,), daemon=True)]
    threads[0].start()
    until(loop.holding.is_set)  # the first file's first call runs, and is held
    threads.append(threading.Thread(target=file, args=(2,), daemon=True))
    threads[1].start()
    until(lambda: loop.waiting() == 1)  # the second file's step waits
    threads.append(threading.Thread(target=live, daemon=True))
    threads[2].start()
    until(lambda: loop.waiting() == 2)  # then the live session's
    loop.released.set()
    for t in threads:
        t.join(300)
    assert set(done) == {1, 2, 3}
    held, after = loop.calls[0], loop.calls[1]
    assert held[0][1:] == (1, False)
    assert after[0][1:] == (3, True), loop.calls[:4]  # the live step leads the next call

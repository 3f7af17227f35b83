"""The worker's decode loop (hasrd/worker/batcher.py, ct2batch.py): steps of several jobs in one model call, live
first, a cancelled job's steps gone before the next batch, one job's failure its own; and real faster-whisper
giving each job the same text, word times included, whether it runs alone or beside others in one worker."""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest

from hasrd.errors import EngineError
from hasrd.worker import batcher
from hasrd.worker.batcher import Batcher, JobTag
from speech import load


class Gate:
    """An executor that records each call's payloads and holds the loop on a payload named "hold" until opened."""

    def __init__(self) -> None:
        self.calls: list[list[Any]] = []
        self.holding = threading.Event()
        self.open = threading.Event()

    def __call__(self, payloads: list[Any]) -> list[Any]:
        self.calls.append(list(payloads))
        if "hold" in payloads:
            self.holding.set()
            assert self.open.wait(10)
        if "bad" in payloads:
            raise ValueError("bad input")
        return [f"done {p}" for p in payloads]


def start(b: Batcher, tag: JobTag, key: Any, payload: Any, ex: Gate, out: dict[Any, Any]) -> threading.Thread:
    def go() -> None:
        with batcher.bound(tag):
            try:
                out[payload] = b.run(key, 1, payload, ex)
            except BaseException as e:  # noqa: BLE001 - the test reads it
                out[payload] = e

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t


def settle(b: Batcher, n: int) -> None:
    deadline = time.monotonic() + 5
    while b.waiting() < n and time.monotonic() < deadline:
        time.sleep(0.01)
    assert b.waiting() == n


def test_steps_of_several_jobs_with_one_key_run_in_one_call_and_each_gets_its_own_result() -> None:
    b, ex, out = Batcher(8), Gate(), {}
    ts = [start(b, JobTag(1), "k", "hold", ex, out)]
    assert ex.holding.wait(5)
    ts += [start(b, JobTag(j), "k", f"p{j}", ex, out) for j in (2, 3, 4)]
    settle(b, 3)
    ex.open.set()
    for t in ts:
        t.join(5)
    assert ex.calls == [["hold"], ["p2", "p3", "p4"]]
    assert out == {"hold": "done hold", "p2": "done p2", "p3": "done p3", "p4": "done p4"}
    assert b.stats.shared == 1 and b.stats.largest == 3


def test_a_live_step_runs_before_file_steps_that_waited_longer() -> None:
    b, ex, out = Batcher(1), Gate(), {}
    ts = [start(b, JobTag(1), "file", "hold", ex, out)]
    assert ex.holding.wait(5)
    ts.append(start(b, JobTag(2), "file", "file step", ex, out))
    settle(b, 1)
    ts.append(start(b, JobTag(3, live=True), "live", "live step", ex, out))
    settle(b, 2)
    ex.open.set()
    for t in ts:
        t.join(5)
    assert ex.calls == [["hold"], ["live step"], ["file step"]]


def test_a_cancelled_jobs_waiting_step_leaves_before_the_next_batch_and_never_runs() -> None:
    b, ex, out = Batcher(8), Gate(), {}
    flag = threading.Event()
    ts = [start(b, JobTag(1), "k", "hold", ex, out)]
    assert ex.holding.wait(5)
    ts.append(start(b, JobTag(2, cancelled=flag.is_set), "k", "cancelled step", ex, out))
    ts.append(start(b, JobTag(3), "k", "other", ex, out))
    settle(b, 2)
    flag.set()
    ex.open.set()
    for t in ts:
        t.join(5)
    assert isinstance(out["cancelled step"], EngineError) and out["cancelled step"].code == "cancelled"
    assert ["cancelled step"] not in ex.calls and all("cancelled step" not in c for c in ex.calls)
    assert out["other"] == "done other"


def test_one_jobs_bad_step_fails_that_job_alone_and_its_batch_mates_get_their_results() -> None:
    b, ex, out = Batcher(8), Gate(), {}
    ts = [start(b, JobTag(1), "k", "hold", ex, out)]
    assert ex.holding.wait(5)
    ts += [start(b, JobTag(2), "k", "bad", ex, out), start(b, JobTag(3), "k", "good", ex, out)]
    settle(b, 2)
    ex.open.set()
    for t in ts:
        t.join(5)
    assert isinstance(out["bad"], ValueError)
    assert out["good"] == "done good"
    assert ex.calls[1] == ["bad", "good"] and ["good"] in ex.calls[2:]  # the batch, then each step again alone


def test_a_step_of_a_job_cancelled_before_it_asked_is_refused_at_once() -> None:
    b = Batcher(8)
    with batcher.bound(JobTag(1, cancelled=lambda: True)), pytest.raises(EngineError) as e:
        b.run("k", 1, "x", Gate())
    assert e.value.code == "cancelled"


def test_with_two_lanes_a_live_step_runs_while_a_long_files_call_holds_the_other_lane() -> None:
    b, ex, out = Batcher(8, lanes=2), Gate(), {}
    ts = [start(b, JobTag(1), "file", "hold", ex, out)]
    assert ex.holding.wait(5)
    ts.append(start(b, JobTag(2), "file2", "file step", ex, out))  # another key: would need a lane of its own
    ts.append(start(b, JobTag(3, live=True), "live", "live step", ex, out))
    deadline = time.monotonic() + 5
    while "live step" not in out and time.monotonic() < deadline:
        time.sleep(0.01)
    assert out.get("live step") == "done live step", "the live step waited for the file's call"
    assert "file step" not in out and b.waiting() == 1  # files keep to one lane of two
    ex.open.set()
    for t in ts:
        t.join(5)
    assert out["file step"] == "done file step"
    assert ex.calls == [["hold"], ["live step"], ["file step"]]


def test_a_call_that_answers_the_wrong_number_of_steps_fails_them_instead_of_leaving_them_waiting() -> None:
    b = Batcher(8, lanes=2)
    with batcher.bound(JobTag(1)), pytest.raises(ValueError):
        b.run("k", 1, "x", lambda payloads: [])


def test_live_steps_asking_all_the_time_leave_a_lane_to_a_waiting_file() -> None:
    b = Batcher(8, lanes=2)
    stop = threading.Event()
    done: list[int] = []

    def slow(payloads: list[Any]) -> list[Any]:
        time.sleep(0.02)
        return payloads

    def live(job: int) -> None:
        with batcher.bound(JobTag(job, live=True)):
            while not stop.is_set():
                b.run(("live", job), 1, job, slow)

    def file() -> None:
        with batcher.bound(JobTag(9)):
            for k in range(5):
                done.append(b.run("file", 1, k, slow))

    lives = [threading.Thread(target=live, args=(j,), daemon=True) for j in (1, 2, 3)]
    for t in lives:
        t.start()
    f = threading.Thread(target=file, daemon=True)
    f.start()
    f.join(5)
    stop.set()
    assert done == [0, 1, 2, 3, 4], "the file starved behind live steps"


def test_with_one_lane_a_live_step_waits_for_the_running_call() -> None:
    b, ex, out = Batcher(8, lanes=1), Gate(), {}
    ts = [start(b, JobTag(1), "file", "hold", ex, out)]
    assert ex.holding.wait(5)
    ts.append(start(b, JobTag(3, live=True), "live", "live step", ex, out))
    settle(b, 1)
    assert "live step" not in out
    ex.open.set()
    for t in ts:
        t.join(5)
    assert out["live step"] == "done live step"


# ---- real faster-whisper: two jobs in one worker give the same text as each alone -----------------------------

def transcribe(engine: Any, pcm: np.ndarray, language: str, job: int) -> Any:
    from hasrd.worker.engine import NullEmitter

    with batcher.bound(JobTag(job)):
        return engine.transcribe(pcm, language, {"word_timestamps": True}, NullEmitter(), lambda: False)


def test_jobs_decoded_together_in_one_worker_get_exactly_the_text_and_times_they_get_alone() -> None:
    from hasrd.config import Settings
    from hasrd.worker.engines.whisper import WhisperEngine

    engine = WhisperEngine(Settings(), "", "cpu", "int8")
    loaded = engine.load(lambda phase: None)
    loop = Batcher(loaded.batch, lanes=loaded.lanes)
    engine.attach(loop)
    gap = np.zeros(16000, np.float32)
    jobs = {
        1: (np.concatenate([load("en_espeak_park"), gap, load("en_quick_brown_fox")] * 2), "en"),
        2: (np.concatenate([load("zh_pangrama"), gap, load("zh_nihao_shijie")]), "zh"),
        3: (np.concatenate([load("en_hello_world"), gap, load("en_quick_brown_fox")]), "en"),
    }
    alone = {j: transcribe(engine, pcm, lang, j) for j, (pcm, lang) in jobs.items()}
    shared_before = loop.stats.shared
    together: dict[int, Any] = {}
    threads = [threading.Thread(target=lambda j=j, a=a: together.__setitem__(j, transcribe(engine, *a, j)))
               for j, a in jobs.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert loop.stats.shared > shared_before, "no model call held two jobs' windows: nothing was batched"
    for j in jobs:
        assert together[j].final == alone[j].final
        assert together[j].final.strip()
        assert [(s.text, s.start_s, s.end_s, s.words) for s in together[j].per_sentence] == \
               [(s.text, s.start_s, s.end_s, s.words) for s in alone[j].per_sentence]

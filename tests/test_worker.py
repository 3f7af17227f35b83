"""The worker program as a real subprocess with the fake engine, driven over its socketpair."""

from __future__ import annotations


import numpy as np

from hasrd import protocol as p
from hasrd.transcript import to_json
from tests.workerclient import WorkerClient

SECOND = np.zeros(16000, dtype=np.float32)


def test_handshake_says_hello_first_then_loading_then_ready_with_identity() -> None:
    w = WorkerClient(env={"HASR_FAKE_LOAD_SEC": "0.2"})
    try:
        msgs = w.handshake()
        assert isinstance(msgs[0], p.Hello)
        assert msgs[0].protocol == p.PROTOCOL_VERSION and msgs[0].pid == w.proc.pid
        assert any(isinstance(m, p.Loading) for m in msgs[1:-1])
        ready = msgs[-1]
        assert isinstance(ready, p.Ready) and ready.load_s >= 0.2
        assert ready.identity["engine"] == "fake" and "hasr_version" in ready.identity
    finally:
        assert w.close() == 0


def test_transcription_streams_progress_draft_and_sentences_before_the_result() -> None:
    w = WorkerClient()
    try:
        w.handshake()
        events, res = w.transcribe(7, np.zeros(16000 * 3, dtype=np.float32), language="Chinese")
        assert isinstance(res, p.Result) and res.id == 7
        kinds = {type(e) for e in events}
        assert {p.Progress, p.Draft, p.Sentence} <= kinds
        sentences = [e for e in events if isinstance(e, p.Sentence)]
        assert [s.index for s in sentences] == list(range(len(sentences)))
        assert to_json(res.result)["final"] == "".join(s.text for s in sentences)
        assert to_json(res.result)["language"] == "Chinese"
        progress = [e for e in events if isinstance(e, p.Progress)]
        assert progress[-1].done_s == progress[-1].total_s == 3.0
    finally:
        assert w.close() == 0


def test_a_failed_request_does_not_end_the_worker() -> None:
    w = WorkerClient()
    try:
        w.handshake()
        _, bad = w.transcribe(1, SECOND, options={"fake": {"fail": "runtime_failure"}})
        assert isinstance(bad, p.Failed) and bad.code == "runtime_failure" and bad.id == 1
        _, empty = w.transcribe(2, np.zeros(0, dtype=np.float32))
        assert isinstance(empty, p.Failed) and empty.code == "invalid_audio"
        _, good = w.transcribe(3, SECOND)
        assert isinstance(good, p.Result) and good.id == 3
        assert w.proc.poll() is None
    finally:
        assert w.close() == 0


def test_pcm_can_come_as_a_file_path_instead_of_a_memfd(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "pcm.f32"
    path.write_bytes(np.zeros(16000 * 2, dtype="<f4").tobytes())
    path.chmod(0o600)
    w = WorkerClient()
    try:
        w.handshake()
        w.send(p.Transcribe(id=5, pcm=str(path), frames=32000))
        _, res = w.collect(5)
        assert isinstance(res, p.Result) and to_json(res.result)["duration_s"] == 2.0
    finally:
        w.close()


def test_cancel_stops_a_running_request_and_the_worker_serves_the_next() -> None:
    w = WorkerClient()
    try:
        w.handshake()
        w.submit(1, np.zeros(16000 * 600, dtype=np.float32), options={"fake": {"rtf": 1.0}})  # 10 min of work
        while not isinstance(w.recv(), p.Progress):  # it is running
            pass
        w.send(p.Cancel(id=1))
        _, res = w.collect(1)  # were the cancel ignored, this would be the result, ten minutes later
        assert isinstance(res, p.Failed) and res.code == "cancelled"
        _, good = w.transcribe(2, SECOND)
        assert isinstance(good, p.Result)
    finally:
        assert w.close() == 0


def test_ping_is_answered_while_a_transcription_runs() -> None:
    w = WorkerClient()
    try:
        w.handshake()
        w.submit(1, np.zeros(16000 * 20, dtype=np.float32), options={"fake": {"rtf": 0.5}})  # 10 s of work
        while not isinstance(w.recv(), p.Progress):  # it is running
            pass
        w.send(p.Ping(nonce=42))
        seen = []
        while True:
            m = w.recv()
            seen.append(m)
            if isinstance(m, (p.Pong, p.Result)):
                break
        assert isinstance(seen[-1], p.Pong) and seen[-1].nonce == 42
        w.collect(1)
    finally:
        w.close()


def test_failed_load_is_reported_with_its_code_and_the_worker_exits() -> None:
    w = WorkerClient(env={"HASR_FAKE_FAIL_LOAD": "model_unavailable:no weights in /nowhere"})
    try:
        msgs = w.handshake()
        assert isinstance(msgs[-1], p.LoadFailed)
        assert msgs[-1].code == "model_unavailable" and "/nowhere" in msgs[-1].message
        assert w.proc.wait(10) == 1
    finally:
        w.close()


def test_protocol_version_mismatch_fails_loudly() -> None:
    w = WorkerClient(protocol=p.PROTOCOL_VERSION + 98)
    try:
        msgs = w.handshake()
        assert isinstance(msgs[0], p.Hello)
        assert isinstance(msgs[-1], p.LoadFailed) and msgs[-1].code == "protocol_mismatch"
        assert str(p.PROTOCOL_VERSION + 98) in msgs[-1].message
        assert w.proc.wait(10) == 3
    finally:
        w.close()


def test_worker_stdout_is_pointed_at_stderr_so_libraries_cannot_pollute_it() -> None:
    w = WorkerClient()
    w.handshake()
    w.transcribe(1, SECOND)
    assert w.close() == 0
    assert w.proc.stdout is not None and w.proc.stderr is not None
    # (close() closed the pipes; reopen the check through a fresh run that we read ourselves)
    w2 = WorkerClient()
    w2.handshake()
    w2.send(p.Shutdown())
    out, err = w2.proc.communicate(timeout=10)
    w2.sock.close()
    assert out == b""
    assert b"fake engine: loaded" in err


def test_worker_exits_when_the_daemon_end_of_the_channel_closes() -> None:
    w = WorkerClient()
    w.handshake()
    w.sock.close()
    assert w.proc.wait(5) == 0

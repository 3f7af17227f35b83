"""Live sessions under faults (issue 21 #9): every client event that cannot be applied is answered and the session
goes on, what a session may hold is bounded, a client that leaves writes no traceback, a stopping daemon finishes
the speech it received, a session behind a long job is told instead of left in silence.

A real daemon (the fake engine) and a plain Realtime-protocol WebSocket client; the unit tests at the end drive
``realtime.Live`` and the pool with plain values.
"""

from __future__ import annotations

import asyncio
import base64
import socket
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from collections.abc import Iterator

import numpy as np
import pytest
from conftest import wait_until
from daemon import Hasrd, write_wav
from live_client import LiveClient, pcm16_24k
from test_live import SR, sock_in, speech

from hasrd.protocol import Progress, Turn
from hasrd.realtime import Live
from hasrd.realtime_events import OUT_BYTES_PER_S, BadEvent, Pcm16To16k


@pytest.fixture(scope="module")
def fake(module_tmp: str) -> Iterator[Hasrd]:
    h = Hasrd(sock_in(module_tmp), env={"HASR_LIVE_IDLE_SEC": "20"})
    try:
        yield h
    finally:
        h.stop()


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_a_malformed_session_update_gets_an_error_event_and_the_session_goes_on(fake: Hasrd) -> None:
    """``"rate": "abc"`` used to kill the session's reader without a word: no error, audio ignored, the worker
    held until HASR_LIVE_IDLE_SEC."""
    c = LiveClient(fake.sock, query="?model=gpt-4o-transcribe&hasr_events=true")
    try:
        bad: list[Any] = [
            {"audio": {"input": {"format": {"type": "audio/pcm", "rate": "abc"}}}},
            {"audio": {"input": {"format": {"type": "audio/pcm", "rate": [1]}}}},
            {"audio": "x"},
            {"audio": {"input": {"transcription": {"language": 5}}}},
            {"audio": {"input": {"transcription": {"model": ["x"]}}}},
            {"audio": {"input": {"turn_detection": {"silence_duration_ms": "soon"}}}},
            {"audio": {"input": {"turn_detection": []}}},
        ]
        for session in bad:
            c.send({"type": "session.update", "session": session})
        errors_ = [c.wait_for("error", count=k)["error"] for k in range(1, len(bad) + 1)]
        assert [e["code"] for e in errors_] == ["invalid_value", "invalid_value", "invalid_value", "invalid_value",
                                                "invalid_value", "invalid_value", "invalid_value"], errors_
        assert "rate" in errors_[0]["param"] and "'abc'" in errors_[0]["message"]
        c.send({"type": "session.update", "session": {"audio": {"input": {
            "format": {"type": "audio/pcm", "rate": 24000}, "transcription": {"model": "gpt-4o-transcribe",
                                                                            "language": "zh"}}}}})
        assert c.wait_for("session.updated")["session"]["audio"]["input"]["transcription"]["language"] == "zh"
        c.feed(pcm16_24k(speech("en_hello_world")), realtime=False)
        assert c.finish()["final"]
    finally:
        c.close()


def test_a_client_that_closes_its_session_leaves_no_traceback_in_the_log(fake: Hasrd) -> None:
    """Every SDK session ends with the client's close; each used to write an ERROR traceback (the daemon's own
    close of a connection the client had closed) whenever nothing was sent to it after that."""
    before = len(fake.log())
    for how in ("silence", "mid-utterance", "finished"):
        c = LiveClient(fake.sock)
        c.update(language="zh")
        if how == "silence":
            c.feed(pcm16_24k(np.zeros(SR, np.float32)), realtime=False)
            c.wait_for("hasr.progress")
        else:
            c.feed(pcm16_24k(speech("en_hello_world")), realtime=False)
            c.wait_for("input_audio_buffer.speech_started")
            if how == "finished":
                c.finish()
        c.close()
        assert c.closed.wait(30)
        assert wait_until(lambda: fake.get("/api/ps")["in_flight"] == 0, timeout=60)
    log = fake.log()[before:]
    assert "Traceback" not in log and " ERROR " not in log, log


def test_completed_transcripts_carry_usage_that_the_openai_sdk_accepts(fake: Hasrd) -> None:
    from openai.types.realtime import ConversationItemInputAudioTranscriptionCompletedEvent as Completed

    c = LiveClient(fake.sock)
    try:
        c.update(language="zh")
        c.feed(pcm16_24k(speech("en_quick_brown_fox")), realtime=False)
        c.finish()
    finally:
        c.close()
    done = c.of("conversation.item.input_audio_transcription.completed")
    assert done
    for ev in done:
        parsed = Completed.model_validate({k: v for k, v in ev.items() if k != "_t"})
        assert parsed.usage is not None and parsed.usage.type == "duration"
        assert 1.0 < ev["usage"]["seconds"] < 4.0, ev  # the clip is 2.9 s of speech


def test_an_append_over_the_size_limit_is_told_before_the_1009_close(fake: Hasrd) -> None:
    c = LiveClient(fake.sock)
    try:
        c.update(language="zh")
        c.send({"type": "input_audio_buffer.append", "audio": base64.b64encode(b"\0" * (13 * 2**20)).decode()})
        err = c.wait_for("error", timeout=30)["error"]
        assert err["code"] == "message_too_large" and "16 MiB" in err["message"]
        assert c.closed.wait(30) and c.close_code == 1009
    finally:
        c.close()
    assert fake.get("/health")["status"] in ("ok", "idle")


def test_a_client_that_floods_without_reading_is_not_read_either_and_the_daemon_stays_small(fake: Hasrd) -> None:
    """Each invalid frame earns an error event; a client that never reads them used to grow the daemon's queue
    of events without bound (65 -> 172 MB in 40 s). Now the daemon stops reading it once its events back up."""
    from websockets.sync.client import unix_connect

    fake.get("/health")
    base = rss_kb(fake.proc.pid)
    # entered by hand, as LiveClient does: the flooding thread blocks inside send() holding the connection's
    # lock, so a ``with`` block's close() would wait on it for ever; a shutdown of the socket wakes the thread
    ws = unix_connect(fake.sock, "ws://hasr/v1/realtime?intent=transcription", max_size=None,
                      open_timeout=30).__enter__()
    sent = [0]

    def flood() -> None:
        try:
            for _ in range(200_000):
                ws.send("x" * 200)
                sent[0] += 1
        except Exception:
            pass

    t = threading.Thread(target=flood, daemon=True)
    t.start()
    t.join(20)  # the sender blocks once the daemon stops reading: the join times out, by design
    grown_mb = (rss_kb(fake.proc.pid) - base) / 1024
    blocked = t.is_alive()
    ws.socket.shutdown(socket.SHUT_RDWR)
    ws.socket.close()
    t.join(10)
    assert grown_mb < 25, f"daemon RSS grew {grown_mb:.0f} MB after {sent[0]} invalid frames"
    assert blocked or sent[0] == 200_000
    assert fake.get("/health")["status"] in ("ok", "idle")


def test_audio_waiting_in_front_of_a_loading_worker_is_bounded_and_the_client_told(tmp_path: Path) -> None:
    h = Hasrd(sock_in(tmp_path), env={"HASR_FAKE_LOAD_SEC": "4", "HASR_LIVE_MAX_PENDING_SEC": "2"})
    try:
        c = LiveClient(h.sock)
        c.update(language="zh")
        c.feed(pcm16_24k(np.zeros(6 * SR, np.float32)), realtime=False)  # 6 s at once, while the worker loads
        err = c.wait_for("error", timeout=30)["error"]
        assert err["code"] == "input_audio_buffer_full" and "HASR_LIVE_MAX_PENDING_SEC=2" in err["message"]
        result = c.finish(timeout=60)  # the session goes on with what it kept
        assert result is not None
        c.close()
        assert c.of("hasr.progress")
        assert max(e["received_s"] for e in c.of("hasr.progress")) <= 2.5  # only what was kept ever reached it
    finally:
        h.stop()


def test_a_live_session_behind_a_long_job_is_refused_after_the_queue_wait(tmp_path: Path) -> None:
    """A plain OpenAI client waiting for the worker used to hear nothing for as long as the job ran."""
    h = Hasrd(sock_in(tmp_path), env={"HASR_WORKER_PARALLEL": "1", "HASR_FAKE_RTF": "10", "HASR_LIVE_QUEUE_SEC": "1"})
    wav = write_wav(str(tmp_path / "long.wav"), seconds=3.0)
    codes: list[int] = []

    def file_job() -> None:
        with h.client(120) as hc:
            codes.append(hc.post("/transcribe", json={"audio_path": wav}).status_code)

    try:
        with h.client() as hc:
            hc.post("/api/load")
        job = threading.Thread(target=file_job)
        job.start()
        assert wait_until(lambda: h.get("/api/ps")["running"] == 1, timeout=60)
        c = LiveClient(h.sock, query="?intent=transcription")  # no hasr events: the plain protocol
        c.update(language="zh")
        c.feed(pcm16_24k(speech("en_hello_world")[: SR]), realtime=False)
        err = c.wait_for("error", timeout=60)["error"]
        assert err["code"] == "queue_full" and "HASR_LIVE_QUEUE_SEC" in err["message"], err
        assert h.get("/api/ps")["running"] == 1  # the file job was not disturbed
        assert c.closed.wait(30)
        c.close()
        job.join(120)
        assert codes == [200]
        assert h.get("/api/ps")["queue"] == 0
    finally:
        h.stop()


def test_stopping_the_daemon_finishes_the_speech_received_then_says_why(tmp_path: Path) -> None:
    """A stop used to close the session at once with 1012 and lose the text of the speech already received."""
    h = Hasrd(sock_in(tmp_path), env={"HASR_STOP_GRACE_SEC": "10"})
    c = LiveClient(h.sock)
    try:
        c.update(language="zh")
        audio = pcm16_24k(speech("en_quick_brown_fox"))
        c.feed(audio[: len(audio) * 3 // 8 * 2])  # mid-utterance: speech started, not yet stopped
        c.wait_for("input_audio_buffer.speech_started", timeout=60)
        assert not c.of("conversation.item.input_audio_transcription.completed")
        code = h.stop()
        assert c.closed.wait(30)
    finally:
        c.close()
    assert code == 0
    kinds = [e["type"] for e in c.events]
    completed = c.of("conversation.item.input_audio_transcription.completed")
    assert completed and completed[0]["transcript"], kinds
    err = c.of("error")[-1]["error"]
    assert err["code"] == "shutting_down" and "transcribed" in err["message"], err
    assert len(c.of("error")) == 1, c.of("error")
    assert kinds.index("conversation.item.input_audio_transcription.completed") < kinds.index("error")
    assert c.of("hasr.done") and c.of("hasr.done")[0]["result"]["final"] == completed[0]["transcript"]
    assert c.close_code == 1012


# ---- plain values: the session's bookkeeping ------------------------------------------------------------------


def live_of(**settings: Any) -> Live:
    s = SimpleNamespace(live_max_pending_sec=120.0, live_idle_sec=120.0, stop_grace_sec=3.0, live_queue_sec=60.0)
    s.__dict__.update(settings)
    ws = SimpleNamespace(query_params={"intent": "transcription", "hasr_events": "true"})
    return Live(SimpleNamespace(settings=s), ws)  # type: ignore[arg-type]


def drain(live: Live) -> list[dict[str, Any]]:
    out = []
    while not live.out.empty():
        ev = live.out.get_nowait()
        assert ev is not None
        out.append(ev)
    return out


def test_progress_counts_the_audio_still_waiting_in_front_of_the_worker() -> None:
    async def go() -> list[dict[str, Any]]:
        live = live_of()
        live.take_audio(b"\0" * (5 * OUT_BYTES_PER_S))  # 5 s received, not yet handed on
        live.on_event(Progress(id=1, done_s=1.0, total_s=2.0))
        return drain(live)

    (ev,) = asyncio.run(go())
    assert ev["type"] == "hasr.progress" and ev["received_s"] == 7.0 and ev["lag_s"] == 6.0


def test_appends_past_the_pending_limit_are_dropped_and_said_once_a_second() -> None:
    async def go() -> Live:
        live = live_of(live_max_pending_sec=1.0)
        live.take_audio(b"\0" * int(0.6 * OUT_BYTES_PER_S))
        with pytest.raises(BadEvent) as e:
            live.take_audio(b"\0" * int(0.6 * OUT_BYTES_PER_S))
        assert e.value.code == "input_audio_buffer_full" and "0.6 s so far" in e.value.message
        live.take_audio(b"\0" * int(0.6 * OUT_BYTES_PER_S))  # within the second: dropped, not said again
        assert live.dropped_s == pytest.approx(1.2)
        assert live.inbox.qsize() == 1 and live.pending == int(0.6 * OUT_BYTES_PER_S)
        return live

    asyncio.run(go())


def test_a_large_append_is_resampled_piecewise_to_the_same_audio() -> None:
    t = np.arange(24000 * 5) / 24000
    pcm = (np.sin(2 * np.pi * 440 * t) * 12000).astype("<i2").tobytes()
    whole = np.frombuffer(Pcm16To16k().convert(pcm), np.float32)
    small = Pcm16To16k()
    parts = np.frombuffer(b"".join(small.convert(pcm[i:i + 960]) for i in range(0, len(pcm), 960)), np.float32)
    n = min(len(whole), len(parts))
    assert abs(len(whole) - 80000) <= 64 and np.max(np.abs(whole[:n] - parts[:n])) < 1e-3


def test_completed_usage_is_the_utterance_span() -> None:
    async def go() -> list[dict[str, Any]]:
        live = live_of()
        live.on_event(Turn(id=1, segment=0, kind="started", start_s=1.25))
        live.on_event(Turn(id=1, segment=0, kind="stopped", end_s=3.75))
        live.on_event(Turn(id=1, segment=0, kind="completed", text="x"))
        return drain(live)

    completed = [e for e in asyncio.run(go()) if e["type"].endswith(".completed")]
    assert completed[0]["usage"] == {"type": "duration", "seconds": 2.5}

"""A request queued behind a job whose client left is served at once when the worker reloads fast (the whisper
engine on the CPU finishes a batch of clips before it notices a Cancel: 8.5-13.3 s measured); a worker that
loads slowly is still waited for. benchmarks/cancel.py measures the wait with the real whisper engine."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import socket
import threading
import time
from typing import Any

import httpx
from conftest import wait_until
from daemon import Hasrd, write_wav

from hasrd import protocol as p
from hasrd.workerproc import Handshake, Watch, WorkerProcess


def leaving_client(sock: str, wav: str, options: dict[str, Any]) -> socket.socket:
    """A client that asks for a transcription and will vanish (the caller closes the socket)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sock)
    body = json.dumps({"audio_path": wav, "options": options}).encode()
    s.sendall(b"POST /transcribe HTTP/1.1\r\nHost: hasr\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    return s


def queued_behind(d: Hasrd, wav: str, hang_wav: str) -> tuple[httpx.Response, int, int]:
    """Run a job that ignores Cancel, queue a second one behind it, let the first client vanish; return the
    second's response and the worker pids before and after."""
    with d.client(120) as c:
        assert c.post("/transcribe", json={"audio_path": wav}).status_code == 200
    pid = d.get("/api/ps")["pid"]
    a = leaving_client(d.sock, hang_wav, {"fake": {"hang": True}})
    assert wait_until(lambda: d.get("/health")["busy"], 60)
    got: dict[str, httpx.Response] = {}

    def second() -> None:
        with d.client(120) as c:
            got["r"] = c.post("/transcribe", json={"audio_path": wav})

    t = threading.Thread(target=second)
    t.start()
    assert wait_until(lambda: d.get("/health")["queue"] == 1, 60)
    a.close()
    t.join(120)
    return got["r"], pid, d.get("/api/ps")["pid"]


def test_a_request_behind_a_vanished_client_gets_a_new_worker_at_once_when_loading_is_cheap(
        short_tmp: str) -> None:
    d = Hasrd(os.path.join(short_tmp, "s.sock"), env={"HASR_WORKER_PARALLEL": "1", "HASR_CANCEL_GRACE_SEC": "600"})
    try:
        wav, hang = write_wav(os.path.join(short_tmp, "a.wav"), 1.0), write_wav(os.path.join(short_tmp, "h.wav"), 5.0)
        r, before, after = queued_behind(d, wav, hang)
        assert r.status_code == 200 and r.json()["final"], r.text
        assert after != before  # not the 600 s grace: the stuck worker was replaced
        assert "while a request waits; killing it" in d.log()
    finally:
        d.stop()


def test_a_worker_that_loads_slowly_is_waited_for_up_to_the_grace(short_tmp: str) -> None:
    d = Hasrd(os.path.join(short_tmp, "s.sock"), env={"HASR_WORKER_PARALLEL": "1",  # one job a worker: the queue
                                                      "HASR_CANCEL_GRACE_SEC": "2", "HASR_FAKE_LOAD_SEC": "5.5"})
    try:
        wav, hang = write_wav(os.path.join(short_tmp, "a.wav"), 1.0), write_wav(os.path.join(short_tmp, "h.wav"), 5.0)
        r, before, after = queued_behind(d, wav, hang)
        assert r.status_code == 200 and after != before
        log = d.log()
        assert "ignored Cancel for" in log and "while a request waits" not in log
    finally:
        d.stop()


class Quiet(WorkerProcess):
    """A WorkerProcess without a process, loaded in ``load_s``: the Cancel it sends is recorded, and kill() marks
    it dead."""

    def __init__(self, load_s: float) -> None:  # no super(): no process, no channel
        self.pid = 4242
        self.hs = Handshake(ready=p.Ready(load_s=load_s))
        self.pending = {}
        self.ids = itertools.count(1)
        self.dead = asyncio.Event()
        self.death_reason = ""
        self.sent: list[Any] = []

    async def send(self, msg: Any, fds: Any = ()) -> None:
        self.sent.append(msg)

    def kill(self, reason: str = "") -> None:
        self.death_reason = reason
        self.dead.set()


def test_a_cancelled_job_on_a_worker_holding_other_jobs_gets_the_full_grace_not_the_quick_one() -> None:
    """Killing a worker early for a waiting request (loading a new one is faster) is right when the cancelled
    job is all it holds; with other jobs on it, they would fail with worker_crashed: it waits the full grace."""
    async def cancel(others: int, stops_after: float | None) -> tuple[float, str]:
        w = Quiet(load_s=0.05)  # it reloads fast, and someone waits: the quick grace (QUICK_CANCEL_SEC)
        watch = Watch(cancel_grace_sec=2.0, waiting=lambda: 1)
        pend = w.open(None)
        for _ in range(others):
            w.open(None)
        if stops_after is not None:
            asyncio.get_running_loop().call_later(stops_after, pend.future.set_result, None)
        t0 = time.monotonic()
        await w.cancel_and_wait(pend, watch)
        assert [type(m).__name__ for m in w.sent] == ["Cancel"]
        return time.monotonic() - t0, w.death_reason

    async def main() -> None:
        took, why = await cancel(others=0, stops_after=None)
        assert took < 1.5 and "loading a new one is faster" in why
        took, why = await cancel(others=1, stops_after=None)
        assert took >= 1.95 and "ignored Cancel" in why  # the full grace, then killed as before
        took, why = await cancel(others=2, stops_after=0.2)
        assert 0.15 <= took < 1.5 and why == ""  # it stopped within the grace: the worker and its jobs live on

    asyncio.run(main())

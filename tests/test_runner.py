"""One worker's lifecycle (hasrd.runner) under the pool with one worker allowed, against real fake-engine workers
that misbehave on request."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time
from typing import Any

import numpy as np
import pytest

from hasrd import config, errors
from hasrd.jobevents import JobEvent, Loading, Queued
from hasrd.lifecycle import State
from hasrd.modelspec import ModelSpec
from hasrd.options import parse as parse_options
from hasrd.pcm import PcmBuffer
from hasrd.placement import CPU, Device
from hasrd.runner import Runner
from hasrd.runnerapi import RunnerHooks
from hasrd.scheduler import Pool
from hasrd.status import PoolStatus
from hasrd.workerenv import worker_env
from hasrd.workerproc import WorkerProcess
from tests.conftest import pid_alive, run


def settings(**kw: Any) -> config.Settings:
    # worker_parallel=1: these real fake-engine workers serve one request after another until issue 30's worker
    # lands, and the tests here (and test_pool.py's) pin one job per worker: the queue, cancel, live first
    base = dict(engine="fake", idle_ttl_sec=60.0, load_timeout_sec=20.0, hello_timeout_sec=20.0,
                stall_sec=20.0, backoff_base_sec=0.05, backoff_max_sec=0.2,
                stop_grace_sec=0.5, max_load_failures=3, worker_parallel=1)
    base.update(kw)
    return config.Settings(**base)


FAKE = ModelSpec("fake", "fake", "", 300)


class Knobs(dict):  # type: ignore[type-arg]
    """The fake worker's environment, read at each spawn (tests change it between loads), and every runner the
    pool made."""

    runners: list[Runner]


def make(knobs: dict[str, str] | None = None, **kw: Any) -> tuple[Pool, Knobs]:
    """A pool of one worker whose spawn reads ``knobs`` at each spawn."""
    live = Knobs(knobs or {})
    live.runners = []

    def make_runner(spec: ModelSpec, device: str, hooks: RunnerHooks) -> Runner:
        async def spawn(report: Any) -> WorkerProcess:
            return await WorkerProcess.spawn("fake", env=worker_env(os.environ, live))
        runner = Runner(settings(**kw), spawn, hooks)
        live.runners.append(runner)
        return runner

    return Pool(settings(**kw), make_runner, FAKE, inventory=lambda: [Device(CPU, 16000, 24000)],
                max_workers=1), live


def jobs_running(pool: Pool) -> int:
    """Jobs and live sessions running on the pool's workers now."""
    return pool.snapshot().running


def spawns(knobs: Knobs) -> int:
    return sum(r.spawns for r in knobs.runners)


def process_of(pool: Pool) -> WorkerProcess | None:
    """The pool's (newest) worker process, if any."""
    ref = list(pool.refs.values())[-1] if pool.refs else None
    return ref.runner.worker if ref else None


def pcm(seconds: float = 1.0) -> PcmBuffer:
    return PcmBuffer.from_array(np.zeros(int(16000 * seconds), dtype=np.float32))


async def transcribe(sup: Pool, seconds: float = 1.0, options: dict[str, Any] | None = None,
                     **kw: Any) -> dict[str, Any]:
    with pcm(seconds) as buf:
        return await sup.transcribe(buf, options=parse_options(options), **kw)


def test_concurrent_first_requests_cause_exactly_one_load() -> None:
    async def main() -> None:
        sup, knobs = make({"HASR_FAKE_LOAD_SEC": "0.5"})
        results = await asyncio.gather(*(transcribe(sup) for _ in range(5)))
        assert all(r.final for r in results)
        assert spawns(knobs) == 1  # one worker started, and every request served by its one load
        await sup.close()
    run(main())


def test_a_failed_load_reaches_every_waiter_with_the_reason_and_the_next_request_retries() -> None:
    async def main() -> None:
        sup, knobs = make({"HASR_FAKE_FAIL_LOAD": "model_unavailable:weights missing in /x",
                           "HASR_FAKE_LOAD_SEC": "0.3"})
        outcomes = await asyncio.gather(*(transcribe(sup) for _ in range(4)), return_exceptions=True)
        assert all(isinstance(o, errors.Unavailable) for o in outcomes), outcomes
        assert all("weights missing in /x" in str(o) for o in outcomes)
        assert spawns(knobs) == 1 and sup.state == State.BACKOFF
        snap = sup.snapshot()  # not "loading": nothing is loading until the next request retries
        assert snap.health == "idle" and snap.error and "weights missing" in snap.error
        assert "the next request retries" in snap.status_text
        knobs.pop("HASR_FAKE_FAIL_LOAD")
        result = await transcribe(sup)
        assert result.final and spawns(knobs) == 2 and sup.state == State.READY
        await sup.close()
    run(main())


def test_consecutive_load_failures_reach_fatal_and_an_explicit_load_clears_it() -> None:
    async def main() -> None:
        sup, knobs = make({"HASR_FAKE_FAIL_LOAD": "runtime_failure:CUDA error: no kernel image"},
                          max_load_failures=3)
        for _ in range(2):
            with pytest.raises(errors.LoadFailed):
                await transcribe(sup)
        with pytest.raises(errors.Fatal):  # the failure that makes it fatal already says so
            await transcribe(sup)
        assert sup.state == State.FATAL
        snap = sup.snapshot()
        assert snap.health == "error" and snap.error and "no kernel image" in snap.error
        before = spawns(knobs)
        with pytest.raises(errors.Fatal) as exc:
            await transcribe(sup)
        assert "no kernel image" in exc.value.message and spawns(knobs) == before  # no new attempt
        knobs.pop("HASR_FAKE_FAIL_LOAD")
        snap = await sup.load()
        assert snap.state == State.READY and knobs.runners[-1].failures == 0
        assert (await transcribe(sup)).final
        await sup.close()
    run(main())


def test_ttl_unloads_after_the_last_request_and_never_during_one() -> None:
    async def main() -> None:
        sup, _ = make(idle_ttl_sec=0.3)
        await transcribe(sup)
        pid = process_of(sup).pid if process_of(sup) else 0
        # A request lasting ~1.2 s (3x the TTL): the worker must survive it.
        task = asyncio.create_task(transcribe(sup, 1.2, options={"fake": {"rtf": 1.0}}))
        await asyncio.sleep(0.9)
        assert sup.state == State.READY and process_of(sup) and process_of(sup).pid == pid and pid_alive(pid)
        await task
        assert sup.state == State.READY  # TTL counts from the end of the request
        t_end = time.monotonic()
        while sup.state != State.STOPPED and time.monotonic() - t_end < 120:  # only a hang runs into this
            await asyncio.sleep(0.02)
        assert sup.state == State.STOPPED
        assert time.monotonic() - t_end >= 0.25  # counted from the end of the request, never before the TTL
        assert not pid_alive(pid)
        await sup.close()
    run(main())


def test_queued_requests_keep_the_worker_alive_past_its_ttl() -> None:
    async def main() -> None:
        sup, knobs = make(idle_ttl_sec=0.2)
        tasks = [asyncio.create_task(transcribe(sup, 0.5, options={"fake": {"rtf": 1.0}})) for _ in range(3)]
        await asyncio.gather(*tasks)
        assert spawns(knobs) == 1
        await sup.close()
    run(main())


def test_kill_9_of_the_worker_mid_request_gives_worker_crashed_and_the_next_request_a_new_pid() -> None:
    async def main() -> None:
        sup, _ = make()
        pids = set()
        for _ in range(20):
            task = asyncio.create_task(transcribe(sup, 5.0, options={"fake": {"rtf": 1.0}}))
            while sup.state != State.READY or not jobs_running(sup):
                await asyncio.sleep(0.01)
            assert process_of(sup) is not None
            pid = process_of(sup).pid
            pids.add(pid)
            await asyncio.sleep(0.05)
            os.kill(pid, signal.SIGKILL)
            with pytest.raises(errors.WorkerCrashed) as exc:  # a crash, seen as one (not a stall much later)
                await task
            assert exc.value.code == "worker_crashed" and str(pid) in exc.value.message
            result = await transcribe(sup, 0.2)
            assert result.final and process_of(sup) and process_of(sup).pid != pid
        assert len(pids) == 20
        await sup.close()
    run(main(), timeout=240)


def test_a_worker_crashing_at_the_start_of_a_request_is_replaced() -> None:
    async def main() -> None:
        sup, knobs = make({"HASR_FAKE_CRASH_AFTER": "1"})
        await transcribe(sup)
        with pytest.raises(errors.WorkerCrashed):
            await transcribe(sup)
        knobs.pop("HASR_FAKE_CRASH_AFTER")
        assert (await transcribe(sup)).final and spawns(knobs) == 2
        await sup.close()
    run(main())


def test_a_worker_that_stops_reporting_progress_is_killed_after_the_stall_time() -> None:
    async def main() -> None:
        sup, _ = make(stall_sec=0.7)
        await transcribe(sup, 0.1)
        assert process_of(sup) is not None
        pid = process_of(sup).pid
        t0 = time.monotonic()
        with pytest.raises(errors.Stalled) as exc:
            await transcribe(sup, 0.1, options={"fake": {"hang": True}})
        assert time.monotonic() - t0 >= 0.6 and exc.value.status == 504  # not before the stall time
        assert exc.value.code == "stalled" and "HASR_STALL_SEC" in exc.value.message
        assert not pid_alive(pid)
        assert (await transcribe(sup, 0.1)).final and process_of(sup) and process_of(sup).pid != pid
        await sup.close()
    run(main())


def test_queue_time_is_not_charged_to_the_stall_watchdog() -> None:
    async def main() -> None:
        sup, _ = make(stall_sec=0.8)
        # Each takes ~0.6 s of work; the third waits ~1.2 s in the queue, more than the stall time.
        results = await asyncio.gather(*(transcribe(sup, 0.6, options={"fake": {"rtf": 1.0}}) for _ in range(3)))
        assert max(r.timings.queue_s for r in results) > 0.8
        await sup.close()
    run(main())


def test_a_worker_ignoring_sigterm_and_shutdown_is_sigkilled() -> None:
    async def main() -> None:
        sup, _ = make({"HASR_FAKE_IGNORE_SIGTERM": "1"}, stop_grace_sec=0.3)
        await sup.load()
        assert process_of(sup) is not None
        worker = process_of(sup)
        t0 = time.monotonic()
        await sup.unload()
        assert worker.exit_code == -signal.SIGKILL  # killed, after its grace (SIGTERM was ignored)
        assert time.monotonic() - t0 >= 0.3
        assert sup.state == State.STOPPED and not pid_alive(worker.pid)
    run(main())


def test_a_cooperative_worker_exits_0_on_shutdown() -> None:
    async def main() -> None:
        sup, _ = make()
        await sup.load()
        worker = process_of(sup)
        assert worker is not None
        await sup.unload()
        assert worker.exit_code == 0 and sup.state == State.STOPPED
    run(main())


def test_the_queue_is_fifo_and_bounded() -> None:
    async def main() -> None:
        sup, _ = make(max_queue=2)
        await sup.load()
        order: list[int] = []

        async def job(i: int) -> None:
            await transcribe(sup, 0.3, options={"fake": {"rtf": 1.0}})
            order.append(i)

        tasks = []
        for i in range(3):
            tasks.append(asyncio.create_task(job(i)))
            await asyncio.sleep(0.05)
        with pytest.raises(errors.QueueFull) as exc:
            await transcribe(sup)
        assert exc.value.status == 503 and exc.value.retry_after
        await asyncio.gather(*tasks)
        assert order == [0, 1, 2]
        await sup.close()
    run(main())


def test_a_cancelled_request_frees_its_slot_and_the_worker_survives() -> None:
    async def main() -> None:
        sup, _ = make()
        task = asyncio.create_task(transcribe(sup, 10.0, options={"fake": {"rtf": 1.0}}))
        while not jobs_running(sup):
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)
        pid = process_of(sup).pid if process_of(sup) else 0
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert jobs_running(sup) == 0 and sup.in_flight == 0
        assert (await transcribe(sup, 0.2)).final and process_of(sup) and process_of(sup).pid == pid
        await sup.close()
    run(main())


def test_unload_waits_for_the_running_job() -> None:
    async def main() -> None:
        sup, _ = make()
        task = asyncio.create_task(transcribe(sup, 0.8, options={"fake": {"rtf": 1.0}}))
        while not jobs_running(sup):
            await asyncio.sleep(0.01)
        await sup.unload()
        assert task.done() and (await task).final
        assert sup.state == State.STOPPED
    run(main())


def test_state_changes_are_reported_with_a_status_line() -> None:
    async def main() -> None:
        seen: list[PoolStatus] = []
        sup, _ = make({"HASR_FAKE_LOAD_SEC": "0.3"})
        sup.on_change = seen.append
        await transcribe(sup, 0.5, name="会议.wav", options={"fake": {"rtf": 1.0}})
        await sup.unload()
        states = [s.state.value for s in seen]
        changes = [s for i, s in enumerate(states) if i == 0 or s != states[i - 1]]
        # the pool reports the admission (nothing loaded yet), then the worker's every state
        assert changes[:2] == ["stopped", "starting"] and "ready" in changes and changes[-1] == "stopped"
        texts = [s.status_text for s in seen]
        assert any(t.startswith("loading fake models") for t in texts)
        assert any(t.startswith("transcribing 会议.wav") and t.endswith("%") for t in texts)
        assert "unloading" in texts
    run(main())


def test_the_worker_environment_is_scrubbed_of_systemd_variables() -> None:
    env = worker_env({"NOTIFY_SOCKET": "/run/x", "LISTEN_FDS": "1", "LISTEN_PID": "5", "LISTEN_FDNAMES": "a",
                      "WATCHDOG_USEC": "1", "WATCHDOG_PID": "2", "HOME": "/root", "PYTHONPATH": "/p"})
    assert set(env) == {"HOME", "PYTHONPATH"}
    user, shim = env["PYTHONPATH"].split(os.pathsep)
    assert user == "/p" and os.listdir(shim) == ["hasrd"]  # only hasr itself, never the daemon's site-packages
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", "import hasrd.worker.main as m; print(m.__file__)"], cwd="/",
                         env={**os.environ, "PYTHONPATH": shim}, capture_output=True, text=True, check=True)
    assert out.stdout.strip().startswith(shim)

    async def main() -> None:
        os.environ["NOTIFY_SOCKET"] = "/run/hasr-test-notify"
        try:
            w = await WorkerProcess.spawn("fake")
        finally:
            del os.environ["NOTIFY_SOCKET"]
        await w.handshake(10, 10)
        with open(f"/proc/{w.pid}/environ", "rb") as f:
            assert b"NOTIFY_SOCKET" not in f.read()
        with pcm(0.2) as buf:
            assert (await w.transcribe(buf)).final  # it serves
        assert await w.stop() == 0
    run(main())


def test_a_worker_speaking_another_protocol_is_refused_loudly(short_tmp: str) -> None:
    script = os.path.join(short_tmp, "old_worker.py")
    with open(script, "w") as f:
        f.write("import os, socket, sys\n"
                "from hasrd import protocol as p\n"
                "fd = int(sys.argv[sys.argv.index('--fd') + 1])\n"
                "s = socket.socket(fileno=fd)\n"
                "s.sendall(p.encode(p.Hello(protocol=0, pid=os.getpid(), python='3', hasr_version='0.0.1')))\n"
                "import time; time.sleep(30)\n")

    async def main() -> None:
        import sys
        w = await WorkerProcess.spawn("fake", argv=[sys.executable, script])
        with pytest.raises(errors.ProtocolMismatch) as exc:
            await w.handshake(10, 10)
        assert "protocol 0" in exc.value.message and "0.0.1" in exc.value.message
        await w.stop(grace=0.2)
        assert not pid_alive(w.pid)
    run(main())


def test_a_client_leaving_mid_request_does_not_kill_a_healthy_worker_even_if_cancelled_twice() -> None:
    async def main() -> None:
        sup, _ = make()
        await sup.load()
        assert process_of(sup) is not None
        pid = process_of(sup).pid
        task = asyncio.create_task(transcribe(sup, 10.0, options={"fake": {"rtf": 1.0}}))
        while not jobs_running(sup):
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)
        task.cancel()
        await asyncio.sleep(0)
        task.cancel()  # anyio cancels every await of a cancelled scope: the cleanup must survive that
        with pytest.raises(asyncio.CancelledError):
            await task
        assert process_of(sup) is not None and process_of(sup).pid == pid and pid_alive(pid)
        assert (await transcribe(sup, 0.2)).final and process_of(sup).pid == pid
        await sup.close()
    run(main())


def test_unload_during_a_load_lets_the_request_that_started_it_finish() -> None:
    async def main() -> None:
        sup, _ = make({"HASR_FAKE_LOAD_SEC": "0.6"})
        task = asyncio.create_task(transcribe(sup, 0.5, options={"fake": {"rtf": 0.5}}))
        while sup.state != State.STARTING:  # the load it started is under way (0.6 s of it)
            await asyncio.sleep(0.01)
        await sup.unload()
        result = await task  # not "cancelled": unload waits for the running job, including this one
        assert result.final and sup.state == State.STOPPED
    run(main())


def test_a_crash_reports_how_the_worker_died_and_its_last_words() -> None:
    async def main() -> None:
        sup, _ = make()
        with pytest.raises(errors.WorkerCrashed) as exc:
            await transcribe(sup, 1.0, options={"fake": {"crash": True}})
        assert "killed by SIGKILL" in exc.value.message and "fake engine: loaded" in exc.value.message
        await sup.close()
    run(main())


def test_a_worker_that_cannot_start_says_why(short_tmp: str) -> None:
    async def main() -> None:
        async def spawn(report: Any) -> WorkerProcess:
            return await WorkerProcess.spawn("fake", argv=[sys.executable, "-c",
                                                           "import sys; sys.exit('No module named msgspec')"])

        runner = Runner(settings(), spawn)
        with pytest.raises(errors.LoadFailed) as exc, pcm(1.0) as buf:
            await runner.transcribe(buf)
        assert "exited with code 1" in exc.value.message and "No module named msgspec" in exc.value.message
    run(main())


def test_with_worker_parallel_2_one_worker_holds_two_jobs_and_its_death_fails_both_with_worker_crashed() -> None:
    """HASR_WORKER_PARALLEL=2: both requests go to the one worker at once (this tree's worker serves them one
    after the other; issue 30's decodes them together), its status shows both, and a kill -9 fails each with
    worker_crashed (each job reaps the dead worker; once is enough); the next request gets a new worker."""
    async def main() -> None:
        sup, knobs = make(worker_parallel=2)
        await sup.load()
        pid = process_of(sup).pid if process_of(sup) else 0
        jobs = [asyncio.create_task(transcribe(sup, 5.0, name=f"{n}.wav", options={"fake": {"rtf": 1.0}}))
                for n in "ab"]
        while jobs_running(sup) < 2:
            await asyncio.sleep(0.01)
        assert not sup.waiting and len(sup.refs) == 1
        st = knobs.runners[0].status()
        assert [j.name for j in st.jobs] == ["a.wav", "b.wav"] and st.job is not None and st.job.name == "a.wav"
        row = sup.snapshot().workers[0]
        assert row.running == 2 and [j.name for j in row.jobs] == ["a.wav", "b.wav"]
        os.kill(pid, signal.SIGKILL)
        outcomes = await asyncio.gather(*jobs, return_exceptions=True)
        assert all(isinstance(o, errors.WorkerCrashed) and str(pid) in o.message for o in outcomes), outcomes
        assert jobs_running(sup) == 0 and not pid_alive(pid)
        assert (await transcribe(sup, 0.2)).final and process_of(sup) and process_of(sup).pid != pid
        assert spawns(knobs) == 2
        await sup.close()
    run(main())


def test_a_job_ignoring_cancel_is_killed_and_the_queued_job_gets_a_new_worker() -> None:
    async def main() -> None:
        sup, _ = make(cancel_grace_sec=0.5)
        await sup.load()
        assert process_of(sup) is not None
        pid = process_of(sup).pid
        hung = asyncio.create_task(transcribe(sup, 1.0, options={"fake": {"hang": True}}))
        while not jobs_running(sup):
            await asyncio.sleep(0.01)
        queued = asyncio.create_task(transcribe(sup, 0.2))
        while not sup.waiting:
            await asyncio.sleep(0.01)
        hung.cancel()
        with pytest.raises(asyncio.CancelledError):
            await hung
        result = await queued  # not worker_crashed: it was not handed the dying worker
        assert result.final and process_of(sup) is not None and process_of(sup).pid != pid and not pid_alive(pid)
        await sup.close()
    run(main())


def test_unload_waits_for_the_running_job_only_and_the_queue_goes_on_with_a_new_worker() -> None:
    async def main() -> None:
        sup, _ = make()
        first = asyncio.create_task(transcribe(sup, 0.8, options={"fake": {"rtf": 1.0}}))
        while not jobs_running(sup):
            await asyncio.sleep(0.01)
        assert process_of(sup) is not None
        pid = process_of(sup).pid
        queued = [asyncio.create_task(transcribe(sup, 0.8, options={"fake": {"rtf": 1.0}})) for _ in range(2)]
        while len(sup.waiting) < 2:
            await asyncio.sleep(0.01)
        await sup.unload()
        # the running job ended, the queue did not run: unload waited for that job only
        assert first.done() and not any(q.done() for q in queued)
        results = await asyncio.gather(*queued)
        assert all(r.final for r in results) and process_of(sup) and process_of(sup).pid != pid
        await sup.close()
    run(main())


def test_a_one_megabyte_stderr_line_neither_hangs_the_load_nor_the_shutdown(caplog: pytest.LogCaptureFixture) -> None:
    """vLLM and Rust libraries print lines far past asyncio's 64 KiB readline limit; the old reader died on
    one, the pipe filled and the worker blocked in 'starting' for ever."""
    async def main() -> None:
        w = await WorkerProcess.spawn("fake", env=worker_env(os.environ, {"HASR_FAKE_STDERR_BYTES": str(1 << 20)}))
        ready = await asyncio.wait_for(w.handshake(30, 30), 60)  # a hang detector, not a speed limit
        assert ready.identity["engine"] == "fake"
        with pcm(0.5) as buf:
            assert (await asyncio.wait_for(w.transcribe(buf), 60)).engine == "fake"
        assert await asyncio.wait_for(w.stop(grace=10), 60) == 0  # it prints another 1 MB on its way out
    with caplog.at_level(logging.INFO, logger="hasrd.worker"):
        run(main())
    long = [r.getMessage() for r in caplog.records if "fake engine" in r.getMessage() and "xxxx" in r.getMessage()]
    assert len(long) == 2 and all("more bytes)" in m and len(m) < 3000 for m in long), [m[:80] for m in long]
    assert "fake engine load" in long[0] and "fake engine close" in long[1]


def test_a_live_session_goes_ahead_of_waiting_files_and_they_hear_their_new_places() -> None:
    """The policy (docs/API.md "Live transcription"): the running job is never interrupted; a live session
    takes the worker next, ahead of files already waiting, which are told their new queue positions; files
    run once the session ends."""
    async def main() -> None:
        sup, _ = make()
        order: list[str] = []
        heard: dict[str, list[int]] = {"b": [], "c": []}

        async def file(name: str, secs: float) -> None:
            def on_event(ev: JobEvent) -> None:
                if isinstance(ev, Queued) and name in heard:
                    heard[name].append(ev.position)
            await transcribe(sup, secs, options={"fake": {"rtf": 1.0}}, on_event=on_event)
            order.append(name)

        running = asyncio.create_task(file("a", 0.6))
        while not jobs_running(sup):
            await asyncio.sleep(0.01)
        waiting = [asyncio.create_task(file("b", 0.2)), asyncio.create_task(file("c", 0.2))]
        while len(sup.waiting) < 2:
            await asyncio.sleep(0.01)
        lease = sup.admit()
        live_heard: list[JobEvent] = []
        async with sup.live(language="zh", on_event=live_heard.append, lease=lease) as session:
            order.append("live")
            await session.audio(np.zeros(16000, np.float32).tobytes())
            result = await session.end()
        lease.release()
        await asyncio.gather(running, *waiting)
        assert order == ["a", "live", "b", "c"]
        assert [e.position for e in live_heard if isinstance(e, Queued)] == [1]
        assert heard["b"][:2] == [1, 2] and heard["c"][:2] == [2, 3]  # then they move up as the queue goes
        assert result.live is True and sup.in_flight == 0
        await sup.close()
    run(main())


def test_a_live_session_waiting_past_its_max_wait_gets_queue_full_and_leaves_the_queue() -> None:
    """HASR_LIVE_QUEUE_SEC: a live session behind a running job is told, not left waiting in silence."""
    async def main() -> None:
        sup, _ = make()
        running = asyncio.create_task(transcribe(sup, 3.0, name="long.wav", options={"fake": {"rtf": 1.0}}))
        while not jobs_running(sup):
            await asyncio.sleep(0.01)
        lease = sup.admit()
        with pytest.raises(errors.QueueFull) as e:
            async with sup.live(language="zh", lease=lease, max_wait=0.2):
                raise AssertionError("the worker is busy: no session may start")
        lease.release()
        assert "long.wav" in e.value.message and "HASR_LIVE_QUEUE_SEC" in e.value.message
        assert not sup.waiting and jobs_running(sup) == 1  # it left the queue; the job runs on
        assert (await running).final is not None
        assert jobs_running(sup) == 0 and sup.in_flight == 0
        await sup.close()
    run(main())


def test_after_a_worker_crash_the_next_request_hears_the_new_load_not_the_dead_workers_phase() -> None:
    async def main() -> None:
        sup, knobs = make({"HASR_FAKE_LOAD_SEC": "0.3"})
        await sup.load()
        assert process_of(sup) is not None
        os.kill(process_of(sup).pid, signal.SIGKILL)
        while sup.state == State.READY:
            await asyncio.sleep(0.01)
        heard: list[JobEvent] = []
        await transcribe(sup, 0.2, on_event=heard.append)
        loading = [e for e in heard if isinstance(e, Loading)]
        assert loading and loading[0].phase == "starting worker", loading
        await sup.close()
    run(main())

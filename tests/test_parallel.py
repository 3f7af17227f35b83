"""One worker, many jobs (issue 30), with real fake-engine workers through the pool: HASR_MAX_WORKERS=1 and
HASR_WORKER_PARALLEL=4, so every job below meets the others in one worker process and its decode loop.

A fake job's draft chunks are model steps in the worker's decode loop (a batch of several streams' chunks costs
one chunk, as vLLM's batching does); ordering is asserted, never wall-clock limits."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from hasrd import errors
from hasrd.jobevents import JobEvent, Queued
from hasrd.scheduler import Pool
from hasrd.worker.scripted import DEFAULT_SCRIPT
from tests.conftest import pid_alive, run
from hasrd.options import parse as parse_options
from tests.speech import load
from tests.test_pool import make, transcribe, until

SLOW = {"fake": {"rtf": 1.0}}
FINAL = DEFAULT_SCRIPT.split("|")[0]  # the fake "re-transcribes" a truncated sentence by cutting it at |


def pool_of(parallel: int = 4, **kw: Any) -> Pool:
    return make(1, worker_parallel=parallel, **kw)


def running(pool: Pool) -> int:
    return pool.snapshot().running


def worker_pid(pool: Pool) -> int:
    (ref,) = pool.refs.values()
    assert ref.runner.pid is not None
    return ref.runner.pid


def test_a_short_file_sent_behind_a_long_one_is_answered_first_by_the_same_worker() -> None:
    async def main() -> None:
        pool = pool_of()
        done: list[str] = []

        async def job(name: str, seconds: float) -> Any:
            r = await transcribe(pool, seconds, options=SLOW, name=name)
            done.append(name)
            return r

        long_job = asyncio.create_task(job("long", 8.0))
        await until(lambda: running(pool) == 1)
        short = await job("short", 0.5)
        assert done == ["short"] and not long_job.done()  # answered while the long file still runs
        long_result = await long_job
        assert short.worker.pid == long_result.worker.pid and len(pool.refs) == 1
        assert short.final == long_result.final == FINAL
        await pool.close()
    run(main())


def test_four_files_run_at_once_in_one_worker_and_each_gets_its_own_text() -> None:
    async def main() -> None:
        pool = pool_of()
        scripts = [f"第{n}个文件。" for n in "一二三四"]
        jobs = [asyncio.create_task(transcribe(pool, 2.0, options={"fake": {"rtf": 1.0, "script": s}}))
                for s in scripts]
        await until(lambda: running(pool) == 4)  # all four held at the same moment, none queued
        assert not pool.waiting and len(pool.refs) == 1
        results = await asyncio.gather(*jobs)
        assert [r.final for r in results] == scripts
        assert len({r.worker.pid for r in results}) == 1
        await pool.close()
    run(main())


def test_a_live_session_opened_beside_a_running_file_gets_drafts_before_the_file_ends() -> None:
    async def main() -> None:
        pool = pool_of()
        file_job = asyncio.create_task(transcribe(pool, 8.0, options=SLOW))
        await until(lambda: running(pool) == 1)
        heard: list[JobEvent] = []
        lease = pool.admit()
        async with pool.live(language="zh", on_event=heard.append, lease=lease) as session:
            for _ in range(10):
                await session.audio(np.zeros(4000, np.float32).tobytes())
                await asyncio.sleep(0.1)
            result = await session.end()
        lease.release()
        assert not file_job.done()  # the session ended while the file still ran on the same worker
        assert result.live is True and not [e for e in heard if isinstance(e, Queued)]
        assert (await file_job).final and len(pool.refs) == 1
        await pool.close()
    run(main())


def test_a_worker_crash_fails_every_job_it_held_with_worker_crashed_and_the_queued_one_gets_a_new_worker() -> None:
    async def main() -> None:
        pool = pool_of(parallel=2)
        first = asyncio.create_task(transcribe(pool, 6.0, options=SLOW))
        await until(lambda: running(pool) == 1)
        pid = worker_pid(pool)
        crashing = asyncio.create_task(transcribe(pool, 6.0, options={"fake": {"rtf": 1.0, "crash": True}}))
        await until(lambda: running(pool) == 2)
        queued = asyncio.create_task(transcribe(pool, 0.3))
        await until(lambda: bool(pool.waiting))
        outcomes = await asyncio.gather(first, crashing, return_exceptions=True)
        assert all(isinstance(o, errors.WorkerCrashed) for o in outcomes), outcomes
        later = await queued  # not lost: the next worker serves it
        assert later.final and later.worker.pid != pid and not pid_alive(pid)
        await pool.close()
    run(main())


def test_one_jobs_failure_is_its_own_and_the_worker_goes_on_serving_the_others() -> None:
    async def main() -> None:
        pool = pool_of()
        good = asyncio.create_task(transcribe(pool, 3.0, options=SLOW))
        await until(lambda: running(pool) == 1)
        pid = worker_pid(pool)
        with pytest.raises(errors.HasrError) as bad:
            await transcribe(pool, 1.0, options={"fake": {"fail": "invalid_audio"}})
        assert bad.value.code == "invalid_audio"
        assert not good.done()
        assert (await good).final and worker_pid(pool) == pid
        await pool.close()
    run(main())


def test_a_cancelled_job_leaves_while_its_neighbour_runs_and_the_worker_is_not_killed() -> None:
    async def main() -> None:
        pool = pool_of(cancel_grace_sec=30.0)
        neighbour = asyncio.create_task(transcribe(pool, 8.0, options=SLOW))
        leaving = asyncio.create_task(transcribe(pool, 8.0, options=SLOW))
        await until(lambda: running(pool) == 2)
        pid = worker_pid(pool)
        await asyncio.sleep(0.5)
        leaving.cancel()  # the client went away
        with pytest.raises(asyncio.CancelledError):
            await leaving
        assert not neighbour.done() and running(pool) == 1  # its share freed while the neighbour still runs
        assert (await neighbour).final and worker_pid(pool) == pid and pid_alive(pid)
        await pool.close()
    run(main())


def test_a_hung_job_does_not_hold_up_the_other_jobs_of_its_worker() -> None:
    async def main() -> None:
        pool = pool_of(cancel_grace_sec=0.5)
        hung = asyncio.create_task(transcribe(pool, 1.0, options={"fake": {"hang": True}}))
        await until(lambda: running(pool) == 1)
        other = await transcribe(pool, 1.0, options=SLOW)
        assert other.final == FINAL and not hung.done()
        hung.cancel()
        with pytest.raises(asyncio.CancelledError):
            await hung
        await pool.close()
    run(main())


def test_with_worker_parallel_one_a_second_job_waits_for_the_first() -> None:
    async def main() -> None:
        pool = pool_of(parallel=1)
        first = asyncio.create_task(transcribe(pool, 1.5, options=SLOW))
        await until(lambda: running(pool) == 1)
        heard: list[JobEvent] = []
        second = asyncio.create_task(transcribe(pool, 0.2, on_event=heard.append))
        await until(lambda: bool(pool.waiting))
        assert running(pool) == 1
        await asyncio.gather(first, second)
        assert [e for e in heard if isinstance(e, Queued)]
        await pool.close()
    run(main())


def test_a_live_session_flooding_audio_does_not_starve_another_session_of_the_same_worker() -> None:
    """Fair share: both sessions' draft chunks are live steps of one decode loop, taken oldest first and one per
    session at a time, so 12 s of audio sent at once by one client do not delay the other's few chunks."""
    async def main() -> None:
        pool = pool_of()
        order: list[str] = []

        speech = load("en_espeak_park")

        async def session(name: str, seconds: float, pace: float) -> None:
            audio = np.tile(speech, int(seconds * 16000 / len(speech)) + 1)[:int(seconds * 16000)]
            lease = pool.admit()
            try:
                async with pool.live(language="zh", lease=lease,
                                     options=parse_options({"fake": {"rtf": 1.0, "script_s": 60}})) as s:
                    for k in range(0, len(audio), 8000):
                        await s.audio(audio[k:k + 8000].tobytes())
                        await asyncio.sleep(pace)
                    await s.end()
                    order.append(name)
            finally:
                lease.release()

        flood = asyncio.create_task(session("flood", 12.0, 0.0))
        await until(lambda: running(pool) == 1)
        await session("steady", 2.0, 0.25)
        assert order == ["steady"] and not flood.done()  # served while the flood's backlog was still decoding
        await flood
        assert order == ["steady", "flood"] and len(pool.refs) == 1
        await pool.close()
    run(main())

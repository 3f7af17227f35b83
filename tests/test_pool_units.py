"""The pool's routing, admission, eviction and expiry with an injected runner factory: plain fake runners that
load, run and stop on cue (or fail, or hang) and no processes at all."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import numpy as np
import pytest

from hasrd import config, errors
from hasrd.transcript import Transcript
from hasrd.lifecycle import FOREVER, State
from hasrd.modelspec import ModelSpec
from hasrd.pcm import PcmBuffer
from hasrd.placement import CPU, Device
from hasrd.runner import Runner
from hasrd.runnerapi import PoolRunner, RunnerHooks
from hasrd.scheduler import Pool
from hasrd.status import JobStatus, RunnerStatus
from tests.conftest import run

A = ModelSpec("a", "fake", "a", 300)
B = ModelSpec("b", "fake", "b", 300)


class FakeProcess:
    def __init__(self, pid: int) -> None:
        self.pid = pid


class FakeRunner:
    """A runner as the pool sees it (hasrd.runnerapi.PoolRunner, which hasrd.runner.Runner implements), without a
    process: loads take ``load_s``, jobs take ``job_s``, several at once as the pool hands them; ``fail_loads``
    loads fail first; ``gate`` (if set) holds every job until it is set, ``gates[name]`` the job of that name."""

    pids = iter(range(1000, 100000))

    def __init__(self, spec: ModelSpec, device: str, hooks: RunnerHooks, *, load_s: float = 0.01,
                 job_s: float = 0.01, fail_loads: int = 0, gate: asyncio.Event | None = None,
                 gates: dict[str, asyncio.Event] | None = None) -> None:
        self.spec, self.device, self.hooks = spec, device, hooks
        self.load_s, self.job_s, self.fail_loads, self.gate = load_s, job_s, fail_loads, gate
        self.gates = gates or {}
        self.state = State.STOPPED
        self.worker: FakeProcess | None = None
        self.jobs: dict[int, JobStatus] = {}
        self.most = 0  # the most jobs it held at once
        self._ids = iter(range(1, 1000000))
        self.spawns = self.stops = 0
        self.closing = False
        self.ran: list[str] = []
        self._load: asyncio.Task[None] | None = None

    def _set(self, state: State) -> None:
        self.state = state
        self.hooks.on_change()

    @property
    def pid(self) -> int | None:
        return self.worker.pid if self.worker else None

    def status(self) -> RunnerStatus:
        return RunnerStatus(self.state, pid=self.pid, jobs=tuple(self.jobs.values()),
                            error="no weights" if self.state == State.FATAL else None)

    async def _do_load(self) -> None:
        self.spawns += 1
        await asyncio.sleep(self.load_s)
        if self.fail_loads:
            self.fail_loads -= 1
            self._set(State.FATAL)
            raise errors.Fatal("loading failed: no weights")
        self.worker = FakeProcess(next(self.pids))
        self._set(State.READY)

    async def ready(self, on_event: Any = None) -> FakeProcess:
        if self.closing:
            raise errors.ShuttingDown("closing")
        if self.state == State.FATAL:
            raise errors.Fatal("loading failed: no weights")
        if self.state == State.READY and self.worker:
            return self.worker
        if self._load is None or self._load.done():
            self._set(State.STARTING)
            self._load = asyncio.ensure_future(self._do_load())
        await asyncio.shield(self._load)
        assert self.worker is not None
        return self.worker

    async def loaded(self, on_event: Any = None) -> None:
        if self.state == State.STARTING and self._load is not None:
            await asyncio.shield(self._load)

    async def transcribe(self, pcm: PcmBuffer, *, name: str = "", language: str = "",
                         options: Any = None, on_event: Any = None) -> Transcript:
        await self.ready(on_event)
        jid = self._hold(JobStatus(name))
        try:
            if self.gate is not None:
                await self.gate.wait()
            if name in self.gates:
                await self.gates[name].wait()
            await asyncio.sleep(self.job_s)
            self.ran.append(name)
            return Transcript(final=name)
        finally:
            del self.jobs[jid]
            self._set(self.state)

    def _hold(self, job: JobStatus) -> int:
        jid = next(self._ids)
        self.jobs[jid] = job
        self.most = max(self.most, len(self.jobs))
        self._set(self.state)
        return jid

    @contextlib.asynccontextmanager
    async def live(self, *, language: str = "", options: Any = None, on_event: Any = None) -> AsyncIterator[Any]:
        await self.ready()
        jid = self._hold(JobStatus("live session", live=True))
        self.ran.append("live")
        try:
            yield "session"
        finally:
            del self.jobs[jid]

    def retry_now(self) -> None:
        if self.state == State.FATAL:
            self._set(State.STOPPED)

    async def clear_failure(self) -> None:
        if self.state in (State.FATAL, State.BACKOFF):
            self._set(State.STOPPED)

    async def stop(self) -> None:
        if self.state == State.READY:
            self._set(State.STOPPING)
            await asyncio.sleep(0.01)
            self.stops += 1
            self.worker = None
            self._set(State.STOPPED)

    def kill(self, reason: str) -> None:
        self.closing = True

    async def close(self) -> None:
        self.closing = True
        await self.stop()


def test_the_fake_runner_offers_what_the_pool_asks_of_a_runner_as_the_daemons_runner_does() -> None:
    """hasrd.runnerapi.PoolRunner: the pool's rules are tested through the interface the daemon's runners have."""
    async def spawn(report: Any) -> Any:
        raise AssertionError("never started")

    assert isinstance(FakeRunner(A, CPU, RunnerHooks()), PoolRunner)
    assert isinstance(Runner(config.Settings(), spawn, RunnerHooks()), PoolRunner)


def make(max_workers: int = 2, parallel: int = 1, ttl: float = 60.0, max_queue: int = 16, default_device: str = CPU,
         **fake: Any) -> tuple[Pool, list[FakeRunner]]:
    """A pool of fake runners on a CPU-only machine; ``parallel``: HASR_WORKER_PARALLEL (1: one job per worker,
    what the tests before issue 30 pin); ``ttl``: HASR_IDLE_TTL_SEC; ``max_queue``: HASR_MAX_QUEUE;
    ``default_device``: where the default model's workers run."""
    made: list[FakeRunner] = []

    def make_runner(spec: ModelSpec, device: str, hooks: RunnerHooks) -> FakeRunner:
        r = FakeRunner(spec, device, hooks, **fake)
        made.append(r)
        return r

    settings = config.Settings(engine="fake", idle_ttl_sec=ttl, worker_parallel=parallel, max_queue=max_queue)
    return Pool(settings, make_runner, A, inventory=lambda: [Device(CPU, 16000, 24000)], max_workers=max_workers,
                default_device=default_device), made


def jobs_running(pool: Pool) -> int:
    """Jobs and live sessions running on the pool's workers now."""
    return pool.snapshot().running


def pcm() -> PcmBuffer:
    return PcmBuffer.from_array(np.zeros(1600, dtype=np.float32))


async def until(pred: Callable[[], bool]) -> None:
    for _ in range(2000):
        if pred():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("never happened")


def test_requests_for_one_model_share_idle_workers_and_start_new_ones_up_to_the_limit() -> None:
    async def main() -> None:
        pool, made = make(max_workers=2, job_s=0.1)
        with pcm() as buf:
            results = await asyncio.gather(*(pool.transcribe(buf, name=f"{i}") for i in range(4)))
        assert [r.final for r in results] == ["0", "1", "2", "3"]
        assert len(made) == 2 and sum(len(r.ran) for r in made) == 4  # two workers, each served two
        assert all(r.timings.queue_s >= 0 for r in results) and pool.in_flight == 0
        await pool.close()
    run(main())


def test_a_second_model_evicts_the_idle_lru_worker_with_one_worker_allowed_and_loads_after_its_stop() -> None:
    async def main() -> None:
        pool, made = make(max_workers=1)
        with pcm() as buf:
            await pool.transcribe(buf, model=A)
            await pool.transcribe(buf, model=B)
        a, b = made
        assert a.stops == 1 and a.state == State.STOPPED and b.state == State.READY
        assert [r.model for r in pool.snapshot().workers] == ["b"]
        await pool.close()
    run(main())


def test_an_idle_worker_expires_after_its_ttl_but_not_while_a_request_for_its_model_is_admitted() -> None:
    async def main() -> None:
        pool, made = make(ttl=0.1)
        with pcm() as buf:
            await pool.transcribe(buf)
        lease = pool.admit(A)  # decoding its audio, say: the worker of its model is held
        await asyncio.sleep(0.3)
        assert made[0].state == State.READY and pool.snapshot().expires_in_s is None
        lease.release()
        await until(lambda: not pool.refs)
        assert made[0].stops == 1 and pool.state == State.STOPPED
        await pool.close()
    run(main())


def test_a_keep_alive_forever_holds_an_idle_worker_past_the_ttl() -> None:
    async def main() -> None:
        pool, made = make(ttl=0.05)
        snap = await pool.load(FOREVER)
        assert snap.ttl_sec is None
        await asyncio.sleep(0.3)
        assert made[0].state == State.READY and made[0].stops == 0
        await pool.close()
    run(main())


def test_a_fatal_model_fails_its_own_requests_at_once_and_an_explicit_load_clears_it() -> None:
    async def main() -> None:
        pool, made = make(fail_loads=1)
        with pcm() as buf:
            for _ in range(2):  # the second is not retried: FATAL keeps its reason
                with pytest.raises(errors.Fatal):
                    await pool.transcribe(buf)
            assert len(made) == 1 and made[0].spawns == 1
            assert pool.snapshot().health == "error"
            await pool.load()
            assert (await pool.transcribe(buf, name="again")).final == "again" and made[0].spawns == 2
        await pool.close()
    run(main())


def test_unload_waits_for_the_running_job_and_the_queue_goes_on_with_a_new_worker() -> None:
    async def main() -> None:
        gate = asyncio.Event()
        pool, made = make(max_workers=1, gate=gate)
        with pcm() as buf:
            first = asyncio.create_task(pool.transcribe(buf, name="first"))
            await until(lambda: jobs_running(pool) == 1)
            queued = asyncio.create_task(pool.transcribe(buf, name="queued"))
            await until(lambda: len(pool.waiting) == 1)
            unload = asyncio.create_task(pool.unload())
            await asyncio.sleep(0.05)
            assert not unload.done() and made[0].state == State.READY  # the running job holds it
            gate.set()
            await unload
            assert first.done() and made[0].stops == 1
            assert (await queued).final == "queued" and len(made) == 2
        await pool.close()
    run(main())


def test_a_full_queue_refuses_at_admission_and_loses_nothing_admitted() -> None:
    async def main() -> None:
        gate = asyncio.Event()
        pool, _ = make(max_workers=1, max_queue=1, gate=gate)
        with pcm() as buf:
            tasks = [asyncio.create_task(pool.transcribe(buf, name=str(i))) for i in range(2)]
            await until(lambda: pool.in_flight == 2)
            with pytest.raises(errors.QueueFull):
                pool.admit()
            gate.set()
            assert [r.final for r in await asyncio.gather(*tasks)] == ["0", "1"]
        await pool.close()
    run(main())


def test_a_live_session_goes_ahead_of_a_waiting_file_and_times_out_when_nothing_frees() -> None:
    async def main() -> None:
        gate = asyncio.Event()
        pool, made = make(max_workers=1, gate=gate)
        with pcm() as buf:
            running = asyncio.create_task(pool.transcribe(buf, name="long.wav"))
            await until(lambda: jobs_running(pool) == 1)
            lease = pool.admit()
            with pytest.raises(errors.QueueFull) as e:
                async with pool.live(lease=lease, max_wait=0.05):
                    raise AssertionError("the only worker is busy")
            assert "long.wav" in e.value.message and not pool.waiting
            lease.release()
            waiting_file = asyncio.create_task(pool.transcribe(buf, name="file"))
            await until(lambda: len(pool.waiting) == 1)
            lease = pool.admit()

            async def live() -> None:
                async with pool.live(lease=lease):
                    pass
            session = asyncio.create_task(live())
            await until(lambda: len(pool.waiting) == 2)
            gate.set()
            await asyncio.gather(running, session, waiting_file)
            lease.release()
        assert made[0].ran == ["long.wav", "live", "file"]  # the session went ahead of the file that waited first
        await pool.close()
    run(main())


def test_after_a_forced_exit_a_waiting_request_hears_shutting_down_and_no_worker_starts() -> None:
    async def main() -> None:
        gate = asyncio.Event()
        pool, made = make(max_workers=1, gate=gate)
        with pcm() as buf:
            running = asyncio.create_task(pool.transcribe(buf, name="x", model=A))
            await until(lambda: jobs_running(pool) == 1)
            waiting = asyncio.create_task(pool.transcribe(buf, name="y", model=B))
            await until(lambda: len(pool.waiting) == 1)
            pool.kill_now()
            gate.set()  # the fake's job ends on its own; a real one is killed
            await running
            with pytest.raises(errors.ShuttingDown):
                await waiting
        assert [r.spec.name for r in made] == ["a", "b"] and made[1].spawns == 0
        await pool.close()
    run(main())


def test_while_a_model_is_withdrawn_its_requests_get_model_busy_and_its_worker_leaves_after_its_job() -> None:
    """A delete (issue 31 #2): a request admitted before it began, one waiting in the queue and one arriving
    during it are all refused with 409 model_busy; the worker finishes its running job, stops and leaves the
    pool; another model is served meanwhile; once the delete is over the model may be asked for again."""
    async def main() -> None:
        gate = asyncio.Event()
        pool, made = make(max_workers=1, gate=gate)
        with pcm() as buf:
            running = asyncio.create_task(pool.transcribe(buf, name="running", model=A))
            await until(lambda: jobs_running(pool) == 1)
            early = pool.admit(A)  # decoding its audio when the delete begins
            queued = asyncio.create_task(pool.transcribe(buf, name="queued", model=A))
            await until(lambda: len(pool.waiting) == 1)
            entered = asyncio.Event()
            leave = asyncio.Event()

            async def delete() -> None:
                async with pool.withdrawn_while([A], "a is being deleted"):
                    entered.set()
                    await leave.wait()
            deleting = asyncio.create_task(delete())
            with pytest.raises(errors.ModelBusy) as e:
                await queued
            assert e.value.status == 409 and "being deleted" in e.value.message
            with pytest.raises(errors.ModelBusy):
                pool.admit(A)
            with pytest.raises(errors.ModelBusy):
                await pool.transcribe(buf, lease=early, model=A)
            early.release()
            assert not entered.is_set()  # the running job goes on to its end first
            gate.set()
            assert (await running).final == "running"
            await entered.wait()
            assert made[0].stops == 1 and not pool.refs  # its worker left the pool
            assert (await pool.transcribe(buf, name="other", model=B)).final == "other"
            leave.set()
            await deleting
            assert (await pool.transcribe(buf, name="again", model=A)).final == "again"
        await pool.close()
    run(main())


# ---- several jobs on one worker (HASR_WORKER_PARALLEL, issue 30) -------------------------------------------------

def gated(*names: str) -> dict[str, asyncio.Event]:
    return {n: asyncio.Event() for n in names}


def test_with_one_worker_allowed_two_requests_for_one_model_share_it_while_it_has_room() -> None:
    async def main() -> None:
        gates = gated("x", "y")
        pool, made = make(max_workers=1, parallel=2, gates=gates)
        with pcm() as buf:
            tasks = [asyncio.create_task(pool.transcribe(buf, name=n)) for n in "xy"]
            await until(lambda: jobs_running(pool) == 2)
            assert len(made) == 1 and len(made[0].jobs) == 2 and not pool.waiting
            snap = pool.snapshot()
            row = snap.workers[0]
            assert row.running == 2 and [j.name for j in row.jobs] == ["x", "y"] and row.job and row.job.name == "x"
            assert snap.running == 2 and len(snap.jobs) == 2
            assert snap.status_text == "transcribing x 0% and 1 more"
            for g in gates.values():
                g.set()
            assert [r.final for r in await asyncio.gather(*tasks)] == ["x", "y"]
        assert len(made) == 1 and made[0].most == 2 and made[0].spawns == 1
        await pool.close()
    run(main())


def test_with_capacity_2_and_one_worker_a_third_request_waits_and_starts_once_one_finishes() -> None:
    async def main() -> None:
        gates = gated("0", "1", "2")
        pool, made = make(max_workers=1, parallel=2, gates=gates)
        with pcm() as buf:
            tasks = [asyncio.create_task(pool.transcribe(buf, name=str(i))) for i in range(3)]
            await until(lambda: jobs_running(pool) == 2 and len(pool.waiting) == 1)
            assert sorted(j.name for j in made[0].jobs.values()) == ["0", "1"]
            gates["0"].set()
            assert (await tasks[0]).final == "0"
            await until(lambda: not pool.waiting and jobs_running(pool) == 2)  # the third took the room it left
            assert sorted(j.name for j in made[0].jobs.values()) == ["1", "2"]
            gates["1"].set()
            gates["2"].set()
            await asyncio.gather(*tasks)
        assert len(made) == 1 and made[0].most == 2 and sorted(made[0].ran) == ["0", "1", "2"]
        await pool.close()
    run(main())


def test_a_second_request_gets_a_worker_of_its_own_and_a_third_joins_one_with_room() -> None:
    """Spread before packing (placement rule 2): on the CPU's 2 workers a job beside a running one gets its own
    worker and cores; once the cap is reached, jobs join workers with room."""
    async def main() -> None:
        gates = gated("a", "b", "c")
        pool, made = make(max_workers=2, parallel=2, gates=gates)
        with pcm() as buf:
            tasks = [asyncio.create_task(pool.transcribe(buf, name="a"))]
            await until(lambda: jobs_running(pool) == 1)
            tasks.append(asyncio.create_task(pool.transcribe(buf, name="b")))
            await until(lambda: jobs_running(pool) == 2)
            assert len(made) == 2 and [len(m.jobs) for m in made] == [1, 1]
            tasks.append(asyncio.create_task(pool.transcribe(buf, name="c")))
            await until(lambda: jobs_running(pool) == 3)
            assert len(made) == 2 and sorted(len(m.jobs) for m in made) == [1, 2] and not pool.waiting
            for g in gates.values():
                g.set()
            await asyncio.gather(*tasks)
            assert (await pool.transcribe(buf, name="d")).final == "d"  # an idle worker: none starts
        assert len(made) == 2
        await pool.close()
    run(main())


def test_eviction_never_stops_a_worker_that_holds_a_job_even_with_room_left() -> None:
    async def main() -> None:
        gates = gated("a1", "a2")
        pool, made = make(max_workers=1, parallel=4, gates=gates)
        with pcm() as buf:
            a1 = asyncio.create_task(pool.transcribe(buf, name="a1", model=A))
            await until(lambda: jobs_running(pool) == 1)
            b = asyncio.create_task(pool.transcribe(buf, name="b", model=B))
            await until(lambda: len(pool.waiting) == 1)
            a2 = asyncio.create_task(pool.transcribe(buf, name="a2", model=A))
            await until(lambda: jobs_running(pool) == 2)  # a's worker has room: a2 joins it, b still waits
            await asyncio.sleep(0.05)
            assert made[0].stops == 0 and made[0].state == State.READY and len(made) == 1 and not b.done()
            gates["a1"].set()
            gates["a2"].set()
            await asyncio.gather(a1, a2)
            assert (await b).final == "b"  # once a's jobs ended, its idle worker made room
        assert made[0].stops == 1 and [r.spec.name for r in made] == ["a", "b"]
        await pool.close()
    run(main())


def test_a_worker_being_unloaded_takes_no_new_job_though_it_has_room() -> None:
    async def main() -> None:
        gates = gated("first")
        pool, made = make(max_workers=1, parallel=4, gates=gates)
        with pcm() as buf:
            first = asyncio.create_task(pool.transcribe(buf, name="first"))
            await until(lambda: jobs_running(pool) == 1)
            unload = asyncio.create_task(pool.unload())
            await asyncio.sleep(0.02)
            later = asyncio.create_task(pool.transcribe(buf, name="later"))
            await until(lambda: len(pool.waiting) == 1)
            assert len(made[0].jobs) == 1
            gates["first"].set()
            await asyncio.gather(first, unload)
            assert (await later).final == "later"
        assert made[0].stops == 1 and len(made) == 2 and made[1].ran == ["later"]
        await pool.close()
    run(main())


def test_the_admission_bound_is_the_queue_beyond_what_every_worker_may_hold() -> None:
    async def main() -> None:
        pool, _ = make(max_workers=2, parallel=3, max_queue=1)
        assert pool.admission.capacity == 6
        leases = [pool.admit() for _ in range(7)]  # 2 workers x 3 jobs, and 1 waiting
        with pytest.raises(errors.QueueFull) as e:
            pool.admit()
        assert "7 transcriptions" in e.value.message and "6 may run at once" in e.value.message
        assert "HASR_MAX_QUEUE=1" in e.value.message
        by_device, _ = make(max_workers=2, parallel=0, max_queue=1)  # by device: 4 on the CPU
        assert by_device.admission.capacity == 8
        leases += [by_device.admit() for _ in range(9)]
        with pytest.raises(errors.QueueFull):
            by_device.admit()
        for lease in leases:
            lease.release()
        on_gpu, _ = make(max_workers=1, parallel=0, default_device="GPU-a")  # the daemon's default model on a GPU
        assert on_gpu.admission.capacity == 32  # by device: 32 on a GPU
        await pool.close()
        await by_device.close()
    run(main())


def test_a_live_session_joins_a_worker_running_a_file_when_it_has_room() -> None:
    async def main() -> None:
        gates = gated("long.wav")
        pool, made = make(max_workers=1, parallel=2, gates=gates)
        with pcm() as buf:
            running = asyncio.create_task(pool.transcribe(buf, name="long.wav"))
            await until(lambda: jobs_running(pool) == 1)
            lease = pool.admit()
            async with pool.live(lease=lease, max_wait=0.05):
                job = pool.snapshot().workers[0].job
                assert jobs_running(pool) == 2 and job and job.live  # the session shows first
            lease.release()
            gates["long.wav"].set()
            await running
        assert made[0].ran == ["live", "long.wav"] and len(made) == 1
        await pool.close()
    run(main())

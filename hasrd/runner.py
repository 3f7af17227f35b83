"""One worker process and its lifecycle: the only code that reads-then-acts on that process's state
(docs/ARCHITECTURE.md "Worker lifecycle"; what happens in each state, and the transitions allowed, are in
hasrd.lifecycle's docstring beside its table). Its worker holds several jobs at once, each a request id of its own
on the worker's channel; a worker's death fails every job it held with worker_crashed.

Background tasks (load, stop, the death watch, the loading heartbeat) are owned here and cancelled by
:meth:`close`. It implements :class:`~hasrd.runnerapi.PoolRunner`; what it asks of its pool (changes to report, how
many wait) comes with it when it is made (``hooks``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

from msgspec.structs import replace

from hasrd import errors, policy
from hasrd import protocol as p
from hasrd.config import Settings
from hasrd.jobevents import EventSink, JobEvent, Loading
from hasrd.lifecycle import Partial, State, check_transition
from hasrd.options import Options
from hasrd.pcm import PcmBuffer
from hasrd.runnerapi import RunnerHooks
from hasrd.status import JobStatus, RunnerStatus
from hasrd.tasks import Tasks
from hasrd.workerlive import LiveSession
from hasrd.workerproc import Watch, WorkerProcess, run_to_end
from hasrd.transcript import Transcript

log = logging.getLogger("hasrd.runner")

SpawnFn = Callable[[Callable[[str], None]], Awaitable[WorkerProcess]]
"""Starts a worker; may report phases (e.g. waiting for VRAM) through its argument."""
NO_POOL = RunnerHooks()  # a runner on its own: nobody observes it, nobody waits for it


class Runner:
    def __init__(self, settings: Settings, spawn: SpawnFn, hooks: RunnerHooks = NO_POOL, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.s = settings
        self.spawn = spawn
        self.clock = clock
        self.hooks = hooks
        self.watch = Watch(settings.stall_sec, settings.max_job_sec, settings.cancel_grace_sec, hooks.waiting)
        self.state = State.STOPPED
        self.worker: WorkerProcess | None = None
        self.load_s: float | None = None  # what the last load took (the next one is expected to take as long)
        self.spawns = 0
        self.failures = 0
        self.last_error: errors.HasrError | None = None
        self.backoff_until = 0.0
        self.phase = ""
        self.expected_s = 0.0
        self.load_started = 0.0
        self.jobs: dict[int, JobStatus] = {}  # running on the worker now, by a counter of ours
        self._job_ids = itertools.count(1)
        self._reaping: weakref.WeakKeyDictionary[WorkerProcess, asyncio.Task[Any]] = weakref.WeakKeyDictionary()
        self.closing = False
        self.tasks = Tasks()  # background: load, stop, death watch, heartbeat, reaps
        self._load_task: asyncio.Task[None] | None = None
        self._stop_task: asyncio.Task[None] | None = None
        self._load_listeners: set[EventSink] = set()
        self._loading_worker: WorkerProcess | None = None

    # ---- observation ------------------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return self.worker.pid if self.worker else None

    def status(self) -> RunnerStatus:
        w = self.worker
        failed = self.last_error if self.state in (State.BACKOFF, State.FATAL) else None
        starting = self.state == State.STARTING
        ready = w.hs.ready if w else None  # what the worker said it loaded
        return RunnerStatus(
            state=self.state, pid=w.pid if w else None, identity=dict(ready.identity) if ready else {},
            load_s=self.load_s if w else None, phase=self.phase if starting else "",
            elapsed_s=round(self.clock() - self.load_started, 1) if starting else 0.0,
            expected_s=self.expected_s if starting else 0.0,
            jobs=tuple(sorted(self.jobs.values(), key=lambda j: not j.live)),
            error=failed.message if failed else None, error_code=failed.code if failed else None,
            failures=self.failures)

    def _changed(self) -> None:
        try:
            self.hooks.on_change()
        except Exception:  # an observer must never break the lifecycle
            log.exception("state observer failed")

    def _set(self, state: State) -> None:
        check_transition(self.state, state)
        if state != self.state:
            log.info("worker state %s -> %s", self.state.value, state.value)
            self.state = state
        self._changed()

    # ---- loading ----------------------------------------------------------------------------------------

    async def ready(self, on_event: EventSink | None = None) -> WorkerProcess:
        """A ready worker, starting one if needed; concurrent callers share one load. ``on_event`` hears every
        loading phase while it waits."""
        if self.state == State.READY:
            return await self._ensure_ready()
        with self._hearing(on_event):
            return await self._ensure_ready()

    async def loaded(self, on_event: EventSink | None = None) -> None:
        """Wait for the load under way, if any, without starting one; its failure is raised here too. (Every
        request for a model that is loading shares that load's outcome, before it waits for a worker.)"""
        task = self._load_task
        if self.state != State.STARTING or task is None or task.done():
            return
        with self._hearing(on_event):
            await asyncio.shield(task)

    @contextlib.contextmanager
    def _hearing(self, on_event: EventSink | None) -> Iterator[None]:
        """``on_event`` hears the load's phase now and every phase after, until the block ends."""
        if on_event is None:
            yield
            return
        # the phase of the load under way; an old one (a worker that died since) is not this request's
        on_event(Loading(self.phase if self.state == State.STARTING and self.phase else "starting worker"))
        self._load_listeners.add(on_event)
        try:
            yield
        finally:
            self._load_listeners.discard(on_event)

    async def _ensure_ready(self) -> WorkerProcess:
        while True:
            if self.closing:  # set only by a forced exit or by close()
                raise errors.ShuttingDown("the daemon is stopping; this transcription did not finish")
            if self.state == State.READY and self.worker and not self.worker.dead.is_set():
                return self.worker
            if self.state == State.FATAL:
                raise self.fatal()
            if self.state == State.STOPPING and self._stop_task:
                await asyncio.shield(self._stop_task)
                continue
            if self.state == State.BACKOFF:
                delay = self.backoff_until - self.clock()
                if delay > 0:
                    await asyncio.sleep(delay)
                if self.state == State.BACKOFF:
                    self._start_load()
                continue
            if self.state == State.READY:  # the worker died under us; the death watch will catch up
                self._forget_worker()
                continue
            if self.state == State.STOPPED:
                self._start_load()
            assert self._load_task is not None
            await asyncio.shield(self._load_task)

    def _start_load(self) -> None:
        self.phase = "starting worker"
        self.expected_s = self.load_s or 0.0
        self.load_started = self.clock()
        self._set(State.STARTING)
        self._load_task = self.tasks.spawn(self._load(), "hasr-load")
        self.tasks.spawn(self._loading_heartbeat(self._load_task), "hasr-load-heartbeat")

    async def _loading_heartbeat(self, task: asyncio.Task[None]) -> None:
        """Publish the elapsed loading time once a second: engines report a phase per model, not per second."""
        while not task.done():
            await asyncio.wait([task], timeout=1.0)
            if not task.done():
                self._changed()

    async def _load(self) -> None:
        worker: WorkerProcess | None = None
        try:
            self.spawns += 1
            worker = await self.spawn(lambda phase: self._on_phase(phase, 0.0))
            self._loading_worker = worker
            ready = await worker.handshake(self.s.hello_timeout_sec, self.s.load_timeout_sec, self._on_phase)
        except BaseException as e:
            self._loading_worker = None
            if worker is not None:
                await worker.stop(grace=0.5)
            if self.closing:  # a forced exit killed the load: not the engine's failure
                self._set(State.STOPPED)
                raise errors.ShuttingDown("the daemon was stopped while the models were loading") from None
            raise self._load_failed(e) from None
        self._loading_worker = None
        self.worker = worker
        self.load_s = ready.load_s
        self.failures = 0
        self.last_error = None
        self._set(State.READY)
        self.tasks.spawn(self._watch(worker), f"hasr-watch-{worker.pid}")

    def _load_failed(self, e: BaseException) -> errors.HasrError:
        """Count a failed load, go to BACKOFF or FATAL, and return what its waiters get."""
        err = e if isinstance(e, errors.HasrError) else errors.LoadFailed(f"could not start the worker: {e}")
        if isinstance(e, asyncio.CancelledError):
            err = errors.LoadFailed("loading was cancelled")
        self.failures += 1
        self.last_error = err
        log.warning("worker load failed (%d in a row): %s", self.failures, err.message)
        if policy.is_fatal(self.failures, self.s.max_load_failures):
            self._set(State.FATAL)
            return self.fatal()
        self.backoff_until = self.clock() + policy.next_backoff(
            self.failures, self.s.backoff_base_sec, self.s.backoff_max_sec)
        self._set(State.BACKOFF)
        if not isinstance(err, errors.Unavailable):
            err = errors.LoadFailed(err.message)
        err.retry_after = max(1.0, self.backoff_until - self.clock())
        return err

    def fatal(self) -> errors.Fatal:
        """The error every request gets in FATAL, with the kept reason."""
        reason = self.last_error.message if self.last_error else "unknown"
        return errors.Fatal(f"loading failed {self.failures} times in a row: {reason} (run `hasrctl load` to "
                            f"retry)", retry_after=60)

    def _on_phase(self, phase: str, expected_s: float) -> None:
        self.phase = phase
        if expected_s:
            self.expected_s = expected_s
        self._changed()
        ev = Loading(phase, round(self.clock() - self.load_started, 1), self.expected_s)
        for listener in list(self._load_listeners):
            listener(ev)

    async def _watch(self, worker: WorkerProcess) -> None:
        await worker.dead.wait()
        if self.worker is worker and self.state == State.READY:
            log.warning("worker %d died: %s", worker.pid, worker.death_reason)
        await self._worker_failed(worker)  # always: reap it and clear its process group (vLLM helpers)

    def _forget_worker(self) -> None:
        self.worker = None
        self._set(State.STOPPED)

    def retry_now(self) -> None:
        """An explicit load: FATAL is cleared and BACKOFF's delay skipped."""
        if self.state == State.FATAL:
            self.failures = 0
            self._set(State.STOPPED)
        elif self.state == State.BACKOFF:
            self.backoff_until = 0.0

    async def clear_failure(self) -> None:
        """An unload: after any load under way, FATAL and BACKOFF go back to STOPPED with no kept reason."""
        if self._load_task and not self._load_task.done():
            with contextlib.suppress(BaseException):
                await asyncio.shield(self._load_task)
        if self.state in (State.FATAL, State.BACKOFF):
            self.failures = 0
            self.last_error = None
            self._set(State.STOPPED)

    # ---- jobs: several at once on the one worker ----------------------------------------------------------

    def _job(self, status: JobStatus) -> int:
        """Count a job as running (its status shown until :meth:`_job_done`); returns its local id."""
        jid = next(self._job_ids)
        self.jobs[jid] = status
        self._changed()
        return jid

    def _job_done(self, jid: int) -> None:
        self.jobs.pop(jid, None)
        self._changed()

    def _relay(self, jid: int, on_event: EventSink | None, partial: Partial | None = None) -> EventSink:
        """What the worker says of job ``jid``, on to ``on_event``: its progress kept in the job's status (a file's
        share done, shown at once; a live session's audio so far), its final sentences in ``partial``."""
        def relay(ev: JobEvent) -> None:
            job = self.jobs.get(jid)
            if partial is not None:
                partial.add(ev)
            if isinstance(ev, p.Progress) and job is not None and job.live:
                self.jobs[jid] = replace(job, done_s=ev.done_s, total_s=ev.total_s)
            elif isinstance(ev, p.Progress) and job is not None:
                progress = round(min(1.0, ev.done_s / (ev.total_s or 1.0)), 3)
                self.jobs[jid] = replace(job, done_s=ev.done_s, progress=progress, phase=ev.phase)
                self._changed()
            if on_event:
                on_event(ev)
        return relay

    async def transcribe(self, pcm: PcmBuffer, *, name: str = "", language: str = "",
                         options: Options | None = None, on_event: EventSink | None = None
                         ) -> Transcript:
        """Run one transcription on the worker (loading it if needed), beside any other job it holds, and return
        the worker's result. A failure after some sentences were final carries them in ``error.partial``."""
        worker = await self.ready(on_event)
        jid = self._job(JobStatus(name, total_s=round(pcm.duration_s, 3)))
        partial = Partial()
        relay = self._relay(jid, on_event, partial)
        try:
            return await worker.transcribe(pcm, language=language, options=options, on_event=relay, watch=self.watch)
        except errors.HasrError as e:
            if isinstance(e, (errors.Timeout, errors.WorkerCrashed)):
                await self._worker_failed(worker)
                if self.closing and isinstance(e, errors.WorkerCrashed):
                    e = errors.ShuttingDown("the daemon was stopped before this transcription finished (forced)")
            partial.attach(e, language)
            raise e from None
        except asyncio.CancelledError:
            if worker.dead.is_set() and self.worker is worker:
                self._forget_worker()  # it ignored Cancel and was killed: the next job needs a new one
            raise
        finally:
            self._job_done(jid)

    @contextlib.asynccontextmanager
    async def live(self, *, language: str = "", options: Options | None = None,
                   on_event: EventSink | None = None) -> AsyncIterator[LiveSession]:
        """A live session on the worker (loading it if needed), beside any other job it holds. Leaving the block
        without :meth:`LiveSession.end` (the client went away, an error) cancels the session; the worker stays
        loaded unless it ignores the cancel."""
        worker = await self.ready(on_event)
        jid = self._job(JobStatus("live session", live=True))
        try:
            session = await LiveSession.start(worker, language=language, options=options,
                                              on_event=self._relay(jid, on_event), watch=self.watch)
        except BaseException:
            self._job_done(jid)
            raise
        try:
            yield session
        finally:
            if not session.done.done() and not worker.dead.is_set():
                await run_to_end(session.cancel())  # the job is the holder's until the worker stopped it
            session.close()
            if worker.dead.is_set():
                await self._worker_failed(worker)
            self._job_done(jid)

    async def _worker_failed(self, worker: WorkerProcess) -> None:
        """A job saw its worker die, stall or time out: forget it and reap it. Every job it held comes here
        (and the death watch), so this is idempotent: one reap, however many ask."""
        if self.worker is worker and self.state == State.READY:
            self._forget_worker()
        await self._reap(worker)

    async def _reap(self, worker: WorkerProcess) -> None:
        task = self._reaping.get(worker)
        if task is None:
            task = self._reaping[worker] = self.tasks.spawn(worker.stop(grace=0.5), f"hasr-reap-{worker.pid}")
        await asyncio.shield(task)

    # ---- stopping ---------------------------------------------------------------------------------------

    async def stop(self) -> None:
        """Stop the worker (after a load under way); the holder has made sure none of its jobs runs."""
        if self._load_task and not self._load_task.done():
            with contextlib.suppress(BaseException):
                await asyncio.shield(self._load_task)
        if self._stop_task and not self._stop_task.done():
            await asyncio.shield(self._stop_task)
            return
        worker = self.worker
        if worker is None or self.state != State.READY:
            return
        self._set(State.STOPPING)
        self._stop_task = self.tasks.spawn(self._do_stop(worker), "hasr-stop")
        await asyncio.shield(self._stop_task)

    async def _do_stop(self, worker: WorkerProcess) -> None:
        try:
            code = await worker.stop(self.s.stop_grace_sec)
            log.info("worker %d stopped (exit %s)", worker.pid, code)
        finally:
            if self.worker is worker:
                self.worker = None
            if self.state == State.STOPPING:
                self._set(State.STOPPED)

    def kill(self, reason: str) -> None:
        """A forced exit: SIGKILL the worker (or the one still loading); what runs ends with shutting_down."""
        self.closing = True
        for w in (self.worker, self._loading_worker):
            if w is not None:
                w.kill(reason)

    async def close(self) -> None:
        """Daemon exit (nothing runs any more): stop the worker and end our tasks."""
        self.closing = True
        await self.stop()
        await self.tasks.cancel()

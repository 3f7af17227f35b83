"""The one owner of the worker's lifecycle. Nobody else reads-then-acts on the worker state.

States, what happens in each, and the only transitions allowed (``lifecycle.TRANSITIONS``; any other raises
:class:`IllegalTransition`):

    STOPPED   no worker. A request (or /api/load) starts one                       -> STARTING
    STARTING  one load in flight; every request that arrives waits for that same load (single flight).
              Ready                                                                 -> READY
              failure                                                               -> BACKOFF, or FATAL after N
              the daemon was forced to stop meanwhile                               -> STOPPED
    READY     serving: one job at a time (FIFO, bounded queue). The TTL timer runs only while nothing is admitted.
              TTL ran out, /api/unload, daemon exit                                 -> STOPPING
              the worker died, stalled or ignored Cancel (the job fails)            -> STOPPED
    STOPPING  Shutdown, SIGTERM, SIGKILL of the worker's process group              -> STOPPED
    BACKOFF   a load failed: the next request waits out the delay (doubling)        -> STARTING
              /api/unload clears it                                                 -> STOPPED
    FATAL     N failed loads in a row: requests fail at once with the kept reason (health "error").
              /api/load or /api/unload clears it                                    -> STOPPED

A request is admitted (:meth:`Supervisor.admit`, a :class:`Lease`) before its audio is decoded and released
exactly once, so neither the TTL nor the daemon's idle exit can act under it. Background tasks (load, stop,
the worker's death watch, the loading heartbeat) are owned here and cancelled by :meth:`close`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any, AsyncIterator, Awaitable, Callable, Coroutine

from hasrd import errors, policy
from hasrd.config import Settings
from hasrd.lifecycle import SETTING, KeepAlive, Partial, State, check_transition
from hasrd.pcm import PcmBuffer
from hasrd.waitqueue import WaitQueue
from hasrd.workerproc import EventSink, LiveSession, WorkerProcess, run_to_end

log = logging.getLogger("hasrd.supervisor")

SpawnFn = Callable[[Callable[[str], None]], Awaitable[WorkerProcess]]
"""Starts a worker; may report phases (e.g. waiting for VRAM) through its argument."""


class Lease:
    """One admitted request: counted in ``in_flight`` from admission to :meth:`release` (idempotent)."""

    def __init__(self, sup: Supervisor) -> None:
        self._sup = sup
        self.released = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self._sup._release()


class Supervisor:
    def __init__(self, settings: Settings, spawn: SpawnFn, *, clock: Callable[[], float] = time.monotonic,
                 on_change: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.s = settings
        self.spawn = spawn
        self.clock = clock
        self.on_change = on_change
        self.state = State.STOPPED
        self.worker: WorkerProcess | None = None
        self.identity: dict[str, Any] = {}
        self.load_s: float | None = None
        self.loads = 0  # successful loads since start (tests count them)
        self.spawns = 0
        self.failures = 0
        self.last_error: errors.HasrError | None = None
        self.backoff_until = 0.0
        self.phase = ""
        self.expected_s = 0.0
        self.load_started = 0.0
        self.last_used = clock()
        self.keep_alive = SETTING
        self.in_flight = 0  # admitted requests not yet released (decoding, queued, loading or running)
        # set by the pool (hasrd.scheduler): requests admitted for this worker's model and not yet routed, which
        # hold its TTL as its own would; and how many wait for any worker (a cancelled job's grace shrinks then)
        self.holds: Callable[[], int] = lambda: 0
        self.waiters: Callable[[], int] = lambda: len(self.waiting)
        self.running = 0
        self.waiting: WaitQueue[asyncio.Future[None]] = WaitQueue()  # for the slot: live first, positions told
        self.job: dict[str, Any] | None = None
        self.closing = False
        self._tasks: set[asyncio.Task[Any]] = set()
        self._load_task: asyncio.Task[None] | None = None
        self._stop_task: asyncio.Task[None] | None = None
        self._ttl_timer: asyncio.TimerHandle | None = None
        self._load_listeners: set[EventSink] = set()
        self._loading_worker: WorkerProcess | None = None
        self._hold = False  # unload in progress: the slot is not handed to the queue meanwhile
        self._idle = asyncio.Event()  # nothing admitted
        self._idle.set()
        self._no_running = asyncio.Event()  # no job running
        self._no_running.set()

    # ---- observation ------------------------------------------------------------------------------------

    @property
    def ttl(self) -> float | None:
        return self.keep_alive.ttl(self.s.idle_ttl_sec)

    def unload_in(self) -> float | None:
        """Seconds until the TTL unloads the worker (None: not loaded, busy or kept alive for ever)."""
        if self.state != State.READY:
            return None
        return policy.unload_in(self.clock(), self.last_used, self.ttl, self.in_flight + self.holds())

    def snapshot(self) -> dict[str, Any]:
        now = self.clock()
        left = self.unload_in()
        w = self.worker
        failed = self.last_error if self.state in (State.BACKOFF, State.FATAL) else None
        starting = self.state == State.STARTING
        snap = {
            "state": self.state.value,
            "health": "busy" if (self.running and self.state == State.READY) else
                      policy.health_status(self.state.value),
            "pid": w.pid if w else None,
            "engine": self.s.engine,
            "identity": self.identity if w else {},
            "load_s": self.load_s if w else None,
            "vram_mb": self.identity.get("vram_mb") if w else None,
            "expires_in_s": round(max(0.0, left), 3) if left is not None else None,
            "expires_at": (time.time() + max(0.0, left)) if left is not None else None,
            "in_flight": self.in_flight,
            "running": self.running,
            "queue": len(self.waiting),
            "phase": self.phase if starting else "",
            "elapsed_s": round(now - self.load_started, 1) if starting else 0.0,
            "expected_s": self.expected_s if starting else 0.0,
            "job": dict(self.job) if self.job else None,
            "error": failed.message if failed else None,
            "error_code": failed.code if failed else None,
            "idle_seconds": round(now - self.last_used, 1) if not self.in_flight else 0.0,
            "ttl_sec": self.ttl,
            "failures": self.failures,
        }
        snap["status_text"] = policy.status_text(snap)
        return snap

    def _changed(self) -> None:
        if self.on_change:
            try:
                self.on_change(self.snapshot())
            except Exception:  # an observer must never break the lifecycle
                log.exception("state observer failed")

    def _set(self, state: State) -> None:
        check_transition(self.state, state)
        if state != self.state:
            log.info("worker state %s -> %s", self.state.value, state.value)
            self.state = state
            if state == State.STOPPING:  # the keep-alive was this worker's; a new one is for the next worker
                self.keep_alive = SETTING
        self._changed()

    def _task(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """A background task owned by the supervisor: kept until done, cancelled by close()."""
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        # Its waiters may all have gone (clients left): a failure is kept in last_error, not "never retrieved".
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
        return task

    # ---- loading ----------------------------------------------------------------------------------------

    async def ensure_ready(self) -> WorkerProcess:
        """Return a ready worker, starting one if needed; all concurrent callers share one load."""
        while True:
            if self.closing:  # set only by a forced exit or after the last admitted request (close())
                raise errors.ShuttingDown("the daemon is stopping; this transcription did not finish")
            if self.state == State.READY and self.worker and not self.worker.dead.is_set():
                return self.worker
            if self.state == State.FATAL:
                raise self._fatal()
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
            if self.state == State.READY:  # the worker died under us; the death watcher will catch up
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
        self._load_task = self._task(self._load(), "hasr-load")
        self._task(self._loading_heartbeat(self._load_task), "hasr-load-heartbeat")

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
        worker.cancel_grace = self.s.cancel_grace_sec
        worker.grace_now = lambda: policy.cancel_grace(self.s.cancel_grace_sec, self.load_s, self.waiters())
        self.worker = worker
        self.identity = dict(ready.identity)
        self.load_s = ready.load_s
        self.loads += 1
        self.failures = 0
        self.last_error = None
        self.last_used = self.clock()
        self._set(State.READY)
        self._task(self._watch(worker), f"hasr-watch-{worker.pid}")
        self._arm_ttl()

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
            return self._fatal()
        self.backoff_until = self.clock() + policy.next_backoff(
            self.failures, self.s.backoff_base_sec, self.s.backoff_max_sec)
        self._set(State.BACKOFF)
        if not isinstance(err, errors.Unavailable):
            err = errors.LoadFailed(err.message)
        err.retry_after = max(1.0, self.backoff_until - self.clock())
        return err

    def _on_phase(self, phase: str, expected_s: float) -> None:
        self.phase = phase
        if expected_s:
            self.expected_s = expected_s
        self._changed()
        ev = {"event": "loading", "phase": phase, "elapsed_s": round(self.clock() - self.load_started, 1),
              "expected_s": self.expected_s}
        for listener in list(self._load_listeners):
            listener(ev)

    async def _watch(self, worker: WorkerProcess) -> None:
        await worker.dead.wait()
        if self.worker is worker and self.state == State.READY:
            log.warning("worker %d died: %s", worker.pid, worker.death_reason)
            self._forget_worker()
        await worker.stop(grace=0.5)  # always: reap it and clear its process group (vLLM helpers)

    def _forget_worker(self) -> None:
        self.worker = None
        self.identity = {}
        self._disarm_ttl()
        self._set(State.STOPPED)

    # ---- admission --------------------------------------------------------------------------------------

    def _fatal(self) -> errors.Fatal:
        """The error every request gets in FATAL, with the kept reason."""
        reason = self.last_error.message if self.last_error else "unknown"
        return errors.Fatal(f"loading failed {self.failures} times in a row: {reason} (run `hasrctl load` to "
                            f"retry)", retry_after=60)

    def check_admission(self) -> None:
        """Raise what admit() would raise, without admitting."""
        if self.closing:
            raise errors.ShuttingDown("the daemon is shutting down", retry_after=1)
        if self.state == State.FATAL:
            raise self._fatal()
        if self.in_flight >= self.s.max_queue + self.s.max_concurrent:
            raise errors.QueueFull(f"the queue is full: {self.in_flight} transcriptions are already running or "
                                   f"waiting (HASR_MAX_QUEUE={self.s.max_queue}); try again later", retry_after=5)

    def admit(self) -> Lease:
        """Count a request from now (before its audio is decoded) until its lease is released: neither the TTL
        nor the daemon's idle exit acts while anything is admitted."""
        self.check_admission()
        self.in_flight += 1
        self._idle.clear()
        self._disarm_ttl()
        return Lease(self)

    def _release(self) -> None:
        self.in_flight -= 1
        self.last_used = self.clock()
        if self.in_flight == 0:
            self._idle.set()
            self._arm_ttl()
        self._changed()

    @contextlib.asynccontextmanager
    async def lease(self) -> AsyncIterator[Lease]:
        lease = self.admit()
        try:
            yield lease
        finally:
            lease.release()

    @contextlib.asynccontextmanager
    async def _slot(self, on_event: EventSink | None, live: bool = False, max_wait: float = 0.0
                    ) -> AsyncIterator[None]:
        """Admission to one of ``max_concurrent`` running slots: FIFO, except that live sessions go ahead of
        waiting files (in their own FIFO order): a running job is never interrupted, files run between live
        sessions. ``max_wait`` (> 0): QueueFull after waiting that long."""
        if self.running >= self.s.max_concurrent or self.waiting or self._hold:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self.waiting.add(fut, live=live, on_event=on_event)
            self._changed()
            try:
                await (asyncio.wait_for(fut, max_wait) if max_wait > 0 else fut)
            except BaseException as e:
                if not self.waiting.remove(fut) and fut.done() and not fut.cancelled():
                    self._release_slot()  # we were handed the slot but are leaving
                if isinstance(e, asyncio.TimeoutError):
                    busy = f" with {self.job['name']}" if self.job and self.job.get("name") else ""
                    raise errors.QueueFull(f"the worker is busy{busy}: this live session waited {max_wait:g} s "
                                           f"for it (HASR_LIVE_QUEUE_SEC); try again once it is done",
                                           retry_after=5) from None
                raise
        else:
            self._take_slot()
        try:
            yield
        finally:
            self._release_slot()

    def _take_slot(self) -> None:
        self.running += 1
        self._no_running.clear()

    def _release_slot(self) -> None:
        if not self._hold:  # during an unload the slot waits: the queue goes on once the worker is stopped
            while self.waiting:
                fut = self.waiting.popleft()
                if not fut.done():
                    fut.set_result(None)  # hand our slot straight to the next in line
                    self._changed()
                    return
        self.running -= 1
        if self.running == 0:
            self._no_running.set()
        self._changed()

    def _wake_queue(self) -> None:
        while self.waiting and self.running < self.s.max_concurrent:
            fut = self.waiting.popleft()
            if not fut.done():
                self._take_slot()
                fut.set_result(None)
        self._changed()

    # ---- requests ---------------------------------------------------------------------------------------

    async def transcribe(self, pcm: PcmBuffer, *, name: str = "", language: str = "",
                         options: dict[str, Any] | None = None, on_event: EventSink | None = None,
                         lease: Lease | None = None) -> dict[str, Any]:
        """Load if needed, wait our turn, run one transcription, and return the worker's result.

        ``lease``: the request's admission (taken before its audio was decoded); without one, it is admitted
        here. A failure after some sentences were final carries them in ``error.partial``.
        """
        if lease is None:
            async with self.lease() as own:
                return await self.transcribe(pcm, name=name, language=language, options=options,
                                             on_event=on_event, lease=own)
        assert not lease.released, "transcribe() on a released lease"
        t_admit = self.clock()
        was_ready = self.state == State.READY
        await self._await_load(on_event)
        load_wait = 0.0 if was_ready else self.clock() - t_admit
        async with self._slot(on_event):
            t_start = self.clock()
            worker = await self._await_load(on_event)  # it may have died while we queued
            self.job = {"name": name, "done_s": 0.0, "total_s": round(pcm.duration_s, 3), "progress": 0.0}
            self._changed()
            partial = Partial()

            def relay(ev: dict[str, Any]) -> None:
                partial.add(ev)
                if ev.get("event") == "progress" and self.job is not None:
                    total = float(ev.get("total_s") or 0) or 1.0
                    self.job.update(done_s=ev["done_s"], progress=round(min(1.0, ev["done_s"] / total), 3))
                    self._changed()
                if on_event:
                    on_event(ev)

            try:
                result = await worker.transcribe(pcm, language=language, options=options, on_event=relay,
                                                 stall_sec=self.s.stall_sec, max_sec=self.s.max_job_sec)
            except errors.HasrError as e:
                if isinstance(e, (errors.Timeout, errors.WorkerCrashed)):
                    await self._worker_failed(worker)
                    if self.closing and isinstance(e, errors.WorkerCrashed):
                        e = errors.ShuttingDown("the daemon was stopped before this transcription finished "
                                                "(forced)")
                partial.attach(e, language)
                raise e from None
            except asyncio.CancelledError:
                if worker.dead.is_set() and self.worker is worker:
                    self._forget_worker()  # it ignored Cancel and was killed: the next job needs a new one
                raise
            finally:
                self.job = None
            t_end = self.clock()
        timings = dict(result.get("timings") or {})
        timings["queue_s"] = round(t_start - t_admit - load_wait, 4)
        timings["load_s"] = round(load_wait, 4)
        timings["work_s"] = round(t_end - t_start, 4)
        result["timings"] = timings
        return result

    @contextlib.asynccontextmanager
    async def live(self, *, language: str = "", options: dict[str, Any] | None = None,
                   on_event: EventSink | None = None, lease: Lease, max_wait: float = 0.0
                   ) -> AsyncIterator[LiveSession]:
        """A live session on the worker, under ``lease`` (so no TTL unload and no idle exit while it runs).

        Loads if needed, then takes the running slot ahead of queued files (see :meth:`_slot`; QueueFull after
        ``max_wait`` s behind a running job, if > 0); the worker serves only this session until it ends. Leaving the block without :meth:`LiveSession.end` (the client
        went away, an error) cancels the session; the worker stays loaded unless it ignores the cancel.
        """
        assert not lease.released, "live() on a released lease"
        await self._await_load(on_event)
        async with self._slot(on_event, live=True, max_wait=max_wait):
            worker = await self._await_load(on_event)
            self.job = {"name": "live session", "live": True, "done_s": 0.0, "total_s": 0.0, "progress": 0.0}
            self._changed()

            def relay(ev: dict[str, Any]) -> None:
                if ev.get("event") == "progress" and self.job is not None:
                    self.job.update(done_s=ev["done_s"], total_s=ev["total_s"])
                if on_event:
                    on_event(ev)

            session = await worker.live(language=language, options=options, on_event=relay,
                                        stall_sec=self.s.stall_sec)
            try:
                yield session
            finally:
                if not session.done.done() and not worker.dead.is_set():
                    await run_to_end(session.cancel())  # the slot stays ours until the worker has stopped it
                session.close()
                self.job = None
                self.last_used = self.clock()
                if worker.dead.is_set():
                    await self._worker_failed(worker)
                self._changed()

    async def _await_load(self, on_event: EventSink | None) -> WorkerProcess:
        """ensure_ready(), telling this request about every loading phase while it waits."""
        if on_event is None or self.state == State.READY:
            return await self.ensure_ready()
        # the phase of the load under way; an old one (a worker that died since) is not this request's
        phase = self.phase if self.state == State.STARTING and self.phase else "starting worker"
        on_event({"event": "loading", "phase": phase, "elapsed_s": 0.0})
        self._load_listeners.add(on_event)
        try:
            return await self.ensure_ready()
        finally:
            self._load_listeners.discard(on_event)

    async def _worker_failed(self, worker: WorkerProcess) -> None:
        if self.worker is worker and self.state == State.READY:
            self._forget_worker()
        await worker.stop(grace=0.5)

    # ---- explicit control -------------------------------------------------------------------------------

    async def load(self, keep_alive: KeepAlive | None = None) -> dict[str, Any]:
        """Preload (clears FATAL and BACKOFF's delay). ``keep_alive`` replaces the loaded worker's, if given."""
        if self.state == State.FATAL:
            self.failures = 0
            self._set(State.STOPPED)
        elif self.state == State.BACKOFF:
            self.backoff_until = 0.0
        if self.state == State.STOPPING and self._stop_task:  # a keep-alive is for the worker we load next
            with contextlib.suppress(BaseException):
                await asyncio.shield(self._stop_task)
        if keep_alive is not None:
            self.keep_alive = keep_alive
        await self.ensure_ready()
        self.last_used = self.clock()
        self._arm_ttl()
        return self.snapshot()

    async def unload(self) -> None:
        """Stop the worker once the running job is done (queued jobs wait, then start a new one); clears
        FATAL and BACKOFF."""
        if self._load_task and not self._load_task.done():
            with contextlib.suppress(BaseException):
                await asyncio.shield(self._load_task)
        if self.state in (State.FATAL, State.BACKOFF):  # after the load: its failure is cleared too
            self.failures = 0
            self.last_error = None
            self._set(State.STOPPED)
        self._hold = True
        try:
            # A request that waited for that load may now be running: "after the running job" includes it.
            await self._no_running.wait()
            await self._stop_worker()
        finally:
            self._hold = False
            self._wake_queue()

    async def _stop_worker(self) -> None:
        if self._load_task and not self._load_task.done():
            with contextlib.suppress(BaseException):
                await asyncio.shield(self._load_task)
        if self._stop_task and not self._stop_task.done():
            await asyncio.shield(self._stop_task)
            return
        worker = self.worker
        if worker is None or self.state != State.READY:
            return
        self._disarm_ttl()
        self._set(State.STOPPING)
        self._stop_task = self._task(self._do_stop(worker), "hasr-stop")
        await asyncio.shield(self._stop_task)

    async def _do_stop(self, worker: WorkerProcess) -> None:
        try:
            code = await worker.stop(self.s.stop_grace_sec)
            log.info("worker %d stopped (exit %s)", worker.pid, code)
        finally:
            if self.worker is worker:
                self.worker = None
                self.identity = {}
            if self.state == State.STOPPING:
                self._set(State.STOPPED)

    # ---- the TTL: one timer, armed when the last request ends, disarmed when one is admitted -------------

    def _arm_ttl(self) -> None:
        self._disarm_ttl()
        left = self.unload_in()
        if left is None or self.closing:
            return
        self._ttl_timer = asyncio.get_running_loop().call_later(max(0.0, left), self._ttl_fired)

    def _disarm_ttl(self) -> None:
        if self._ttl_timer is not None:
            self._ttl_timer.cancel()
            self._ttl_timer = None

    def _ttl_fired(self) -> None:
        self._ttl_timer = None
        left = self.unload_in()
        if left is None:
            return
        if left > 0:  # the clock moved differently from the loop's timer
            self._arm_ttl()
            return
        log.info("worker idle for %.1f s (ttl %s): unloading", self.clock() - self.last_used, self.ttl)
        self._task(self._stop_worker(), "hasr-ttl-unload")

    # ---- exit -------------------------------------------------------------------------------------------

    def kill_now(self) -> None:
        """A forced exit: SIGKILL the worker (or the one still loading); every admitted request ends with
        shutting_down."""
        self.closing = True
        for w in (self.worker, self._loading_worker):
            if w is not None:
                w.kill("the daemon was stopped before the work finished")

    async def close(self) -> None:
        """Daemon exit: refuse new work, finish what was admitted, stop the worker, end our tasks."""
        self.closing = True
        self._disarm_ttl()
        await self._idle.wait()
        await self._stop_worker()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

"""The one owner of the worker's lifecycle. Nobody else reads-then-acts on the worker state.

States and what happens in each (DESIGN.md "Worker lifecycle"):

    STOPPED   no worker. A request (or /api/load) starts one → STARTING.
    STARTING  one load in flight; every request that arrives waits for that same load (single flight).
              Ready → READY. Failure → every waiter gets the reason; → BACKOFF, or FATAL after N in a row.
    READY     serving. Requests run one at a time (FIFO, bounded queue). The TTL counts from the end of the
              last request and never fires while anything is admitted. TTL, /api/unload → STOPPING.
              Worker death or a blown work budget → in-flight request fails (worker_crashed / timeout),
              → STOPPED; the next request starts a new worker.
    STOPPING  Shutdown → SIGTERM → SIGKILL of the worker's process group → STOPPED.
    BACKOFF   a load failed; the next request waits out the delay (doubling) and retries.
    FATAL     N consecutive load failures; requests fail at once with the kept reason (health "error").
              An explicit load or unload clears it.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections import deque
from typing import Any, AsyncIterator, Awaitable, Callable

from hasrd import errors, policy
from hasrd.config import Settings
from hasrd.pcm import PcmBuffer
from hasrd.workerproc import EventSink, WorkerProcess

log = logging.getLogger("hasrd.supervisor")

SpawnFn = Callable[[Callable[[str], None]], Awaitable[WorkerProcess]]
"""Starts a worker; may report phases (e.g. waiting for VRAM) through its argument."""


class State(str, enum.Enum):
    STOPPED = "stopped"
    STARTING = "starting"
    READY = "ready"
    STOPPING = "stopping"
    BACKOFF = "backoff"
    FATAL = "fatal"


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
        self.keep_alive: float | None | bool = False  # False: use the setting; None: forever; float: seconds
        self.in_flight = 0  # admitted requests not yet finished (queued, loading or running)
        self.running = 0
        self.waiting: deque[asyncio.Future[None]] = deque()
        self.job: dict[str, Any] | None = None
        self._load_task: asyncio.Task[None] | None = None
        self._stop_task: asyncio.Task[None] | None = None
        self._reaper: asyncio.Task[None] | None = None
        self._load_listeners: set[EventSink] = set()
        self._loading_worker: WorkerProcess | None = None
        self._hold = False  # unload in progress: the slot is not handed to the queue meanwhile
        self._idle = asyncio.Event()
        self._idle.set()
        self.closing = False

    # ---- observation ------------------------------------------------------------------------------------

    @property
    def ttl(self) -> float | None:
        if self.keep_alive is False:
            return self.s.idle_ttl_sec
        return self.keep_alive  # type: ignore[return-value]

    def snapshot(self) -> dict[str, Any]:
        now = self.clock()
        left = policy.unload_in(now, self.last_used, self.ttl, self.in_flight) if self.state == State.READY else None
        w = self.worker
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
            "phase": self.phase if self.state == State.STARTING else "",
            "elapsed_s": round(now - self.load_started, 1) if self.state == State.STARTING else 0.0,
            "expected_s": self.expected_s if self.state == State.STARTING else 0.0,
            "job": dict(self.job) if self.job else None,
            "error": self.last_error.message if self.last_error and self.state in (State.BACKOFF, State.FATAL)
                     else None,
            "error_code": self.last_error.code if self.last_error and self.state in (State.BACKOFF, State.FATAL)
                          else None,
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
        if state != self.state:
            log.info("worker state %s -> %s", self.state.value, state.value)
            self.state = state
        self._changed()

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
        self._load_task = asyncio.create_task(self._load(), name="hasr-load")
        # Waiters may all have gone (clients left): the failure is kept in last_error, not "never retrieved".
        self._load_task.add_done_callback(lambda t: t.cancelled() or t.exception())
        asyncio.create_task(self._loading_heartbeat(self._load_task), name="hasr-load-heartbeat")
        self._set(State.STARTING)

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
            err = e if isinstance(e, errors.HasrError) else errors.LoadFailed(f"could not start the worker: {e}")
            if isinstance(e, asyncio.CancelledError):
                err = errors.LoadFailed("loading was cancelled")
            self.failures += 1
            self.last_error = err
            if policy.is_fatal(self.failures, self.s.max_load_failures):
                self._set(State.FATAL)
            else:
                self.backoff_until = self.clock() + policy.next_backoff(
                    self.failures, self.s.backoff_base_sec, self.s.backoff_max_sec)
                self._set(State.BACKOFF)
            log.warning("worker load failed (%d in a row): %s", self.failures, err.message)
            if self.state == State.FATAL:
                err = self._fatal()
            else:
                if not isinstance(err, errors.Unavailable):
                    err = errors.LoadFailed(err.message)
                err.retry_after = max(1.0, self.backoff_until - self.clock())
            raise err from None
        self._loading_worker = None
        worker.cancel_grace = self.s.cancel_grace_sec
        self.worker = worker
        self.identity = dict(ready.identity)
        self.load_s = ready.load_s
        self.loads += 1
        self.failures = 0
        self.last_error = None
        self.last_used = self.clock()
        self._set(State.READY)
        asyncio.create_task(self._watch(worker), name=f"hasr-watch-{worker.pid}")
        self._kick_reaper()

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
        self._set(State.STOPPED)

    # ---- requests ---------------------------------------------------------------------------------------

    def _fatal(self) -> errors.Fatal:
        """The error every request gets in FATAL, with the kept reason."""
        reason = self.last_error.message if self.last_error else "unknown"
        return errors.Fatal(f"loading failed {self.failures} times in a row: {reason} (run `hasrctl load` to "
                            f"retry)", retry_after=60)

    def check_admission(self) -> None:
        """Raise what lease() would raise, without admitting: lets the API refuse before decoding audio."""
        if self.closing:
            raise errors.ShuttingDown("the daemon is shutting down", retry_after=1)
        if self.state == State.FATAL:
            raise self._fatal()
        if self.in_flight >= self.s.max_queue + self.s.max_concurrent:
            raise errors.QueueFull(f"the queue is full: {self.in_flight} transcriptions are already running or "
                                   f"waiting (HASR_MAX_QUEUE={self.s.max_queue}); try again later", retry_after=5)

    @contextlib.asynccontextmanager
    async def lease(self) -> AsyncIterator[None]:
        """Count a request as admitted from queueing to its end: the TTL never fires under it."""
        self.check_admission()
        self.in_flight += 1
        self._idle.clear()
        try:
            yield
        finally:
            self.in_flight -= 1
            self.last_used = self.clock()
            if self.in_flight == 0:
                self._idle.set()
            self._changed()
            self._kick_reaper()

    @contextlib.asynccontextmanager
    async def _slot(self, on_event: EventSink | None) -> AsyncIterator[None]:
        """FIFO admission to one of ``max_concurrent`` running slots."""
        if self.running >= self.s.max_concurrent or self.waiting or self._hold:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self.waiting.append(fut)
            if on_event:
                on_event({"event": "queued", "position": len(self.waiting)})
            self._changed()
            try:
                await fut
            except BaseException:
                if fut in self.waiting:
                    self.waiting.remove(fut)
                elif fut.done() and not fut.cancelled():
                    self._release_slot()  # we were handed the slot but are leaving
                raise
        else:
            self.running += 1
        try:
            yield
        finally:
            self._release_slot()

    def _release_slot(self) -> None:
        if self._hold:  # an unload waits for this job only: the queue goes on after the worker is stopped
            self.running -= 1
            self._changed()
            return
        while self.waiting:
            fut = self.waiting.popleft()
            if not fut.done():
                fut.set_result(None)  # hand our slot straight to the next in line
                self._changed()
                return
        self.running -= 1
        self._changed()

    async def transcribe(self, pcm: PcmBuffer, *, name: str = "", language: str = "",
                         options: dict[str, Any] | None = None, on_event: EventSink | None = None) -> dict[str, Any]:
        """Load if needed, wait our turn, run one transcription, and return the worker's result."""
        t_admit = self.clock()
        async with self.lease():
            was_ready = self.state == State.READY
            await self._await_load(on_event)
            load_wait = 0.0 if was_ready else self.clock() - t_admit
            async with self._slot(on_event):
                t_start = self.clock()
                worker = await self._await_load(on_event)  # it may have died while we queued
                budget = policy.work_budget(pcm.duration_s, self.s.rtf_budget, self.s.budget_min_sec,
                                            self.s.budget_margin_sec)
                self.job = {"name": name, "done_s": 0.0, "total_s": round(pcm.duration_s, 3), "progress": 0.0}
                self._changed()

                def relay(ev: dict[str, Any]) -> None:
                    if ev.get("event") == "progress" and self.job is not None:
                        total = float(ev.get("total_s") or 0) or 1.0
                        self.job.update(done_s=ev["done_s"], progress=round(min(1.0, ev["done_s"] / total), 3))
                        self._changed()
                    if on_event:
                        on_event(ev)

                try:
                    result = await worker.transcribe(pcm, language=language, options=options, on_event=relay,
                                                     budget=budget)
                except errors.Timeout:
                    await self._worker_failed(worker)
                    raise
                except errors.WorkerCrashed:
                    await self._worker_failed(worker)
                    if self.closing:
                        raise errors.ShuttingDown("the daemon was stopped before this transcription finished "
                                                  "(forced)") from None
                    raise
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

    async def _await_load(self, on_event: EventSink | None) -> WorkerProcess:
        """ensure_ready(), telling this request about every loading phase while it waits."""
        if on_event is None or self.state == State.READY:
            return await self.ensure_ready()
        on_event({"event": "loading", "phase": self.phase or "starting worker", "elapsed_s": 0.0})
        self._load_listeners.add(on_event)
        try:
            return await self.ensure_ready()
        finally:
            self._load_listeners.discard(on_event)

    async def _worker_failed(self, worker: WorkerProcess) -> None:
        if self.worker is worker:
            self._forget_worker()
        await worker.stop(grace=0.5)

    # ---- explicit control -------------------------------------------------------------------------------

    async def load(self, keep_alive: float | None | bool = False) -> dict[str, Any]:
        """Preload (clears FATAL). ``keep_alive``: seconds, None for forever, False for the setting."""
        if self.state == State.FATAL:
            self.failures = 0
            self._set(State.STOPPED)
        elif self.state == State.BACKOFF:
            self.backoff_until = 0.0
        if keep_alive is not False:
            self.keep_alive = keep_alive
        await self.ensure_ready()
        self.last_used = self.clock()
        self._kick_reaper()
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
            while self.running:
                await asyncio.sleep(0.02)
            await self._stop_worker()  # no await before STOPPING is set once the load is done
        finally:
            self._hold = False
            self._wake_queue()
        self.keep_alive = False

    def _wake_queue(self) -> None:
        while self.waiting and self.running < self.s.max_concurrent:
            fut = self.waiting.popleft()
            if not fut.done():
                self.running += 1
                fut.set_result(None)
        self._changed()

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
        self._set(State.STOPPING)
        self._stop_task = asyncio.create_task(self._do_stop(worker), name="hasr-stop")
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

    def _kick_reaper(self) -> None:
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.create_task(self._reap(), name="hasr-ttl")

    async def _reap(self) -> None:
        """Unload the worker when its TTL has run out with nothing admitted."""
        while self.state == State.READY:
            left = policy.unload_in(self.clock(), self.last_used, self.ttl, self.in_flight)
            if left is None:
                return  # busy or kept alive: the lease's release kicks us again
            if left <= 0:
                log.info("worker idle for %.1f s (ttl %s): unloading", self.clock() - self.last_used, self.ttl)
                await self._stop_worker()
                self.keep_alive = False
                return
            await asyncio.sleep(min(left, 5.0))

    def kill_now(self) -> None:
        """A forced exit: SIGKILL the worker (or the one still loading); every admitted request ends with
        shutting_down."""
        self.closing = True
        for w in (self.worker, self._loading_worker):
            if w is not None:
                w.kill("the daemon was stopped before the work finished")

    async def wait_idle(self) -> None:
        await self._idle.wait()

    async def close(self) -> None:
        """Daemon exit: refuse new work, finish what was admitted, stop the worker."""
        self.closing = True
        await self._idle.wait()
        await self._stop_worker()

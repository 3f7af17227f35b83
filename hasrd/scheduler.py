"""The worker pool: the one owner of admission, the queue, which worker a request goes to, when another starts,
which idle one stops, and every worker's keep-alive and TTL (Ollama's server/sched.go).

Each worker is one process with one (model, device), its lifecycle owned by a :class:`~hasrd.runner.Runner`
(states, load, backoff, fatal, crash, stop) that knows nothing of queues; the pool holds a
:class:`~hasrd.poolref.RunnerRef` per runner (its reservations, its keep-alive and expiry timer) and makes runners
with an injected factory, so routing, admission, eviction and the TTL are tested with plain fakes
(tests/test_pool_units.py).

- A request is admitted (:meth:`Pool.admit`, a :class:`~hasrd.poolref.Lease`) before its audio is decoded and
  released exactly once: the daemon's ``in_flight``, its exit, and its bound: HASR_MAX_QUEUE waiting beyond the
  jobs the workers may hold (HASR_MAX_WORKERS x HASR_WORKER_PARALLEL). While any request for a model is
  admitted, that model's workers do not expire.
- It is routed by :func:`hasrd.placement.choose`: a worker of its model with room; else a new worker, while
  fewer than HASR_MAX_WORKERS run and a device holds the model; else the least recently used idle worker is
  stopped to make room; else it waits.
- Waiting is one FIFO for the whole pool, live sessions ahead of files (hasrd.waitqueue): every change (a job
  ends, a worker stops or fails) hands room on workers to waiters in order, each told its new position. A waiter
  whose model cannot be placed yet does not hold up one behind it whose model can.
- A worker holds up to HASR_WORKER_PARALLEL jobs at once (:func:`hasrd.placement.parallel_for`: by its
  device when 0), decoded together: the pool reserves a place on it for each request it hands it (``refs``),
  and hands it no more than that; a worker being stopped takes none.
- A worker's TTL runs only while nothing holds it (no reservation, no admitted request for its model); when it
  runs out the worker stops and leaves the pool. /api/unload stops workers once their running jobs are done
  (queued requests wait, then start new ones). A worker whose loads failed until FATAL stays, so its model's
  requests get the kept reason until ``hasrctl load`` clears it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from hasrd import errors, gpu, placement
from hasrd.config import Settings
from hasrd.jobevents import EventSink, Loading
from hasrd.expiry import Expiry
from hasrd.lifecycle import SETTING, KeepAlive, State
from hasrd.modelspec import ModelSpec
from hasrd.options import Options
from hasrd.pcm import PcmBuffer
from hasrd.poolref import Lease, RunnerRef, Waiter
from hasrd.poolstatus import pool_state, pool_status
from hasrd.runnerapi import MakeRunner, RunnerHooks
from hasrd.status import PoolStatus
from hasrd.waitqueue import WaitQueue
from hasrd.workerlive import LiveSession
from hasrd.transcript import Transcript, WorkerInfo

log = logging.getLogger("hasrd.scheduler")

Inventory = Callable[[], list[placement.Device]]


class Pool:
    def __init__(self, settings: Settings, make_runner: MakeRunner, default: ModelSpec, *,
                 inventory: Inventory, max_workers: int, clock: Callable[[], float] = time.monotonic,
                 on_change: Callable[[PoolStatus], None] | None = None,
                 default_device: str = placement.CPU) -> None:
        """``default_device``: where the default model's workers run ("cpu" or a GPU UUID), for the admission
        bound (how many jobs the workers may hold)."""
        self.s = settings
        self.make_runner = make_runner
        self.default = default
        self.inventory = inventory
        self.max_workers = max(1, max_workers)
        self.default_device = default_device
        self.clock = clock
        self.on_change = on_change
        self.refs: dict[int, RunnerRef] = {}
        self.waiting: WaitQueue[Waiter] = WaitQueue()  # the pool's one queue: live first, positions told
        self.in_flight = 0
        self.closing = False
        self.killed = False  # a forced exit: no worker may start any more
        self.last_used = clock()
        self.measured: dict[str, int] = {}  # model key -> MB a loaded worker of it held
        self.holding: dict[str, int] = {}  # model key -> admitted requests for it
        self.withdrawn: dict[str, str] = {}  # model key -> why its requests are refused now (a delete runs)
        self.expiry = Expiry(settings.idle_ttl_sec, clock, held=lambda key: self.holding.get(key, 0),
                             closing=lambda: self.closing, expired=self._retire)
        self._keys = itertools.count(1)
        self._idle = asyncio.Event()
        self._idle.set()
        self._tasks: set[asyncio.Task[Any]] = set()

    # ---- admission --------------------------------------------------------------------------------------

    @property
    def capacity(self) -> int:
        """Jobs the pool's workers may hold at once: HASR_MAX_WORKERS x HASR_WORKER_PARALLEL (for the default
        model's device)."""
        return self.max_workers * placement.parallel_for(self.default_device, self.s.worker_parallel)

    def check_admission(self) -> None:
        """Raise what admit() would raise, without admitting."""
        if self.closing:
            raise errors.ShuttingDown("the daemon is shutting down", retry_after=1)
        if self.in_flight >= self.s.max_queue + self.capacity:
            raise errors.QueueFull(f"the queue is full: {self.in_flight} transcriptions are already running or "
                                   f"waiting ({self.capacity} may run at once, HASR_MAX_QUEUE={self.s.max_queue} "
                                   f"more may wait); try again later", retry_after=5)

    def admit(self, model: ModelSpec | None = None) -> Lease:
        """Admit a request for ``model`` (the default) from now (before its audio is decoded) until its lease
        is released: neither its model's TTL nor the daemon's idle exit acts meanwhile."""
        self.check_admission()
        key = (model or self.default).key
        self._refuse_withdrawn(key)
        self.in_flight += 1
        self.holding[key] = self.holding.get(key, 0) + 1
        self._idle.clear()
        for ref in self._of(key):
            self.expiry.arm(ref)
        self._changed()
        return Lease(lambda: self._release_lease(key))

    def _refuse_withdrawn(self, key: str) -> None:
        if key in self.withdrawn:
            raise errors.ModelBusy(self.withdrawn[key], param="model")

    @contextlib.asynccontextmanager
    async def withdrawn_while(self, specs: list[ModelSpec], why: str) -> AsyncIterator[None]:
        """While the block runs (a delete), requests for these models get 409 ``model_busy`` (``why``) and no
        worker of them starts; their workers stop first (after their running jobs) and leave the pool."""
        keys = {s.key for s in specs} - set(self.withdrawn)
        for key in keys:
            self.withdrawn[key] = why
        try:
            self._dispatch()  # its waiters hear it now
            await asyncio.gather(*(self.unload(s) for s in specs))
            yield
        finally:
            for key in keys:
                self.withdrawn.pop(key, None)

    def _release_lease(self, key: str) -> None:
        self.in_flight -= 1
        self.holding[key] -= 1
        self.last_used = self.clock()
        if self.in_flight == 0:
            self._idle.set()
        for ref in self._of(key):
            ref.last_used = max(ref.last_used, self.last_used)  # held while the request lasted: counts from now
            self.expiry.arm(ref)
        self._changed()

    @contextlib.asynccontextmanager
    async def lease(self, model: ModelSpec | None = None) -> AsyncIterator[Lease]:
        lease = self.admit(model)
        try:
            yield lease
        finally:
            lease.release()

    def _of(self, model_key: str) -> list[RunnerRef]:
        return [r for r in self.refs.values() if r.spec.key == model_key]

    # ---- routing ----------------------------------------------------------------------------------------

    def _devices(self) -> list[placement.Device]:
        """The inventory, less what workers still loading (or about to) will take: a loaded worker's memory is
        already out of the free figure (read again whenever a worker is ready or stops)."""
        out = []
        for d in self.inventory():
            pending = sum(r.need_mb for r in self.refs.values() if r.device == d.name and r.coming)
            if d.name == placement.CPU:
                pending = 0  # MemAvailable already counts every process that runs
            out.append(placement.Device(d.name, max(0, d.free_mb - pending), d.total_mb))
        return out

    def _decide(self, spec: ModelSpec) -> placement.Decision:
        fatal = [r for r in self._of(spec.key) if r.runner.state == State.FATAL and r.retiring is None]
        if fatal and not fatal[0].refs:
            return placement.Decision("use", worker=fatal[0].key)  # its requests hear the kept reason
        devices = self._devices()
        # on a machine with GPUs a whisper model is placed by what it takes on one (they are tried first)
        need = self.measured.get(spec.key) or (spec.gpu_need_mb if spec.gpu_need_mb and any(
            d.name != placement.CPU for d in devices) else spec.need_mb)
        # a GPU engine on a machine without GPUs goes to the CPU, and the worker says what it lacks (or runs
        # there: the hybrid with a scripted draft in tests), as a single worker always did
        gpu_only = spec.gpu_only and any(d.name != placement.CPU for d in devices)
        seats = [r.seat() for r in self.refs.values() if r.runner.state != State.FATAL]
        return placement.choose(seats, spec.key, need, devices, self.max_workers, gpu_only=gpu_only,
                                name=spec.name)

    def _take(self, spec: ModelSpec, d: placement.Decision) -> RunnerRef:
        """Act on a decision synchronously (reserve the worker, or create the new one), so that the next
        decision sees it; an eviction's stop runs in a task."""
        if d.kind == "use":
            assert d.worker is not None
            ref = self.refs[d.worker]
        else:
            assert d.device is not None
            after = None
            if d.kind == "evict":
                assert d.victim is not None
                victim = self.refs[d.victim]
                log.info("stopping the idle worker of %s on %s to make room for %s", victim.spec.name,
                         victim.device, spec.name)
                after = self._retire(victim)
            ref = self._new_ref(spec, d.device, after)  # after an eviction it loads once the memory is back
        ref.refs += 1
        ref.free.clear()
        self.expiry.arm(ref)
        return ref

    def _new_ref(self, spec: ModelSpec, device: str, after: asyncio.Future[None] | None) -> RunnerRef:
        key = next(self._keys)
        runner = self.make_runner(spec, device, RunnerHooks(on_change=lambda: self._runner_changed(key),
                                                            waiting=lambda: len(self.waiting)))
        estimate = spec.gpu_need_mb if spec.gpu_need_mb and device != placement.CPU else spec.need_mb
        ref = RunnerRef(key, spec, device, runner, self.measured.get(spec.key) or estimate, self.clock(),
                        capacity=placement.parallel_for(device, self.s.worker_parallel), after=after)
        ref.free.set()
        if self.killed:  # a waiter handed a new worker during a forced exit hears shutting_down, not a load
            runner.kill("the daemon was stopped before the work finished")
        self.refs[key] = ref
        live = sum(r.retiring is None for r in self.refs.values())  # a worker evicted for it is not counted
        log.info("worker %d: %s on %s (%d of %d)", key, spec.name, device, live, self.max_workers)
        return ref

    async def _acquire(self, spec: ModelSpec, on_event: EventSink | None, live: bool, max_wait: float
                       ) -> RunnerRef:
        if self.closing:
            raise errors.ShuttingDown("the daemon is stopping; this transcription did not start")
        self._refuse_withdrawn(spec.key)  # admitted before a delete began, routed after
        if not any(w.live or not live for w in self.waiting):  # nobody waits ahead of this request
            d = self._decide(spec)
            if d.kind == "refuse":
                raise errors.ModelUnavailable(d.reason, code="insufficient_memory")
            if d.kind != "wait":
                return self._take(spec, d)
        w = Waiter(spec, live)
        self.waiting.add(w, live=live, on_event=on_event)
        self._dispatch()  # those ahead wait for their models; this one may have room on a worker of its own
        try:
            return await (asyncio.wait_for(asyncio.shield(w.fut), max_wait) if max_wait > 0 else w.fut)
        except asyncio.TimeoutError:
            if w.fut.done() and not w.fut.cancelled() and w.fut.exception() is None:
                self._release(w.fut.result())  # handed a worker just as the wait ran out
            busy = ", ".join(sorted({j.name for r in self.refs.values() for j in r.runner.status().jobs}))
            raise errors.QueueFull(f"every worker is full ({busy or 'loading'}): this live session waited "
                                   f"{max_wait:g} s (HASR_LIVE_QUEUE_SEC); try again once one has room",
                                   retry_after=5) from None
        except BaseException:
            if w.fut.done() and not w.fut.cancelled() and w.fut.exception() is None:
                self._release(w.fut.result())
            raise
        finally:
            if self.waiting.remove(w):
                self._changed()

    async def _ready(self, ref: RunnerRef, on_event: EventSink | None) -> None:
        """The reserved worker, loaded (after the memory of the worker evicted for it came back)."""
        if ref.after is not None and not ref.after.done():
            if on_event:
                on_event(Loading("waiting for a stopped worker's memory"))
            await asyncio.wait([ref.after])  # its outcome is the evicting task's; the memory is what counts
        await ref.runner.ready(on_event)

    async def _loading(self, spec: ModelSpec, on_event: EventSink | None) -> None:
        """A request for a model whose worker is loading shares that load (its failure reaches every request
        waiting for it, as the seed's single flight asks) before it waits for a worker of its own."""
        for ref in self._of(spec.key):
            if ref.runner.state == State.STARTING:
                await ref.runner.loaded(on_event)
                return

    def _release(self, ref: RunnerRef) -> None:
        ref.refs -= 1
        self.last_used = ref.last_used = self.clock()
        if ref.refs == 0:
            ref.free.set()
        self.expiry.arm(ref)
        self._dispatch()

    def _dispatch(self) -> None:
        """Hand room on workers (or new workers) to waiters, in queue order."""
        self._prune()
        for w in list(self.waiting):
            if w.fut.done():
                continue
            if w.spec.key in self.withdrawn:
                self.waiting.remove(w)
                w.fut.set_exception(errors.ModelBusy(self.withdrawn[w.spec.key], param="model"))
                continue
            d = self._decide(w.spec)
            if d.kind == "wait":
                continue
            self.waiting.remove(w)
            if d.kind == "refuse":
                w.fut.set_exception(errors.ModelUnavailable(d.reason, code="insufficient_memory"))
            else:
                w.fut.set_result(self._take(w.spec, d))
        self._changed()

    def _prune(self) -> None:
        """Workers that stopped (a death not retried) and serve nobody leave the pool."""
        for key, r in list(self.refs.items()):
            if r.refs == 0 and r.retiring is None and r.runner.state == State.STOPPED:
                self.expiry.disarm(r)
                del self.refs[key]

    def _runner_changed(self, key: int) -> None:
        ref = self.refs.get(key)  # None: it left the pool, stopped; what it says now is only published
        if ref is not None and ref.runner.state != ref.last_state:
            state = ref.last_state = ref.runner.state
            invalidate = getattr(self.inventory, "invalidate", None)
            if invalidate is not None:  # a worker loaded or stopped: the free memory moved
                invalidate()
            pid = ref.runner.pid
            if state == State.READY:
                ref.last_used = self.clock()
                self.expiry.arm(ref)
                if ref.device != placement.CPU and pid is not None:
                    self._spawn_task(self._measure(ref, pid), f"hasr-measure-{ref.key}")
            else:
                ref.held_mb = 0
                self.expiry.disarm(ref)
            if state == State.STOPPING:  # the keep-alive was this worker's
                ref.keep_alive = SETTING
            if state in (State.STOPPED, State.FATAL):
                self._prune()
                if self.waiting:
                    asyncio.get_running_loop().call_soon(self._dispatch)
        self._changed()

    async def _measure(self, ref: RunnerRef, pid: int) -> None:
        """A GPU worker's memory once it is ready (NVML, its process group): it replaces the estimate for this
        worker's seat and for its model's next worker."""
        held = await asyncio.to_thread(gpu.group_vram_mb, pid)
        if held and ref.runner.pid == pid:
            ref.held_mb = held
            self.measured[ref.spec.key] = held
            self._changed()

    def _spawn_task(self, coro: Any, name: str) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
        return task

    # ---- stopping a worker: its TTL ran out, an unload, an eviction ----------------------------------------

    def _retire(self, ref: RunnerRef) -> asyncio.Task[None]:
        """Stop ``ref``'s worker once its running jobs are done (nobody new is handed it), then drop it."""
        if ref.retiring is None:
            self.expiry.disarm(ref)
            ref.retiring = self._spawn_task(self._do_retire(ref), f"hasr-retire-{ref.key}")
        return ref.retiring

    async def _do_retire(self, ref: RunnerRef) -> None:
        try:
            await ref.free.wait()
            await ref.runner.clear_failure()
            await ref.runner.stop()
        finally:
            self.refs.pop(ref.key, None)
            self.expiry.disarm(ref)
            self._dispatch()

    # ---- requests ---------------------------------------------------------------------------------------

    async def transcribe(self, pcm: PcmBuffer, *, name: str = "", language: str = "",
                         options: Options | None = None, on_event: EventSink | None = None,
                         lease: Lease | None = None, model: ModelSpec | None = None) -> Transcript:
        """Wait for room on a worker of ``model``, load it if needed, run one transcription (beside the worker's
        other jobs) and return its result with the time spent queued, loading and working (``timings``).
        ``lease``: the request's admission, taken before its audio was decoded; without one, it is admitted here."""
        if lease is None:
            async with self.lease(model) as own:
                return await self.transcribe(pcm, name=name, language=language, options=options,
                                             on_event=on_event, lease=own, model=model)
        assert not lease.released, "transcribe() on a released lease"
        spec = model or self.default
        t0 = self.clock()
        await self._loading(spec, on_event)
        shared = self.clock() - t0
        ref = await self._acquire(spec, on_event, live=False, max_wait=0.0)
        try:
            t1 = self.clock()
            await self._ready(ref, on_event)
            t2 = self.clock()
            lease.running()
            result = await ref.runner.transcribe(pcm, name=name, language=language, options=options,
                                                 on_event=on_event)
            t3 = self.clock()
            pid = ref.runner.pid
        finally:
            self._release(ref)
        result.timings.queue_s = round(t1 - t0 - shared, 4)
        result.timings.load_s = round(t2 - t1 + shared, 4)
        result.timings.work_s = round(t3 - t2, 4)
        result.worker = WorkerInfo(spec.name, ref.device, pid)
        return result

    @contextlib.asynccontextmanager
    async def live(self, *, language: str = "", options: Options | None = None,
                   on_event: EventSink | None = None, lease: Lease, max_wait: float = 0.0,
                   model: ModelSpec | None = None) -> AsyncIterator[LiveSession]:
        """A live session on a worker of ``model``, under ``lease``, beside the worker's other jobs. It goes
        ahead of queued files (QueueFull after ``max_wait`` s, if > 0, while every worker is full)."""
        assert not lease.released, "live() on a released lease"
        await self._loading(model or self.default, on_event)
        ref = await self._acquire(model or self.default, on_event, live=True, max_wait=max_wait)
        try:
            await self._ready(ref, on_event)
            async with ref.runner.live(language=language, options=options, on_event=on_event) as session:
                yield session
        finally:
            self._release(ref)

    # ---- explicit control -------------------------------------------------------------------------------

    async def load(self, keep_alive: KeepAlive | None = None, model: ModelSpec | None = None) -> PoolStatus:
        """Load a worker of ``model`` (the default) now, with its keep-alive; clears its FATAL or BACKOFF."""
        async with self.lease(model):
            ref = await self._acquire(model or self.default, None, live=False, max_wait=0.0)
            try:
                ref.runner.retry_now()
                await self._ready(ref, None)
                if keep_alive is not None:
                    ref.keep_alive = keep_alive
            finally:
                self._release(ref)
        return self.snapshot()

    async def unload(self, model: ModelSpec | None = None) -> None:
        """Stop every worker (of ``model``) once its running jobs are done; clears FATAL and BACKOFF. Queued
        requests wait, then start new workers."""
        chosen = [r for r in self.refs.values() if model is None or r.spec.key == model.key]
        await asyncio.gather(*(asyncio.shield(self._retire(r)) for r in chosen), return_exceptions=True)
        self._dispatch()

    # ---- observation ------------------------------------------------------------------------------------

    @property
    def state(self) -> State:
        """The pool in one word, for the seed's /health and the idle exit: the most active worker's state."""
        return pool_state([r.runner.state for r in self.refs.values()])

    @property
    def loading(self) -> bool:
        return any(r.runner.state == State.STARTING for r in self.refs.values())

    def unload_in(self) -> float | None:
        """Seconds until the last loaded worker's TTL ends (None: one is kept for ever, or busy)."""
        lefts = [self.expiry.expires_in(r) for r in self.refs.values() if r.runner.state == State.READY]
        if not lefts or any(x is None for x in lefts):
            return None
        return max(x for x in lefts if x is not None)

    @property
    def quiet_since(self) -> float:
        return max([self.last_used] + [r.last_used for r in self.refs.values()])

    def snapshot(self) -> PoolStatus:
        """The pool now, as /api/ps, /api/events, the STATUS= line and the tray see it (hasrd.poolstatus)."""
        return pool_status(self.refs.values(), self.expiry, engine=self.s.engine, in_flight=self.in_flight,
                           queue=len(self.waiting), max_workers=self.max_workers,
                           idle_seconds=round(self.clock() - self.last_used, 1))

    def _changed(self) -> None:
        if self.on_change:
            try:
                self.on_change(self.snapshot())
            except Exception:
                log.exception("state observer failed")

    # ---- exit -------------------------------------------------------------------------------------------

    def kill_now(self) -> None:
        """A forced exit: SIGKILL every worker; every admitted request ends with shutting_down."""
        self.closing = self.killed = True
        for r in list(self.refs.values()):
            r.runner.kill("the daemon was stopped before the work finished")

    async def close(self) -> None:
        """Daemon exit: refuse new work, finish what was admitted, stop every worker, end our tasks."""
        self.closing = True
        for r in self.refs.values():
            self.expiry.disarm(r)
        await self._idle.wait()
        await asyncio.gather(*(r.runner.close() for r in list(self.refs.values())))
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

"""The worker pool: the one owner of everything between requests and runners (Ollama's server/sched.go): which worker
a request goes to, when another starts, which idle one stops, the one queue (live sessions ahead of files, waiters
told their place), the places reserved on each worker (up to HASR_WORKER_PARALLEL jobs) and when a worker's TTL
runs. docs/ARCHITECTURE.md ("The worker pool") gives the rules. Its parts lie beside it: admission
(hasrd.admission), where a request goes (hasrd.poolref.decide, over hasrd.placement), the TTL timers
(hasrd.expiry) and what it shows (hasrd.poolstatus). It makes runners with an injected factory
(hasrd.runnerapi), so its rules are tested with fake runners and no processes (tests/test_pool_units.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import AsyncIterator, Callable

from hasrd import errors, gpu, placement, policy
from hasrd.admission import Admission
from hasrd.config import Settings
from hasrd.jobevents import EventSink, Loading
from hasrd.expiry import Expiry
from hasrd.lifecycle import SETTING, KeepAlive, State
from hasrd.modelspec import ModelSpec
from hasrd.options import Options
from hasrd.pcm import PcmBuffer
from hasrd.poolref import Lease, RunnerRef, Waiter, decide, need_mb
from hasrd.poolstatus import pool_state, pool_status
from hasrd.runnerapi import MakeRunner, RunnerHooks
from hasrd.status import PoolStatus
from hasrd.tasks import Tasks
from hasrd.waitqueue import WaitQueue
from hasrd.workerlive import LiveSession
from hasrd.transcript import Transcript, WorkerInfo

log = logging.getLogger("hasrd.scheduler")


class Pool:
    def __init__(self, settings: Settings, make_runner: MakeRunner, default: ModelSpec, *,
                 inventory: Callable[[], list[placement.Device]], max_workers: int,
                 clock: Callable[[], float] = time.monotonic, on_change: Callable[[PoolStatus], None] | None = None,
                 default_device: str = placement.CPU) -> None:
        """``inventory``: the devices and their free memory now; ``default_device``: where the default model's
        workers run ("cpu" or a GPU UUID), for the admission bound (how many jobs the workers may hold)."""
        self.s = settings
        self.make_runner = make_runner
        self.default = default
        self.inventory = inventory
        self.max_workers = max(1, max_workers)
        self.clock = clock
        self.on_change = on_change
        self.refs: dict[int, RunnerRef] = {}
        self.waiting: WaitQueue[Waiter] = WaitQueue()  # the pool's one queue: live first, positions told
        self.admission = Admission(settings.max_queue, self.max_workers * placement.parallel_for(
            default_device, settings.worker_parallel), self._held)
        self.killed = False  # a forced exit: no worker may start any more
        self.last_used = clock()
        self.measured: dict[str, int] = {}  # model key -> MB a loaded worker of it held
        self.tasks = Tasks()  # background: stopping workers, measuring their memory
        self.expiry = Expiry(settings.idle_ttl_sec, clock, self.tasks, held=self.admission.holds,
                             closing=lambda: self.admission.closing, gone=self._gone)
        self._keys = itertools.count(1)

    # ---- admission (hasrd.admission) ---------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        return self.admission.in_flight

    def admit(self, model: ModelSpec | None = None) -> Lease:
        """Admit a request for ``model`` (the default) from now (before its audio is decoded) until its lease
        is released: neither its model's TTL nor the daemon's idle exit acts meanwhile."""
        return self.admission.admit((model or self.default).key)

    def _held(self, key: str, released: bool) -> None:
        """A request for the model ``key`` was admitted or released: its workers' TTL counts from now, if at all."""
        if released:
            self.last_used = self.clock()
        for ref in self._of(key):
            if released:
                ref.last_used = max(ref.last_used, self.last_used)  # held while the request lasted
            self.expiry.arm(ref)
        self._changed()

    @contextlib.asynccontextmanager
    async def withdrawn_while(self, specs: list[ModelSpec], why: str) -> AsyncIterator[None]:
        """While the block runs (a delete), requests for these models get 409 ``model_busy`` (``why``) and no
        worker of them starts; their workers stop first (after their running jobs) and leave the pool."""
        withdrawn = self.admission.withdrawn
        keys = {s.key for s in specs} - set(withdrawn)
        for key in keys:
            withdrawn[key] = why
        try:
            self._dispatch()  # its waiters hear it now
            await asyncio.gather(*(self.unload(s) for s in specs))
            yield
        finally:
            for key in keys:
                withdrawn.pop(key, None)

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

    def _decide(self, spec: ModelSpec) -> placement.Decision:
        return decide(self.refs.values(), spec, self.inventory(), self.measured, self.max_workers)

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
                after = self.expiry.retire(victim)
            ref = self._new_ref(spec, d.device, after)  # after an eviction it loads once the memory is back
        ref.refs += 1
        ref.free.clear()
        self.expiry.arm(ref)
        return ref

    def _new_ref(self, spec: ModelSpec, device: str, after: asyncio.Future[None] | None) -> RunnerRef:
        key = next(self._keys)
        runner = self.make_runner(spec, device, RunnerHooks(on_change=lambda: self._runner_changed(key),
                                                            waiting=lambda: len(self.waiting)))
        ref = RunnerRef(key, spec, device, runner, need_mb(spec, self.measured, gpu=device != placement.CPU),
                        self.clock(), capacity=placement.parallel_for(device, self.s.worker_parallel), after=after)
        ref.free.set()
        if self.killed:  # a waiter handed a new worker during a forced exit hears shutting_down, not a load
            runner.kill("the daemon was stopped before the work finished")
        self.refs[key] = ref
        live = sum(r.retiring is None for r in self.refs.values())  # a worker evicted for it is not counted
        log.info("worker %d: %s on %s (%d of %d)", key, spec.name, device, live, self.max_workers)
        return ref

    async def _acquire(self, spec: ModelSpec, on_event: EventSink | None, live: bool, max_wait: float
                       ) -> RunnerRef:
        if self.admission.closing:
            raise errors.ShuttingDown("the daemon is stopping; this transcription did not start")
        self.admission.refuse_withdrawn(spec.key)  # admitted before a delete began, routed after
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
        except BaseException as e:
            if w.fut.done() and not w.fut.cancelled() and w.fut.exception() is None:
                self._release(w.fut.result())  # handed a worker just as the wait ended
            if not isinstance(e, asyncio.TimeoutError):
                raise
            busy = ", ".join(sorted({j.name for r in self.refs.values() for j in r.runner.status().jobs}))
            raise errors.QueueFull(f"every worker is full ({busy or 'loading'}): this live session waited "
                                   f"{max_wait:g} s (HASR_LIVE_QUEUE_SEC); try again once one has room",
                                   retry_after=5) from None
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
            if w.spec.key in self.admission.withdrawn:
                self.waiting.remove(w)
                w.fut.set_exception(errors.ModelBusy(self.admission.withdrawn[w.spec.key], param="model"))
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

    def _gone(self, ref: RunnerRef) -> None:
        """``ref``'s worker was stopped (hasrd.expiry): it leaves the pool, and its room goes to waiters."""
        self.refs.pop(ref.key, None)
        self._dispatch()

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
                    self.tasks.spawn(self._measure(ref, pid), f"hasr-measure-{ref.key}")
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
        await asyncio.gather(*(asyncio.shield(self.expiry.retire(r)) for r in chosen), return_exceptions=True)
        self._dispatch()

    # ---- observation ------------------------------------------------------------------------------------

    @property
    def state(self) -> State:
        """The pool in one word, for the seed's /health and the idle exit: the most active worker's state."""
        return pool_state([r.runner.state for r in self.refs.values()])

    def idle_exit_in(self, now: float, idle_exit: float, quiet_since: float | None) -> float | None:
        """Seconds until the daemon may exit idle (hasrd.policy.idle_exit_in), its connections quiet since
        ``quiet_since`` (None: not quiet): counted from the last request's end; never while one is admitted or a
        worker loads; a worker kept loaded holds it until its TTL ends."""
        refs = self.refs.values()
        if quiet_since is None or self.in_flight or any(r.runner.state == State.STARTING for r in refs):
            return None
        lefts = [self.expiry.expires_in(r) for r in refs if r.runner.state == State.READY]
        unload_in = max(x for x in lefts if x is not None) if lefts and None not in lefts else None
        since = max([quiet_since, self.last_used] + [r.last_used for r in refs])
        return policy.idle_exit_in(now, since, idle_exit, bool(lefts), unload_in)

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
        self.admission.closing = self.killed = True
        for r in list(self.refs.values()):
            r.runner.kill("the daemon was stopped before the work finished")

    async def close(self) -> None:
        """Daemon exit: refuse new work, finish what was admitted, stop every worker, end our tasks."""
        self.admission.closing = True
        for r in self.refs.values():
            self.expiry.disarm(r)
        await self.admission.idle.wait()
        await asyncio.gather(*(r.runner.close() for r in list(self.refs.values())))
        await self.tasks.cancel()

"""The worker pool: which worker a request goes to, when another starts, which idle one stops.

Each worker is one process with one (model, device), owned by its own :class:`~hasrd.supervisor.Supervisor`
(its states, its load and backoff, its TTL and keep-alive, its stall watchdog and cancel handshake: all as for a
single worker). The :class:`Pool` sits above them (Ollama's server/sched.go): it admits requests (the daemon's
``in_flight``, its queue bound, its exit), and routes each to a worker by :func:`hasrd.placement.choose`:

- an idle worker of the request's model; else a new worker, while fewer than HASR_MAX_WORKERS run and a device
  holds the model; else the least recently used idle worker is stopped to make room; else the request waits.
- Waiting is one FIFO for the whole pool, live sessions ahead of files (supervisor's policy, pool-wide): every
  change (a job ends, a worker stops or fails) hands free workers to waiters in order, each waiter told its new
  position. A waiter whose model cannot be placed yet does not hold up one behind it whose model can.
- A worker serves one request at a time (its Supervisor's slot); the pool reserves a worker for the request it
  hands it to, so two requests never pick the same idle worker.
- A worker whose TTL unloaded it (or that died and will not be retried) leaves the pool; one whose loads failed
  until FATAL stays, so its model's requests get the kept reason until ``hasrctl load`` clears it.

The daemon sees one object with the supervisor's surface (admit, transcribe, live, load, unload, snapshot,
state, in_flight, unload_in, close, kill_now): with one worker allowed and one model it behaves as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable

from hasrd import errors, gpu, placement, policy
from hasrd.config import Settings
from hasrd.lifecycle import KeepAlive, State
from hasrd.modelspec import ModelSpec
from hasrd.pcm import PcmBuffer
from hasrd.supervisor import EventSink, SpawnFn, Supervisor
from hasrd.waitqueue import WaitQueue
from hasrd.workerproc import LiveSession

log = logging.getLogger("hasrd.scheduler")

MakeSpawn = Callable[[ModelSpec, str], SpawnFn]
"""(model, device) -> the spawn function of a worker for that model on that device ("cpu" or a GPU UUID)."""
Inventory = Callable[[], list[placement.Device]]


@dataclass
class Entry:
    """One worker of the pool."""

    key: int
    spec: ModelSpec
    device: str
    sup: Supervisor
    need_mb: int
    reserved: int = 0  # requests handed this worker and not finished
    evicting: bool = False
    held_mb: int = 0  # GPU memory its process group holds, measured once it is ready (0: not yet)
    last_state: State = State.STOPPED

    def seat(self) -> placement.Seat:
        s = self.sup
        busy = self.reserved > 0 or self.evicting or s.state == State.STOPPING or s.running > 0
        return placement.Seat(self.key, self.spec.key, self.device, busy, s.state == State.READY,
                              s.last_used, self.held_mb or self.need_mb)

    @property
    def coming(self) -> bool:
        """It will take memory the device's free figure does not show yet: loading, or about to."""
        return self.sup.state == State.STARTING or (self.sup.worker is None and self.reserved > 0
                                                     and self.sup.state in (State.STOPPED, State.BACKOFF))


@dataclass
class Waiter:
    spec: ModelSpec
    live: bool
    fut: asyncio.Future[Entry] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class PoolLease:
    """One admitted request: counted in the pool's ``in_flight`` until :meth:`release` (idempotent); while it
    lasts, the TTL of its model's workers waits (it may be decoding its audio, not routed yet)."""

    def __init__(self, pool: Pool, model: str) -> None:
        self._pool = pool
        self.model = model
        self.released = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self._pool._release_lease(self.model)


class Pool:
    def __init__(self, settings: Settings, make_spawn: MakeSpawn, default: ModelSpec, *,
                 inventory: Inventory, max_workers: int, clock: Callable[[], float] = time.monotonic,
                 on_change: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.s = settings
        self.make_spawn = make_spawn
        self.default = default
        self.inventory = inventory
        self.max_workers = max(1, max_workers)
        self.clock = clock
        self.on_change = on_change
        self.entries: dict[int, Entry] = {}
        self.waiting: WaitQueue[Waiter] = WaitQueue()  # the pool's one queue: live first, positions told
        self.in_flight = 0
        self.closing = False
        self.last_used = clock()
        self.measured: dict[str, int] = {}  # model key -> MB a loaded worker of it held
        self.holding: dict[str, int] = {}  # model key -> admitted requests for it
        self._keys = itertools.count(1)
        self._idle = asyncio.Event()
        self._idle.set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._blank = Supervisor(settings, make_spawn(default, placement.CPU), clock=clock)  # "nothing loaded"

    # ---- admission --------------------------------------------------------------------------------------

    def check_admission(self) -> None:
        if self.closing:
            raise errors.ShuttingDown("the daemon is shutting down", retry_after=1)
        if self.in_flight >= self.s.max_queue + self.max_workers:
            raise errors.QueueFull(f"the queue is full: {self.in_flight} transcriptions are already running or "
                                   f"waiting (HASR_MAX_QUEUE={self.s.max_queue}); try again later", retry_after=5)

    def admit(self, model: ModelSpec | None = None) -> PoolLease:
        """Admit a request for ``model`` (the default): counted until its lease is released."""
        self.check_admission()
        key = (model or self.default).key
        self.in_flight += 1
        self.holding[key] = self.holding.get(key, 0) + 1
        self._idle.clear()
        self._changed()
        return PoolLease(self, key)

    def _release_lease(self, key: str) -> None:
        self.in_flight -= 1
        self.holding[key] -= 1
        self.last_used = self.clock()
        if self.in_flight == 0:
            self._idle.set()
        for e in self.entries.values():
            if e.spec.key == key and e.sup.state == State.READY:
                e.sup.last_used = max(e.sup.last_used, self.last_used)
                e.sup._arm_ttl()  # held while the request lasted: its TTL counts from now
        self._changed()

    @contextlib.asynccontextmanager
    async def lease(self, model: ModelSpec | None = None) -> AsyncIterator[PoolLease]:
        lease = self.admit(model)
        try:
            yield lease
        finally:
            lease.release()

    # ---- routing ----------------------------------------------------------------------------------------

    def _devices(self) -> list[placement.Device]:
        """The inventory, less what workers still loading (or about to) will take: a loaded worker's memory is
        already out of the free figure (read again whenever a worker is ready or stops)."""
        out = []
        for d in self.inventory():
            pending = sum(e.need_mb for e in self.entries.values() if e.device == d.name and e.coming)
            if d.name == placement.CPU:
                pending = 0  # MemAvailable already counts every process that runs
            out.append(placement.Device(d.name, max(0, d.free_mb - pending), d.total_mb))
        return out

    def _seats(self) -> list[placement.Seat]:
        return [e.seat() for e in self.entries.values() if e.sup.state != State.FATAL]

    def _decide(self, spec: ModelSpec) -> placement.Decision:
        fatal = [e for e in self.entries.values() if e.spec.key == spec.key and e.sup.state == State.FATAL]
        if fatal and not fatal[0].reserved:
            return placement.Decision("use", worker=fatal[0].key)  # its requests hear the kept reason
        devices = self._devices()
        # on a machine with GPUs a whisper model is placed by what it takes on one (they are tried first)
        need = self.measured.get(spec.key) or (spec.gpu_need_mb if spec.gpu_need_mb and any(
            d.name != placement.CPU for d in devices) else spec.need_mb)
        # a GPU engine on a machine without GPUs goes to the CPU, and the worker says what it lacks (or runs
        # there: the hybrid with a scripted draft in tests), as a single worker always did
        gpu_only = spec.gpu_only and any(d.name != placement.CPU for d in devices)
        return placement.choose(self._seats(), spec.key, need, devices, self.max_workers, gpu_only=gpu_only,
                                name=spec.name)

    def _take(self, spec: ModelSpec, d: placement.Decision) -> Entry:
        """Act on a decision synchronously (reserve the worker, or create the new one), so that the next
        decision sees it; an eviction's stop runs in a task."""
        if d.kind == "use":
            assert d.worker is not None
            entry = self.entries[d.worker]
        else:
            assert d.device is not None
            if d.kind == "evict":
                assert d.victim is not None
                victim = self.entries[d.victim]
                victim.evicting = True
                log.info("stopping the idle worker of %s on %s to make room for %s", victim.spec.name,
                         victim.device, spec.name)
                stopped = asyncio.ensure_future(self._evict(victim))
                self._tasks.add(stopped)
                stopped.add_done_callback(self._tasks.discard)
                entry = self._new_entry(spec, d.device, after=stopped)  # loads once the memory is back
            else:
                entry = self._new_entry(spec, d.device)
        entry.reserved += 1
        return entry

    def _new_entry(self, spec: ModelSpec, device: str, after: asyncio.Future[None] | None = None) -> Entry:
        key = next(self._keys)
        estimate = spec.gpu_need_mb if spec.gpu_need_mb and device != placement.CPU else spec.need_mb
        entry = Entry(key, spec, device, None, self.measured.get(spec.key) or estimate)  # type: ignore[arg-type]

        def changed(snap: dict[str, Any]) -> None:
            self._worker_changed(entry)

        spawn = self.make_spawn(spec, device)
        if after is not None:
            first = spawn

            async def spawn_after(report: Callable[[str], None]) -> Any:
                report("waiting for a stopped worker's memory")
                await asyncio.wait([after])  # its outcome is the evicting task's; the memory is what counts
                return await first(report)

            spawn = spawn_after
        entry.sup = Supervisor(self.s, spawn, clock=self.clock, on_change=changed)
        entry.sup.holds = lambda: self.holding.get(spec.key, 0)
        entry.sup.waiters = lambda: len(self.waiting)
        self.entries[key] = entry
        log.info("worker %d: %s on %s (%d of %d)", key, spec.name, device, len(self.entries), self.max_workers)
        return entry

    async def _evict(self, victim: Entry) -> None:
        try:
            await victim.sup.unload()
        finally:
            self.entries.pop(victim.key, None)
            self._dispatch()

    async def _acquire(self, spec: ModelSpec, on_event: EventSink | None, live: bool, max_wait: float) -> Entry:
        if self.closing:
            raise errors.ShuttingDown("the daemon is stopping; this transcription did not start")
        if not any(w.live or not live for w in self.waiting):  # nobody waits ahead of this request
            d = self._decide(spec)
            if d.kind == "refuse":
                raise errors.ModelUnavailable(d.reason, code="insufficient_memory")
            if d.kind != "wait":
                return self._take(spec, d)
        w = Waiter(spec, live)
        self.waiting.add(w, live=live, on_event=on_event)
        self._changed()
        try:
            return await (asyncio.wait_for(asyncio.shield(w.fut), max_wait) if max_wait > 0 else w.fut)
        except asyncio.TimeoutError:
            if w.fut.done() and not w.fut.cancelled() and w.fut.exception() is None:
                self._release(w.fut.result())  # handed a worker just as the wait ran out
            busy = ", ".join(sorted({str(e.sup.job.get("name")) for e in self.entries.values() if e.sup.job}))
            raise errors.QueueFull(f"every worker is busy ({busy or 'loading'}): this live session waited "
                                   f"{max_wait:g} s (HASR_LIVE_QUEUE_SEC); try again once one is free",
                                   retry_after=5) from None
        except BaseException:
            if w.fut.done() and not w.fut.cancelled() and w.fut.exception() is None:
                self._release(w.fut.result())
            raise
        finally:
            if self.waiting.remove(w):
                self._changed()

    def _release(self, entry: Entry) -> None:
        entry.reserved -= 1
        self.last_used = self.clock()
        self._dispatch()

    def _dispatch(self) -> None:
        """Hand free workers (or room for new ones) to waiters, in queue order."""
        self._prune()
        for w in list(self.waiting):
            if w.fut.done():
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
        """Workers that stopped (TTL, unload, a death not retried) and serve nobody leave the pool."""
        for key, e in list(self.entries.items()):
            if e.reserved == 0 and not e.evicting and e.sup.state == State.STOPPED and e.sup.in_flight == 0:
                del self.entries[key]

    def _worker_changed(self, entry: Entry) -> None:
        s = entry.sup
        if s.state != entry.last_state:
            entry.last_state = s.state
            invalidate = getattr(self.inventory, "invalidate", None)
            if invalidate is not None:  # a worker loaded or stopped: the free memory moved
                invalidate()
            if s.state == State.READY and entry.device != placement.CPU and s.worker is not None:
                self._spawn_task(self._measure(entry, s.worker.pid), f"hasr-measure-{entry.key}")
            elif s.state != State.READY:
                entry.held_mb = 0
        if s.state in (State.STOPPED, State.FATAL):
            self._prune()
            if self.waiting:
                asyncio.get_running_loop().call_soon(self._dispatch)
        self._changed()

    async def _measure(self, entry: Entry, pid: int) -> None:
        """A GPU worker's memory once it is ready (NVML, its process group): it replaces the estimate for this
        worker's seat and for its model's next worker."""
        held = await asyncio.to_thread(gpu.group_vram_mb, pid)
        if held and entry.sup.worker is not None and entry.sup.worker.pid == pid:
            entry.held_mb = held
            self.measured[entry.spec.key] = held
            self._changed()

    @property
    def loading(self) -> bool:
        return any(e.sup.state == State.STARTING for e in self.entries.values())

    def _spawn_task(self, coro: Any, name: str) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(lambda t: t.cancelled() or t.exception())

    # ---- requests ---------------------------------------------------------------------------------------

    async def transcribe(self, pcm: PcmBuffer, *, name: str = "", language: str = "",
                         options: dict[str, Any] | None = None, on_event: EventSink | None = None,
                         lease: PoolLease | None = None, model: ModelSpec | None = None) -> dict[str, Any]:
        if lease is None:
            async with self.lease(model) as own:
                return await self.transcribe(pcm, name=name, language=language, options=options,
                                             on_event=on_event, lease=own, model=model)
        spec = model or self.default
        t0 = self.clock()
        entry = await self._acquire(spec, on_event, live=False, max_wait=0.0)
        waited = self.clock() - t0
        try:
            sub = entry.sup.admit()
            try:
                result = await entry.sup.transcribe(pcm, name=name, language=language, options=options,
                                                    on_event=on_event, lease=sub)
            finally:
                sub.release()
        finally:
            self._release(entry)
        timings = result.setdefault("timings", {})
        timings["queue_s"] = round(float(timings.get("queue_s") or 0.0) + waited, 4)
        result.setdefault("worker", {"model": spec.name, "device": entry.device, "pid": entry.sup.worker.pid
                                     if entry.sup.worker else None})
        return result

    @contextlib.asynccontextmanager
    async def live(self, *, language: str = "", options: dict[str, Any] | None = None,
                   on_event: EventSink | None = None, lease: PoolLease, max_wait: float = 0.0,
                   model: ModelSpec | None = None) -> AsyncIterator[LiveSession]:
        entry = await self._acquire(model or self.default, on_event, live=True, max_wait=max_wait)
        try:
            sub = entry.sup.admit()
            try:
                async with entry.sup.live(language=language, options=options, on_event=on_event,
                                          lease=sub) as session:
                    yield session
            finally:
                sub.release()
        finally:
            self._release(entry)

    # ---- explicit control -------------------------------------------------------------------------------

    async def load(self, keep_alive: KeepAlive | None = None, model: ModelSpec | None = None) -> dict[str, Any]:
        """Load a worker of ``model`` (the default) now, with its keep-alive; clears its FATAL or BACKOFF."""
        async with self.lease(model):
            entry = await self._acquire(model or self.default, None, live=False, max_wait=0.0)
            try:
                await entry.sup.load(keep_alive)
            finally:
                self._release(entry)
        return self.snapshot()

    async def unload(self, model: ModelSpec | None = None) -> None:
        """Stop every worker (of ``model``) once its running job is done; clears FATAL and BACKOFF."""
        chosen = [e for e in self.entries.values() if model is None or e.spec.key == model.key]
        await asyncio.gather(*(e.sup.unload() for e in chosen))
        self._dispatch()

    # ---- observation ------------------------------------------------------------------------------------

    @property
    def state(self) -> State:
        """The pool in one word, for the seed's /health and the idle exit: the most active worker's state."""
        states = {e.sup.state for e in self.entries.values()}
        for s in (State.READY, State.STARTING, State.STOPPING, State.FATAL, State.BACKOFF):
            if s in states:
                return s
        return State.STOPPED

    def unload_in(self) -> float | None:
        """Seconds until the last loaded worker's TTL ends (None: one is kept for ever, or busy)."""
        lefts = [e.sup.unload_in() for e in self.entries.values() if e.sup.state == State.READY]
        if not lefts or any(x is None for x in lefts):
            return None
        return max(x for x in lefts if x is not None)

    @property
    def quiet_since(self) -> float:
        return max([self.last_used] + [e.sup.last_used for e in self.entries.values()])

    def workers(self) -> list[dict[str, Any]]:
        out = []
        for e in sorted(self.entries.values(), key=lambda e: e.key):
            snap = e.sup.snapshot()
            row = {"id": e.key, "pid": snap["pid"], "model": e.spec.name, "engine": e.spec.engine,
                   "device": "cpu" if e.device == placement.CPU else "cuda", "gpu_uuid":
                   None if e.device == placement.CPU else e.device, "state": snap["state"],
                   "busy": bool(snap["running"]) or e.reserved > 0, "job": snap["job"],
                   "expires_in_s": snap["expires_in_s"], "load_s": snap["load_s"], "error": snap["error"],
                   "need_mb": e.need_mb}
            if e.device == placement.CPU:
                row["rss_mb"] = rss_mb(snap["pid"])
            else:
                row["vram_mb"] = snap["vram_mb"] or e.held_mb or None
            row["status_text"] = snap["status_text"]
            out.append(row)
        return out

    def snapshot(self) -> dict[str, Any]:
        """The most active worker's snapshot (the fields the tray and /health always had), with the pool's
        counts, and every worker under ``workers``."""
        order = {State.READY: 0, State.STARTING: 1, State.STOPPING: 2, State.FATAL: 3, State.BACKOFF: 4,
                 State.STOPPED: 5}
        entries = sorted(self.entries.values(), key=lambda e: (not e.sup.job, order[e.sup.state], e.key))
        snap = (entries[0].sup if entries else self._blank).snapshot()
        workers = self.workers()
        snap.update(in_flight=self.in_flight, queue=len(self.waiting), workers=workers,
                    max_workers=self.max_workers, running=sum(e.sup.running for e in self.entries.values()))
        snap["state"] = self.state.value
        snap["health"] = "busy" if snap["running"] and self.state == State.READY else \
            policy.health_status(self.state.value)
        snap["status_text"] = policy.pool_status_text(snap)
        return snap

    def _changed(self) -> None:
        if self.on_change:
            try:
                self.on_change(self.snapshot())
            except Exception:
                log.exception("state observer failed")

    # ---- exit -------------------------------------------------------------------------------------------

    def kill_now(self) -> None:
        self.closing = True
        for e in list(self.entries.values()):
            e.sup.kill_now()

    async def close(self) -> None:
        """Daemon exit: refuse new work, finish what was admitted, stop every worker."""
        self.closing = True
        await self._idle.wait()
        await asyncio.gather(*(e.sup.close() for e in list(self.entries.values())))
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


def rss_mb(pid: int | None) -> int | None:
    if not pid:
        return None
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) // 1024
    except OSError:
        return None
    return None


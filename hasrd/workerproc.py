"""One worker process as the daemon sees it: spawn, handshake, requests by id, death, and stopping.

This is the boundary where the worker's failures become hasr errors: EOF or a reset becomes
``WorkerCrashed``, ``Failed{code}`` becomes the matching class, a bad Hello becomes ``ProtocolMismatch``.
Its runner (hasrd.runner) owns *when* things happen; this class only knows *how*. A live session's handle on
it is hasrd.workerlive's, which imports this module, never the other way.
"""

from __future__ import annotations

import array
import asyncio
import collections
import contextlib
import itertools
import logging
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Awaitable, Callable, Mapping, Sequence

from hasrd import errors, policy
from hasrd import protocol as p
from hasrd.jobevents import EventSink
from hasrd.options import Options
from hasrd.pcm import PcmBuffer
from hasrd.transcript import Transcript
from hasrd.workerenv import forward_stderr, oom_kills, sigkill_cause, worker_env

log = logging.getLogger("hasrd.worker")


@dataclass
class Pending:
    """One request open on the worker (a file's job or a live session), from :meth:`WorkerProcess.open` to
    :meth:`WorkerProcess.close`: the reader resolves ``future`` and hands it the events."""

    id: int
    future: asyncio.Future[Transcript]
    on_event: EventSink | None
    last_seen: float = 0.0  # when the worker last reported on this job (the stall watchdog's clock)


@dataclass(frozen=True)
class Watch:
    """How the daemon watches its jobs on a worker (its runner's settings and its pool's queue)."""

    stall_sec: float = 0.0  # no report for this long and the worker is killed (HASR_STALL_SEC; 0: never)
    max_sec: float = 0.0  # a file's job may run this long at most (HASR_MAX_JOB_SEC; 0: no cap)
    cancel_grace_sec: float = 60.0  # HASR_CANCEL_GRACE_SEC: the longest a cancelled job may take to stop
    waiting: Callable[[], int] = lambda: 0  # requests waiting for a worker (a cancelled job's grace shrinks then)


UNWATCHED = Watch()  # no stall watchdog, no cap: a worker driven by hand (benchmarks)


@dataclass
class Handshake:
    ready: p.Ready | None = None  # what the worker said it loaded, once it did
    queue: asyncio.Queue[p.Msg | None] = field(default_factory=asyncio.Queue)


class WorkerProcess:
    """A spawned worker. Create with :meth:`spawn`; then :meth:`handshake`, :meth:`transcribe`, :meth:`stop`."""

    def __init__(self, proc: asyncio.subprocess.Process, sock: socket.socket) -> None:
        self.proc = proc
        self.pid = proc.pid
        self.sock = sock
        self.hs = Handshake()
        self.pending: dict[int, Pending] = {}  # the requests open on it (:meth:`open`), by id
        self.ids = itertools.count(1)
        self.dead = asyncio.Event()
        self.death_reason = ""
        self.exit_code: int | None = None
        self._wlock = asyncio.Lock()
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=20)
        self.oom_kills_at_start = oom_kills()
        self._tasks = [asyncio.create_task(self._read_loop(), name=f"worker-{self.pid}-reader"),
                       asyncio.create_task(self._wait_exit(), name=f"worker-{self.pid}-wait")]
        if proc.stderr is not None:
            self._tasks.append(asyncio.create_task(forward_stderr(proc.stderr, self.pid, self.stderr_tail),
                                                   name=f"worker-{self.pid}-stderr"))

    @classmethod
    async def spawn(cls, engine: str, *, python: str = "", env: Mapping[str, str] | None = None,
                    argv: Sequence[str] | None = None, protocol: int = p.PROTOCOL_VERSION) -> WorkerProcess:
        """Start ``python -m hasrd.worker`` in its own session with one end of a socketpair."""
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            cmd = list(argv) if argv else [python or sys.executable, "-m", "hasrd.worker"]
            cmd += ["--engine", engine, "--fd", str(child.fileno()), "--protocol", str(protocol),
                    "--parent-pid", str(os.getpid())]
            proc = await asyncio.create_subprocess_exec(
                *cmd, pass_fds=(child.fileno(),), start_new_session=True,
                env=dict(env) if env is not None else worker_env(os.environ),
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE)
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()  # only the worker holds its end: its death is our EOF
        parent.setblocking(False)
        return cls(proc, parent)

    # ---- reading ----------------------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        loop = asyncio.get_running_loop()
        buf = bytearray()
        reason = "the worker closed its channel"
        try:
            while True:
                data = await loop.sock_recv(self.sock, 1 << 16)
                if not data:
                    break
                buf += data
                for body in p.split_frames(buf):
                    self._dispatch(p.decode_worker(body))
        except (ConnectionResetError, BrokenPipeError) as e:
            reason = f"the worker's channel broke ({e.__class__.__name__})"
        except p.FrameError as e:
            reason = f"the worker sent garbage: {e}"
            self.kill()
        except OSError as e:
            reason = f"the worker's channel failed: {e}"
        # The channel usually ends because the process died: give the exit status a moment to arrive so
        # the reason says how it died (signal, exit code, last words on stderr) rather than just "EOF".
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.proc.wait()), 0.5)
        self._mark_dead(self._describe_death(reason))

    def _dispatch(self, msg: p.WorkerMsg) -> None:
        if isinstance(msg, (p.Progress, p.Draft, p.Sentence, p.Turn)):
            pend = self.pending.get(msg.id)
            if pend:
                pend.last_seen = time.monotonic()
                if pend.on_event:
                    pend.on_event(msg)  # the protocol's Struct, as it came
        elif isinstance(msg, p.Result):
            pend = self.pending.pop(msg.id, None)
            if pend and not pend.future.done():
                pend.future.set_result(msg.result)
        elif isinstance(msg, p.Failed):
            pend = self.pending.pop(msg.id, None)
            if pend and not pend.future.done():
                pend.future.set_exception(errors.from_worker(msg.code, msg.message))
        else:  # Hello, Loading, Ready, LoadFailed
            self.hs.queue.put_nowait(msg)

    def _mark_dead(self, reason: str) -> None:
        if self.dead.is_set():
            return
        self.death_reason = self.death_reason or reason
        self.dead.set()
        exc_msg = f"the worker (pid {self.pid}) died: {self.death_reason}"
        for pend in self.pending.values():
            if not pend.future.done():
                pend.future.set_exception(errors.WorkerCrashed(exc_msg))
        self.pending.clear()
        self.hs.queue.put_nowait(None)

    def _describe_death(self, fallback: str) -> str:
        code = self.proc.returncode
        if self.death_reason:  # we killed it ourselves, and said why
            return self.death_reason
        if code is None:
            what = fallback
        elif code < 0:
            what = f"killed by {signal.Signals(-code).name}"
            if code == -signal.SIGKILL:
                what += sigkill_cause(self.oom_kills_at_start, oom_kills())
        else:
            what = f"exited with code {code}"
        last = next((line for line in reversed(self.stderr_tail) if line.strip()), "")
        return f"{what}; its last output: {last}" if last else what

    async def _wait_exit(self) -> None:
        self.exit_code = await self.proc.wait()
        reader = self._tasks[0]
        try:  # let the reader drain what the worker wrote before it died (a Result may be in flight)
            await asyncio.wait_for(asyncio.shield(reader), 0.5)
        except asyncio.TimeoutError:
            reader.cancel()  # a grandchild holds the channel open: EOF will not come
        except BaseException:
            pass
        self._mark_dead(self._describe_death("it exited"))
        with contextlib.suppress(OSError):
            self.sock.close()

    # ---- writing ----------------------------------------------------------------------------------------

    async def send(self, msg: p.Msg, fds: Sequence[int] = ()) -> None:
        """One message to the worker (a transcription's, a live session's: hasrd.workerlive), with its fds."""
        if self.dead.is_set():
            raise errors.WorkerCrashed(f"the worker (pid {self.pid}) died: {self.death_reason}")
        data = p.encode(msg)
        loop = asyncio.get_running_loop()
        try:
            async with self._wlock:
                if fds:
                    anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())]
                    while True:
                        try:
                            n = self.sock.sendmsg([data], anc)
                            break
                        except BlockingIOError:
                            await _writable(loop, self.sock)
                    data = data[n:]
                if data:
                    await loop.sock_sendall(self.sock, data)
        except OSError as e:
            self._mark_dead(f"writing to the worker failed: {e}")
            raise errors.WorkerCrashed(f"the worker (pid {self.pid}) died: {self.death_reason}") from None

    # ---- operations -------------------------------------------------------------------------------------

    async def handshake(self, hello_timeout: float, load_timeout: float,
                        on_phase: Callable[[str, float], None] | None = None) -> p.Ready:
        """Wait for Hello (short budget) then Ready (load budget); raise a typed error otherwise."""
        msg = await self._next_hs(hello_timeout, "Hello")
        if not isinstance(msg, p.Hello):
            raise errors.ProtocolMismatch(f"the worker spoke {type(msg).__name__} before Hello")
        if msg.protocol != p.PROTOCOL_VERSION:
            self.kill()
            raise errors.ProtocolMismatch(
                f"the worker (pid {msg.pid}, python {msg.python}, hasr {msg.hasr_version}) speaks protocol "
                f"{msg.protocol}, the daemon {p.PROTOCOL_VERSION}: install the same hasr in the worker's interpreter")
        deadline = time.monotonic() + load_timeout
        while True:
            msg = await self._next_hs(deadline - time.monotonic(), "Ready")
            if isinstance(msg, p.Loading):
                if on_phase:
                    on_phase(msg.phase, msg.expected_s)
            elif isinstance(msg, p.Ready):
                self.hs.ready = msg
                return msg
            elif isinstance(msg, p.LoadFailed):
                raise errors.from_worker_load(msg.code, msg.message)
            else:
                raise errors.ProtocolMismatch(f"unexpected {type(msg).__name__} during loading")

    async def _next_hs(self, timeout: float, what: str) -> p.Msg:
        try:
            msg = await asyncio.wait_for(self.hs.queue.get(), max(0.0, timeout))
        except asyncio.TimeoutError:
            self.kill()
            raise errors.LoadFailed(f"the worker did not send {what} within {timeout:.0f} s; it was killed",
                                    code="timeout") from None
        if msg is None:
            raise errors.LoadFailed(f"the worker (pid {self.pid}) died while loading: {self.death_reason}")
        return msg

    async def transcribe(self, pcm: PcmBuffer, *, language: str = "", options: Options | None = None,
                         on_event: EventSink | None = None, watch: Watch = UNWATCHED) -> Transcript:
        """Run one request under the progress watchdog: a worker that reports nothing (progress, draft or
        sentence) for ``watch.stall_sec`` seconds is stuck in a call that cannot be interrupted, so it is killed;
        ``watch.max_sec`` caps the job however it progresses."""
        pend = self.open(on_event)
        fut = pend.future
        msg = p.Transcribe(id=pend.id, pcm=pcm.path or "fd", frames=pcm.frames, channels=pcm.channels,
                           language=language, options=options or Options())
        started = time.monotonic()
        stall = watch.stall_sec if watch.stall_sec > 0 else float("inf")
        try:
            await self.send(msg, fds=() if pcm.path else (pcm.fd,))
            while not fut.done():
                left, why = policy.watchdog_wait(time.monotonic(), started, pend.last_seen, stall, watch.max_sec)
                if left <= 0:
                    raise self._watchdog(why, watch)
                await asyncio.wait([fut], timeout=None if left == float("inf") else left)
            return fut.result()
        except asyncio.CancelledError:
            # The client went away: ask the worker to stop, and keep the slot until it has. The handshake
            # runs in its own task and further cancellations (anyio cancels a scope's every await) are
            # absorbed, so a healthy worker is never killed just because the client left.
            if not fut.done() and not self.dead.is_set():
                await run_to_end(self.cancel_and_wait(pend, watch))
            raise
        finally:
            self.close(pend)

    def open(self, on_event: EventSink | None) -> Pending:
        """A new request on this worker, under an id of its own; every request opened is closed (:meth:`close`)."""
        pend = Pending(next(self.ids), asyncio.get_running_loop().create_future(), on_event, time.monotonic())
        self.pending[pend.id] = pend
        return pend

    def close(self, pend: Pending) -> None:
        """The request is over for the daemon: the worker's late words on it are dropped."""
        self.pending.pop(pend.id, None)
        if pend.future.done() and not pend.future.cancelled():
            pend.future.exception()  # mark retrieved

    def _watchdog(self, why: str, watch: Watch) -> errors.HasrError:
        if why == "cap":
            self.kill(f"its job ran past HASR_MAX_JOB_SEC={watch.max_sec:g} s and it was killed")
            return errors.Timeout(f"the transcription ran longer than HASR_MAX_JOB_SEC={watch.max_sec:g} s and was "
                                  f"stopped (the worker was killed; the next request loads a new one)")
        self.kill(f"it reported no progress for {watch.stall_sec:g} s (HASR_STALL_SEC) and was killed")
        return errors.Stalled(f"the worker reported no progress for {watch.stall_sec:g} s (HASR_STALL_SEC) and "
                              f"was killed; raise HASR_STALL_SEC if this machine is that slow")

    async def cancel_and_wait(self, pend: Pending, watch: Watch) -> None:
        """Cancel a job and wait for the worker to stop it, for the grace that holds at each moment
        (policy.cancel_grace: someone may start waiting meanwhile, the worker's other jobs may end); past it the
        worker is killed."""
        t0 = time.monotonic()
        load_s = self.hs.ready.load_s if self.hs.ready else None
        try:
            await self.send(p.Cancel(id=pend.id))
            while not pend.future.done():
                grace = policy.cancel_grace(watch.cancel_grace_sec, load_s, watch.waiting(), len(self.pending) - 1)
                left = t0 + grace - time.monotonic()
                if left <= 0:
                    break
                await asyncio.wait([pend.future], timeout=min(left, 0.1))
        except errors.WorkerCrashed:
            return
        if not pend.future.done():
            waited = time.monotonic() - t0
            if waited < watch.cancel_grace_sec:
                log.info("worker %d still on a cancelled job after %.1f s while a request waits; killing it (a "
                         "new worker loads faster than it finishes)", self.pid, waited)
                self.kill(f"it was still on a cancelled job after {waited:.1f} s while a request waited, and "
                          f"was killed: loading a new one is faster")
            else:
                log.warning("worker %d ignored Cancel for %.0f s; killing it", self.pid, waited)
                self.kill(f"it ignored Cancel for {waited:.0f} s and was killed")
            await self.dead.wait()  # the slot is handed on only once the next job cannot land on this one

    def signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.pid, sig)  # start_new_session: the group id is the worker's pid
        except ProcessLookupError:
            pass
        except PermissionError:  # pragma: no cover
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def kill(self, reason: str = "") -> None:
        """SIGKILL the worker's whole process group (vLLM spawns helpers); ``reason`` says why we did."""
        if self.exit_code is None:
            if reason and not self.death_reason:
                self.death_reason = reason
            self.signal_group(signal.SIGKILL)

    async def stop(self, grace: float = 3.0) -> int | None:
        """Shutdown message, then SIGTERM, then SIGKILL of the process group; returns the exit code."""
        if self.exit_code is None and not self.dead.is_set():
            with contextlib.suppress(errors.WorkerCrashed):
                await self.send(p.Shutdown())
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                await asyncio.wait_for(asyncio.shield(self.proc.wait()), grace)
                break
            except asyncio.TimeoutError:
                log.warning("worker %d did not exit within %.1f s; sending %s", self.pid, grace,
                            signal.Signals(sig).name)
                self.signal_group(sig)
        await self.proc.wait()
        self.signal_group(signal.SIGKILL)  # leftovers in the group (vLLM helpers)
        await asyncio.gather(*self._tasks, return_exceptions=True)
        return self.proc.returncode


async def run_to_end(aw: Awaitable[Any]) -> None:
    """Await ``aw`` in a task of its own to the end, absorbing cancellations meanwhile: a cancel handshake with
    the worker must finish (the slot is handed on only then) even while anyio cancels the caller's every await."""
    task = asyncio.ensure_future(aw)
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            continue


async def _writable(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
    fut: asyncio.Future[None] = loop.create_future()
    def wake() -> None:
        if not fut.done():
            fut.set_result(None)

    loop.add_writer(sock.fileno(), wake)
    try:
        await fut
    finally:
        loop.remove_writer(sock.fileno())

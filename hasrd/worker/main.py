"""``python -m hasrd.worker --engine E --fd N``: the worker program.

Order matters: die with the daemon (PR_SET_PDEATHSIG), point fd 1 at stderr (vLLM prints to stdout), say
``Hello`` before any heavy import, then load the engine and serve requests one at a time. A reader thread
keeps the channel live while a transcription runs: it answers ``Ping``, flags ``Cancel``, and ends the
process when the daemon's end closes (the daemon died or gave up on us).

Every text leaves through one boundary, whatever the engine and for files and live sessions alike: the
request's :class:`hasrd.zhscript.Scripter` writes Chinese in the script its language tag (or HASR_ZH_SCRIPT)
asks for, with Chinese punctuation, in the draft, sentence and turn events and in the result, which records
``script``.
"""

from __future__ import annotations

import argparse
import array
import ctypes
import mmap
import os
import queue
import signal
import socket
import sys
import threading
import time
from typing import Any

from hasrd import __version__
from hasrd import protocol as p
from hasrd import zhscript

PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """Ask the kernel to SIGKILL us when the daemon dies, then close the race with our own check."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - non-Linux
        pass
    if parent_pid and os.getppid() != parent_pid:
        os._exit(70)  # the daemon died before prctl took effect


class Channel:
    """The worker's end of the socketpair: framed writes under a lock, a reader thread with fd passing."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.wlock = threading.Lock()
        self.inbox: queue.Queue[Any] = queue.Queue()
        self.fds: list[int] = []
        self.fds_lock = threading.Lock()
        self.cancelled: set[int] = set()
        self.shutdown = threading.Event()
        self.ignore_shutdown = False

    def send(self, msg: p.Msg) -> None:
        data = p.encode(msg)
        with self.wlock:
            self.sock.sendall(data)

    def reader(self) -> None:
        buf = bytearray()
        fd_size = array.array("i").itemsize
        while True:
            try:
                data, anc, _flags, _addr = self.sock.recvmsg(1 << 16, socket.CMSG_SPACE(16 * fd_size))
            except InterruptedError:  # pragma: no cover
                continue
            except OSError:
                data, anc = b"", []
            for level, kind, payload in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds = array.array("i")
                    fds.frombytes(payload[: len(payload) - (len(payload) % fd_size)])
                    with self.fds_lock:
                        self.fds.extend(fds)
            if not data:
                # The daemon's end is closed: it died or abandoned us. Nobody will read a result.
                os._exit(0)
            buf += data
            try:
                frames = p.split_frames(buf)
                for body in frames:
                    self.dispatch(p.decode_daemon(body))
            except p.FrameError as e:
                print(f"hasr worker: {e}; exiting", file=sys.stderr, flush=True)
                os._exit(65)

    def dispatch(self, msg: p.DaemonMsg) -> None:
        if isinstance(msg, p.Ping):
            self.send(p.Pong(nonce=msg.nonce))
        elif isinstance(msg, p.Cancel):
            self.cancelled.add(msg.id)
        elif isinstance(msg, p.Shutdown):
            if not self.ignore_shutdown:
                self.shutdown.set()
                self.inbox.put(msg)
        else:
            self.inbox.put(msg)

    def take_fd(self) -> int:
        with self.fds_lock:
            if not self.fds:
                raise OSError("Transcribe said pcm=fd but no file descriptor arrived with it")
            return self.fds.pop(0)


class SocketEmitter:
    """An engine's events as protocol messages; their texts pass through the request's script first."""

    def __init__(self, ch: Channel, req_id: int, script: zhscript.Scripter | None = None) -> None:
        self.ch = ch
        self.id = req_id
        self.script = script
        self._last_progress = 0.0
        self._last_done = -1.0
        self._last_phase = "decoding"

    def language(self, code: str) -> None:
        """An engine heard this language (no language was asked): the script follows it from now on."""
        if self.script is not None:
            self.script.detected(code)

    def progress(self, done_s: float, total_s: float, phase: str = "decoding") -> None:
        """At most ~20 events a second, except a step of 1 % or more or a new phase: segments decoded in a batch
        arrive in a burst, and the burst's last position must not be the one dropped."""
        now = time.monotonic()
        if (now - self._last_progress >= 0.05 or done_s >= total_s or phase != self._last_phase
                or done_s - self._last_done >= max(0.01 * total_s, 1e-9)):
            self._last_progress, self._last_done, self._last_phase = now, done_s, phase
            self.ch.send(p.Progress(id=self.id, done_s=done_s, total_s=total_s, phase=phase))

    def draft(self, text: str, segment: int = 0) -> None:
        if self.script is not None:
            text = self.script.text(text)
        self.ch.send(p.Draft(id=self.id, text=text, segment=segment))

    def sentence(self, index: int, text: str, engine: str, start_s: float, end_s: float,
                 segment: int = 0) -> None:
        if self.script is not None:
            text = self.script.sentence(text, segment)
        self.ch.send(p.Sentence(id=self.id, index=index, text=text, engine=engine, start_s=start_s, end_s=end_s,
                                segment=segment))

    def turn(self, segment: int, kind: str, start_s: float = 0.0, end_s: float = 0.0, text: str = "") -> None:
        if kind == "completed" and self.script is not None:
            text = self.script.turn_text(segment, text)
        self.ch.send(p.Turn(id=self.id, segment=segment, kind=kind, start_s=start_s, end_s=end_s, text=text))


def read_pcm(ch: Channel, req: p.Transcribe) -> Any:
    """Map the request's PCM (memfd or 0600 file) read-only; returns a float32 numpy view."""
    import numpy as np

    nbytes = req.frames * 4
    if req.pcm == "fd":
        fd = ch.take_fd()
        try:
            if nbytes == 0:
                return np.zeros(0, dtype=np.float32)
            m = mmap.mmap(fd, nbytes, prot=mmap.PROT_READ)
        finally:
            os.close(fd)
    else:
        with open(req.pcm, "rb") as f:
            if nbytes == 0:
                return np.zeros(0, dtype=np.float32)
            m = mmap.mmap(f.fileno(), nbytes, prot=mmap.PROT_READ)
    return np.frombuffer(m, dtype=np.float32, count=req.frames)


def load_settings() -> Any:
    """The worker's settings (the daemon's environment and config.toml, as the engines read them); the daemon
    already refused bad values, so a failure here falls back to the defaults with a word on stderr."""
    from hasrd import config

    try:
        return config.load()
    except (config.ConfigError, OSError, ValueError) as e:
        print(f"hasr worker: {e}; using default settings", file=sys.stderr, flush=True)
        return config.Settings()


def scripter(req_language: str, settings: Any) -> zhscript.Scripter:
    """The request's script: its tag, else HASR_LANGUAGE (the engines' default too), and HASR_ZH_SCRIPT."""
    return zhscript.Scripter(req_language or str(getattr(settings, "language", "") or ""),
                             str(getattr(settings, "zh_script", "simplified")))


def serve_one(ch: Channel, engine: Any, req: p.Transcribe, settings: Any = None) -> None:
    script = scripter(req.language, settings)
    try:
        pcm = read_pcm(ch, req)
    except (OSError, ValueError) as e:
        ch.send(p.Failed(id=req.id, code="invalid_audio", message=f"could not read the PCM: {e}"))
        return
    try:
        result = engine.transcribe(pcm, req.language, dict(req.options), SocketEmitter(ch, req.id, script),
                                   lambda: req.id in ch.cancelled or ch.shutdown.is_set())
        ch.send(p.Result(id=req.id, result=script.result(result)))
    except Exception as e:  # one bad request never ends the worker
        ch.send(fail_of(req.id, e))
    finally:
        ch.cancelled.discard(req.id)


def fail_of(req_id: int, e: BaseException) -> p.Failed:
    """A request's failure as the message the daemon gets (one bad request never ends the worker)."""
    from hasrd.worker.engine import EngineError

    if isinstance(e, EngineError):
        return p.Failed(id=req_id, code=e.code, message=e.message)
    if isinstance(e, MemoryError):
        return p.Failed(id=req_id, code="out_of_memory", message="the worker ran out of memory")
    code = "out_of_memory" if "out of memory" in str(e).lower() else "runtime_failure"
    return p.Failed(id=req_id, code=code, message=f"{type(e).__name__}: {e}")


def serve_live(ch: Channel, engine: Any, req: p.LiveStart, later: list[Any], settings: Any = None) -> None:
    """One live session: audio is fed as it arrives; everything queued behind a slow step is fed as one piece.

    Messages for anything else (the daemon runs one thing at a time, but a Ping-free race is possible) are
    kept in ``later`` and served after the session.
    """
    import numpy as np

    script = scripter(req.language, settings)
    emit = SocketEmitter(ch, req.id, script)

    def cancelled() -> bool:
        return req.id in ch.cancelled or ch.shutdown.is_set()

    session: Any = None
    try:
        live = getattr(engine, "live", None)
        if live is None:
            from hasrd.worker.engine import EngineError

            raise EngineError("unsupported", f"the {getattr(engine, 'name', '?')} engine has no live mode")
        session = live(req.language, dict(req.options), emit, cancelled)
        held: list[Any] = []  # taken from the inbox while coalescing audio, handled next in order
        while True:
            try:
                msg = held.pop(0) if held else ch.inbox.get(timeout=0.1)
            except queue.Empty:
                if cancelled():
                    session.check()
                session.poll()
                continue
            if isinstance(msg, p.Shutdown):
                later.append(msg)
                session.check()  # shutdown is set: the session ends cancelled
                continue
            if getattr(msg, "id", None) != req.id:
                later.append(msg)
                continue
            if isinstance(msg, p.LiveAudio):
                parts = [msg.pcm]
                while not held:  # coalesce: audio that waited while we decoded is one step, not a queue of them
                    try:
                        nxt = ch.inbox.get_nowait()
                    except queue.Empty:
                        break
                    if isinstance(nxt, p.LiveAudio) and nxt.id == req.id:
                        parts.append(nxt.pcm)
                    else:
                        held.append(nxt)
                # a commit or the end queued right behind this audio goes ahead of its drafts (issue 31 #4)
                ends = bool(held) and isinstance(held[0], (p.LiveCommit, p.LiveEnd)) and held[0].id == req.id
                session.feed(np.frombuffer(b"".join(parts), dtype="<f4").astype(np.float32), hurry=ends)
            elif isinstance(msg, p.LiveCommit):
                session.commit()
            elif isinstance(msg, p.LiveEnd):
                ch.send(p.Result(id=req.id, result=script.result(session.finish())))
                return
            else:
                later.append(msg)
    except Exception as e:
        if session is not None:
            session.abort()
        ch.send(fail_of(req.id, e))
    finally:
        ch.cancelled.discard(req.id)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hasrd.worker", description="hasr GPU worker (started by hasrd)")
    ap.add_argument("--engine", default="auto")
    ap.add_argument("--fd", type=int, required=True, help="inherited socket to the daemon")
    ap.add_argument("--protocol", type=int, default=p.PROTOCOL_VERSION, help="the daemon's protocol version")
    ap.add_argument("--parent-pid", type=int, default=0, help="die if this is not our parent")
    args = ap.parse_args(argv)

    die_with_parent(args.parent_pid)
    sys.stdout.flush()
    os.dup2(2, 1)  # vLLM and R2T2's finish_streaming_transcribe print to stdout; keep the channel clean
    # ... and line by line: a worker killed by a signal must not take its last printed words with it (without
    # PYTHONUNBUFFERED, print() to a pipe waits in a block buffer that SIGKILL discards)
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(line_buffering=True)
    os.set_inheritable(args.fd, False)  # vLLM's helpers and any os.system() must not hold the channel open
    sock = socket.socket(fileno=args.fd)
    ch = Channel(sock)
    ch.send(p.Hello(protocol=p.PROTOCOL_VERSION, pid=os.getpid(), python=sys.version.split()[0],
                    hasr_version=__version__))
    if args.protocol != p.PROTOCOL_VERSION:
        ch.send(p.LoadFailed(code="protocol_mismatch",
                             message=f"the daemon speaks protocol {args.protocol}, this worker "
                                     f"{p.PROTOCOL_VERSION}: install the same hasr version in both interpreters"))
        return 3
    threading.Thread(target=ch.reader, name="hasr-reader", daemon=True).start()
    settings = load_settings()

    from hasrd.worker.engine import EngineError
    from hasrd.worker.engines import create

    t0 = time.monotonic()
    try:
        engine = create(args.engine)
        ch.ignore_shutdown = bool(getattr(engine, "ignores_shutdown", False))
        identity = engine.load(lambda phase: ch.send(p.Loading(phase=phase)))
    except EngineError as e:
        ch.send(p.LoadFailed(code=e.code, message=e.message))
        return 1
    except Exception as e:
        ch.send(p.LoadFailed(code="runtime_failure", message=f"{type(e).__name__}: {e}"))
        return 1
    identity.setdefault("engine", args.engine)
    identity.setdefault("python", sys.executable)
    identity.setdefault("hasr_version", __version__)
    ch.send(p.Ready(load_s=round(time.monotonic() - t0, 4), identity=identity))

    later: list[Any] = []
    while True:
        msg = later.pop(0) if later else ch.inbox.get()
        if isinstance(msg, p.Shutdown):
            break
        if isinstance(msg, p.Transcribe):
            serve_one(ch, engine, msg, settings)
        elif isinstance(msg, p.LiveStart):
            serve_live(ch, engine, msg, later, settings)
        elif isinstance(msg, (p.LiveAudio, p.LiveCommit, p.LiveEnd)):
            pass  # a session that already failed or was cancelled: its remaining frames mean nothing
    try:
        engine.close()
    finally:
        sock.close()
        sys.stdout.flush()
        sys.stderr.flush()
    # The results are out: nothing is lost by skipping the interpreter's teardown, where a non-daemon thread or
    # an atexit hook of vLLM, torch or CTranslate2 could keep the worker alive until SIGTERM.
    os._exit(0)


if __name__ == "__main__":
    raise SystemExit(main())

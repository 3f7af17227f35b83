"""``python -m hasrd.worker --engine E --fd N``: the worker program (docs/ARCHITECTURE.md "Worker").

Order matters: die with the daemon (PR_SET_PDEATHSIG), point fd 1 at stderr (vLLM prints to stdout), say
``Hello`` before any heavy import, then load the engine with its decode loop (hasrd.worker.engines.load) and serve
the jobs the daemon sends, each in its own thread (hasrd.worker.serve).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import socket
import sys
import threading
import time

from hasrd import __version__
from hasrd import protocol as p
from hasrd.worker.channel import Channel
from hasrd.worker.serve import Jobs, load_settings

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
    from hasrd.worker.engines import create, load

    t0 = time.monotonic()
    try:
        engine = create(args.engine)
        ch.ignore_shutdown = bool(getattr(engine, "ignores_shutdown", False))
        identity = load(engine, lambda phase: ch.send(p.Loading(phase=phase)))
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

    jobs = Jobs(ch, engine, settings)
    while True:
        match ch.inbox.get():
            case p.Shutdown():
                break
            case p.Transcribe() | p.LiveStart() as msg:
                jobs.start(msg)
    jobs.join(3.0)  # the daemon stops a worker once its jobs are done; any left see the shutdown as a cancel
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

"""Ray for ``hasrctl batch``: a local instance or a cluster, and the Ray Data pipeline over the inputs.

The pipeline is one ``Dataset.map`` over rows ``{"path"}`` (one row a block, largest files first, so one task is
one file and the long ones do not finish last) with :class:`~hasrctl.batch.actor.Transcriber` on an actor pool
of ``workers`` actors: CPU actors splitting the local cores, or actors of ``gpus_per_worker`` GPUs. Results
stream back in the order they finish. An actor that dies (a crash, an OOM kill, kill -9) is restarted by Ray
and its files are retried (``RETRIES`` times each); a file that kills its actor every time is given up and
recorded as failed, and the run goes on (``max_errored_blocks = -1``). Through the Ray Client (``ray://``) the
same pipeline runs in a :class:`Pipeline` actor on the cluster, and the rows come back from it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import socket
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from hasrctl.client import Unreachable, UsageError
from hasrd.formats import Format

RETRIES = 3
CLIENT_TRIES = 4  # ray:// connections tried when the head's per-driver server fails to start
CLIENT_PORT = 10001  # ray start --head's Ray Client server


class RayUnreachable(Unreachable):
    """No Ray cluster answers at --address (exit 3)."""


@dataclass
class Job:
    """Everything the actors need, decided by the command."""

    engine: str
    env: dict[str, str]
    language: str
    options: dict[str, Any]
    formats: list[Format]
    rules: Any
    model: str
    workers: int
    gpus_per_worker: float
    cpus_per_worker: float = 1.0


def import_ray() -> Any:
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError:
        raise UsageError("hasrctl batch needs Ray: pip install 'hasr[cpu,batch]'") from None
    return ray


def _check_reachable(address: str, timeout: float = 5.0) -> None:
    """A TCP connect to a cluster's address first: Ray itself waits minutes on an address nobody answers."""
    if address == "auto":
        return
    client = address.startswith("ray://")
    parts = urlsplit(address if client else f"tcp://{address}")
    try:
        host, port = parts.hostname, parts.port or (CLIENT_PORT if client else None)
    except ValueError:  # a port that is not a number
        host = port = None
    if not host or not port:
        raise UsageError(f"--address {address}: use auto, HOST:PORT (the head's GCS port, 6379 by default) or "
                         f"ray://HOST:PORT (the head's Ray Client server, {CLIENT_PORT} by default)")
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as e:
        raise RayUnreachable(f"no Ray cluster answers at {address} ({e.strerror or e}); start one with "
                             f"`ray start --head`, or leave --address out for a local Ray") from None


def _auth_hint(log: str | None, address: str) -> str:
    """Why a cluster that answered refused us, where a missing token is the likely reason: Ray's log
    (OUTDIR/.hasr-batch.ray.log) names it for a GCS address; the Ray Client only times out (30 s)."""
    advice = ("set RAY_AUTH_MODE=token with the cluster's token in ~/.ray/auth_token or RAY_AUTH_TOKEN "
              "(docs/BATCH.md)")
    if address.startswith("ray://"):
        if os.environ.get("RAY_AUTH_MODE") == "token":
            return ""
        return f"; if the cluster uses token authentication (Ray's default where ~/.ray/auth_token exists), {advice}"
    try:
        with open(log or "", encoding="utf-8", errors="replace") as f:
            text = f.read()[-20000:]
    except OSError:
        return ""
    if "InvalidAuthToken" in text or "AuthenticationError" in text or "UNAUTHENTICATED" in text:
        return f"; the cluster refused this driver's token: {advice}"
    return ""


def connect(address: str | None, num_cpus: int | None, log: str | None = None, temp_dir: str | None = None) -> Any:
    """ray.init for a cluster (``address``) or a new local instance; RayUnreachable (exit 3) when none answers.

    Without an address a new local instance starts even where ``ray start`` left a cluster on this machine
    (``ray.init()`` alone would join that one), in ``temp_dir`` when given (private_temp_dir)."""
    # a local tool does not report usage to Ray's servers (a cluster's own setting decides for it)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray = import_ray()
    quiet = {"logging_level": logging.ERROR, "log_to_driver": False, "include_dashboard": False}
    if address:
        _check_reachable(address)
        if address.startswith("ray://"):
            # the cluster's log lines come back to the Ray Client through a logger without a handler, which
            # Python prints on the terminal: they go with Ray's other lines
            client_log = logging.getLogger("ray.util.client.logsclient")
            if log and not client_log.handlers:
                client_log.addHandler(logging.FileHandler(log, encoding="utf-8"))
        for attempt in range(1, CLIENT_TRIES + 1):
            try:
                ray.init(address=address, **quiet)
                break
            except (ConnectionError, TimeoutError, RuntimeError) as e:
                # The head's client server starts a server process for each driver; once here (1 connection of
                # about 10) that process exited at once and the driver was refused, and twice in a row on a
                # machine with both cores busy (gRPC skipped its fork handlers). Another try costs seconds.
                if attempt < CLIENT_TRIES and "Starting Ray client server failed" in str(e):
                    shutdown(ray)
                    time.sleep(2.0 * attempt)
                    continue
                raise RayUnreachable(f"cannot reach the Ray cluster at {address}: {e}{_auth_hint(log, address)}"
                                     ) from None
    else:
        extra = {"_temp_dir": temp_dir} if temp_dir else {}
        ray.init(address="local", num_cpus=num_cpus, **quiet, **extra)
    return ray


@contextlib.contextmanager
def native_output_to(path: str) -> Iterator[None]:
    """Ray's C++ core and the processes ``ray.init`` starts write to file descriptor 2, lines meant for Ray's
    developers (that Ray Data's actors have constructor arguments in the object store, ray issue 53727), and
    Ray's driver prints its cluster's errors on stdout (``(raylet) Task ... submit failed. There are 3 retries
    remaining``, as the actors are killed when Ctrl-C shuts Ray down): while Ray runs, file descriptors 1 and 2
    are ``path`` and Python's ``sys.stderr`` (our progress and messages) the terminal. ``hasrctl batch`` prints
    nothing on stdout."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    old = sys.stderr
    sys.stderr = os.fdopen(os.dup(saved[2]), "w", buffering=1, encoding=old.encoding, errors="backslashreplace")
    for fd in saved:
        os.dup2(log, fd)
    os.close(log)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, copy in saved.items():
            os.dup2(copy, fd)
            os.close(copy)
        sys.stderr.close()
        sys.stderr = old


@contextlib.contextmanager
def private_temp_dir(address: str | None) -> Iterator[str | None]:
    """A temporary directory of this run's own for a local Ray (its sessions, sockets and logs), removed when the
    run ends, so nothing is left in /tmp/ray; None for a cluster (its nodes keep their own). Made where Ray
    would make /tmp/ray: under $RAY_TMPDIR, else $TMPDIR, else /tmp, with a short name (Ray's socket paths stop
    at 107 bytes)."""
    if address:
        yield None
        return
    import shutil
    import tempfile

    base = os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or "/tmp"
    os.makedirs(base, exist_ok=True)
    path = tempfile.mkdtemp(prefix="ray-", dir=base)
    try:
        yield path
    finally:
        for _ in range(20):  # Ray's last processes may still write their logs for a moment after the shutdown
            shutil.rmtree(path, ignore_errors=True)
            if not os.path.exists(path):
                break
            time.sleep(0.1)


def cluster(ray: Any) -> tuple[int, float]:
    """CPUs and GPUs of the cluster (or the local instance)."""
    res = ray.cluster_resources()
    return int(res.get("CPU", 0)), float(res.get("GPU", 0))


def results(ray: Any, job: Job, paths: list[str]) -> Iterator[dict[str, Any]]:
    """Each file's row (actor.Transcriber.transcribe) as it finishes; files whose tasks died ``RETRIES`` + 1
    times are left out (the caller records them).

    Through the Ray Client (``ray://``) Ray Data cannot run its executor in this process (Ray 2.60: "'Worker'
    object has no attribute 'core_worker'"), so the same pipeline runs in a :class:`Pipeline` actor on the
    cluster, and the rows come back from it one by one."""
    env = actor_env(job)
    if not _through_client(ray):
        yield from _pipeline(ray, job, paths, env)
        return
    try:
        pipeline = ray.remote(num_cpus=0, max_restarts=0)(Pipeline).remote(job, paths, env)
    except ModuleNotFoundError as e:  # the Ray Client unpickles the class on the cluster at once
        if (e.name or "").partition(".")[0] not in ("hasrctl", "hasrd"):
            raise
        raise RayUnreachable(f"the Ray cluster cannot import {e.name}: install the same hasr on every node "
                             f"(pip install 'hasr[cpu,batch]'; docs/BATCH.md)") from None
    try:
        while (row := ray.get(pipeline.next.remote())) is not None:
            yield row
    finally:
        with contextlib.suppress(Exception):  # the actors of its pool are its own: they go with it
            ray.kill(pipeline)


def actor_env(job: Job) -> dict[str, str]:
    """The actors' environment: the job, the HASR_* settings, this shell's threads, and HASR_CUBLAS_FROM_CUDA13's
    library directory as the daemon gives it to its workers (hasrd/cudalibs.py: made on this machine, so it serves
    a local Ray; a cluster's nodes need cuBLAS 12 of their own, the nvidia-cublas-cu12 wheel)."""
    from hasrctl.batch.actor import JOB_VAR
    from hasrd import cudalibs, workerenv

    env = {**job.env, JOB_VAR: json.dumps({"engine": job.engine, "language": job.language, "options": job.options,
                                           "formats": job.formats, "rules": dataclasses.asdict(job.rules),
                                           "model": job.model}),
           # Ray sets OMP_NUM_THREADS to an actor's CPUs unless it is given; numpy's BLAS (the mel spectrogram)
           # and CTranslate2 with another thread count give other low-order results (a cue edge moved 20 ms),
           # so the actors thread as the daemon's worker does: as this shell says, or the libraries' default
           "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "")}
    if workerenv.cublas_from_cuda13(os.environ):
        # Ray sets env_vars when it starts an actor's process, where the loader reads them; ${...} is its own
        # expansion of the node's value
        compat = cudalibs.with_compat({"LD_LIBRARY_PATH": "${LD_LIBRARY_PATH}"}, workerenv.private_runtime_dir())
        if compat.get("LD_LIBRARY_PATH", "${LD_LIBRARY_PATH}") != "${LD_LIBRARY_PATH}":
            env["LD_LIBRARY_PATH"] = compat["LD_LIBRARY_PATH"]
    return env


def _through_client(ray: Any) -> bool:
    return bool(ray.util.client.ray.is_connected())


class Pipeline:
    """The pipeline run where Ray Data can run it, for a driver connected through the Ray Client."""

    def __init__(self, job: Job, paths: list[str], env: dict[str, str]) -> None:
        import ray

        self._rows = _pipeline(ray, job, paths, env)

    def next(self) -> dict[str, Any] | None:
        return next(self._rows, None)


def _pipeline(ray: Any, job: Job, paths: list[str], env: dict[str, str]) -> Iterator[dict[str, Any]]:
    from ray.data import DataContext

    from hasrctl.batch.actor import Transcriber

    ctx = DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.print_on_execution_start = False
    ctx.max_errored_blocks = -1  # a file that kills its actor every time ends its own row, not the run
    logging.getLogger("ray.data").setLevel(logging.ERROR)
    ds = ray.data.from_items([{"path": p} for p in paths], override_num_blocks=max(1, len(paths)))
    with warnings.catch_warnings():
        # Ray 2.60 names no parameter for a task's retries and warns on the generic one (removed in 2.64; the
        # extra pins Ray below 2.61)
        warnings.simplefilter("ignore", DeprecationWarning)
        ds = ds.map(Transcriber, concurrency=min(job.workers, len(paths)), num_cpus=job.cpus_per_worker,
                    num_gpus=job.gpus_per_worker or None, runtime_env={"env_vars": env}, max_task_retries=RETRIES)
    # one row a batch and nothing read ahead: iter_rows() holds a finished file back until the next one on the
    # same actor finishes (measured: 1.5-1.7 s late each), and a Ctrl-C then loses it
    for batch in ds.iter_batches(batch_size=1, prefetch_batches=0, batch_format="numpy"):
        for text in batch["row"]:
            yield json.loads(str(text))


def shutdown(ray: Any) -> None:
    with contextlib.suppress(Exception):  # leaving anyway
        ray.shutdown()


def driver_env() -> dict[str, str]:
    """The HASR_* settings of this shell, given to every actor as the daemon gives them to its worker."""
    return {k: v for k, v in os.environ.items() if k.startswith(("HASR_", "CT2_"))}


def each(rows: Iterator[dict[str, Any]], on_row: Callable[[dict[str, Any]], None]) -> set[str]:
    seen: set[str] = set()
    for row in rows:
        if row["path"] in seen:  # a retried task that had already delivered: never two rows for one input
            continue
        seen.add(row["path"])
        on_row(row)
    return seen

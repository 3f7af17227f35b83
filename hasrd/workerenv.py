"""Around a worker process, not its protocol: the environment it starts with (systemd's variables scrubbed, a
private shim that lends it this hasrd package), the lines of its stderr as they reach the log, and why the
kernel may have killed it (an OOM kill in its cgroup)."""

from __future__ import annotations

import asyncio
import atexit
import collections
import contextlib
import hashlib
import logging
import os
import shutil
import stat
import tempfile
from collections.abc import Mapping

from hasrd.systemd import scrubbed_env

log = logging.getLogger("hasrd.worker")


def worker_env(base: Mapping[str, str], extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The worker's environment: the daemon's, minus systemd's per-process variables, plus ``extra``.

    The worker may run under another interpreter (the GPU venv, HASR_WORKER_PYTHON) where hasr is not
    installed: a shim directory holding only a link to this ``hasrd`` package is added to PYTHONPATH, after
    the user's own entries. Only hasrd is shared, never the daemon's site-packages (whose compiled modules
    would break or shadow the venv's).
    """
    env = scrubbed_env(base)
    shim = package_shim()
    parts = [x for x in env.get("PYTHONPATH", "").split(os.pathsep) if x and x != shim]
    env["PYTHONPATH"] = os.pathsep.join([*parts, shim])
    env.update(extra or {})
    if cublas_from_cuda13(env):
        from hasrd import cudalibs

        env = cudalibs.with_compat(env, private_runtime_dir())
    return env


def cublas_from_cuda13(env: Mapping[str, str]) -> bool:
    """HASR_CUBLAS_FROM_CUDA13, from the environment or config.toml (settings already checked at start)."""
    from hasrd import config

    try:
        return bool(config.load(env).cublas_from_cuda13)
    except (config.ConfigError, OSError, ValueError):
        return False


_SHIM_DIR: str | None = None


def package_shim() -> str:
    """A private directory whose only entry is a link to this hasrd package; created on first use."""
    global _SHIM_DIR
    pkg = os.path.dirname(os.path.abspath(__file__))
    if _SHIM_DIR is None:
        tag = hashlib.sha256(pkg.encode()).hexdigest()[:10]  # one per installation: two never swap one link
        private = private_runtime_dir()
        if private is not None:
            _SHIM_DIR = os.path.join(private, f"hasr-pypath-{tag}")  # reused by every later daemon: no leak
        else:  # nowhere private and lasting: a fresh directory, removed when the daemon exits
            _SHIM_DIR = tempfile.mkdtemp(prefix="hasr-pypath-")
            atexit.register(shutil.rmtree, _SHIM_DIR, True)
    shim = _SHIM_DIR
    link = os.path.join(shim, "hasrd")
    try:
        if os.readlink(link) == pkg:
            return shim
    except OSError:
        pass
    os.makedirs(shim, mode=0o700, exist_ok=True)
    tmp = f"{link}.{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    os.symlink(pkg, tmp)
    os.replace(tmp, link)  # atomic: a concurrent spawn sees the old link or the new one
    return shim


def private_runtime_dir() -> str | None:
    """$XDG_RUNTIME_DIR when it is ours; else /tmp/hasr-UID (config.runtime_dir()), made 0700 if absent,
    when it is a real directory of ours that nobody else can write; else None. Never a path another user could
    have planted first."""
    from hasrd.config import runtime_dir

    path = str(runtime_dir())
    with contextlib.suppress(FileExistsError, OSError):
        os.mkdir(path, 0o700)
    try:
        st = os.lstat(path)
    except OSError:
        return None
    ok = stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()
    if ok and not os.environ.get("XDG_RUNTIME_DIR"):
        ok = not st.st_mode & 0o077
    return path if ok else None


def oom_kills(cgroup_root: str = "/sys/fs/cgroup") -> int | None:
    """How many processes of our cgroup (the worker shares it) an out-of-memory killer has killed: cgroup v2's
    memory.events, or v1's memory.oom_control; None where neither can be read."""
    try:
        with open("/proc/self/cgroup") as f:
            lines = [line.strip().split(":", 2) for line in f]
    except OSError:
        return None
    places = [os.path.join(cgroup_root, "memory", p.lstrip("/"), "memory.oom_control")
              for _, ctl, p in lines if "memory" in ctl.split(",")]
    places += [os.path.join(cgroup_root, p.lstrip("/"), "memory.events") for n, ctl, p in lines if n == "0"]
    for place in places:
        try:
            with open(place) as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except (OSError, ValueError):
            continue
    return None


def sigkill_cause(before: int | None, after: int | None) -> str:
    """Why a worker we did not kill got SIGKILL, as far as the cgroup's OOM counter tells."""
    if before is not None and after is not None:
        if after > before:
            return f" (the kernel's out-of-memory killer: memory.events oom_kill went from {before} to {after})"
        return " (from outside hasr: not the out-of-memory killer)"
    return " (from outside hasr, or the kernel's out-of-memory killer: see `journalctl -k`)"


MAX_LOG_LINE = 2000  # characters of one worker line that reach the log


async def forward_stderr(stderr: asyncio.StreamReader, pid: int, tail: collections.deque[str]) -> None:
    """Worker ``pid``'s stderr into our log (its last lines kept in ``tail``), read in bounded chunks and drained
    to the end.

    vLLM, transformers and Rust libraries print freely, sometimes a megabyte without a newline (progress
    bars redrawn with CR). ``StreamReader.readline`` gives up past its 64 KiB limit; a reader that stops
    leaves the pipe full, the worker blocked in its next write and the daemon waiting for ever. So: chunks
    of at most 64 KiB, lines split here, each line logged up to MAX_LOG_LINE characters with the size of
    the rest, and nothing kept beyond that.
    """
    lines = LineSplitter(MAX_LOG_LINE)
    while True:
        try:
            data = await stderr.read(1 << 16)
        except (OSError, ValueError):
            data = b""
        for line in lines.feed(data) if data else lines.close():
            tail.append(line[:300])
            log.info("worker[%d]: %s", pid, line)
        if not data:
            return


class LineSplitter:
    """Bytes in, complete lines out, each cut to ``limit`` characters; memory bounded by ``limit`` bytes.

    A line longer than the limit is logged as its first ``limit`` characters plus "... (N more bytes)"; its
    rest is counted, not stored. Within a line, only what follows the last CR is kept (what a terminal shows
    of a redrawn progress bar).
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.buf = bytearray()
        self.dropped = 0  # bytes of the current line beyond the limit

    def feed(self, data: bytes) -> list[str]:
        out: list[str] = []
        start = 0
        while True:
            nl = data.find(b"\n", start)
            piece = data[start:] if nl < 0 else data[start:nl]
            self._add(piece)
            if nl < 0:
                return out
            out.append(self._take())
            start = nl + 1

    def close(self) -> list[str]:
        return [self._take()] if self.buf or self.dropped else []

    def _add(self, piece: bytes) -> None:
        cr = piece.rfind(b"\r")
        if cr >= 0:  # a redraw: what came before on this line is gone from the screen too
            self.buf.clear()
            self.dropped = 0
            piece = piece[cr + 1:]
        room = max(0, self.limit * 4 - len(self.buf))  # UTF-8: up to 4 bytes a character
        self.buf += piece[:room]
        self.dropped += max(0, len(piece) - room)

    def _take(self) -> str:
        text = self.buf.decode("utf-8", "replace").rstrip()
        extra = self.dropped
        if len(text) > self.limit:
            extra += len(text[self.limit:].encode("utf-8", "replace"))
            text = text[:self.limit]
        if extra:
            text += f" ... ({extra} more bytes)"
        self.buf.clear()
        self.dropped = 0
        return text

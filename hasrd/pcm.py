"""PCM handed to the worker: 16 kHz mono float32 in a memfd (or a 0600 file in the daemon's runtime dir).

The daemon decodes audio straight into one of these, so a long file never sits in the daemon's heap; the
worker maps it read-only. The buffer is closed (and a file unlinked) when the request ends.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import weakref
from typing import BinaryIO

SAMPLE_RATE = 16000


class PcmBuffer:
    """A writable, then readable, sealed-by-convention float32 buffer identified by an fd."""

    def __init__(self, fd: int, path: str | None = None) -> None:
        self.fd = fd
        self.path = path  # set only for the file fallback; the worker then opens it by path
        self.frames = 0
        self.channels = 1  # interleaved channels (speakers="channels" keeps a file's own)
        # Released even if a request dies between decoding and the worker (e.g. a stream never iterated).
        self._release = weakref.finalize(self, _release, fd, path)

    @classmethod
    def create(cls, private_dir: str | None = None, use_memfd: bool = True) -> PcmBuffer:
        if use_memfd and hasattr(os, "memfd_create"):
            return cls(os.memfd_create("hasr-pcm", os.MFD_CLOEXEC))
        d = private_dir or tempfile.gettempdir()
        os.makedirs(d, mode=0o700, exist_ok=True)
        fd, path = tempfile.mkstemp(prefix="pcm-", suffix=".f32", dir=d)  # mkstemp creates 0600
        return cls(fd, path)

    @classmethod
    def from_array(cls, samples: object, private_dir: str | None = None, use_memfd: bool = True) -> PcmBuffer:
        """Build from a numpy float32 array (tests, benchmarks, uploads already in memory)."""
        import numpy as np

        arr = np.ascontiguousarray(samples, dtype="<f4")
        buf = cls.create(private_dir, use_memfd)
        with buf.writer() as w:
            w.write(arr.tobytes())
        buf.frames = int(arr.size)
        return buf

    def writer(self) -> BinaryIO:
        """A file object over the fd (closing it leaves the fd open)."""
        return open(self.fd, "wb", closefd=False)

    @property
    def duration_s(self) -> float:
        return self.frames / SAMPLE_RATE

    def close(self) -> None:
        self._release()

    def __enter__(self) -> PcmBuffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _release(fd: int, path: str | None) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)
    if path:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)

"""CTranslate2's cuBLAS on hosts that have only CUDA 13: what is missing, the ways out, and the one hasr takes.

CTranslate2 4.x wheels (faster-whisper's engine) are built for CUDA 12 and open ``libcublas.so.12`` and
``libcublasLt.so.12`` by name the first time they multiply matrices on the GPU; current drivers and the lent H200's
image ship only CUDA 13. Measured there (../shared/notes/gpu.md): the model loads, then the first decode fails with
CTranslate2's "Library libcublas.so.12 is not found or cannot be loaded".

Three ways out, in the order hasr tries them:

1. cuBLAS 12 is on the loader's path: nothing to do.
2. The ``nvidia-cublas-cu12`` wheel is installed in the worker's environment: its libraries sit under
   ``site-packages/nvidia/cublas/lib``, where CTranslate2 does not look (its RPATH is its own directory). The
   worker loads them by full path first (:func:`preload_cuda12`); the loader then finds them by their soname when
   CTranslate2 asks.
3. ``HASR_CUBLAS_FROM_CUDA13=1`` (opt-in): the daemon puts a private directory of two links, ``libcublas.so.12``
   and ``libcublasLt.so.12`` pointing at the installed CUDA 13 libraries, first on the worker's
   LD_LIBRARY_PATH (:func:`compat_dir`). CTranslate2 looks its cuBLAS symbols up by name, and faster-whisper ran
   so on the H200 with the right text; it is opt-in because the two are different major versions.

Otherwise the worker's load fails with the code ``cuda_libraries_missing`` and :func:`advice`'s sentence, which
``hasrctl doctor`` prints too. Standard library only: the daemon uses this without importing any GPU library.
"""

from __future__ import annotations

import ctypes
import glob
import os
import re
import sys
from collections.abc import Iterable

CUBLAS12 = ("libcublasLt.so.12", "libcublas.so.12")  # Lt first: libcublas needs it
CUBLAS13 = ("libcublasLt.so.13", "libcublas.so.13")
CODE = "cuda_libraries_missing"
SETTING = "HASR_CUBLAS_FROM_CUDA13"
CUDA13_DIRS = ("/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib",
               "/usr/local/cuda-13*/targets/x86_64-linux/lib", "/usr/local/cuda-13*/lib64",
               "/usr/lib/x86_64-linux-gnu", "/usr/lib64")
_MISSING = re.compile(r"(lib[\w.+-]*\.so\.\d+)\S* is not found or cannot be loaded")


def missing_library(message: str) -> str | None:
    """The library a CTranslate2 error says it could not load ("Library X is not found or cannot be loaded")."""
    m = _MISSING.search(message)
    return m.group(1) if m else None


def loadable(name: str) -> bool:
    try:
        ctypes.CDLL(name)
    except OSError:
        return False
    return True


def wheel_dirs(paths: Iterable[str] | None = None) -> list[str]:
    """``nvidia/cublas/lib`` directories of an installed nvidia-cublas-cu12 wheel on ``paths`` (sys.path)."""
    out = []
    for p in paths if paths is not None else sys.path:
        d = os.path.join(p or ".", "nvidia", "cublas", "lib")
        if os.path.exists(os.path.join(d, "libcublas.so.12")) and d not in out:
            out.append(d)
    return out


def preload_cuda12(paths: Iterable[str] | None = None) -> str | None:
    """Make cuBLAS 12 loadable by name for CTranslate2: nothing when it already is, else load the
    nvidia-cublas-cu12 wheel's libraries by full path. Returns where they came from ("" = the loader's own path;
    None = nowhere: the first GPU decode will fail)."""
    if loadable(CUBLAS12[1]):
        return ""
    for d in wheel_dirs(paths):
        try:
            for name in CUBLAS12:
                ctypes.CDLL(os.path.join(d, name), mode=ctypes.RTLD_GLOBAL)
        except OSError:
            continue
        return d
    return None


def find_cuda13(dirs: Iterable[str] | None = None) -> str | None:
    """A directory holding CUDA 13's libcublas.so.13 and libcublasLt.so.13 (file checks only; CUDA13_DIRS)."""
    for pattern in CUDA13_DIRS if dirs is None else dirs:
        for d in sorted(glob.glob(pattern), reverse=True):
            if all(os.path.exists(os.path.join(d, name)) for name in CUBLAS13):
                return d
    return None


def compat_dir(private: str, cuda13: str) -> str:
    """``private``/cuda12-compat with libcublas(Lt).so.12 linked to ``cuda13``'s .so.13; made or corrected."""
    d = os.path.join(private, "cuda12-compat")
    os.makedirs(d, mode=0o700, exist_ok=True)
    for old, new in zip(CUBLAS12, CUBLAS13, strict=True):
        link, target = os.path.join(d, old), os.path.join(cuda13, new)
        try:
            if os.readlink(link) == target:
                continue
        except OSError:
            pass
        tmp = f"{link}.{os.getpid()}"
        if os.path.lexists(tmp):
            os.unlink(tmp)
        os.symlink(target, tmp)
        os.replace(tmp, link)
    return d


def with_compat(env: dict[str, str], private: str | None, dirs: Iterable[str] | None = None) -> dict[str, str]:
    """The worker's environment with the compat directory first on LD_LIBRARY_PATH when CUDA 13's cuBLAS is
    found (option 3 above); unchanged otherwise (the worker's load error then says what to do)."""
    cuda13 = find_cuda13(dirs)
    if cuda13 is None or private is None:
        return env
    d = compat_dir(private, cuda13)
    parts = [x for x in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if x and x != d]
    return {**env, "LD_LIBRARY_PATH": os.pathsep.join([d, *parts, cuda13])}


def advice(library: str, python: str = "", cuda13: str | None = None) -> str:
    """What to do when CTranslate2 cannot load ``library`` (the worker's load error and hasrctl doctor)."""
    py = python or "the worker's python (HASR_WORKER_PYTHON)"
    have = (f"this machine has CUDA 13's cuBLAS in {cuda13} but not CUDA 12's" if cuda13 else
            "no CUDA 12 cuBLAS was found")
    opt = (f"or set {SETTING}=1 to let hasr point CTranslate2 at CUDA 13's cuBLAS; " if cuda13 else "")
    return (f"faster-whisper (CTranslate2) needs {library} on the GPU and {have}. Install it: {py} -m pip install "
            f"nvidia-cublas-cu12 (hasr loads it from there); {opt}or run on the CPU with HASR_FW_DEVICE=cpu")

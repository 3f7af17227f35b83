"""Speaker-embedding models (issue 41's diarization): where they live, the public one hasr knows how to fetch, and
which one a request for speakers gets (docs/SPEAKERS.md "The speaker model"). Standard library only: the daemon,
hasrctl and the worker all read it, and none of them may pay for numpy or ONNX Runtime to list a directory.

A speaker model is one ONNX file, ``$XDG_DATA_HOME/hasr/speakers/NAME.onnx``: beside the whisper models'
directory (``hasrd.models.data_dir()``), not inside it, so no whisper model's name is taken by it and neither
listing has to skip the other's files. Two ways in, both ending in one rename into that directory, so a file
there is always whole: ``hasrctl pull wespeaker-resnet34`` (the daemon downloads a KNOWN model with the whisper
models' checks: hasrd/download.py) and ``hasrctl pull /path/to/model.onnx`` (hasrctl copies one that ONNX
Runtime loads and that has the speaker-embedding interface: hasrctl/speakerimport.py). Hidden names there
(``.hasr-pull-*``, ``.hasr-import-*``) are work in progress and never a model.

Speaker models are not transcription models: a request's ``model`` never names one and ``/v1/models`` (the list
an OpenAI client picks its ``model`` from) leaves them out; ``hasrctl models`` lists them as kind ``speaker``.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from hasrd import errors, models

SUFFIX = ".onnx"
DEFAULT = "wespeaker-resnet34"  # preferred when several are installed and a request names none
MAX_NAME_BYTES = 250  # NAME.onnx within one file name's 255 bytes


@dataclass(frozen=True)
class Known:
    """A public speaker model ``hasrctl pull NAME`` fetches: one file of a Hugging Face repo, pinned by sha256."""

    name: str
    repo: str
    file: str
    sha256: str  # the hub's LFS sha256 of ``file``; a hub that lists another is refused before any download
    size_mb: int  # MB of 2**20 bytes, as every listing shows sizes
    license: str
    source: str


KNOWN: dict[str, Known] = {k.name: k for k in (
    # WeSpeaker's ResNet34 trained on VoxCeleb 1+2 with large-margin fine-tuning: 256-dimensional embeddings of
    # 80-band fbank input. The hub's file page lists this sha256 (26.5 MB in its decimal units); the same bytes
    # are in wenet-e2e/wespeaker_demo's Space and in pyannote's copy (hbredin/wespeaker-voxceleb-resnet34-LM).
    Known("wespeaker-resnet34", "Wespeaker/wespeaker-voxceleb-resnet34-LM", "voxceleb_resnet34_LM.onnx",
          "7bb2f06e9df17cdf1ef14ee8a15ab08ed28e8d0ef5054ee135741560df2ec068", 25,
          "CC BY 4.0 (WeSpeaker's pretrained models follow their training data's license, VoxCeleb's)",
          "https://huggingface.co/Wespeaker/wespeaker-voxceleb-resnet34-LM"),
)}


@dataclass(frozen=True)
class SpeakerModel:
    """An installed speaker model, as ``hasrctl models`` lists it."""

    name: str
    path: Path
    size_mb: int


def speakers_dir() -> Path:
    """$XDG_DATA_HOME/hasr/speakers: the whisper models' data directory's sibling."""
    return models.data_dir().parent / "speakers"


def known(name: str) -> Known | None:
    """The KNOWN model ``name`` names: by its name, or by its repo id (``Wespeaker/wespeaker-voxceleb-resnet34-LM``)."""
    return KNOWN.get(name) or next((k for k in KNOWN.values() if k.repo == name), None)


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a speaker model (one file's name without its suffix), or None."""
    if not name.strip() or name != name.strip():
        return "a speaker model's name is not empty and has no spaces around it"
    if "/" in name or name.startswith(".") or "\0" in name:
        return "a speaker model's name is one file's name: no '/', not starting with '.'"
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        return "a speaker model's name holds no control characters"
    if len(name.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
        return f"a speaker model's name is at most {MAX_NAME_BYTES} bytes"
    return None


def path_of(name: str) -> Path:
    """Where the speaker model ``name`` is (or would be) installed."""
    return speakers_dir() / (name + SUFFIX)


def installed() -> list[SpeakerModel]:
    """The installed speaker models by name: the regular files ``NAME.onnx`` (links followed) of the speakers
    directory; hidden ones are a pull's or an import's work in progress."""
    root = speakers_dir()
    out: list[SpeakerModel] = []
    try:
        entries = sorted(root.iterdir())
    except OSError:  # none yet, or unreadable: nothing installed
        return out
    for p in entries:
        if p.name.startswith(".") or not p.name.endswith(SUFFIX) or len(p.name) == len(SUFFIX):
            continue
        try:
            if p.is_file():
                out.append(SpeakerModel(p.name[:-len(SUFFIX)], p, models.size_mb(p.stat().st_size)))
        except OSError:
            continue
    return out


def file_sha256(path: Path) -> str:
    """The hex sha256 of a file's bytes, read a MB at a time: how a speaker model is known (KNOWN's pin), whether
    pulled or imported."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def installed_path(name: str) -> Path | None:
    """The installed file that ``name`` names for a removal: an installed model's name, or an absolute path to a
    model file in the speakers directory; None for anything else."""
    if name.startswith("/"):
        p = Path(os.path.normpath(name))
        inside = p.parent.exists() and os.path.realpath(p.parent) == os.path.realpath(speakers_dir())
        ours = inside and p.name.endswith(SUFFIX) and not p.name.startswith(".")
        return p if ours and (p.is_file() or p.is_symlink()) else None
    if name_problem(name) is not None:
        return None
    p = path_of(name)
    return p if p.is_file() or p.is_symlink() else None


def how_to_get() -> str:
    """The ways to a speaker model, as every "none installed" sentence ends."""
    k = KNOWN[DEFAULT]
    return (f"`hasrctl pull {k.name}` fetches one ({k.size_mb} MB), or `hasrctl pull /path/to/model.onnx` "
            f"imports one")


def resolve(name: str = "", *, trusted: bool = True) -> Path:
    """The file of the speaker model a request names: "" the default (DEFAULT when installed, else the first
    installed by name), else an installed model's name, or (``trusted`` callers only, as files are named in
    hasrd.modelspec) an absolute path to an ONNX file. SpeakerModelMissing, in one line that says how to get one,
    when there is none; Forbidden for a path from a caller who may not name files. Whether the file is a usable
    model is the worker's check (hasrd.worker.speakermodel), not this one's: the daemon never loads ONNX."""
    name = name.strip()
    if not name:
        found = installed()
        if not found:
            raise errors.SpeakerModelMissing(f"no speaker model is installed: {how_to_get()}", param="speaker_model")
        return next((m.path for m in found if m.name == DEFAULT), found[0].path)
    if name.startswith("/"):
        if not trusted:
            raise errors.Forbidden("this caller may name a speaker model only by its name (`hasrctl models` lists "
                                   "them), not by a file", param="speaker_model")
        p = Path(os.path.normpath(name))
        if not p.is_file():
            raise errors.SpeakerModelMissing(f"the speaker model {name} is no file here: {how_to_get()}",
                                             param="speaker_model")
        return p
    if name_problem(name) is None:
        p = path_of(name)
        if p.is_file():
            return p
    k = known(name)
    if k is not None:
        raise errors.SpeakerModelMissing(f"the speaker model `{k.name}` is not installed: `hasrctl pull {k.name}` "
                                         f"fetches it ({k.size_mb} MB)", param="speaker_model")
    have = ", ".join(m.name for m in installed()) or "none"
    raise errors.SpeakerModelMissing(f"no speaker model `{name}` is installed (installed: {have}): {how_to_get()}",
                                     param="speaker_model")

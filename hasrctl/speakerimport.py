"""``hasrctl pull PATH.onnx [--name NAME]``: a speaker-embedding model file checked and copied into the speakers
directory (``$XDG_DATA_HOME/hasr/speakers/NAME.onnx``, hasrd/speakermodels.py), the way in for a machine that
cannot reach the hub. In hasrctl for the reasons a model directory's import is (hasrctl/modelimport.py: the
directory is the caller's, who owns the daemon; no daemon needs to run; no path crosses the socket).

The file is checked before a byte is copied: ONNX Runtime must load it and it must have the interface the
diarization runs (one ``[batch, frames, 80]`` filterbank input, one embedding vector per window out:
hasrd.worker.speakermodel.check, imported here only, when an import runs, since hasrctl starts without numpy).
A file whose sha256 is a KNOWN model's is that model (``voxceleb_resnet34_LM.onnx`` carried over becomes
``wespeaker-resnet34``), and a KNOWN name is refused for any other file, so that name always means the file the
docs describe. The copy goes to a hidden ``.hasr-import-*`` name beside the destination, is compared with the
source's sha256, and gets its name by a link that fails when the name was taken meanwhile (a rename would
replace it); an import killed outright leaves the hidden file, which the next import removes
(modelimport.hold).
"""

from __future__ import annotations

import errno
import os
import stat
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hasrctl import modelimport
from hasrctl.client import CliError, UsageError
from hasrd import speakermodels



@dataclass(frozen=True)
class Imported:
    """What an import installed: from where, where, its size in bytes and its embedding's size."""

    src: Path
    dest: Path
    size: int
    dim: int


def is_speaker_file(arg: str) -> bool:
    """``hasrctl pull ARG`` imports a speaker model when ARG names an ``.onnx`` file: a path, a bare file name,
    or ``owner/name.onnx`` that exists here (else that reads as a Hugging Face repo id)."""
    return arg.lower().endswith(speakermodels.SUFFIX) and (
        modelimport.is_path(arg) or "/" not in arg or os.path.exists(arg))


def _check(src: Path, arg: str) -> int:
    """The model's embedding size, or UsageError saying in one line why the file is no speaker model."""
    try:
        from hasrd.worker.speakermodel import BadSpeakerModel, check
    except ImportError as e:
        raise CliError(f"checking {arg} needs numpy and ONNX Runtime in hasrctl's Python environment ({e}): "
                       f"pip install onnxruntime (hasr's cpu extra brings both with faster-whisper)") from None
    try:
        return check(str(src))
    except BadSpeakerModel as e:
        why = "it " + e.message[len(str(src)):].lstrip() if e.message.startswith(str(src)) else e.message
        raise UsageError(f"cannot import {arg}: {why}") from None
    except ImportError as e:  # ONNX Runtime is imported when the check loads the file
        raise CliError(f"checking {arg} needs ONNX Runtime in hasrctl's Python environment ({e}): pip install "
                       f"onnxruntime (hasr's cpu extra brings it with faster-whisper)") from None


def _name(given: str | None, src: Path, sha: str) -> str:
    """The installed name: ``--name``, else the KNOWN model's name the file is, else the file's own stem."""
    same = next((k for k in speakermodels.KNOWN.values() if k.sha256 == sha), None)
    name = given if given is not None else (same.name if same else src.name[:-len(speakermodels.SUFFIX)])
    problem = speakermodels.name_problem(name)
    if problem:
        raise UsageError(f"--name {name!r}: {problem}" if given is not None else
                         f"the file's name {src.name!r} cannot name a speaker model: give one with --name")
    if name in modelimport.RESERVED:
        again = "choose another --name" if given is not None else "give it another name with --name"
        raise UsageError(f"`{name}` already names a transcription model (the configured default or the embedded "
                         f"whisper base), so `hasrctl rm {name}` could not reach this one: {again}")
    k = speakermodels.KNOWN.get(name)
    if k is not None and k.sha256 != sha:
        raise UsageError(f"`{name}` names {k.repo}'s {k.file} (sha256 {k.sha256[:12]}...), and this file is another "
                         f"(sha256 {sha[:12]}...): import it under another --name")
    return name


def _install(tmp: Path, dest: Path, name: str) -> None:
    """``tmp`` takes the name ``dest`` unless something took it meanwhile (then UsageError)."""
    try:
        os.link(tmp, dest)
    except FileExistsError:
        raise UsageError(f"{dest} appeared while {name} was copied (another import?): nothing was installed; "
                         f"choose another --name") from None
    except OSError as e:
        if e.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK):
            raise
        if os.path.lexists(dest):  # no hard links on this file system: a rename after a look
            raise UsageError(f"{dest} appeared while {name} was copied: nothing was installed") from None
        os.rename(tmp, dest)


def import_file(arg: str, name: str | None, view: Any) -> Imported:
    """Copy the speaker model ``arg`` into the speakers directory as ``name`` (see the module's docstring).
    UsageError (exit 2) for a file that is no speaker model, a name that cannot be or is taken, a directory
    that cannot be written; CliError (exit 1) when the copy itself fails."""
    src = Path(os.path.abspath(os.path.expanduser(arg)))
    try:
        st = os.stat(src)
        if not stat.S_ISREG(st.st_mode):
            raise UsageError(f"cannot import {arg}: it is not a file (a speaker model is one .onnx file)")
        open(src, "rb").close()
    except OSError as e:
        why = "no such file" if e.errno == errno.ENOENT else f"it cannot be read: {e.strerror or e}"
        raise UsageError(f"cannot import {arg}: {why}") from None
    dim = _check(src, arg)
    sha = speakermodels.file_sha256(src)
    name = _name(name, src, sha)
    root, dest = speakermodels.speakers_dir(), speakermodels.path_of(name)
    if os.path.lexists(dest):
        raise UsageError(f"{dest} exists (a speaker model of that name is installed): import under another name "
                         f"with --name NAME, or remove it first (`hasrctl rm {name}`)")
    held = modelimport.hold(root, view, "speakers")
    tmp = root / f"{modelimport.STAGING}{uuid.uuid4().hex[:8]}{speakermodels.SUFFIX}.partial"
    try:
        view.note(f"importing {src}: a speaker model of {dim}-number embeddings, {st.st_size / 2**20:.1f} MB, "
                  f"into {dest}")
        modelimport.copy_file(src, tmp, view, src.name)
        if speakermodels.file_sha256(tmp) != sha:
            raise CliError(f"the copy of {src} differs from it (it changed while it was copied, or the disk "
                           f"damaged it): nothing was installed; import it again")
        _install(tmp, dest, name)
    except OSError as e:
        full = e.errno in (errno.ENOSPC, errno.EDQUOT)
        raise CliError(f"importing {name} into {root} failed: {e.strerror or e}"
                       f"{' (the disk is full)' if full else ''}; nothing was installed") from None
    finally:
        view.close()
        tmp.unlink(missing_ok=True)  # a link to the installed file by now, or a partial copy
        os.close(held)
    return Imported(src, dest, st.st_size, dim)

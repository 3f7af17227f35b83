"""``hasrctl pull PATH``: a CTranslate2 faster-whisper model directory copied into the data directory's models
(``$XDG_DATA_HOME/hasr/models/NAME``), where a request's ``model`` (``-m NAME``) and HASR_FW_MODEL find it by
name before the Hugging Face cache (hasrd.modelspec, hasrd.models). The way in for a machine that cannot reach
the hub: the directory comes from elsewhere (a USB disk, scp, another user's cache).

Why in hasrctl, not the daemon (POST /api/pull with a path): the data directory belongs to the user who runs
hasrctl, who is the daemon's owner (pull is the owner's and root's only), and the source is a path that user
can read. A copy here needs no daemon running, no path crossing the socket (which the daemon refuses to callers
that are not its owner: hasrd.context.check_access), and the progress is that of a local copy. A daemon reads the
data directory at every request, so the model is usable as soon as the copy is in place; nothing tells it. The
one case it misses: a daemon that runs as another user (a system service) has its own data directory; copy the
model there, or name the directory itself as the model.

The source is checked before a byte is copied (hasrd.models.fw_dir_problem: model.bin whole, config.json,
tokenizer.json, vocabulary.*). Only the files faster-whisper loads are copied (as a pull fetches them), into a
hidden temporary directory beside the destination; model.bin keeps a ``.partial`` name until it is whole and
checked again, then the directory gets its name in one rename. An interrupted import (Ctrl-C, a full disk)
removes the temporary directory; one killed outright leaves a hidden ``.hasr-import-*`` directory that holds no
model.bin and so is never taken for a model, and that the next import removes (each import holds a shared lock
on the models directory; one that gets it alone knows that no other import is copying).
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from hasrctl import output
from hasrctl.client import CliError, UsageError
from hasrctl.pullview import PullEvent
from hasrd import models, modelspec

CHUNK = 4 << 20
STAGING = ".hasr-import-"  # the hidden directory an import copies into, renamed into place when whole
RESERVED = (*modelspec.DEFAULT_IDS, modelspec.EMBEDDED, "embedded")


def is_path(arg: str) -> bool:
    """``hasrctl pull ARG`` imports ARG when it reads as a path (``/x``, ``./x``, ``../x``, ``~/x``) or is a
    directory here; anything else is a model to download (a faster-whisper size, a repo id)."""
    return arg.startswith(("/", "./", "../", "~")) or arg in (".", "..") or os.path.isdir(arg)


def default_name(src: Path) -> str:
    """The directory's own name; a Hugging Face snapshot's (``models--Systran--faster-whisper-small/snapshots/
    <commit>``, copied from another machine's cache) is its repo's, not the commit's. A link's own name is
    the name given (``~/models/large-v3 -> .../snapshots/abc123`` is ``large-v3``)."""
    given = Path(os.path.abspath(src.expanduser())).name  # "." and ".." made names; links not followed
    real = src.resolve()
    if given == real.name and real.parent.name == "snapshots" and real.parent.parent.name.startswith("models--"):
        return real.parent.parent.name.rsplit("--", 1)[-1]
    return given


def check_name(name: str, given: bool) -> str:
    """The installed model's name, or UsageError: one directory's name that modelspec.resolve reaches (no
    ``/``, no ``..``, not hidden) and that no other model answers to first (the default's ids, ``base``)."""
    how = "choose one" if given else f"the directory's name {name!r} cannot be a model's name: give one with --name"
    if not name.strip() or name != name.strip():
        raise UsageError(f"--name {name!r}: a model's name is not empty and has no spaces around it" if given else how)
    if "/" in name or ".." in name or name.startswith("."):
        raise UsageError(f"--name {name!r}: a model's name is one directory's name, with no '/' or '..', not "
                         f"starting with '.'" if given else how)
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise UsageError(f"--name {name!r}: a model's name holds no control characters" if given else how)
    if len(name.encode("utf-8", "surrogateescape")) > 255:
        raise UsageError(f"--name: a model's name is at most 255 bytes ({how})" if given else how)
    if name in RESERVED:
        taken = "the embedded whisper base" if name in RESERVED[-2:] else "the configured default"
        again = "choose another --name" if given else "give it another name with --name"
        raise UsageError(f"`{name}` already names {taken}, so a request would never reach this model: {again}")
    return name


def copy_file(src: Path, dst: Path, view: Any, shown: str) -> None:
    """One file, with progress events as a pull's (``downloading`` lines: the same bar), flushed to the disk
    (a speaker model's import too: hasrctl/speakerimport.py)."""
    total = src.stat().st_size
    done = 0
    with open(src, "rb") as fin, open(dst, "xb") as fout:
        if total:
            view.event(PullEvent(status="downloading", file=shown, completed=0, total=total))
        while block := fin.read(CHUNK):
            fout.write(block)
            done += len(block)
            view.event(PullEvent(status="downloading", file=shown, completed=min(done, total), total=total))
        fout.flush()
        os.fsync(fout.fileno())
    if done != total:
        raise CliError(f"{src} changed while it was copied ({total} bytes, then {done}): nothing was installed; "
                       f"import it again once it is still")


def import_dir(arg: str, name: str | None, view: Any) -> tuple[Path, Path, int]:
    """Copy the model directory ``arg`` to the data directory as ``name`` (its own name when None); returns
    (source, destination, bytes). UsageError (exit 2) for a source that is no model, a name that cannot be or is
    taken, a data directory that cannot be written; CliError (exit 1) when the copy itself fails."""
    src = Path(os.path.abspath(os.path.expanduser(arg)))
    problem = models.fw_dir_problem(src)
    if problem:
        raise UsageError(f"cannot import {arg}: {problem}")
    name = check_name(name if name is not None else default_name(src), given=name is not None)
    root = models.data_dir()
    dest = root / name
    if os.path.lexists(dest):
        what = ("a model of that name is installed there" if (dest / "model.bin").is_file()
                else "something that is no model is there")
        raise UsageError(f"{dest} exists ({what}): import under another name with --name NAME, or remove it first "
                         f"(`hasrctl rm {name}`)")
    files = models.fw_files(src)
    files.sort(key=lambda p: (p.name == "model.bin", p.name))  # the big file last, as a pull does
    total = sum(p.stat().st_size for p in files)
    held = hold(root, view, "models")
    try:
        tmp = Path(tempfile.mkdtemp(prefix=STAGING, dir=root))
    except OSError as e:
        os.close(held)
        raise unwritable(root, "models", e) from None
    try:
        free = shutil.disk_usage(root).free
        if free < total:
            raise CliError(f"not enough space for {name} in {root}: it needs {total / 2**20:.1f} MB, "
                           f"{free / 2**20:.1f} MB are free; nothing was copied")
        view.note(f"importing {src}: {len(files)} files, {total / 2**20:.1f} MB, into {dest}")
        for f in files:
            copy_file(f, tmp / (f.name + ".partial" if f.name == "model.bin" else f.name), view, f.name)
        problem = models.model_bin_problem(tmp / "model.bin.partial")
        if problem:
            raise CliError(f"the copy of {src / 'model.bin'} is damaged ({problem.removeprefix('its ')}): nothing "
                           f"was installed")
        os.rename(tmp / "model.bin.partial", tmp / "model.bin")
        os.chmod(tmp, 0o777 & ~output.umask())  # mkdtemp's 0700 -> a directory as any other the user makes
        try:
            os.rename(tmp, dest)  # whole or not at all
        except OSError as e:
            if e.errno in (errno.EEXIST, errno.ENOTEMPTY):
                raise UsageError(f"{dest} appeared while {name} was copied (another import?): nothing was "
                                 f"installed; choose another --name") from None
            raise
    except OSError as e:
        full = e.errno in (errno.ENOSPC, errno.EDQUOT)
        raise CliError(f"importing {name} into {root} failed: {e.strerror or e}"
                       f"{' (the disk is full)' if full else ''}; nothing was installed") from None
    finally:
        view.close()
        shutil.rmtree(tmp, ignore_errors=True)  # gone already when the rename succeeded
        os.close(held)
    return src, dest, total


def unwritable(root: Path, what: str, e: OSError) -> UsageError:
    """The data directory ``$XDG_DATA_HOME/hasr/<what>`` cannot be written: what to do about it."""
    return UsageError(f"cannot write the {what} directory {root}: {e.strerror or e} (it is $XDG_DATA_HOME/hasr/"
                      f"{what}; make it writable, or point XDG_DATA_HOME elsewhere for hasrctl and hasrd alike)")


def hold(root: Path, view: Any, what: str) -> int:
    """The ``what`` directory (models or speakers), made if need be, under a shared lock for as long as this import
    lives (its fd, closed to release); UsageError (:func:`unwritable`) when it cannot be. Before the lock, when no
    other import holds one, what imports killed outright left behind (their staging directories, or a speaker
    model's staging file) is removed, and said."""
    fd = -1
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pass  # another import is running: its staging directory is its own
        else:
            for d in root.glob(STAGING + "*"):
                if d.is_dir() and not d.is_symlink():
                    size = sum(f.stat().st_size for f in d.iterdir() if f.is_file())
                    shutil.rmtree(d, ignore_errors=True)
                else:
                    size = d.lstat().st_size
                    d.unlink(missing_ok=True)
                view.note(f"removed {d}: {size / 2**20:.1f} MB that an import killed before it ended left behind")
        fcntl.flock(fd, fcntl.LOCK_SH)
        return fd
    except OSError as e:
        if fd >= 0:
            os.close(fd)
        raise unwritable(root, what, e) from None

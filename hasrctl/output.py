"""Where transcripts go (stdout, -o FILE, -o DIR, beside the input) and how they are written.

Output files are never overwritten without --force, and never half-written: the text goes to a temporary file
in the same directory that is then linked into place (link fails if the name exists, so there is no window in
which another writer's file could be clobbered) or, with --force, renamed over it.

``-o -`` (and ``-o /dev/stdout``) is stdout. What is not a regular file is never renamed over: a character
device or FIFO (/dev/null, a terminal, a named pipe) is opened and written, and a symbolic link is written
through (opened, like a shell redirection; the link stays, and --force is needed when it leads to a file).
Directories, sockets, block devices and dangling links are refused.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from hasrctl.client import UsageError
from hasrd.formats import Format

STDIN = "-"
STDOUT = ("-", "/dev/stdout")  # -o values that mean stdout


@dataclass(frozen=True)
class Plan:
    """One input and where its transcript goes: a file per format, or none (stdout, one format)."""

    source: str  # absolute path, or "-" for stdin
    name: str  # what the user typed, for messages
    targets: tuple[tuple[Format, Path], ...] = ()  # (format, file) in the order asked; () = stdout

    @property
    def target(self) -> Path | None:
        """The first target (the only one with one format); None for stdout."""
        return self.targets[0][1] if self.targets else None


def resolve_input(arg: str) -> str:
    """The absolute path of an input (the daemon needs one), or "-"; local checks give exit 2 before any I/O.

    Messages leave out the name: the caller puts it in front.
    """
    if arg == STDIN:
        return STDIN
    path = os.path.abspath(os.path.expanduser(arg))
    if not os.path.exists(path):
        raise UsageError("no such file")
    if os.path.isdir(path):
        raise UsageError("is a directory, not an audio file")
    if not os.access(path, os.R_OK):
        raise UsageError("not readable (permission denied)")
    return path


def stem(source: str) -> str:
    return "stdin" if source == STDIN else Path(source).stem or Path(source).name


def plan(inputs: list[str], formats: Format | Sequence[Format], output: str | None,
         beside: bool) -> list[tuple[str, Plan | UsageError]]:
    """Map every input to its targets, one per format; errors of one input do not stop the others.

    Several formats go to several files (-o DIR: DIR/NAME.<ext> each; --beside: next to the input): stdout and
    -o FILE take one format, so they are refused with several (UsageError, before anything runs)."""
    fmts = [formats] if isinstance(formats, Format) else list(formats)
    if output and beside:
        raise UsageError("use either -o/--output or --beside, not both")
    exts = [f.extension for f in fmts]
    if len(set(exts)) < len(exts):
        raise UsageError(f"-f {', '.join(fmts)}: two of them write the same NAME.<ext>: choose one")
    several_formats = len(fmts) > 1
    shown = ", ".join("txt" if f == "text" else f for f in fmts)
    out_dir: Path | None = None
    out_file: Path | None = None
    if output in STDOUT:
        output = None
    if output:
        p = Path(os.path.expanduser(output))
        many = len(inputs) > 1 or several_formats
        if p.is_dir() or output.endswith(os.sep) or (many and not p.exists() and not p.suffix):
            out_dir = p  # "-o subs/", or "-o subs" for several inputs or formats: made when missing
            if not p.is_dir():
                try:
                    p.mkdir(parents=True, exist_ok=True)
                except OSError as e:
                    raise UsageError(f"-o {output}: cannot create the directory: {e.strerror or e}") from None
        elif len(inputs) > 1:
            raise UsageError(f"-o {output}: several inputs need a directory (end it with / to make one)")
        elif several_formats:
            raise UsageError(f"-o {output}: several formats ({shown}) need a directory, a file each (end it with / "
                             f"to make one), or --beside")
        else:
            out_file = p
    elif several_formats and not beside:
        raise UsageError(f"several formats ({shown}) cannot share stdout: write them with -o DIR (DIR/NAME.<ext> "
                         f"each) or --beside (next to each input)")
    if inputs.count(STDIN) > 1:
        raise UsageError("stdin (-) can be read only once")
    out: list[tuple[str, Plan | UsageError]] = []
    seen: dict[Path, str] = {}
    for arg in inputs:
        try:
            source = resolve_input(arg)
        except UsageError as e:
            out.append((arg, e))
            continue
        if beside and source == STDIN:
            out.append((arg, UsageError("stdin has no place to write beside: use -o FILE or -o DIR")))
            continue
        targets: list[tuple[Format, Path]] = []
        for fmt, ext in zip(fmts, exts, strict=True):
            if out_file is not None:
                targets.append((fmt, out_file))
            elif out_dir is not None:
                targets.append((fmt, out_dir / f"{stem(source)}.{ext}"))
            elif beside:
                targets.append((fmt, Path(source).with_name(f"{stem(source)}.{ext}")))
        targets = [(fmt, Path(os.path.abspath(t))) for fmt, t in targets]
        problem = next((UsageError(f"would write {t} like {seen[t]}") for _, t in targets if t in seen), None)
        if problem is None and source != STDIN and any(t == Path(source) for _, t in targets):
            problem = UsageError("the output would replace the input itself")
        if problem is not None:
            out.append((arg, problem))
            continue
        seen.update((t, arg) for _, t in targets)
        out.append((arg, Plan(source, arg, tuple(targets))))
    return out


def _kind(target: Path) -> str:
    """What ``target`` is: "missing", "file", "link" (a link to a regular file) or "stream" (a character
    device or FIFO, possibly behind a link: written in place); UsageError for anything not to write to."""
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return "missing"
    except OSError as e:
        raise UsageError(f"{target}: {e.strerror or e}") from None
    link = stat.S_ISLNK(st.st_mode)
    if link:
        try:
            st = os.stat(target)
        except OSError:
            raise UsageError(f"{target} is a symbolic link to {os.readlink(target)}, which does not exist: "
                             f"write to a real path, or remove the link") from None
    if stat.S_ISREG(st.st_mode):
        return "link" if link else "file"
    if stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode):
        return "stream"
    if stat.S_ISDIR(st.st_mode):
        raise UsageError(f"{target} is a directory")
    raise UsageError(f"{target} is not a regular file (a socket or a block device): refusing to write to it")


def check_free(target: Path, force: bool) -> None:
    """Refuse early (before any transcription work) when the target exists and --force is absent, or when its
    directory cannot be written (a file is made there and removed: permissions, a read-only mount, ACLs)."""
    import tempfile

    kind = _kind(target)
    if kind in ("file", "link") and not force:
        raise UsageError(f"{target} exists (use --force to overwrite)")
    if kind != "stream" and not target.parent.is_dir():
        raise UsageError(f"{target.parent}: no such directory")
    if kind in ("missing", "file"):
        try:
            fd, probe = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        except OSError as e:
            raise UsageError(f"cannot write {target.name} in {target.parent}: {e.strerror or e}") from None
        os.close(fd)
        os.unlink(probe)


def kept_dir() -> Path:
    """Where a transcript goes that could not be written where it was meant to (the tray's as well)."""
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "hasr" / "transcripts"


def create_new(paths: Sequence[Path], data: bytes) -> Path:
    """Write ``data`` to the first of ``paths`` that does not exist (O_EXCL: two writers racing for a name never
    clobber each other); FileExistsError when all do."""
    for path in paths:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        return path
    raise FileExistsError(f"{paths[0].parent}: {paths[0].name} and {len(paths) - 1} other names are taken")


def keep(target: Path, text: str) -> Path:
    """Keep a transcript whose target could not be written, under its name (NAME-1.ext, ... when taken) in
    kept_dir(); OSError when that fails too."""
    folder = kept_dir()
    folder.mkdir(parents=True, exist_ok=True)
    names = [folder / target.name] + [folder / f"{target.stem}-{i}{target.suffix}" for i in range(1, 1000)]
    return create_new(names, text.encode("utf-8"))


def write(target: Path, text: str | bytes, force: bool, streams: bool = True) -> None:
    """Write atomically; without ``force`` an existing file (even one created meanwhile) is left alone.

    Character devices and FIFOs are opened and written (``-o /dev/stdout``, ``-o >(cmd)``) unless ``streams``
    is False (batch: a FIFO left in OUTDIR would block the run for ever until someone reads it); a link to a
    regular file is written through with ``force`` (the link stays): neither is ever renamed over.
    """
    import tempfile

    data = text.encode("utf-8") if isinstance(text, str) else text
    kind = _kind(target)
    if kind == "stream" and not streams:
        what = "a FIFO" if stat.S_ISFIFO(os.stat(target).st_mode) else "a device"
        raise UsageError(f"{target} is {what}, not a regular file: remove it so the output can be written there")
    if kind == "link" and not force:
        raise UsageError(f"{target} exists (use --force to overwrite)")
    if kind in ("link", "stream"):
        # O_TRUNC: a file behind a link is replaced in place (as `>` does); devices and FIFOs ignore it.
        try:
            fd = os.open(target, os.O_WRONLY | os.O_TRUNC | os.O_NOCTTY | os.O_CLOEXEC)
        except OSError as e:
            raise UsageError(f"{target}: {e.strerror or e}") from None
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o666 & ~umask())
        if force:
            os.replace(tmp, target)
        else:
            try:
                os.link(tmp, target)
            except FileExistsError:
                raise UsageError(f"{target} exists (use --force to overwrite)") from None
            os.unlink(tmp)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def umask() -> int:
    """The process's umask (read by setting it, then put back): the mode a file made by hand would get."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def emit(text: str, stream: TextIO | None = None) -> None:
    """Write a transcript to stdout (only transcripts go there)."""
    out = stream or sys.stdout
    out.write(text if text.endswith("\n") or not text else text + "\n")
    out.flush()

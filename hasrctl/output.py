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
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from hasrctl.client import UsageError
from hasrd.formats import extension

STDIN = "-"
STDOUT = ("-", "/dev/stdout")  # -o values that mean stdout


@dataclass(frozen=True)
class Plan:
    """One input and where its transcript goes (None = stdout)."""

    source: str  # absolute path, or "-" for stdin
    name: str  # what the user typed, for messages
    target: Path | None


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


def plan(inputs: list[str], fmt: str, output: str | None, beside: bool) -> list[tuple[str, Plan | UsageError]]:
    """Map every input to its target; errors of one input do not stop the others."""
    if output and beside:
        raise UsageError("use either -o/--output or --beside, not both")
    ext = extension(fmt)
    out_dir: Path | None = None
    out_file: Path | None = None
    if output in STDOUT:
        output = None
    if output:
        p = Path(os.path.expanduser(output))
        if p.is_dir() or output.endswith(os.sep) or (len(inputs) > 1 and not p.exists() and not p.suffix):
            out_dir = p  # "-o subs/", or "-o subs" for several inputs: the directory is made when missing
            if not p.is_dir():
                try:
                    p.mkdir(parents=True, exist_ok=True)
                except OSError as e:
                    raise UsageError(f"-o {output}: cannot create the directory: {e.strerror or e}") from None
        elif len(inputs) > 1:
            raise UsageError(f"-o {output}: several inputs need a directory (end it with / to make one)")
        else:
            out_file = p
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
        target: Path | None = None
        if out_file is not None:
            target = out_file
        elif out_dir is not None:
            target = out_dir / f"{stem(source)}.{ext}"
        elif beside:
            if source == STDIN:
                out.append((arg, UsageError("stdin has no place to write beside: use -o FILE or -o DIR")))
                continue
            target = Path(source).with_name(f"{stem(source)}.{ext}")
        if target is not None:
            target = Path(os.path.abspath(target))
            if target in seen:
                out.append((arg, UsageError(f"would write {target} like {seen[target]}")))
                continue
            seen[target] = arg
            if source != STDIN and target == Path(source):
                out.append((arg, UsageError("the output would replace the input itself")))
                continue
        out.append((arg, Plan(source, arg, target)))
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
    """Refuse early (before any transcription work) when the target exists and --force is absent."""
    kind = _kind(target)
    if kind in ("file", "link") and not force:
        raise UsageError(f"{target} exists (use --force to overwrite)")
    if kind != "stream" and not target.parent.is_dir():
        raise UsageError(f"{target.parent}: no such directory")


def write(target: Path, text: str | bytes, force: bool) -> None:
    """Write atomically; without ``force`` an existing file (even one created meanwhile) is left alone.

    Character devices and FIFOs are opened and written; a link to a regular file is written through with
    ``force`` (the link stays): neither is ever renamed over.
    """
    import tempfile

    data = text.encode("utf-8") if isinstance(text, str) else text
    kind = _kind(target)
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
        os.chmod(tmp, 0o666 & ~_umask())
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


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def emit(text: str, stream: TextIO | None = None) -> None:
    """Write a transcript to stdout (only transcripts go there)."""
    out = stream or sys.stdout
    out.write(text if text.endswith("\n") or not text else text + "\n")
    out.flush()

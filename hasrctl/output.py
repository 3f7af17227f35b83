"""Where transcripts go (stdout, -o FILE, -o DIR, beside the input) and how they are written.

Output files are never overwritten without --force, and never half-written: the text goes to a temporary file
in the same directory that is then linked into place (link fails if the name exists, so there is no window in
which another writer's file could be clobbered) or, with --force, renamed over it.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from hasrctl.client import UsageError
from hasrd.formats import extension

STDIN = "-"


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
    if output:
        p = Path(os.path.expanduser(output))
        if p.is_dir() or output.endswith(os.sep):
            out_dir = p
            if not p.is_dir():
                raise UsageError(f"{output}: no such directory")
        elif len(inputs) > 1:
            raise UsageError(f"-o {output}: several inputs need a directory (it does not exist or is a file)")
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


def check_free(target: Path, force: bool) -> None:
    """Refuse early (before any transcription work) when the target exists and --force is absent."""
    if target.exists() and not force:
        raise UsageError(f"{target} exists (use --force to overwrite)")
    if not target.parent.is_dir():
        raise UsageError(f"{target.parent}: no such directory")


def write(target: Path, text: str, force: bool) -> None:
    """Write atomically; without ``force`` an existing file (even one created meanwhile) is left alone."""
    import tempfile

    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
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

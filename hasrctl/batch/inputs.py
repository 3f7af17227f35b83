"""What a batch transcribes and where each transcript goes.

INPUT is a file, a directory (walked recursively; a file in it counts when its first bytes are those of an
audio or video container, whatever its name), a glob (``'rec/**/*.m4a'``, expanded here so that a quoted
pattern works the same on every shell), ``@list.txt`` (one INPUT a line; blank lines and ``#`` comments are
skipped) or ``-`` (that list on standard input). A file named directly or by a glob is always taken: if it is
not audio, the run records it as failed with the decoder's reason, so nothing named is silently left out. A
file in a directory that is named like audio (``x.mp3``) but whose bytes are not is not sent to an actor: it gets
a ``skipped`` row with the reason, so a damaged recording does not vanish from the manifest.

Nothing that is not a regular file is ever opened: opening a FIFO for reading waits for a writer for ever, and
a device (/dev/zero) never ends. A walk leaves them out; one named (directly, by a glob or in a list) is taken
and recorded as failed, ``not_a_file`` (:func:`not_a_file` before any open, :func:`open_regular` to open).

Outputs mirror the inputs' tree under OUTDIR, relative to the deepest directory holding every input (a single
directory input is that directory itself). Two inputs of one directory with the same stem (``a.wav``,
``a.mp3``) keep their whole names (``a.wav.txt``, ``a.mp3.txt``), so names never collide.
"""

from __future__ import annotations

import glob
import os
import stat
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import BinaryIO, TextIO

from hasrctl.client import UsageError

# Leading bytes of the containers FFmpeg reads that hold speech: (offset, bytes).
_MAGIC: tuple[tuple[int, bytes], ...] = (
    (0, b"RIFF"), (0, b"RF64"), (0, b"BW64"), (0, b"riff\x2e\x91\xcf\x11"),  # WAV, AVI, Wave64
    (0, b"ID3"), (0, b"fLaC"), (0, b"OggS"), (0, b"caff"), (0, b"#!AMR"), (0, b".snd"), (0, b"wvpk"),
    (0, b"MAC "), (0, b"TTA1"), (0, b"FLV\x01"), (0, b".RMF"), (0, b"\x1a\x45\xdf\xa3"),  # ... Matroska/WebM
    (0, b"\x30\x26\xb2\x75\x8e\x66\xcf\x11"), (0, b"\x00\x00\x01\xba"), (0, b"DSD "), (0, b"FRM8"),  # ASF, MPEG-PS
    (4, b"ftyp"), (4, b"moov"), (4, b"mdat"), (4, b"wide"), (4, b"free"),  # MP4, M4A, MOV, 3GP
)
_AIFF = (b"AIFF", b"AIFC")
# Names of audio and video files: one of these in a directory whose bytes are not a container's is a damaged
# or mislabelled recording, which gets a ``skipped`` row; any other file that is not audio is left out silently.
MEDIA_SUFFIXES = frozenset({
    ".wav", ".wave", ".mp3", ".mp2", ".flac", ".m4a", ".m4b", ".aac", ".ogg", ".oga", ".opus", ".spx", ".wma",
    ".aif", ".aiff", ".aifc", ".amr", ".caf", ".au", ".snd", ".ac3", ".eac3", ".wv", ".ape", ".tta", ".mka",
    ".mp4", ".m4v", ".mov", ".mkv", ".webm", ".avi", ".wmv", ".asf", ".flv", ".3gp", ".3g2", ".mpg", ".mpeg",
    ".ts", ".mts", ".m2ts", ".vob", ".rm", ".rmvb", ".dsf", ".dff", ".w64", ".rf64"})
_IMAGE_BRANDS = (b"avif", b"avis", b"heic", b"heix", b"mif1", b"msf1", b"jxl ")  # ISO BMFF images


def looks_like_media(head: bytes) -> bool:
    """Whether a file's first bytes are an audio or video container's (pure; 16 bytes or more are enough)."""
    if head[:4] == b"FORM" and head[8:12] in _AIFF:
        return True
    if head[4:8] == b"ftyp" and head[8:12] in _IMAGE_BRANDS:
        return False
    if any(head[off:off + len(magic)] == magic for off, magic in _MAGIC):
        return True
    # an MPEG audio frame (MP3) or ADTS AAC, without a tag
    return (len(head) >= 2 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0
            and (head[1] & 0x06 != 0 or head[1] & 0xF6 == 0xF0))


def kind_of(st: os.stat_result) -> str | None:
    """What a file that is not a regular file is ("a named pipe (FIFO)", "a directory", ...); None for one that is."""
    mode = st.st_mode
    if stat.S_ISREG(mode):
        return None
    return ("a named pipe (FIFO)" if stat.S_ISFIFO(mode) else "a directory" if stat.S_ISDIR(mode)
            else "a character device" if stat.S_ISCHR(mode) else "a block device" if stat.S_ISBLK(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")


class NotAFile(OSError):
    """An input that is not a regular file: never opened (a FIFO would block the open, a device never ends)."""

    def __init__(self, path: str, kind: str) -> None:
        super().__init__(refusal(path, kind))
        self.path, self.kind = path, kind


def refusal(path: str, kind: str) -> str:
    """The message of a ``not_a_file`` row."""
    return f"{path} is {kind}, not a file: it was never opened"


def not_a_file(path: str) -> str | None:
    """What ``path`` is when it is not a regular file, by ``os.stat`` alone (no open); None for a regular file and
    for one that cannot be stat'ed (reading it says why)."""
    try:
        return kind_of(os.stat(path))
    except OSError:
        return None


def open_regular(path: str) -> BinaryIO:
    """``path`` opened for reading, only if it is a regular file (NotAFile otherwise): checked before the open,
    and again on what was opened (without blocking: O_NONBLOCK), should it have been swapped for a FIFO meanwhile."""
    kind = kind_of(os.stat(path))
    if kind:
        raise NotAFile(path, kind)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK)
    try:
        kind = kind_of(os.fstat(fd))
        if kind:
            raise NotAFile(path, kind)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _is_media(path: str) -> bool:
    try:
        with open_regular(path) as f:
            head = f.read(377)
    except NotAFile:
        return False  # became a FIFO or a device since the walk looked: left out, as the walk leaves them
    except OSError:
        return True  # unreadable: taken, so that the run records why it failed instead of hiding it
    if len(head) == 377 and head[0] == head[188] == head[376] == 0x47:
        return True  # MPEG-TS: a sync byte every 188 bytes
    return looks_like_media(head)


@dataclass
class Found:
    """The inputs of a run, in order, each once; what directories held that was not audio; and the roots."""

    files: list[str] = field(default_factory=list)
    exclude: str = ""  # a directory never walked (OUTDIR, when it lies inside an input directory)
    skipped: int = 0  # files in directories that are not audio or video, and not named so either
    suspects: list[str] = field(default_factory=list)  # files in directories named like audio that are not
    roots: list[str] = field(default_factory=list)  # each input's own directory (the mirror's base)


def _walk(top: str, found: Found) -> None:
    for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".")
                             and os.path.realpath(os.path.join(dirpath, d)) != found.exclude)
        for name in sorted(filenames):
            if name.startswith("."):
                continue
            path = os.path.join(dirpath, name)
            try:
                if not stat.S_ISREG(os.stat(path).st_mode):
                    continue
            except OSError:
                continue  # a dangling link
            if _is_media(path):
                found.files.append(path)
            elif named_like_media(path):
                found.suspects.append(path)
            else:
                found.skipped += 1


def media_in(top: str) -> list[str]:
    """The audio and video files under directory ``top``, by content, and those named like it (they fail with
    their reason, never vanish): what the tray transcribes of a dropped folder, in path order."""
    found = Found()
    _walk(top, found)
    return sorted(found.files + found.suspects)


def named_like_media(path: str) -> bool:
    """Whether a file's name says audio or video (``x.mp3``), whatever its bytes."""
    return os.path.splitext(path)[1].lower() in MEDIA_SUFFIXES


def not_media_message(path: str) -> str:
    """The reason of a ``skipped`` row: a file named like audio whose bytes are not."""
    return (f"{os.path.basename(path)} is named like audio or video but its first bytes are no audio or video "
            f"container's (a damaged or mislabelled file?): not transcribed; name it as an input to have the "
            f"decoder try it")


def _add(arg: str, found: Found, missing: list[str]) -> None:
    path = os.path.abspath(os.path.expanduser(arg))
    if os.path.isdir(path):
        found.roots.append(path)
        _walk(path, found)
    elif os.path.exists(path):
        found.roots.append(os.path.dirname(path))
        found.files.append(path)
    elif glob.has_magic(arg):
        hits = sorted(glob.glob(os.path.expanduser(arg), recursive=True))
        if not hits:
            missing.append(f"{arg} (the pattern matches nothing)")
        for hit in hits:
            _add(hit, found, missing)
    else:
        missing.append(f"{arg} (no such file or directory)")


def read_list(stream: TextIO, name: str) -> list[str]:
    """INPUTs of a list: one a line, blank lines and # comments skipped."""
    out = []
    for line in stream:
        line = line.strip()
        if line and not line.startswith("#"):
            out.append(line)
    if not out:
        raise UsageError(f"{name} lists no input")
    return out


def _list_file(arg: str) -> list[str]:
    """The INPUTs of ``@FILE``: a regular file, or a pipe (``@<(find ...)``, a FIFO something writes the list
    into: reading it waits for the writer, as ``-`` waits for standard input); a device, a socket or a directory
    is bad usage, never read."""
    path = os.path.expanduser(arg[1:])
    try:
        kind = kind_of(os.stat(path))
        if kind and kind != "a named pipe (FIFO)":
            raise UsageError(f"{arg}: {path} is {kind}, not a list of inputs")
        with open(path, encoding="utf-8") as f:
            return read_list(f, arg)
    except OSError as e:
        raise UsageError(f"{arg}: cannot read the list: {e.strerror or e}") from None


def expand(args: Iterable[str], stdin: TextIO | None = None, exclude: str = "") -> Found:
    """Every INPUT expanded; UsageError (exit 2, before anything runs) naming each input that is missing.
    ``exclude``: a directory not walked (OUTDIR inside an input directory holds our own outputs)."""
    found = Found(exclude=os.path.realpath(exclude) if exclude else "")
    missing: list[str] = []
    items: list[str] = []
    for arg in args:
        if arg == "-":
            items += read_list(stdin or sys.stdin, "standard input")
        elif arg.startswith("@"):
            items += _list_file(arg)
        else:
            items.append(arg)
    for item in items:
        _add(item, found, missing)
    if missing:
        raise UsageError("not found: " + "; ".join(missing))
    seen: set[str] = set()
    unique = []
    for path in found.files:
        key = os.path.realpath(path)
        if key not in seen:
            seen.add(key)
            unique.append(path)
    found.files = unique
    found.suspects = [p for p in dict.fromkeys(found.suspects) if os.path.realpath(p) not in seen]
    if not found.files and not found.suspects:
        raise UsageError("no audio or video files among the inputs"
                         + (f" ({found.skipped} other file(s) skipped)" if found.skipped else ""))
    return found


def mirror_root(found: Found) -> str:
    """The directory the output tree mirrors: the deepest one that holds every input."""
    return os.path.commonpath(found.roots) if found.roots else os.sep


def output_names(files: list[str], root: str) -> dict[str, str]:
    """Each input's output path without extension, relative to OUTDIR: its path under ``root`` with the stem,
    or with its whole name when another input of the same directory has the same stem."""
    rel = {f: os.path.relpath(f, root) for f in files}
    by_stem: dict[str, list[str]] = {}
    for f, r in rel.items():
        stem = os.path.splitext(r)[0] if os.path.splitext(os.path.basename(r))[0] else r
        by_stem.setdefault(stem, []).append(f)
    out: dict[str, str] = {}
    for stem, group in by_stem.items():
        for f in group:
            out[f] = stem if len(group) == 1 else rel[f]
    return out


def declared_seconds(path: str) -> float:
    """The audio's length as its container declares it (headers only; 0 when it says nothing or fails to
    open): for the ETA and for sending the longest files first. What is not a regular file is not opened."""
    if not_a_file(path):
        return 0.0
    try:
        import av

        with av.open(path, metadata_errors="ignore") as c:
            if not c.streams.audio:
                return 0.0
            stream = c.streams.audio[0]
            if stream.duration and stream.time_base:
                return float(stream.duration * stream.time_base)
            return float(c.duration / av.time_base) if c.duration else 0.0
    except Exception:  # noqa: BLE001 - a broken file is the run's to report, not the scan's
        return 0.0

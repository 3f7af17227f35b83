"""Where a transcript goes and what it contains: next to the audio file, never overwriting anything.

``会议 录音.wav`` with format ``srt`` becomes ``会议 录音.srt``; when that exists, ``会议 录音-1.srt``,
``会议 录音-2.srt``, ... The file is created with O_EXCL, so two jobs racing for a name cannot clobber each
other. When the audio's folder is not writable, the transcript goes to ``$XDG_DATA_HOME/hasr/transcripts``.
"""

from __future__ import annotations

from pathlib import Path

from hasrctl.output import create_new, kept_dir
from hasrd import formats
from hasrd.formats import Format
from hasrd.transcript import Transcript

# tray format -> hasrd's format (its extension the tray format's name). "json" is the full verbose_json document.
FORMATS = {"txt": Format.TEXT, "srt": Format.SRT, "vtt": Format.VTT, "json": Format.VERBOSE_JSON}
MAX_TRIES = 1000


class OutputError(Exception):
    """The transcript could not be written anywhere; the message says where it tried."""


def check_format(fmt: str) -> str:
    """The canonical tray format name (txt, srt, vtt, json) or ValueError listing them."""
    name = (fmt or "").strip().lower().lstrip(".")
    if name == "text":
        name = "txt"
    if name not in FORMATS:
        raise ValueError(f"unknown transcript format {fmt!r}: use one of {', '.join(FORMATS)}")
    return name


def render(result: Transcript, fmt: str) -> str:
    """The result rendered as tray format ``fmt``: a .txt holds one sentence a line."""
    name = FORMATS[check_format(fmt)]
    return formats.lines(result) if name == Format.TEXT else formats.render(result, name)


def candidates(src: Path, fmt: str, folder: Path | None = None) -> list[Path]:
    """Output names in order of preference: ``stem.ext``, ``stem-1.ext``, ``stem-2.ext``, ..."""
    ext = FORMATS[check_format(fmt)].extension
    where = folder if folder is not None else src.parent
    stem = src.stem if src.suffix else src.name
    return [where / f"{stem}.{ext}"] + [where / f"{stem}-{i}.{ext}" for i in range(1, MAX_TRIES)]


def write_next_to(src: Path, text: str, fmt: str) -> Path:
    """Write ``text`` under a fresh name next to ``src`` (or in hasrctl's kept_dir()); return the path written."""
    data = text.encode("utf-8")
    try:
        return create_new([p for p in candidates(src, fmt) if p != src], data)
    except PermissionError as first:
        folder = kept_dir()
        try:
            folder.mkdir(parents=True, exist_ok=True)
            return create_new([p for p in candidates(src, fmt, folder) if p != src], data)
        except OSError as e:
            raise OutputError(f"cannot write next to {src} ({first.strerror}) nor in {folder} ({e})") from e
    except OSError as e:
        raise OutputError(f"cannot write the transcript of {src.name}: {e.strerror or e}") from e

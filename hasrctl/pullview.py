"""What a pull or a model's import shows on stderr: /api/pull's NDJSON lines (and a copy's progress) as
:class:`PullEvent`, drawn by :class:`PullView` (``hasrctl pull NAME`` in pool.py, ``hasrctl pull PATH`` in
modelimport.py: both import this, neither the other)."""

from __future__ import annotations

import time
from typing import Any

import msgspec

from hasrctl import terminal
from hasrctl.common import say
from hasrctl.transcribe import ErrorBody


class PullEvent(msgspec.Struct, kw_only=True):
    """One line of /api/pull's NDJSON (hasrd/download.py), or a copy's progress (modelimport): a status, or an
    error."""

    status: str = ""
    error: ErrorBody | str | None = None
    model: str | None = None
    repo: str | None = None
    revision: str | None = None
    files: list[Any] = []
    file: str | None = None
    completed: int = 0
    total: int = 0
    size_mb: int | None = None
    path: str | None = None
    kind: str | None = None  # "speaker": a speaker model's pull (hasrd/speakerpull.py)
    license: str | None = None  # a speaker model's, named in its last line


class PullView:
    """A pull as a person sees it on stderr: on a terminal one redrawn bar per file (kept when the file is done),
    else one plain line per file and step."""

    def __init__(self, stream: Any, tty: bool, verb: str = "downloading") -> None:
        self.stream, self.tty, self.verb = stream, tty, verb  # verb: "copying" for an import (hasrctl pull PATH)
        self.file: str | None = None
        self.t0 = 0.0
        self.start = 0
        self.last = 0.0
        self.drawn = False
        self.pending = False  # "pulling manifest of NAME..." is on the line

    def begin(self, name: str) -> None:
        """On a terminal, say something while the daemon reads the manifest (the answer starts after it)."""
        if self.tty:
            self._out(f"pulling manifest of {name}...")
            self.pending = True

    def clear_pending(self) -> None:
        if self.pending:
            self._out("\r" + terminal.CLEAR_EOL)
            self.pending = False

    def _out(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()

    def _end_line(self) -> None:
        if self.drawn:
            self._out("\n")
            self.drawn = False

    def note(self, text: str) -> None:
        if self.tty:
            self._end_line()
            self._out(text + "\n")
        else:
            say(text)

    def event(self, ev: PullEvent) -> None:
        status = ev.status
        if status == "pulling manifest":
            self.clear_pending()
            self.note(f"pulling {ev.repo} (revision {(ev.revision or '')[:12]}): {len(ev.files)} files, "
                      f"{_bytes(ev.total)}")
        elif status == "downloading":
            self._progress(str(ev.file), ev.completed, ev.total)
        elif status:
            self.note(status)

    def _progress(self, name: str, done: int, total: int) -> None:
        now = time.monotonic()
        if name != self.file:
            self._end_line()
            self.file, self.t0, self.start, self.last = name, now, done, 0.0
            if done >= total:
                self.note(f"{name}: {_bytes(total)}, already downloaded")
                return
            if not self.tty:
                say(f"{self.verb} {name} ({_bytes(total)}" + (f", resuming at {_bytes(done)})" if done else ")"))
            elif done:
                self.note(f"{name}: resuming at {_bytes(done)}")
        if not self.tty or (now - self.last < 0.1 and done < total):
            return
        self.last = now
        frac = min(1.0, done / total) if total else 1.0
        rate = (done - self.start) / max(1e-3, now - self.t0)
        bar = "#" * int(frac * 20) + "-" * (20 - int(frac * 20))
        head, sizes = f"{name} {int(frac * 100):3d}%", f"{_bytes(done)}/{_bytes(total)}"
        speed = f"  {_bytes(rate)}/s" if done > self.start else ""
        cols = terminal.columns(self.stream) - 1
        text = next((t for t in (f"{head} [{bar}] {sizes}{speed}", f"{head} [{bar}] {sizes}", f"{head} {sizes}")
                     if terminal.width(t) <= cols), head)  # narrow: the name and the share come first
        self._out("\r" + terminal.tail_to_fit(text, cols) + terminal.CLEAR_EOL)
        self.drawn = True
        if done >= total:
            self._end_line()

    def close(self) -> None:
        if self.tty and self.drawn:
            self._end_line()


def _bytes(n: float) -> str:
    """A size as the model listings show it: MB = 2**20 bytes (hasrd.models.MB), GB = 2**30."""
    for unit, size in (("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"

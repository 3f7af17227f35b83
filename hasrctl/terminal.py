"""What a person sees while a file is transcribed: the views' interface, the progress line, and the terminal's
measures they share (widths in columns: CJK characters are two wide; the status texts).

Views only ever draw on a terminal. The progress line lives on stderr and is erased when the file is done. The
live draft (--stream) is hasrctl/liveview.py; it carries the same status texts on its own row. One view draws
at a time, so that no second writer moves the cursor under another.
"""

from __future__ import annotations

import os
import threading
import time
import unicodedata
from typing import TextIO

CLEAR_EOL = "\x1b[K"


def width(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 0 if unicodedata.combining(c) else 1
               for c in text)


def columns(stream: TextIO) -> int:
    try:
        return max(20, os.get_terminal_size(stream.fileno()).columns)
    except (OSError, ValueError, AttributeError):
        return 80


def no_color() -> bool:
    """https://no-color.org: NO_COLOR set to anything but "" turns colour and dimming off."""
    return bool(os.environ.get("NO_COLOR"))


def is_tty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (ValueError, AttributeError):
        return False


def tail_to_fit(text: str, cols: int) -> str:
    """The end of ``text`` that fits in ``cols`` columns, with an ellipsis when cut."""
    if width(text) <= cols:
        return text
    out, used = "", 1
    for ch in reversed(text):
        w = width(ch)
        if used + w > cols:
            break
        out, used = ch + out, used + w
    return "…" + out


PHASE_WORDS = {"finding_speech": "finding speech", "detecting_language": "detecting language",
               "finding_speakers": "telling the speakers apart"}


def bar_text(done: float, total: float, phase: str = "decoding") -> str:
    """``transcribing  45% [#########-----------] 14.0/31.0 s audio``; before the first words, what runs
    (``finding speech``, ``detecting language``) instead of ``transcribing``."""
    frac = min(1.0, done / total) if total > 0 else 0.0
    n = 20
    bar = "#" * int(frac * n) + "-" * (n - int(frac * n))
    return f"{PHASE_WORDS.get(phase, 'transcribing')} {frac * 100:3.0f}% [{bar}] {done:.1f}/{total:.1f} s audio"


def loading_text(phase: str, elapsed: float) -> str:
    return f"loading: {phase} ({elapsed:.0f} s)"


def queued_text(position: int) -> str:
    return f"queued ({position} ahead)"


def printable(text: str, keep: str = "") -> str:
    """``text`` with control characters (newlines, tabs, escapes) as spaces, but those in ``keep``: the view
    counts every column it draws, and a character that moves the cursor by itself would put the screen out of
    step with the count (a newline it counts)."""
    return "".join(" " if unicodedata.category(c) == "Cc" and c not in keep else c for c in text)


class View:
    """The silent view (not a terminal, or --quiet)."""

    def queued(self, position: int) -> None: ...
    def loading(self, phase: str, elapsed: float | None) -> None: ...
    def progress(self, done: float, total: float, phase: str = "decoding") -> None: ...
    def draft(self, text: str, segment: int | None = None) -> None: ...
    def sentence(self, index: int, text: str) -> None: ...
    def finish(self, final: str | None, sentences: list[str] | None = None) -> None: ...
    def abort(self) -> None:
        """The request failed: leave the terminal clean for the error line."""


class ProgressBar(View):
    """``name [#####-----] 3.2/10.0 s audio`` or ``name loading: phase (12 s)`` on one redrawn stderr line.

    While the models load, the daemon may stay silent for a minute: a ticker thread keeps the seconds moving.
    """

    def __init__(self, stream: TextIO, name: str) -> None:
        self.stream, self.name = stream, name
        self.shown = False
        self.last = 0.0
        self.lock = threading.Lock()
        self.phase: str | None = None
        self.phase_t0 = 0.0
        self.ticker: threading.Thread | None = None
        self.closed = False
        self.drawn_frac = 0.0
        self.work = "decoding"  # the worker's phase (protocol.Phase)

    def _draw(self, text: str, force: bool = False) -> None:
        with self.lock:
            now = time.monotonic()
            if self.closed or (not force and now - self.last < 0.05):
                return
            self.last = now
            line = tail_to_fit(f"{self.name} {text}", columns(self.stream) - 1)
            self.stream.write("\r" + line + CLEAR_EOL)
            self.stream.flush()
            self.shown = True

    def _tick(self) -> None:
        while True:
            time.sleep(0.5)
            phase = self.phase
            if phase is None:
                return
            self._draw(loading_text(phase, time.monotonic() - self.phase_t0), force=True)

    def queued(self, position: int) -> None:
        self._draw(queued_text(position), force=True)

    def loading(self, phase: str, elapsed: float | None) -> None:
        self.phase = phase or "models"
        self.phase_t0 = time.monotonic() - (elapsed or 0.0)
        self._draw(loading_text(self.phase, elapsed or 0.0), force=True)
        if self.ticker is None:
            self.ticker = threading.Thread(target=self._tick, daemon=True)
            self.ticker.start()

    def progress(self, done: float, total: float, phase: str = "decoding") -> None:
        first = self.phase is not None or not self.shown  # the model is ready: say so at once
        self.phase = None
        frac = min(1.0, done / total) if total > 0 else 0.0
        step = frac - self.drawn_frac >= 0.01  # a batch's segments arrive in a burst: never drop its end
        turned = phase != self.work  # a new phase is said at once
        self.work = phase
        self._draw(bar_text(done, total, phase), force=first or step or turned or frac >= 1.0)
        self.drawn_frac = frac

    def draft(self, text: str, segment: int | None = None) -> None:
        self.phase = None

    def finish(self, final: str | None, sentences: list[str] | None = None) -> None:
        self.phase = None
        with self.lock:
            if self.shown:
                self.stream.write("\r" + CLEAR_EOL)
                self.stream.flush()
                self.shown = False
            self.closed = True  # a late tick draws nothing

    def abort(self) -> None:
        self.finish(None)

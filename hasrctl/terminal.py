"""What a person sees while a file is transcribed: a progress line, or the live draft (--stream).

Both only ever draw on a terminal. The progress line lives on stderr and is erased when the file is done. The
live view prints final sentences for good and shows the not-yet-final draft after them, dimmed, redrawing only
that tail (CJK characters are two columns wide, so widths are counted, not characters).
"""

from __future__ import annotations

import os
import threading
import time
import unicodedata
from typing import TextIO

SENT_END = "。！？；?!;"
DIM, RESET, CLEAR_EOL, CLEAR_EOS = "\x1b[2m", "\x1b[0m", "\x1b[K", "\x1b[J"


def width(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 0 if unicodedata.combining(c) else 1
               for c in text)


def columns(stream: TextIO) -> int:
    try:
        return max(20, os.get_terminal_size(stream.fileno()).columns)
    except (OSError, ValueError, AttributeError):
        return 80


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


class View:
    """The silent view (not a terminal, or --quiet)."""

    def queued(self, position: int) -> None: ...
    def loading(self, phase: str, elapsed: float | None) -> None: ...
    def progress(self, done: float, total: float) -> None: ...
    def draft(self, text: str) -> None: ...
    def sentence(self, index: int, text: str) -> None: ...
    def finish(self, final: str | None) -> None: ...
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
            self._draw(f"loading: {phase} ({time.monotonic() - self.phase_t0:.0f} s)", force=True)

    def queued(self, position: int) -> None:
        self._draw(f"queued ({position} ahead)", force=True)

    def loading(self, phase: str, elapsed: float | None) -> None:
        self.phase = phase or "models"
        self.phase_t0 = time.monotonic() - (elapsed or 0.0)
        self._draw(f"loading: {self.phase} ({elapsed or 0.0:.0f} s)", force=True)
        if self.ticker is None:
            self.ticker = threading.Thread(target=self._tick, daemon=True)
            self.ticker.start()

    def progress(self, done: float, total: float) -> None:
        self.phase = None
        frac = min(1.0, done / total) if total > 0 else 0.0
        n = 20
        bar = "#" * int(frac * n) + "-" * (n - int(frac * n))
        self._draw(f"[{bar}] {done:.1f}/{total:.1f} s audio", force=frac >= 1.0)

    def draft(self, text: str) -> None:
        self.phase = None

    def finish(self, final: str | None) -> None:
        self.phase = None
        with self.lock:
            if self.shown:
                self.stream.write("\r" + CLEAR_EOL)
                self.stream.flush()
                self.shown = False
            self.closed = True  # a late tick draws nothing

    def abort(self) -> None:
        self.finish(None)


def split_sentences(text: str) -> list[str]:
    out, cur = [], ""
    for ch in text:
        cur += ch
        if ch in SENT_END:
            out.append(cur)
            cur = ""
    return out + [cur] if cur else out


class LiveView(View):
    """Final sentences printed for good, the draft beyond them redrawn in place after them."""

    MAX_ROWS = 3

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.final: list[str] = []
        self.col = 0  # cursor column after the permanent text
        self.rows = 0  # extra rows the drawn tail occupies below the cursor's row
        self.tail = ""
        self.draft_text = ""

    def _erase(self) -> None:
        if not self.tail:
            return
        seq = "\r" + (f"\x1b[{self.rows}A" if self.rows else "") + (f"\x1b[{self.col}C" if self.col else "")
        self.stream.write(seq + CLEAR_EOS)
        self.tail, self.rows = "", 0

    def _advance(self, text: str, cols: int) -> None:
        if "\n" in text:
            self.col, text = 0, text.rsplit("\n", 1)[1]
        self.col = (self.col + width(text)) % cols

    def _redraw(self) -> None:
        cols = columns(self.stream)
        pending = split_sentences(self.draft_text)[len(self.final):]
        tail = "".join(pending).replace("|", "")
        room = cols * self.MAX_ROWS - self.col - 1
        tail = tail_to_fit(tail, room) if tail else ""
        self._erase()
        if tail:
            self.stream.write(DIM + tail + RESET)
            self.tail = tail
            self.rows = (self.col + width(tail) - 1) // cols  # a full last row leaves the cursor on it
        self.stream.flush()

    def draft(self, text: str) -> None:
        self.draft_text = text
        self._redraw()

    def sentence(self, index: int, text: str) -> None:
        self._erase()
        self.final.append(text)
        self.stream.write(text)
        self._advance(text, columns(self.stream))
        self._redraw()

    def finish(self, final: str | None) -> None:
        """Leave exactly the final text on screen (sentences missed by the stream are filled in)."""
        self._erase()
        shown = "".join(self.final)
        if final is not None and final.startswith(shown):
            self.stream.write(final[len(shown):])
        elif final is not None and final != shown:
            self.stream.write("\n" + final)
        self.stream.write("\n")
        self.stream.flush()

    def abort(self) -> None:
        self._erase()
        if self.final:
            self.stream.write("\n")
        self.stream.flush()

"""What ``hasrctl listen --meeting`` shows while it records: each side's final sentences as they are settled, a line
each, ``Name: text``, as the saved .txt writes speaker turns; on a terminal, one row below them, dimmed and redrawn
in place, with what each side is saying now (its draft) or the daemon's state (loading, queued).

Two sessions' reader threads call in at once: every draw holds one lock. The draft row is one terminal row at
most (each side's draft cut from the left to its share of the width), so going back over it is a carriage return
and an erase, never cursor arithmetic over wrapped rows (hasrctl/liveview.py's job for a single side).
"""

from __future__ import annotations

import contextlib
import threading
from typing import TextIO

from hasrctl.terminal import CLEAR_EOL, columns, no_color, printable, queued_text, tail_to_fit, width

DIM, RESET = "\x1b[2m", "\x1b[0m"


class MeetingView:
    """Final sentences of both sides on ``stream``; the draft row only where ``live`` (a terminal)."""

    def __init__(self, stream: TextIO, live: bool) -> None:
        self.stream = stream
        self.live = live
        self.drafts: dict[str, str] = {}  # side -> what it is saying now, in the order sides began to
        self.state = ""  # loading / queued, shown while no side has a draft
        self.shown = False  # the row holds something
        self.closed = False
        self.lock = threading.RLock()

    def _row(self) -> str:
        parts = [(name, text) for name, text in self.drafts.items() if text]
        cols = columns(self.stream) - 1
        if not parts:
            return tail_to_fit(self.state, cols)
        share = cols // len(parts) - 3  # " · " between parts
        return " · ".join(f"{name}: " + tail_to_fit(text, max(1, share - width(name) - 2)) for name, text in parts)

    def _redraw(self) -> None:
        if not self.live or self.closed:
            return
        row = self._row()
        out = "\r" + CLEAR_EOL if self.shown else ""
        if row:
            out += row if no_color() else DIM + row + RESET
        self.shown = bool(row)
        self.stream.write(out)
        self.stream.flush()

    def sentence(self, name: str, text: str) -> None:
        """A final sentence of side ``name``: a line for good; that side's draft goes (its next one follows)."""
        text = printable(text).strip()
        with self.lock:
            if not text or self.closed:
                return
            if self.shown:
                self.stream.write("\r" + CLEAR_EOL)
                self.shown = False
            self.stream.write(f"{name}: {text}\n")
            self.drafts.pop(name, None)
            self._redraw()
            self.stream.flush()

    def draft(self, name: str, text: str) -> None:
        with self.lock:
            self.drafts[name] = printable(text).replace("|", "").strip()
            self.state = ""
            self._redraw()

    def done(self, name: str) -> None:
        """Side ``name``'s utterance is complete: its draft is stale."""
        with self.lock:
            self.drafts.pop(name, None)
            self._redraw()

    def loading(self, phase: str) -> None:
        with self.lock:  # no seconds: both sessions report the phase, each with its own
            self.state = f"loading: {phase or 'models'}"
            self._redraw()

    def queued(self, position: int) -> None:
        with self.lock:
            self.state = queued_text(position)
            self._redraw()

    def finish(self) -> None:
        """Leave only the final lines: the row goes. Quietly where nobody reads any more (``| head``): the
        transcript is still to be saved."""
        with self.lock, contextlib.suppress(BrokenPipeError):
            if self.shown and not self.closed:
                self.stream.write("\r" + CLEAR_EOL)
            self.closed, self.shown = True, False
            self.stream.flush()

"""A batch's progress on stderr: files done / total, hours of audio, the real-time factor and an ETA.

On a terminal one line is redrawn (at most four times a second) and failures are printed above it; otherwise
every finished file is a plain line, for logs. The ETA divides the audio still to do (the containers' own
durations, read when the inputs were scanned) by the audio done per second of this run so far.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO


def clock_text(seconds: float) -> str:
    s = max(0, int(seconds + 0.5))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def hours(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h" if seconds >= 3600 else f"{seconds / 60:.1f} min"


class Progress:
    def __init__(self, stream: TextIO, total: int, estimates: dict[str, float], tty: bool, quiet: bool = False,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stream, self.total, self.tty, self.quiet, self.clock = stream, total, tty and not quiet, quiet, clock
        self.estimates = estimates  # path -> seconds of audio the container declares (0 when unknown)
        self.left_s = sum(estimates.values())
        self.done = self.failed = 0
        self.audio_s = 0.0
        self.t0 = clock()
        self._drawn = 0.0
        self._shown = False

    def line(self) -> str:
        wall = max(self.clock() - self.t0, 1e-9)
        text = f"batch: {self.done}/{self.total} files, {hours(self.audio_s)} of audio"
        if self.failed:
            text += f", {self.failed} failed"
        if self.audio_s > 0:
            rate = self.audio_s / wall
            text += f", {rate:.1f}x real time"
            if self.done < self.total:
                text += f", ETA {clock_text(self.left_s / rate)}"
        return text

    def file(self, key: str, name: str, ok: bool, detail: str, duration_s: float) -> None:
        """One input finished (ok or failed): ``key`` as in ``estimates``, ``name`` as shown."""
        self.done += 1
        self.failed += not ok
        self.audio_s += duration_s
        self.left_s = max(0.0, self.left_s - self.estimates.get(key, 0.0))
        if self.tty:
            if not ok:
                self._clear()
                self.stream.write(f"hasrctl: {name}: failed: {detail}\n")
            self.draw(force=not ok)
        elif not ok or not self.quiet:
            state = "ok" if ok else "failed"
            self.stream.write(f"[{self.done}/{self.total}] {name}: {state}, {detail}\n")
            self.stream.flush()

    def draw(self, force: bool = False) -> None:
        """Redraw the line on a terminal (throttled); nothing otherwise."""
        now = self.clock()
        if not self.tty or (not force and now - self._drawn < 0.25):
            return
        self._drawn = now
        self.stream.write("\r\x1b[K" + self.line())
        self.stream.flush()
        self._shown = True

    def _clear(self) -> None:
        if self._shown:
            self.stream.write("\r\x1b[K")
            self._shown = False

    def finish(self) -> None:
        """The last state, on a line of its own."""
        self._clear()
        self.stream.write(self.line() + "\n")
        self.stream.flush()

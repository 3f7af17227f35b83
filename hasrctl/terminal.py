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


class View:
    """The silent view (not a terminal, or --quiet)."""

    def queued(self, position: int) -> None: ...
    def loading(self, phase: str, elapsed: float | None) -> None: ...
    def progress(self, done: float, total: float) -> None: ...
    def draft(self, text: str, segment: int | None = None) -> None: ...
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
        self.drawn_frac = 0.0

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
        first = self.phase is not None or not self.shown  # the model is ready: say so at once
        self.phase = None
        frac = min(1.0, done / total) if total > 0 else 0.0
        n = 20
        bar = "#" * int(frac * n) + "-" * (n - int(frac * n))
        step = frac - self.drawn_frac >= 0.01  # a batch's segments arrive in a burst: never drop its end
        self._draw(f"transcribing {frac * 100:3.0f}% [{bar}] {done:.1f}/{total:.1f} s audio",
                   force=first or step or frac >= 1.0)
        self.drawn_frac = frac

    def draft(self, text: str, segment: int | None = None) -> None:
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


def spaceless(ch: str) -> bool:
    """Whether ``ch`` belongs to a script written without spaces between sentences (hasrd.languages
    NO_SPACE: Chinese, Japanese, Thai, Lao, Khmer, Burmese, Tibetan; Korean, also wide, uses spaces)."""
    o = ord(ch)
    if 0xAC00 <= o <= 0xD7A3 or 0x1100 <= o <= 0x11FF or 0x3130 <= o <= 0x318F:  # Hangul
        return False
    return (unicodedata.east_asian_width(ch) in "WF" or 0x0E00 <= o <= 0x0FFF or 0x1000 <= o <= 0x109F
            or 0x1780 <= o <= 0x17FF)


def language_joiner(language: str | None) -> str | None:
    """The separator the daemon puts between sentences of ``language``; None when that is not known."""
    if not language:
        return None
    from hasrd.languages import UnknownLanguage, joiner, resolve

    try:
        _name, code = resolve(language)
    except UnknownLanguage:
        return None
    return joiner(code) if code else None


def advance(pos: tuple[int, int], text: str, cols: int) -> tuple[int, int]:
    """(row, column) of the cursor after ``text`` is written at ``pos`` on a terminal ``cols`` wide.

    A column of ``cols`` means the row is full and the cursor waits on its last cell (the terminal wraps only
    when the next character comes); a wide character that does not fit in the row wraps early.
    """
    row, col = pos
    for ch in text:
        if ch == "\n":
            row, col = row + 1, 0
            continue
        w = width(ch)
        if w == 0:
            continue
        if col + w > cols:
            row, col = row + 1, 0
        col += w
    return row, col


def position(text: str, cols: int) -> tuple[int, int]:
    return advance((0, 0), text, cols)


def common(a: str, b: str) -> int:
    """The length of the longest common prefix."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def lines(stream: TextIO) -> int:
    try:
        return max(2, os.get_terminal_size(stream.fileno()).lines)
    except (OSError, ValueError, AttributeError):
        return 24


class LiveView(View):
    """Final sentences printed for good, the draft beyond them redrawn in place after them (dimmed).

    The view remembers what it drew since it started (at column 0) and redraws from the first character that
    differs, so a growing draft costs only its new characters, and at the end the screen holds exactly the
    final text, also where that differs from what was streamed: the region is rewritten, never appended to.

    Sentences are joined as the daemon joins the final text: nothing between Chinese (and other spaceless)
    sentences, a space otherwise. A draft event carries the draft of the current segment only (long audio is
    drafted in segments of at most HASR_MAX_SEGMENT_SEC), and within a segment every draft is longer than the
    one before. The daemon labels each draft with its segment; from a daemon that does not, a draft that is not
    longer, or does not extend the previous one, is taken to start a new segment. The sentences already final
    are counted from the segment's start.
    """

    MAX_ROWS = 3
    SLACK = 12  # characters at the end of a draft that the next one may revise (R2T2 keeps a token unfixed)

    def __init__(self, stream: TextIO, language: str | None = None) -> None:
        self.stream = stream
        self.sep = language_joiner(language)
        self.final: list[str] = []  # the final sentences so far
        self.text = ""  # the final sentences, joined: the permanent text
        self.draft_text = ""  # the current segment's draft
        self.base = 0  # len(self.final) when the current segment's draft began
        self.segment = 0  # the segment the current draft belongs to
        # What is on screen: permanent text, dimmed tail, and the cursor position after the permanent text.
        self.drawn_text, self.drawn_tail, self.drawn_pos = "", "", (0, 0)

    def _sep(self, head: str, tail: str) -> str:
        if not head or not tail:
            return ""
        if self.sep is not None:
            return self.sep
        return "" if spaceless(head[-1]) or spaceless(tail[0]) else " "

    def _draw(self, text: str, tail: str = "") -> bool:
        """Make the screen show ``text`` and then ``tail`` dimmed, rewriting from the first difference.

        False, with nothing drawn, when that difference has scrolled out of reach above the window.
        """
        cols = columns(self.stream)
        old_text, old_tail, old_pos = self.drawn_text, self.drawn_tail, self.drawn_pos
        if text == old_text:  # the usual case: only the draft changed
            p = len(text) + common(tail, old_tail)
            if p == len(text) + len(tail) == len(text) + len(old_tail):
                return True
        elif text.startswith(old_text):  # sentences were added: they replace the dimmed draft
            p = len(old_text)
        else:  # the final text differs from what was streamed
            p = common(text, old_text)
        out = ""
        if p < len(old_text) + len(old_tail):  # go back to the first difference and clear from there
            end = advance(old_pos, old_tail, cols)
            at = advance(old_pos, old_tail[: p - len(old_text)], cols) if p >= len(old_text) else \
                position(old_text[:p], cols)
            row, col = (at[0] + 1, 0) if at[1] >= cols else at  # a full row: next character starts the next
            if end[0] - row >= lines(self.stream):
                return False
            out = "\r" + (f"\x1b[{end[0] - row}A" if end[0] > row else "") + (f"\x1b[{col}C" if col else "")
            out += CLEAR_EOS
        else:
            at = advance(old_pos, old_tail, cols)
        if text == old_text:
            pos = old_pos
        elif p < len(text):
            out += text[p:]
            pos = advance(at, text[p:], cols)
        else:  # the text shrank to a prefix of what was drawn
            pos = at
        if tail[max(0, p - len(text)):]:
            out += (tail[max(0, p - len(text)):] if no_color() else DIM + tail[max(0, p - len(text)):] + RESET)
        self.stream.write(out)
        self.stream.flush()
        self.drawn_text, self.drawn_tail, self.drawn_pos = text, tail, pos
        return True

    def _tail(self) -> str:
        """The draft beyond the final sentences of its segment (its separator first), at most MAX_ROWS rows."""
        done = max(0, len(self.final) - self.base)
        pending = "".join(split_sentences(self.draft_text)[done:]).replace("|", "").strip()
        if not pending:
            return ""
        sep = self._sep(self.text, pending)
        cols = columns(self.stream)
        col = self.drawn_pos[1] if self.drawn_text == self.text else position(self.text[-4 * cols:], cols)[1]
        room = cols * self.MAX_ROWS - (col % cols) - width(sep) - 1
        return sep + tail_to_fit(pending, max(1, room))

    def _new_segment(self, text: str) -> bool:
        prev = self.draft_text
        if not prev:
            return False
        return len(text) <= len(prev) or not text.startswith(prev[: max(0, len(prev) - self.SLACK)])

    def draft(self, text: str, segment: int | None = None) -> None:
        # The daemon says which segment a draft belongs to; an older daemon does not, and then a draft that
        # does not extend the previous one is taken to start a new segment.
        if (segment != self.segment) if segment is not None else self._new_segment(text):
            self.base = len(self.final)
        if segment is not None:
            self.segment = segment
        self.draft_text = text
        self._draw(self.text, self._tail())

    def sentence(self, index: int, text: str) -> None:
        self.final.append(text)
        if text.strip():
            self.text += self._sep(self.text, text.strip()) + text.strip()
        self._draw(self.text, self._tail())

    def finish(self, final: str | None) -> None:
        """Leave exactly the final text on screen (sentences missed by the stream filled in, differences
        rewritten), then a newline."""
        text = self.text if final is None else final
        if not self._draw(text):  # the difference scrolled away: say it once more, in full
            self._draw(self.drawn_text)
            self.stream.write("\n" + text)
        self.stream.write("\n")
        self.stream.flush()

    def abort(self) -> None:
        self._draw(self.drawn_text)
        if self.drawn_text:
            self.stream.write("\n")
        self.stream.flush()

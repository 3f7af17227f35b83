"""The live draft (``transcribe --stream``, ``listen``, ``dictate``): final sentences printed for good, the draft not
yet final after them, dimmed, and the status line of hasrctl/terminal.py (queued, loading, progress) on the row
below, redrawing only what changed. Cursor arithmetic counts columns, not characters (CJK characters are two wide),
and the view carries its own status row, so that no second writer (a progress line on stderr) moves the cursor under
it.
"""

from __future__ import annotations

import os
import threading
import time
import unicodedata
from typing import TextIO

from hasrctl.terminal import (CLEAR_EOL, View, bar_text, columns, loading_text, no_color, printable, queued_text,
                              tail_to_fit, width)

SENT_END = "。！？；?!;"
DIM, RESET, CLEAR_LINE = "\x1b[2m", "\x1b[0m", "\x1b[2K"


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
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def clear_back(rows: int, col: int) -> str:
    """From anywhere on the cursor's row, clear back to column ``col`` of the row ``rows`` above and stay there.

    Line by line (erase in line), never "erase to the end of the screen": from the top left corner that erases
    the whole screen, and a terminal may keep a whole screen erased for the scrollback (tmux does: its
    scroll-on-clear is on by default), so a draft drawn on the first row stayed above the final text there.
    """
    return "\r" + (CLEAR_LINE + "\x1b[A") * rows + (f"\x1b[{col}C" if col else "") + CLEAR_EOL


def lines(stream: TextIO) -> int:
    try:
        return max(2, os.get_terminal_size(stream.fileno()).lines)
    except (OSError, ValueError, AttributeError):
        return 24


class LiveView(View):
    """Final sentences printed for good, the draft beyond them redrawn in place after them (dimmed), and a
    status row below them while the work goes on (queued, loading, progress: what ProgressBar shows).

    The view remembers what it drew since it started (at column 0) and redraws from the first character that
    differs, so a growing draft costs only its new characters, and at the end the screen holds exactly the
    final text, also where that differs from what was streamed: the region is rewritten, never appended to.
    The status row is part of that region (after a newline), so it goes when the work is done.

    Sentences are joined as the daemon joins the final text: nothing between Chinese (and other spaceless)
    sentences, a space otherwise. A draft event carries the draft of the current segment only (long audio is
    drafted in segments of at most HASR_MAX_SEGMENT_SEC), and within a segment every draft is longer than the
    one before. The daemon labels each draft with its segment; from a daemon that does not, a draft that is not
    longer, or does not extend the previous one, is taken to start a new segment. The sentences already final
    are counted from the segment's start, or, where each sentence names its segment too (live sessions: one
    segment per utterance), as the sentences of the draft's own segment; a draft of a segment whose sentences
    are all final (``done(segment)``) is stale and never shown.

    Events may come from a reader thread while the loading ticker runs: every draw holds one lock.
    """

    MAX_ROWS = 3
    SLACK = 12  # characters at the end of a draft that the next one may revise (R2T2 keeps a token unfixed)

    def __init__(self, stream: TextIO, language: str | None = None, name: str = "", lines: bool = False) -> None:
        self.stream = stream
        self.name = name
        self.lines = lines  # a final sentence a line (transcribe --stream), as the plain text output is
        self.sep = "\n" if lines else language_joiner(language)
        self.final: list[str] = []  # the final sentences so far
        self.text = ""  # the final sentences, joined: the permanent text
        self.draft_text = ""  # the current segment's draft
        self.base = 0  # len(self.final) when the current segment's draft began
        self.segment = 0  # the segment the current draft belongs to
        self.per_segment: dict[int, int] | None = None  # final sentences per segment, when sentences name it
        self.closed_segments: set[int] = set()
        self.status = ""  # the status row's text ("" = no status row)
        self.progressing = False  # the status row is the progress bar (text does not end it)
        self.phase: str | None = None  # loading: the ticker keeps its seconds moving
        self.phase_t0 = 0.0
        self.ticker: threading.Thread | None = None
        self.closed = False
        self.lock = threading.RLock()
        # What is on screen: permanent text, the region after it (dimmed draft, then "\n" and the status row),
        # how much of that region is dimmed, and the cursor position after the permanent text.
        self.drawn_text, self.drawn_tail, self.drawn_dim, self.drawn_pos = "", "", 0, (0, 0)

    def _sep(self, head: str, tail: str) -> str:
        if not head or not tail:
            return ""
        if self.sep is not None:
            return self.sep
        return "" if spaceless(head[-1]) or spaceless(tail[0]) else " "

    def _draw(self, text: str, tail: str = "", status: str = "") -> bool:
        """Make the screen show ``text``, then ``tail`` dimmed, then ``status`` on the next row, rewriting from
        the first difference.

        False, with nothing drawn, when that difference has scrolled out of reach above the window.
        """
        cols = columns(self.stream)
        region = tail + ("\n" + tail_to_fit(status, cols - 1) if status else "")
        dim = len(tail)
        old_text, old_tail, old_dim, old_pos = self.drawn_text, self.drawn_tail, self.drawn_dim, self.drawn_pos
        if text == old_text:  # the usual case: only the draft or the status changed
            c = common(region, old_tail)
            if dim != old_dim:  # the same characters, dimmed differently, are not the same
                c = min(c, dim, old_dim)
            if c == len(region) == len(old_tail):
                return True
            p = len(text) + c
        elif text.startswith(old_text):  # sentences were added: they replace the dimmed draft
            p = len(old_text)
        else:  # the final text differs from what was streamed
            p = common(text, old_text)
        out = ""
        new_text = text[p:]  # what of the text is written, then what of the region
        rest = region[max(0, p - len(text)):]
        if p < len(old_text) + len(old_tail):  # go back to the first difference and clear from there
            end = advance(old_pos, old_tail, cols)
            at = advance(old_pos, old_tail[: p - len(old_text)], cols) if p >= len(old_text) else \
                position(old_text[:p], cols)
            if at[1] >= cols:  # a full row: the next character starts the next row, so go there ...
                at = (at[0] + 1, 0)
                if new_text.startswith("\n"):  # ... where a newline next is already taken
                    new_text = new_text[1:]
                elif not new_text and rest.startswith("\n"):
                    rest = rest[1:]
            row, col = at
            if end[0] - row >= lines(self.stream):
                return False
            out = clear_back(end[0] - row, col)
        else:
            at = advance(old_pos, old_tail, cols)
        if text == old_text:
            pos = old_pos
        else:  # new text written, or the text shrank to a prefix of what was drawn
            out += new_text
            pos = advance(at, new_text, cols)
        q = len(region) - len(rest)  # where in the region ``rest`` begins
        dimmed, plain = rest[: max(0, dim - q)], rest[max(0, dim - q):]
        if dimmed:
            out += dimmed if no_color() else DIM + dimmed + RESET
        out += plain
        self.stream.write(out)
        self.stream.flush()
        self.drawn_text, self.drawn_tail, self.drawn_dim, self.drawn_pos = text, region, dim, pos
        return True

    def _tail(self) -> str:
        """The draft beyond the final sentences of its segment (its separator first), at most MAX_ROWS rows."""
        if self.segment in self.closed_segments:
            return ""
        if self.per_segment is not None:
            done = self.per_segment.get(self.segment, 0)
        else:
            done = max(0, len(self.final) - self.base)
        pending = "".join(split_sentences(self.draft_text)[done:]).replace("|", "").strip()
        if not pending:
            return ""
        sep = self._sep(self.text, pending)
        cols = columns(self.stream)
        col = self.drawn_pos[1] if self.drawn_text == self.text else position(self.text[-4 * cols:], cols)[1]
        room = cols * self.MAX_ROWS - (col % cols) - width(sep) - 1
        return sep + tail_to_fit(pending, max(1, room))

    def _redraw(self) -> None:
        if not self.closed:
            self._draw(self.text, self._tail(), f"{self.name} {self.status}".strip() if self.status else "")

    def _new_segment(self, text: str) -> bool:
        prev = self.draft_text
        if not prev:
            return False
        return len(text) <= len(prev) or not text.startswith(prev[: max(0, len(prev) - self.SLACK)])

    def _ready(self) -> None:
        """Text came: the job is out of the queue and the model loaded, whatever the last such event said;
        a progress line stays."""
        if not self.progressing:
            self.phase, self.status = None, ""

    def _tick(self) -> None:
        while True:
            time.sleep(0.5)
            with self.lock:
                if self.phase is None or self.closed:
                    self.ticker = None
                    return
                self.status = loading_text(self.phase, time.monotonic() - self.phase_t0)
                self._redraw()

    def queued(self, position: int) -> None:
        with self.lock:
            self.phase, self.status, self.progressing = None, queued_text(position), False
            self._redraw()

    def loading(self, phase: str, elapsed: float | None) -> None:
        with self.lock:
            self.phase, self.progressing = phase or "models", False
            self.phase_t0 = time.monotonic() - (elapsed or 0.0)
            self.status = loading_text(self.phase, elapsed or 0.0)
            self._redraw()
            if self.ticker is None and not self.closed:
                self.ticker = threading.Thread(target=self._tick, daemon=True)
                self.ticker.start()

    def progress(self, done: float, total: float, phase: str = "decoding") -> None:
        with self.lock:
            self.phase, self.status, self.progressing = None, bar_text(done, total, phase), True
            self._redraw()

    def draft(self, text: str, segment: int | None = None) -> None:
        with self.lock:
            # The daemon says which segment a draft belongs to; an older daemon does not, and then a draft that
            # does not extend the previous one is taken to start a new segment.
            if (segment != self.segment) if segment is not None else self._new_segment(text):
                self.base = len(self.final)
            if segment is not None:
                self.segment = segment
            self.draft_text = printable(text)
            self._ready()
            self._redraw()

    def sentence(self, index: int, text: str, segment: int | None = None) -> None:
        """A final sentence; ``segment`` where the caller knows which segment (utterance) it belongs to."""
        with self.lock:
            self.final.append(text)
            if segment is not None:
                if self.per_segment is None:
                    self.per_segment = {}
                self.per_segment[segment] = self.per_segment.get(segment, 0) + 1
            text = printable(text).strip()
            if text:
                self.text += self._sep(self.text, text) + text
            self._ready()
            self._redraw()

    def done(self, segment: int) -> None:
        """Every final sentence of ``segment`` has come: a later draft of it is stale, and its draft goes."""
        with self.lock:
            self.closed_segments.add(segment)
            self._redraw()

    def finish(self, final: str | None, sentences: list[str] | None = None) -> None:
        """Leave exactly the final text on screen (sentences missed by the stream filled in, differences
        rewritten; no draft, no status row), then a newline; a sentence a line where the view says so and the
        result's ``sentences`` are known."""
        with self.lock:
            if self.closed:  # said once: the screen below is no longer the view's
                return
            self.closed, self.phase = True, None
            if self.lines and sentences is not None:
                final = "\n".join(t for t in (printable(s).strip() for s in sentences) if t)
            text = self.text if final is None else printable(final, keep="\n")
            if not self._draw(text):  # the difference scrolled away: say it once more, in full
                self._draw(self.drawn_text)
                self.stream.write("\n" + text)
            self.stream.write("\n")
            self.stream.flush()

    def abort(self) -> None:
        with self.lock:
            if self.closed:
                return
            self.closed, self.phase = True, None
            self._draw(self.drawn_text)
            if self.drawn_text:
                self.stream.write("\n")
            self.stream.flush()

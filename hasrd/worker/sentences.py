"""Sentence windows over a draft that rewrites itself: the pure part of v2c (no model, no audio).

:class:`Windows` turns successive versions of R2T2's text into sentence windows decided on committed text only,
re-aligned when the draft rewrote what a closed window holds; :func:`truncation` is the seed's symptom gate
(``|`` in the sentence, or no end mark); :func:`choose` the selection rule; :func:`window_span` the audio a
window sends to faster-whisper. v2c.py explains why each is so, and runs them over a model.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

SENT_END = "。！？；?!;"
# Closing quotes and brackets that may follow a sentence's end mark ("他说：“好。”").
CLOSERS = "\"'”’）)」』》】 \t\n"
SR = 16000
CHUNK_SEC = 0.160
CHUNK = 2560  # 160 ms at 16 kHz
PAD = int(0.32 * SR)  # window padding on each side
# How far (in chunks) a window's audio reaches back before the chunk after the previous close: the draft lags
# the audio, so a sentence's speech starts before its text appears. 5 chunks = 0.8 s, the seed's measured
# median first-text delay of R2T2 (seed 000 §2.4); see "Changes from the seed" in v2c.py.
LAG_CHUNKS = 5


@dataclass(frozen=True)
class Window:
    """A sentence window of one segment: draft text and its chunks (segment-local).

    ``start_chunk``..``end_chunk``: the audio faster-whisper gets (before padding), reaching LAG_CHUNKS back
    for the draft's lag; ``open_chunk``: the chunk after the previous window closed, where the sentence starts
    on the draft's clock (``per_sentence.start_s``); ``truncated_by``: which symptom fired ("bar": the model
    generated ``|`` in it; "no_end_mark": it does not end with a sentence-end mark), None for a complete one.
    """

    text: str
    start_char: int
    start_chunk: int
    end_chunk: int
    open_chunk: int
    truncated_by: str | None = None


def ends_with_mark(text: str) -> bool:
    """The text's last character, past closing quotes, brackets and spaces, is a sentence-end mark."""
    t = text.rstrip(CLOSERS)
    return bool(t) and t[-1] in SENT_END


def truncation(text: str, bar: bool = False) -> str | None:
    """The symptom gate: "bar" (``|`` generated in the sentence), "no_end_mark", or None (complete)."""
    if bar or "|" in text:
        return "bar"
    if not ends_with_mark(text):
        return "no_end_mark"
    return None


def choose(sent_text: str, fw_text: str | None, truncated_by: str | None = "") -> tuple[str, str]:
    """The v2c selection rule -> (text, engine). ``fw_text=None``: no final model (draft-only engine).

    ``truncated_by`` is the window's symptom ("" = judge the text alone). Truncated -> the fw text, or the draft
    cut at ``|`` when fw returns nothing; complete -> the draft.
    """
    why = truncation(sent_text) if truncated_by == "" else truncated_by
    if why is None:
        return sent_text, "draft"
    if fw_text is None:
        return sent_text.split("|")[0], "draft"
    return (fw_text if fw_text else sent_text.split("|")[0]), "fw"


def n_chunks(n_samples: int) -> int:
    return (n_samples + CHUNK - 1) // CHUNK


def window_start(open_chunk: int) -> int:
    """First audio chunk of the window opened at ``open_chunk`` (previous close + 1): LAG_CHUNKS earlier."""
    return max(0, open_chunk - LAG_CHUNKS)


def window_span(start_chunk: int, end_chunk: int, n_samples: int) -> tuple[int, int]:
    """Sample range given to faster-whisper: the window's chunks plus 0.32 s each side, clamped to the audio."""
    a0 = max(0, int(start_chunk * CHUNK - PAD))
    a1 = min(n_samples, int((end_chunk + 1) * CHUNK + PAD))
    return a0, max(a0, a1)


def last_mark(text: str) -> int:
    """Index just past the last sentence-end mark (and the closers after it) in ``text``; 0 if none."""
    for i in range(len(text) - 1, -1, -1):
        if text[i] in SENT_END:
            j = i + 1
            while j < len(text) and text[j] in CLOSERS.strip():
                j += 1
            return j
    return 0


class Windows:
    """Sentence windows from a draft that rewrites itself: decided on committed text, re-aligned after rewrites.

    ``closed`` is the text of the windows closed so far, as the draft said it when the last one closed. A new
    version of the draft that still starts with it continues the open window at ``len(closed)``. One that does
    not (the draft rewrote or withdrew text that a closed window holds) is re-aligned: when only the closed
    text's final mark changed (R2T2 regenerates its last token, and a sentence closes on a final mark), the open
    window starts after the sentence's words, so what replaced the mark is kept; otherwise (qwen_asr's repetition
    fix, a deeper rollback) by length, snapped forward to the end of a Latin word. Closed sentences may already
    be out to the client and are never taken back. So every window's text is a piece of one version of the
    draft, and no text is lost or counted twice.
    """

    def __init__(self) -> None:
        self.closed = ""
        self.bars: list[int] = []  # where "|" was seen past the closed windows (character offsets in the draft)
        self.seen_open = False  # the draft once showed text in the open window (a shrink must not drop it)
        self.tail_bar = False  # a "|" regenerated inside the closed text since the last close (see observe)
        self.last_text = ""  # the latest full text observed
        self.windows: list[Window] = []
        self.open_chunk = 0  # the chunk after the previous close

    def cut(self, view: str) -> int:
        """Where the open window starts in ``view``.

        When the draft rewrote the closed text, a mark at that place is the closed sentence's, not the open
        one's: R2T2 regenerated the closed sentence's mark as another (``你好。`` -> ``你好，我们``). The open
        window starts after it, so the final text reads one sentence's mark, never ``你好。，我们``. (A draft
        that kept the closed text and wrote a mark after it is taken as written: windows are the draft.)
        """
        if view.startswith(self.closed):
            return len(self.closed)
        cut = self._realign(view)
        if ends_with_mark(self.closed):
            while cut < len(view) and _replaced_mark(view[cut]):
                cut += 1
        return cut

    def _realign(self, view: str) -> int:
        body = self.closed.rstrip(SENT_END + CLOSERS)
        if body and body != self.closed and view.startswith(body):
            return len(body)  # only the final mark was regenerated (or withdrawn)
        cut = len(self.closed)
        while 0 < cut < len(view) and _latin(view[cut]) and _latin(view[cut - 1]):
            cut += 1
        return min(cut, len(view))

    def open_text(self, view: str) -> str:
        return view[self.cut(view):]

    def observe(self, text: str, bar: bool) -> None:
        """The draft's latest full text (not yet committed) and whether the model generated a ``|``.

        A generated ``|`` stands where R2T2 cut its text, at the text's end; an older R2T2 leaves it in place.
        A ``|`` right after a sentence's end mark belongs to the sentence that follows. One that stands inside a
        closed sentence's text (R2T2 regenerating that sentence's last token, its mark, as ``|``: the text is
        shorter than the closed windows) flags no sentence: the closed one is settled and may be out already,
        and the next one is judged on its own. It is kept as ``tail_bar`` until the next close: when the finish
        shows nothing past the closed sentences, it is treated as the finish's own ``|`` (:meth:`finish`), so
        the audio after them still goes to faster-whisper instead of being lost.
        """
        c = self.cut(text)
        part = text[c:]
        self.last_text = text
        if part.strip():
            self.seen_open = True
        # a shrink moves earlier bars back into the sentence that is open now (their offsets were in a longer text)
        self.bars = [min(b, max(c, len(text))) for b in self.bars]
        at = c + part.index("|") if "|" in part else max(c, len(text)) if bar else -1
        if at >= len(self.closed):
            self.bars.append(at)
        elif at >= 0:
            self.tail_bar = True

    def commit(self, fixed: str, chunk: int) -> Window | None:
        """Committed text after ``chunk``: close the open window at its last sentence-end mark, if any."""
        c = self.cut(fixed)
        part = fixed[c:]
        m = last_mark(part)
        if m == 0 or not any(ch.isalnum() for ch in part[:m]):
            return None  # no mark, or a mark alone (a rewrite's leftover): the sentence is still open
        return self._close(fixed, c, part[:m], chunk)

    def finish(self, final: str, last_chunk: int, bar: bool = False) -> Window | None:
        """After the finish: the rest of the draft is the last window (also when the draft withdrew it).

        ``bar``: the finish itself generated a ``|``, or a streaming step did inside the closed text since the last
        close (``tail_bar``). Its text is cut there, and where it regenerated a closed sentence's mark as
        ``|。我们走吧。`` the cut text shows nothing past the closed sentences: the audio after them still becomes
        a last window, truncated by the bar (one more faster-whisper call is cheap; a lost tail is silent: issue
        31 #9, issue 38 #4)."""
        bar = bar or self.tail_bar
        c = self.cut(final)
        part = final[c:]
        if bar and last_chunk >= 0 and self.open_chunk <= last_chunk:
            self.bars.append(max(c, len(final)))
            return self._close(final, c, part, last_chunk, last=True)
        if not part.strip() and not (self.seen_open or self.bars):
            return None
        if last_chunk < 0 or (not part.strip() and self.open_chunk > last_chunk):
            return None
        return self._close(final, c, part, last_chunk, last=True)

    def _close(self, view: str, c: int, text: str, chunk: int, last: bool = False) -> Window:
        oc = min(self.open_chunk, chunk)
        end = c + len(text)
        bar = any(b < end or last for b in self.bars)
        w = Window(text, c, window_start(oc), chunk, oc, truncation(text, bar))
        self.windows.append(w)
        self.closed = view[:end]
        self.open_chunk = chunk + 1
        self.bars = [b for b in self.bars if b >= end and not last]
        self.tail_bar = False  # the draft went on past it: no longer the tail's symptom
        self.seen_open = bool(self.open_text(self.last_text).strip())  # what the draft already said past it
        return w


def _replaced_mark(ch: str) -> bool:
    """A mark R2T2 may regenerate in place of a closed sentence's final mark (``，`` ``、`` ``？`` ``,`` ...)."""
    return ch in SENT_END or ch in CLOSERS.strip() or unicodedata.category(ch) in ("Po", "Pd")


def _latin(ch: str) -> bool:
    return ch.isascii() and ch.isalnum()

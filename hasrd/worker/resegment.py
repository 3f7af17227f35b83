"""Sentence-sized segments from timed words: what every transcript's ``per_sentence`` is made of.

Why: whisper's own segments are not sentences. Decoded in 30 s clips without timestamps (the batched pipeline's
default) each clip is one segment (a 25 s file with five sentences came back as one 23 s subtitle cue); with
timestamps they are phrases that may end mid-sentence or run over a pause. Subtitles, ``verbose_json``
segments, NDJSON ``sentence`` events and SSE deltas all want one sentence at a time, timed to its words.

The rules (pure, tested with plain values):

- a segment ends after a word that ends a sentence (``. ! ? 。 ！ ？ ; ； …``, closing quotes allowed after it;
  abbreviations such as "Mr." and single initials are not ends);
- a segment never spans a pause of ``min_pause`` (0.5 s) or more: between two words whose gap is that long, or
  across a silence the VAD found (``pauses``);
- whisper's own boundaries are kept only where the left side ends in a CJK character with no mark at all
  (whisper often writes Chinese without punctuation, and then its timestamps are the best sentence cue) and the
  boundary is not inside a Chinese word (a window that ended mid-word: ``…正式范`` | ``围。``); elsewhere a
  sentence it split into phrases is joined again;
- a segment is at most ``max_sec`` (10 s): a longer sentence is cut at a clause mark (``, ， 、 : ：`` ...) near
  its middle, else at its longest gap between words, else at a whisper boundary, recursively; inside a Chinese
  word only where nothing else is.

:class:`Resegmenter` takes words as the decoder produces them and hands back the segments that can no longer
change (everything before the last sentence end or pause), so events still stream while a file is decoded.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from hasrd import textwords

END_MARKS = ".!?。！？;；…‼⁇⁈⁉"
CLAUSE_MARKS = ",，、:：—–;；"
CLOSERS = "\"'”’»」』）)]】"
ABBREVIATIONS = frozenset({"mr.", "mrs.", "ms.", "dr.", "st.", "vs.", "prof.", "sr.", "jr.", "e.g.", "i.e.",
                           "no.", "fig.", "approx.", "mt.", "inc.", "ltd.", "co."})
MIN_PAUSE = 0.5
MAX_SEC = 10.0


@dataclass
class Word:
    """One decoded word: its text as the decoder wrote it (whisper puts the space before a word into it),
    its times in seconds on the file's clock, and which decoder segment it came from."""

    text: str
    start: float
    end: float
    probability: float = 1.0
    source: int = 0


@dataclass
class Piece:
    words: list[Word] = field(default_factory=list)

    @property
    def start(self) -> float:
        return self.words[0].start

    @property
    def end(self) -> float:
        return max(self.words[-1].end, self.words[0].start)

    @property
    def text(self) -> str:
        return "".join(w.text for w in self.words).strip()

    @property
    def sources(self) -> list[int]:
        return sorted({w.source for w in self.words})


def is_cjk(ch: str) -> bool:
    o = ord(ch)
    return 0x2E80 <= o <= 0x9FFF or 0xF900 <= o <= 0xFAFF or 0x20000 <= o <= 0x2FFFF or 0xAC00 <= o <= 0xD7AF \
        or 0x3040 <= o <= 0x30FF


def _core(text: str) -> str:
    return text.strip().rstrip(CLOSERS)


def ends_sentence(word: str) -> bool:
    """Whether a word closes its sentence: a mark at its end (before closing quotes), and not an abbreviation,
    a single initial ("J."), or a decimal point."""
    core = _core(word)
    if not core or core[-1] not in END_MARKS:
        return False
    if core[-1] == ".":
        bare = core.lstrip("\"'“‘(«")
        if bare.lower() in ABBREVIATIONS or (len(bare) == 2 and bare[0].isupper()):
            return False
    return True


def ends_clause(word: str) -> bool:
    core = _core(word)
    return bool(core) and (core[-1] in CLAUSE_MARKS or core[-1] in END_MARKS)


def bare_cjk_end(word: str) -> bool:
    """The word ends in a CJK character with no mark after it."""
    core = word.strip()
    return bool(core) and is_cjk(core[-1])


def in_pause(a: Word, b: Word, pauses: Sequence[tuple[float, float]], min_pause: float) -> bool:
    """A pause of at least ``min_pause`` lies between words a and b: their gap, or a VAD silence whose middle
    lies between the middles of a and b (whisper stretches a word over the silence after it; each silence
    falls between exactly one pair of neighbours this way)."""
    if b.start - a.end >= min_pause - 1e-6:
        return True
    lo, hi = (a.start + a.end) / 2, (b.start + b.end) / 2
    return any(e - s >= min_pause - 1e-6 and lo <= (s + e) / 2 < hi for s, e in pauses)


def snap(words: Sequence[Word], pauses: Sequence[tuple[float, float]]) -> list[Word]:
    """Words moved out of the silences the VAD found. Whisper's word alignment stretches a word over a pause,
    mostly the one after it backwards (measured: "你好" at 2.3-3.7 s for speech from 3.27 s after a 0.8 s pause),
    which hides the pause from the word gaps and starts the next sentence's cue in the silence. A word across a
    silence's middle that ends past the silence starts at its end; one that ends inside it ends at its start."""
    out = []
    for w in words:
        for s, e in pauses:
            c = (s + e) / 2
            if w.start < c < w.end:
                if w.end > e:
                    w = Word(w.text, e, w.end, w.probability, w.source)
                else:
                    w = Word(w.text, w.start, max(s, w.start), w.probability, w.source)
        out.append(w)
    return out


def inside_word(words: Sequence[Word], k: int) -> bool:
    """Whether the point after ``words[k]`` falls inside a Chinese word, by the segmenter the subtitles use
    (hasrd.textwords) over a few characters on each side: a 30 s window may end mid-word (``…正式范`` | ``围。``)."""
    left = "".join(w.text for w in words[max(0, k - 3):k + 1]).replace(" ", "")[-4:]
    right = "".join(w.text for w in words[k + 1:k + 4]).replace(" ", "")[:4]
    if not (left and right and is_cjk(left[-1]) and is_cjk(right[0])):
        return False
    try:
        found = textwords.zh_words(left + right)
    except ImportError:  # a worker venv without rjieba (README: the GPU venv installs it): whisper's cut stands
        return False
    ends = list(itertools.accumulate(len(w) for w in found))
    return len(left) not in ends


def hard_cut(words: Sequence[Word], k: int, pauses: Sequence[tuple[float, float]], min_pause: float) -> bool:
    """A segment must end after ``words[k]``: a sentence end, a pause, or a whisper boundary after a bare CJK
    character that is no cut inside a word."""
    a, b = words[k], words[k + 1]
    if ends_sentence(a.text) or in_pause(a, b, pauses, min_pause):
        return True
    return a.source != b.source and bare_cjk_end(a.text) and not inside_word(words, k)


def split_long(words: list[Word], max_sec: float) -> list[list[Word]]:
    """A run of words longer than ``max_sec`` cut at its best inner boundary, recursively: a clause mark near the
    middle first, then the longest gap, then a whisper boundary; words are never split."""
    if len(words) < 2 or words[-1].end - words[0].start <= max_sec:
        return [words]
    t0, t1 = words[0].start, words[-1].end
    mid = (t0 + t1) / 2
    best_k, best_cost = 1, float("inf")
    for k in range(1, len(words)):
        a, b = words[k - 1], words[k]
        at = (a.end + b.start) / 2
        cost = abs(at - mid) / (t1 - t0)  # 0 .. 0.5
        if ends_clause(a.text):
            cost -= 1.0
        cost -= min(max(b.start - a.end, 0.0), 0.5)
        if a.source != b.source:
            cost -= 0.2
        if inside_word(words, k - 1):
            cost += 2.0  # only where there is no other boundary
        if cost < best_cost:
            best_k, best_cost = k, cost
    return split_long(words[:best_k], max_sec) + split_long(words[best_k:], max_sec)


def cut(words: Sequence[Word], pauses: Sequence[tuple[float, float]] = (), min_pause: float = MIN_PAUSE,
        max_sec: float = MAX_SEC) -> list[Piece]:
    """All of ``words`` (in time order) as sentence-sized pieces (the module docstring's rules)."""
    words = snap(words, pauses)
    out: list[Piece] = []
    run: list[Word] = []
    for i, w in enumerate(words):
        run.append(w)
        nxt = words[i + 1] if i + 1 < len(words) else None
        if nxt is None or hard_cut(words, i, pauses, min_pause):
            out.extend(Piece(p) for p in split_long(run, max_sec) if "".join(x.text for x in p).strip())
            run = []
    return out


class Resegmenter:
    """Words in as they are decoded, finished pieces out: a piece is finished once a hard cut (a sentence end or
    a pause) follows it, since later words cannot join it any more."""

    def __init__(self, min_pause: float = MIN_PAUSE, max_sec: float = MAX_SEC) -> None:
        self.min_pause, self.max_sec = min_pause, max_sec
        self.words: list[Word] = []
        self.pauses: list[tuple[float, float]] = []

    def add_pauses(self, pauses: Iterable[tuple[float, float]]) -> None:
        self.pauses.extend(p for p in pauses if p[1] - p[0] >= self.min_pause)

    def add(self, words: Iterable[Word]) -> list[Piece]:
        self.words.extend(snap([w for w in words if w.text], self.pauses))
        last = None
        for k in range(len(self.words) - 1):
            if hard_cut(self.words, k, self.pauses, self.min_pause):
                last = k
        if last is None:
            return []
        done, self.words = self.words[:last + 1], self.words[last + 1:]
        pieces = cut(done, self.pauses, self.min_pause, self.max_sec)
        # words come in time order: a silence that ends before the first word still waiting concerns no later
        # word, and keeping every silence of a 4-hour file would make each word's look-up grow with the file
        since = self.words[0].start if self.words else done[-1].end
        self.pauses = [p for p in self.pauses if p[1] >= since]
        return pieces

    def flush(self) -> list[Piece]:
        done, self.words = self.words, []
        return cut(done, self.pauses, self.min_pause, self.max_sec)


LOOP_REPEATS = 4  # the file path's rule: a phrase said four times in a row is a decoding loop
LOOP_GAP = 1.0  # ... back to back: the same sentence again after a real pause is speech (a refrain, a test file)


class LoopFilter:
    """Pieces with the same text, one after another, four times or more: a decoding loop that spans decoder
    segments (whisper base hears "傻子" twenty times in a row in hard Mandarin), said once. Repeats are held back
    until a different text, a pause (or the end) shows whether they were a loop; fewer than four go out as they
    came."""

    def __init__(self, limit: int = LOOP_REPEATS, gap: float = LOOP_GAP) -> None:
        self.limit, self.gap = limit, gap
        self.last: str | None = None
        self.last_end = float("-inf")
        self.held: list[tuple[str, Piece]] = []

    def add(self, text: str, piece: Piece) -> list[tuple[str, Piece]]:
        key = _loop_key(text)
        close, self.last_end = piece.start - self.last_end < self.gap, piece.end
        if key and key == self.last and close:
            self.held.append((text, piece))
            return []
        out = self.flush()
        self.last = key
        return out + [(text, piece)]

    def flush(self) -> list[tuple[str, Piece]]:
        held, self.held = self.held, []
        return [] if len(held) + 1 >= self.limit else held


def _loop_key(text: str) -> str:
    return "".join(ch for ch in text.lower() if ch.isalnum())

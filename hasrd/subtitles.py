"""Subtitle cues from sentence segments, following the Netflix timed-text style guides (docs/API.md "Subtitle
cues" has the rules: the limits, how a sentence is split, the lines, Chinese and Japanese, the reading speed).

A sentence that does not fit one cue is split by choosing over all the ways to split it, not filled greedily: a
greedy fill leaves short tails (``tickets.`` alone for 0.83 s). Times come from the sentence's words where the
engine timed them, else they are interpolated over the sentence by character count.

Pure functions over ``formats.segments`` dicts, standard library only but for rjieba (the CLI renders subtitles
too). The writers stay hand-made in formats.py: pysubs2, tried for them, drops any ``{...}`` from the text as an
ASS override tag when it writes SRT or WebVTT, and writes ``<`` and ``&`` unescaped into WebVTT.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hasrd.errors import InvalidOption
from hasrd import textwords
from hasrd.textwords import is_cjk, is_cjk_text, reading_chars

if TYPE_CHECKING:
    from hasrd.config import Settings

LATIN_WIDTH = 42
CJK_WIDTH = 16
MIN_CUE_SEC = 0.83
RANGES: dict[str, tuple[float, float]] = {
    "max_line_width": (8, 200),  # 0 = by script
    "max_line_count": (1, 4),
    "max_cue_sec": (1.0, 60.0),
}
# reading speed, characters a second (Netflix's adult figures; its Japanese guide asks for 4, which transcribed
# speech rarely leaves room for: Japanese takes Chinese's 9)
LATIN_CPS = 17.0
HANGUL_CPS = 12.0
CJK_CPS = 9.0
SENTENCE_END = ".。!！?？…"
CLAUSE_MARK = ",，、;；:："
CLOSERS = "\"'”’)）]」』】》"
OPTIONS = tuple(RANGES)
# English words a line or a cue should not end on (the style guides: keep an article, a preposition or a
# conjunction with what follows it)
_WEAK_END = frozenset(["a", "an", "the", "of", "to", "in", "on", "at", "by", "for", "with", "from", "into", "as",
                       "and", "or", "but", "nor", "if", "that", "than", "my", "your", "his", "her", "its", "our",
                       "their", "this", "these", "those", "i"])


@dataclass(frozen=True)
class CueRules:
    max_line_width: int = 0  # 0: by the cue's script
    max_line_count: int = 2
    max_cue_sec: float = 7.0
    min_cue_sec: float = MIN_CUE_SEC
    max_cps: float = 0.0  # 0: by the cue's script (LATIN_CPS, HANGUL_CPS, CJK_CPS)

    def width(self, text: str) -> int:
        if self.max_line_width:
            return self.max_line_width
        return CJK_WIDTH if is_cjk_text(text) else LATIN_WIDTH

    def cps(self, text: str) -> float:
        """Characters a second a viewer reads the cue's text at, at most."""
        if self.max_cps:
            return self.max_cps
        if is_cjk_text(text):
            return CJK_CPS
        letters = [ch for ch in text if ch.isalpha()]
        hangul = sum("\uac00" <= ch <= "\ud7af" or "\u1100" <= ch <= "\u11ff" or "\u3130" <= ch <= "\u318f"
                     for ch in letters)
        return HANGUL_CPS if letters and hangul * 2 >= len(letters) else LATIN_CPS


@dataclass
class Cue:
    start: float
    end: float
    lines: list[str]
    speaker: str = ""  # who says it (a sentence's speaker: a cue never holds two speakers' words)

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def rules_from(options: Mapping[str, Any], defaults: CueRules | None = None) -> CueRules:
    """CueRules from request options or form fields (missing, None or "" = the default); InvalidOption naming
    the allowed range for anything else."""
    base = defaults or CueRules()
    values: dict[str, Any] = {}
    for name, (lo, hi) in RANGES.items():
        raw = options.get(name)
        if raw is None or raw == "":
            continue
        kind = float if name == "max_cue_sec" else int
        try:
            if isinstance(raw, bool):
                raise ValueError(raw)
            value = kind(raw)
            if kind is int and isinstance(raw, float) and raw != int(raw):
                raise ValueError(raw)
        except (TypeError, ValueError, OverflowError):  # OverflowError: int() of an infinite number (1e400)
            raise InvalidOption(_range_text(name, raw), param=name) from None
        if not (lo <= value <= hi) and not (name == "max_line_width" and value == 0):
            raise InvalidOption(_range_text(name, raw), param=name)
        values[name] = value
    return CueRules(max_line_width=values.get("max_line_width", base.max_line_width),
                    max_line_count=values.get("max_line_count", base.max_line_count),
                    max_cue_sec=values.get("max_cue_sec", base.max_cue_sec))


def configured(settings: Settings) -> CueRules:
    """The daemon's (or the CLI's) defaults: HASR_MAX_LINE_WIDTH, HASR_MAX_LINE_COUNT, HASR_MAX_CUE_SEC."""
    try:
        return rules_from({name: getattr(settings, name) for name in OPTIONS})
    except InvalidOption as e:
        raise InvalidOption(f"HASR_{e.param.upper() if e.param else ''}: {e.message}", param=e.param) from None


def _range_text(name: str, raw: Any) -> str:
    lo, hi = RANGES[name]
    if name == "max_cue_sec":
        allowed = f"a number of seconds from {lo:g} to {hi:g}"
    elif name == "max_line_width":
        allowed = f"a whole number from {lo:g} to {hi:g}, or 0 for the script's default (42 Latin, 16 CJK)"
    else:
        allowed = f"a whole number from {lo:g} to {hi:g}"
    return f"{name} {raw!r} is not valid: use {allowed}"


# --- units: timed words ------------------------------------------------------------------------------------

@dataclass
class _Unit:
    text: str  # with the space before it, as it joins its neighbour
    start: float
    end: float


def _char_times(seg: Mapping[str, Any], text: str, start: float, end: float) -> list[tuple[float, float]]:
    """A time span for each character of ``text``: from the engine's words where they spell the text, else
    interpolated over the sentence by character count."""
    words = seg.get("words")
    if isinstance(words, list) and words and \
            "".join(str(w.get("word") or "") for w in words).split() == text.split():
        spans: list[tuple[float, float]] = []
        for w in words:
            chars = [ch for ch in str(w.get("word") or "") if not ch.isspace()]
            a = float(w["start"]) if w.get("start") is not None else start
            b = max(float(w["end"]) if w.get("end") is not None else a, a)
            spans.extend((a + (b - a) * k / len(chars), a + (b - a) * (k + 1) / len(chars))
                         for k in range(len(chars)))
        out: list[tuple[float, float]] = []
        it = 0
        for ch in text:
            span = spans[min(it, len(spans) - 1)]
            out.append(span if not ch.isspace() else (span[0], span[0]))
            it += not ch.isspace()
        return out
    n = len(text) or 1
    return [(start + (end - start) * p / n, start + (end - start) * (p + 1) / n) for p in range(len(text))]


def _units(seg: Mapping[str, Any], rules: CueRules, language: str | None = None) -> list[_Unit]:
    """What a sentence may be cut between, timed. A sentence that fits one line and one cue's time is one unit:
    it is not segmented (so rjieba is loaded only when a Chinese sentence has to be cut)."""
    text = " ".join(str(seg.get("text") or "").split())
    if not text:
        return []
    start, end = float(seg.get("start") or 0.0), float(seg.get("end") or 0.0)
    end = max(end, start)
    times = _char_times(seg, text, start, end)
    width = rules.width(text)
    if len(text) <= width and times[-1][1] - times[0][0] <= rules.max_cue_sec:
        return [_Unit(text, times[0][0], times[-1][1])]
    out, pos = [], 0
    for w in textwords.words(text, width, language):  # from the blank before it (cues of one sentence meet) to its end
        out.append(_Unit(w, times[pos][0], times[pos + len(w.rstrip()) - 1][1]))
        pos += len(w)
    return out


def _join(units: list[_Unit]) -> str:
    return "".join(u.text for u in units).strip()


# --- where to cut ------------------------------------------------------------------------------------------

def _end_kind(text: str) -> str:
    """What a cut after this word would be: after a sentence, a clause, a weak word (an English article,
    preposition or conjunction), or plainly between words."""
    bare = text.rstrip().rstrip(CLOSERS)
    last = bare[-1:]
    if last and last in SENTENCE_END:
        return "sentence"
    if last and last in CLAUSE_MARK:
        return "clause"
    if bare.strip().lower() in _WEAK_END:
        return "weak"
    return "word"


# the cost of a split into cues, in units of one cue: each cue costs 1 plus its fill squared (so that of the
# splits into as many cues, the most even wins), plus the kind of cut that ends it: a cut between words costs
# more than one more cue, so a sentence is cut at its sentence ends and clause marks first
_CUT_COST = {"sentence": 0.0, "clause": 0.2, "word": 1.2, "weak": 1.5}
_ORPHAN = 100.0  # a cue of one word where the sentence has more: only where nothing else fits
_SHORT = 0.5  # a cue under a quarter full, scaled by how far under


class _Fill:
    """Greedy line filling, one word at a time: how many lines of ``width`` the words need (greedy gives the
    fewest), and whether they still fit ``lines`` lines."""

    def __init__(self, width: int, lines: int) -> None:
        self.width, self.lines = width, lines
        self.used, self.cur, self.ok = 0, 0, True

    def add(self, text: str) -> None:
        if not self.ok:
            return
        if self.used and self.cur + len(text) <= self.width:
            self.cur += len(text)
            return
        self.used += 1
        self.cur = len(text.lstrip())
        self.ok = self.cur <= self.width and self.used <= self.lines


def split_sentence(units: list[_Unit], rules: CueRules) -> list[list[_Unit]]:
    """A sentence's units as cues, the best of all the ways to split it that keep the limits (lines, line width
    and a cue's time; one word alone always goes): fewest cues, cut after sentence ends and clause marks
    first, cues as even as they can be, no one-word cue where its neighbour can take it (``_CUT_COST``)."""
    n = len(units)
    if n <= 1:
        return [units] if units else []
    lines = rules.max_line_count
    widths = (rules.max_line_width or LATIN_WIDTH, rules.max_line_width or CJK_WIDTH)
    script = [(sum(ch.isalpha() for ch in u.text), sum(ch.isalpha() and is_cjk(ch) for ch in u.text))
              for u in units]
    inf = float("inf")
    best = [inf] * (n + 1)
    back = [0] * (n + 1)
    best[0] = 0.0
    for j in range(n):
        if best[j] == inf:
            continue
        fills = [_Fill(w, lines) for w in widths]
        letters = cjk = chars = 0
        for i in range(j + 1, n + 1):
            u = units[i - 1]
            text = u.text.lstrip() if i == j + 1 else u.text
            chars += len(text)
            letters += script[i - 1][0]
            cjk += script[i - 1][1]
            for f in fills:
                f.add(text)
            cjk_cue = bool(letters) and cjk * 2 >= letters
            if i - j > 1:
                if u.end - units[j].start > rules.max_cue_sec or not any(f.ok for f in fills):
                    break  # only more lines and more time from here on
                if not fills[cjk_cue].ok:
                    continue
            cap = widths[cjk_cue] * lines
            cost = 1.0 + (chars / cap) ** 2
            if i - j == 1:
                cost += _ORPHAN
            elif chars < cap / 4:
                cost += _SHORT * (1 - chars / (cap / 4))
            if i < n:
                cost += _CUT_COST[_end_kind(u.text)]
            if best[j] + cost < best[i]:
                best[i], back[i] = best[j] + cost, j
    out: list[list[_Unit]] = []
    i = n
    while i:
        out.append(units[back[i]:i])
        i = back[i]
    return out[::-1]


# the cost of a line break, in units of one full line squared: after punctuation is cheaper, after a weak word
# dearer; a line of one word where the cue has three or more is avoided
_BREAK_COST = {"sentence": -0.5, "clause": -0.3, "word": 0.0, "weak": 0.3}
_LONE_WORD = 2.0


def wrap(units: list[_Unit], width: int, max_lines: int) -> list[str] | None:
    """The units as at most ``max_lines`` lines of at most ``width`` characters, or None when they do not fit.
    One line where it fits; else, of the ways that fit, the one with the most even lines (least sum of
    squared lengths; a top line weighs a little more, so the lower line is the longer of two nearly even),
    broken after punctuation where it can, and without a line of one word when the cue has three or more."""
    texts = [u.text for u in units]
    whole = "".join(texts).strip()
    if len(whole) <= width:
        return [whole]
    if max_lines <= 1 or len(whole) > width * max_lines + max_lines:
        return None
    n = len(texts)
    memo: dict[tuple[int, int], tuple[float, list[str]] | None] = {}

    def best(i: int, left: int) -> tuple[float, list[str]] | None:
        if (i, left) in memo:
            return memo[(i, left)]
        found: tuple[float, list[str]] | None = None
        line = ""
        for k in range(i + 1, n + 1):
            line = (line + texts[k - 1]) if line else texts[k - 1].lstrip()
            if len(line) > width:
                break
            cost = (len(line) / width) ** 2 * (1 + 0.05 * left) + (_LONE_WORD if k - i == 1 and n > 2 else 0.0)
            if k == n:
                cand: tuple[float, list[str]] | None = (cost, [line])
            elif left > 1:
                rest = best(k, left - 1)
                cand = None if rest is None else \
                    (cost + _BREAK_COST[_end_kind(texts[k - 1])] + rest[0], [line] + rest[1])
            else:
                cand = None
            if cand is not None and (found is None or cand[0] < found[0]):
                found = cand
        memo[(i, left)] = found
        return found

    got = best(0, max_lines)
    return None if got is None else got[1]


def cues(segments: list[dict[str, Any]], rules: CueRules | None = None, until: float | None = None,
         language: str | None = None) -> list[Cue]:
    """Cues for ``formats.segments`` (sentences with start, end, text and maybe words), in time order, that
    follow ``rules``, never overlap and never end after ``until`` (the audio's end, when known). ``language``
    (a code or name, as the result gives it) says whether text in Chinese characters is Japanese when it has
    no kana; without it, kana decide."""
    rules = rules or CueRules()
    out: list[Cue] = []
    for seg in segments:
        units = _units(seg, rules, language)
        if not units:
            continue
        for part in split_sentence(units, rules):
            text = _join(part)
            lines = wrap(part, rules.width(text), rules.max_line_count) or [text]
            start, end = part[0].start, max(part[-1].end, part[0].start)
            out.append(Cue(start, min(end, start + rules.max_cue_sec), lines, str(seg.get("speaker") or "")))
    out.sort(key=lambda c: c.start)
    return settle_times(out, rules, until)


def settle_times(cs: list[Cue], rules: CueRules, until: float | None = None) -> list[Cue]:
    """No overlaps; each cue on screen long enough to read (``rules.cps``) and at least ``min_cue_sec``, at
    most ``max_cue_sec``, where the gaps to its neighbours allow: extended into the silence after it first,
    then into the silence before it; the last one ends by ``until`` (a 7.017-7.847 s cue came out for a
    7.068 s file: issue 31 #12). Where there is no room, the cue keeps its text whole and its speech's time,
    read faster than the cap."""
    for k, c in enumerate(cs):
        nxt = cs[k + 1].start if k + 1 < len(cs) else until
        prev = cs[k - 1].end if k else 0.0
        c.start = max(c.start, prev)
        if nxt is not None:
            c.end = min(c.end, nxt)
        need = min(max(rules.min_cue_sec, reading_chars(c.text) / rules.cps(c.text)), rules.max_cue_sec)
        if c.end - c.start < need:
            c.end = c.start + need if nxt is None else max(c.end, min(c.start + need, nxt))
        if c.end - c.start < need:
            c.start = max(prev, c.end - need)
        c.end = max(c.end, c.start + 0.001)
    return cs

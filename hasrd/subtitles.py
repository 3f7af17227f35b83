"""Subtitle cues from sentence segments, following subtitle practice (the Netflix timed-text style guides).

A cue holds at most ``max_line_count`` lines (2) of at most ``max_line_width`` characters (42 for Latin and
other spaced scripts, 16 for Chinese and Japanese), stays on screen at most ``max_cue_sec`` (7 s) and at least
0.83 s (20 frames at 24 fps), and never overlaps the next. A sentence that does not fit one cue is cut between
words (between characters in CJK), preferably after a clause mark; lines are broken where the two halves are
most even, preferably after punctuation. Times come from the sentence's words where the engine timed them,
else they are interpolated over the sentence by character count.

Pure functions over ``formats.segments`` dicts, standard library only (the CLI renders subtitles too). The
writers stay hand-made in formats.py: pysubs2, tried for them, drops any ``{...}`` from the text as an ASS
override tag when it writes SRT or WebVTT, and writes ``<`` and ``&`` unescaped into WebVTT.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hasrd.errors import InvalidOption

LATIN_WIDTH = 42
CJK_WIDTH = 16
MIN_CUE_SEC = 0.83
RANGES: dict[str, tuple[float, float]] = {
    "max_line_width": (8, 200),  # 0 = by script
    "max_line_count": (1, 4),
    "max_cue_sec": (1.0, 60.0),
}
CLAUSE_END = ",，、;；:：.。!！?？…)）」』”\"'"
SENTENCE_END = ".。!！?？…"
OPTIONS = tuple(RANGES)
_IDEO = "\u2e80-\u2fff\u3040-\u30ff\u3400-\u9fff\uf900-\ufaff"
_PUNCT = "\u3000-\u303f\uff00-\uffef,.!?;:\"'”’)\\]」』】》…"
# a unit to cut between: one CJK character with the marks after it, or a run of anything else but blanks
_TOKEN = re.compile(f"\\s*(?:[{_IDEO}][{_PUNCT}]*|[^\\s{_IDEO}]+)")


@dataclass(frozen=True)
class CueRules:
    max_line_width: int = 0  # 0: by the cue's script
    max_line_count: int = 2
    max_cue_sec: float = 7.0
    min_cue_sec: float = MIN_CUE_SEC

    def width(self, text: str) -> int:
        if self.max_line_width:
            return self.max_line_width
        return CJK_WIDTH if is_cjk_text(text) else LATIN_WIDTH


@dataclass
class Cue:
    start: float
    end: float
    lines: list[str]

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


def configured(settings: Any) -> CueRules:
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


def is_cjk(ch: str) -> bool:
    o = ord(ch)
    return (0x2E80 <= o <= 0x9FFF or 0xF900 <= o <= 0xFAFF or 0x3000 <= o <= 0x303F or 0xFF00 <= o <= 0xFFEF
            or 0x20000 <= o <= 0x2FFFF or 0x3040 <= o <= 0x30FF)


def is_cjk_text(text: str) -> bool:
    """Mostly Chinese or Japanese characters (counting letters only): the 16-character rule applies."""
    letters = [ch for ch in text if ch.isalpha()]
    return bool(letters) and sum(is_cjk(ch) for ch in letters) * 2 >= len(letters)


@dataclass
class _Unit:
    text: str  # with the space before it, as it joins its neighbour
    start: float
    end: float


def _units(seg: Mapping[str, Any]) -> list[_Unit]:
    """What a sentence may be cut between, timed: its words where the engine timed them (when they spell its
    text), else words (or CJK characters) with times interpolated by character count."""
    text = " ".join(str(seg.get("text") or "").split())
    start, end = float(seg.get("start") or 0.0), float(seg.get("end") or 0.0)
    end = max(end, start)
    words = seg.get("words")
    if isinstance(words, list) and words and \
            "".join(str(w.get("word") or "") for w in words).split() == text.split():
        out = [_Unit(str(w.get("word") or ""), float(w.get("start") or start), float(w.get("end") or start))
               for w in words if str(w.get("word") or "").strip()]
        if out:
            out[0].text = out[0].text.lstrip()
            return out
    merged = _TOKEN.findall(text)
    total = sum(len(m) for m in merged) or 1
    out, pos = [], 0
    for m in merged:
        a = start + (end - start) * pos / total
        pos += len(m)
        out.append(_Unit(m, a, start + (end - start) * pos / total))
    return out


def _join(units: list[_Unit]) -> str:
    return "".join(u.text for u in units).strip()


def wrap(units: list[_Unit], width: int, max_lines: int) -> list[str] | None:
    """The units as at most ``max_lines`` lines of at most ``width`` characters, or None when they do not fit.
    Of the ways that fit, the one with the most even lines (least sum of squared lengths), a line that ends
    after punctuation counting as shorter."""
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
            if k == n:
                cand: tuple[float, list[str]] | None = (float(len(line) ** 2), [line])
            elif left > 1:
                rest = best(k, left - 1)
                bonus = (width / 2) ** 2 if line[-1] in CLAUSE_END else 0.0
                cand = None if rest is None else (len(line) ** 2 - bonus + rest[0], [line] + rest[1])
            else:
                cand = None
            if cand is not None and (found is None or cand[0] < found[0]):
                found = cand
        memo[(i, left)] = found
        return found

    got = best(0, max_lines)
    return None if got is None else got[1]


def _fits(units: list[_Unit], rules: CueRules) -> bool:
    text = _join(units)
    if units[-1].end - units[0].start > rules.max_cue_sec and len(units) > 1:
        return False
    return wrap(units, rules.width(text), rules.max_line_count) is not None


def split_sentence(units: list[_Unit], rules: CueRules) -> list[list[_Unit]]:
    """A sentence's units as cues that each fit: as few cues as the rules allow, each cut after a clause mark
    where one lies in the cue's last half."""
    out: list[list[_Unit]] = []
    i = 0
    while i < len(units):
        j = i + 1
        while j < len(units) and _fits(units[i:j + 1], rules):
            j += 1
        if j < len(units):
            j = _better_cut(units, i, j)
        out.append(units[i:j])
        i = j
    return out


def _better_cut(units: list[_Unit], i: int, j: int) -> int:
    """Where to end the cue units[i:j] that cannot take units[j]: after a sentence end in its last three
    quarters, else after a clause mark in its last half, else at j."""
    for marks, floor in ((SENTENCE_END, i + (j - i) // 4), (CLAUSE_END, i + (j - i) // 2)):
        for k in range(j - 1, floor, -1):
            if units[k].text.rstrip()[-1:] in marks:
                return k + 1
    return j


def cues(segments: list[dict[str, Any]], rules: CueRules | None = None, until: float | None = None) -> list[Cue]:
    """Cues for ``formats.segments`` (sentences with start, end, text and maybe words), in time order, that
    follow ``rules``, never overlap and never end after ``until`` (the audio's end, when known)."""
    rules = rules or CueRules()
    out: list[Cue] = []
    for seg in segments:
        units = _units(seg)
        if not units:
            continue
        for part in split_sentence(units, rules):
            text = _join(part)
            lines = wrap(part, rules.width(text), rules.max_line_count) or [text]
            start, end = part[0].start, max(part[-1].end, part[0].start)
            out.append(Cue(start, min(end, start + rules.max_cue_sec), lines))
    out.sort(key=lambda c: c.start)
    return settle_times(out, rules, until)


def settle_times(cs: list[Cue], rules: CueRules, until: float | None = None) -> list[Cue]:
    """No overlaps; each cue at least ``min_cue_sec`` where the gap to its neighbours allows (extended into the
    silence after it first, then before it); the last one ends by ``until`` (a 7.017-7.847 s cue came out for a
    7.068 s file: issue 31 #12)."""
    for k, c in enumerate(cs):
        nxt = cs[k + 1].start if k + 1 < len(cs) else until
        prev = cs[k - 1].end if k else 0.0
        c.start = max(c.start, prev)
        if nxt is not None:
            c.end = min(c.end, nxt)
        if c.end - c.start < rules.min_cue_sec:
            c.end = c.start + rules.min_cue_sec if nxt is None else min(c.start + rules.min_cue_sec, nxt)
        if c.end - c.start < rules.min_cue_sec:
            c.start = max(prev, c.end - rules.min_cue_sec)
        c.end = max(c.end, c.start + 0.001)
    return cs

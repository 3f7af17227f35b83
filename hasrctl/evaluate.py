"""``hasrctl eval MANIFEST``: CER (Chinese, Japanese) or WER (other languages) after normalisation.

Normalisation, applied to reference and hypothesis alike: Unicode NFKC (full width -> half width), lower case,
numbers written one way, then punctuation and symbols removed. The Chinese script is NOT normalised: the score is
of what the user receives, so a traditional character against a simplified reference is an error, and
:func:`script_check` reports the mismatch (hypothesis and reference written in different scripts, by OpenCC's
own tables: hasrd/zhscript.py) instead of hiding it. Numbers: in Chinese text Arabic numbers become Chinese
numerals by value with cn2an (``25`` -> ``二十五``, ``2024年`` -> ``二零二四年``, ``50%`` -> ``百分之五十``,
``3.5`` -> ``三点五``; five or more digits in a row are read digit by digit, as people read phone numbers), so
numeral characters inside ordinary words stay what they are (万州, 唯一, 一起: turning 一 into 1 there is what
made hasr's CER disagree with a standard scorer); in other text number words up to twenty become digits
(``three`` -> ``3``). With
``--homophones`` every Chinese character is replaced by its toneless pinyin (pypinyin), as seed 000 §7 asks
for TTS audio, where faster-whisper's misses are mostly homophones. CER counts characters (spaces ignored);
WER counts words. Totals are error sums over reference sums. An engine that makes no draft (its result says
``draft: ""``: whisper) has no draft score.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Callable
from typing import Any, NamedTuple

_DIGITS_ZH = dict(zip("0123456789", "零一二三四五六七八九", strict=True))
_LONG_DIGITS = re.compile(r"\d{5,}")
_EN_NUMBERS = {w: str(i) for i, w in enumerate(
    ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
     "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty"])}
_EN_WORD = re.compile(r"[a-z]+")


@functools.lru_cache(maxsize=1)
def _an2cn() -> Callable[[str], str]:
    try:
        import cn2an
    except ImportError:
        from hasrctl.client import UsageError

        raise UsageError("scoring Chinese with numbers needs cn2an: pip install 'hasr[eval]'") from None
    return lambda s: str(cn2an.transform(s, "an2cn"))


def chinese_numbers(text: str) -> str:
    """Arabic numbers in Chinese text as Chinese numerals (see the module docstring)."""
    text = _LONG_DIGITS.sub(lambda m: "".join(_DIGITS_ZH[c] for c in m.group(0)), text)
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)
    return _an2cn()(text) if any(c.isdigit() for c in text) else text


def script_check(reference: str, hypothesis: str) -> dict[str, Any] | None:
    """The scripts of a Chinese reference and hypothesis (hasrd.zhscript.script_of: "simplified",
    "traditional", "mixed" or "" for text of characters both share) and whether they differ: a mismatch is a
    hypothesis in a known script other than the reference's known one. None: no Chinese in either, or no OpenCC
    (:func:`have_opencc` says which)."""
    from hasrd import zhscript

    try:
        ref, _rt, _rs = zhscript.script_of(reference)
        hyp, trad, simp = zhscript.script_of(hypothesis)
    except zhscript.NoOpenCC:
        return None
    if not zhscript.has_han(reference) and not zhscript.has_han(hypothesis):
        return None
    return {"reference": ref, "hypothesis": hyp, "mismatch": bool(ref and hyp and ref != hyp),
            "traditional": trad, "simplified": simp}


def have_opencc() -> bool:
    from hasrd import zhscript

    try:
        zhscript.opencc("t2s")
    except zhscript.NoOpenCC:
        return False
    return True


def is_cjk(ch: str) -> bool:
    o = ord(ch)
    return 0x3400 <= o <= 0x9FFF or 0xF900 <= o <= 0xFAFF or 0x20000 <= o <= 0x3134F or 0x3040 <= o <= 0x30FF


def normalize(text: str, chinese: bool | None = None) -> str:
    """The comparable form of a transcript: see the module docstring for the steps.

    ``chinese``: write numbers the Chinese way (True for CER scoring: a hypothesis of bare digits against a
    Chinese reference must still compare); None decides by the text's own script."""
    text = unicodedata.normalize("NFKC", text).lower()
    if chinese or (chinese is None and any(is_cjk(c) for c in text)):
        text = chinese_numbers(text).replace("〇", "零")
    else:
        text = _EN_WORD.sub(lambda m: _EN_NUMBERS.get(m.group(0), m.group(0)), text)
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)
    text = re.sub(r"(?<=\d)\.(?=\d)", "\x00", text)
    text = re.sub(r"(?<=[^\W\d_])'(?=[^\W\d_])", "\x01", text)
    text = "".join(" " if unicodedata.category(c)[0] in "PSZC" and c not in "\x00\x01" else c for c in text)
    return " ".join(text.replace("\x00", ".").replace("\x01", "'").split())


def tokens(text: str, metric: str, homophones: bool = False) -> list[str]:
    """Characters (cer) or words (wer) of normalised text; CJK characters as pinyin with ``homophones``."""
    norm = normalize(text, chinese=True if metric == "cer" else None)
    toks = [c for c in norm if not c.isspace()] if metric == "cer" else norm.split()
    if homophones:
        py = pinyin()
        toks = [py(t) if len(t) == 1 and is_cjk(t) else t for t in toks]
    return toks


@functools.lru_cache(maxsize=1)
def pinyin() -> Callable[[str], str]:
    try:
        from pypinyin import lazy_pinyin
    except ImportError:
        from hasrctl.client import UsageError

        raise UsageError("--homophones needs pypinyin: pip install pypinyin") from None
    return lambda ch: lazy_pinyin(ch)[0]


def metric_for(reference: str, language: str | None) -> str:
    """cer for Chinese and Japanese (by language name or by the reference's script), else wer."""
    from hasrd.languages import UnknownLanguage, parse

    try:
        code = parse(language).code
    except UnknownLanguage:
        code = ""
    if code:
        return "cer" if code in ("zh", "yue", "ja") else "wer"
    return "cer" if any(is_cjk(c) for c in reference) else "wer"


def edits(ref: list[str], hyp: list[str]) -> int:
    """Levenshtein distance (substitutions + deletions + insertions)."""
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        cur = [i] + [0] * len(hyp)
        for j, h in enumerate(hyp, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h))
        prev = cur
    return prev[-1]


class Edits(NamedTuple):
    """One minimal alignment's substitutions, deletions (reference tokens the hypothesis left out) and insertions."""

    substitutions: int
    deletions: int
    insertions: int


def edit_counts(ref: list[str], hyp: list[str]) -> Edits:
    """:func:`edits` split by kind: what the errors are (skipped speech shows as deletions, a loop as insertions)."""
    prev = [(j, 0, 0, j) for j in range(len(hyp) + 1)]  # per cell: (distance, substitutions, deletions, insertions)
    for i, r in enumerate(ref, 1):
        cur = [(i, 0, i, 0)]
        for j, h in enumerate(hyp, 1):
            c, s, d, n = prev[j - 1]
            diag = (c + (r != h), s + (r != h), d, n)
            c, s, d, n = prev[j]
            up = (c + 1, s, d + 1, n)
            c, s, d, n = cur[j - 1]
            cur.append(min(diag, up, (c + 1, s, d, n + 1)))
        prev = cur
    return Edits(*prev[-1][1:])


def score(reference: str, hypothesis: str, metric: str, homophones: bool = False) -> tuple[int, int]:
    """(errors, reference length) of one pair."""
    ref = tokens(reference, metric, homophones)
    return edits(ref, tokens(hypothesis, metric, homophones)), len(ref)


def draft_only(result: dict[str, Any]) -> str | None:
    """The draft as the seed scored it alone: each sentence window cut at its ``|`` (None without a draft: no
    windows, or an engine that says it made none, ``draft: ""``, whose windows are its final sentences)."""
    if "draft" in result and not str(result.get("draft") or "").strip():
        return None
    windows = [str(w.get("text") or "") for w in result.get("sent_windows") or []]
    if not windows:
        return None
    return "".join(w.split("|")[0] for w in windows)


def rate(err: int, n: int) -> float | None:
    return err / n if n else (0.0 if err == 0 else None)


def fmt_rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


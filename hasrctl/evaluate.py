"""``hasrctl eval MANIFEST``: CER (Chinese, Japanese) or WER (other languages) after normalisation.

Normalisation, applied to reference and hypothesis alike: Unicode NFKC (full width -> half width), traditional
-> simplified Chinese (opencc or zhconv when installed), lower case, Chinese numerals -> Arabic digits
(``二十五``, ``二五`` and ``25`` all become ``25``; ``百分之五十`` -> ``50``; ``三点五`` -> ``3.5``), then
punctuation and symbols removed. With ``--homophones`` every Chinese character is replaced by its toneless
pinyin (pypinyin), as seed 000 §7 asks for TTS audio, where faster-whisper's misses are mostly homophones.
CER counts characters (spaces ignored); WER counts words. Totals are error sums over reference sums.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from typing import Any, Callable

_NUM = "零〇一二两三四五六七八九十百千万亿"
_DIGIT = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8,
          "九": 9}
_UNIT = {"十": 10, "百": 100, "千": 1000}
_RUN = re.compile(f"[{_NUM}]+")
_PERCENT = re.compile(f"百分之([{_NUM}]+)")
_DECIMAL = re.compile(f"([{_NUM}]+)点([{_NUM}]+)")


def _small(s: str) -> int | None:
    """A number below 10^4 written with 十百千 (None when it is not one)."""
    total, num = 0, None
    for ch in s:
        if ch in "零〇":
            num = None
        elif ch in _DIGIT:
            if num is not None:
                return None
            num = _DIGIT[ch]
        elif ch in _UNIT:
            total += (1 if num is None else num) * _UNIT[ch]
            num = None
        else:
            return None
    return total + (num or 0)


def _positional(s: str) -> int | None:
    for big, factor in (("亿", 10**8), ("万", 10**4)):
        if big in s:
            head, _, rest = s.partition(big)
            hi = _positional(head) if head else 1
            lo = _positional(rest) if rest else 0
            return None if hi is None or lo is None else hi * factor + lo
    return _small(s)


def cn_number(run: str) -> str:
    """Chinese numerals as Arabic digits: digit by digit without units (二零二四), else by value (两千零二十四)."""
    if not any(ch in run for ch in "十百千万亿"):
        return "".join(str(_DIGIT[ch]) for ch in run)
    value = _positional(run)
    return str(value) if value is not None else "".join(str(_DIGIT.get(ch, ch)) for ch in run)


@functools.lru_cache(maxsize=1)
def t2s() -> Callable[[str], str] | None:
    """Traditional -> simplified with whichever converter is installed; None when none is."""
    try:
        import opencc

        for config in ("t2s", "t2s.json"):
            try:
                return opencc.OpenCC(config).convert  # type: ignore[no-any-return]
            except Exception:  # noqa: BLE001 - the two opencc packages name their configs differently
                continue
    except ImportError:
        pass
    try:
        import zhconv

        return lambda s: zhconv.convert(s, "zh-cn")  # type: ignore[no-any-return]
    except ImportError:
        return None


def is_cjk(ch: str) -> bool:
    o = ord(ch)
    return 0x3400 <= o <= 0x9FFF or 0xF900 <= o <= 0xFAFF or 0x20000 <= o <= 0x3134F or 0x3040 <= o <= 0x30FF


def normalize(text: str) -> str:
    """The comparable form of a transcript: see the module docstring for the steps."""
    text = unicodedata.normalize("NFKC", text)
    conv = t2s()
    if conv is not None:
        text = conv(text)
    text = text.lower()
    text = _PERCENT.sub(lambda m: cn_number(m.group(1)), text)
    text = _DECIMAL.sub(lambda m: cn_number(m.group(1)) + "." + "".join(str(_DIGIT[c]) for c in m.group(2)
                                                                         if c in _DIGIT), text)
    text = _RUN.sub(lambda m: cn_number(m.group(0)), text)
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)
    text = re.sub(r"(?<=\d)\.(?=\d)", "\x00", text)
    text = re.sub(r"(?<=[^\W\d_])'(?=[^\W\d_])", "\x01", text)
    text = "".join(" " if unicodedata.category(c)[0] in "PSZC" and c not in "\x00\x01" else c for c in text)
    return " ".join(text.replace("\x00", ".").replace("\x01", "'").split())


def tokens(text: str, metric: str, homophones: bool = False) -> list[str]:
    """Characters (cer) or words (wer) of normalised text; CJK characters as pinyin with ``homophones``."""
    norm = normalize(text)
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
    lang = (language or "").strip().lower()
    if lang:
        return "cer" if lang in ("chinese", "zh", "cantonese", "yue", "japanese", "ja", "mandarin") else "wer"
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


def score(reference: str, hypothesis: str, metric: str, homophones: bool = False) -> tuple[int, int]:
    """(errors, reference length) of one pair."""
    ref = tokens(reference, metric, homophones)
    return edits(ref, tokens(hypothesis, metric, homophones)), len(ref)


def draft_only(result: dict[str, Any]) -> str | None:
    """The draft as the seed scored it alone: each sentence window cut at its ``|`` (None without a draft)."""
    windows = [str(w.get("text") or "") for w in result.get("sent_windows") or []]
    if not windows:
        return None
    return "".join(w.split("|")[0] for w in windows)


def rate(err: int, n: int) -> float | None:
    return err / n if n else (0.0 if err == 0 else None)


def fmt_rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


"""Where a text may be cut between words, for subtitle cues (subtitles.py): blanks in spaced scripts, Chinese
words by rjieba (jieba in Rust, loaded on first use), Japanese phrases where its scripts change (no segmenter as
light exists for it); and how many characters a viewer reads."""

from __future__ import annotations

import re
import unicodedata

_IDEO = "\u2e80-\u2fff\u3040-\u30ff\u3400-\u9fff\uf900-\ufaff"
_HAS_IDEO = re.compile(f"[{_IDEO}]")
_KANA = re.compile("[\u3040-\u30ff\uff66-\uff9f]")
_CHUNK = re.compile(r"\s*\S+")


def is_cjk(ch: str) -> bool:
    o = ord(ch)
    return (0x2E80 <= o <= 0x9FFF or 0xF900 <= o <= 0xFAFF or 0x3000 <= o <= 0x303F or 0xFF00 <= o <= 0xFFEF
            or 0x20000 <= o <= 0x2FFFF or 0x3040 <= o <= 0x30FF)


def is_cjk_text(text: str) -> bool:
    """Mostly Chinese or Japanese characters (counting letters only): the 16-character rule applies."""
    letters = [ch for ch in text if ch.isalpha()]
    return bool(letters) and sum(is_cjk(ch) for ch in letters) * 2 >= len(letters)


def reading_chars(text: str) -> int:
    """The characters a viewer reads in a cue: a line break is not one; in Chinese and Japanese blanks are not
    either (those scripts use none between words)."""
    flat = " ".join(text.split())
    return len(flat.replace(" ", "")) if is_cjk_text(flat) else len(flat)


# --- words -------------------------------------------------------------------------------------------------

def zh_words(text: str) -> list[str]:
    """Chinese words by rjieba (jieba's dictionary and algorithm in Rust), imported on the first call only
    (a tenth of a second). Not jieba itself: it is built from an sdist at install (pip's DEPRECATION warning in
    the quick start), keeps a cache file in /tmp that another user's copy breaks (a traceback and a rebuild at
    every run), and talks on stderr; rjieba is a wheel with its dictionary inside, and says nothing."""
    import rjieba

    return [w for w in rjieba.cut(text) if w]


def _script(ch: str) -> str:
    o = ord(ch)
    if 0x3040 <= o <= 0x309F:
        return "hiragana"
    if 0x30A0 <= o <= 0x30FF or 0xFF66 <= o <= 0xFF9F:
        return "katakana"
    if unicodedata.category(ch).startswith("P"):
        return "mark"
    if is_cjk(ch) or ch in "々〆〇":
        return "kanji"
    return "other"


def _ja_words(text: str) -> list[str]:
    """Japanese phrases without a segmenter: a new one starts where kana turn into kanji, katakana or Latin
    letters (so 東京に|行きます, 私は|学生です), or where one of those scripts turns into another."""
    out: list[str] = []
    prev = ""
    for ch in text:
        kind = _script(ch)
        if out and kind not in ("hiragana", "mark") and kind != prev:
            out.append(ch)
        elif out:
            out[-1] += ch
        else:
            out.append(ch)
        if kind != "mark":
            prev = kind
    return out


def _is_mark(text: str) -> bool:
    return all(unicodedata.category(ch).startswith("P") or ch.isspace() for ch in text)


def _glue(words: list[str]) -> list[str]:
    """Punctuation kept with the word before it, an opening bracket or quote with the word after it: no line
    or cue starts with a comma or ends with an opening quote."""
    out: list[str] = []
    opening = ""
    for w in words:
        if _is_mark(w) and all(unicodedata.category(ch) in ("Ps", "Pi") for ch in w):
            opening += w
        elif _is_mark(w) and out and not opening:
            out[-1] += w
        else:
            out.append(opening + w)
            opening = ""
    if opening:
        if out:
            out[-1] += opening
        else:
            out.append(opening)
    return out


def _is_japanese(text: str, language: str | None) -> bool:
    lang = (language or "").lower()
    if lang.startswith(("ja", "jp")):
        return True
    if lang.startswith(("zh", "chinese", "mandarin", "cantonese", "yue", "cmn")):
        return False
    return bool(_KANA.search(text))


def words(text: str, width: int, language: str | None) -> list[str]:
    """``text`` as the words it may be cut between, each with the blank before it: words between blanks, and
    inside a run of Chinese or Japanese the words a segmenter finds (``zh_words``, ``_ja_words``)."""
    japanese = _is_japanese(text, language)
    out: list[str] = []
    for m in _CHUNK.finditer(text):
        chunk = m.group()
        body = chunk.lstrip()
        if not _HAS_IDEO.search(body):
            out.append(chunk)
            continue
        found = _glue(_ja_words(body) if japanese else zh_words(body))
        pieces: list[str] = []
        for w in found:  # a word longer than a line: between its characters (punctuation still kept with one)
            pieces.extend(_glue(list(w)) if len(w) > width else [w])
        pieces[0] = chunk[:len(chunk) - len(body)] + pieces[0]
        out.extend(pieces)
    return out

"""The Chinese script and punctuation a user receives (issue 18): one pure module for the worker and ``hasrctl eval``.

Which script (:func:`target_for`): a tag with ``Hans`` or region CN / SG / MY → simplified (OpenCC ``t2s``);
``zh-TW`` → Taiwan standard with Taiwan phrasing (``s2twp``: 软件 → 軟體); ``zh-HK`` / ``zh-MO`` → Hong Kong
(``s2hk``); ``Hant`` without a region → plain traditional (``s2t``). A plain ``zh`` / ``Chinese`` /
``Mandarin`` and detected Chinese follow HASR_ZH_SCRIPT: simplified (default) | traditional (``s2t``) | as-is
(the characters the model wrote). Plain Cantonese (``yue``, detected or asked) is written the Hong Kong way
(``s2hk``) unless its tag says Hans or CN. Anything else is not touched at all.

How it is written (:func:`punctuate`, for every Chinese target, as-is included): ``, ? ! : ;`` next to a Chinese
character become ``， ？ ！ ： ；``, a ``.`` ending a sentence after one becomes ``。``, parentheses around or
next to Chinese become ``（ ）``; spaces between Chinese characters, and around full-width punctuation, go.
English words inside Chinese keep their ASCII letters, digits and the spaces between them; text without a
Chinese character is returned unchanged. Decimal points, times (10:30), thousands (1,000) and ellipses stay.

:class:`Scripter` applies this per request at the worker's one boundary (hasrd/worker/serve.py): every text the
worker sends (draft, sentence and turn events, the result's final, per_sentence, words, sent_windows, turns),
keeping per-sentence texts joined equal to ``final``, and records ``script`` / ``script_conversion`` in the
result. :func:`script_of` tells ``hasrctl eval`` which script a text is in.

Pure: the standard library, hasrd.languages and the result Struct at import; OpenCC (the official ``opencc``
wheels, or the pure-Python ``opencc-python-reimplemented``: same import name, same API) only inside functions,
once per table.
"""

from __future__ import annotations

import difflib
import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hasrd.languages import CANTONESE_REGIONS, UnknownLanguage, join_sentences, parse

if TYPE_CHECKING:  # the CLI reads tags through this module: no msgspec at import
    from msgspec import UnsetType

    from hasrd.transcript import Transcript, Word

SETTINGS = ("simplified", "traditional", "as-is")  # HASR_ZH_SCRIPT
SIMPLIFIED_REGIONS = frozenset({"CN", "SG", "MY"})


@dataclass(frozen=True)
class Target:
    """What a Chinese text becomes: ``script`` as the result reports it, ``conversion`` the OpenCC table
    ("" = the characters stay as the model wrote them; punctuation is still made full width)."""

    script: str  # "simplified" | "traditional" | "as-is"
    conversion: str  # "t2s" | "s2t" | "s2twp" | "s2hk" | ""


SIMPLIFIED = Target("simplified", "t2s")
TRADITIONAL = Target("traditional", "s2t")
TAIWAN = Target("traditional", "s2twp")
HONG_KONG = Target("traditional", "s2hk")
AS_IS = Target("as-is", "")
_BY_SETTING = {"simplified": SIMPLIFIED, "traditional": TRADITIONAL, "as-is": AS_IS}


def for_setting(setting: str) -> Target:
    """HASR_ZH_SCRIPT's target for a plain zh (an unknown value is refused when settings load; here: default)."""
    return _BY_SETTING.get(setting, SIMPLIFIED)


def target_for(language: str | None, setting: str = "simplified", detected: str | None = None) -> Target | None:
    """The target for a request's language tag, HASR_ZH_SCRIPT, and (when no language was asked) the detected
    language (a code or a name); None = not Chinese, or not known yet (nothing asked, nothing detected)."""
    try:
        lang = parse(language)
        if not lang.code and detected:
            lang = parse(detected)
    except UnknownLanguage:
        return None
    if lang.code not in ("zh", "yue"):
        return None
    if lang.script == "Hans" or (not lang.script and lang.region in SIMPLIFIED_REGIONS):
        return SIMPLIFIED
    if lang.region == "TW":
        return TAIWAN
    if lang.region in CANTONESE_REGIONS:
        return HONG_KONG
    if lang.script == "Hant":
        return TRADITIONAL
    if lang.code == "yue":
        return HONG_KONG
    return for_setting(setting)


# ---- characters -------------------------------------------------------------------------------------------

def is_han(ch: str) -> bool:
    """A Chinese character (CJK unified ideographs, extensions A-G, compatibility ideographs)."""
    o = ord(ch)
    return (0x4E00 <= o <= 0x9FFF or 0x3400 <= o <= 0x4DBF or 0xF900 <= o <= 0xFAFF or 0x20000 <= o <= 0x3134F
            or o == 0x3007)


def is_wide_punct(ch: str) -> bool:
    """Full-width punctuation: CJK symbols (。、「」…), full-width forms (，！（）), and the quotes and dashes
    Chinese text uses (“” ‘’ … —)."""
    o = ord(ch)
    return (0x3000 < o <= 0x303F and o != 0x3007) or 0xFF01 <= o <= 0xFF0F or 0xFF1A <= o <= 0xFF20 \
        or 0xFF3B <= o <= 0xFF40 or 0xFF5B <= o <= 0xFF65 or ch in "“”‘’…—·"


def is_chinese_context(ch: str) -> bool:
    """A Chinese character or full-width punctuation ("" = the text's edge: no)."""
    return bool(ch) and (is_han(ch) or is_wide_punct(ch))


def has_han(text: str) -> bool:
    return any(is_han(c) for c in text)


def _is_kana_or_hangul(ch: str) -> bool:
    o = ord(ch)
    return 0x3040 <= o <= 0x30FF or 0x31F0 <= o <= 0x31FF or 0xAC00 <= o <= 0xD7AF or 0x1100 <= o <= 0x11FF \
        or 0x3130 <= o <= 0x318F


def looks_chinese(text: str) -> bool:
    """Han characters and no kana or hangul: how a streamed text is judged before the language is known."""
    return has_han(text) and not any(_is_kana_or_hangul(c) for c in text)


# ---- punctuation -----------------------------------------------------------------------------------------

WIDE = {",": "，", "?": "？", "!": "！", ":": "：", ";": "；", "(": "（", ")": "）", ".": "。"}
_CLAUSE = ",?!:;"
# Skipped when looking for a mark's neighbours, so that "?!" after a character and "，，" decide alike.
_MARKS = frozenset(_CLAUSE + "，？！：；.。")
_PARENS = _MARKS | frozenset("()（）")
_CLOSERS = frozenset("\"'”’」』）)》〉】]")


def _neighbour(text: str, i: int, step: int, skip: frozenset[str] = _MARKS) -> str:
    """The nearest character from ``i`` in direction ``step`` that is neither whitespace nor in ``skip``."""
    i += step
    while 0 <= i < len(text):
        c = text[i]
        if not c.isspace() and c not in skip:
            return c
        i += step
    return ""


def _parens(text: str) -> str:
    """Matched ASCII parentheses around Chinese, or next to it, become full width (both of the pair)."""
    chars = list(text)
    stack: list[int] = []
    pairs: list[tuple[int, int]] = []
    lone: list[int] = []
    for i, c in enumerate(chars):
        if c == "(":
            stack.append(i)
        elif c == ")":
            if stack:
                pairs.append((stack.pop(), i))
            else:
                lone.append(i)
    lone.extend(stack)
    for a, b in pairs:
        if (has_han(text[a + 1:b]) or is_chinese_context(_neighbour(text, a, -1, _PARENS))
                or is_chinese_context(_neighbour(text, b, 1, _PARENS))):
            chars[a], chars[b] = "（", "）"
    for i in lone:
        if is_chinese_context(_neighbour(text, i, -1, _PARENS)) or is_chinese_context(_neighbour(text, i, 1, _PARENS)):
            chars[i] = WIDE[chars[i]]
    return "".join(chars)


_SENTENCE_ENDS = frozenset(".。!?！？")


def _marks(text: str) -> str:
    """Clause marks next to Chinese, then full stops that end a sentence holding Chinese (not a decimal point, an
    ellipsis, an abbreviation inside English, or the end of an English sentence)."""
    chars = list(text)
    for i, c in enumerate(text):
        if c in _CLAUSE and (is_chinese_context(_neighbour(text, i, -1)) or is_chinese_context(_neighbour(text, i, 1))):
            chars[i] = WIDE[c]
    text = "".join(chars)
    n = len(text)
    start = 0  # where the current sentence began
    for i, c in enumerate(text):
        if c == ".":
            nxt = text[i + 1] if i + 1 < n else ""
            prev = text[i - 1] if i else ""
            before = _neighbour(text, i, -1, frozenset())
            if (prev != "." and nxt != "." and before not in _SENTENCE_ENDS
                    and (not nxt or nxt.isspace() or is_chinese_context(nxt) or nxt in _CLOSERS)
                    and (is_chinese_context(before) or has_han(text[start:i]))):
                chars[i] = "。"
        if c in _SENTENCE_ENDS:
            start = i + 1
    return "".join(chars)


def _spaces(text: str) -> str:
    """Drop a run of spaces between two Chinese characters or next to full-width punctuation (the marks carry
    their own space); keep the ones at either end, and all others."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        if not text[i].isspace():
            out.append(text[i])
            i += 1
            continue
        j = i
        while j < n and text[j].isspace():
            j += 1
        before, after = text[i - 1] if i else "", text[j] if j < n else ""
        if before and after and ((is_chinese_context(before) and is_chinese_context(after))
                                 or is_wide_punct(before) or is_wide_punct(after)):
            pass
        else:
            out.append(text[i:j])
        i = j
    return "".join(out)


def punctuate(text: str) -> str:
    """Chinese punctuation and spacing (see the module docstring); text without a Chinese character is
    returned as it is. Idempotent."""
    if not has_han(text):
        return text
    return _spaces(_marks(_parens(text)))


# ---- OpenCC ----------------------------------------------------------------------------------------------

class NoOpenCC(RuntimeError):
    """Neither OpenCC package is installed in this interpreter."""


@functools.cache
def opencc(config: str) -> Callable[[str], str]:
    """OpenCC's converter for ``config`` (t2s, s2t, s2twp, s2hk, tw2s ...), built once. The official package
    and the reimplementation name their configs with and without ``.json``: both are tried."""
    try:
        import opencc as occ
    except ImportError:
        raise NoOpenCC("Chinese script conversion needs OpenCC: pip install opencc") from None
    err: Exception | None = None
    for name in (config, config + ".json"):
        try:
            return occ.OpenCC(name).convert  # type: ignore[no-any-return]
        except Exception as e:  # noqa: BLE001 - each package has its own error for a missing config
            err = e
    raise NoOpenCC(f"OpenCC has no {config!r} conversion: {err}")


def convert(text: str, target: Target) -> str:
    """``text`` in ``target``'s script and Chinese punctuation (raises NoOpenCC without OpenCC)."""
    if not has_han(text):
        return text
    if target.conversion:
        text = opencc(target.conversion)(text)
    return punctuate(text)


def script_of(text: str) -> tuple[str, int, int]:
    """(script, traditional characters, simplified characters) of a text: a character counts as traditional
    when OpenCC's t2s changes it, as simplified when s2t does (whole phrases, so 皇后 stays neutral);
    script = "traditional" | "simplified" | "mixed" | "" (no character of either kind, or no Chinese).
    Raises NoOpenCC without OpenCC."""
    if not has_han(text):
        return "", 0, 0
    trad = _changed(text, opencc("t2s")(text))
    simp = _changed(text, opencc("s2t")(text))
    script = "mixed" if trad and simp else "traditional" if trad else "simplified" if simp else ""
    return script, trad, simp


def _changed(a: str, b: str) -> int:
    if len(a) == len(b):
        return sum(x != y and is_han(x) for x, y in zip(a, b, strict=True))
    sm = difflib.SequenceMatcher(None, a, b, autojunk=False)
    return sum(i2 - i1 for tag, i1, i2, _j1, _j2 in sm.get_opcodes() if tag != "equal")


# ---- splitting a converted whole back into its pieces -------------------------------------------------------

def split_like(pieces: list[str], converted: str) -> list[str]:
    """``converted`` (a conversion of ``"".join(pieces)``) cut where the pieces were cut, by aligning the two
    texts: words keep the sentence's phrase-level conversion (软件 → 軟體 across two words)."""
    orig = "".join(pieces)
    if orig == converted:
        return list(pieces)
    ops = difflib.SequenceMatcher(None, orig, converted, autojunk=False).get_opcodes()

    def at(b: int) -> int:
        if b <= 0:
            return 0
        if b >= len(orig):
            return len(converted)
        for tag, i1, i2, j1, j2 in ops:
            if i1 <= b <= i2 and i1 != i2:
                if tag == "equal":
                    return j1 + (b - i1)
                if tag == "replace":
                    return j1 + round((b - i1) * (j2 - j1) / (i2 - i1))
                return j1  # delete
        return len(converted)

    out, pos, last = [], 0, 0
    for p in pieces:
        pos += len(p)
        cut = max(last, at(pos))
        out.append(converted[last:cut])
        last = cut
    out[-1] += converted[last:]
    return out


# ---- one request -------------------------------------------------------------------------------------------

class Scripter:
    """One request's script: decided by its language tag, or (nothing asked) by the detected language once an
    engine names it (``detected``), else per text by :func:`looks_chinese`. Converting the same text twice gives
    the same answer (memoised), so streamed sentences and the result's agree."""

    def __init__(self, language: str, setting: str = "simplified") -> None:
        self.language = language or ""
        self.setting = setting
        try:
            self.asked = bool(parse(self.language).code)
        except UnknownLanguage:
            self.asked = True  # the engine refuses it; nothing of ours to convert
        self.target: Target | None = target_for(self.language, setting) if self.asked else None
        self.detected_code = ""
        self.failed = ""  # why no conversion could be made (no OpenCC), once
        self._memo: dict[tuple[Target, str], str] = {}
        self._said: dict[int, list[tuple[str, str]]] = {}  # live: each utterance's sentences (as made, as sent)

    def detected(self, code: str) -> None:
        """An engine named the language it heard (a code or a name)."""
        if not self.asked and code:
            self.detected_code = code
            self.target = target_for("", self.setting, code)

    def _target_for_text(self, text: str) -> Target | None:
        if self.asked or self.detected_code:
            return self.target
        return for_setting(self.setting) if looks_chinese(text) else None

    def text(self, text: str, target: Target | None = None, *, decided: bool = False) -> str:
        t = target if decided else self._target_for_text(text)
        if t is None or not text or not has_han(text):
            return text
        key = (t, text)
        if key not in self._memo:
            try:
                self._memo[key] = convert(text, t)
            except NoOpenCC as e:
                if not self.failed:
                    self.failed = str(e)
                    print(f"hasr worker: {e}; Chinese characters are sent as the model wrote them",
                          file=sys.stderr, flush=True)
                self._memo[key] = punctuate(text)
        return self._memo[key]

    # events ---------------------------------------------------------------------------------------------------
    def sentence(self, text: str, segment: int) -> str:
        out = self.text(text)
        self._said.setdefault(segment, []).append((text, out))
        return out

    def turn_text(self, segment: int, text: str) -> str:
        """A completed utterance's text: its converted sentences joined the way the engine joined them."""
        said = self._said.pop(segment, [])
        return _rejoin([a for a, _ in said], [b for _, b in said], text) or self.text(text)

    # the result -----------------------------------------------------------------------------------------------
    def result(self, res: Transcript) -> Transcript:
        """Convert every text of ``res`` in place and record the script (None: not Chinese)."""
        target = self._result_target(res)
        if target is None:
            res.script = res.script_conversion = None
            return res

        def conv(s: str) -> str:
            return self.text(s, target, decided=True)

        sentences = res.per_sentence
        before = [s.text for s in sentences]
        for s in sentences:
            s.text = _convert_sentence(s.text, s.words, conv)
        for w in res.sent_windows:
            w.text = conv(w.text)
        after = [s.text for s in sentences]
        joined = _rejoin(before, after, res.final) if sentences else None
        res.final = conv(res.final) if joined is None else joined
        res.draft = conv(res.draft)
        for t in res.turns or []:
            if t.text is not None:
                mine = [k for k, s in enumerate(sentences) if s.segment == t.segment]
                t.text = _rejoin([before[k] for k in mine], [after[k] for k in mine], t.text) or conv(t.text)
        if self.failed:
            res.script, res.script_conversion = "as-is", None
            res.script_note = f"{self.failed}; the characters are as the model wrote them"
        else:
            res.script, res.script_conversion = target.script, target.conversion or None
        return res

    def _result_target(self, res: Transcript) -> Target | None:
        if self.asked:
            return self.target
        if isinstance(res.language_code, str) and res.language_code:
            return target_for("", self.setting, res.language_code)
        if res.language:
            t = target_for("", self.setting, res.language)
            if t is not None:
                return t
        if self.detected_code:
            return self.target
        return for_setting(self.setting) if looks_chinese(res.final) else None


def _rejoin(before: list[str], after: list[str], joined: str) -> str | None:
    """``after`` joined like ``before`` made ``joined`` (stripped pieces joined by "", by " ", or by
    ``languages.join_sentences``'s rule: a space only where neither side of the join is a mark); None when it
    was not a join of them."""
    if not before:
        return None
    rules: list[Callable[[list[str]], str]] = [
        lambda xs: "".join(t.strip() for t in xs), lambda xs: " ".join(t.strip() for t in xs if t.strip()),
        lambda xs: join_sentences(xs, "zh")]
    for rule in rules:
        if rule(before) == joined:
            return rule(after)
    return None


def _convert_sentence(text: str, words: list[Word] | UnsetType, conv: Callable[[str], str]) -> str:
    """One sentence's converted text; its words (in place) cut from the converted text."""
    new = conv(text)
    if isinstance(words, list) and words:
        pieces = [w.word for w in words]
        joined = "".join(pieces)
        lead = len(joined) - len(joined.lstrip())
        if joined.strip() == text.strip() and joined.strip():
            body = split_like(pieces, " " * lead + conv(joined.strip())) if new != text else pieces
        else:
            body = [conv(p) for p in pieces]
        for w, p in zip(words, body, strict=True):
            w.word = p
    return new

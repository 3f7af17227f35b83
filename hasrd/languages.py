"""Language names, codes and tags: R2T2 wants full names ("Chinese"), faster-whisper wants codes ("zh").

Requests may carry a name ("Chinese", "chinese", "Mandarin", "Traditional Chinese"), a code ("zh", "cmn",
"yue") or a BCP-47 tag ("zh-CN", "zh_TW", "zh-Hant-TW", "cmn-Hans-CN", "en-US"); :func:`parse` reads one into a
:class:`Language` (name, code, and the script / region subtags the tag said), ``resolve`` maps it to the (name,
code) pair the engines use. A tag must be well formed: language[-extlang][-script][-region][-variant...]
[-singleton-extension...]; a region is not checked against ISO 3166 ("zh-XX" is Chinese), but a subtag out of
place ("zh-XX-foo") is refused. Chinese tags: the script subtag must be Hans or Hant (hasr cannot write pinyin
or other romanisations), and no variant (zh-hakka, zh-xiang name varieties hasr would decode as Mandarin).

``zh-HK`` and ``zh-MO`` (no explicit ``cmn``) are Cantonese speech ("yue"), as in Azure, AWS Transcribe, Apple
and Chrome's speech recognition, and as hasr always took ``zh-HK``; ``cmn-HK`` / ``cmn-Hant-HK`` ask for
Mandarin written the Hong Kong way. Which script the text is written in is hasrd/zhscript.py's to decide.

Pure and import-light (standard library only: no numpy), so the daemon validates a request's language with
``resolve`` before it decodes audio or wakes a worker; an unknown one raises :class:`UnknownLanguage` (a
ValueError whose message is the sentence to show, naming the accepted forms). Whether a particular model takes
a known language (R2T2 knows fewer than Whisper) is the worker's to say.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

# Whisper's codes with the names Qwen3-ASR / R2T2 use (Qwen3-ASR's list first, then the rest of Whisper's).
NAMES: dict[str, str] = {
    "zh": "Chinese", "en": "English", "yue": "Cantonese", "ar": "Arabic", "de": "German", "fr": "French",
    "es": "Spanish", "pt": "Portuguese", "id": "Indonesian", "it": "Italian", "ko": "Korean", "ru": "Russian",
    "th": "Thai", "vi": "Vietnamese", "ja": "Japanese", "tr": "Turkish", "hi": "Hindi", "ms": "Malay",
    "nl": "Dutch", "sv": "Swedish", "da": "Danish", "fi": "Finnish", "pl": "Polish", "cs": "Czech",
    "tl": "Filipino", "fa": "Persian", "el": "Greek", "hu": "Hungarian", "mk": "Macedonian", "ro": "Romanian",
    "af": "Afrikaans", "am": "Amharic", "as": "Assamese", "az": "Azerbaijani", "ba": "Bashkir",
    "be": "Belarusian", "bg": "Bulgarian", "bn": "Bengali", "bo": "Tibetan", "br": "Breton", "bs": "Bosnian",
    "ca": "Catalan", "cy": "Welsh", "et": "Estonian", "eu": "Basque", "fo": "Faroese", "gl": "Galician",
    "gu": "Gujarati", "ha": "Hausa", "haw": "Hawaiian", "he": "Hebrew", "hr": "Croatian", "ht": "Haitian Creole",
    "hy": "Armenian", "is": "Icelandic", "jw": "Javanese", "ka": "Georgian", "kk": "Kazakh", "km": "Khmer",
    "kn": "Kannada", "la": "Latin", "lb": "Luxembourgish", "ln": "Lingala", "lo": "Lao", "lt": "Lithuanian",
    "lv": "Latvian", "mg": "Malagasy", "mi": "Maori", "ml": "Malayalam", "mn": "Mongolian", "mr": "Marathi",
    "mt": "Maltese", "my": "Burmese", "ne": "Nepali", "nn": "Nynorsk", "no": "Norwegian", "oc": "Occitan",
    "pa": "Punjabi", "ps": "Pashto", "sa": "Sanskrit", "sd": "Sindhi", "si": "Sinhala", "sk": "Slovak",
    "sl": "Slovenian", "sn": "Shona", "so": "Somali", "sq": "Albanian", "sr": "Serbian", "su": "Sundanese",
    "sw": "Swahili", "ta": "Tamil", "te": "Telugu", "tg": "Tajik", "tk": "Turkmen", "tt": "Tatar",
    "uk": "Ukrainian", "ur": "Urdu", "uz": "Uzbek", "yi": "Yiddish", "yo": "Yoruba",
}
# The 30 languages R2T2 (Qwen3-ASR) takes by name: the first 30 of NAMES (qwen_asr SUPPORTED_LANGUAGES).
R2T2_LANGUAGES: tuple[str, ...] = tuple(list(NAMES.values())[:30])
ALIASES: dict[str, str] = {
    "mandarin": "zh", "putonghua": "zh", "cmn": "zh", "zho": "zh", "chi": "zh", "eng": "en", "tagalog": "tl",
    "farsi": "fa", "fil": "tl", "javanese": "jw", "jv": "jw", "iw": "he", "castilian": "es", "flemish": "nl",
    "moldavian": "ro",
    "burmese": "my", "nb": "no", "bokmal": "no", "panjabi": "pa", "sinhalese": "si", "valencian": "ca",
    "pushto": "ps", "haitian": "ht", "letzeburgesch": "lb", "guoyu": "zh",
}
# Languages written without spaces between sentences: per-sentence texts are joined with "" (the seed's rule).
NO_SPACE = frozenset({"zh", "yue", "ja", "th", "lo", "km", "my", "bo"})
_BY_NAME = {name.lower(): code for code, name in NAMES.items()}


class UnknownLanguage(ValueError):
    """The request named a language neither R2T2 nor Whisper knows, or a tag that is not well formed."""


@dataclass(frozen=True)
class Language:
    """A request's language as hasr reads it. ``script`` and ``region`` are what the tag said ("" = nothing),
    canonical case ("Hant", "TW"); ``code`` is whisper's code ("" = detect)."""

    name: str
    code: str
    script: str = ""
    region: str = ""


# Whole names that say a script too.
_SCRIPT_NAMES: dict[str, Language] = {
    "traditional chinese": Language("Chinese", "zh", "Hant"), "simplified chinese": Language("Chinese", "zh", "Hans"),
    "chinese traditional": Language("Chinese", "zh", "Hant"), "chinese simplified": Language("Chinese", "zh", "Hans"),
}
CHINESE_CODES = frozenset({"zh", "yue"})
CHINESE_SCRIPTS = ("Hans", "Hant")
# Regions where a zh tag without "cmn" means Cantonese speech (see the module docstring).
CANTONESE_REGIONS = frozenset({"HK", "MO"})
ACCEPTED = ("a name such as 'Chinese', 'Mandarin', 'Cantonese' or 'English', a code such as 'zh', 'yue' or 'en', "
            "or a BCP-47 tag such as 'zh-CN', 'zh-Hans', 'zh-TW', 'zh-HK', 'zh-Hant' or 'en-US'")
_SCRIPT = re.compile(r"[a-z]{4}")
_REGION = re.compile(r"[a-z]{2}|[0-9]{3}")
_VARIANT = re.compile(r"[a-z0-9]{5,8}|[0-9][a-z0-9]{3}")
_EXT = re.compile(r"[a-z0-9]{1,8}")


def _unknown(raw: str, why: str = "") -> UnknownLanguage:
    return UnknownLanguage(f"unknown language {raw!r}{': ' + why if why else ''}: use {ACCEPTED}")


def _code_of(sub: str) -> str | None:
    return ALIASES.get(sub) or (sub if sub in NAMES else None)


def parse(language: str | None) -> Language:
    """Read a request's language; ``Language("", "")`` means "detect" ("", "auto", "detect").

    Raises UnknownLanguage (naming the accepted forms) for a language neither R2T2 nor Whisper knows or a tag
    that is not well formed. Safe to call in the daemon.
    """
    raw = (language or "").strip()
    if not raw or raw.lower() in ("auto", "detect"):
        return Language("", "")
    key = raw.lower().replace("_", "-")
    if key in _SCRIPT_NAMES:
        return _SCRIPT_NAMES[key]
    whole = _code_of(key) or _BY_NAME.get(key)
    if whole is not None:
        return Language(NAMES[whole], whole)
    parts = key.split("-")
    code = _code_of(parts[0])
    if code is None or not 2 <= len(parts[0]) <= 3:
        raise _unknown(raw)
    i, extlang = 1, False
    if i < len(parts) and len(parts[i]) == 3 and parts[i].isalpha():  # extlang: zh-yue, zh-cmn
        sub = _code_of(parts[i])
        if sub is None:
            raise _unknown(raw, f"{parts[i]!r} is not a language hasr knows")
        code, extlang, i = sub, True, i + 1
    script = region = ""
    if i < len(parts) and _SCRIPT.fullmatch(parts[i]):
        script, i = parts[i].title(), i + 1
    if i < len(parts) and _REGION.fullmatch(parts[i]):
        region, i = parts[i].upper(), i + 1
    variants = 0
    while i < len(parts) and _VARIANT.fullmatch(parts[i]):
        variants, i = variants + 1, i + 1
    if i < len(parts) and len(parts[i]) == 1 and parts[i].isalnum():  # -u-..., -x-...: ignored
        rest = parts[i + 1:]
        if rest and all(_EXT.fullmatch(x) for x in rest):
            i = len(parts)
    if i != len(parts):
        raise _unknown(raw, f"{parts[i]!r} is out of place in a language tag" if parts[i] else "an empty subtag")
    if code == "zh" and not extlang and parts[0] != "cmn" and region in CANTONESE_REGIONS:
        code = "yue"
    if code in CHINESE_CODES:
        if script and script not in CHINESE_SCRIPTS:
            raise _unknown(raw, f"hasr writes Chinese in Hans (simplified) or Hant (traditional), not {script}")
        if variants:
            raise _unknown(raw, "a Chinese variety or romanisation hasr does not write")
    return Language(NAMES[code], code, script, region)


def resolve(language: str | None) -> tuple[str, str]:
    """Map a request's language to (full name, whisper code); ("", "") means "detect" ("", "auto", "detect").

    Raises UnknownLanguage for a language neither R2T2 nor Whisper knows. Safe to call in the daemon.
    """
    lang = parse(language)
    return lang.name, lang.code


def joiner(code: str) -> str:
    """The separator between sentences of this language that end with a mark."""
    return "" if code in NO_SPACE else " "


def is_mark(ch: str) -> bool:
    """Punctuation of any script (。，！？ . , " 」 ...)."""
    return unicodedata.category(ch).startswith("P")


def spaced(ch: str) -> bool:
    """Whether ``ch`` is of a script that puts spaces between words (and so between sentences)."""
    if ch.isspace():
        return False
    o = ord(ch)
    return not (0x2E80 <= o <= 0x9FFF or 0x3000 <= o <= 0x303F or 0xF900 <= o <= 0xFAFF or 0xFF00 <= o <= 0xFFEF
                or 0x0E00 <= o <= 0x0EFF or 0x1000 <= o <= 0x109F or 0x1780 <= o <= 0x17FF or 0x20000 <= o <= 0x2FFFF)


def gap(before: str, after: str, code: str) -> str:
    """What goes between two sentences: one space where words are spaced; in a script written without spaces
    nothing after or before a mark (as the seed joins them), but a space where neither side has one, or where
    both sides are of a spaced script ("OK." + "Yes" in a Chinese file). Whisper often ends a Chinese segment
    without 。, and "今天天气很好" + "我们去公园" must not run into one sentence."""
    if joiner(code) == " ":
        return " "
    if not before or not after:
        return ""
    if spaced(before[-1]) and spaced(after[0]):
        return " "
    return "" if is_mark(before[-1]) or is_mark(after[0]) else " "


def join_sentences(texts: list[str], code: str) -> str:
    """Join per-sentence texts (each stripped, the empty ones left out) with :func:`gap` between them."""
    out = ""
    for t in texts:
        t = t.strip()
        if t:
            out += (gap(out, t, code) if out else "") + t
    return out

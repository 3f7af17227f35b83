"""Language names and codes: R2T2 wants full names ("Chinese"), faster-whisper wants codes ("zh").

Requests may carry either ("Chinese", "chinese", "zh", "zh-CN", "zh_TW", "en-US", "Mandarin"); ``resolve`` maps
them to one (name, code) pair. Pure and import-light (standard library only: no numpy), so the daemon
validates a request's language with ``resolve`` before it decodes audio or wakes a worker; an unknown one
raises :class:`UnknownLanguage` (a ValueError whose message is the sentence to show). Whether a particular
model takes a known language (R2T2 knows fewer than Whisper) is the worker's to say.
"""

from __future__ import annotations

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
    "farsi": "fa", "fil": "tl", "javanese": "jw", "jv": "jw", "iw": "he", "castilian": "es", "flemish": "nl", "moldavian": "ro",
    "burmese": "my", "nb": "no", "bokmal": "no", "panjabi": "pa", "sinhalese": "si", "valencian": "ca",
    "pushto": "ps", "haitian": "ht", "letzeburgesch": "lb", "zh-hk": "yue",
}
# Languages written without spaces between sentences: per-sentence texts are joined with "" (the seed's rule).
NO_SPACE = frozenset({"zh", "yue", "ja", "th", "lo", "km", "my", "bo"})
_BY_NAME = {name.lower(): code for code, name in NAMES.items()}


class UnknownLanguage(ValueError):
    """The request named a language neither R2T2 nor Whisper knows."""


def resolve(language: str | None) -> tuple[str, str]:
    """Map a request's language to (full name, whisper code); ("", "") means "detect" ("", "auto", "detect").

    Raises UnknownLanguage for a language neither R2T2 nor Whisper knows. Safe to call in the daemon.
    """
    raw = (language or "").strip()
    if not raw or raw.lower() in ("auto", "detect"):
        return "", ""
    key = raw.lower().replace("_", "-")
    code = ALIASES.get(key) or (key if key in NAMES else None) or _BY_NAME.get(key)
    if code is None:
        base = key.split("-")[0]
        code = ALIASES.get(base) or (base if base in NAMES else None)
    if code is None:
        raise UnknownLanguage(f"unknown language {raw!r}: use a name such as 'Chinese' or 'English', "
                              f"or a code such as 'zh' or 'en'")
    return NAMES[code], code


def joiner(code: str) -> str:
    """The separator between sentences of this language."""
    return "" if code in NO_SPACE else " "


def join_sentences(texts: list[str], code: str) -> str:
    """Join per-sentence texts: "" for Chinese and friends (as the seed does), one space otherwise."""
    sep = joiner(code)
    if sep == "":
        return "".join(t.strip() for t in texts)
    return sep.join(t.strip() for t in texts if t.strip())

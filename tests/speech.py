"""Test speech: the clips under tests/data, decoding them, and scoring transcripts after normalisation.

The clips: five from pytest-audioeval 0.1.3 (MIT, Kokoro TTS; re-encoded to 16 kHz FLAC, silence trimmed) and
one made with espeak-ng (en-us). Scores: CER for Chinese after traditional->simplified (a small table of the
characters whisper base produces here) and digit->numeral mapping; WER for English after lower-casing,
number words -> digits and dropping punctuation.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

DATA = Path(__file__).parent / "data"
SR = 16000
CLIPS: dict[str, tuple[str, str]] = {
    "en_hello_world": ("en", "Hello world."),
    "en_quick_brown_fox": ("en", "The quick brown fox jumps over the lazy dog."),
    "en_espeak_park": ("en", "The weather is nice today. We are going to the park to take a walk."),
    "zh_jishu": ("zh", "一二三四五六七八九十。"),
    "zh_nihao_shijie": ("zh", "你好世界。"),
    "zh_pangrama": ("zh", "天地玄黄宇宙洪荒日月盈昃辰宿列张。"),
}
_T2S = dict(zip("見們這個說時國會來為後裡對學點開氣車東長門間現實話語讓還過邊請謝問歲號書電們萬與雲風黃張陳蘇列",
                "见们这个说时国会来为后里对学点开气车东长门间现实话语让还过边请谢问岁号书电们万与云风黄张陈苏列",
                strict=True))
_DIGITS = dict(zip("0123456789", "零一二三四五六七八九", strict=True))
_EN_NUMBERS = {w: str(i) for i, w in enumerate(
    ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"])}


def load(name: str) -> np.ndarray:
    """Decode a clip (or any file) to 16 kHz mono float32 with PyAV."""
    import av

    path = name if "/" in name else str(DATA / f"{name}.flac")
    out: list[np.ndarray] = []
    with av.open(path) as c:
        res = av.AudioResampler(format="flt", layout="mono", rate=SR)
        for frame in c.decode(c.streams.audio[0]):
            out.extend(f.to_ndarray().reshape(-1) for f in res.resample(frame))
        out.extend(f.to_ndarray().reshape(-1) for f in res.resample(None))
    return np.concatenate(out).astype(np.float32)


def norm_zh(text: str) -> str:
    text = "".join(_DIGITS.get(c, _T2S.get(c, c)) for c in text)
    return re.sub(r"[\W_]+", "", text)


def norm_en(text: str) -> list[str]:
    words = re.sub(r"[^\w\s']+", " ", text.lower()).split()
    return [_EN_NUMBERS.get(w, w) for w in words]


def edit_distance(a: list[str] | str, b: list[str] | str) -> int:
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def error_rate(lang: str, ref: str, hyp: str) -> float:
    """CER (zh) or WER (en) of ``hyp`` against ``ref`` after normalisation."""
    r, h = (norm_zh(ref), norm_zh(hyp)) if lang == "zh" else (norm_en(ref), norm_en(hyp))
    return edit_distance(r, h) / max(1, len(r))


STAND_IN = Path(__file__).parent / "stand_in"


def cache_home() -> str:
    """An XDG_CACHE_HOME for tests, so that the user's own cache is left alone."""
    import os
    import tempfile

    return str(Path(tempfile.gettempdir()) / f"hasr-test-cache-{os.getuid()}")


def model_dir() -> str:
    """The embedded whisper base, joined and verified once into the test cache (a cheap re-check after); a
    worker started with XDG_CACHE_HOME=cache_home() finds the same copy."""
    from hasrd import embedded

    path = embedded.ensure(Path(cache_home()) / "hasr" / "models").path
    assert path is not None
    return path


def with_path(*dirs: Path) -> str:
    """A PYTHONPATH that puts ``dirs`` first (stand-in packages for a worker subprocess)."""
    import os

    return os.pathsep.join([str(d) for d in dirs] + [p for p in [os.environ.get("PYTHONPATH", "")] if p])


def errors(lang: str, ref: str, hyp: str) -> tuple[int, int]:
    """(edits, reference length) after normalisation: sum these over clips for an aggregate rate."""
    r, h = (norm_zh(ref), norm_zh(hyp)) if lang == "zh" else (norm_en(ref), norm_en(hyp))
    return edit_distance(r, h), len(r)


def direct_text(model: Any, pcm: np.ndarray, code: str) -> str:
    """faster-whisper called directly with its defaults on the same model and machine (the portable yardstick:
    int8 CTranslate2 kernels differ between instruction sets, so fixed limits on one clip are not portable)."""
    segments, _info = model.transcribe(pcm, language=code)
    return "".join(s.text for s in segments) if code == "zh" else " ".join(s.text.strip() for s in segments)

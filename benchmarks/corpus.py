"""The accuracy corpus hasr builds for itself: long and short speech in Chinese and English, silence and noise.

No human recordings with transcripts are to be had offline (notes/models.md), so the corpus is made here:

  zh_long_*   Mandarin sentences spoken by espeak-ng (``cmn-latn-pinyin``, fed tone-numbered pinyin from
              pypinyin), joined with 0.4-1.6 s pauses into 1- and 3-minute files (5 minutes with --long)
  en_long_*   the same in English (``en-us``)
  clip_*      the 27 pytest-audioeval clips (Kokoro TTS, 1-4.5 s, 9 languages) as they ship
  containers  with --containers: the 3-minute Mandarin and English files re-encoded as a user's files come (mp3,
              m4a/AAC, ogg/Opus, an mp4 video with an H.264 track, 8 kHz stereo wav, flac) by ffmpeg; the
              decoder, the resampler and the codecs change the samples a little, and the text must not move
              much with them (issue 38: one container looped where the wav did not)
  silence_*   a minute of silence with faint hum, and a minute of music-like noise (chords, a beat, pink noise):
              any text on these is a hallucination

Files are written once into ``--dir`` (default: $XDG_CACHE_HOME/hasr-bench/corpus) as 16 kHz mono WAV, with
``manifest.jsonl`` beside them (``{"audio", "text", "language", "group"}``, the format ``hasrctl eval`` reads).
Everything is seeded: the same corpus on every machine with the same espeak-ng.

    python benchmarks/corpus.py [--dir DIR] [--long] [--containers]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import tempfile
import wave
from pathlib import Path

import numpy as np

SR = 16000
ZH = [
    "今天天气很好，我们去公园散步吧。", "我每天早上七点起床，然后去跑步。", "这家饭店的菜非常好吃，价格也不贵。",
    "请问火车站怎么走？", "他昨天晚上看了一部很有意思的电影。", "我们下个星期一开会讨论这个问题。",
    "学习一门新的语言需要很多时间和耐心。", "妈妈在厨房里做饭，爸爸在客厅看报纸。", "这本书我已经看了三遍了。",
    "明天可能会下雨，记得带伞。", "我的朋友住在北京，他是一名医生。", "这个城市的交通越来越拥挤了。",
    "你能帮我把窗户打开吗？", "孩子们在操场上踢足球。", "我想买一台新电脑，但是太贵了。",
    "春天来了，花园里的花都开了。", "请大家安静一下，会议马上开始。", "我们应该多吃蔬菜和水果。",
    "这条河从山里流下来，一直流到大海。", "他说话的声音很小，我听不清楚。", "周末我们一起去图书馆看书吧。",
    "飞机晚点了两个小时，大家都很着急。", "老师让我们回家以后认真复习。", "这里的冬天很冷，夏天很热。",
    "他每天坐地铁去公司上班。", "我们要保护环境，节约用水。", "奶奶喜欢在院子里种花。", "你最喜欢什么颜色？",
    "电脑出了问题，我需要重新启动。", "晚上十点以后请不要大声说话。",
]
EN = [
    "The weather is nice today, so we are going for a walk in the park.", "I get up at seven every morning.",
    "This restaurant serves delicious food at a fair price.", "Could you tell me how to get to the station?",
    "She watched an interesting film last night.", "We will discuss this problem at the meeting on Monday.",
    "Learning a new language takes a lot of time and patience.", "My friend lives in Boston and works as a doctor.",
    "Traffic in this city is getting worse every year.", "Would you please open the window for me?",
    "The children are playing football on the field.", "I want to buy a new computer, but it is too expensive.",
    "Spring has come and the flowers in the garden are open.", "Please be quiet, the meeting starts now.",
    "We should eat more vegetables and fruit.", "The river runs down from the mountains to the sea.",
    "He speaks so softly that I cannot hear him.", "Let us go to the library together this weekend.",
    "The flight was two hours late and everyone was worried.", "The teacher asked us to review at home.",
    "Winters here are cold and summers are hot.", "He takes the subway to the office every day.",
    "We must protect the environment and save water.", "My grandmother likes to grow flowers in the yard.",
    "What is your favorite color?", "The computer crashed, so I have to restart it.",
    "Please do not talk loudly after ten in the evening.", "The museum is closed on public holidays.",
    "It took us three hours to climb to the top of the hill.", "Remember to turn off the lights when you leave.",
]


def default_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hasr-bench" / "corpus"


def speak(text: str, language: str) -> np.ndarray:
    """espeak-ng -> 16 kHz mono float32 (Mandarin through tone-numbered pinyin, which cmn-latn-pinyin reads)."""
    if language == "zh":
        from pypinyin import Style, lazy_pinyin

        voice = "cmn-latn-pinyin"
        words = lazy_pinyin(text, style=Style.TONE3, neutral_tone_with_five=True)
        text = " ".join(w if w.isalnum() else ("," if w in "，、" else ".") for w in words)
    else:
        voice = "en-us"
    with tempfile.TemporaryDirectory() as d:
        raw = os.path.join(d, "s.wav")
        subprocess.run(["espeak-ng", "-v", voice, "-s", "150", "-w", raw, text], check=True)
        out = os.path.join(d, "16k.wav")
        subprocess.run(["sox", "-q", "-v", "0.9", raw, "-r", str(SR), "-c", "1", "-b", "16", out], check=True)
        return read_wav(out)


def read_wav(path: str | Path) -> np.ndarray:
    with wave.open(str(path)) as w:
        assert w.getframerate() == SR and w.getnchannels() == 1 and w.getsampwidth() == 2, path
        return np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.float32) / 32768


def write_wav(path: Path, pcm: np.ndarray) -> None:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SR)
        w.writeframes((np.clip(pcm, -1, 1) * 32767).astype("<i2").tobytes())


def long_file(sentences: list[str], language: str, minutes: float, seed: int) -> tuple[np.ndarray, str]:
    """Sentences in a seeded order, each followed by a 0.4-1.6 s pause, until ``minutes`` are filled."""
    rng = random.Random(seed)
    cache: dict[str, np.ndarray] = {}
    parts: list[np.ndarray] = []
    said: list[str] = []
    total = 0
    order: list[str] = []
    while total < minutes * 60 * SR:
        if not order:
            order = list(sentences)
            rng.shuffle(order)
        s = order.pop()
        if s not in cache:
            cache[s] = speak(s, language)
        pause = np.zeros(int(rng.uniform(0.4, 1.6) * SR), np.float32)
        parts += [cache[s], pause]
        said.append(s)
        total += len(cache[s]) + len(pause)
    return np.concatenate(parts), ("" if language == "zh" else " ").join(said)


def silence(seconds: float, seed: int) -> np.ndarray:
    """Near-silence: a faint 50 Hz hum and very low noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * SR)) / SR
    return (0.002 * np.sin(2 * np.pi * 50 * t) + 0.0005 * rng.standard_normal(len(t))).astype(np.float32)


def music(seconds: float, seed: int) -> np.ndarray:
    """Music-like noise: a chord progression, a beat and pink noise, no speech."""
    rng = np.random.default_rng(seed)
    n = int(seconds * SR)
    t = np.arange(n) / SR
    out = np.zeros(n, np.float32)
    chords = [(220.0, 277.2, 329.6), (196.0, 246.9, 293.7), (174.6, 220.0, 261.6), (164.8, 207.7, 246.9)]
    bar = 2 * SR
    for k in range(0, n, bar):
        seg = slice(k, min(n, k + bar))
        for f in chords[(k // bar) % 4]:
            out[seg] += 0.05 * np.sin(2 * np.pi * f * t[seg]) * np.exp(-((t[seg] - t[k]) % 0.5) * 3)
    beat = np.exp(-((t % 0.5) * 40)) * np.sin(2 * np.pi * 60 * t)
    white = rng.standard_normal(n)
    pink = np.cumsum(white) / np.sqrt(np.arange(1, n + 1))  # a rough 1/f tilt
    pink -= np.convolve(pink, np.ones(400) / 400, mode="same")
    return (out + 0.15 * beat + 0.02 * pink / (np.abs(pink).max() + 1e-9)).astype(np.float32)


def audioeval_clips() -> list[dict[str, str]]:
    """The pytest-audioeval clips with their transcripts (language from the folder name)."""
    import importlib.util

    spec = importlib.util.find_spec("pytest_audioeval")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("pytest-audioeval is not installed: pip install --no-deps pytest-audioeval==0.1.3")
    root = Path(list(spec.submodule_search_locations)[0]) / "samples" / "audio"
    out = []
    for wav in sorted(root.glob("*/*.wav")):
        out.append({"audio": str(wav), "text": wav.with_suffix(".txt").read_text(encoding="utf-8").strip(),
                    "language": wav.parent.name,
                    "group": "clips_"
                             f"{'zh' if wav.parent.name == 'zh' else 'en' if wav.parent.name == 'en' else 'other'}"})
    return out


CONTAINERS: dict[str, list[str]] = {
    # name: ffmpeg arguments after the input (the video takes a second input: a still, blue picture)
    "mp3": ["-c:a", "libmp3lame", "-b:a", "64k"],
    "m4a": ["-c:a", "aac", "-b:a", "64k"],
    "opus": ["-c:a", "libopus", "-b:a", "32k"],
    "mp4": ["-c:v", "libx264", "-pix_fmt", "yuv420p", "-shortest", "-c:a", "aac", "-b:a", "64k"],
    "8k_stereo.wav": ["-ar", "8000", "-ac", "2"],
    "flac": ["-c:a", "flac"],
}


def containers(directory: Path, source: Path, text: str, language: str) -> list[dict[str, str]]:
    """``source`` re-encoded into each of CONTAINERS (files that exist are kept), the wav itself first."""
    rows = [{"audio": str(source), "text": text, "language": language, "group": f"containers_{language}"}]
    for ext, args in CONTAINERS.items():
        out = directory / f"{source.stem}.{ext}"
        if not out.exists():
            video = ["-f", "lavfi", "-i", "color=c=blue:s=160x120:r=5"] if ext == "mp4" else []
            tmp = out.with_name(f".{out.name}.part{out.suffix}")
            subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-i", str(source), *video, *args, str(tmp)],
                           check=True)
            tmp.rename(out)
        rows.append({**rows[0], "audio": str(out)})
    return rows


def build(directory: Path, long: bool = False, with_containers: bool = False) -> Path:
    """Write the corpus (files that exist are kept) and its manifest; return the manifest's path."""
    directory.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, str]] = []
    plan = [("zh", ZH, 1.0, 1), ("zh", ZH, 3.0, 2), ("en", EN, 1.0, 3), ("en", EN, 3.0, 4)]
    if long:
        plan += [("zh", ZH, 5.0, 5), ("en", EN, 5.0, 6)]
    for language, sentences, minutes, seed in plan:
        path = directory / f"{language}_long_{minutes:g}min.wav"
        text_path = path.with_suffix(".txt")
        if not (path.exists() and text_path.exists()):
            pcm, text = long_file(sentences, language, minutes, seed)
            write_wav(path, pcm)
            text_path.write_text(text, encoding="utf-8")
        rows.append({"audio": str(path), "text": text_path.read_text(encoding="utf-8"), "language": language,
                     "group": f"long_{language}"})
    for name, make in (("silence_1min", silence), ("music_1min", music)):
        path = directory / f"{name}.wav"
        if not path.exists():
            write_wav(path, make(60.0, 7))
        rows.append({"audio": str(path), "text": "", "language": "", "group": "no_speech"})
    rows += audioeval_clips()
    if with_containers:
        for language in ("zh", "en"):
            wav = directory / f"{language}_long_3min.wav"
            rows += containers(directory, wav, wav.with_suffix(".txt").read_text(encoding="utf-8"), language)
    manifest = directory / "manifest.jsonl"
    manifest.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return manifest


def corpus_file(name: str, given: str = "") -> str:
    """``given`` (a benchmark's --file), else the corpus's file ``name``, built on first use."""
    if given:
        return given
    path = default_dir() / name
    if not path.exists():
        build(default_dir(), long="5min" in name)
    return str(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, default=default_dir())
    ap.add_argument("--long", action="store_true", help="also the 5-minute files")
    ap.add_argument("--containers", action="store_true", help="also the 3-minute files in other containers")
    args = ap.parse_args()
    print(build(args.dir, args.long, args.containers))


if __name__ == "__main__":
    main()

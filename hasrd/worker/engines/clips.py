"""The whisper engine's clips: speech packed into whisper windows, and decoded times moved back to the file's clock.

A clip is VAD spans (on the file's clock) whose audio, the long silences between them shortened, fits one 30 s
window; as faster-whisper's BatchedInferencePipeline packs its own VAD's speech (``collect_chunks``), so that a
file of sentences and pauses takes the windows its speech fills (the corpus's 5-minute English file: 10, where
its spans merged with their pauses took 11).

A silence between two spans (each span carries up to 0.4 s of VAD padding already) is shortened, never removed:
KEEP_SEC of it stays, its middle is left out, so a pause of up to about 1.1 s stays whole and a longer one is
heard as about that long. With every silence left out (the first version of this) whisper base wrote a Mandarin
count followed by 你好世界 as "1234567890" (tests/test_transcripts.py), but that is no rule about pauses: main's
unpacked clips did the same for that file with its second pause 0.49 or 0.52 s long instead of 0.8 s (0.45 and
0.6 s gave characters). whisper base's choice of script for a count flips with tens of ms of any pause in the
window; keeping short pauses whole leaves files of ordinary speech as they were decoded before
(tests/test_clips.py). A pause longer than MAX_GAP_SEC stays whole, as every pause did before packing: speech that
far apart is not heard as one passage (the same sentence said again would look like a decoding loop, and be said
once), and a file never takes more windows than its unpacked clips took.

Only where it costs no text (:func:`packs`): in languages written without spaces (Chinese, Japanese, Thai ...)
every pause stays whole. Packing was the first bad commit of issue 38's Mandarin regression (436753b): on six
2-minute espeak-ng Mandarin files the pooled CER went from 0.58 (pauses whole, a whole first clip) to 0.69 (packed,
a 10 s first clip) with whisper base, and a 3-minute file looped ("殿下殿下 ..."); English (WER 0.015 against 0.022
on a 3-minute file in five containers) kept it. A clip also keeps its VAD spans (``spans``): the mending of a clip
whose decode left speech without words or looped (mending.py) reads them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from hasrd.languages import NO_SPACE

SR = 16000
CLIP_SEC = 30.0  # whisper's window: a clip's audio is at most this long
MAX_GAP_SEC = 2.0  # the longest silence a clip shortens (a longer one stays whole, as before packing)
KEEP_SEC = 0.3  # of each silence a clip shortens, this much stays (half on each side)

Span = tuple[float, float]
ToFile = Callable[[float, bool], float]
"""Seconds into a clip's audio (and whether it is an end) -> seconds on the file's clock."""


def packs(code: str | None) -> bool:
    """Whether a file in language ``code`` (None: not known) gets packed clips and, on the CPU, a short first clip:
    not in languages written without spaces, whose text whisper base decodes worse with either (module docstring)."""
    return code not in NO_SPACE


class Clip:
    """Speech to decode in one whisper window: ``parts``, stretches of the file (samples) whose audio, side by
    side, is the clip's (:meth:`audio`); a time in it maps back to the file's clock (:meth:`to_file`). ``spans``
    are the VAD spans it holds (seconds on the file's clock); ``packed`` False keeps every pause whole."""

    __slots__ = ("keep", "packed", "parts", "size", "spans")

    def __init__(self, span: tuple[float, float], packed: bool = True) -> None:
        a, b = _samples(span)
        self.packed = packed
        self.keep = int(KEEP_SEC * SR) if packed else int(MAX_GAP_SEC * SR)
        self.parts: list[tuple[int, int]] = [(a, b)]
        self.size = b - a  # samples of the clip's audio
        self.spans: list[tuple[float, float]] = [span]

    @classmethod
    def of(cls, spans: list[tuple[float, float]], packed: bool) -> Clip:
        """The clip of these spans (in order, as they would have been added)."""
        clip = cls(spans[0], packed)
        for span in spans[1:]:
            clip.add(span)
        return clip

    def fits(self, span: tuple[float, float]) -> bool:
        """Whether ``span`` (after this clip's end) joins it: the clip's audio with it still fits one window."""
        a, b = _samples(span)
        end = self.parts[-1][1]
        return self.size + self._kept(a - end) + b - max(a, end) <= int(CLIP_SEC * SR)

    def add(self, span: tuple[float, float]) -> None:
        a, b = _samples(span)
        self.spans.append(span)
        a0, end = self.parts[-1]
        gap = a - end
        kept = self._kept(gap)
        if gap <= kept:  # touching, overlapping or a short pause: one stretch of the file
            self.parts[-1] = (a0, max(end, b))
            self.size += max(0, b - end)
            return
        keep = kept // 2
        self.parts[-1] = (a0, end + keep)
        self.parts.append((a - (kept - keep), b))
        self.size += kept + b - a

    def _kept(self, gap: int) -> int:
        """Samples of a silence of ``gap`` samples that stay in the clip: all of one up to ``keep`` or over
        MAX_GAP_SEC, ``keep`` of one between."""
        if gap > int(MAX_GAP_SEC * SR):
            return gap
        return max(0, min(gap, self.keep))

    @property
    def start(self) -> float:
        return self.parts[0][0] / SR

    @property
    def end(self) -> float:
        return self.parts[-1][1] / SR

    def audio(self, pcm: np.ndarray) -> np.ndarray:
        if len(self.parts) == 1:
            a, b = self.parts[0]
            return pcm[a:b]
        return np.concatenate([pcm[a:b] for a, b in self.parts])

    def to_file(self, t: float, end: bool = False) -> float:
        """Seconds into the clip's audio -> seconds on the file's clock (a time on the seam between two parts: an
        end stays with the part before it, a start goes to the part after it)."""
        s = float(t) * SR
        at = 0
        for k, (a, b) in enumerate(self.parts):
            n = b - a
            last = k == len(self.parts) - 1
            if last or s < at + n or (end and s <= at + n):
                into = max(s - at, 0.0)
                return round((a + (into if last else min(into, n))) / SR, 3)
            at += n
        return self.end  # pragma: no cover - a clip has parts


class Passed:
    """The clips' stream passed the end of a piece of audio (``end_s``, on the file's clock), speech or not."""

    __slots__ = ("end_s",)

    def __init__(self, end_s: float) -> None:
        self.end_s = end_s


def stream(pieces: Iterable[tuple[int, int, list[Span]]], total: int, packed: bool, first_sec: float,
           spoken: Callable[[list[Span]], None]) -> Iterator[Clip | Passed]:
    """A file's speech clips from its pieces (start and end in samples, VAD spans in seconds from the piece's
    start), each piece's spans on the file's clock told to ``spoken`` first; and how far the stream passed (where a
    first batch may stop, and progress moves). A clip may cross a piece's end: the spans are packed over the whole
    file, so that a piece's last words do not make a short clip of their own, each paying a whole 30 s window of
    the encoder and the decoder (16 clips for a 5-minute file where 10 hold it). The first clip holds at most
    ``first_sec`` of the file."""
    yielded = False
    clip: Clip | None = None  # the clip still growing
    for start, end, spans in pieces:
        if spans:
            timed = [(start / SR + a, start / SR + b) for a, b in spans]
            spoken(timed)
            for span in timed:
                if clip is not None and clip.fits(span) and (yielded or span[1] - clip.start <= first_sec):
                    clip.add(span)
                    continue
                if clip is not None:
                    yield clip
                    yielded = True
                clip = Clip(span, packed)
        yield Passed(end / SR if clip is None else clip.start)  # all before the growing clip
    if clip is not None:
        yield clip
        yield Passed(total / SR)


def _samples(span: tuple[float, float]) -> tuple[int, int]:
    return int(round(span[0] * SR)), int(round(span[1] * SR))


class Moved:
    """A decoded segment with its times (and its words') moved to the file's clock by ``to_file``."""

    def __init__(self, seg: Any, to_file: ToFile) -> None:
        self.seg = seg
        self.start, self.end = to_file(float(seg.start), False), to_file(float(seg.end), True)
        self.words = [Word(w, to_file) for w in seg.words] if seg.words else None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.seg, name)


class Word:
    def __init__(self, w: Any, to_file: ToFile) -> None:
        self.word, self.probability = w.word, w.probability
        self.start, self.end = to_file(float(w.start), False), to_file(float(w.end), True)

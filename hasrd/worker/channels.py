"""One speaker per channel: which channel a stretch of sound belongs to, as pure functions over the samples.

A call or a podcast recorded per microphone has each voice loud on its own channel and faint (bleed, cross-talk)
on the others. Each channel is cut into 100 ms blocks and measured; a channel keeps a block unless another channel
carries it at least ``BLEED_DB`` louder, so a sentence heard on two channels is transcribed once, on the channel
that carries it, while two people talking at once (each loud on their own channel) both keep their words. Kept
blocks are widened by ``HOLD`` blocks on each side so that a word's soft start and end are not cut, and the cut
edges fade over 10 ms (no clicks for the decoder to hear).

:func:`drop_echoes` is the second net: a sentence another channel also produced (the same words at the same time)
stays only on the channel where it was loudest.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

import numpy as np

SR = 16000
BLOCK = 1600  # 100 ms
BLEED_DB = 10.0
HOLD = 2  # blocks kept around a kept block
FADE = 160  # 10 ms
SILENT_DB = -60.0


def levels(pcm: np.ndarray) -> np.ndarray:
    """[channels, blocks] RMS level in dB of ``pcm`` ([frames, channels])."""
    frames, chans = pcm.shape
    blocks = max(1, -(-frames // BLOCK))
    padded = np.zeros((blocks * BLOCK, chans), dtype=np.float32)
    padded[:frames] = pcm
    power = (padded.reshape(blocks, BLOCK, chans).astype(np.float64) ** 2).mean(axis=1)
    return (10 * np.log10(np.maximum(power, 1e-12))).T


def owners(pcm: np.ndarray, bleed_db: float = BLEED_DB, hold: int = HOLD) -> np.ndarray:
    """[channels, blocks] whether each channel keeps each block: not ``bleed_db`` under the loudest channel there,
    widened by ``hold`` blocks."""
    lv = levels(pcm)
    keep = lv >= lv.max(axis=0, keepdims=True) - bleed_db
    keep &= lv > SILENT_DB
    if hold:
        wide = keep.copy()
        for k in range(1, hold + 1):
            wide[:, k:] |= keep[:, :-k]
            wide[:, :-k] |= keep[:, k:]
        keep = wide
    return keep


def gated(pcm: np.ndarray) -> list[np.ndarray]:
    """Each channel of ``pcm`` ([frames, channels]) with the blocks it does not keep silenced (10 ms fades)."""
    frames, chans = pcm.shape
    keep = owners(pcm)
    out = []
    for c in range(chans):
        gain = np.repeat(keep[c].astype(np.float64), BLOCK)[:frames]
        if frames > FADE:  # a moving average over 10 ms makes each edge of the gain a linear ramp
            sums = np.concatenate([[0.0], np.cumsum(np.pad(gain, (FADE // 2, FADE - FADE // 2)))])
            gain = (sums[FADE:FADE + frames] - sums[:frames]) / FADE
        out.append(np.ascontiguousarray(pcm[:, c]) * gain.astype(np.float32))
    return out


@dataclass(frozen=True)
class Said:
    """A sentence of one channel, for :func:`drop_echoes`."""

    channel: int
    start: float
    end: float
    text: str


def _overlap(a: Said, b: Said) -> float:
    inter = min(a.end, b.end) - max(a.start, b.start)
    return inter / max(1e-6, min(a.end - a.start, b.end - b.start))


def drop_echoes(said: list[Said], pcm: np.ndarray) -> list[Said]:
    """``said`` without the sentences another channel also produced at the same time with (nearly) the same words,
    keeping each on the channel that was loudest over it; the order is kept."""
    def loud(s: Said) -> float:
        a, b = int(s.start * SR), max(int(s.start * SR) + 1, int(s.end * SR))
        return float(np.mean(pcm[a:b, s.channel].astype(np.float64) ** 2)) if b <= len(pcm) else 0.0

    dropped: set[int] = set()
    for i, a in enumerate(said):
        for j in range(i + 1, len(said)):
            b = said[j]
            if a.channel == b.channel or i in dropped or j in dropped or _overlap(a, b) < 0.5:
                continue
            if difflib.SequenceMatcher(None, a.text.lower(), b.text.lower()).ratio() >= 0.8:
                dropped.add(j if loud(a) >= loud(b) else i)
    return [s for k, s in enumerate(said) if k not in dropped]

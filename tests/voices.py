"""Conversations of espeak-ng voices with their reference of who spoke when, and the diarization error rate
(tests/test_speakers*.py, benchmarks/speakers.py).

Voices: ``m`` espeak-ng's male US English (en-us+m3), ``f`` its female (en-us+f3), ``h`` the female voice pitched up
(espeak-ng's pitch 90 of 99: a pitch-shifted copy, a third speaker to the tests' model, speakernet.py). Measured
with that model on 1.5 s windows: windows of one voice 0.64-0.80 alike on average, of two voices 0.14-0.25.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import tempfile
from collections.abc import Iterable

import numpy as np

SR = 16000
VOICES = {"m": ("en-us+m3", 50), "f": ("en-us+f3", 50), "h": ("en-us+f3", 90)}  # espeak-ng voice, pitch
LINES = [
    "The quarterly report shows that sales grew in every region except the north.",
    "I think we should move the meeting to Thursday because half of the team is travelling.",
    "Please remember to water the plants on the balcony while I am away.",
    "The train to the airport leaves every twenty minutes from the central station.",
    "Could you send me the slides before lunch so that I can check the numbers?",
    "We found a small bug in the billing code and fixed it this morning.",
    "My sister bought a new bicycle and rides it to work every day.",
    "The museum opens at nine and closes early on Sundays in the winter.",
    "Nobody expected the storm to last for three whole days.",
    "Let us order pizza for the team after the release tonight.",
    "The library will be closed next week for painting and repairs.",
    "Our new colleague starts on Monday and will join the design group.",
]


def speak(text: str, voice: str) -> np.ndarray:
    """``text`` said by ``voice`` (VOICES), as 16 kHz mono float32."""
    name, pitch = VOICES[voice]
    with tempfile.TemporaryDirectory() as d:
        raw, out = os.path.join(d, "raw.wav"), os.path.join(d, "out.raw")
        subprocess.run(["espeak-ng", "-v", name, "-p", str(pitch), "-s", "160", "-w", raw, text], check=True)
        subprocess.run(["sox", raw, "-r", str(SR), "-c", "1", "-b", "32", "-e", "floating-point", "-t", "raw", out],
                       check=True)
        pcm = np.fromfile(out, dtype="<f4").astype(np.float32) * 0.8
    loud = np.flatnonzero(np.abs(pcm) > 0.01 * np.abs(pcm).max())  # espeak-ng's silence before and after is no turn
    return pcm[loud[0]:loud[-1] + 1] if len(loud) else pcm


Turn = tuple[float, float, str]  # start, end, speaker


def conversation(turns: Iterable[tuple[str, str]], gap: float = 0.5, overlap: float = 0.0,
                 lead: float = 0.5) -> tuple[np.ndarray, list[Turn], list[str]]:
    """Mono mix of (voice, text) turns, ``gap`` s apart (a negative gap: the next turn starts that much before the
    last ends, an overlap), and the reference turns and texts."""
    pieces: list[tuple[float, np.ndarray, str, str]] = []
    t = lead
    for voice, text in turns:
        pcm = speak(text, voice)
        pieces.append((t, pcm, voice, text))
        t += len(pcm) / SR + gap
    end = max(s + len(p) / SR for s, p, _, _ in pieces) + lead
    mix = np.zeros(int(end * SR) + 1, dtype=np.float32)
    ref: list[Turn] = []
    for s, pcm, voice, _ in pieces:
        a = int(s * SR)
        mix[a:a + len(pcm)] += pcm
        ref.append((s, s + len(pcm) / SR, voice))
    return mix, ref, [text for _, _, _, text in pieces]


def stereo(turns: list[tuple[int, str, float]], bleed: float = 0.1,
           voices: tuple[str, str] = ("m", "f")) -> tuple[np.ndarray, list[tuple[float, float, int, str]]]:
    """A two-channel call: each (channel, text, start) said by that channel's voice at ``start`` s, loud on its
    own channel and at ``bleed`` of its level on the other. Returns [frames, 2] and (start, end, channel, text)."""
    said = [(c, text, start, speak(text, voices[c])) for c, text, start in turns]
    end = max(start + len(p) / SR for _, _, start, p in said) + 0.5
    out = np.zeros((int(end * SR) + 1, 2), dtype=np.float32)
    ref = []
    for c, text, start, pcm in said:
        a = int(start * SR)
        out[a:a + len(pcm), c] += pcm
        out[a:a + len(pcm), 1 - c] += bleed * pcm
        ref.append((start, start + len(pcm) / SR, c, text))
    return out, ref


def _frames(turns: Iterable[Turn], n: int, step: float) -> list[set[str]]:
    out: list[set[str]] = [set() for _ in range(n)]
    for s, e, who in turns:
        for k in range(max(0, int(s / step)), min(n, int(e / step))):
            out[k].add(who)
    return out


def der(ref: list[Turn], hyp: list[Turn], collar: float = 0.25, step: float = 0.01) -> dict[str, float]:
    """Diarization error rate (NIST's: missed speech + false alarm + confusion over the reference's speech, each
    speaker counted, with the best mapping of hypothesis labels to reference speakers), ignoring ``collar`` s
    around every reference boundary as scoring tools do. Returns the three parts and the total."""
    end = max([e for _, e, _ in ref] + [e for _, e, _ in hyp] + [0.0]) + 1.0
    n = int(end / step)
    skip = np.zeros(n, dtype=bool)
    for s, e, _ in ref:
        for t in (s, e):
            skip[max(0, int((t - collar) / step)):min(n, int((t + collar) / step))] = True
    r, h = _frames(ref, n, step), _frames(hyp, n, step)
    rs, hs = sorted({w for _, _, w in ref}), sorted({w for _, _, w in hyp})
    best: dict[str, float] | None = None
    for perm in itertools.permutations(rs + [None] * max(0, len(hs) - len(rs)), len(hs)):  # type: ignore[list-item]
        mapping = dict(zip(hs, perm, strict=True))
        total = miss = fa = conf = 0
        for k in range(n):
            if skip[k]:
                continue
            rk, hk = r[k], {mapping[x] for x in h[k]}
            total += len(rk)
            miss += max(0, len(rk) - len(h[k]))
            fa += max(0, len(h[k]) - len(rk))
            conf += min(len(rk), len(h[k])) - len(rk & hk)
        score = (miss + fa + conf) / max(1, total)
        if best is None or score < best["der"]:
            best = {"der": score, "missed": miss / max(1, total), "false_alarm": fa / max(1, total),
                    "confusion": conf / max(1, total)}
    return best or {"der": 0.0, "missed": 0.0, "false_alarm": 0.0, "confusion": 0.0}

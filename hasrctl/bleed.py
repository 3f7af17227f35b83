"""Bleed between two recorded sides of one call: without headphones the speakers play the others' voices into the
microphone too, and meeting mode would write their words twice, once as "You". The rule, per 100 ms block:

    a microphone block is bleed, and is silenced, when the monitor (what the desktop plays) carries sound,
    louder than FLOOR_DB, and the microphone's level is more than MARGIN_DB (10 dB) below the monitor's.

Levels are RMS in dB of full scale. The monitor is what is played, digitally; the microphone hears it through
the air, later (output latency, the distance) and quieter. The user's own voice, close to the microphone, is
louder than what the speakers bring, so it passes. A microphone block is compared with the loudest of the
monitor's blocks just before, at and after it, so that the speakers' delay and the two recorders' start within
a block of each other do not matter.

What it costs: while the others talk, the user's words in a block more than 10 dB quieter than the call are
silenced too (double talk under a loud call); the rule prefers losing those to writing the others' words twice.
Headphones put no bleed there and lose nothing. Pure functions of the blocks (numpy only): meeting mode applies
it live (``BleedGate``), and a recording with a channel per side could apply it the same way.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence

import numpy as np

BLOCK_MS = 100
MARGIN_DB = 10.0
FLOOR_DB = -50.0  # a monitor quieter than this plays nothing (noise, dither, silence)


def level_db(pcm16: bytes) -> float:
    """RMS level of little-endian PCM16 in dB of full scale; -inf for silence or no samples."""
    samples = np.frombuffer(pcm16[: len(pcm16) // 2 * 2], dtype="<i2").astype(np.float64)
    if not samples.size:
        return -math.inf
    rms = float(np.sqrt(np.mean(samples * samples))) / 32768.0
    return 20.0 * math.log10(rms) if rms > 0 else -math.inf


def is_bleed(mic_db: float, monitor_db: float, margin_db: float = MARGIN_DB, floor_db: float = FLOOR_DB) -> bool:
    """Whether a microphone block at ``mic_db`` is what the speakers put there while they play ``monitor_db``."""
    return monitor_db > floor_db and mic_db < monitor_db - margin_db


def gate(mic: Sequence[bytes], monitor: Sequence[bytes], margin_db: float = MARGIN_DB,
         floor_db: float = FLOOR_DB) -> list[bytes]:
    """The microphone's blocks, those that are bleed replaced by silence of the same length; block k of both
    sides covers the same time, and block k is judged against the loudest monitor block of k-1, k and k+1."""
    levels = [level_db(b) for b in monitor]
    out: list[bytes] = []
    for k, block in enumerate(mic):
        near = levels[max(0, k - 1): k + 2] or [-math.inf]
        out.append(bytes(len(block)) if is_bleed(level_db(block), max(near), margin_db, floor_db) else block)
    return out


class BleedGate:
    """:func:`gate` on live blocks: each pair goes in as it is recorded, and the pair before it comes out, its
    microphone block judged now that the monitor's next block is known (one block, 100 ms, of delay)."""

    def __init__(self, margin_db: float = MARGIN_DB, floor_db: float = FLOOR_DB) -> None:
        self.margin_db, self.floor_db = margin_db, floor_db
        self.window: deque[tuple[bytes, bytes]] = deque(maxlen=3)  # the last three pairs, oldest first
        self.held: tuple[bytes, bytes] | None = None  # the pair that waits for the monitor's next block

    def push(self, mic: bytes, monitor: bytes) -> tuple[bytes, bytes] | None:
        """The previous (microphone gated, monitor) pair; None for the first."""
        self.window.append((mic, monitor))
        out, self.held = self._judged(), (mic, monitor)
        return out

    def flush(self) -> tuple[bytes, bytes] | None:
        """The last pair, judged without a next block (at the end of the recording)."""
        if self.held is None:
            return None
        self.window.append((b"", b""))
        out, self.held = self._judged(), None
        return out

    def _judged(self) -> tuple[bytes, bytes] | None:
        if self.held is None:
            return None
        mics = [m for m, _ in self.window]
        monitors = [m for _, m in self.window]
        k = len(self.window) - 2  # the held pair's place in the window
        mic = gate(mics, monitors, self.margin_db, self.floor_db)[k]
        return mic, self.held[1]

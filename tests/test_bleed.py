"""The bleed rule of meeting mode (hasrctl/bleed.py): a microphone block far quieter than what the desktop plays
at that moment is the speakers' sound, and is silenced; the user's own voice passes."""

from __future__ import annotations

import math

import numpy as np

from hasrctl.bleed import BLOCK_MS, FLOOR_DB, MARGIN_DB, BleedGate, gate, is_bleed, level_db

RATE = 24000
N = RATE * BLOCK_MS // 1000


def tone(amplitude: float, blocks: int = 1, hz: float = 220.0) -> list[bytes]:
    t = np.arange(N * blocks) / RATE
    pcm = (np.sin(2 * np.pi * hz * t) * amplitude * 32767).astype("<i2").tobytes()
    return [pcm[k * N * 2:(k + 1) * N * 2] for k in range(blocks)]


SILENT = bytes(N * 2)


def test_level_is_rms_in_db_of_full_scale_and_silence_is_minus_infinity() -> None:
    assert abs(level_db(tone(0.1)[0]) - 20 * math.log10(0.1 / math.sqrt(2))) < 0.1  # about -23 dB
    assert level_db(SILENT) == -math.inf
    assert level_db(b"") == -math.inf


def test_a_microphone_more_than_ten_db_under_a_playing_monitor_is_bleed() -> None:
    assert is_bleed(-45.0, -20.0)
    assert is_bleed(-20.0 - MARGIN_DB - 0.1, -20.0)


def test_a_voice_near_the_monitors_level_is_the_users_own() -> None:
    assert not is_bleed(-25.0, -20.0)
    assert not is_bleed(-10.0, -30.0)  # louder than what plays


def test_a_monitor_that_plays_nothing_silences_nothing() -> None:
    assert not is_bleed(-80.0, FLOOR_DB - 1)
    assert not is_bleed(-math.inf, -math.inf)


def test_the_others_voice_in_the_microphone_at_minus_20_db_is_silenced_block_by_block() -> None:
    monitor = tone(0.5, 4)
    mic = tone(0.05, 4)
    assert gate(mic, monitor) == [SILENT] * 4


def test_the_users_voice_passes_while_the_others_talk_and_while_they_are_silent() -> None:
    monitor = tone(0.3, 2) + [SILENT] * 3
    mic = tone(0.3, 2, hz=330.0) + [SILENT] + tone(0.01, 2)  # the user as loud as the call; then quietly, alone
    assert gate(mic, monitor) == mic


def test_a_block_beside_a_playing_one_is_judged_against_it_so_the_speakers_delay_does_not_leak() -> None:
    monitor = [SILENT] + tone(0.5, 1) + [SILENT, SILENT]
    mic = tone(0.05, 3) + [SILENT]  # the bleed a block before and after the monitor's sound
    assert gate(mic, monitor)[:3] == [SILENT] * 3


def test_blocks_are_silenced_to_the_same_length() -> None:
    short = tone(0.05)[0][:1000]
    assert gate([short], tone(0.5)) == [bytes(1000)]


def test_the_live_gate_gives_what_gate_gives_one_block_later() -> None:
    rng = np.random.default_rng(7)
    amps = rng.choice([0.0, 0.02, 0.3], size=(12, 2))
    mic = [tone(float(a))[0] if a else SILENT for a in amps[:, 0]]
    monitor = [tone(float(a), hz=300.0)[0] if a else SILENT for a in amps[:, 1]]
    live = BleedGate()
    out = [live.push(m, o) for m, o in zip(mic, monitor, strict=True)]
    assert out[0] is None
    pairs = [p for p in out[1:] if p is not None] + [p for p in [live.flush()] if p is not None]
    assert [m for m, _ in pairs] == gate(mic, monitor)
    assert [o for _, o in pairs] == monitor  # the monitor's side goes on as it was recorded
    assert live.flush() is None

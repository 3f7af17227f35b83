"""A 3-hour recording that is mostly noise: does it complete, and how long does the progress stay silent?

Issue 32 #1: a 3-hour file of noise with long speechless stretches was killed as "stalled" after 141 s, because
progress was sent only per decoded segment. This builds such a file (low white noise, one English sentence every
``--every`` minutes; 16 kHz mono WAV in /tmp), sends it to a whisper-engine daemon (the embedded model, CPU,
the default stall time ``HASR_STALL_SEC`` = 120 s) over its socket with NDJSON events, and prints: whether it
completed, the wall time, the longest gap between two events the worker sent (what the stall watchdog sees),
the phases in order, and whether every sentence was heard.

    python benchmarks/long_silence.py [--hours 3] [--every 30] [--noise 0.003]

Measured (2026-12-03, this 2-core CPU, load 1.5-2.9): 3 hours, a sentence every 30 minutes. Noise sd 0.003:
done in 24.9 s, the longest wait between two events 2.0 s, 6 of 6 sentences heard. Noise sd 0.05 (loud): done
in 32.6 s, longest wait 2.8 s, 4 of 6 sentences heard (the other two drowned in the noise).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import wave
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))

import numpy as np  # noqa: E402
from _uds import http_json, transcribe_events  # noqa: E402
from speech import SR, load, model_dir  # noqa: E402

SENTENCE = "en_quick_brown_fox"  # tests/data: "The quick brown fox jumps over the lazy dog."


def build(path: str, hours: float, every_min: float, noise: float) -> int:
    """Write the file a minute at a time (3 hours of float32 would be 700 MB); the number of sentences in it."""
    rng = np.random.default_rng(7)
    speech = load(SENTENCE)
    minutes = int(hours * 60)
    placed = 0
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SR)
        for m in range(minutes):
            chunk = (noise * rng.standard_normal(60 * SR)).astype(np.float32)
            if m % int(every_min) == int(every_min) // 2:
                chunk[10 * SR:10 * SR + len(speech)] += speech
                placed += 1
            w.writeframes((np.clip(chunk, -1, 1) * 32767).astype("<i2").tobytes())
    return placed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hours", type=float, default=3.0)
    ap.add_argument("--every", type=float, default=30.0, help="minutes between sentences")
    ap.add_argument("--noise", type=float, default=0.003, help="the noise's standard deviation (full scale 1)")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="hls", dir="/tmp")
    audio = os.path.join(tmp, "long.wav")
    placed = build(audio, args.hours, args.every, args.noise)
    sock = os.path.join(tmp, "s")
    env = dict(os.environ, HASR_ENGINE="whisper", HASR_FW_DEVICE="cpu", HASR_FW_MODEL=model_dir(),
               HASR_MAX_WORKERS="1", PYTHONPATH=str(ROOT))
    print(f"{args.hours:g} h of noise (sd {args.noise:g}) with {placed} sentence(s); load average "
          f"{os.getloadavg()[0]:.1f}", flush=True)
    with open(os.path.join(tmp, "log"), "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "hasrd.server", "--socket", sock], cwd=ROOT, env=env,
                                stdout=subprocess.DEVNULL, stderr=log)
    try:
        deadline = time.monotonic() + 30
        while not (os.path.exists(sock) and http_json(sock)[0] == 200):
            assert time.monotonic() < deadline, "no daemon"
            time.sleep(0.1)
        http_json(sock, "POST", "/api/load", b"{}")
        events: list[tuple[float, dict[str, Any]]] = []
        t0 = time.monotonic()  # no language: the vote runs too
        s, reader = transcribe_events(sock, {"audio_path": audio}, lambda ev, t: events.append((t - t0, ev)))
        reader.join(args.hours * 3600)
        s.close()
    finally:
        proc.terminate()
        proc.wait(30)
    times = [t for t, _ev in events]
    gaps = [b - a for a, b in zip([0.0, *times], times, strict=False)]
    last = events[-1][1] if events else {}
    phases = list(dict.fromkeys(str(ev.get("phase")) for _t, ev in events if ev.get("event") == "progress"))
    text = str((last.get("result") or {}).get("final", "")) if last.get("event") == "done" else ""
    print(f"ended with: {last.get('event')} {last.get('error', '') or ''}")
    print(f"wall {times[-1] if times else 0:.1f} s; {len(events)} events; longest silence between events "
          f"{max(gaps or [0]):.1f} s (the stall watchdog fires at 120 s)")
    print(f"phases: {', '.join(phases)}")
    print(f"sentences heard: {text.lower().count('fox')} of {placed}; load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()

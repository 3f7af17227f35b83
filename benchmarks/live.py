"""Live transcription latency on this machine (issue 13), printed as medians with their targets.

A real hasrd with the whisper engine (the embedded model on the CPU) gets continuous English speech over
/v1/realtime at real-time pace: the test clips one after another with 0.8 s pauses, for --minutes. For each
clip (known onset and end in the stream):

- first words: from the clip's onset to the first non-empty ``hasr.draft`` or sentence of its utterance.
  Target <= 1.5 s on a 2-core machine.
- final: from the clip's end to its utterance's ``...transcription.completed``. Target <= 2 s.
- lag: how long after it was sent the worker had processed a piece of audio (each ``hasr.progress``: its
  arrival time minus when its ``done_s`` was sent), median in the first and in the last minute: it must not
  grow.

    python benchmarks/live.py [--minutes 10]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from daemon import whisper_hasrd  # noqa: E402
from live_client import LiveClient, pcm16_24k  # noqa: E402
from speech import load  # noqa: E402

SR = 16000
CLIPS = ["en_quick_brown_fox", "en_espeak_park", "en_hello_world"]
GAP_S = 0.8


def stream(minutes: float) -> tuple[np.ndarray, list[tuple[float, float]]]:
    parts: list[np.ndarray] = [np.zeros(int(GAP_S * SR), np.float32)]
    spans: list[tuple[float, float]] = []
    t = GAP_S
    k = 0
    while t < minutes * 60:
        clip = load(CLIPS[k % len(CLIPS)])
        spans.append((t, t + len(clip) / SR))
        parts += [clip, np.zeros(int(GAP_S * SR), np.float32)]
        t += len(clip) / SR + GAP_S
        k += 1
    return np.concatenate(parts), spans


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--verbose", action="store_true", help="one line per clip: when each event came")
    args = ap.parse_args()
    pcm, spans = stream(args.minutes)
    with tempfile.TemporaryDirectory(prefix="hasr-live-") as tmp:
        h = whisper_hasrd(str(Path(tmp) / "s"))
        try:
            with h.client(300) as c:
                c.post("/api/load")
            audio = pcm16_24k(pcm)  # before the clock starts: 10 minutes take a second to convert
            lc = LiveClient(h.sock)
            lc.update(language="en")
            t_start = time.monotonic() - lc.t0  # the stream's time 0 on the client's clock
            lc.feed(audio)
            lc.finish(timeout=600)
            lc.close()
        finally:
            h.stop()
    started = lc.of("input_audio_buffer.speech_started")
    completed = {e["item_id"]: e for e in lc.of("conversation.item.input_audio_transcription.completed")}
    shown: dict[str, float] = {}
    for e in lc.events:
        if e["type"] in ("hasr.draft", "hasr.sentence") and e.get("text") and e["item_id"] not in shown:
            shown[e["item_id"]] = e["_t"]
    first, final = [], []
    for on, end in spans:
        item = next((s["item_id"] for s in started if abs(s["audio_start_ms"] / 1000 - on) < 0.6), None)
        if item is None:
            continue
        if item in shown:
            first.append(shown[item] - (t_start + on))
        if item in completed:
            final.append(completed[item]["_t"] - (t_start + end))
        if args.verbose:
            seen = next(s["_t"] for s in started if s["item_id"] == item) - (t_start + on)
            print(f"  clip at {on:6.2f}-{end:6.2f} s: speech_started +{seen:.2f} s, first words "
                  f"+{shown.get(item, float('nan')) - (t_start + on):.2f} s, final "
                  f"+{completed[item]['_t'] - (t_start + end) if item in completed else float('nan'):.2f} s after "
                  f"its end: {completed.get(item, {}).get('transcript', '')[:50]!r}")
    lags = [(e["_t"] - t_start, e["_t"] - (t_start + e["done_s"])) for e in lc.of("hasr.progress")]
    total = len(pcm) / SR
    early = [lag for t, lag in lags if t < 60]
    late = [lag for t, lag in lags if total - 60 <= t <= total]
    print(f"live, whisper engine on this CPU, {total / 60:.1f} min of speech, {len(spans)} clips "
          f"({len(first)} matched to an utterance)")
    print(f"  first words after onset:   median {statistics.median(first):.2f} s  p90 "
          f"{sorted(first)[int(0.9 * (len(first) - 1))]:.2f} s   (target <= 1.5 s)")
    print(f"  final after sentence end:  median {statistics.median(final):.2f} s  p90 "
          f"{sorted(final)[int(0.9 * (len(final) - 1))]:.2f} s   (target <= 2 s)")
    print(f"  lag: first minute median {statistics.median(early):.2f} s, last minute median "
          f"{statistics.median(late):.2f} s, max {max(lag for _, lag in lags):.2f} s   (must not grow)")


if __name__ == "__main__":
    main()

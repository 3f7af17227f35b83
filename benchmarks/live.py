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

The first utterance of a session is reported on its own (issue 21 #8): it is the one a dictating user waits
for, and the worker meets it idle, with no decode in flight, where later utterances start while the last one's
final is decoded. Its first words and final are printed beside the medians of the session's other utterances;
``--sessions N`` runs N sessions one after another on the same loaded worker (the first of them also meets a
worker that has never decoded), for N first utterances. A busy machine slows every utterance, so compare the
first with the rest of the same run, not with another run's numbers.

    python benchmarks/live.py [--minutes 10] [--sessions 1] [--language en]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
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


@dataclass
class Session:
    """One session's measurements, per clip in stream order (None: that clip got no such event)."""

    first: list[float | None] = field(default_factory=list)
    final: list[float | None] = field(default_factory=list)
    lags: list[tuple[float, float]] = field(default_factory=list)  # (stream time, lag)


def run_session(sock: str, audio: bytes, spans: list[tuple[float, float]], language: str,
                verbose: bool) -> Session:
    lc = LiveClient(sock)
    if language:
        lc.update(language=language)
    t_start = time.monotonic() - lc.t0  # the stream's time 0 on the client's clock
    lc.feed(audio)
    lc.finish(timeout=600)
    lc.close()
    started = lc.of("input_audio_buffer.speech_started")
    completed = {e["item_id"]: e for e in lc.of("conversation.item.input_audio_transcription.completed")}
    shown: dict[str, float] = {}
    for e in lc.events:
        if e["type"] in ("hasr.draft", "hasr.sentence") and e.get("text") and e["item_id"] not in shown:
            shown[e["item_id"]] = e["_t"]
    out = Session()
    for on, end in spans:
        item = next((s["item_id"] for s in started if abs(s["audio_start_ms"] / 1000 - on) < 0.6), None)
        out.first.append(shown[item] - (t_start + on) if item in shown else None)
        out.final.append(completed[item]["_t"] - (t_start + end) if item in completed else None)
        if verbose and item is not None:
            seen = next(s["_t"] for s in started if s["item_id"] == item) - (t_start + on)
            print(f"  clip at {on:6.2f}-{end:6.2f} s: speech_started +{seen:.2f} s, first words "
                  f"+{_s(out.first[-1])} s, final +{_s(out.final[-1])} s after its end: "
                  f"{completed.get(item, {}).get('transcript', '')[:50]!r}")
    out.lags = [(e["_t"] - t_start, e["_t"] - (t_start + e["done_s"])) for e in lc.of("hasr.progress")]
    return out


def _s(x: float | None) -> str:
    return "  nan" if x is None else f"{x:.2f}"


def _stats(xs: list[float]) -> str:
    if not xs:
        return "none"
    return f"median {statistics.median(xs):.2f} s  p90 {sorted(xs)[int(0.9 * (len(xs) - 1))]:.2f} s"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=10.0, help="speech per session (default 10)")
    ap.add_argument("--sessions", type=int, default=1, help="sessions one after another (default 1)")
    ap.add_argument("--language", default="en", help="the session's language ('' = detected; default en)")
    ap.add_argument("--verbose", action="store_true", help="one line per clip: when each event came")
    args = ap.parse_args()
    pcm, spans = stream(args.minutes)
    sessions: list[Session] = []
    with tempfile.TemporaryDirectory(prefix="hasr-live-") as tmp:
        h = whisper_hasrd(str(Path(tmp) / "s"))
        try:
            with h.client(300) as c:
                c.post("/api/load")
            audio = pcm16_24k(pcm)  # before the clock starts: 10 minutes take a second to convert
            for k in range(args.sessions):
                if args.verbose:
                    print(f"session {k + 1}")
                sessions.append(run_session(h.sock, audio, spans, args.language, args.verbose))
        finally:
            h.stop()
    total = len(pcm) / SR
    first = [x for s in sessions for x in s.first[1:] if x is not None]
    final = [x for s in sessions for x in s.final[1:] if x is not None]
    lags = [lag for s in sessions for _, lag in s.lags]
    early = [lag for s in sessions for t, lag in s.lags if t < 60]
    late = [lag for s in sessions for t, lag in s.lags if total - 60 <= t <= total]
    matched = sum(x is not None for s in sessions for x in s.first)
    print(f"live, whisper engine on this CPU, language {args.language or 'detected'}, {len(sessions)} session(s) "
          f"of {total / 60:.1f} min of speech, {len(spans)} clips each ({matched} of {len(spans) * len(sessions)} "
          f"matched to an utterance with text)")
    print(f"  first words after onset:   {_stats(first)}   (target <= 1.5 s; utterances after a session's first)")
    print(f"  final after sentence end:  {_stats(final)}   (target <= 2 s; the same)")
    for k, s in enumerate(sessions):
        print(f"  session {k + 1}'s first utterance: first words {_s(s.first[0])} s, final {_s(s.final[0])} s")
    heads = [s.first[0] for s in sessions if s.first[0] is not None]
    if heads and first:
        print(f"  first utterance vs the rest: first words {statistics.median(heads):.2f} s vs "
              f"{statistics.median(first):.2f} s (x{statistics.median(heads) / statistics.median(first):.2f})")
    if early and late:
        print(f"  lag: first minute median {statistics.median(early):.2f} s, last minute median "
              f"{statistics.median(late):.2f} s, max {max(lags):.2f} s   (must not grow)")


if __name__ == "__main__":
    main()

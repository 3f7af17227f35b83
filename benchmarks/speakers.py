"""Speakers: how well and how fast hasr tells who spoke (issue 41), on the CPU with the embedded whisper base and the
tests' speaker model (tests/speakernet.py), on espeak-ng conversations (tests/voices.py).

Prints, per conversation of two and of three voices, the speakers counted against the truth and the diarization
error rate (NIST's: missed speech, false alarm, confusion, with a 0.25 s collar; the hypothesis is each word's time
span with its sentence's speaker, as a user receives it), then the pooled rates; and for a 10-minute two-speaker
file the time the speakers cost against the transcription's, measured side by side (transcription alone, then with
speakers, alternating ``--rounds`` times). Exits 1 when a goal is missed: pooled DER over 10 %, a count wrong, or
speakers costing more than 15 % of the transcription.

    python3 benchmarks/speakers.py [--rounds 2] [--minutes 10] [--skip-long]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "tests"), str(HERE.parent)]

import speakernet  # noqa: E402
import voices  # noqa: E402
from speech import model_dir  # noqa: E402

from hasrd import config  # noqa: E402
from hasrd.options import Options  # noqa: E402
from hasrd.transcript import Transcript  # noqa: E402
from hasrd.worker import speakers  # noqa: E402
from hasrd.worker.engine import NullEmitter  # noqa: E402
from hasrd.worker.engines.whisper import WhisperEngine  # noqa: E402

MAX_DER, MAX_SHARE = 0.10, 0.15


def turns(kinds: str, count: int, seed: int) -> list[tuple[str, str]]:
    """``count`` turns of the voices in ``kinds``, never the same voice twice running, lines drawn at random."""
    rng = random.Random(seed)
    out: list[tuple[str, str]] = []
    for _ in range(count):
        voice = rng.choice([k for k in kinds if not out or k != out[-1][0]])
        out.append((voice, rng.choice(voices.LINES)))
    return out


def hyp(result: Transcript) -> list[voices.Turn]:
    spans = []
    for s in result.per_sentence:
        words = s.words if isinstance(s.words, list) else []
        spans += [(float(w.start), float(w.end), str(s.speaker)) for w in words] or [
            (s.start_s, s.end_s, str(s.speaker))]
    return spans


def quality(engine: WhisperEngine, model: str) -> bool:
    print("conversation          voices  counted   missed  false_al  confusion   DER")
    ok = True
    totals: dict[str, list[float]] = {"missed": [], "false_alarm": [], "confusion": [], "der": [], "speech": []}
    for kinds in ("mf", "mfh"):
        for seed in range(3):
            gap = (0.5, 0.2, -0.4)[seed]  # apart, close, talking over each other
            pcm, ref, _ = voices.conversation(turns(kinds, 8, seed), gap=gap)
            res = speakers.by_voice(engine, pcm, "en", Options(speakers="auto", speaker_model=model,
                                                               word_timestamps=True), NullEmitter(), lambda: False)
            counted = len(res.speakers) if isinstance(res.speakers, list) else 0
            d = voices.der(ref, hyp(res))
            speech = sum(e - s for s, e, _ in ref)
            for k in ("missed", "false_alarm", "confusion", "der"):
                totals[k].append(d[k] * speech)
            totals["speech"].append(speech)
            ok &= counted == len(kinds)
            print(f"{len(kinds)} voices, gap {gap:+.1f} s  {len(kinds):6d}  {counted:7d}  {d['missed']:7.3f}  "
                  f"{d['false_alarm']:8.3f}  {d['confusion']:9.3f}  {d['der']:6.3f}")
    speech = sum(totals["speech"])
    pooled = {k: sum(v) / speech for k, v in totals.items() if k != "speech"}
    print(f"pooled (speech-weighted)             {pooled['missed']:7.3f}  {pooled['false_alarm']:8.3f}  "
          f"{pooled['confusion']:9.3f}  {pooled['der']:6.3f}   goal <= {MAX_DER}")
    return ok and pooled["der"] <= MAX_DER


def speed(engine: WhisperEngine, model: str, minutes: float, rounds: int) -> bool:
    count = int(minutes * 60 / 4.0) + 1
    pcm, _, _ = voices.conversation(turns("mf", count, 7), gap=0.5)
    pcm = pcm[:int(minutes * 60 * 16000)]
    print(f"\n{len(pcm) / 16000 / 60:.1f}-minute two-speaker file ({count} turns), CPU, side by side:")
    plain_s, spk_s, diar_s = [], [], []
    for r in range(rounds):
        t = time.perf_counter()
        engine.transcribe(pcm, "en", Options(), NullEmitter(), lambda: False)
        plain_s.append(time.perf_counter() - t)
        t = time.perf_counter()
        res = speakers.by_voice(engine, pcm, "en", Options(speakers="auto", speaker_model=model), NullEmitter(),
                                lambda: False)
        spk_s.append(time.perf_counter() - t)
        diar_s.append(float(res.timings.diarize_s) if isinstance(res.timings.diarize_s, float) else float("nan"))
        print(f"  round {r + 1}: transcription {plain_s[-1]:6.1f} s; with speakers {spk_s[-1]:6.1f} s "
              f"(telling speakers apart {diar_s[-1]:5.2f} s); {len(res.speakers or [])} speakers")
    plain, diar, extra = statistics.median(plain_s), statistics.median(diar_s), statistics.median(
        [s - p for s, p in zip(spk_s, plain_s, strict=True)])
    print(f"  speakers' own work: {diar:.2f} s = {diar / plain:.1%} of the transcription ({plain:.1f} s); wall with "
          f"speakers minus without: {extra:+.1f} s = {extra / plain:+.1%}   goal <= {MAX_SHARE:.0%}")
    return diar / plain <= MAX_SHARE


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--skip-long", action="store_true", help="only the error rates")
    args = ap.parse_args()
    engine = WhisperEngine(config.load(), model_dir(), "cpu", "int8")
    engine.load(lambda s: None)
    with tempfile.TemporaryDirectory() as d:
        model = str(speakernet.build(Path(d) / "speakernet.onnx"))
        ok = quality(engine, model)
        if not args.skip_long:
            ok &= speed(engine, model, args.minutes, args.rounds)
    print("\nall goals met" if ok else "\nA GOAL IS MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""Same text alone and batched (issue 30): files transcribed by one whisper engine one at a time, then all at once in
threads (their model calls batched by the worker's decode loop), compared exactly, with the wall times.

    python benchmarks/batch_same_text.py [--device cuda] [--model DIR] [--jobs 8] [--seconds 60]

On the CPU (int8) the texts, times and words are bit-identical (tests/test_batcher.py pins it); this script
measures the same on a GPU (float16), where a batched GEMM may pick other kernels than a single window's.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))

import corpus  # noqa: E402
import numpy as np  # noqa: E402

from hasrd.config import Settings  # noqa: E402
from hasrd.worker import batcher  # noqa: E402
from hasrd.worker.engine import NullEmitter  # noqa: E402
from hasrd.worker.engines.whisper import WhisperEngine  # noqa: E402
from speech import model_dir  # noqa: E402

SR = 16000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--model", default="")
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=40.0)
    ap.add_argument("--batch", type=int, default=0, help="HASR_WORKER_BATCH (0: by device)")
    ap.add_argument("--linger", type=float, default=-1.0, help="the decode loop's linger fraction (default: its own)")
    ap.add_argument("--streams", type=int, default=0, help="HASR_WORKER_STREAMS: calls at once (0: by device)")
    ap.add_argument("--no-alone", action="store_true", help="only the files together (a profile of that phase)")
    args = ap.parse_args()
    d = corpus.default_dir()
    speech = np.concatenate([corpus.read_wav(d / f"{n}.wav") for n in ("en_long_3min", "zh_long_1min",
                                                                       "en_long_1min")])
    files = [np.roll(speech, -i * 23 * SR)[:int(args.seconds * SR)] for i in range(args.jobs)]
    settings = Settings(worker_batch=args.batch, worker_streams=args.streams)
    engine = WhisperEngine(settings, args.model or model_dir(), args.device,
                           "float16" if args.device == "cuda" else "int8")
    loaded = engine.load(lambda phase: None)
    loop = batcher.Batcher(loaded.batch, lanes=loaded.lanes)  # as the worker builds it (hasrd.worker.engines.load)
    engine.attach(loop)
    if args.linger >= 0:
        loop.linger = args.linger

    def one(i: int, out: dict[int, Any]) -> None:
        with batcher.bound(batcher.JobTag(i)):
            out[i] = engine.transcribe(files[i], "", {"word_timestamps": True}, NullEmitter(), lambda: False)

    alone: dict[int, Any] = {}
    t0 = time.monotonic()
    for i in range(0 if args.no_alone else args.jobs):
        one(i, alone)
    t_alone = time.monotonic() - t0
    print(f"alone: {loop.stats.line()}", flush=True)
    loop.stats = batcher.Stats()
    together: dict[int, Any] = {}
    threads = [threading.Thread(target=one, args=(i, together)) for i in range(args.jobs)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    t_together = time.monotonic() - t0
    where = f"{args.device}, {loop.lanes} stream(s)"
    if args.no_alone:
        print(f"{where}: {args.jobs} files of {args.seconds:g} s together {t_together:.2f} s; batches: "
              f"{loop.stats.line()}")
        return
    same = sum(1 for i in range(args.jobs) if together[i].final == alone[i].final)
    timed = sum(1 for i in range(args.jobs)
                if [(s.start_s, s.end_s, s.words) for s in together[i].per_sentence]
                == [(s.start_s, s.end_s, s.words) for s in alone[i].per_sentence])
    print(f"{where}: {args.jobs} files of {args.seconds:g} s; one at a time {t_alone:.2f} s, together "
          f"{t_together:.2f} s (x{t_alone / t_together:.2f} throughput); same text {same}/{args.jobs}, same times "
          f"and words {timed}/{args.jobs}; batches: {loop.stats.line()}")
    for i in range(args.jobs):
        if together[i].final != alone[i].final:
            a, b = alone[i].final, together[i].final
            k = next((j for j in range(min(len(a), len(b))) if a[j] != b[j]), min(len(a), len(b)))
            print(f"  file {i} differs at char {k}: alone {a[max(0, k - 30):k + 40]!r}\n"
                  f"  {'':>{len(str(i)) + 19}}together {b[max(0, k - 30):k + 40]!r}")


if __name__ == "__main__":
    main()

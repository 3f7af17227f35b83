"""A long file: hasr's whisper engine against faster-whisper's own BatchedInferencePipeline, side by side in one run
(issue 32 #9: goal hasr <= 0.9x the pipeline's wall and CPU, same text).

The file is the corpus's 5-minute English one (``--lang zh``: the Mandarin one; benchmarks/corpus.py builds them
on first use). One model object serves both: the one hasr's loader makes (fwload.load_model: CPU int8, the
model's default cpu_threads), so the two differ only in what they run around it.

- ``pipeline``: ``BatchedInferencePipeline(model).transcribe(pcm, language=..., batch_size=8)`` with its defaults
  (its own Silero VAD, no word timestamps);
- ``hasr``: ``WhisperEngine.transcribe`` exactly as the worker runs it (config.load(env=...) + load), the language
  given, no options;
- ``--old KEY=VALUE,...`` (e.g. ``HASR_WHISPER_BATCH=2``): a second hasr with those settings, on the same model.

The contenders alternate in order over ``--repeat`` runs (the machine is shared: other jobs come and go); printed
are the median wall, the median CPU seconds of the process (``time.process_time()`` around each call: every
thread of it, VAD and CTranslate2's included), hasr's ratios to the pipeline, each one's WER (CER for Chinese)
against the reference, and whether hasr's text is the same as the baseline: the text saved in the corpus
directory (``long_file_<lang>.hasr.txt``; written when missing or with ``--save-baseline``) and, with ``--old``,
the old settings' text. The load average is printed at the start and the end.

    python benchmarks/long_file.py [--lang en|zh] [--repeat 5] [--old HASR_WHISPER_BATCH=2] [--save-baseline]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import numpy as np  # noqa: E402

import corpus  # noqa: E402
from hasrctl import evaluate  # noqa: E402
from hasrd import config  # noqa: E402
from hasrd.languages import join_sentences  # noqa: E402
from hasrd.worker.engine import NullEmitter  # noqa: E402
from hasrd.worker.engines.whisper import WhisperEngine  # noqa: E402
from hasrd.worker import engines  # noqa: E402

PIPELINE_BATCH = 8


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def engine_for(env: dict[str, str], model: Any = None) -> WhisperEngine:
    """hasr's whisper engine as the worker makes it (CPU int8); ``model``: share an already loaded one."""
    settings = config.load(env={**os.environ, **env})
    engine = WhisperEngine(settings, settings.fw_model, "cpu", "int8")
    if model is None:
        engines.load(engine, lambda _p: None)  # and its decode loop, as the worker builds them
    else:
        engine.model = model
    return engine


def pipeline_fn(model: Any, code: str) -> Callable[[np.ndarray], str]:
    from faster_whisper import BatchedInferencePipeline

    pipe = BatchedInferencePipeline(model)

    def run(pcm: np.ndarray) -> str:
        segments, _info = pipe.transcribe(pcm, language=code, batch_size=PIPELINE_BATCH)
        return join_sentences([s.text.strip() for s in segments], code)

    return run


def hasr_fn(engine: WhisperEngine, code: str) -> Callable[[np.ndarray], str]:
    def run(pcm: np.ndarray) -> str:
        return str(engine.transcribe(pcm, code, {}, NullEmitter(), lambda: False).final)

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, default=corpus.default_dir())
    ap.add_argument("--lang", default="en", choices=("en", "zh"))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--old", default="", help="KEY=VALUE,... settings of a second hasr run side by side")
    ap.add_argument("--save-baseline", action="store_true", help="keep this run's hasr text as the baseline")
    args = ap.parse_args()

    print(f"load average at start: {load()}", flush=True)
    corpus.build(args.corpus, long=True)
    wav = args.corpus / f"{args.lang}_long_5min.wav"
    pcm = corpus.read_wav(wav)
    reference = wav.with_suffix(".txt").read_text(encoding="utf-8")
    metric = evaluate.metric_for(reference, args.lang)

    hasr = engine_for({})
    contenders: dict[str, Callable[[np.ndarray], str]] = {
        "pipeline": pipeline_fn(hasr.model, args.lang), "hasr": hasr_fn(hasr, args.lang)}
    if args.old:
        old_env = dict(kv.split("=", 1) for kv in args.old.split(",") if kv)
        contenders["hasr old"] = hasr_fn(engine_for(old_env, hasr.model), args.lang)
    print(f"{wav.name}: {len(pcm) / 16000:.1f} s; model {hasr.model_ref.name}, cpu int8, hasr batch {hasr.batch}, "
          f"pipeline batch {PIPELINE_BATCH}; {os.cpu_count()} CPUs; old: {args.old or '-'}", flush=True)
    for run in contenders.values():  # warm: Silero's session, CTranslate2's first calls
        run(pcm[:16000 * 20])

    walls: dict[str, list[float]] = {k: [] for k in contenders}
    cpus: dict[str, list[float]] = {k: [] for k in contenders}
    texts: dict[str, set[str]] = {k: set() for k in contenders}
    names = list(contenders)
    for i in range(args.repeat):
        order = names[i % len(names):] + names[:i % len(names)]
        for name in order:
            w0, c0 = time.perf_counter(), time.process_time()
            text = contenders[name](pcm)
            walls[name].append(time.perf_counter() - w0)
            cpus[name].append(time.process_time() - c0)
            texts[name].add(text)
            print(f"  run {i + 1} {name:9} wall {walls[name][-1]:6.2f} s  cpu {cpus[name][-1]:6.2f} s  "
                  f"load {load()}", flush=True)

    print()
    print(f"{'':9} {'wall s':>7} {'cpu s':>7} {metric:>7} {'outputs':>7}  (medians of {args.repeat})")
    for name in names:
        text = next(iter(texts[name]))
        err, n = evaluate.score(reference, text, metric)
        print(f"{name:9} {statistics.median(walls[name]):7.2f} {statistics.median(cpus[name]):7.2f} "
              f"{evaluate.rate(err, n):7.4f} {len(texts[name]):7d}")
    for name in names[1:]:
        wr = statistics.median(walls[name]) / statistics.median(walls["pipeline"])
        cr = statistics.median(cpus[name]) / statistics.median(cpus["pipeline"])
        print(f"{name}/pipeline: wall {wr:.2f}x, cpu {cr:.2f}x (goal <= 0.9 both: "
              f"{'met' if wr <= 0.9 and cr <= 0.9 else 'not met'})")
    now = next(iter(texts["hasr"]))
    baseline = args.corpus / f"long_file_{args.lang}.hasr.txt"
    if args.save_baseline or not baseline.exists():
        baseline.write_text(now, encoding="utf-8")
        print(f"baseline text saved: {baseline}")
    else:
        print(f"hasr text same as the baseline ({baseline.name}): {now == baseline.read_text(encoding='utf-8')}")
    if args.old:
        print(f"hasr text same as hasr old's: {texts['hasr'] == texts['hasr old']}")
    print(f"load average at end: {load()}")


if __name__ == "__main__":
    main()

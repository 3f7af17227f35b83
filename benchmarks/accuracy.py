"""Accuracy and speed of hasr's whisper engine against faster-whisper called directly, side by side in one run.

Same model (the embedded whisper base unless HASR_FW_MODEL says otherwise), same device and compute type
(CPU int8 by default), same PCM. "direct" is ``WhisperModel.transcribe(pcm, language=...)`` with
faster-whisper's defaults (sequential, beam 5, temperature fallback, conditioned on previous text); "hasr" is
the whisper engine exactly as the worker runs it. The corpus is benchmarks/corpus.py (built on first use).

Printed: per file CER (Chinese) or WER (other languages) after ``hasrctl eval``'s normalisation, and the wall
time of each; per group and overall the error sums over the reference sums; for the no-speech group the
number of characters each produced (any is a hallucination). With ``--auto`` both also run without a
language and the detected language is compared. With ``--repeat N`` hasr transcribes each file N times and
the number of distinct outputs is printed (1 = deterministic).

    python benchmarks/accuracy.py [--corpus DIR] [--long] [--groups long_zh,no_speech] [--auto] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import numpy as np  # noqa: E402

import corpus  # noqa: E402
from hasrctl import evaluate  # noqa: E402
from hasrd import config  # noqa: E402
from hasrd.audio import decode_to_array  # noqa: E402
from hasrd.languages import join_sentences, resolve  # noqa: E402
from hasrd.worker.engine import NullEmitter  # noqa: E402
from hasrd.worker.engines.whisper import WhisperEngine  # noqa: E402
from hasrd.worker.engines import load  # noqa: E402


def direct(model: Any, pcm: np.ndarray, code: str | None) -> tuple[str, str]:
    """faster-whisper with its defaults -> (text, detected language)."""
    segments, info = model.transcribe(pcm, language=code)
    texts = [s.text.strip() for s in segments]
    return join_sentences(texts, code or info.language or ""), str(info.language)


def load_pcm(path: str) -> np.ndarray:
    return decode_to_array(path)[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, default=corpus.default_dir())
    ap.add_argument("--long", action="store_true", help="include the 5-minute files (and the speed ratio on them)")
    ap.add_argument("--groups", default="", help="comma-separated groups to run (default: all)")
    ap.add_argument("--auto", action="store_true", help="also run without a language: detection accuracy")
    ap.add_argument("--repeat", type=int, default=1, help="transcribe each file this many times with hasr")
    ap.add_argument("--json", type=Path, help="write every row here as JSON lines")
    args = ap.parse_args()

    manifest = corpus.build(args.corpus, args.long)
    rows = [json.loads(line) for line in manifest.read_text(encoding="utf-8").splitlines() if line.strip()]
    if args.groups:
        wanted = set(args.groups.split(","))
        rows = [r for r in rows if r["group"] in wanted]

    settings = config.load()
    engine = WhisperEngine(settings, settings.fw_model, settings.fw_device if settings.fw_device != "auto" else "cpu",
                           "int8" if settings.fw_device in ("auto", "cpu") else "float16")
    load(engine, lambda _p: None)  # and its decode loop, as the worker builds them
    model = engine.model
    print(f"model {engine.model_ref.name} on {engine.device} ({engine.compute_type}); "
          f"CT2_FORCE_CPU_ISA={os.environ.get('CT2_FORCE_CPU_ISA', '')!r}; {len(rows)} files")
    print(f"{'file':28} {'group':10} {'dur s':>6} {'metric':>6} {'hasr':>7} {'direct':>7} {'hasr s':>7} "
          f"{'direct s':>8}" + (f" {'outputs':>7}" if args.repeat > 1 else ""))
    groups: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])  # hasr err, direct err, ref n, files
    times: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    out_rows: list[dict[str, Any]] = []
    for row in rows:
        pcm = load_pcm(row["audio"])
        lang = row["language"]
        _name, code = resolve(lang) if lang else ("", "")
        t0 = time.monotonic()
        outs = []
        for _ in range(max(1, args.repeat)):
            res = engine.transcribe(pcm, lang, {}, NullEmitter(), lambda: False)
            outs.append(res.final)
        t_hasr = (time.monotonic() - t0) / max(1, args.repeat)
        t0 = time.monotonic()
        d_text, _d_lang = direct(model, pcm, code or None)
        t_direct = time.monotonic() - t0
        ref = row["text"]
        metric = evaluate.metric_for(ref, lang)
        if ref:
            he, n = evaluate.score(ref, outs[0], metric)
            de, _ = evaluate.score(ref, d_text, metric)
        else:  # no speech: every character is an error
            he, de, n = len(outs[0].strip()), len(d_text.strip()), 0
        g = groups[row["group"]]
        g[0] += he
        g[1] += de
        g[2] += n
        g[3] += 1
        times[row["group"]][0] += t_hasr
        times[row["group"]][1] += t_direct
        name = Path(row["audio"]).stem[:28]
        dur = len(pcm) / 16000
        hr = evaluate.rate(he, n) if n else he
        dr = evaluate.rate(de, n) if n else de
        line = (f"{name:28} {row['group']:10} {dur:6.1f} {metric if n else 'chars':>6} {_f(hr):>7} {_f(dr):>7} "
                f"{t_hasr:7.1f} {t_direct:8.1f}")
        if args.repeat > 1:
            line += f" {len(set(outs)):7d}"
        print(line, flush=True)
        out_rows.append({"file": row["audio"], "group": row["group"], "hasr": outs[0], "direct": d_text,
                         "hasr_err": he, "direct_err": de, "n": n, "hasr_s": t_hasr, "direct_s": t_direct,
                         "distinct": len(set(outs))})
        if args.auto and lang:
            a = engine.transcribe(pcm, "", {}, NullEmitter(), lambda: False)
            _t, d_lang = direct(model, pcm, None)
            print(f"{'':28} auto-detect: hasr {a.language_code} ({a.language_probability}), "
                  f"direct {d_lang}, expected {code}", flush=True)
            out_rows[-1].update(auto_hasr=a.language_code, auto_direct=d_lang)
    print()
    print(f"{'group':12} {'files':>5} {'hasr':>8} {'direct':>8} {'hasr s':>8} {'direct s':>8}  (error rate, or "
          f"characters on no speech)")
    tot = [0, 0, 0]
    for name, (he, de, n, files) in sorted(groups.items()):
        hr = he / n if n else he
        dr = de / n if n else de
        print(f"{name:12} {files:5d} {_f(hr):>8} {_f(dr):>8} {times[name][0]:8.1f} {times[name][1]:8.1f}"
              f"  {'ok' if hr <= dr + 1e-9 else 'WORSE'}")
        if n:
            tot[0] += he
            tot[1] += de
            tot[2] += n
    if tot[2]:
        print(f"{'overall':12} {'':5} {tot[0] / tot[2]:8.4f} {tot[1] / tot[2]:8.4f}")
    five = [r for r in out_rows if "5min" in r["file"]]
    for r in five:
        print(f"speed on {Path(r['file']).name}: hasr {r['hasr_s']:.1f} s, direct sequential {r['direct_s']:.1f} s, "
              f"ratio {r['hasr_s'] / r['direct_s']:.2f} (target <= 0.75)")
    if args.json:
        args.json.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in out_rows), encoding="utf-8")


def _f(v: float | int | None) -> str:
    if v is None:
        return "n/a"
    return f"{v:.4f}" if isinstance(v, float) else str(v)


if __name__ == "__main__":
    main()

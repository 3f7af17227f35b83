"""Accuracy of hasr's whisper engine against faster-whisper called directly, side by side in one run, per file, per
group and per language, gated on a stored baseline.

Same model (the embedded whisper base unless HASR_FW_MODEL says otherwise), same device and compute type (CPU int8
by default), same decoded PCM (hasr's own decoder), same script conversion (the request's: simplified Chinese).
Columns:
  hasr     the whisper engine exactly as the worker runs it (this checkout)
  direct   ``WhisperModel.transcribe(pcm, language=...)`` with faster-whisper's defaults (sequential, beam 5,
           conditioned on previous text, temperature fallback: it samples, so it may differ run to run)
  t0       the same at temperature 0 only (deterministic; the reference of tests/test_accuracy_gate.py)
  REV      with ``--against REV``: the whisper engine of another commit (a temporary git worktree), e.g.
           ``--against 7c0463b``, the engine before issue 38's regression
Each engine runs in its own process (benchmarks never import CTranslate2 themselves), one after the other.

The corpus is benchmarks/corpus.py's (built on first use): Mandarin and English long files (1 and 3 minutes; 5
with --long), the 27 pytest-audioeval clips (9 languages), a minute of silence and of music (any text there is a
hallucination), and with --containers the 3-minute files in six more containers. Printed: per file CER (Chinese,
Japanese) or WER after ``hasrctl eval``'s normalisation, seconds, and "loop" where hasr's text loops; per group and
per language (each distinct file once) the error sums over the reference sums; whether the flac's text equals the
wav's.

The gate: ``--baseline`` (default benchmarks/accuracy_baseline.json) holds hasr's errors per file from an earlier
run under the same CT2_FORCE_CPU_ISA (``--isa``, default GENERIC: int8 kernels differ between instruction sets,
GENERIC is the same on every x86-64 CPU), with each file's sha256 (another espeak-ng makes other audio: such a file
is left out, and said). A language whose error rate is worse than the baseline's by more than 0.02 fails the run
(exit 1), naming the files that got worse. ``--write-baseline`` stores this run's as the new baseline.

    python benchmarks/accuracy.py [--containers] [--long] [--groups containers_zh,long_en] [--against 7c0463b]
                                  [--isa GENERIC|native] [--write-baseline] [--json rows.jsonl]
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import corpus  # noqa: E402
from hasrctl import evaluate  # noqa: E402
from hasrd.worker.textrules import looped as window_loops  # noqa: E402

BASELINE = ROOT / "benchmarks" / "accuracy_baseline.json"
MARGIN = 0.02

# Runs in a subprocess whose PYTHONPATH is a checkout: that checkout's engine (or faster-whisper direct) on the files
# given on stdin, a JSON line each out. Written for old checkouts too (before 0.3 the script lived in worker.main and
# results were dicts).
RUNNER = r"""
import json, sys, time
from hasrd import config
from hasrd.audio import decode_to_array
from hasrd.languages import join_sentences, resolve
from hasrd.worker.engine import NullEmitter
from hasrd.worker.engines.whisper import WhisperEngine
try:
    from hasrd.worker.serve import scripter
except ImportError:
    from hasrd.worker.main import scripter
mode, device, compute = sys.argv[1:4]
settings = config.load()
engine = WhisperEngine(settings, settings.fw_model, device, compute)
try:  # since issue 40 the decode loop is built after the load, by engines.load
    from hasrd.worker.engines import load
    load(engine, lambda s: None)
except ImportError:
    engine.load(lambda s: None)
for line in sys.stdin:
    job = json.loads(line)
    pcm = decode_to_array(job["audio"])[0]
    lang = job["language"]
    t0 = time.monotonic()
    if mode == "engine":
        res = engine.transcribe(pcm, lang, {}, NullEmitter(), lambda: False)
        seconds = time.monotonic() - t0
        res = scripter(lang, settings).result(res)
        text = res.final if hasattr(res, "final") else res["final"]
    else:
        code = resolve(lang)[1] if lang else None
        kw = {"temperature": 0.0} if mode == "t0" else {}
        segments, info = engine.model.transcribe(pcm, language=code or None, **kw)
        text = join_sentences([s.text.strip() for s in segments], code or info.language or "")
        seconds = time.monotonic() - t0
        text = scripter(lang, settings).text(text)
    print(json.dumps({"text": text, "s": seconds, "dur": len(pcm) / 16000}, ensure_ascii=False), flush=True)
"""


def run_engine(checkout: Path, mode: str, rows: list[dict[str, Any]], device: str, compute: str,
               isa: str) -> list[dict[str, Any]]:
    """One process of ``checkout``'s code over every row: [{"text", "s"}] in the rows' order."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    if isa != "native":
        env["CT2_FORCE_CPU_ISA"] = isa
    jobs = "".join(json.dumps({"audio": r["audio"], "language": r["language"]}) + "\n" for r in rows)
    done = subprocess.run([sys.executable, "-c", RUNNER, mode, device, compute], input=jobs, text=True,
                          capture_output=True, env=env, cwd=checkout)
    out = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or len(out) != len(rows):
        raise SystemExit(f"{mode} at {checkout} failed:\n{done.stderr[-3000:]}")
    return out


def worktree(rev: str) -> Path:
    """A detached checkout of ``rev`` in a temporary directory (removed at exit by the caller)."""
    path = Path(tempfile.mkdtemp(prefix="hasr-rev-"))
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), rev], check=True,
                   capture_output=True)
    return path


def looped(text: str, size: int = 120) -> bool:
    """Whether any stretch of ``size`` characters loops (textrules.looped judges one window's text; a whole
    transcript of the corpus repeats its sentences, and compresses as a loop does)."""
    return any(window_loops(text[i:i + size]) for i in range(0, max(1, len(text) - size // 2), size // 2))


def key(path: str, row: dict[str, Any]) -> str:
    """A file's name in the baseline: its language and name (the audioeval clips of several languages share names)."""
    return f"{row['language']}/{Path(path).name}"


def machine() -> str:
    """The CPU's model name, where Linux says it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{platform.machine()}, {line.split(':', 1)[1].strip()}, {os.cpu_count()} CPUs"
    except OSError:
        pass
    return platform.machine()


def sha256(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, default=corpus.default_dir())
    ap.add_argument("--long", action="store_true", help="include the 5-minute files")
    ap.add_argument("--containers", action="store_true", help="include the 3-minute files in six more containers")
    ap.add_argument("--groups", default="", help="comma-separated groups to run (default: all)")
    ap.add_argument("--against", action="append", default=[], help="a commit whose whisper engine runs beside "
                                                                     "this one (again for more)")
    ap.add_argument("--isa", default="GENERIC", help="CT2_FORCE_CPU_ISA for every engine (native: the CPU's own)")
    ap.add_argument("--no-direct", action="store_true", help="leave out faster-whisper's defaults (sampling)")
    ap.add_argument("--baseline", type=Path, default=BASELINE)
    ap.add_argument("--write-baseline", action="store_true", help="store this run's errors as the baseline")
    ap.add_argument("--json", type=Path, help="write every row here as JSON lines")
    args = ap.parse_args()

    manifest = corpus.build(args.corpus, args.long, args.containers)
    rows = [json.loads(line) for line in manifest.read_text(encoding="utf-8").splitlines() if line.strip()]
    if args.groups:
        rows = [r for r in rows if r["group"] in set(args.groups.split(","))]
    files = list({r["audio"]: r for r in rows}.values())  # each distinct file is transcribed once
    device = os.environ.get("HASR_FW_DEVICE", "cpu").replace("auto", "cpu")
    compute = "int8" if device == "cpu" else "float16"
    columns = ["hasr"] + ([] if args.no_direct else ["direct"]) + ["t0"] + args.against
    out: dict[str, list[dict[str, Any]]] = {"hasr": run_engine(ROOT, "engine", files, device, compute, args.isa),
                                            "t0": run_engine(ROOT, "t0", files, device, compute, args.isa)}
    if not args.no_direct:
        out["direct"] = run_engine(ROOT, "direct", files, device, compute, args.isa)
    for rev in args.against:
        tree = worktree(rev)
        try:
            out[rev] = run_engine(tree, "engine", files, device, compute, args.isa)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], capture_output=True)
    print(f"{len(files)} files on {device} ({compute}), CT2_FORCE_CPU_ISA={args.isa}, {machine()}, "
          f"{datetime.date.today().isoformat()}")

    result: dict[str, dict[str, Any]] = {}  # by file: errors and seconds per column
    head = " ".join(f"{c[:9]:>9}" for c in columns)
    print(f"{'file':27} {'group':13} {'dur s':>6} {'metric':>6} {head} {'hasr s':>7} {'t0 s':>6}")
    for k, row in enumerate(files):
        ref, lang = row["text"], row["language"]
        metric = evaluate.metric_for(ref, lang) if ref else "chars"
        texts = {c: out[c][k]["text"] for c in columns}
        # no speech: every character is an error
        errs = {c: evaluate.score(ref, t, metric)[0] if ref else len(t.strip()) for c, t in texts.items()}
        n = evaluate.score(ref, "", metric)[1] if ref else 0
        r = result[row["audio"]] = {"errors": errs, "n": n, "language": lang or "none", "text": texts["hasr"],
                                    "loop": looped(texts["hasr"]), "seconds": {c: out[c][k]["s"] for c in columns}}
        shown = " ".join(f"{e / n:9.4f}" if n else f"{e:9d}" for e in errs.values())
        print(f"{Path(row['audio']).name[:27]:27} {row['group'][:13]:13} {out['hasr'][k]['dur']:6.1f} {metric:>6} "
              f"{shown} {out['hasr'][k]['s']:7.1f} {out['t0'][k]['s']:6.1f}" + ("  loop" if r["loop"] else ""),
              flush=True)
    for title in ("group", "language"):
        groups: dict[str, list[str]] = defaultdict(list)
        for row in rows if title == "group" else files:  # a file may be in two groups, in one language
            groups[row["group"] if title == "group" else result[row["audio"]]["language"]].append(row["audio"])
        print(f"\n{title:12} {'files':>5} {head} {'hasr s':>8}")
        for name, paths in sorted(groups.items()):
            n = sum(result[p]["n"] for p in paths)
            rates = [sum(result[p]["errors"][c] for p in paths) / (n or 1) for c in columns]
            secs = sum(result[p]["seconds"]["hasr"] for p in paths)
            print(f"{name:12} {len(paths):5d} " + " ".join(f"{r:9.4f}" for r in rates) + f" {secs:8.1f}"
                  + ("  (characters on no speech)" if not n else ""))
    same = {Path(p).suffix: r["text"] for p, r in result.items() if Path(p).stem == "zh_long_3min"}
    if ".flac" in same and ".wav" in same:
        print(f"\nzh_long_3min: flac's text {'equals' if same['.flac'] == same['.wav'] else 'DIFFERS from'} wav's")
    loops = [Path(p).name for p, r in result.items() if r["loop"]]
    print(f"hasr's text loops in: {', '.join(loops) or 'no file'}")
    if args.json:
        args.json.write_text("".join(json.dumps({"file": p, **r}, ensure_ascii=False) + "\n"
                                     for p, r in result.items()), encoding="utf-8")
    if args.write_baseline:
        write_baseline(args.baseline, result, args.isa)
        print(f"baseline written: {args.baseline}")
    elif args.baseline.exists():
        sys.exit(gate(args.baseline, result, args.isa))


def write_baseline(path: Path, result: dict[str, dict[str, Any]], isa: str) -> None:
    import ctranslate2

    old = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {"files": {}}
    files = dict(old.get("files", {})) if old.get("isa") == isa else {}
    for p, r in result.items():
        files[key(p, r)] = {"sha256": sha256(p), "language": r["language"], "errors": r["errors"]["hasr"],
                            "n": r["n"]}
    path.write_text(json.dumps({
        "isa": isa, "ctranslate2": ctranslate2.__version__, "date": datetime.date.today().isoformat(),
        "machine": machine(), "margin": MARGIN,
        "files": dict(sorted(files.items()))}, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def gate(path: Path, result: dict[str, dict[str, Any]], isa: str) -> int:
    """0, or 1 when a language got worse than the baseline by more than MARGIN (the files that did are named)."""
    base = json.loads(path.read_text(encoding="utf-8"))
    if base.get("isa") != isa:
        print(f"\nbaseline {path.name} was recorded with CT2_FORCE_CPU_ISA={base.get('isa')}, this run {isa}: "
              f"not compared")
        return 0
    now: dict[str, list[tuple[str, int, int, int]]] = defaultdict(list)  # language: (file, errors, base's, n)
    for p, r in result.items():
        b = base["files"].get(key(p, r))
        if b is None:
            continue
        if b["sha256"] != sha256(p):
            print(f"{key(p, r)}: not the audio of the baseline (another espeak-ng or ffmpeg?): left out")
            continue
        now[r["language"]].append((key(p, r), r["errors"]["hasr"], b["errors"], r["n"]))
    worse = 0
    print(f"\n{'language':10} {'files':>5} {'baseline':>9} {'now':>9}  (hasr; worse than the baseline by more than "
          f"{MARGIN} fails)")
    for lang, rows in sorted(now.items()):
        n = sum(x[3] for x in rows)
        then, cur = (sum(x[2] for x in rows) / n, sum(x[1] for x in rows) / n) if n else (0.0, 0.0)
        bad = n > 0 and cur > then + MARGIN or n == 0 and sum(x[1] for x in rows) > sum(x[2] for x in rows)
        print(f"{lang:10} {len(rows):5d} {then:9.4f} {cur:9.4f}" + ("  WORSE" if bad else ""))
        if bad:
            worse += 1
            got = sorted(((e - b, f) for f, e, b, _n in rows if e > b), reverse=True)
            print("           worse in: " + ", ".join(f"{f} (+{d} errors)" for d, f in got))
    return 1 if worse else 0


if __name__ == "__main__":
    main()

"""First words of a file: seconds from the request to its first sentence, this tree against an older one.

Issue 32 #2: ``hasrctl transcribe --stream`` showed its first text 9-11 s into a 2-minute file (5 s with
``-l en``) on this 2-core CPU; goal: within 3 s. A whisper-engine daemon (the embedded model, CPU, one worker,
loaded before the clock starts) transcribes the corpus's 3-minute English file over its socket with NDJSON
events, with the language given (``en``) and detected (``auto``), the two trees alternating; printed per run and
as medians: the first ``sentence`` event, the first ``decoding`` progress and the whole file.

    python benchmarks/first_text.py [--baseline REV] [--runs 3] [--file F]

Measured (2026-12-03, 2 runs, load 1.3) against fb165b6 (before the two-window vote and the short first clip):
first sentence 1.75 s against 2.82 s with ``en``, 3.08 s against 5.83 s with ``auto``; the whole file 1.00x and
0.87x.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))

import corpus  # noqa: E402
from _uds import http_json, transcribe_events  # noqa: E402
from speech import model_dir  # noqa: E402


def run_one(sock: str, path: str, language: str) -> tuple[float, float, float]:
    """(first sentence, first decoding progress, done) in seconds from the request."""
    events: list[tuple[float, dict[str, Any]]] = []
    t0 = time.monotonic()
    s, reader = transcribe_events(sock, {"audio_path": path, "language": language},
                                  lambda ev, t: events.append((t - t0, ev)))
    reader.join(600)
    s.close()
    assert events and events[-1][1].get("event") == "done", events[-1:] or "no events"
    first = next(t for t, ev in events if ev.get("event") == "sentence")
    decoding = next((t for t, ev in events if ev.get("event") == "progress" and ev.get("phase") == "decoding"
                     and float(ev.get("done_s") or 0) > 0), first)
    return first, decoding, events[-1][0]


class Daemon:
    def __init__(self, tree: Path) -> None:
        self.tmp = tempfile.mkdtemp(prefix="hft", dir="/tmp")
        self.sock = os.path.join(self.tmp, "s")
        env = dict(os.environ, PYTHONPATH=str(tree), HASR_ENGINE="whisper", HASR_FW_DEVICE="cpu",
                   HASR_FW_MODEL=model_dir(), HASR_MAX_WORKERS="1")
        with open(os.path.join(self.tmp, "log"), "wb") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "hasrd.server", "--socket", self.sock], cwd=tree,
                                         env=env, stdout=subprocess.DEVNULL, stderr=log)
        deadline = time.monotonic() + 30
        while not (os.path.exists(self.sock) and http_json(self.sock)[0] == 200):
            assert time.monotonic() < deadline, "the daemon did not start"
            time.sleep(0.1)
        http_json(self.sock, "POST", "/api/load", b"{}")

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", default="HEAD~1", help="git revision to compare with")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--file", default="", help="default: the corpus's en_long_3min.wav")
    args = ap.parse_args()
    path = corpus.corpus_file("en_long_3min.wav", args.file)
    old = Path(tempfile.mkdtemp(prefix="hasr-old-"))
    subprocess.run(f"git archive {args.baseline} | tar -x -C {old}", shell=True, cwd=ROOT, check=True)
    label = args.baseline[:10]
    print(f"load average {os.getloadavg()[0]:.1f}", flush=True)
    daemons = {"this tree": Daemon(ROOT), label: Daemon(old)}
    rows: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    try:
        for k in range(args.runs):
            for lang in ("en", ""):
                for name, d in daemons.items():
                    r = run_one(d.sock, path, lang)
                    rows.setdefault((name, lang or "auto"), []).append(r)
                    print(f"run {k + 1} {name:>10} {lang or 'auto':>4}: first sentence {r[0]:.2f} s, first "
                          f"decoded clip {r[1]:.2f} s, done {r[2]:.2f} s", flush=True)
    finally:
        for d in daemons.values():
            d.close()
    print(f"\nmedians (load average {os.getloadavg()[0]:.1f}; goal: first sentence <= 3 s)")
    for (name, lang), rs in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0] != "this tree")):
        print(f"{name:>10} {lang:>4}: first sentence {statistics.median(r[0] for r in rs):.2f} s, "
              f"done {statistics.median(r[2] for r in rs):.2f} s")
    for lang in ("en", "auto"):
        new, base = (statistics.median(r[0] for r in rows[(n, lang)]) for n in ("this tree", label))
        whole = (statistics.median(r[2] for r in rows[("this tree", lang)])
                 / statistics.median(r[2] for r in rows[(label, lang)]))
        print(f"ratio (this tree / {label}), {lang}: first sentence {new / base:.2f}, whole file {whole:.2f}")


if __name__ == "__main__":
    main()

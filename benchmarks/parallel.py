"""One loaded model, many requests at once (issue 30): one worker holding every job against one job at a time,
side by side in one run, printed as a table.

A real hasrd with the whisper engine and ONE worker (HASR_MAX_WORKERS=1), run twice: with the worker's default
parallel jobs (HASR_WORKER_PARALLEL=0) and with HASR_WORKER_PARALLEL=1 (a worker serves one job at a time, the
seed's lock: hasr before 0.3). Rows (goals from the issue):

- a 5 s file sent 3 s after a 270 s file: seconds from its sending to its answer (goal <= 12 s on the CPU), and
  whether the long file's text is exactly the one it gets alone;
- a live session opened beside a running file: seconds from the speech onset to the first draft (goal <= 3 s);
- 4 files of 25 s sent together against one after another: the wall-time ratio (goal <= 1.0: serving together
  loses nothing).

    python benchmarks/parallel.py            # the CPU rows (the embedded base model, int8)
    python benchmarks/parallel.py --gpu      # the same rows on a GPU (HASR_FW_MODEL, float16), plus 16 files

The load average is printed with each row: the ratios are what count on a busy machine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))  # first: benchmarks/daemon.py would shadow tests/daemon.py

import corpus  # noqa: E402
from daemon import Hasrd  # noqa: E402
from live_client import LiveClient, pcm16_24k  # noqa: E402
from speech import cache_home, load, model_dir  # noqa: E402

import numpy as np  # noqa: E402

SR = 16000
GAP_S = 1.2


def daemon(tmp: str, name: str, parallel: int, gpu: bool) -> Hasrd:
    env = {"HASR_ENGINE": "whisper", "XDG_CACHE_HOME": cache_home(), "HASR_MAX_WORKERS": "1",
           "HASR_WORKER_PARALLEL": str(parallel), "HASR_LIVE_QUEUE_SEC": "0", "HASR_MAX_QUEUE": "64"}
    if gpu:
        env["HASR_FW_DEVICE"] = "cuda"
    else:
        env.update({"HASR_FW_MODEL": model_dir(), "HASR_FW_DEVICE": "cpu"})
    h = Hasrd(os.path.join(tmp, name), env=env)
    with h.client(900) as c:
        r = c.post("/api/load")
        assert r.status_code == 200, r.text
    return h


def load_avg() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def post(h: Hasrd, path: str, out: dict[str, Any], language: str = "en") -> None:
    out["sent"] = time.monotonic()
    with h.client(7200) as c:
        r = c.post("/transcribe", json={"audio_path": path, "language": language})
    out["end"] = time.monotonic()
    out["code"] = r.status_code
    out["wall_s"] = out["end"] - out["sent"]
    out["text"] = r.json().get("final", "") if r.status_code == 200 else r.text


def wav(tmp: str, name: str, pcm: np.ndarray) -> str:
    path = Path(tmp) / f"{name}.wav"
    corpus.write_wav(path, pcm)
    return str(path)


def short_behind_long(h: Hasrd, long_path: str, short_path: str, long_alone: str) -> tuple[float, bool]:
    """Seconds from sending the short file (3 s after the long one) to its answer; the long file's text right."""
    long_job: dict[str, Any] = {}
    short_job: dict[str, Any] = {}
    t = threading.Thread(target=post, args=(h, long_path, long_job))
    t.start()
    time.sleep(3.0)
    post(h, short_path, short_job)
    t.join(7200)
    assert short_job["code"] == 200 and long_job["code"] == 200, (short_job, long_job)
    return short_job["wall_s"], long_job["text"] == long_alone


def live_beside_file(h: Hasrd, long_path: str) -> float | None:
    """Seconds from a live clip's speech onset to its first draft while a long file is being transcribed."""
    job: dict[str, Any] = {}
    t = threading.Thread(target=post, args=(h, long_path, job))
    t.start()
    while h.get("/api/ps")["running"] < 1:
        time.sleep(0.05)
    time.sleep(2.0)
    clip = np.concatenate([np.zeros(int(GAP_S * SR), np.float32), load("en_espeak_park"),
                           np.zeros(int(GAP_S * SR), np.float32)])
    lc = LiveClient(h.sock)
    lc.update(language="en")
    start = time.monotonic()
    feeder = threading.Thread(target=lc.feed, args=(pcm16_24k(clip),), daemon=True)
    feeder.start()
    onset = start + GAP_S
    first = None
    deadline = time.monotonic() + 900
    while first is None and time.monotonic() < deadline and not lc.closed.is_set():
        with lc.lock:
            texts = [e for e in lc.events if e["type"] in ("hasr.draft", "hasr.sentence") and e.get("text")]
        if texts:
            first = lc.t0 + texts[0]["_t"] - onset
        time.sleep(0.02)
    feeder.join()
    lc.finish(timeout=900)
    lc.close()
    t.join(7200)
    assert job.get("code") == 200, job
    return first


def together_vs_sequential(h: Hasrd, paths: list[str]) -> tuple[float, float]:
    """Wall seconds for ``paths`` sent together, and one after another."""
    outs: list[dict[str, Any]] = [{} for _ in paths]
    threads = [threading.Thread(target=post, args=(h, p, o)) for p, o in zip(paths, outs, strict=True)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(7200)
    together = time.monotonic() - t0
    assert all(o["code"] == 200 for o in outs), outs
    t0 = time.monotonic()
    for p in paths:
        o: dict[str, Any] = {}
        post(h, p, o)
        assert o["code"] == 200, o
    return together, time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpu", action="store_true", help="run the worker on the GPU (HASR_FW_MODEL)")
    ap.add_argument("--files", type=int, default=4, help="files sent together in the throughput row")
    ap.add_argument("--file-sec", type=float, default=25.0, help="length of each of those files")
    ap.add_argument("--skip-live", action="store_true")
    args = ap.parse_args()
    rows = [json.loads(line) for line in corpus.build(corpus.default_dir()).read_text().splitlines()]
    by = {Path(r["audio"]).stem: r["audio"] for r in rows}
    en3, en1 = corpus.read_wav(by["en_long_3min"]), corpus.read_wav(by["en_long_1min"])
    with tempfile.TemporaryDirectory(prefix="hasr-parallel-", dir="/tmp") as tmp:
        long_path = wav(tmp, "long_270s", np.concatenate([en3, en1, en1[:30 * SR]])[:270 * SR])
        short_path = wav(tmp, "short_5s", np.concatenate([load("en_espeak_park"), np.zeros(SR // 2, np.float32)]))
        zh1 = corpus.read_wav(by["zh_long_1min"])
        start = [0, 20, 5, 35, 10, 25, 15, 30]
        pieces = [(en1 if i % 2 == 0 else zh1)[start[i % 8] * SR:][:int(args.file_sec * SR)] for i in range(args.files)]
        files = [wav(tmp, f"piece{i}", p) for i, p in enumerate(pieces)]
        table: list[tuple[str, str, str, str]] = []
        results: dict[int, dict[str, Any]] = {}
        for parallel in (0, 1):
            h = daemon(tmp, f"p{parallel}", parallel, args.gpu)
            r = results[parallel] = {}
            try:
                alone: dict[str, Any] = {}
                post(h, long_path, alone)
                r["long_alone_s"] = alone["wall_s"]
                r["short_s"], r["long_right"] = short_behind_long(h, long_path, short_path, alone["text"])
                r["load_short"] = load_avg()
                if not args.skip_live:
                    r["first_draft_s"] = live_beside_file(h, long_path)
                    r["load_live"] = load_avg()
                r["together_s"], r["sequential_s"] = together_vs_sequential(h, files)
                r["load_tp"] = load_avg()
                r["ps"] = h.get("/api/ps")["workers"][0].get("identity", {}).get("batch")
            finally:
                h.stop()
            print(f"HASR_WORKER_PARALLEL={parallel}: {r}", flush=True)
        p, one = results[0], results[1]
        table.append(("5 s file sent 3 s after a 270 s file: answered after", f"{p['short_s']:.1f} s "
                      f"(long file {'same text' if p['long_right'] else 'TEXT DIFFERS'})",
                      f"{one['short_s']:.1f} s", f"<= 12 s  (load {p['load_short']})"))
        if not args.skip_live:
            def s(x: float | None) -> str:
                return "none" if x is None else f"{x:.2f} s"
            table.append(("live session beside a file: first draft after the onset", s(p["first_draft_s"]),
                          s(one["first_draft_s"]), f"<= 3 s  (load {p['load_live']})"))
        table.append((f"{args.files} files of {args.file_sec:g} s together / one after another",
                      f"{p['together_s']:.1f} / {p['sequential_s']:.1f} s = x{p['together_s'] / p['sequential_s']:.2f}",
                      f"{one['together_s']:.1f} / {one['sequential_s']:.1f} s",
                      f"<= x1.0  (load {p['load_tp']})"))
        width = max(len(row[0]) for row in table)
        print(f"\n{'figure':<{width}} | one worker, parallel jobs | one job at a time | goal")
        for row in table:
            print(f"{row[0]:<{width}} | {row[1]} | {row[2]} | {row[3]}")


if __name__ == "__main__":
    main()

"""The worker pool on this machine (issue 19), each figure measured side by side in one run: 1 worker against 2.

A real hasrd with the whisper engine (the embedded base on the CPU):

- live beside a file: a long English file (the accuracy corpus's 3-minute one) is being transcribed when a live
  session opens and streams a clip at real-time pace; printed: seconds from the clip's speech onset to its first
  draft, and whether the file still completed. With one worker the session waits for the file (or is refused
  after HASR_LIVE_QUEUE_SEC); with two it starts at once. Target: first draft within 3 s of the onset.
- throughput: 4 files (the corpus's 1-minute English and Mandarin files, twice) sent at once; seconds of audio
  per wall second with 1 and 2 workers, and their ratio (two decodes share two cores, so expect little).
- memory: the daemon's RSS and each worker's with 3 workers loaded.

    python benchmarks/pool.py [--skip-live]

Measured on this 2-core machine (2026-12-02, whisper base int8): a live session opened 2 s into the 3-minute
file got its first draft 8.47 s after the speech onset with one worker (it waited for the file) and 2.45 s with
two (target <= 3 s), the file completing in 11.0 and 11.5 s; 4 files (249 s of audio) at 5.8x real time with
one worker and 10.6x with two (1.85x: one decode does not keep both cores busy); with 3 workers loaded the
daemon held 58 MB and each worker 324-343 MB.
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

GAP_S = 1.2


def daemon(tmp: str, workers: int, name: str) -> Hasrd:
    return Hasrd(os.path.join(tmp, name), env={"HASR_ENGINE": "whisper", "HASR_FW_MODEL": model_dir(),
                                                "HASR_FW_DEVICE": "cpu", "XDG_CACHE_HOME": cache_home(),
                                                "HASR_MAX_WORKERS": str(workers), "HASR_LIVE_QUEUE_SEC": "0"})


def rss_mb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    return 0


def post(h: Hasrd, path: str, out: dict[str, Any]) -> None:
    with h.client(3600) as c:
        t0 = time.monotonic()
        r = c.post("/transcribe", json={"audio_path": path, "language": "en" if "en_" in path else "zh"})
        out["code"], out["wall_s"], out["end"] = r.status_code, time.monotonic() - t0, time.monotonic()


def live_beside_file(tmp: str, workers: int, long_file: str) -> tuple[float | None, bool, float]:
    h = daemon(tmp, workers, f"live{workers}")
    try:
        with h.client(600) as c:
            c.post("/api/load")
        job: dict[str, Any] = {}
        t = threading.Thread(target=post, args=(h, long_file, job))
        t.start()
        while h.get("/api/ps")["running"] < 1:
            time.sleep(0.05)
        time.sleep(2.0)  # well into the file
        clip = np.concatenate([np.zeros(int(GAP_S * 16000), np.float32), load("en_espeak_park"),
                               np.zeros(int(GAP_S * 16000), np.float32)])
        lc = LiveClient(h.sock)
        lc.update(language="en")
        start = time.monotonic()
        feeder = threading.Thread(target=lc.feed, args=(pcm16_24k(clip),), daemon=True)
        feeder.start()
        onset = start + GAP_S
        first = None
        deadline = time.monotonic() + 600
        while first is None and time.monotonic() < deadline and not lc.closed.is_set():
            with lc.lock:
                texts = [e for e in lc.events if e["type"] in ("hasr.draft", "hasr.sentence") and e.get("text")]
            if texts:
                first = lc.t0 + texts[0]["_t"] - onset
            time.sleep(0.02)
        feeder.join()
        lc.finish(timeout=600)
        lc.close()
        t.join(3600)
        return first, job.get("code") == 200, job.get("wall_s", 0.0)
    finally:
        h.stop()


def throughput(tmp: str, workers: int, files: list[str], seconds: float) -> float:
    h = daemon(tmp, workers, f"tp{workers}")
    try:
        with h.client(600) as c:
            c.post("/api/load")
        outs: list[dict[str, Any]] = [{} for _ in files]
        threads = [threading.Thread(target=post, args=(h, f, o)) for f, o in zip(files, outs, strict=True)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(3600)
        wall = time.monotonic() - t0
        assert all(o.get("code") == 200 for o in outs), outs
        return seconds / wall
    finally:
        h.stop()


def memory(tmp: str, files: list[str]) -> tuple[int, list[int]]:
    h = daemon(tmp, 3, "mem")
    try:
        outs: list[dict[str, Any]] = [{} for _ in files[:3]]
        threads = [threading.Thread(target=post, args=(h, f, o)) for f, o in zip(files[:3], outs, strict=True)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(3600)
        ps = h.get("/api/ps")
        return rss_mb(h.proc.pid), [int(w.get("rss_mb") or 0) for w in ps["workers"]]
    finally:
        h.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--skip-live", action="store_true")
    args = ap.parse_args()
    rows = [json.loads(line) for line in corpus.build(corpus.default_dir()).read_text().splitlines()]
    by = {Path(r["audio"]).stem: r["audio"] for r in rows}
    files = [by["en_long_1min"], by["zh_long_1min"], by["en_long_1min"], by["zh_long_1min"]]
    seconds = sum(len(corpus.read_wav(f)) / 16000 for f in files)
    with tempfile.TemporaryDirectory(prefix="hasr-pool-", dir="/tmp") as tmp:
        if not args.skip_live:
            for n in (1, 2):
                first, ok, wall = live_beside_file(tmp, n, by["en_long_3min"])
                shown = f"{first:.2f} s" if first is not None else "none"
                print(f"live beside a file, {n} worker(s): first draft {shown} after the onset (target <= 3 s); "
                      f"file {'completed' if ok else 'FAILED'} in {wall:.1f} s", flush=True)
        one = throughput(tmp, 1, files, seconds)
        two = throughput(tmp, 2, files, seconds)
        print(f"throughput, 4 files ({seconds:.0f} s of audio): 1 worker {one:.1f}x real time, 2 workers "
              f"{two:.1f}x; ratio {two / one:.2f}", flush=True)
        daemon_mb, workers_mb = memory(tmp, files)
        print(f"memory with 3 workers: daemon {daemon_mb} MB, workers {workers_mb} MB")


if __name__ == "__main__":
    main()

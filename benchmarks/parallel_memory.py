"""A worker's memory with HASR_WORKER_PARALLEL jobs of long audio (issue 30: memory stays bounded).

A real hasrd with one CPU worker holding up to 4 jobs. Three phases, each sampled for ``--seconds`` from the
worker's /proc/PID/status, then the clients leave (their jobs are cancelled) and the worker goes idle:

1. one job of ``--minutes`` of speech;
2. four such jobs at once;
3. four jobs of 5 minutes at once.

Printed side by side: the worker's peak anonymous memory (its own heap: features, encoder outputs, text) and its
peak shared memory (the requests' PCM, memfds mapped from the daemon: 4 bytes a sample, so bounded by
HASR_MAX_AUDIO_SEC per job). Bounded means the heap grows by a fixed amount per job, whatever the audio's length.

    python benchmarks/parallel_memory.py [--minutes 60] [--seconds 60]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))

import corpus  # noqa: E402
from daemon import Hasrd  # noqa: E402
from speech import cache_home, model_dir  # noqa: E402

import numpy as np  # noqa: E402

SR = 16000


def status_kb(pid: int) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssShmem", "RssFile"):
            out[key] = int(rest.split()[0])
    return out


def send(sock: str, path: str) -> socket.socket:
    """A transcription request whose client stays until the socket is closed (closing it cancels the job)."""
    body = json.dumps({"audio_path": path, "language": "en"}).encode()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sock)
    s.sendall(b"POST /transcribe HTTP/1.1\r\nHost: hasr\r\nContent-Type: application/json\r\n"
              + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    return s


def ps(h: Hasrd) -> dict[str, Any]:
    with h.client(30) as c:
        snap: dict[str, Any] = c.get("/api/ps").json()
        return snap


def phase(h: Hasrd, paths: list[str], seconds: float) -> dict[str, int]:
    clients = [send(h.sock, p) for p in paths]
    peak: dict[str, int] = {}
    deadline = time.monotonic() + seconds
    running = 0
    while time.monotonic() < deadline:
        snap = ps(h)
        running = max(running, int(snap.get("running") or 0))
        for w in snap.get("workers", []):
            if w.get("pid"):
                for k, v in status_kb(int(w["pid"])).items():
                    peak[k] = max(peak.get(k, 0), v)
        time.sleep(0.5)
    for c in clients:
        c.close()
    t0 = time.monotonic()
    while int(ps(h).get("running") or 0) and time.monotonic() - t0 < 120:
        time.sleep(0.5)
    peak["running"] = running
    return peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=60.0)
    ap.add_argument("--seconds", type=float, default=60.0, help="how long each phase is sampled")
    args = ap.parse_args()
    speech = corpus.read_wav(corpus.corpus_file("en_long_3min.wav"))
    with tempfile.TemporaryDirectory(prefix="hasr-memory-", dir="/tmp") as tmp:
        long_pcm = np.tile(speech, int(args.minutes * 60 * SR / len(speech)) + 1)[:int(args.minutes * 60 * SR)]
        longs = []
        for i in range(4):  # four files, so that no cache or page is shared between them
            p = Path(tmp) / f"long{i}.wav"
            corpus.write_wav(p, np.roll(long_pcm, -i * 7 * SR))
            longs.append(str(p))
        shorts = []
        for i in range(4):
            p = Path(tmp) / f"short{i}.wav"
            corpus.write_wav(p, np.roll(long_pcm, -i * 7 * SR)[:300 * SR])
            shorts.append(str(p))
        env = {"HASR_ENGINE": "whisper", "XDG_CACHE_HOME": cache_home(), "HASR_FW_MODEL": model_dir(),
               "HASR_FW_DEVICE": "cpu", "HASR_MAX_WORKERS": "1", "HASR_WORKER_PARALLEL": "4"}
        h = Hasrd(os.path.join(tmp, "sock"), env=env)
        try:
            with h.client(600) as c:
                assert c.post("/api/load").status_code == 200
            rows = [(f"1 job of {args.minutes:g} min", phase(h, longs[:1], args.seconds)),
                    (f"4 jobs of {args.minutes:g} min", phase(h, longs, args.seconds)),
                    ("4 jobs of 5 min", phase(h, shorts, args.seconds))]
        finally:
            h.stop()
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\nworker memory, peak over {args.seconds:g} s of each phase (MB; load {load})")
    print(f"{'phase':<22} | jobs seen | heap (RssAnon) | PCM maps (RssShmem) | RSS")
    for name, peak in rows:
        print(f"{name:<22} | {peak['running']:>9} | {peak.get('RssAnon', 0) / 1024:14.0f} | "
              f"{peak.get('RssShmem', 0) / 1024:19.0f} | {peak.get('VmRSS', 0) / 1024:.0f}")
    pcm_mb = args.minutes * 60 * SR * 4 / 1e6
    print(f"a {args.minutes:g}-minute request's PCM: {pcm_mb:.0f} MB (mapped as its pages are read)")


if __name__ == "__main__":
    main()

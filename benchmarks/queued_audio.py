"""Decoded audio held by waiting requests, with and without the budget (issue 39 #2).

A real hasrd (fake engine: one worker, one job at a time, the job paced at real time so that the others wait)
gets ``--uploads`` uploads of ``--minutes`` of audio each (FLAC, a few MB each; 16 kHz float32 once decoded,
4 bytes a sample), all at once. Sampled every 0.2 s until every upload is either refused or waiting: the PCM the
daemon holds (its memfds, from /proc/PID/fd), the part of it that waiting requests hold (/api/ps
``queued_audio_mb``), the daemon's RSS and the 503s. Run twice side by side: with HASR_MAX_QUEUED_AUDIO_MB at its
default, and with it out of the way (what every version before it did). HASR_MAX_QUEUE is raised so that only
the audio budget refuses.

    python benchmarks/queued_audio.py [--uploads 20] [--minutes 31.6]
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))

from _uds import http_json  # noqa: E402
from daemon import Hasrd  # noqa: E402

MB = 2**20


def make_flac(path: str, minutes: float) -> str:
    import av
    import numpy as np

    sr = 16000
    with av.open(path, "w") as out:
        stream = out.add_stream("flac", rate=sr, layout="mono")
        left = int(minutes * 60 * sr)
        t = 0
        while left > 0:
            n = min(left, sr * 10)
            wave = (np.sin(2 * np.pi * 220 * (np.arange(n) + t) / sr) * 3000).astype("<i2")
            frame = av.AudioFrame.from_ndarray(wave[None, :], format="s16", layout="mono")
            frame.sample_rate = sr
            for packet in stream.encode(frame):
                out.mux(packet)
            t, left = t + n, left - n
        for packet in stream.encode(None):
            out.mux(packet)
    return path


def pcm_held_mb(pid: int) -> float:
    """The hasr-pcm memfds the daemon has open, in MB."""
    total = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if "hasr-pcm" in os.readlink(f"/proc/{pid}/fd/{fd}"):
                total += os.stat(f"/proc/{pid}/fd/{fd}").st_size
        except OSError:
            continue
    return total / MB


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def upload(sock_path: str, flac: bytes, answers: list[int], keep: list[socket.socket]) -> None:
    """One multipart upload; records the status when one comes (a waiting request answers only when done)."""
    boundary = b"hasrbench"
    body = (b"--" + boundary + b"\r\nContent-Disposition: form-data; name=\"file\"; filename=\"long.flac\"\r\n"
            b"Content-Type: audio/flac\r\n\r\n" + flac + b"\r\n--" + boundary + b"--\r\n")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sock_path)
    keep.append(s)
    s.sendall(b"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: hasr\r\nContent-Type: multipart/form-data; "
              b"boundary=" + boundary + f"\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
    try:
        head = s.recv(64)
    except OSError:
        return
    if head:
        answers.append(int(head.split()[1]))


def run(base: str, flac: bytes, uploads: int, budget: str | None) -> dict[str, float]:
    env = {"HASR_MAX_WORKERS": "1", "HASR_WORKER_PARALLEL": "1", "HASR_MAX_QUEUE": str(uploads + 4),
           "HASR_FAKE_RTF": "1", "HASR_MAX_UPLOAD_MB": "1024"}
    if budget is not None:
        env["HASR_MAX_QUEUED_AUDIO_MB"] = budget
    d = Hasrd(os.path.join(base, f"s{budget or 'default'}.sock"), env=env)
    answers: list[int] = []
    keep: list[socket.socket] = []
    peak = {"pcm_mb": 0.0, "waiting_mb": 0.0, "rss_mb": 0.0}
    try:
        threads = [threading.Thread(target=upload, args=(d.sock, flac, answers, keep), daemon=True)
                   for _ in range(uploads)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        settled = 0
        while time.monotonic() - t0 < 600:
            _, ps = http_json(d.sock, "GET", "/api/ps")
            peak["pcm_mb"] = max(peak["pcm_mb"], pcm_held_mb(d.proc.pid))
            peak["waiting_mb"] = max(peak["waiting_mb"], float(ps["queued_audio_mb"]))
            peak["rss_mb"] = max(peak["rss_mb"], rss_mb(d.proc.pid))
            # settled: every upload refused or waiting (the queue and the one running), none still decoding
            done = len(answers) + int(ps["queue"]) + int(ps["running"]) == uploads
            settled = settled + 1 if done else 0
            if settled >= 5:
                break
            time.sleep(0.2)
        peak["refused"] = float(sum(1 for a in answers if a == 503))
        peak["waiting"] = float(ps["queue"])
        peak["budget_mb"] = float(ps["max_queued_audio_mb"])
        peak["seconds"] = time.monotonic() - t0
    finally:
        for s in keep:
            s.close()
        d.stop()
    return peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--uploads", type=int, default=20)
    ap.add_argument("--minutes", type=float, default=31.6)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="hq", dir="/tmp") as base:
        path = make_flac(os.path.join(base, "long.flac"), args.minutes)
        flac = Path(path).read_bytes()
        each = args.minutes * 60 * 16000 * 4 / MB
        print(f"{args.uploads} uploads of {args.minutes:g} min ({len(flac) / MB:.1f} MB FLAC, {each:.0f} MB decoded "
              f"each); load average {os.getloadavg()[0]:.2f}")
        rows = [("budget (default)", run(base, flac, args.uploads, None)),
                ("no budget (before)", run(base, flac, args.uploads, "1000000"))]
    print(f"{'':20} {'budget MB':>10} {'waiting MB':>11} {'PCM held MB':>12} {'RSS MB':>8} {'waiting':>8} "
          f"{'503':>5}")
    for name, r in rows:
        print(f"{name:20} {r['budget_mb']:10.0f} {r['waiting_mb']:11.1f} {r['pcm_mb']:12.1f} {r['rss_mb']:8.1f} "
              f"{r['waiting']:8.0f} {r['refused']:5.0f}")
    print("(peaks; 'PCM held' is every memfd the daemon holds, the running job's included; load average "
          f"{os.getloadavg()[0]:.2f} at the end)")


if __name__ == "__main__":
    main()

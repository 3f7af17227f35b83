"""The daemon's own costs (issue 3), printed as medians with their targets.

- cold start: a client connects to an idle activated socket (the daemon is started when the listener becomes
  readable, as systemd does) → first byte of /health. Target ≤ 0.35 s on a 2-core machine.
- /health latency p50 / p99 with 50 concurrent clients (keep-alive, one asyncio process) while a
  transcription runs (fake engine at real-time speed). Target p99 ≤ 10 ms.
- daemon RSS when idle: right after start, and after a transcription once the worker is unloaded.
  Target ≤ 60 MB.
- decode speed (x real time) of hasr's decoder beside ``faster_whisper.decode_audio`` and an ``ffmpeg`` pipe
  on the same files (WAV 16 kHz mono and 44.1 kHz stereo, MP3, FLAC, AAC, Opus; noise of --decode-min
  minutes, made with ffmpeg), best of 3, interleaved. Target: hasr / decode_audio <= 1.0 (issue 11).

    python benchmarks/daemon.py [--runs 10] [--decode-min 10] [--decode-only]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import wave

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _uds import http  # noqa: E402


def write_wav(path: str, seconds: float) -> str:
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes((np.sin(np.arange(int(16000 * seconds)) / 9) * 6000).astype("<i2").tobytes())
    return path


def spawn_activated(listener: socket.socket, env: dict[str, str]) -> subprocess.Popen[bytes]:
    def child() -> None:
        os.dup2(listener.fileno(), 3)
        os.set_inheritable(3, True)

    full = {**os.environ, "HASR_ENGINE": "fake", "LISTEN_FDS": "1", "LISTEN_FDNAMES": "hasrd", **env}
    return subprocess.Popen(["sh", "-c", 'LISTEN_PID=$$ exec "$@"', "sh", sys.executable, "-m", "hasrd.server"],
                            env=full, preexec_fn=child, close_fds=False, stderr=subprocess.DEVNULL)


def cold_starts(base: str, runs: int) -> list[float]:
    times = []
    for i in range(runs):
        path = os.path.join(base, f"c{i}.sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        listener.listen(16)
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        t0 = time.perf_counter()
        c.connect(path)  # the listener is now readable: the "socket unit" starts the service
        c.sendall(b"GET /health HTTP/1.1\r\nHost: hasr\r\nConnection: close\r\n\r\n")
        proc = spawn_activated(listener, {})
        c.recv(1)
        times.append(time.perf_counter() - t0)
        c.close()
        proc.terminate()
        proc.wait(20)
        listener.close()
    return times


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


async def health_under_load(path: str, clients: int, seconds: float) -> list[float]:
    lat: list[float] = []
    end = time.perf_counter() + seconds

    async def client() -> None:
        r, w = await asyncio.open_unix_connection(path)
        req = b"GET /health HTTP/1.1\r\nHost: hasr\r\n\r\n"
        while time.perf_counter() < end:
            t0 = time.perf_counter()
            w.write(req)
            await w.drain()
            head = await r.readuntil(b"\r\n\r\n")
            length = int(next(x for x in head.split(b"\r\n") if x.lower().startswith(b"content-length"))
                         .split(b":")[1])
            await r.readexactly(length)
            lat.append(time.perf_counter() - t0)
            await asyncio.sleep(0.01)
        w.close()

    await asyncio.gather(*(client() for _ in range(clients)))
    return lat


DECODE_FILES = {  # name: ffmpeg output options
    "wav 16k mono": ["-ar", "16000", "-ac", "1", "x.wav"],
    "wav 44.1k stereo": ["-ar", "44100", "-ac", "2", "y.wav"],
    "mp3 128k stereo": ["-ar", "44100", "-ac", "2", "-b:a", "128k", "x.mp3"],
    "flac 48k stereo": ["-ar", "48000", "-ac", "2", "x.flac"],
    "aac 128k stereo": ["-ar", "44100", "-ac", "2", "-c:a", "aac", "-b:a", "128k", "x.m4a"],
    "opus 32k mono": ["-ar", "48000", "-ac", "1", "-c:a", "libopus", "-b:a", "32k", "x.opus"],
}


def decode_speeds(base: str, minutes: float) -> None:
    """Print each file's decode speed three ways, and hasr's time over decode_audio's."""
    from faster_whisper import decode_audio

    from hasrd import audio

    def hasr(path: str) -> int:
        fd, info = audio.decode_to_memfd(path)
        os.close(fd)
        return info.frames

    def fw(path: str) -> int:
        return len(decode_audio(path))

    def pipe(path: str) -> int:
        out = subprocess.run(["ffmpeg", "-v", "error", "-i", path, "-f", "f32le", "-ac", "1", "-ar", "16000", "-"],
                             capture_output=True, check=True).stdout
        return len(out) // 4

    seconds = minutes * 60
    ratios = []
    for name, opts in DECODE_FILES.items():
        path = os.path.join(base, opts[-1])
        subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", f"anoisesrc=d={seconds:g}:a=0.1",
                        *opts[:-1], path], check=True)
        best = {"hasr": float("inf"), "decode_audio": float("inf"), "ffmpeg pipe": float("inf")}
        for _ in range(3):  # interleaved, so that a busy moment hits all three
            for label, fn in (("hasr", hasr), ("decode_audio", fw), ("ffmpeg pipe", pipe)):
                t0 = time.perf_counter()
                frames = fn(path)
                best[label] = min(best[label], time.perf_counter() - t0)
                assert abs(frames - seconds * 16000) < 16000, (label, name, frames)
        ratio = best["hasr"] / best["decode_audio"]
        ratios.append(ratio)
        speeds = ", ".join(f"{label} {seconds / t:.0f}x" for label, t in best.items())
        print(f"decode {name:17s}: {speeds} real time; hasr / decode_audio = {ratio:.2f}")
        os.unlink(path)
    worst = max(ratios)
    print(f"decode: hasr / decode_audio median {statistics.median(ratios):.2f}, worst {worst:.2f} "
          f"(target <= 1.0: {'OK' if worst <= 1.0 else 'MISSED'}; within 10 % is noise here)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--decode-min", type=float, default=10.0)
    ap.add_argument("--decode-only", action="store_true")
    args = ap.parse_args()
    base = tempfile.mkdtemp(prefix="hb", dir="/tmp")
    if args.decode_only:
        try:
            decode_speeds(base, args.decode_min)
        finally:
            shutil.rmtree(base, ignore_errors=True)
        return
    try:
        cold = cold_starts(base, args.runs)
        path = os.path.join(base, "s.sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        listener.listen(128)
        proc = spawn_activated(listener, {"HASR_IDLE_EXIT_SEC": "3600"})
        http(path)
        time.sleep(0.5)
        rss_start = rss_mb(proc.pid)
        wav = write_wav(os.path.join(base, "a.wav"), 12.0)
        body = json.dumps({"audio_path": wav, "options": {"fake": {"rtf": 1.0}}}).encode()
        job = subprocess.Popen([sys.executable, "-c", f"import sys; sys.path.insert(0, {os.path.dirname(__file__)!r});"
                                f"import _uds; _uds.http({path!r}, 'POST', '/transcribe', {body!r})"])
        while b'"running":1' not in http(path, path="/api/ps")[1]:
            time.sleep(0.05)
        lat = asyncio.run(health_under_load(path, args.clients, 8.0))
        job.wait(60)
        http(path, "POST", "/api/unload")
        time.sleep(1.0)
        rss_idle = rss_mb(proc.pid)
        proc.terminate()
        proc.wait(20)
        decode_speeds(base, args.decode_min)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    lat.sort()
    p50, p99 = lat[len(lat) // 2], lat[int(len(lat) * 0.99)]
    med = statistics.median(cold)
    ok = lambda good: "OK" if good else "MISSED"  # noqa: E731
    print(f"cold start (connect -> first /health byte): median {med * 1000:.0f} ms over {len(cold)} runs "
          f"(target <= 350 ms: {ok(med <= 0.35)})")
    print(f"/health with {args.clients} clients during a transcription: p50 {p50 * 1000:.2f} ms, "
          f"p99 {p99 * 1000:.2f} ms over {len(lat)} requests (target p99 <= 10 ms: {ok(p99 <= 0.010)})")
    print(f"daemon RSS idle: {rss_start:.1f} MB after start, {rss_idle:.1f} MB after a transcription and unload "
          f"(target <= 60 MB: {ok(max(rss_start, rss_idle) <= 60)})")


if __name__ == "__main__":
    main()

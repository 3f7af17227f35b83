"""Recognition overhead of hasr against faster-whisper called directly, on the same audio and model (issue 4).

Measured in one run, medians over --runs, CPU and the embedded whisper base (int8) unless HASR_FW_MODEL /
HASR_FW_DEVICE say otherwise:

  warm   POST /transcribe through a running hasrd (decode, memfd, worker, JSON) vs WhisperModel.transcribe(path)
         in this process with the engine's exact parameters                               target <= 1.05
  cold   first request to a hasrd without a worker (spawn + load + transcribe) vs a fresh python that imports
         faster_whisper, loads the model and transcribes                                   target <= 1.15
  decode hasrd.audio (PyAV decode + resample to 16 kHz mono float32) speed, x real time  target >= 300
  rss    the worker's peak RSS while transcribing a 1-hour file (a clip every minute, silence between)

    python benchmarks/engine.py [--runs 5] [--seconds 30] [--hour 3600] [--skip-hour]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import numpy as np  # noqa: E402

from hasrd import audio  # noqa: E402
from hasrd import embedded  # noqa: E402
from hasrd.worker.engines.whisper import WHOLE_KW  # noqa: E402
from hasrd.worker.textrules import token_cap  # noqa: E402

SR = 16000
DATA = ROOT / "tests" / "data"
CLIPS = ["en_quick_brown_fox", "en_hello_world", "en_espeak_park"]


def load(name: str) -> np.ndarray:
    pcm, _info = audio.decode_to_array(str(DATA / f"{name}.flac"))
    return pcm


def write(pcm: np.ndarray, path: Path, fmt: str = "flac", codec: str = "flac") -> Path:
    import av

    with av.open(str(path), "w", format=fmt) as out:
        st = out.add_stream(codec, rate=SR, layout="mono")
        res = av.AudioResampler(format=st.codec_context.format.name, layout="mono", rate=SR)
        for i in range(0, len(pcm), SR * 10):
            frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(pcm[i:i + SR * 10]).reshape(1, -1), format="flt",
                                               layout="mono")
            frame.sample_rate = SR
            for f in res.resample(frame):
                out.mux(st.encode(f))
        for f in res.resample(None):
            out.mux(st.encode(f))
        out.mux(st.encode(None))
    return path


def speech(seconds: float) -> np.ndarray:
    gap = np.zeros(int(0.6 * SR), np.float32)
    parts: list[np.ndarray] = []
    while sum(len(p) for p in parts) < seconds * SR:
        for c in CLIPS:
            parts += [load(c), gap]
    return np.concatenate(parts)[: int(seconds * SR)]


class Daemon:
    def __init__(self, tmp: str, env: dict[str, str]) -> None:
        self.sock = os.path.join(tmp, "s")
        self.log = open(os.path.join(tmp, "hasrd.log"), "ab")  # noqa: SIM115 - the daemon's log, closed in close()
        self.proc = subprocess.Popen([sys.executable, "-m", "hasrd.server", "--socket", self.sock],
                                     env={**os.environ, **env}, stdout=self.log, stderr=subprocess.STDOUT)
        self.http = httpx.Client(transport=httpx.HTTPTransport(uds=self.sock), base_url="http://hasr", timeout=3600)
        for _ in range(400):
            try:
                if self.http.get("/health").status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.05)
        raise RuntimeError("hasrd did not start")

    def transcribe(self, path: Path) -> dict[str, Any]:
        r = self.http.post("/transcribe", json={"audio_path": str(path), "language": "English"})
        r.raise_for_status()
        return dict(r.json())

    def unload(self) -> None:
        self.http.post("/api/unload").raise_for_status()
        while self.http.get("/api/ps").json()["state"] != "stopped":
            time.sleep(0.02)

    def close(self) -> None:
        self.http.close()
        self.proc.terminate()
        self.proc.wait(30)
        self.log.close()


DIRECT = """
import sys, time
from faster_whisper import WhisperModel
m = WhisperModel(sys.argv[1], device=sys.argv[2], compute_type=sys.argv[3])
segs, info = m.transcribe(sys.argv[4], language="en", max_new_tokens={cap}, **{kw!r})
print("".join(s.text for s in segs))
"""


def median_ratio(a: list[float], b: list[float]) -> tuple[float, float, float]:
    ma, mb = statistics.median(a), statistics.median(b)
    return ma, mb, ma / mb


def peak_rss(pid: int, stop: threading.Event, out: dict[str, int], once: bool = False) -> None:
    """Sample /proc/PID/status every 0.1 s, keeping the largest values (MB)."""
    while not stop.is_set():
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    key, _, val = line.partition(":")
                    if key in ("VmHWM", "VmRSS", "RssAnon", "RssShmem", "RssFile"):
                        out[key] = max(out.get(key, 0), int(val.split()[0]) // 1024)
        except OSError:
            pass
        if once:
            return
        stop.wait(0.1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=30.0, help="length of the speech used for warm/cold")
    ap.add_argument("--hour", type=float, default=3600.0, help="length of the long file for the RSS check")
    ap.add_argument("--skip-hour", action="store_true")
    args = ap.parse_args()
    model = os.environ.get("HASR_FW_MODEL") or embedded.ensure().path or ""
    device = os.environ.get("HASR_FW_DEVICE", "cpu")
    compute = "float16" if device == "cuda" else "int8"
    tmp = tempfile.mkdtemp(prefix="hasr-bench-")
    pcm = speech(args.seconds)
    clip = write(pcm, Path(tmp) / "speech.flac")
    cap = token_cap(len(pcm) / SR)
    kw = dict(WHOLE_KW, word_timestamps=False, initial_prompt=None)
    print(f"model {model} on {device} ({compute}); audio {len(pcm) / SR:.1f} s of speech; {args.runs} runs")

    from faster_whisper import WhisperModel

    fw = WhisperModel(model, device=device, compute_type=compute)
    d = Daemon(tmp, {"HASR_ENGINE": "whisper", "HASR_FW_MODEL": model, "HASR_FW_DEVICE": device})
    try:
        d.transcribe(clip)  # load + warm up both sides
        list(fw.transcribe(str(clip), language="en", max_new_tokens=cap, **kw)[0])
        warm_hasr, warm_direct = [], []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            d.transcribe(clip)
            warm_hasr.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            list(fw.transcribe(str(clip), language="en", max_new_tokens=cap, **kw)[0])
            warm_direct.append(time.perf_counter() - t0)
        del fw
        h, dr, ratio = median_ratio(warm_hasr, warm_direct)
        print(f"warm   hasr {h:.3f} s  direct {dr:.3f} s  ratio {ratio:.3f}  (target <= 1.05)")

        script = DIRECT.format(cap=cap, kw=kw)
        cold_hasr, cold_direct = [], []
        for _ in range(args.runs):
            d.unload()
            t0 = time.perf_counter()
            d.transcribe(clip)
            cold_hasr.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", script, model, device, compute, str(clip)], check=True,
                           capture_output=True)
            cold_direct.append(time.perf_counter() - t0)
        h, dr, ratio = median_ratio(cold_hasr, cold_direct)
        print(f"cold   hasr {h:.3f} s  direct {dr:.3f} s  ratio {ratio:.3f}  (target <= 1.15)")

        ten = np.tile(pcm, int(600 / (len(pcm) / SR)) + 1)[: 600 * SR]
        for fmt, codec, ext in (("flac", "flac", "flac"), ("mp3", "libmp3lame", "mp3")):
            path = write(ten, Path(tmp) / f"ten.{ext}", fmt, codec)
            times = []
            for _ in range(3):
                t0 = time.perf_counter()
                got, _info = audio.decode_to_array(str(path))
                times.append(time.perf_counter() - t0)
            print(f"decode {ext:4s} 600 s in {min(times):.3f} s = {600 / min(times):.0f}x real time  (target >= 300)")
        del ten, got

        if not args.skip_hour:
            units = [np.concatenate([c, np.zeros(60 * SR - len(c), np.float32)]) for c in map(load, CLIPS)]
            minutes = int(args.hour // 60)
            long_path = write(np.concatenate([units[i % len(units)] for i in range(minutes)]), Path(tmp) / "hour.flac")
            d.transcribe(clip)
            pid = int(d.http.get("/api/ps").json()["pid"])
            base: dict[str, int] = {}
            peak_rss(pid, threading.Event(), base, once=True)
            peaks: dict[str, int] = {}
            stop = threading.Event()
            th = threading.Thread(target=peak_rss, args=(pid, stop, peaks), daemon=True)
            th.start()
            t0 = time.perf_counter()
            r = d.transcribe(long_path)
            elapsed = time.perf_counter() - t0
            stop.set()
            th.join()
            print(f"rss    worker after a {args.seconds:.0f} s request: VmRSS {base.get('VmRSS')} MB (RssAnon "
                  f"{base.get('RssAnon')} MB)")
            print(f"rss    {args.hour / 3600:.2f} h file ({len(r['per_sentence'])} segments, {elapsed:.1f} s): worker "
                  f"peak VmHWM {peaks.get('VmHWM')} MB = RssAnon {peaks.get('RssAnon')} MB + RssShmem "
                  f"{peaks.get('RssShmem')} MB (pages of the PCM memfd, {args.hour * SR * 4 / 2**20:.0f} MB) + RssFile "
                  f"{peaks.get('RssFile')} MB")
    finally:
        d.close()


if __name__ == "__main__":
    main()

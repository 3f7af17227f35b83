"""hasr on a real GPU (issue 28): the real hasrd, its faster-whisper worker on cuda, and faster-whisper itself, side by
side in one run, printed as one table.

Every figure is measured here, against faster-whisper called directly in this process on the same GPU, the same
model and the same audio. A figure that could not be measured says why in its row. ``--device cpu`` runs the same
code on the CPU (a rehearsal: the GPU machine is lent by the minute, scripts/gpu-run carries this there).

    python benchmarks/gpu_real.py --model DIR --audio DIR [--out DIR] [--only cold,warm,...] [--device cuda]

--audio holds en_long_5min.flac, the zh_long_*.flac files and their .txt transcripts (benchmarks/corpus.py --long
makes them; benchmarks/gpu_carry.py converts and carries them); --code DIR runs the daemon from another checkout's
hasrd (a before and after in one call). Sections, in the order they run (the first must meet a fresh
machine): cold, jit, nolib, warm, long, tune, vram, zh, models, live, hybrid, faults, big.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "tests"))  # first: its daemon.py (the Hasrd helper), not benchmarks/daemon.py

from daemon import Hasrd  # noqa: E402
from speech import edit_distance, norm_en, norm_zh  # noqa: E402

SR = 16000
CLIP = REPO / "tests" / "data" / "en_espeak_park.flac"
CLIP_TEXT = "The weather is nice today. We are going to the park to take a walk."
SECTIONS = ("cold", "jit", "nolib", "warm", "long", "profile", "tune", "vram", "zh", "models", "live", "hybrid",
            "faults", "big", "coldprof", "batch")
ROWS: list[dict[str, Any]] = []
RAW: dict[str, Any] = {}


def row(section: str, figure: str, hasr: str, reference: str = "", ratio: float | None = None, goal: str = "",
        met: bool | None = None) -> None:
    r = {"section": section, "figure": figure, "hasr": hasr, "reference": reference,
         "ratio": None if ratio is None else round(ratio, 3), "goal": goal, "met": met}
    ROWS.append(r)
    print(f"[{section}] {figure}: {hasr}" + (f" | ref {reference}" if reference else "")
          + (f" | {ratio:.2f}x" if ratio is not None else "") + (f" | goal {goal}: {'met' if met else 'MISSED'}"
                                                                 if goal and met is not None else ""), flush=True)


# ---- the machine ---------------------------------------------------------------------------------------------

def nvml_used_mb() -> int | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        return int(pynvml.nvmlDeviceGetMemoryInfo(h).used // 2**20)
    except Exception:
        return None


def gpu_pids() -> set[int]:
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        return {p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)}
    except Exception:
        return set()


class PeakVram:
    """NVML's used memory polled every 20 ms while a block runs: its peak."""

    def __init__(self) -> None:
        self.peak = 0
        self.stop = threading.Event()

    def __enter__(self) -> PeakVram:
        def poll() -> None:
            while not self.stop.is_set():
                self.peak = max(self.peak, nvml_used_mb() or 0)
                time.sleep(0.02)
        self.t = threading.Thread(target=poll, daemon=True)
        self.t.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        self.t.join()


def wait_used(target: int, within: float, slack: int = 16) -> float | None:
    """Seconds until NVML's used memory is within ``slack`` MB of ``target`` (None: not within ``within`` s)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < within:
        u = nvml_used_mb()
        if u is not None and u <= target + slack:
            return time.monotonic() - t0
        time.sleep(0.02)
    return None


# ---- hasr and faster-whisper ---------------------------------------------------------------------------------

class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.device = args.device
        self.model = args.model
        self.tmp = tempfile.mkdtemp(prefix="hg", dir="/tmp")
        self.n = 0
        self.compute = "float16" if self.device == "cuda" else "int8"
        self._direct: dict[str, Any] = {}

    def env(self, **extra: str) -> dict[str, str]:
        e = {"HASR_ENGINE": "whisper", "HASR_FW_MODEL": self.model, "HASR_FW_DEVICE": self.device,
             "HASR_IDLE_TTL_SEC": "600", "HASR_STALL_SEC": "600"}
        if self.device == "cuda":
            e["HASR_CUBLAS_FROM_CUDA13"] = "1"
        if self.args.code:  # another checkout's hasrd (issue 38's before and after in one call)
            e["PYTHONPATH"] = os.pathsep.join([os.path.abspath(self.args.code), os.environ.get("PYTHONPATH", "")])
        links = os.environ.get("HASR_BENCH_LINKS", "")  # the direct calls' cuBLAS links: never hasrd's
        if links:
            e["LD_LIBRARY_PATH"] = os.pathsep.join(x for x in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep)
                                                   if x and x != links)
        e.update(extra)
        return e

    @contextlib.contextmanager
    def daemon(self, **extra: str) -> Iterator[Hasrd]:
        self.n += 1
        d = Hasrd(os.path.join(self.tmp, f"d{self.n}.sock"), env=self.env(**extra))
        try:
            yield d
        finally:
            d.stop()
            RAW.setdefault("logs", {})[f"d{self.n}"] = Path(d.log_path).read_text(errors="replace")[-4000:]

    def hasrctl(self, d: Hasrd, *args: str) -> tuple[float, subprocess.CompletedProcess[str]]:
        t0 = time.monotonic()
        r = subprocess.run([sys.executable, "-m", "hasrctl", "transcribe", "--socket", d.sock, "--no-autostart",
                            "--no-progress", *args], capture_output=True, text=True, timeout=600)
        return time.monotonic() - t0, r

    def openai(self, d: Hasrd, path: str, **fields: str) -> tuple[float, dict[str, Any]]:
        """POST /v1/audio/transcriptions with the file uploaded (verbose_json), as the OpenAI SDK sends it."""
        with open(path, "rb") as f:
            data = f.read()
        t0 = time.monotonic()
        with d.client(600) as c:
            r = c.post("/v1/audio/transcriptions", files={"file": (os.path.basename(path), data)},
                       data={"response_format": "verbose_json", **fields})
        took = time.monotonic() - t0
        body = r.json()
        if r.status_code != 200:
            raise RuntimeError(f"{r.status_code}: {body}")
        return took, body

    def direct(self, compute: str | None = None) -> Any:
        from faster_whisper import WhisperModel

        key = compute or self.compute
        if key not in self._direct:
            self._direct[key] = WhisperModel(self.model, device=self.device, compute_type=key)
        return self._direct[key]

    def drop_direct(self) -> None:
        self._direct.clear()
        import gc

        gc.collect()


def pcm_of(path: str | Path) -> Any:
    from faster_whisper import decode_audio

    return decode_audio(str(path))


def wer(ref: str, hyp: str) -> float:
    r = norm_en(ref)
    return edit_distance(r, norm_en(hyp)) / max(1, len(r))


def cer(ref: str, hyp: str) -> float:
    r = norm_zh(ref)
    return edit_distance(r, norm_zh(hyp)) / max(1, len(r))


def med(xs: list[float]) -> float:
    return statistics.median(xs)


def timed(fn: Callable[[], Any], times: int) -> tuple[float, Any]:
    out, took = None, []
    for _ in range(times):
        t0 = time.monotonic()
        out = fn()
        took.append(time.monotonic() - t0)
    return med(took), out


def fw_text(segments: Any) -> str:
    return "".join(s.text for s in segments).strip()


# ---- sections ------------------------------------------------------------------------------------------------

def s_cold(b: Bench) -> None:
    """First request on a fresh socket: spawn, CUDA init, load, warm-up, the 5 s clip's text."""
    for label in ("first on this machine", "caches warm"):
        if label == "caches warm" and "cold_first" not in RAW:
            break
        with b.daemon() as d:
            took, r = b.hasrctl(d, "-l", "en", str(CLIP))
            ps = d.get("/api/ps")
            w = (ps.get("workers") or [{}])[0]
            ident = w.get("identity") or ps.get("identity") or {}
            RAW["cold_first" if label.startswith("first") else "cold_warm"] = {
                "wall_s": took, "rc": r.returncode, "text": r.stdout, "stderr": r.stderr[-800:],
                "load_s": w.get("load_s", ps.get("load_s")), "warm_up_s": ident.get("warm_up_s")}
            ok = r.returncode == 0 and "park" in r.stdout.lower()
            goal = "<= 1.5 s" if label == "caches warm" else "explained, shown as a loading phase"
            row("cold", f"first request -> text of a 5 s clip ({label})",
                f"{took:.2f} s (load_s {w.get('load_s', ps.get('load_s'))}, warm-up {ident.get('warm_up_s')} s)"
                + ("" if ok else f" FAILED rc={r.returncode}: {r.stderr[-300:]}"),
                goal=goal, met=(took <= 1.5 and ok) if label == "caches warm" else ok)


def s_jit(b: Bench) -> None:
    """Why the first decode of a fresh machine is slow: the wheel's GPU code, and a process with the JIT cache
    disabled against one with it (CUDA_CACHE_DISABLE=1)."""
    libs = glob.glob(str(Path(__import__("ctranslate2").__file__).parent.parent
                         / "ctranslate2.libs" / "libctranslate2*"))
    if libs and shutil.which("cuobjdump"):
        elf = subprocess.run(["cuobjdump", "--list-elf", libs[0]], capture_output=True, text=True).stdout
        ptx = subprocess.run(["cuobjdump", "--list-ptx", libs[0]], capture_output=True, text=True).stdout
        archs = sorted({t.split(".")[-2] for t in elf.split() if ".sm_" in t})
        parchs = sorted({t.split(".")[-2] for t in ptx.split() if ".sm_" in t or ".compute_" in t})
        RAW["jit_archs"] = {"elf": archs, "ptx": parchs}
        row("jit", "libctranslate2's GPU code", f"SASS for {', '.join(archs) or 'none'}; PTX for "
            f"{', '.join(parchs) or 'none'}")
    probe = ("import time, sys; t0=time.monotonic(); from faster_whisper import WhisperModel, decode_audio;"
             f"m=WhisperModel({b.model!r}, device={b.device!r}, compute_type={b.compute!r}); t1=time.monotonic();"
             f"a=decode_audio({str(CLIP)!r}); s,_=m.transcribe(a, language='en', beam_size=5);"
             "txt=''.join(x.text for x in s); t2=time.monotonic(); print(round(t1-t0,3), round(t2-t1,3))")
    out = {}
    for label, extra in (("JIT cache disabled", {"CUDA_CACHE_DISABLE": "1"}), ("JIT cache on", {})):
        r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300,
                           env={**os.environ, **extra})
        out[label] = r.stdout.strip() or r.stderr[-300:]
    RAW["jit"] = out
    row("jit", "a fresh process: load s, first 5 s decode s", "; ".join(f"{k}: {v}" for k, v in out.items()))


def s_nolib(b: Bench) -> None:
    """A CUDA 13-only host without the opt-in or the wheel: what the user hears (code and sentence)."""
    if b.device != "cuda":
        row("nolib", "load without CUDA 12 cuBLAS", "not measured: the CPU needs no cuBLAS")
        return
    with b.daemon(HASR_CUBLAS_FROM_CUDA13="0") as d:
        with d.client(300) as c:
            r = c.post("/api/load")
        body = r.json()
        RAW["nolib"] = body
        err = body.get("error", {})
        row("nolib", "load on a CUDA 13-only host, no opt-in", f"{r.status_code} {err.get('code')}: "
            f"{err.get('message', '')[:300]}", goal="its code and the fix, no traceback",
            met=err.get("code") == "cuda_libraries_missing" and "Traceback" not in err.get("message", ""))


def s_warm(b: Bench) -> None:
    """The warm 5 s clip through hasrctl and the OpenAI route against faster-whisper in this process."""
    with b.daemon() as d:
        b.hasrctl(d, "-l", "en", str(CLIP))  # loaded
        cli = med([b.hasrctl(d, "-l", "en", str(CLIP))[0] for _ in range(5)])
        oa = med([b.openai(d, str(CLIP), language="en")[0] for _ in range(5)])
    m = b.direct()
    pcm = pcm_of(CLIP)
    fw_text(m.transcribe(pcm, language="en", beam_size=5)[0])
    direct, _ = timed(lambda: fw_text(m.transcribe(pcm, language="en", beam_size=5)[0]), 5)
    words, _ = timed(lambda: fw_text(m.transcribe(pcm, language="en", beam_size=5, word_timestamps=True,
                                                  vad_filter=True)[0]), 5)
    row("warm", "warm 5 s clip: OpenAI route (upload, decode, verbose_json)", f"{oa:.3f} s", f"{direct:.3f} s",
        oa / direct, "<= 1.2x", oa / direct <= 1.2)
    row("warm", "the same against faster-whisper with VAD and word timestamps (what hasr runs)", f"{oa:.3f} s",
        f"{words:.3f} s", oa / words)
    row("warm", "warm 5 s clip: hasrctl transcribe (a new CLI process)", f"{cli:.3f} s", f"{direct:.3f} s",
        cli / direct, "<= 1.2x", cli / direct <= 1.2)


def long_files(b: Bench) -> tuple[str, str]:
    en = os.path.join(b.args.audio, f"{b.args.long}.flac")
    return en, Path(en).with_suffix(".txt").read_text()


def s_long(b: Bench) -> None:
    """The 5-minute English file: hasr (language given and detected) against faster-whisper's sequential
    transcribe and its BatchedInferencePipeline (batch 16, 8, 32), wall and WER."""
    from faster_whisper import BatchedInferencePipeline

    path, ref = long_files(b)
    pcm = pcm_of(path)
    dur = len(pcm) / SR
    with b.daemon() as d:
        b.openai(d, str(CLIP), language="en")
        runs = [b.openai(d, path, language="en") for _ in range(b.args.repeat)]
        hasr_s = med([t for t, _ in runs])
        text = runs[-1][1]["text"]
        auto_s, auto = b.openai(d, path)
    RAW["long_hasr_text"] = text
    RAW["long_hasr_fields"] = {k: v for k, v in runs[-1][1].items() if k not in ("segments", "words", "text")}
    m = b.direct()
    seq_s, seq = timed(lambda: fw_text(m.transcribe(pcm, language="en", beam_size=5)[0]), max(1, b.args.repeat - 1))
    pipe = BatchedInferencePipeline(m)
    res: dict[int, tuple[float, str]] = {}
    for bs in (16, 8, 32):
        res[bs] = timed(lambda bs=bs: fw_text(pipe.transcribe(pcm, language="en", batch_size=bs)[0]), b.args.repeat)
    p16 = res[16][0]
    row("long", f"5-minute English file ({dur:.0f} s), language given", f"{hasr_s:.2f} s (RTFx {dur / hasr_s:.0f}, "
        f"WER {wer(ref, text):.3f})", f"pipeline b16 {p16:.2f} s (WER {wer(ref, res[16][1]):.3f})", hasr_s / p16,
        "<= 1.0x, RTFx >= 500", hasr_s / p16 <= 1.0 and dur / hasr_s >= 500)
    row("long", "same, against faster-whisper's sequential transcribe", f"{hasr_s:.2f} s",
        f"{seq_s:.2f} s (WER {wer(ref, seq):.3f})", hasr_s / seq_s, "<= 0.3x", hasr_s / seq_s <= 0.3)
    row("long", "same, language detected (the vote)", f"{auto_s:.2f} s ({auto.get('language')}, WER "
        f"{wer(ref, auto['text']):.3f})", f"pipeline b16 {p16:.2f} s", auto_s / p16)
    row("long", "faster-whisper's pipeline: batch 8 / 16 / 32", "",
        " / ".join(f"{res[k][0]:.2f} s" for k in (8, 16, 32)))


def s_profile(b: Bench) -> None:
    """Where the whisper engine's time goes on the long file: the worker's engine run in this process, profiled."""
    import cProfile
    import io
    import pstats

    from hasrd import config
    from hasrd.worker.engine import NullEmitter
    from hasrd.worker.engines import load
    from hasrd.worker.engines.whisper import WhisperEngine

    path, _ref = long_files(b)
    pcm = pcm_of(path)
    eng = WhisperEngine(config.load({"HASR_FW_DEVICE": b.device}), b.model, b.device, b.compute)
    load(eng, lambda phase: None)  # and its decode loop, as the worker builds them
    eng.transcribe(pcm, "en", {}, NullEmitter(), lambda: False)
    took, _ = timed(lambda: eng.transcribe(pcm, "en", {}, NullEmitter(), lambda: False), 2)
    prof = cProfile.Profile()
    prof.enable()
    eng.transcribe(pcm, "en", {}, NullEmitter(), lambda: False)
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(25)
    RAW["profile"] = out.getvalue()[-6000:]
    eng.close()
    row("profile", "the engine in-process on the long file (no daemon, no upload)", f"{took:.2f} s")
    from hasrd.worker import segment, vad

    head = pcm[: 300 * SR]
    sweep = []
    pieces = segment.quiet_pieces(head, 60.0)
    for n in (1, 2, 4, 8):
        t, _ = timed(lambda n=n: list(vad.piece_spans(head, pieces, n)), 2)
        sweep.append(f"{n}: {t:.3f} s")
    t1, _ = timed(lambda: vad.speech_spans(head), 2)
    sweep.append(f"one pass over all 300 s: {t1:.3f} s")
    row("profile", "Silero VAD over 300 s in 60 s pieces, by threads side by side", "; ".join(sweep))


def s_tune(b: Bench) -> None:
    """The GPU defaults: HASR_WHISPER_BATCH 2, 8, 16, 32 and compute types float16, int8_float16, bfloat16 on the
    5-minute file (wall, median of 2, and WER)."""
    path, ref = long_files(b)
    out = []
    combos = [("16", b.compute), ("2", b.compute), ("8", b.compute), ("32", b.compute)]
    if b.device == "cuda":
        combos += [("16", "int8_float16"), ("16", "bfloat16")]
    for batch, compute in combos:
        with b.daemon(HASR_WHISPER_BATCH=batch, HASR_FW_COMPUTE_TYPE=compute) as d:
            b.openai(d, str(CLIP), language="en")
            runs = [b.openai(d, path, language="en") for _ in range(max(1, b.args.repeat - 1))]
        t = med([x for x, _ in runs])
        out.append((batch, compute, t, wer(ref, runs[-1][1]["text"])))
        row("tune", f"HASR_WHISPER_BATCH={batch}, {compute}", f"{t:.2f} s, WER {out[-1][3]:.3f}")
    RAW["tune"] = out


def s_vram(b: Bench) -> None:
    """VRAM: before the first request, loaded, the peak during the 5-minute file, after unload, after the idle
    exit; and the daemon is never a GPU process."""
    if b.device != "cuda":
        row("vram", "VRAM", "not measured: no GPU")
        return
    path, _ref = long_files(b)
    base = nvml_used_mb() or 0
    with b.daemon() as d:
        hasrd_pid = d.proc.pid
        b.openai(d, str(CLIP), language="en")
        loaded = nvml_used_mb() or 0
        with PeakVram() as pk:
            b.openai(d, path, language="en")
        daemon_on_gpu = hasrd_pid in gpu_pids()
        with d.client() as c:
            c.post("/api/unload")
        unload_s = wait_used(base, 10)
        after_unload = nvml_used_mb() or 0
    b.n += 1
    idle = Hasrd(os.path.join(b.tmp, f"d{b.n}.sock"), env=b.env(), args=["--idle-exit", "2"])
    b.openai(idle, str(CLIP), language="en")
    with idle.client() as c:
        c.post("/api/unload")
    try:
        rc: int | None = idle.proc.wait(60)
    except subprocess.TimeoutExpired:
        rc = None
    idle.stop()
    after_exit = nvml_used_mb() or 0
    row("vram", "NVML used: before / loaded / peak in the 5-min file / after unload / after idle exit",
        f"{base} / {loaded} (+{loaded - base}) / {pk.peak} (+{pk.peak - base}) / {after_unload} "
        f"(+{after_unload - base}, {unload_s if unload_s is None else round(unload_s, 2)} s) / {after_exit} "
        f"(+{after_exit - base}; exit status {rc})", goal="+0 after unload and exit; hasrd never a GPU process",
        met=after_unload - base <= 0 and after_exit - base <= 0 and not daemon_on_gpu)


def s_zh(b: Bench) -> None:
    """The Mandarin files (zh_long_*.flac) on the GPU and on the CPU (this machine's cores) through the daemon, the
    CER of each and over all (issue 38: the GPU gives the CPU's text, within 0.03), beside faster-whisper's
    pipeline (batch 16) and sequential transcribe on the same device."""
    from faster_whisper import BatchedInferencePipeline, WhisperModel

    paths = sorted(glob.glob(os.path.join(b.args.audio, "zh_long_*.flac")))
    out: dict[str, dict[str, Any]] = {}
    for device in (b.device, "cpu") if b.device == "cuda" else ("cpu",):
        m = WhisperModel(b.model, device=device, compute_type="float16" if device == "cuda" else "int8")
        errs: dict[str, list[float]] = {"hasr": [], "pipeline": [], "sequential": []}
        took = 0.0
        with b.daemon(HASR_FW_DEVICE=device, HASR_FW_COMPUTE_TYPE="default") as d:
            for path in paths:
                ref = Path(path).with_suffix(".txt").read_text()
                n = len(norm_zh(ref))
                t, body = b.openai(d, path, language="zh")
                took += t
                pcm = pcm_of(path)
                pipe = fw_text(BatchedInferencePipeline(m).transcribe(pcm, language="zh", batch_size=16)[0])
                seq = fw_text(m.transcribe(pcm, language="zh", beam_size=5)[0])
                for k, text in (("hasr", body["text"]), ("pipeline", pipe), ("sequential", seq)):
                    errs[k].append(cer(ref, text) * n)
                errs.setdefault("n", []).append(n)
                out.setdefault(device, {})[Path(path).stem] = (t, cer(ref, body["text"]), body["text"])
                row("zh", f"{Path(path).stem} on {device}", f"{t:.2f} s, CER {cer(ref, body['text']):.3f}",
                    f"faster-whisper's pipeline CER {cer(ref, pipe):.3f}, sequential {cer(ref, seq):.3f}")
        del m
        total = sum(errs["n"])
        pooled = {k: sum(v) / total for k, v in errs.items() if k != "n"}
        out[device]["pooled"] = pooled
        row("zh", f"{len(paths)} Mandarin files on {device}, pooled", f"{took:.2f} s, CER {pooled['hasr']:.3f}",
            f"pipeline {pooled['pipeline']:.3f}, sequential {pooled['sequential']:.3f}")
    RAW["zh"] = out
    if "cuda" in out:
        g, c = out["cuda"]["pooled"]["hasr"], out["cpu"]["pooled"]["hasr"]
        row("zh", "Mandarin: CER on the GPU against the CPU (pooled)", f"{g:.3f}", f"{c:.3f}",
            goal="same quality (within 0.03)", met=abs(g - c) <= 0.03)


def s_models(b: Bench) -> None:
    """Two models on one GPU, then a third with HASR_MAX_WORKERS=2: the least recently used one is stopped."""
    data = os.path.join(b.tmp, "xdg")
    for name in ("base-b", "base-c"):
        d = os.path.join(data, "hasr", "models", name)
        os.makedirs(d, exist_ok=True)
        for f in os.listdir(b.model):
            with contextlib.suppress(FileExistsError):
                os.symlink(os.path.join(b.model, f), os.path.join(d, f))
    os.environ["XDG_DATA_HOME"] = data
    try:
        base = nvml_used_mb() or 0
        with b.daemon(HASR_MAX_WORKERS="2") as d:
            b.openai(d, str(CLIP), language="en")
            b.openai(d, str(CLIP), language="en", model="base-b")
            ps = d.get("/api/ps")
            two = [(w.get("model"), w.get("device"), w.get("vram_mb")) for w in ps.get("workers", [])]
            used2 = nvml_used_mb() or 0
            b.openai(d, str(CLIP), language="en", model="base-c")
            ps3 = d.get("/api/ps")
            three = [(w.get("model"), w.get("state"), w.get("vram_mb")) for w in ps3.get("workers", [])]
            used3 = nvml_used_mb() or 0
        RAW["models"] = {"two": two, "three": three}
        row("models", "two models loaded: /api/ps per worker (model, device, vram_mb)", f"{two}",
            f"NVML +{used2 - base} MB")
        row("models", "a third with HASR_MAX_WORKERS=2", f"{three}", f"NVML +{used3 - base} MB",
            goal="LRU evicted, its VRAM back", met=len([t for t in three if t[1] == "ready"]) <= 2)
    finally:
        os.environ.pop("XDG_DATA_HOME", None)


def s_live(b: Bench) -> None:
    """Live: one session at real time, then 8 at once (first words after speech onset, finals after the end)."""
    from live import run_session, stream
    from live_client import pcm16_24k

    audio, spans = stream(0.75)
    pcm24 = pcm16_24k(audio)
    with b.daemon() as d:
        b.openai(d, str(CLIP), language="en")
        one = run_session(d.sock, pcm24, spans, "en", False)
        results: list[Any] = [None] * 8

        def go(k: int) -> None:
            try:
                results[k] = run_session(d.sock, pcm24, spans, "en", False)
            except Exception as e:
                results[k] = e
        ts = [threading.Thread(target=go, args=(k,)) for k in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()

    def stats(sessions: list[Any]) -> str:
        first = [x for s in sessions if not isinstance(s, Exception) for x in s.first if x is not None]
        final = [x for s in sessions if not isinstance(s, Exception) for x in s.final if x is not None]
        total = sum(len(s.first) for s in sessions if not isinstance(s, Exception))
        if not first:
            return "no words"
        q = sorted(first)
        f = sorted(final) or [float("nan")]
        return (f"first words p50 {med(q):.2f} / p90 {q[int(0.9 * (len(q) - 1))]:.2f} s; finals p50 {med(f):.2f} / "
                f"p90 {f[int(0.9 * (len(f) - 1))]:.2f} s; {len(first)}/{total} utterances had words, "
                f"{len(final)} finals")
    row("live", "1 session at real time", stats([one]), goal="first words <= 0.5 s, finals <= 1 s")
    row("live", "8 sessions at once (one worker holding them together)", stats(results))
    RAW["live_errors"] = [repr(s) for s in results if isinstance(s, Exception)]


def s_hybrid(b: Bench) -> None:
    """The hybrid's final stage: a scripted draft whose every sentence is truncated, real faster-whisper windows."""
    path = os.path.join(b.args.audio, "en_long_1min.flac")
    ref = Path(path).with_suffix(".txt").read_text()
    # every sentence truncated (a "|" before its end mark: v2c's SENT_END marks are CJK and ?!;)
    script = " ".join(s.strip().rstrip(".?!") + "|。" for s in ref.replace("?", ".").split(". ") if s.strip())
    with b.daemon(HASR_ENGINE="hybrid", HASR_DRAFT="scripted", HASR_FAKE_SCRIPT=script) as d:
        b.openai(d, str(CLIP), language="en")
        t, body = b.openai(d, path, language="en")
    tm = (body.get("hasr") or body).get("timings") or body.get("timings") or {}
    calls = (body.get("hasr") or body).get("fw_calls") or body.get("fw_calls") or 0
    RAW["hybrid"] = {"timings": tm, "fw_calls": calls, "wall": t}
    per = (tm.get("final_s") or tm.get("fw_s") or 0) / calls if calls else None
    row("hybrid", "re-transcribed sentence (scripted draft, real fw windows)",
        f"{per:.3f} s each ({calls} windows, wall {t:.2f} s)" if per else f"no windows: {str(body)[:200]}",
        "seed: 0.21 s on its GPU", goal="<= 0.21 s", met=per is not None and per <= 0.21)


def s_faults(b: Bench) -> None:
    """A worker killed mid-job gives its VRAM back and the next request is answered; a second daemon on the same
    GPU sees the first one's memory."""
    path, _ref = long_files(b)
    base = nvml_used_mb() or 0
    with b.daemon() as d:
        b.openai(d, str(CLIP), language="en")
        pid = (d.get("/api/ps").get("workers") or [{}])[0].get("pid") or d.get("/api/ps").get("pid")
        err: list[Any] = []
        th = threading.Thread(target=lambda: err.append(_catch(lambda: b.openai(d, path, language="en"))))
        th.start()
        time.sleep(0.3)
        os.kill(int(pid), signal.SIGKILL)
        back = wait_used(base, 10) if b.device == "cuda" else None
        th.join()
        t, body = b.openai(d, str(CLIP), language="en")
        row("faults", "worker SIGKILLed mid-file: VRAM back / the job's error / the next request",
            f"{'n/a' if back is None else f'{back:.2f} s'} / {str(err[0])[:120]} / {t:.2f} s "
            f"{body.get('text', '')[:40]!r}", goal="VRAM back <= 1 s, next answered",
            met=(back is not None and back <= 1.0 or b.device != "cuda") and "park" in body.get("text", "").lower())
        if b.device == "cuda":
            row("faults", "a second daemon beside a loaded first", "not measured: each pool reads NVML's free "
                "memory, which counts every process, and /api/ps shows no inventory to compare",
                f"NVML used {nvml_used_mb()} MB with the first one's worker")


def _catch(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as e:
        return e


def s_big(b: Bench) -> None:
    """A whisper-large-v3-sized model with random weights, converted here: load phases, VRAM against the estimate,
    the encoder's time per 30 s window."""
    big = os.path.join(b.tmp, "big-ct2")
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_bigmodel.py"), big, b.model,
                        str(b.args.big_layers)],
                       capture_output=True, text=True, timeout=500)
    if r.returncode != 0:
        row("big", "random large-v3-sized model", f"not measured: conversion failed: {r.stderr[-400:]}")
        return
    convert_s = time.monotonic() - t0
    base = nvml_used_mb() or 0
    with b.daemon() as d:
        phases = []
        with d.client(600) as c, c.stream("POST", "/transcribe", json={"audio_path": str(CLIP), "language": "en",
                                                                        "model": big},
                                          headers={"Accept": "application/x-ndjson"}) as resp:
            for line in resp.iter_lines():
                if line.strip():
                    ev = json.loads(line)
                    if ev.get("event") in ("loading", "queued"):  # progress events name a phase too
                        phases.append(ev.get("phase") or ev.get("event"))
        ps = d.get("/api/ps")
        w = next((x for x in ps.get("workers", []) if x.get("model") == big), {})
        used = (nvml_used_mb() or 0) - base
    RAW["big"] = {"phases": phases, "worker": w}
    row("big", f"load progress (converted in {convert_s:.0f} s)", f"{len(phases)} events: {phases[:6]}")
    need = w.get("need_mb")
    row("big", "VRAM: measured / placement's estimate", f"{w.get('vram_mb')} MB (NVML +{used})", f"{need} MB",
        (w.get("vram_mb") or used) / need if need else None, "within 10 %",
        bool(need) and abs((w.get("vram_mb") or used) / need - 1) <= 0.10)
    from faster_whisper import WhisperModel

    m = WhisperModel(big, device=b.device, compute_type=b.compute)
    feats = m.feature_extractor(pcm_of(CLIP))
    import numpy as np

    x = np.zeros((m.feature_extractor.n_mels if hasattr(m.feature_extractor, "n_mels") else feats.shape[0], 3000),
                 np.float32)
    x[:, : feats.shape[1]] = feats[:, :3000]
    import ctranslate2

    sv = ctranslate2.StorageView.from_array(x[None])
    m.model.encode(sv)
    enc, _ = timed(lambda: m.model.encode(sv), 5)
    row("big", "encoder time per 30 s window", f"{enc * 1000:.1f} ms")


def s_coldprof(b: Bench) -> None:
    """Where a cold start's time goes before the model loads: the interpreter, the worker's imports, the package
    versions and CUDA's device count it reads, NVML's inventory in the daemon."""
    probes = {
        "python -c pass": "pass",
        "import hasrd.worker.main": "import hasrd.worker.main",
        "+ the engine factory (select)": "import hasrd.worker.main, hasrd.worker.engines.select",
        "+ package_versions()": "from hasrd.worker.engines import select; select.package_versions()",
        "+ cuda_devices()": "from hasrd.worker.engines import select; select.cuda_devices()",
        "import faster_whisper": "import faster_whisper",
        "hasrd.gpu.list_gpus() (daemon)": "from hasrd import gpu; gpu.list_gpus()",
        "import hasrctl.cli": "import hasrctl.cli",
    }
    out = []
    for label, code in probes.items():
        ts = []
        for _ in range(3):
            t0 = time.monotonic()
            subprocess.run([sys.executable, "-c", code], env={**os.environ, **b.env()}, capture_output=True,
                           timeout=120)
            ts.append(time.monotonic() - t0)
        out.append(f"{label} {med(ts):.3f}")
    RAW["coldprof"] = out
    row("coldprof", "a fresh process, median of 3 (s)", "; ".join(out))


def s_batch(b: Bench) -> None:
    """hasrctl batch on a local Ray with GPU actors (1 GPU each, then two actors of 0.5 on the one GPU) against
    the daemon one file at a time: audio hours per hour, and whether every txt is the daemon's."""
    try:
        import ray  # noqa: F401
    except ImportError:
        row("batch", "hasrctl batch on Ray", "not measured: Ray is not installed here (gpu_carry.py --ray carries "
            "its 80 MB wheel in two more calls)")
        return
    src = Path(b.tmp, "batch_in")
    src.mkdir(exist_ok=True)
    names = {"en_long_1min": 4, "en_long_5min": 2, "zh_long_3min": 2} if b.device == "cuda" else {"en_long_1min": 2}
    files = []
    for name, copies in names.items():
        for k in range(copies):
            dst = src / f"{name}_{k}.flac"
            shutil.copy(os.path.join(b.args.audio, f"{name}.flac"), dst)
            files.append(dst)
    audio_s = sum(len(pcm_of(f)) / SR for f in files)
    mine = Path(b.tmp, "daemon_out")
    mine.mkdir(exist_ok=True)
    with b.daemon() as d:
        b.hasrctl(d, "-l", "en", str(CLIP))
        t0 = time.monotonic()
        for f in files:
            b.hasrctl(d, "-q", "-f", "txt", "-o", str(mine / f"{f.stem}.txt"), str(f))
        daemon_s = time.monotonic() - t0
    row("batch", f"the daemon, one file after another ({len(files)} files, {audio_s / 60:.1f} min)",
        f"{daemon_s:.1f} s, {audio_s / daemon_s * 1:.0f}x real time")
    for gpus, workers in (("1", "1"), ("0.5", "2")) if b.device == "cuda" else (("0", "1"), ("0", "2")):
        out = Path(b.tmp, f"batch_out_{workers}")
        env = {**os.environ, **b.env(), "RAY_TMPDIR": str(Path(b.tmp, f"ray{workers}"))}  # the opt-in, as a user
        t0 = time.monotonic()
        r = subprocess.run([sys.executable, "-m", "hasrctl", "batch", str(src), "-o", str(out), "-f", "txt",
                            "--gpus-per-worker", gpus, "--workers", workers, "--no-progress", "-q"], env=env,
                           capture_output=True, text=True, timeout=400)
        wall = time.monotonic() - t0
        same = sum(1 for f in files if (mine / f"{f.stem}.txt").exists() and any(
            p.read_bytes() == (mine / f"{f.stem}.txt").read_bytes() for p in out.rglob(f"{f.stem}.txt")))
        RAW[f"batch_{workers}"] = {"rc": r.returncode, "stderr": r.stderr[-1500:], "wall": wall}
        row("batch", f"hasrctl batch, {workers} actor(s) of {gpus} GPU", f"{wall:.1f} s (exit {r.returncode}), "
            f"{audio_s / wall:.0f}x real time" + ("" if r.returncode == 0 else f": {r.stderr[-200:]}"),
            f"the daemon {audio_s / daemon_s:.0f}x", daemon_s / wall, "same text as the daemon",
            same == len(files))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="the CTranslate2 whisper model directory (the embedded base)")
    ap.add_argument("--audio", required=True, help="directory of the long files and their transcripts")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections, in this order: "
                    + ", ".join(SECTIONS))
    ap.add_argument("--long", default="en_long_5min", help="the long English file (en_long_1min for a rehearsal)")
    ap.add_argument("--big-layers", type=int, default=32, help="the big model's layers (fewer for a rehearsal)")
    ap.add_argument("--repeat", type=int, default=3, help="runs a timing takes the median of")
    ap.add_argument("--out", default=os.environ.get("OUT", ""), help="write rows.json and raw.json here")
    ap.add_argument("--code", default="", help="run the daemon from this directory's hasrd (another commit's)")
    args = ap.parse_args()
    b = Bench(args)
    wanted = [s for s in SECTIONS if s in args.only.split(",")]
    RAW["machine"] = {"gpu": subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                                             "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
                      if shutil.which("nvidia-smi") else "none", "cpus": os.cpu_count(),
                      "load": os.getloadavg(), "date": time.strftime("%Y-%m-%d %H:%M")}
    for name in wanted:
        t0 = time.monotonic()
        try:
            globals()[f"s_{name}"](b)
        except Exception as e:
            row(name, "section failed", f"{type(e).__name__}: {e}"[:400])
            RAW.setdefault("errors", {})[name] = traceback.format_exc()[-3000:]
        b.drop_direct()
        print(f"-- {name} took {time.monotonic() - t0:.1f} s", flush=True)
        if args.out:
            Path(args.out).mkdir(parents=True, exist_ok=True)
            Path(args.out, "rows.json").write_text(json.dumps(ROWS, indent=1, ensure_ascii=False))
            Path(args.out, "raw.json").write_text(json.dumps(RAW, indent=1, ensure_ascii=False, default=str))
    print("\n| section | figure | hasr | faster-whisper / reference | ratio | goal | met |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in ROWS:
        met = "" if r["met"] is None else ("yes" if r["met"] else "**no**")
        print(f"| {r['section']} | {r['figure']} | {r['hasr']} | {r['reference']} | "
              f"{'' if r['ratio'] is None else r['ratio']} | {r['goal']} | {met} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

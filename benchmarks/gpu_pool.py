"""The worker pool's GPU placement through the real daemon, on a GPU host (issue 22).

Starts `hasrd --socket PATH` with HASR_ENGINE=fake (a model named ``fake:N`` is a worker that holds N MB of GPU
memory through torch), HASR_MAX_WORKERS=3, a TTL of an hour, and NVLink multicast off (NCCL_NVLS_ENABLE=0,
TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1) in its environment, so every process it starts has
them. It drives the daemon over its Unix socket and reads each GPU's used memory (total - free, NVML through
hasrd.gpu.list_gpus) and its compute processes (NVML, or nvidia-smi) before, during and after each step:

1. /api/load fake:40000 and fake:40001 (two models of 40 GB): both land on a GPU (one GPU: both on it, the fit
   rule; two GPUs: one on each, the most free memory); used memory rises by about 80 GB plus two contexts;
   /api/ps vram_mb per worker against NVML's figure for its pid. Then /transcribe names fake:40001, then
   fake:40000, so fake:40001 is the least recently used (though loaded last).
2. /api/load fake:100000: on one H200 (~140 GB) it does not fit beside both (~60 GB free), so the LRU idle
   worker (fake:40001) is stopped to make room, its memory comes back and the 100 GB worker loads; where it does
   fit (two GPUs), it starts there and nothing is stopped.
3. fake:200000 fits on no GPU: /api/load and /transcribe are refused at once (503 insufficient_memory, with the
   numbers in the message), nothing stopped, no memory moved.
4. /api/unload of each model in turn: the GPU's used memory, polled every 50 ms, returns to its baseline (what
   it was before the run, plus the workers still loaded) within a second of the unload.
5. The daemon itself never holds a CUDA context: its pid is in no NVML process list at any reading, it has no
   CUDA runtime mapped, and it holds no /dev/nvidia* file at rest (NVML opens them only while it reads).

Prints a table of every step's figures and exits 1 if a check failed (with the daemon log's tail).

    python benchmarks/gpu_pool.py [--log hasrd.log] [--tag TEXT]

Measured on an H200 (nvidia-h200 kind, one GPU of 143771 MB, driver 580.159.04, torch 2.11; 2026-12-02; the
two-GPU kind was never lent, so the two-GPU version is not run), baseline 616 MB used:

1. fake:40000 and fake:40001 both on the one GPU (UUID checked in /api/ps and NVML), loads 4.1 s and 2.8 s;
   used +81236 MB for 80001 MB asked (contexts 610 and 611 MB); /api/ps vram_mb 40610 / 40612 MB = NVML's
   per-pid figure exactly; every worker had the three multicast-off variables and CUDA_VISIBLE_DEVICES=0.
2. fake:100000 (estimate 100600 MB) with 61919 MB free: the LRU idle worker fake:40001 (pid 520; fake:40000,
   used more recently though loaded first, kept) was stopped to make room and fake:100000 loaded in 2.80 s
   after it; used 141850 MB = baseline 616 + 40610 + 100610 MB exactly; /api/ps vram_mb 100610 MB = NVML.
   The first run (cf82ae9) FAILED here: Pool._devices subtracted the estimate of every loaded worker from a
   free figure that already left it out, so no eviction seemed to make room and fake:100000 started beside
   both and ran out of memory ("Tried to allocate 97.66 GiB ... 59.96 GiB is free"; 503 load_failed after
   3.9 s). Fixed in e27f682 (only loading workers are subtracted, the inventory is read again on every
   worker state change, a ready worker's memory is measured, a new worker waits for an evicted one's
   memory); this run: 35 checks passed, 0 failed.
3. fake:200000: /api/load 503 insufficient_memory in 11-12 ms, /transcribe in 6 ms, "needs about 200600 MB
   and no GPU of this machine has that much (the largest has 143771 MB)"; nothing stopped, used +0 MB.
4. Each /api/unload returned in 0.08-0.19 s with the memory already back (first 50 ms poll after the call:
   0.08-0.19 s from the call, +0.00 s after it returned); residue at the end +0 MB.
5. The daemon's pid was in no NVML process list (0 of 11 readings), it held no /dev/nvidia* file at rest
   (0 in 10 samples), no CUDA runtime mapped (libcuda.so is mapped by NVML's own nvmlInit on driver 580).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
os.environ.update(MULTICAST_OFF)  # before anything starts a process: every child inherits them

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from hasrd.gpu import Gpu, list_gpus  # noqa: E402
from hasrd.modelspec import FAKE_OVERHEAD_MB  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _uds import http_json  # noqa: E402

socket.setdefaulttimeout(240.0)  # _uds opens plain sockets: no request may hang the run for ever

A, B, C, HUGE = "fake:40000", "fake:40001", "fake:100000", "fake:200000"
TOL_MB = 256  # what NVML's used memory may differ by between two readings of the same state
CONTEXT_MAX_MB = 1500  # a CUDA context with torch's kernels, per worker (an H200 with torch 2.x: ~500-600)
AUDIO = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "data",
                     "en_hello_world.flac")


def mb_of(model: str) -> int:
    return int(model.split(":")[1])


# ---- GPU readings -----------------------------------------------------------------------------------------


@dataclass
class Reading:
    used: dict[str, int]  # GPU UUID -> total - free, MB
    procs: dict[int, tuple[str, int | None]]  # pid -> (GPU UUID, MB or None when NVML does not say)


class Gpus:
    """Used memory per GPU and the compute processes. Step readings go through hasrd.gpu.list_gpus (what the
    daemon sees); the 50 ms polls after an unload through one NVML session kept open (nvmlInit costs more than
    a poll's interval on some hosts), or list_gpus without NVML."""

    def __init__(self) -> None:
        self.nv: Any = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nv = pynvml
        except Exception:
            self.nv = None
        self.daemon_pid = 0
        self.daemon_seen: list[str] = []  # readings at which the daemon's pid was a GPU process
        self.readings = 0

    def _handles(self) -> list[tuple[str, Any]]:
        nv = self.nv
        out = []
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            u = nv.nvmlDeviceGetUUID(h)
            out.append((u.decode() if isinstance(u, bytes) else u, h))
        return out

    def used_fast(self) -> dict[str, int]:
        if self.nv is None:
            return {g.uuid: used_of(g) for g in list_gpus()}
        out = {}
        for uuid, h in self._handles():
            mem = self.nv.nvmlDeviceGetMemoryInfo(h)
            out[uuid] = int((mem.total - mem.free) // 2**20)
        return out

    def procs(self) -> dict[int, tuple[str, int | None]]:
        out: dict[int, tuple[str, int | None]] = {}
        if self.nv is not None:
            for uuid, h in self._handles():
                for p in self.nv.nvmlDeviceGetComputeRunningProcesses(h):
                    mb = p.usedGpuMemory
                    out[int(p.pid)] = (uuid, int(mb // 2**20) if isinstance(mb, int) else None)
            return out
        smi = shutil.which("nvidia-smi")
        if smi:
            text = subprocess.run([smi, "--query-compute-apps=pid,gpu_uuid,used_memory", "--format=csv,noheader,"
                                   "nounits"], capture_output=True, text=True, timeout=10).stdout
            for line in text.strip().splitlines():
                r = [x.strip() for x in line.split(",")]
                if len(r) == 3 and r[0].isdigit():
                    out[int(r[0])] = (r[1], int(r[2]) if r[2].isdigit() else None)
        return out

    def read(self, where: str) -> Reading:
        used = {g.uuid: used_of(g) for g in list_gpus()}
        procs = self.procs()
        self.readings += 1
        if self.daemon_pid and self.daemon_pid in procs:
            self.daemon_seen.append(where)
        return Reading(used, procs)


def used_of(g: Gpu) -> int:
    if g.total_mb is None or g.free_mb is None:
        raise SystemExit(f"no memory reading for GPU {g.uuid} (NVML / nvidia-smi)")
    return g.total_mb - g.free_mb


# ---- the daemon -------------------------------------------------------------------------------------------


class Daemon:
    def __init__(self, base: str, log_path: str) -> None:
        self.sock = os.path.join(base, "hasrd.sock")
        self.log_path = log_path
        self.daemon_pid = 0
        self.fds_loaded: list[int] = [0]
        env = {**os.environ, **MULTICAST_OFF, "HASR_ENGINE": "fake", "HASR_MAX_WORKERS": "3",
               "HASR_IDLE_TTL_SEC": "3600", "HASR_IDLE_EXIT_SEC": "3600", "HASR_LOAD_TIMEOUT_SEC": "240",
               "XDG_CONFIG_HOME": os.path.join(base, "config"), "XDG_DATA_HOME": os.path.join(base, "data"),
               "XDG_RUNTIME_DIR": base}
        for k in ("HASR_GPU", "HASR_NEED_VRAM_MB", "HASR_FAKE_ALLOC_MB", "CUDA_VISIBLE_DEVICES"):
            env.pop(k, None)
        self.log = open(log_path, "wb")  # noqa: SIM115 - the daemon's log, closed in stop()
        self.proc = subprocess.Popen([sys.executable, "-m", "hasrd.server", "--socket", self.sock], env=env,
                                     stdout=self.log, stderr=subprocess.STDOUT)

    def wait_ready(self) -> None:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 30:
            if self.proc.poll() is not None:
                raise RuntimeError(f"hasrd exited with {self.proc.returncode} while starting")
            if os.path.exists(self.sock):
                try:
                    if http_json(self.sock, "GET", "/health")[0] == 200:
                        return
                except OSError:
                    pass
            time.sleep(0.05)
        raise RuntimeError("hasrd did not answer /health within 30 s")

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any, float]:
        t0 = time.monotonic()
        code, out = http_json(self.sock, method, path, b"" if body is None else json.dumps(body).encode())
        return code, out, time.monotonic() - t0

    def workers(self) -> list[dict[str, Any]]:
        code, ps, _ = self.call("GET", "/api/ps")
        if code != 200:
            raise RuntimeError(f"/api/ps: {code} {ps}")
        self.daemon_pid = int(ps.get("daemon_pid") or 0)
        return list(ps.get("workers") or [])

    def tail(self, n: int = 40) -> str:
        self.log.flush()
        with open(self.log_path, "rb") as f:
            lines = f.read().decode(errors="replace").splitlines()
        return "\n".join(lines[-n:])

    def grep(self, text: str) -> list[str]:
        self.log.flush()
        with open(self.log_path, "rb") as f:
            return [ln for ln in f.read().decode(errors="replace").splitlines() if text in ln]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()


# ---- checks and the table ---------------------------------------------------------------------------------


@dataclass
class Report:
    checks: list[tuple[str, bool, str]] = field(default_factory=list)
    rows: list[tuple[str, str]] = field(default_factory=list)

    def check(self, step: str, ok: bool, what: str) -> bool:
        self.checks.append((step, ok, what))
        print(f"  [{'ok' if ok else 'FAIL'}] {what}")
        return ok

    def row(self, step: str, figures: str) -> None:
        self.rows.append((step, figures))
        print(f"  {figures}")

    @property
    def failed(self) -> list[tuple[str, bool, str]]:
        return [c for c in self.checks if not c[1]]


def by_model(workers: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {w["model"]: w for w in workers if w.get("pid")}


def env_of(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return {k.decode(): v.decode(errors="replace") for k, _, v in
                    (x.partition(b"=") for x in f.read().split(b"\0") if b"=" in x)}
    except OSError:
        return {}


def nvidia_fds(pid: int) -> list[str]:
    """The /dev/nvidia* files ``pid`` holds open. A CUDA context holds /dev/nvidia-uvm, nvidiactl and the GPU's
    node for its whole life; NVML opens them too, but only between nvmlInit and nvmlShutdown (hasrd.gpu shuts it
    down after every reading), so a process that holds none at some moment holds no CUDA context."""
    out = []
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("/dev/nvidia"):
                out.append(target)
    except OSError:
        return []
    return sorted(out)


def fd_samples(pid: int, n: int = 5) -> list[int]:
    counts = []
    for _ in range(n):
        counts.append(len(nvidia_fds(pid)))
        time.sleep(0.05)
    return counts


def cuda_libs(pid: int) -> list[str]:
    """The NVIDIA libraries mapped into ``pid``. libcuda comes with NVML itself (on driver 580 nvmlInit maps
    it, measured: no context is made); the CUDA runtime (libcudart) or torch's CUDA library would mean a
    CUDA program."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            paths = {ln.split()[-1] for ln in f if "/" in ln}
    except OSError:
        return []
    return sorted(os.path.basename(p) for p in paths
                  if any(k in os.path.basename(p) for k in ("libcuda", "libcudart", "libnvidia-ml", "libtorch_cuda")))


def fmt_mb(x: int | None) -> str:
    return "?" if x is None else f"{x}"


def proc_mb(r: Reading, pid: int | None) -> int | None:
    return r.procs.get(pid, ("", None))[1] if pid else None


def wait_level(gpus: Gpus, uuid: str, target: int, t_call: float, limit: float = 5.0) -> tuple[float | None, int]:
    """Poll every 50 ms until ``uuid``'s used memory is at most ``target`` + TOL_MB: (seconds since t_call or
    None, the last reading)."""
    while True:
        used = gpus.used_fast().get(uuid, 0)
        now = time.monotonic()
        if used <= target + TOL_MB:
            return now - t_call, used
        if now - t_call > limit:
            return None, used
        time.sleep(0.05)


# ---- the run ----------------------------------------------------------------------------------------------


def run(d: Daemon, gpus: Gpus, rep: Report) -> None:
    gl = list_gpus()
    r0 = gpus.read("baseline")
    base = dict(r0.used)
    total = {g.uuid: int(g.total_mb or 0) for g in gl}
    print(f"GPUs: {', '.join(f'{g.index} {g.name} {g.uuid} total {g.total_mb} MB used {base[g.uuid]} MB' for g in gl)}")
    print(f"other compute processes before the run: {r0.procs or 'none'}")
    d.workers()
    gpus.daemon_pid = d.daemon_pid
    rep.check("0", d.daemon_pid == d.proc.pid, f"/api/ps daemon_pid {d.daemon_pid} is the process started "
                                               f"({d.proc.pid})")
    rep.row("0 baseline", "; ".join(f"{u[-8:]}: used {base[u]} of {total[u]} MB" for u in base))
    multi = len(gl) > 1

    # 1. two 40 GB workers
    print(f"\n1. /api/load {A}, then {B}")
    loads: dict[str, float] = {}
    for m in (A, B):
        code, body, dt = d.call("POST", "/api/load", {"model": m, "keep_alive": -1})
        loads[m] = dt
        if not rep.check("1", code == 200, f"/api/load {m}: {code} in {dt:.2f} s" +
                         ("" if code == 200 else f": {json.dumps(body)[:300]}")):
            raise RuntimeError(f"loading {m} failed")
    r1 = gpus.read("step 1")
    w = by_model(d.workers())
    wa, wb = w.get(A), w.get(B)
    if not (wa and wb):
        raise RuntimeError(f"/api/ps lists {sorted(w)} after loading {A} and {B}")
    uuids = {wa["gpu_uuid"], wb["gpu_uuid"]}
    if multi:
        rep.check("1", len(uuids) == 2 and uuids <= set(base),
                  f"two GPUs: one worker on each ({wa['gpu_uuid']}, {wb['gpu_uuid']})")
    else:
        rep.check("1", uuids == {gl[0].uuid}, f"both workers on the one GPU {gl[0].uuid} (/api/ps gpu_uuid)")
    for wk in (wa, wb):
        nv_uuid = r1.procs.get(wk["pid"], ("",))[0]
        rep.check("1", nv_uuid == wk["gpu_uuid"], f"{wk['model']} pid {wk['pid']}: NVML lists it on "
                                                  f"{nv_uuid or 'no GPU'}")
        env = env_of(wk["pid"])
        rep.check("1", all(env.get(k) == v for k, v in MULTICAST_OFF.items()),
                  f"{wk['model']}'s environment: " + " ".join(f"{k}={env.get(k)}" for k in MULTICAST_OFF) +
                  f" CUDA_VISIBLE_DEVICES={env.get('CUDA_VISIBLE_DEVICES')}")
    rise = sum(r1.used[u] - base[u] for u in base)
    want = mb_of(A) + mb_of(B)
    rep.check("1", want <= rise <= want + 2 * CONTEXT_MAX_MB,
              f"used memory rose by {rise} MB for {want} MB asked (+{rise - want} MB: two contexts)")
    per = []
    for wk in (wa, wb):
        nv = proc_mb(r1, wk["pid"])
        ps_mb = wk.get("vram_mb")
        ctx = nv - mb_of(wk["model"]) if nv is not None else None
        rep.check("1", nv is not None and ps_mb is not None and abs(ps_mb - nv) <= 2,
                  f"{wk['model']}: /api/ps vram_mb {fmt_mb(ps_mb)} MB, NVML {fmt_mb(nv)} MB for its pid "
                  f"(context {fmt_mb(ctx)} MB)")
        per.append(f"{wk['model']} pid {wk['pid']} on {wk['gpu_uuid'][-8:]}: load {loads[wk['model']]:.2f} s, "
                   f"/api/ps {fmt_mb(ps_mb)} MB, NVML {fmt_mb(nv)} MB")
    rep.row("1 two 40 GB", "; ".join(per) + f"; used +{rise} MB ("
            + ", ".join(f"{u[-8:]} {r1.used[u]} MB" for u in base) + ")")

    print(f"\n   /transcribe naming {B}, then {A}: {B} becomes the least recently used")
    for m in (B, A):
        code, body, dt = d.call("POST", "/transcribe", {"audio_path": AUDIO, "options": {"model": m}})
        pid = (body.get("worker") or {}).get("pid") if code == 200 else None
        rep.check("1", code == 200 and pid == w[m]["pid"],
                  f"/transcribe {m}: {code} in {dt:.2f} s on pid {pid} (its worker: {w[m]['pid']})" +
                  ("" if code == 200 else f": {json.dumps(body)[:300]}"))
    rep.check("1", {x["pid"] for x in d.workers()} == {wa["pid"], wb["pid"]}, "still the same two workers")
    d.fds_loaded = fd_samples(d.daemon_pid)

    # 2. a 100 GB worker
    r_pre = gpus.read("step 2 before")
    need_c = mb_of(C) + FAKE_OVERHEAD_MB
    free = {u: total[u] - r_pre.used[u] for u in base}
    fits = [u for u in base if free[u] >= need_c]
    b_mb = proc_mb(r_pre, wb["pid"]) or mb_of(B)
    print(f"\n2. /api/load {C} (estimate {need_c} MB); free now: " +
          ", ".join(f"{u[-8:]} {free[u]} MB" for u in base) +
          (f"; fits beside both on {fits}" if fits else
           f"; fits nowhere beside both: expect {B} (LRU, pid {wb['pid']}) stopped, "
           f"{free[wb['gpu_uuid']]} + {b_mb} = {free[wb['gpu_uuid']] + b_mb} MB free then"))
    code, body, dt = d.call("POST", "/api/load", {"model": C, "keep_alive": -1})
    r2 = gpus.read("step 2")
    w2 = by_model(d.workers())
    ok = rep.check("2", code == 200, f"/api/load {C}: {code} in {dt:.2f} s" +
                   ("" if code == 200 else f": {json.dumps(body)[:400]}"))
    wc = w2.get(C)
    gone = sorted({wa["pid"], wb["pid"]} - {x["pid"] for x in w2.values()})
    evicted = d.grep("stopping the idle worker")
    if fits:
        rep.check("2", not gone, f"nothing stopped (workers gone: {gone or 'none'})")
        if wc:
            rep.check("2", wc["gpu_uuid"] in fits, f"{C} on {wc['gpu_uuid']}, where it fits")
    else:
        rep.check("2", gone == [wb["pid"]], f"the LRU worker {B} (pid {wb['pid']}) was stopped, {A} "
                                            f"(pid {wa['pid']}) kept: gone {gone or 'none'}")
        rep.check("2", wb["pid"] not in r2.procs, f"pid {wb['pid']} is no GPU process any more")
        rep.check("2", bool(evicted), "the daemon log says so: " + (evicted[-1].strip()[-150:] if evicted
                                                                     else "no 'stopping the idle worker' line"))
    if wc:
        nv = proc_mb(r2, wc["pid"])
        rep.check("2", nv is not None and nv >= mb_of(C) and wc.get("vram_mb") is not None
                  and abs(wc["vram_mb"] - nv) <= 2,
                  f"{C} pid {wc['pid']} on {wc['gpu_uuid']}: /api/ps vram_mb {fmt_mb(wc.get('vram_mb'))} MB, "
                  f"NVML {fmt_mb(nv)} MB")
        held = sum(proc_mb(r2, x["pid"]) or 0 for x in w2.values())
        rep.check("2", abs(sum(r2.used[u] - base[u] for u in base) - held) <= TOL_MB,
                  f"used {sum(r2.used.values())} MB = baseline {sum(base.values())} + the workers' "
                  f"{held} MB (the evicted one's memory came back)")
    else:
        rep.check("2", False, f"no {C} worker in /api/ps: " + json.dumps(list(w2.keys())))
    rep.row("2 100 GB", f"/api/load {C}: {code} in {dt:.2f} s; stopped: "
            f"{', '.join(f'pid {p}' for p in gone) or 'none'}; "
            f"{C}: {('pid {}, NVML {} MB'.format(wc['pid'], fmt_mb(proc_mb(r2, wc['pid'])))) if wc else 'not loaded'}"
            f"; used {', '.join(f'{u[-8:]} {r2.used[u]} MB' for u in base)}")
    if not ok:
        print("   the daemon log's tail after this step:\n" + d.tail(25))
        free2 = {u: total[u] - r_pre.used[u] for u in base}
        print(f"   (for the record: NVML free before the load {free2}; the pool subtracts the estimate of every "
              f"worker that has not reported vram_mb in its identity: "
              f"{A}+{B} = {mb_of(A) + mb_of(B) + 2 * FAKE_OVERHEAD_MB + 1} MB)")

    # 3. a model that fits nowhere
    print(f"\n3. {HUGE}: fits on no GPU")
    before = {x["pid"] for x in d.workers()}
    r3a = gpus.read("step 3 before")
    figs = []
    for path, body in (("/api/load", {"model": HUGE, "keep_alive": -1}),
                       ("/transcribe", {"audio_path": AUDIO, "options": {"model": HUGE}})):
        code, out, dt = d.call("POST", path, body)
        err = (out.get("error") or {}) if isinstance(out, dict) else {}
        msg = str(err.get("message") or "")
        nums = str(mb_of(HUGE) + FAKE_OVERHEAD_MB) in msg and any(str(t) in msg for t in total.values())
        rep.check("3", code == 503 and err.get("code") == "insufficient_memory" and nums and dt < 0.5,
                  f"{path} {HUGE}: {code} {err.get('code')} in {dt * 1000:.0f} ms: {msg}")
        figs.append(f"{path}: {code} {err.get('code')} in {dt * 1000:.0f} ms")
    r3 = gpus.read("step 3")
    rep.check("3", {x["pid"] for x in d.workers()} == before, "nothing stopped")
    moved = sum(r3.used[u] - r3a.used[u] for u in base)
    rep.check("3", abs(moved) <= TOL_MB, f"used memory moved by {moved:+d} MB")
    rep.row("3 200 GB", "; ".join(figs) + f"; workers unchanged; used {moved:+d} MB")

    # 4. unload each model in turn
    print("\n4. /api/unload of each model in turn (used memory polled every 50 ms)")
    for wk in sorted(d.workers(), key=lambda x: x["id"]):
        m = wk["model"]
        if not wk.get("pid"):
            code, _, dt = d.call("POST", "/api/unload", {"model": m})
            print(f"  {m}: no process ({wk['state']}): /api/unload {code} in {dt:.2f} s")
            continue
        ra = gpus.read(f"step 4 before {m}")
        rest = [x for x in d.workers() if x.get("pid") and x["pid"] != wk["pid"]]
        uuid = wk["gpu_uuid"]
        target = base[uuid] + sum(proc_mb(ra, x["pid"]) or 0 for x in rest if x["gpu_uuid"] == uuid)
        t0 = time.monotonic()
        code, _, dt = d.call("POST", "/api/unload", {"model": m})
        back, last = wait_level(gpus, uuid, target, t0)
        after = None if back is None else back - dt
        rep.check("4", code == 200, f"/api/unload {m}: {code} in {dt:.2f} s")
        rep.check("4", back is not None and after is not None and after <= 1.0,
                  f"{m} (pid {wk['pid']}, {fmt_mb(proc_mb(ra, wk['pid']))} MB): {uuid[-8:]} at {last} MB "
                  f"(baseline with the others {target} MB) " +
                  (f"{back:.2f} s after the call, {after:+.2f} s after it returned" if back is not None
                   else "not within 5 s"))
        rb = gpus.read(f"step 4 after {m}")
        rep.check("4", wk["pid"] not in rb.procs and not os.path.exists(f"/proc/{wk['pid']}"),
                  f"pid {wk['pid']} has exited and is no GPU process")
        rep.row(f"4 unload {m}", f"call {dt:.2f} s; back to {last} MB (target {target}) "
                + (f"{back:.3f} s after the call" if back is not None else "NOT within 5 s"))
    code, _, _ = d.call("POST", "/api/unload")
    time.sleep(0.2)
    r4 = gpus.read("step 4 end")
    left = d.workers()
    rep.check("4", not left, f"/api/ps lists no worker ({len(left)})")
    res = {u: r4.used[u] - base[u] for u in base}
    rep.check("4", all(abs(v) <= TOL_MB for v in res.values()), f"residue against the baseline: {res} MB")
    rep.row("4 end", "residue " + ", ".join(f"{u[-8:]} {v:+d} MB" for u, v in res.items()))

    # 5. the daemon holds no CUDA context
    print("\n5. the daemon process")
    libs = cuda_libs(d.daemon_pid)
    fds_idle = fd_samples(d.daemon_pid)
    rep.check("5", not gpus.daemon_seen, f"daemon pid {d.daemon_pid} in no NVML process list over "
                                         f"{gpus.readings} readings (seen at: {gpus.daemon_seen or 'none'})")
    rep.check("5", not any(x.startswith(("libcudart", "libtorch_cuda")) for x in libs),
              f"no CUDA runtime mapped in the daemon (NVIDIA libraries mapped: {libs or 'none'}; libcuda and "
              f"libnvidia-ml are NVML's)")
    rep.check("5", min(d.fds_loaded) == 0 and min(fds_idle) == 0,
              f"the daemon holds no /dev/nvidia* file at rest (open ones per 50 ms sample, two workers loaded: "
              f"{d.fds_loaded}; at the end: {fds_idle})")
    rep.row("5 daemon", f"pid {d.daemon_pid}: GPU process at {len(gpus.daemon_seen)} of {gpus.readings} readings; "
            f"/dev/nvidia* open {max(d.fds_loaded + fds_idle)} at most; mapped: {', '.join(libs) or 'none'}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--log", help="write the daemon's log here (default: a temporary file)")
    ap.add_argument("--tag", default="", help="a label printed with the table")
    args = ap.parse_args()
    if not list_gpus():
        print("no GPU (NVML / nvidia-smi found none)")
        return 2
    base = tempfile.mkdtemp(prefix="hgp", dir="/tmp")
    log_path = args.log or os.path.join(base, "hasrd.log")
    gpus = Gpus()
    print(f"NVML session for the polls: {'pynvml' if gpus.nv else 'none (list_gpus / nvidia-smi)'}; "
          f"multicast off: {MULTICAST_OFF}")
    rep = Report()
    d: Daemon | None = None
    crashed = ""
    try:
        d = Daemon(base, log_path)
        d.wait_ready()
        run(d, gpus, rep)
    except Exception as e:  # a step that could not go on: say so, with the daemon's log
        crashed = f"{type(e).__name__}: {e}"
        print(f"\nSTOPPED: {crashed}")
    finally:
        if d is not None:
            if crashed or rep.failed:
                print(f"\nthe daemon log's tail ({log_path}):\n{d.tail(60)}")
            d.stop()
    print(f"\n{'step':<22} figures {args.tag}")
    for step, figs in rep.rows:
        print(f"{step:<22} {figs}")
    n_ok = sum(1 for c in rep.checks if c[1])
    print(f"\nchecks: {n_ok} passed, {len(rep.failed)} failed" + (f"; run stopped: {crashed}" if crashed else ""))
    for step, _ok, what in rep.failed:
        print(f"  FAIL step {step}: {what}")
    return 1 if crashed or rep.failed else 0


if __name__ == "__main__":
    sys.exit(main())

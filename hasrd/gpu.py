"""GPU placement for the worker, decided in the daemon without importing any GPU library.

HASR_GPU takes an index or a UUID. vLLM int()-casts CUDA_VISIBLE_DEVICES, so a UUID is resolved to its
index (CUDA_DEVICE_ORDER=PCI_BUS_ID makes that index match nvidia-smi's). Before a GPU load the daemon can
wait until HASR_NEED_VRAM_MB is free (NVML when installed, else nvidia-smi), up to a deadline.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

_T = TypeVar("_T")


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    name: str = ""
    free_mb: int | None = None
    total_mb: int | None = None


class GpuError(Exception):
    """HASR_GPU names no GPU of this machine, or VRAM never became free."""


def resolve_index(spec: str, gpus: list[Gpu]) -> int | None:
    """Turn HASR_GPU (index or UUID, with or without the GPU- prefix) into an index; '' → None."""
    spec = spec.strip()
    if not spec:
        return None
    if spec.isdigit():
        idx = int(spec)
        if gpus and idx not in {g.index for g in gpus}:
            raise GpuError(f"HASR_GPU={spec}: no GPU with that index (have {', '.join(str(g.index) for g in gpus)})")
        return idx
    want = spec.lower().removeprefix("gpu-")
    for g in gpus:
        if g.uuid.lower().removeprefix("gpu-") == want or g.uuid.lower().removeprefix("gpu-").startswith(want):
            return g.index
    raise GpuError(f"HASR_GPU={spec}: no GPU with that UUID; `nvidia-smi -L` lists them")


def placement_env(spec: str, gpus: list[Gpu]) -> dict[str, str]:
    idx = resolve_index(spec, gpus)
    if idx is None:
        return {}
    return {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": str(idx)}


def _from_nvml(read: Callable[[Any], _T]) -> _T | None:
    """``read(pynvml)`` between nvmlInit and nvmlShutdown; None without NVML (nvidia-ml-py or the driver)."""
    try:
        import pynvml  # nvidia-ml-py: NVML only, no CUDA context
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        return read(pynvml)
    except Exception:
        return None
    finally:
        pynvml.nvmlShutdown()


def _from_smi(query: str, timeout: float) -> list[list[str]] | None:
    """Rows of ``nvidia-smi --query-...=... --format=csv,noheader,nounits``; None without nvidia-smi."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        text = subprocess.run([smi, query, "--format=csv,noheader,nounits"], capture_output=True, text=True,
                              timeout=timeout, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return [[x.strip() for x in line.split(",")] for line in text.strip().splitlines()]


def _text(x: str | bytes) -> str:
    return x.decode() if isinstance(x, bytes) else x


def list_gpus(timeout: float = 5.0) -> list[Gpu]:
    """GPUs with free/total memory; [] when there is no NVIDIA driver."""
    def read(nv: Any) -> list[Gpu]:
        out = []
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            mem = nv.nvmlDeviceGetMemoryInfo(h)
            out.append(Gpu(i, _text(nv.nvmlDeviceGetUUID(h)), _text(nv.nvmlDeviceGetName(h)),
                           int(mem.free // 2**20), int(mem.total // 2**20)))
        return out

    gpus = _from_nvml(read)
    if gpus is not None:
        return gpus
    return _gpu_rows(_from_smi("--query-gpu=index,uuid,name,memory.free,memory.total", timeout) or [])


def process_vram_mb(pids: set[int], timeout: float = 3.0) -> int | None:
    """VRAM used by these processes (the worker's group), in MB; None when unknown: no NVIDIA driver, or the
    processes are not listed (another pid namespace) — unknown, not zero."""
    def read(nv: Any) -> list[tuple[int, int]]:
        return [(p.pid, int((p.usedGpuMemory or 0) // 2**20))
                for i in range(nv.nvmlDeviceGetCount())
                for p in nv.nvmlDeviceGetComputeRunningProcesses(nv.nvmlDeviceGetHandleByIndex(i))]

    usage = _from_nvml(read)
    if usage is None:
        rows = _from_smi("--query-compute-apps=pid,used_memory", timeout) or []
        usage = [(int(r[0]), _int(r[1]) or 0) for r in rows if len(r) == 2 and r[0].isdigit()]
    mine = [mb for pid, mb in usage if pid in pids]
    return sum(mine) if mine else None


def parse_smi(text: str) -> list[Gpu]:
    """GPUs from nvidia-smi's index,uuid,name,memory.free,memory.total CSV."""
    return _gpu_rows([[x.strip() for x in line.split(",")] for line in text.strip().splitlines()])


def _gpu_rows(rows: list[list[str]]) -> list[Gpu]:
    return [Gpu(int(r[0]), r[1], r[2], _int(r[3]), _int(r[4])) for r in rows if len(r) >= 5 and r[0].isdigit()]


def _int(x: str) -> int | None:
    try:
        return int(float(x))
    except ValueError:
        return None


async def wait_for_vram(need_mb: int, deadline_s: float, free_mb: Callable[[], Awaitable[int | None]],
                        report: Callable[[str], None] = lambda _m: None,
                        clock: Callable[[], float] = time.monotonic, poll_s: float = 1.0) -> int | None:
    """Wait until ``free_mb()`` >= need_mb; raise GpuError at the deadline. None free (unknown) passes."""
    if need_mb <= 0:
        return None
    end = clock() + deadline_s
    while True:
        free = await free_mb()
        if free is None or free >= need_mb:
            return free
        left = end - clock()
        if left <= 0:
            raise GpuError(f"only {free} MB of VRAM free after waiting {deadline_s:.0f} s; {need_mb} MB needed "
                           f"(HASR_NEED_VRAM_MB); close other GPU programs or lower it")
        report(f"waiting for {need_mb} MB free VRAM (have {free} MB, {left:.0f} s left)")
        await asyncio.sleep(min(poll_s, left))


def meminfo_mb() -> tuple[int, int]:
    """(available, total) memory of this machine in MB (/proc/meminfo)."""
    vals: dict[str, int] = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                k, _, rest = line.partition(":")
                vals[k] = int(rest.split()[0]) // 1024
    except (OSError, ValueError, IndexError):
        return 0, 0
    return vals.get("MemAvailable", 0), vals.get("MemTotal", 0)


class Inventory:
    """The devices workers may go to, for hasrd.placement: this machine's GPUs (HASR_GPU pins one) and the CPU,
    with free and total memory; read at most every ``ttl`` seconds (nvidia-smi costs tens of ms)."""

    def __init__(self, pin: str = "", ttl: float = 2.0, read: Callable[[], list[Gpu]] | None = None,
                 memory: Callable[[], tuple[int, int]] = meminfo_mb) -> None:
        self.pin = pin
        self.ttl = ttl
        self.read = read or (lambda: list_gpus(timeout=3.0))
        self.memory = memory
        self._at = -1e9
        self._gpus: list[Gpu] = []

    def invalidate(self) -> None:
        """Read again next time (a worker loaded or stopped: the free memory moved)."""
        self._at = -1e9

    def gpus(self) -> list[Gpu]:
        now = time.monotonic()
        if now - self._at > self.ttl:
            gpus = self.read()
            if self.pin:
                try:
                    idx = resolve_index(self.pin, gpus)
                    gpus = [g for g in gpus if g.index == idx]
                except GpuError:
                    gpus = []
            self._gpus, self._at = gpus, now
        return self._gpus

    def __call__(self) -> list[Any]:
        from hasrd.placement import CPU, Device

        free, total = self.memory()
        out = [Device(g.uuid, int(g.free_mb or 0), int(g.total_mb or 0)) for g in self.gpus()]
        return out + [Device(CPU, free, total)]


def group_vram_mb(pid: int) -> int | None:
    """GPU memory held by the process group ``pid`` leads (a worker and the helpers vLLM starts), or None."""
    import os

    def pgid(p: int) -> int | None:
        try:
            return os.getpgid(p)
        except OSError:
            return None

    pids = {int(x) for x in os.listdir("/proc") if x.isdigit() and pgid(int(x)) == pid}
    return process_vram_mb(pids | {pid})

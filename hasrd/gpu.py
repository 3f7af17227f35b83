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
from dataclasses import dataclass
from typing import Awaitable, Callable


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


def list_gpus(timeout: float = 5.0) -> list[Gpu]:
    """GPUs with free/total memory; [] when there is no NVIDIA driver."""
    try:
        import pynvml  # nvidia-ml-py: NVML only, no CUDA context

        pynvml.nvmlInit()
        try:
            out = []
            for i in range(pynvml.nvmlDeviceGetCount()):
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                mem = pynvml.nvmlDeviceGetMemoryInfo(h)
                uuid = pynvml.nvmlDeviceGetUUID(h)
                name = pynvml.nvmlDeviceGetName(h)
                out.append(Gpu(i, uuid.decode() if isinstance(uuid, bytes) else uuid,
                               name.decode() if isinstance(name, bytes) else name,
                               int(mem.free // 2**20), int(mem.total // 2**20)))
            return out
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        pass
    smi = shutil.which("nvidia-smi")
    if not smi:
        return []
    try:
        text = subprocess.run([smi, "--query-gpu=index,uuid,name,memory.free,memory.total",
                               "--format=csv,noheader,nounits"], capture_output=True, text=True,
                              timeout=timeout, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return parse_smi(text)


def process_vram_mb(pids: set[int], timeout: float = 3.0) -> int | None:
    """VRAM used by these processes (the worker's group), in MB; None when unknown (no NVIDIA driver)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            total, seen = 0, False
            for i in range(pynvml.nvmlDeviceGetCount()):
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
                    if proc.pid in pids and proc.usedGpuMemory:
                        total += int(proc.usedGpuMemory // 2**20)
                        seen = True
            return total if seen else None  # not listed (another pid namespace): unknown, not zero
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        pass
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        text = subprocess.run([smi, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=timeout, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    used, seen = 0, False
    for line in text.strip().splitlines():
        parts = [x.strip() for x in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit() and int(parts[0]) in pids:
            used += _int(parts[1]) or 0
            seen = True
    return used if seen else None


def parse_smi(text: str) -> list[Gpu]:
    out = []
    for line in text.strip().splitlines():
        parts = [x.strip() for x in line.split(",")]
        if len(parts) >= 5 and parts[0].isdigit():
            out.append(Gpu(int(parts[0]), parts[1], parts[2], _int(parts[3]), _int(parts[4])))
    return out


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

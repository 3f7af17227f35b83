"""GPU placement decided in the daemon: HASR_GPU as index or UUID, and the wait for free VRAM."""

from __future__ import annotations

import pytest

from hasrd import gpu
from tests.conftest import run

GPUS = gpu.parse_smi("0, GPU-aaaa1111-2222, NVIDIA H200, 1000, 143771\n"
                     "1, GPU-bbbb3333-4444, NVIDIA H200, 140000, 143771\n")


def test_nvidia_smi_csv_is_parsed() -> None:
    assert [(g.index, g.uuid, g.free_mb) for g in GPUS] == [(0, "GPU-aaaa1111-2222", 1000),
                                                          (1, "GPU-bbbb3333-4444", 140000)]


def test_a_uuid_is_resolved_to_its_index_for_cuda_visible_devices() -> None:
    env = gpu.placement_env("GPU-bbbb3333-4444", GPUS)
    assert env == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "1"}
    assert gpu.resolve_index("bbbb3333", GPUS) == 1
    assert gpu.resolve_index("0", GPUS) == 0
    assert gpu.placement_env("", GPUS) == {}


def test_an_unknown_gpu_is_a_clear_error() -> None:
    with pytest.raises(gpu.GpuError, match="no GPU with that UUID"):
        gpu.resolve_index("GPU-ffff", GPUS)
    with pytest.raises(gpu.GpuError, match="index"):
        gpu.resolve_index("7", GPUS)


def test_waiting_for_vram_returns_once_enough_is_free_and_gives_up_at_the_deadline() -> None:
    readings = iter([100, 500, 2000])
    reports: list[str] = []

    async def free() -> int | None:
        return next(readings)

    assert run(gpu.wait_for_vram(1500, 5.0, free, reports.append, poll_s=0.01)) == 2000
    assert len(reports) == 2 and "1500 MB" in reports[0]

    async def never() -> int | None:
        return 10

    with pytest.raises(gpu.GpuError, match="HASR_NEED_VRAM_MB"):
        run(gpu.wait_for_vram(1500, 0.05, never, poll_s=0.01))

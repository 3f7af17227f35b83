"""How the daemon starts a worker: the spawn function of each runner, and the pool's runner factory (a runner per
model and device), with GPU placement and an optional wait for free VRAM decided here, in the daemon,
without any GPU library."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING

from hasrd import errors
from hasrd.workerenv import worker_env
from hasrd.workerproc import WorkerProcess

if TYPE_CHECKING:
    from hasrd.config import Settings
    from hasrd.modelspec import ModelSpec
    from hasrd.runnerapi import MakeRunner, RunnerHooks


def make_spawn(engine: str, *, python: str = "", gpu_spec: str = "", need_vram_mb: int = 0,
               vram_wait_sec: float = 180.0, extra_env: Mapping[str, str] | None = None
               ) -> Callable[[Callable[[str], None]], Awaitable[WorkerProcess]]:
    """The daemon's spawn function: GPU placement, an optional wait for free VRAM, then the worker."""
    from hasrd import gpu

    async def spawn(report: Callable[[str], None]) -> WorkerProcess:
        env_extra = dict(extra_env or {})
        if gpu_spec or need_vram_mb:
            gpus = await asyncio.to_thread(gpu.list_gpus)
            try:
                env_extra.update(gpu.placement_env(gpu_spec, gpus))
                index = gpu.resolve_index(gpu_spec, gpus) or 0
                if need_vram_mb and gpus:
                    async def free_mb() -> int | None:
                        for g in await asyncio.to_thread(gpu.list_gpus):
                            if g.index == index:
                                return g.free_mb
                        return None

                    await gpu.wait_for_vram(need_vram_mb, vram_wait_sec, free_mb, report)
            except gpu.GpuError as e:
                raise errors.LoadFailed(str(e)) from None
        report("starting worker")
        return await WorkerProcess.spawn(engine, python=python, env=worker_env(os.environ, env_extra))

    return spawn


def make_runner_factory(settings: Settings, has_gpus: Callable[[], bool]) -> MakeRunner:
    """The pool's runner factory (hasrd.runnerapi.MakeRunner): a runner for (model, device, its pool's hooks),
    device "cpu" or a GPU UUID (hasrd.placement)."""
    from hasrd.runner import Runner

    def for_worker(spec: ModelSpec, device: str, hooks: RunnerHooks) -> Runner:
        env = spec.worker_env()
        gpu_spec = "" if device == "cpu" else device
        if device == "cpu" and has_gpus():  # placed on the CPU of a GPU machine: keep it off the GPUs
            env.update(HASR_FW_DEVICE="cpu", CUDA_VISIBLE_DEVICES="")
        elif device == "cpu":
            gpu_spec = settings.gpu
        return Runner(settings, make_spawn(spec.engine, python=settings.worker_python, gpu_spec=gpu_spec,
                                           need_vram_mb=settings.need_vram_mb if gpu_spec else 0,
                                           vram_wait_sec=settings.vram_wait_sec, extra_env=env), hooks)
    return for_worker

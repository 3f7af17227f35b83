"""The pool's placement and eviction rules as plain values (hasrd/placement.py): fake inventories of 2 x 24 GB
GPUs, 1 x 8 GB, and a CPU-only machine."""

from __future__ import annotations

from hasrd.gpu import Gpu, Inventory
import pytest

from hasrd.placement import (CPU, Decision, Device, Seat, batch_for, best_device, choose, default_max_workers,
                             parallel_for, streams_for)

TWO_24 = [Device("GPU-a", 24000, 24000), Device("GPU-b", 24000, 24000), Device(CPU, 16000, 24000)]
ONE_8 = [Device("GPU-x", 8000, 8000), Device(CPU, 16000, 24000)]
CPU_ONLY = [Device(CPU, 16000, 24000)]


def seat(key: int, model: str, device: str, *, jobs: int = 0, capacity: int = 1, ready: bool = True,
         last_used: float = 0.0, mb: int = 1000, stopping: bool = False) -> Seat:
    """A worker; by default one that holds one job at most, so ``jobs=1`` is a full one."""
    return Seat(key, model, device, ready, last_used, mb, jobs, capacity, stopping)


def test_an_idle_worker_of_the_model_is_used_ready_first_then_most_recent() -> None:
    seats = [seat(1, "base", CPU, ready=False, last_used=9), seat(2, "base", CPU, last_used=1),
             seat(3, "base", CPU, last_used=5), seat(4, "large", CPU)]
    assert choose(seats, "base", 700, CPU_ONLY, 8) == Decision("use", worker=3)


def test_a_full_worker_is_never_used_and_another_starts_while_the_cap_allows() -> None:
    seats = [seat(1, "base", CPU, jobs=1)]
    assert choose(seats, "base", 700, CPU_ONLY, 2) == Decision("start", device=CPU)
    assert choose(seats, "base", 700, CPU_ONLY, 1).kind == "wait"


def test_a_gpu_worker_goes_to_the_gpu_with_the_most_free_memory_that_fits() -> None:
    devices = [Device("GPU-a", 10000, 24000), Device("GPU-b", 20000, 24000), Device(CPU, 16000, 24000)]
    assert choose([], "large", 6000, devices, 2, gpu_only=True) == Decision("start", device="GPU-b")
    assert best_device(devices, 15000) == Device("GPU-b", 20000, 24000)
    assert best_device(devices, 14000) == Device("GPU-b", 20000, 24000)
    assert best_device(devices, 21000) is None  # no GPU has 21 GB free, and the CPU has 16 GB
    assert best_device(devices, 21000, gpu_only=True) is None


def test_two_40_gb_workers_on_two_gpus_then_a_third_evicts_the_least_recently_used_idle_one() -> None:
    gpus = [Device("GPU-a", 140000, 140000), Device("GPU-b", 140000, 140000)]
    first = choose([], "m40", 40000, gpus, 2, gpu_only=True)
    assert first == Decision("start", device="GPU-a")
    after_one = [Device("GPU-a", 100000, 140000), Device("GPU-b", 140000, 140000)]
    second = choose([seat(1, "m40", "GPU-a", jobs=1, mb=40000)], "m40", 40000, after_one, 2, gpu_only=True)
    assert second == Decision("start", device="GPU-b")  # not beside the first: the most free memory
    both = [Device("GPU-a", 100000, 140000), Device("GPU-b", 100000, 140000)]
    seats = [seat(1, "m40", "GPU-a", last_used=10, mb=40000), seat(2, "m40", "GPU-b", last_used=5, mb=40000)]
    # a 100 GB model fits beside either 40 GB one (100 GB free each) while the cap allows a third worker
    assert choose(seats, "m100", 100000, both, 3, gpu_only=True).kind == "start"
    # with the cap at two, the least recently used idle worker makes room
    assert choose(seats, "m100", 100000, both, 2, gpu_only=True) == Decision("evict", victim=2, device="GPU-b")
    # a 120 GB model fits nowhere beside a 40 GB worker: the LRU idle one goes
    assert choose(seats, "m120", 120000, both, 3, gpu_only=True) == Decision("evict", victim=2, device="GPU-b")


def test_a_busy_worker_is_never_stopped_for_another_the_request_waits() -> None:
    both = [Device("GPU-a", 100000, 140000), Device("GPU-b", 100000, 140000)]
    seats = [seat(1, "m40", "GPU-a", jobs=1, mb=40000), seat(2, "m40", "GPU-b", jobs=1, mb=40000)]
    assert choose(seats, "m120", 120000, both, 3, gpu_only=True).kind == "wait"
    seats[1] = seat(2, "m40", "GPU-b", last_used=1, mb=40000)
    assert choose(seats, "m120", 120000, both, 3, gpu_only=True) == Decision("evict", victim=2, device="GPU-b")


def test_a_model_no_device_could_hold_is_refused_at_once_with_the_numbers() -> None:
    d = choose([seat(1, "x", "GPU-x", jobs=1)], "huge", 30000, ONE_8, 4, gpu_only=True)
    assert d.kind == "refuse" and "30000 MB" in d.reason and "8000 MB" in d.reason
    assert choose([], "big", 12000, ONE_8, 4) == Decision("start", device=CPU)  # not GPU-only: the CPU holds it
    # no device has 20 GB free and no worker of ours will free any: it starts where the most is free (a wait
    # would be for ever); with a busy worker that may free memory it waits
    assert choose([], "big", 20000, ONE_8, 4) == Decision("start", device=CPU)
    assert choose([seat(1, "x", CPU, jobs=1)], "big", 20000, ONE_8, 4).kind == "wait"


def test_never_two_models_on_a_gpu_that_cannot_hold_both() -> None:
    after = [Device("GPU-x", 3000, 8000), Device(CPU, 16000, 24000)]
    seats = [seat(1, "a", "GPU-x", jobs=1, mb=5000)]
    assert choose(seats, "b", 5000, after, 4, gpu_only=True).kind == "wait"
    assert choose(seats, "b", 3000, after, 4, gpu_only=True) == Decision("start", device="GPU-x")


def test_lru_eviction_on_the_cpu_with_one_worker_allowed() -> None:
    seats = [seat(1, "base", CPU, last_used=3)]
    assert choose(seats, "small", 900, CPU_ONLY, 1) == Decision("evict", victim=1, device=CPU)
    seats = [seat(1, "base", CPU, last_used=3), seat(2, "tiny", CPU, last_used=1)]
    assert choose(seats, "small", 900, CPU_ONLY, 2) == Decision("evict", victim=2, device=CPU)


def test_one_worker_per_gpu_by_default_and_two_without_gpus() -> None:
    assert default_max_workers(0) == 2 and default_max_workers(1) == 1 and default_max_workers(4) == 4


def test_the_inventory_honours_a_pinned_gpu_and_lists_the_cpu() -> None:
    gpus = [Gpu(0, "GPU-aaaa", "H200", 100000, 140000), Gpu(1, "GPU-bbbb", "H200", 130000, 140000)]
    inv = Inventory(pin="GPU-bbbb", read=lambda: gpus, memory=lambda: (12000, 24000))
    assert inv() == [Device("GPU-bbbb", 130000, 140000), Device(CPU, 12000, 24000)]
    assert Inventory(read=lambda: [], memory=lambda: (1, 2))() == [Device(CPU, 1, 2)]


def test_a_sized_fake_model_is_gpu_only_and_its_worker_holds_that_much() -> None:
    from types import SimpleNamespace

    from hasrd.config import Settings
    from hasrd.modelspec import resolve
    from hasrd.runner import Runner
    from hasrd.runnerapi import RunnerHooks
    from hasrd.spawn import make_runner_factory

    spec = resolve("fake:40000", SimpleNamespace(engine="fake", fw_model=""))
    assert spec.gpu_only and spec.need_mb > 40000 and spec.engine == "fake"
    runner = make_runner_factory(Settings(vram_wait_sec=1.0), lambda: True)(spec, "GPU-a", RunnerHooks())
    assert isinstance(runner, Runner) and runner.state.value == "stopped" and callable(runner.spawn)


def test_no_idle_worker_is_stopped_to_start_a_second_worker_of_a_model_whose_worker_is_busy() -> None:
    """Issue 31 #19: two models on two workers, a request for the one whose worker was busy stopped the other's
    idle worker to start a second one of its own, and the next request for the other did the same: 89
    evictions in 200 requests. It waits for its own worker instead; a model without any worker still evicts."""
    seats = [Seat(1, "a", CPU, ready=True, last_used=1.0, mb=700, jobs=1),
             Seat(2, "b", CPU, ready=True, last_used=0.0, mb=700)]
    full = [Device(CPU, 100, 24000)]  # no room for a third worker's memory
    assert choose(seats, "a", 700, full, max_workers=2).kind == "wait"
    assert choose(seats, "a", 700, [Device(CPU, 16000, 24000)], max_workers=2).kind == "wait"  # at the cap too
    d = choose(seats, "c", 700, full, max_workers=2)
    assert d.kind == "evict" and d.victim == 2  # a model with no worker at all makes room, as before


def test_a_second_job_gets_a_worker_of_its_own_while_the_cap_allows_and_joins_one_with_room_after() -> None:
    """Spread before packing: on the CPU (2 workers by default) a live session beside a file got its first words
    2.5 s after the onset on its own worker and 15.5 s sharing the file's; one GPU (one worker) packs."""
    seats = [seat(1, "base", CPU, jobs=1, capacity=4)]
    assert choose(seats, "base", 700, CPU_ONLY, 2) == Decision("start", device=CPU)
    assert choose(seats, "base", 700, CPU_ONLY, 1) == Decision("use", worker=1)
    assert choose([seat(1, "base", CPU, jobs=3, capacity=4)], "base", 700, CPU_ONLY, 1) == Decision("use", worker=1)
    no_room = [Device(CPU, 100, 24000)]  # no memory for another copy of the model: it joins the busy one
    assert choose(seats, "base", 700, no_room, 2) == Decision("use", worker=1)


def test_an_idle_worker_comes_first_then_ready_then_fewer_jobs_then_the_most_recently_used() -> None:
    seats = [seat(1, "base", CPU, jobs=3, capacity=4, last_used=9),
             seat(2, "base", CPU, jobs=1, capacity=4, last_used=1),
             seat(3, "base", CPU, jobs=1, capacity=4, last_used=5), seat(4, "base", CPU, capacity=4, ready=False)]
    assert choose(seats, "base", 700, CPU_ONLY, 4) == Decision("use", worker=4)  # idle, though loading
    assert choose(seats[:3], "base", 700, CPU_ONLY, 3) == Decision("use", worker=3)
    loading = [seats[0], seat(4, "base", CPU, jobs=1, capacity=4, ready=False)]
    assert choose(loading, "base", 700, CPU_ONLY, 2) == Decision("use", worker=1)  # loading last


def test_a_second_worker_of_a_model_starts_when_every_worker_of_it_is_full() -> None:
    full = [seat(1, "base", CPU, jobs=4, capacity=4), seat(2, "base", CPU, jobs=2, capacity=2)]
    assert choose(full, "base", 700, CPU_ONLY, 3) == Decision("start", device=CPU)
    assert choose(full, "base", 700, CPU_ONLY, 2) == Decision("wait", reason="its workers are full")
    roomy = [full[0], seat(2, "base", CPU, jobs=1, capacity=2)]
    assert choose(roomy, "base", 700, CPU_ONLY, 2) == Decision("use", worker=2)


def test_a_worker_being_stopped_has_no_room_and_is_not_stopped_again() -> None:
    stopping = [seat(1, "base", CPU, capacity=4, stopping=True)]
    assert stopping[0].busy and not stopping[0].room
    assert choose(stopping, "base", 700, CPU_ONLY, 2) == Decision("start", device=CPU)
    assert choose(stopping, "small", 700, [Device(CPU, 100, 24000)], 1).kind == "wait"


def test_a_worker_holding_a_job_is_never_stopped_for_another_model_even_with_room_left() -> None:
    seats = [seat(1, "base", CPU, jobs=1, capacity=4)]
    assert seats[0].busy and seats[0].room
    assert choose(seats, "small", 900, CPU_ONLY, 1).kind == "wait"
    assert choose([seat(1, "base", CPU, capacity=4)], "small", 900, CPU_ONLY, 1) == \
        Decision("evict", victim=1, device=CPU)


def test_worker_parallel_batch_and_streams_are_the_setting_or_by_device_when_0() -> None:
    assert streams_for(CPU, 0) == 1 and streams_for("GPU-aaaa", 0) == 3 and streams_for(CPU, 2) == 2
    with pytest.raises(ValueError, match="HASR_WORKER_STREAMS"):
        streams_for("GPU-aaaa", -1)
    assert parallel_for(CPU, 0) == 4 and parallel_for("GPU-aaaa", 0) == 32
    assert parallel_for(CPU, 1) == 1 and parallel_for("GPU-aaaa", 3) == 3
    assert batch_for(CPU, 0) == 8 and batch_for("GPU-aaaa", 0) == 32 and batch_for(CPU, 5) == 5
    with pytest.raises(ValueError, match="HASR_WORKER_PARALLEL"):
        parallel_for(CPU, -1)

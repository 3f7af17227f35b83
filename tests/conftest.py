"""Shared fixtures: short socket paths, quick settings, an asyncio runner, and process helpers."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pytest

T = TypeVar("T")

# The daemons these tests start run one worker (the single-worker lifecycle: queues, leases, cancels), as
# before the pool; the pool's own tests (test_pool*.py) set HASR_MAX_WORKERS themselves, and the CPU default
# (2) is checked there.
os.environ.setdefault("HASR_MAX_WORKERS", "1")


def run(coro: Awaitable[T], timeout: float = 120.0) -> T:
    """Run one coroutine on a fresh event loop with an overall timeout."""
    async def wrapped() -> T:
        return await asyncio.wait_for(coro, timeout)
    return asyncio.run(wrapped())


def _short_dir() -> Iterator[str]:
    d = tempfile.mkdtemp(prefix="h", dir="/tmp")
    os.chmod(d, 0o700)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def short_tmp() -> Iterator[str]:
    """A short private directory (AF_UNIX paths stop at 107 bytes; pytest's tmp_path can be long)."""
    yield from _short_dir()


@pytest.fixture(scope="module")
def module_tmp() -> Iterator[str]:
    """short_tmp for a whole module (a daemon shared by its tests)."""
    yield from _short_dir()


def need(ok: bool, reason: str) -> None:
    """Skip a test whose machine lacks something (root, cgroup v2, a tool) — but under CI, where .ci/run
    installs everything and runs as root, that is a failure: nothing may be skipped there."""
    if ok:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI must provide this (see .ci/run): {reason}", pytrace=False)
    pytest.skip(reason)


def pid_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def wait_until(pred: Callable[[], Any], timeout: float = 5.0, interval: float = 0.02) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(interval)
    return bool(pred())

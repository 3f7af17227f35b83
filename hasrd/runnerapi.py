"""What lies between the pool (hasrd.scheduler) and a runner (hasrd.runner), declared: :class:`PoolRunner`, all the
pool asks of a runner (hasrd.runner.Runner implements it, and so does the pool tests' fake); :class:`RunnerHooks`,
all a runner may ask of its pool, given when it is made; and the factory's type, :data:`MakeRunner`. Interfaces
only: the pool imports this, never hasrd.runner.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from hasrd.jobevents import EventSink
    from hasrd.modelspec import ModelSpec
    from hasrd.options import Options
    from hasrd.pcm import PcmBuffer
    from hasrd.status import RunnerStatus, State
    from hasrd.transcript import Transcript
    from hasrd.workerlive import LiveSession


@dataclass(frozen=True)
class RunnerHooks:
    """What a runner may ask of its pool."""

    on_change: Callable[[], None] = lambda: None  # its state, its load's phase or its jobs changed
    waiting: Callable[[], int] = lambda: 0  # requests waiting for a worker (a cancelled job's grace shrinks then)


@runtime_checkable
class PoolRunner(Protocol):
    """One worker's lifecycle as the pool drives it (hasrd.runner's docstring says what each call does)."""

    @property
    def state(self) -> State: ...

    @property
    def pid(self) -> int | None:
        """Its worker's process, while one runs."""

    def status(self) -> RunnerStatus: ...

    async def ready(self, on_event: EventSink | None = None) -> object: ...

    async def loaded(self, on_event: EventSink | None = None) -> None: ...

    async def transcribe(self, pcm: PcmBuffer, *, name: str = "", language: str = "",
                         options: Options | None = None, on_event: EventSink | None = None) -> Transcript: ...

    def live(self, *, language: str = "", options: Options | None = None,
             on_event: EventSink | None = None) -> AbstractAsyncContextManager[LiveSession]: ...

    def retry_now(self) -> None: ...

    async def clear_failure(self) -> None: ...

    async def stop(self) -> None: ...

    def kill(self, reason: str) -> None: ...

    async def close(self) -> None: ...


MakeRunner = Callable[["ModelSpec", str, RunnerHooks], PoolRunner]
"""(model, device, hooks) -> a stopped runner for that model on that device ("cpu" or a GPU UUID)."""

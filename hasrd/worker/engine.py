"""The engine interface: what the worker asks of an engine and what an engine reports through (a leaf module).

Engines (engines/*.py), the v2c pipeline and the live sessions import this, and nothing here imports them back;
the factory that picks an engine by name, and the start that hands a loaded engine its decode loop, is
``hasrd.worker.engines``. An engine serves the jobs its worker holds, several at once, each from its own thread,
and reports failures by raising EngineError with one of the protocol's error codes (the worker turns that into a
``Failed`` message and keeps serving). Heavy imports happen inside ``load`` or inside the engine modules, which are
imported only when their engine is chosen.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from hasrd.errors import EngineError
from hasrd.options import Options
from hasrd.protocol import Phase, TurnKind
from hasrd.transcript import Transcript

if TYPE_CHECKING:
    import numpy as np

    from hasrd.worker.batcher import Batcher
    from hasrd.worker.live import LiveBase

__all__ = ["Emitter", "Engine", "EngineError", "LiveEmitter", "Loaded", "NullEmitter"]


class Emitter(Protocol):
    """Where an engine reports progress while it works (each call becomes one protocol event). ``segment``: the
    long-audio segment (a file) or the utterance (a live session) a text belongs to."""

    def progress(self, done_s: float, total_s: float, phase: Phase = "decoding") -> None: ...
    def draft(self, text: str, segment: int = 0) -> None: ...
    def sentence(self, index: int, text: str, engine: str, start_s: float, end_s: float,
                 segment: int = 0) -> None: ...


class LiveEmitter(Emitter, Protocol):
    def turn(self, segment: int, kind: TurnKind, start_s: float = 0.0, end_s: float = 0.0, text: str = "") -> None: ...


def heard(emit: object, code: str) -> None:
    """Tell ``emit`` the language an engine detected (no language was asked), so that the texts it streams from
    now on are in the same script as the result's (the worker's emitter converts Chinese by it; emitters that
    do not care need no ``language`` method): R2T2 naming Cantonese left the streamed sentences simplified and
    the result traditional (issue 31 #10)."""
    tell = getattr(emit, "language", None)
    if code and callable(tell):
        tell(code)


class NullEmitter:
    def progress(self, done_s: float, total_s: float, phase: Phase = "decoding") -> None:
        pass

    def draft(self, text: str, segment: int = 0) -> None:
        pass

    def sentence(self, index: int, text: str, engine: str, start_s: float, end_s: float, segment: int = 0,
                 speaker: str = "") -> None:
        pass


@dataclass(frozen=True)
class Loaded:
    """What a load reports: the identity for /api/ps, and the decode loop its model takes: ``lanes`` calls at once
    (the model's replicas) of up to ``batch`` windows each."""

    identity: dict[str, Any]
    lanes: int = 1
    batch: int = 1


class Engine(Protocol):
    name: str

    def load(self, phase: Callable[[str], None]) -> Loaded:
        """Load models; call ``phase`` with a human phrase per step."""
        ...

    def attach(self, loop: Batcher) -> None:
        """Send every model call through ``loop``, the worker's one decode loop (until then: in the caller's thread,
        for an engine driven without a worker)."""
        ...

    def transcribe(self, pcm: np.ndarray, language: str, options: Options, emit: Emitter,
                   cancelled: Callable[[], bool]) -> Transcript:
        """Transcribe 16 kHz mono float32 PCM; check ``cancelled()`` between steps."""
        ...

    def live(self, language: str, options: Options, emit: LiveEmitter, cancelled: Callable[[], bool]) -> LiveBase:
        """A live session: fed audio as it arrives, finished at the end."""
        ...

    def close(self) -> None: ...

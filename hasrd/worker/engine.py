"""The engine interface: what the worker asks of an engine and what an engine reports through (a leaf module).

Engines (engines/*.py), the v2c pipeline and the live sessions import this, and nothing here imports them back;
the factory that picks an engine by name is ``hasrd.worker.engines.create``. An engine is created by name,
loaded once (reporting phases), then serves transcriptions one at a time. It reports failures by raising
EngineError with one of the protocol's error codes; the worker turns that into a ``Failed`` message and keeps
serving. Heavy imports happen inside ``load`` or inside the engine modules, which are imported only when their
engine is chosen.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from hasrd.errors import EngineError
from hasrd.transcript import Transcript

__all__ = ["ENGINES", "Emitter", "Engine", "EngineError", "LiveEmitter", "NullEmitter"]

ENGINES = ("auto", "hybrid", "whisper", "r2t2", "fake")


class Emitter(Protocol):
    """Where an engine reports progress while it works (each call becomes one protocol event)."""

    def progress(self, done_s: float, total_s: float, phase: str = "decoding") -> None: ...
    def draft(self, text: str, segment: int = 0) -> None: ...
    def sentence(self, index: int, text: str, engine: str, start_s: float, end_s: float) -> None: ...


def heard(emit: Any, code: str) -> None:
    """Tell ``emit`` the language an engine detected (no language was asked), so that the texts it streams from
    now on are in the same script as the result's (the worker's emitter converts Chinese by it; emitters that
    do not care need no ``language`` method): R2T2 naming Cantonese left the streamed sentences simplified and
    the result traditional (issue 31 #10)."""
    tell = getattr(emit, "language", None)
    if code and callable(tell):
        tell(code)


class NullEmitter:
    def progress(self, done_s: float, total_s: float, phase: str = "decoding") -> None:
        pass

    def draft(self, text: str, segment: int = 0) -> None:
        pass

    def sentence(self, index: int, text: str, engine: str, start_s: float, end_s: float) -> None:
        pass


class Engine(Protocol):
    name: str

    def load(self, phase: Callable[[str], None]) -> dict[str, Any]:
        """Load models; call ``phase`` with a human phrase per step; return the identity for /api/ps."""
        ...

    def transcribe(self, pcm: np.ndarray, language: str, options: dict[str, Any], emit: Emitter,
                   cancelled: Callable[[], bool]) -> Transcript:
        """Transcribe 16 kHz mono float32 PCM; check ``cancelled()`` between steps."""
        ...

    def live(self, language: str, options: dict[str, Any], emit: Any, cancelled: Callable[[], bool]) -> Any:
        """A live session (``hasrd.worker.live.LiveBase``): fed audio as it arrives, finished at the end."""
        ...

    def close(self) -> None: ...


class LiveEmitter(Protocol):
    def progress(self, done_s: float, total_s: float, phase: str = "decoding") -> None: ...
    def draft(self, text: str, segment: int = 0) -> None: ...
    def sentence(self, index: int, text: str, engine: str, start_s: float, end_s: float,
                 segment: int = 0) -> None: ...
    def turn(self, segment: int, kind: str, start_s: float = 0.0, end_s: float = 0.0, text: str = "") -> None: ...

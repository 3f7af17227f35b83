"""The engine factory: an engine by name, importing only that engine's module (the interface they share is
``hasrd.worker.engine``), and its start: the load, then the one decode loop every model call goes through."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hasrd.config import ENGINES
from hasrd.worker.batcher import Batcher
from hasrd.worker.engine import Engine, EngineError


def create(name: str) -> Engine:
    """Instantiate an engine by name (imports only that engine's module)."""
    if name == "fake":
        from hasrd.worker.engines.fake import FakeEngine

        return FakeEngine()
    if name in ("auto", "hybrid", "whisper", "r2t2"):
        try:
            from hasrd.worker.engines.select import create_real  # type: ignore[import-not-found]
        except ImportError as e:
            raise EngineError("model_unavailable", f"engine {name!r} is not available in this build: {e}") from None
        return create_real(name)  # type: ignore[no-any-return]
    raise EngineError("model_unavailable", f"unknown engine {name!r}; choose one of {', '.join(ENGINES)}")


def load(engine: Engine, phase: Callable[[str], None]) -> dict[str, Any]:
    """Load ``engine``, then build the decode loop its model calls go through, sized by what the load reports, and
    hand it to the engine -> the identity for /api/ps. The worker's main and ``hasrctl batch``'s actors start their
    engine so: one loop per process, built here alone."""
    loaded = engine.load(phase)
    engine.attach(Batcher(loaded.batch, lanes=loaded.lanes))
    return loaded.identity

"""The engine factory: an engine by name, importing only that engine's module (the interface they share is
``hasrd.worker.engine``)."""

from __future__ import annotations

from hasrd.worker.engine import ENGINES, Engine, EngineError


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

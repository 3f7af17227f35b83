"""hasr daemon: socket-activated speech-to-text service (never imports GPU libraries)."""

from __future__ import annotations

__version__ = "0.3.0"

"""The tray menu as plain data: which entries exist, their labels and whether they are enabled.

``app`` turns the list into a ``pystray.Menu`` (appindicator, gtk) and ``dropwin`` into buttons (the
stand-in for the menu on the xorg backend, which has none). ``None`` in the list is a separator.
"""

from __future__ import annotations

from dataclasses import dataclass

from tray.state import View

STATUS, TRANSCRIBE, DICTATE, DROPWIN, UNLOAD, OPEN_LAST, QUIT = (
    "status", "transcribe", "dictate", "dropwin", "unload", "open_last", "quit")
ACTIONS = (TRANSCRIBE, DICTATE, DROPWIN, UNLOAD, OPEN_LAST, QUIT)


@dataclass(frozen=True)
class Item:
    """One menu entry: ``key`` names the action (STATUS has none), ``default`` is the left-click action."""

    key: str
    label: str
    enabled: bool = True
    default: bool = False


def build(v: View, *, last_output: str | None = None, jobs_pending: int = 0,
          dictating: bool = False) -> list[Item | None]:
    """The menu for view ``v``; ``last_output`` is the newest transcript written, if any; ``dictating``: the
    microphone is open (the entry stops it)."""
    transcribe = "Transcribe file…" if not jobs_pending else f"Transcribe file… ({jobs_pending} pending)"
    unloadable = v.health in ("loading", "ok", "busy", "error") or v.model_loaded
    return [
        Item(STATUS, v.line, enabled=False),
        None,
        Item(TRANSCRIBE, transcribe),
        Item(DICTATE, "Stop dictating" if dictating else "Dictate"),
        Item(DROPWIN, "Open drop window", default=True),
        Item(UNLOAD, "Unload model", enabled=unloadable and v.health != "offline"),
        Item(OPEN_LAST, "Open last transcript", enabled=bool(last_output)),
        None,
        Item(QUIT, "Quit"),
    ]


def actions(items: list[Item | None]) -> dict[str, Item]:
    """The actionable entries by key (no status line, no separators)."""
    return {i.key: i for i in items if i is not None and i.key in ACTIONS}

"""What ``hasr-tray`` needs that ``pip install '.[tray]'`` cannot bring, what the extra brings, and which icon
backend it picks: checked without a display and without importing pystray (which raises without DISPLAY), so
that ``hasr-tray`` can refuse with one line instead of a traceback, ``hasrctl doctor`` can report it and
``hasrctl setup`` can leave out an autostart entry that would fail at every login. Here, under hasrctl, because
both use it and the tray imports hasrctl, never the other way round (docs/ARCHITECTURE.md "Layout").

Tk for Python is not on PyPI: Debian and Ubuntu ship it as python3-tk (Fedora python3-tkinter, Arch tk); a
virtual environment sees it only when its base interpreter has it.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass

TK_FIX = "sudo apt install python3-tk (Fedora: sudo dnf install python3-tkinter; Arch: sudo pacman -S tk)"
EXTRA_FIX = "install the tray extra: pip install '.[tray]' in hasr's checkout (or pip install 'hasr[tray]')"


@dataclass(frozen=True)
class Part:
    """One thing the tray uses: ``error`` is empty when it is there; ``needed`` parts stop the tray."""

    name: str
    needed: bool
    error: str = ""
    fix: str = ""
    lacking: str = ""  # what the tray does without an optional part

    @property
    def ok(self) -> bool:
        return not self.error


def _tk() -> Part:
    """tkinter, imported: the stdlib package may be there while _tkinter (libtk) is not."""
    try:
        importlib.import_module("tkinter")
    except ImportError as e:
        return Part("tkinter", True, str(e) or "No module named 'tkinter'", TK_FIX)
    return Part("tkinter", True)


def _found(module: str, name: str, needed: bool, lacking: str = "", fix: str = EXTRA_FIX) -> Part:
    try:
        there = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package that is broken, or a module without a spec
        there = False
    if there:
        return Part(name, needed)
    return Part(name, needed, f"No module named '{module}'", fix, lacking)


def parts() -> list[Part]:
    """Every part the tray uses, needed ones first."""
    gdbus = shutil.which("gdbus") is not None
    return [
        _tk(),
        _found("pystray", "pystray", True),
        _found("PIL", "Pillow", True),
        _found("tkinterdnd2", "tkinterdnd2", False, "no drag and drop: the drop window offers 'Transcribe file…'"),
        _found("Xlib", "python-xlib", False, "no plain X tray icon (the xorg backend)"),
        _found("jeepney", "jeepney", False, "notifications go through gdbus" if gdbus else "no notifications",
               EXTRA_FIX if gdbus else EXTRA_FIX + ", or install gdbus (libglib2.0-bin)"),
    ]


def missing() -> list[Part]:
    """The needed parts that are not there: the tray cannot start without them."""
    return [p for p in parts() if p.needed and not p.ok]


def reason(lacking: list[Part]) -> str:
    """``it needs tkinter (No module named 'tkinter')``."""
    return "it needs " + ", ".join(f"{p.name} ({p.error})" for p in lacking)


def fix(lacking: list[Part]) -> str:
    """The fixes of ``lacking``, each once, in order."""
    fixes: list[str] = []
    for p in lacking:
        if p.fix not in fixes:
            fixes.append(p.fix)
    return "; then ".join(fixes)


def message(lacking: list[Part]) -> str:
    """One line saying why the tray cannot run and how to fix it (``lacking`` from :func:`missing`)."""
    return f"the tray cannot run: {reason(lacking)}; fix: {fix(lacking)}"


def choose_backend(env: Mapping[str, str] | None = None) -> str:
    """The pystray backend: PYSTRAY_BACKEND when set; else ``appindicator`` when ``gi`` and an AppIndicator
    typelib import, else ``xorg`` (no menu there: a left click opens the drop window, which carries the menu's
    actions)."""
    env = os.environ if env is None else env
    if env.get("PYSTRAY_BACKEND"):
        return env["PYSTRAY_BACKEND"]
    try:
        import gi

        gi.require_version("Gtk", "3.0")
        for name in ("AyatanaAppIndicator3", "AppIndicator3"):
            try:
                gi.require_version(name, "0.1")
                return "appindicator"
            except ValueError:
                continue
    except (ImportError, ValueError):
        pass
    return "xorg"

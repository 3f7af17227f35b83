"""Fixes for pystray's xorg backend (pystray 0.19.5), applied by subclassing its Icon.

1. Clicks: the icon window never selects ButtonPressMask, so a left click never arrives.
2. Titles: only WM_NAME (latin-1) is set, so a title naming ``会议.wav`` raised UnicodeEncodeError; we also set
   _NET_WM_NAME in UTF-8.
3. Threads: updates from other threads went through pystray's own Display connection while its loop thread
   was reading it; python-xlib then deadlocked now and then (the icon froze mid-update). Here other threads
   wake the loop through a separate connection of their own, so only the loop thread touches pystray's.
4. Docking: every icon update re-sent SYSTEM_TRAY_REQUEST_DOCK and trayer re-embedded the window, once
   squeezing it to 1 pixel; we ask to dock only while not docked.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any


def icon_class(base: Any) -> Any:
    """A subclass of pystray's xorg ``Icon`` with the fixes above."""
    import Xlib.X
    import Xlib.display
    from Xlib.protocol import event as xevent

    class Icon(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self._wake_lock = threading.Lock()
            self._wake_display: Any = None
            super().__init__(*args, **kwargs)
            mask = Xlib.X.ExposureMask | Xlib.X.StructureNotifyMask | Xlib.X.ButtonPressMask
            self._window.change_attributes(event_mask=mask)
            self._display.flush()

        def _create_atoms(self) -> None:
            super()._create_atoms()
            # interned on the constructing thread, never inside the loop
            self._net_wm_name = self._display.intern_atom("_NET_WM_NAME")
            self._utf8_string = self._display.intern_atom("UTF8_STRING")

        def _update_title(self) -> None:
            title = self.title or ""
            self._window.set_wm_name(title.encode("latin-1", "replace").decode("latin-1"))
            self._window.change_property(self._net_wm_name, self._utf8_string, 8, title.encode("utf-8"))

        def _assert_docked(self) -> None:
            if not self._systray_manager:
                self._dock_window()
            assert self._systray_manager

        def _wake(self, atom: int) -> None:
            """Send the loop a ClientMessage over our own connection (caller holds _wake_lock)."""
            if self._wake_display is None:
                self._wake_display = Xlib.display.Display()
            d = self._wake_display
            win = d.create_resource_object("window", self._window.id)
            win.send_event(xevent.ClientMessage(window=win, client_type=atom, data=(32, [0] * 5)),
                           event_mask=Xlib.X.NoEventMask)
            d.flush()

        def _rewrite_implementation(self, *originals: Callable[[], None]) -> None:
            atoms = [self._display.intern_atom(f"_PYSTRAY_{f.__name__.upper()}") for f in originals]
            handlers: dict[int, Callable[[], None]] = {}

            def in_loop(original: Callable[[], None]) -> Callable[[], None]:
                def run() -> None:
                    try:
                        original()
                        self._queue.put(True)
                    except BaseException:
                        self._queue.put(sys.exc_info())
                return run

            def dispatcher(original: Callable[[], None], atom: int) -> Callable[[], None]:
                def call() -> None:
                    loop = getattr(self, "_thread", None)
                    if loop is None or threading.current_thread().ident == loop.ident:
                        original()
                        return
                    with self._wake_lock:
                        self._wake(atom)
                        result = self._queue.get()
                    if result is not True:
                        raise result[1].with_traceback(result[2])
                return call

            for original, atom in zip(originals, atoms, strict=True):
                handlers[atom] = in_loop(original)
                setattr(self, original.__name__, dispatcher(original, atom))
            self._message_handlers[Xlib.X.ClientMessage] = (
                lambda ev: handlers.get(ev.client_type, lambda: None)())

    return Icon

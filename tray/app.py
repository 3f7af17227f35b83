"""``hasr-tray``: the tray icon (pystray, in a thread), the drop window (Tk, main thread), and the glue.

Threads: Tk owns the main thread; the pystray icon runs ``icon.run`` in a daemon thread (its xorg backend's
``stop()`` may hang, pystray #143, so nothing waits for it); ``tray.watch.Watcher`` follows the daemon;
``tray.jobs.Jobs`` transcribes. Anything that touches Tk is posted through ``App.ui()``.

Backend: PYSTRAY_BACKEND when set; else ``appindicator`` when ``gi`` and an AppIndicator typelib import,
else ``xorg`` (no menu there: a left click opens the drop window, which carries the menu's actions):
``hasrctl.traydeps.choose_backend``.
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

from hasrctl import traydeps

log = logging.getLogger("hasr.tray")


class App:
    """Owns the Tk root, the icon, the watcher and the job queue."""

    def __init__(self, settings: Any, show_window: bool = False) -> None:
        import tkinter as tk

        import pystray

        from tray import dropwin, icons, menu, notify, xicon
        from tray.client import Client
        from tray.jobs import Jobs
        from tray.dictation import Dictation
        from tray.state import Link, listening, view
        from tray.watch import Watcher

        self._icons, self._menu, self._view_of, self._listening = icons, menu, view, listening
        self.settings = settings
        self.notify: Callable[..., Any] = notify.send
        self._ui: queue.Queue[Callable[[], None]] = queue.Queue()
        self.backend = os.environ.get("PYSTRAY_BACKEND", "")
        flat = self.backend == "xorg"
        self._images = {s: icons.flatten(icons.draw(s, 64)) if flat else icons.draw(s, 64) for s in icons.STATES}
        self.view = view(Link("down", "connecting"))
        self.client = Client(settings.socket)

        self.root, dnd = dropwin.make_root()
        self.fmt = tk.StringVar(self.root, value=settings.format)
        self.speakers = tk.BooleanVar(self.root, value=False)  # the window's toggle, kept for the session
        self.window = dropwin.DropWindow(self.root, dnd, self.add_files, self.action, self.fmt, self.speakers)
        self.root.protocol("WM_DELETE_WINDOW", self.window.hide)
        if not show_window:
            self.window.hide()
        self.jobs = Jobs(self.client, lambda: (self.fmt.get(), settings.language),
                         lambda job: self.ui(lambda: self._job_changed(job)), self.notify, settings.autostart,
                         speakers=self.speakers.get)
        self.items = menu.build(self.view)
        self._info: Any = Link("down", "connecting")
        self.dictation = Dictation(self._daemon_path, lambda finals, draft: self.ui(
            lambda: self.window.set_live(finals, draft)), lambda err: self.ui(lambda: self._dictation_ended(err)),
            language=settings.language)

        icon_class = xicon.icon_class(pystray.Icon) if self.backend == "xorg" else pystray.Icon
        self.icon = icon_class("hasr", self._images[self.view.icon], self.view.title, menu=self._pystray_menu())
        self._xprobe: Any = None
        self._icon_ready = threading.Event()
        self._icon_lock = threading.Lock()
        self.watcher = Watcher(self.client, lambda info: self.ui(lambda: self._publish(info)), settings.poll_sec)

    # --- threads -------------------------------------------------------------------------------------------
    def ui(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the Tk thread (callable from any thread)."""
        self._ui.put(fn)

    def _pump(self) -> None:
        while True:
            try:
                fn = self._ui.get_nowait()
            except queue.Empty:
                break
            try:
                fn()
            except Exception:
                log.exception("UI callback failed")
        self.root.after(40, self._pump)

    # --- the icon --------------------------------------------------------------------------------------------
    def _pystray_menu(self) -> Any:
        import pystray

        def entry(i: int) -> Any:
            return pystray.MenuItem(lambda _: self.items[i].label,  # type: ignore[union-attr]
                                    lambda: self.ui(lambda: self.action(self.items[i].key)),  # type: ignore
                                    enabled=lambda _: self.items[i].enabled,  # type: ignore[union-attr]
                                    default=bool(self.items[i].default))  # type: ignore[union-attr]

        return pystray.Menu(*[pystray.Menu.SEPARATOR if it is None else entry(i) for i, it in enumerate(self.items)])

    def _run_icon(self) -> None:
        def setup(icon: Any) -> None:
            # xorg: the loop thread records itself just after calling us; its dispatcher needs that first
            for _ in range(200):
                if self.backend != "xorg" or getattr(icon, "_thread", None) is not None:
                    break
                threading.Event().wait(0.01)
            icon.visible = True
            self._icon_ready.set()
            self._update_icon()

        try:
            self.icon.run(setup=setup)
        except Exception:
            log.exception("the tray icon stopped")

    def _redock(self) -> None:
        """xorg: dock once a tray host appears (pystray tries only when shown or updated, never again)."""
        try:
            if self._xprobe is None:
                import Xlib.display

                self._xprobe = Xlib.display.Display()
            d = self._xprobe
            owner = d.get_selection_owner(d.intern_atom(f"_NET_SYSTEM_TRAY_S{d.get_default_screen()}"))
            has_host = owner not in (0, None) and getattr(owner, "id", owner) != 0
        except Exception:
            has_host = False
        if has_host and self._icon_ready.is_set() and getattr(self.icon, "_systray_manager", True) is None:
            log.info("a tray host appeared: docking")
            threading.Thread(target=self._update_icon, daemon=True).start()
        self.root.after(3000, self._redock)

    # --- state -----------------------------------------------------------------------------------------------
    def _publish(self, info: Any) -> None:
        self._info = info
        v = self._view_of(info)
        if self.dictation.active:
            v = self._listening(v)
        self.items = self._menu.build(v, last_output=str(self.jobs.last_output or "") or None,
                                      jobs_pending=self.jobs.pending(), dictating=self.dictation.active)
        self.window.set_view(v, self.items)
        if v == self.view:
            return
        log.info("state: icon=%s title=%s", v.icon, v.title)
        self.view = v
        if self._icon_ready.is_set():
            threading.Thread(target=self._update_icon, daemon=True).start()

    def _update_icon(self) -> None:
        """Show the latest view on the icon. pystray's xorg updates block until the icon thread ran them, so
        this runs off the Tk thread; the lock and reading ``self.view`` inside it keep the last one shown."""
        with self._icon_lock:
            v = self.view
            try:
                self.icon.icon = self._images[v.icon]
                self.icon.title = v.title
                if self.icon.HAS_MENU:
                    self.icon.update_menu()
            except Exception:
                log.warning("icon update failed", exc_info=True)

    def _job_changed(self, job: Any) -> None:
        self.window.set_job(job)
        self._publish_menu_only()

    def _publish_menu_only(self) -> None:
        self.items = self._menu.build(self.view, last_output=str(self.jobs.last_output or "") or None,
                                      jobs_pending=self.jobs.pending(), dictating=self.dictation.active)
        self.window.set_view(self.view, self.items)

    # --- actions (Tk thread) ----------------------------------------------------------------------------------
    def add_files(self, paths: list[str]) -> None:
        self.jobs.add(paths)
        self.watcher.poke()

    def action(self, key: str) -> None:
        m = self._menu
        if key == m.TRANSCRIBE:
            self.window.choose_files()
        elif key == m.DICTATE:
            if self.dictation.active:
                self.dictation.stop()
            else:
                self.dictation.start()
                self.window.set_live("", "")
                self._publish(self._info)
        elif key == m.DROPWIN:
            self.window.show()
        elif key == m.UNLOAD:
            threading.Thread(target=self._unload, daemon=True).start()
        elif key == m.OPEN_LAST:
            self._open_last()
        elif key == m.QUIT:
            self.quit()

    def _daemon_path(self) -> str:
        """The socket a dictation connects to, starting the daemon first when allowed (like file jobs)."""
        try:
            self.client.health()
        except Exception:
            if self.settings.autostart:
                from tray.client import start_daemon

                start_daemon(self.client.path)
        return str(self.client.path)

    def _dictation_ended(self, error: str | None) -> None:
        if error:
            self.notify("hasr dictation stopped", error, error=True)
        self._publish(self._info)

    def _unload(self) -> None:
        try:
            self.client.unload()
        except Exception as e:
            self.notify("hasr could not unload the model", str(e), error=True)
        self.watcher.poke()

    def _open_last(self) -> None:
        path = self.jobs.last_output
        opener = shutil.which("xdg-open")
        if path is None or opener is None:
            self.notify("hasr", "no transcript yet" if path is None else f"xdg-open is missing; see {path}")
            return
        subprocess.Popen([opener, str(path)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)

    def quit(self) -> None:
        log.info("quitting")
        self.dictation.stop()
        self.watcher.stop()
        self.jobs.close()
        threading.Thread(target=self.icon.stop, daemon=True).start()
        self.root.after(100, self.root.destroy)

    def run(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.ui(self.quit))
        threading.Thread(target=self._run_icon, name="hasr-icon", daemon=True).start()
        self.watcher.start()
        self.root.after(40, self._pump)
        if self.backend == "xorg":
            self.root.after(3000, self._redock)
        self.root.mainloop()


def first_instance(wait: float = 5.0) -> Any:
    """The single-instance guard (tray.single.Instance) when this is the display's only tray; None after the
    running tray was asked to show its drop window (this one then exits 0)."""
    import time

    from tray import single

    deadline = time.monotonic() + wait
    while True:
        instance = single.claim()
        if instance is not None:
            return instance
        if single.show_running(timeout=1.0):
            pid = single.running_pid()
            print(f"hasr-tray is already running{f' (pid {pid})' if pid else ''}: showed its drop window",
                  file=sys.stderr)
            return None
        if time.monotonic() > deadline:  # it holds the lock but does not answer: hung, or quitting slowly
            raise RuntimeError(f"another hasr-tray (pid {single.running_pid()}) holds the lock but does not answer")


def display_error(e: BaseException) -> str | None:
    """One line for a display that cannot be opened (Tk's TclError, python-xlib's DisplayError, raised while
    the icon or the window connects); None for any other error, which keeps its traceback."""
    try:
        import tkinter

        tk_error: tuple[type[BaseException], ...] = (tkinter.TclError,)
    except ImportError:
        tk_error = ()
    try:
        from Xlib.error import DisplayError

        x_error: tuple[type[BaseException], ...] = (DisplayError,)
    except ImportError:
        x_error = ()
    shown = os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY") or "?"
    if isinstance(e, x_error) or (isinstance(e, tk_error) and "display" in str(e)):
        return f"cannot open the display {shown}: {e}"
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="hasr-tray", description="hasr tray icon and drop window")
    p.add_argument("--socket", help="daemon socket (default: HASR_SOCKET or $XDG_RUNTIME_DIR/hasr/hasrd.sock)")
    p.add_argument("--format", choices=("txt", "srt", "vtt", "json"), help="transcript format (HASR_TRAY_FORMAT)")
    p.add_argument("--language", help="language passed to the daemon (HASR_LANGUAGE)")
    p.add_argument("--show-window", action="store_true", help="open the drop window at start")
    p.add_argument("--backend", help="pystray backend (PYSTRAY_BACKEND): appindicator, gtk, xorg")
    p.add_argument("-v", "--verbose", action="store_true", help="log state changes to stderr")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="hasr-tray %(levelname)s %(name)s: %(message)s")
    logging.getLogger("pystray").setLevel(logging.CRITICAL)  # "Failed to dock icon" tracebacks while no tray
    lacking = traydeps.missing()
    if lacking:
        print(f"hasr-tray: {traydeps.message(lacking)}", file=sys.stderr)
        return 2
    if not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
        print("hasr-tray: no display (DISPLAY is not set)", file=sys.stderr)
        return 2
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1 PID` prints every thread's stack
    try:
        instance = first_instance()
    except Exception as e:  # an unsafe runtime directory, say: run, but say why a second start may double
        print(f"hasr-tray: cannot make sure only one tray runs: {getattr(e, 'message', None) or e}",
              file=sys.stderr)
        instance = None
    else:
        if instance is None:
            return 0
    os.environ["PYSTRAY_BACKEND"] = args.backend or traydeps.choose_backend()
    from tray import settings as tray_settings

    s = tray_settings.load(socket=args.socket, format=args.format, language=args.language)
    log.info("backend %s, socket %s, format %s", os.environ["PYSTRAY_BACKEND"], s.socket, s.format)
    try:
        app = App(s, show_window=args.show_window)
    except Exception as e:
        reason = display_error(e)
        if reason is None:
            raise
        print(f"hasr-tray: {reason}", file=sys.stderr)
        if instance is not None:
            instance.close()
        return 2
    if instance is not None:
        instance.serve(lambda: app.ui(app.window.show))
    try:
        app.run()
    finally:
        if instance is not None:
            instance.close()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # the xorg icon thread may never return (pystray #143); do not wait for it


if __name__ == "__main__":
    raise SystemExit(main())

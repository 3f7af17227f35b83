"""Headless desktop pieces for the tray tests: Xvfb, trayer, a private D-Bus session with a mock
notification daemon, window lookup and pixel reading, and an XDND drag source (see notes/tray-testing.md).

Every process is started in its own session and ended by its own process group id.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from PIL import Image, ImageGrab
from Xlib import X, Xatom, display as xdisplay, error as xerror
from Xlib.protocol import event as xevent

from tray.icons import COLORS

X_TOOLS = ("Xvfb", "trayer")
DBUS_TOOLS = ("dbus-daemon", "gdbus")


def missing(tools: tuple[str, ...]) -> list[str]:
    return [t for t in tools if shutil.which(t) is None]


def dbusmock_python() -> str | None:
    """An interpreter that imports dbusmock (Debian's python3-dbusmock, or this one)."""
    for exe in ("/usr/bin/python3", shutil.which("python3") or ""):
        if exe and subprocess.run([exe, "-c", "import dbusmock"], capture_output=True).returncode == 0:
            return exe
    return None


def wait_for(pred: Callable[[], object], timeout: float, interval: float = 0.05, what: str = "") -> object:
    end = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > end:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what or pred}")
        time.sleep(interval)


class Proc:
    """A background process in its own session; ``stop()`` ends its process group."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None, log: Path | None = None,
                 capture: bool = False, cwd: str | None = None) -> None:
        self.log = log
        with open(log, "ab") if log else contextlib.nullcontext() as out:  # the child keeps its own copy
            self.p = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                                      stdout=subprocess.PIPE if capture else (out or subprocess.DEVNULL),
                                      stderr=out or subprocess.DEVNULL, start_new_session=True)

    @property
    def pid(self) -> int:
        return self.p.pid

    def alive(self) -> bool:
        return self.p.poll() is None

    def stop(self, sig: int = signal.SIGTERM, grace: float = 3.0) -> None:
        if self.p.poll() is None:
            try:
                os.killpg(self.p.pid, sig)
                self.p.wait(grace)
            except subprocess.TimeoutExpired:
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait(5)
            except ProcessLookupError:
                pass
        # leftovers of its group (children that outlived it)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.p.pid, signal.SIGKILL)

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log and self.log.exists() else ""


def start_xvfb(size: str = "640x480x24", log: Path | None = None) -> tuple[Proc, str]:
    """Xvfb on a random free high display number, accepting connections; (process, ":N")."""
    for _ in range(20):
        n = random.randint(200, 9000)
        if os.path.exists(f"/tmp/.X{n}-lock") or os.path.exists(f"/tmp/.X11-unix/X{n}"):
            continue
        proc = Proc(["Xvfb", f":{n}", "-screen", "0", size, "-nolisten", "tcp", "-noreset"], log=log)
        name = f":{n}"
        end = time.monotonic() + 10
        while time.monotonic() < end and proc.alive():
            try:
                xdisplay.Display(name).close()
                return proc, name
            except Exception:
                time.sleep(0.05)
        proc.stop()
    raise RuntimeError("no free X display found for Xvfb")


def tray_owner(d: xdisplay.Display) -> int:
    atom = d.intern_atom(f"_NET_SYSTEM_TRAY_S{d.get_default_screen()}")
    owner = d.get_selection_owner(atom)
    return 0 if owner in (X.NONE, None) else owner.id


def start_trayer(name: str, env: dict[str, str], log: Path | None = None) -> Proc:
    """trayer as the tray host (top left, 32 px high); returns once it owns the tray selection and is mapped."""
    proc = Proc(["trayer", "--edge", "top", "--align", "left", "--widthtype", "request", "--height", "32",
                 "--transparent", "false", "--SetDockType", "false", "--SetPartialStrut", "false"],
                env={**env, "DISPLAY": name, "NO_AT_BRIDGE": "1"}, log=log)
    d = xdisplay.Display(name)
    try:
        wait_for(lambda: tray_owner(d) or not proc.alive(), 15, what="trayer to own the tray selection")
        if not proc.alive():
            raise RuntimeError("trayer exited: " + proc.text()[-500:])
        time.sleep(0.5)  # the panel maps after taking the selection
    finally:
        d.close()
    return proc


def start_dbus(env: dict[str, str]) -> tuple[Proc, str]:
    """A private session bus: (process, address)."""
    proc = Proc(["dbus-daemon", "--session", "--nofork", "--nopidfile", "--print-address=1"], env=env,
                capture=True)
    assert proc.p.stdout is not None
    address = proc.p.stdout.readline().decode().strip()
    if not address:
        proc.stop()
        raise RuntimeError("dbus-daemon printed no address")
    return proc, address


def start_notification_mock(env: dict[str, str], log_file: Path, out: Path | None = None) -> Proc:
    """python-dbusmock's notification_daemon template on the bus in ``env``; calls are logged to log_file."""
    py = dbusmock_python()
    if py is None:
        raise RuntimeError("python3-dbusmock is not installed")
    proc = Proc([py, "-m", "dbusmock", "--template", "notification_daemon", "-l", str(log_file)], env=env, log=out)
    probe = ["gdbus", "call", "--session", "--dest", "org.freedesktop.DBus", "--object-path", "/org/freedesktop/DBus",
             "--method", "org.freedesktop.DBus.NameHasOwner", "org.freedesktop.Notifications"]
    wait_for(lambda: "true" in subprocess.run(probe, env=env, capture_output=True, text=True).stdout
             or not proc.alive(), 20, 0.1, "the mock notification daemon")
    if not proc.alive():
        raise RuntimeError("dbusmock exited: " + proc.text()[-500:])
    return proc


# --- windows and pixels -----------------------------------------------------------------------------------------
def walk(win: object) -> Iterator[object]:
    try:
        children = win.query_tree().children  # type: ignore[attr-defined]
    except xerror.XError:
        return
    for child in children:
        yield child
        yield from walk(child)


def find_window(d: xdisplay.Display, pred: Callable[[object], bool]) -> object | None:
    for w in walk(d.screen().root):
        try:
            if pred(w):
                return w
        except xerror.XError:
            continue
    return None


def wm_class(w: object) -> tuple[str, str] | None:
    return w.get_wm_class()  # type: ignore[attr-defined,no-any-return]


def wm_name(d: xdisplay.Display, w: object) -> str:
    prop = w.get_full_property(d.intern_atom("_NET_WM_NAME"), d.intern_atom("UTF8_STRING"))  # type: ignore
    if prop is not None:
        return bytes(prop.value).decode("utf-8", "replace")
    raw = w.get_full_property(Xatom.WM_NAME, X.AnyPropertyType)  # type: ignore[attr-defined]
    if raw is None:
        return ""
    value = raw.value
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def has_property(d: xdisplay.Display, w: object, name: str) -> bool:
    return w.get_full_property(d.intern_atom(name), X.AnyPropertyType) is not None  # type: ignore


def root_box(d: xdisplay.Display, w: object) -> tuple[int, int, int, int]:
    """(x, y, width, height) of ``w`` in root coordinates."""
    g = w.get_geometry()  # type: ignore[attr-defined]
    t = d.screen().root.translate_coords(w, 0, 0)
    return t.x, t.y, g.width, g.height


def grab(name: str, box: tuple[int, int, int, int] | None = None) -> Image.Image:
    img = ImageGrab.grab(xdisplay=name)
    if box is None:
        return img
    x, y, w, h = box
    return img.crop((x, y, x + w, y + h))


def classify(img: Image.Image) -> str:
    """The icon state whose colour covers most of ``img`` ("none" when no state colour is there)."""
    counts = {s: 0 for s in COLORS}
    for (r, g, b), n in _colors(img):
        for state in counts:
            cr, cg, cb = COLORS[state]
            if abs(r - cr) + abs(g - cg) + abs(b - cb) < 60:
                counts[state] += n
    best = max(counts, key=lambda s: counts[s])
    total = img.width * img.height
    return best if counts[best] > 0.08 * total else "none"


def _colors(img: Image.Image) -> list[tuple[tuple[int, int, int], int]]:
    rgb = img.convert("RGB")
    found = rgb.getcolors(rgb.width * rgb.height) or []
    return [(c, n) for n, c in found]  # type: ignore[misc]


# --- XDND drag source ---------------------------------------------------------------------------------------------
class XdndSource:
    """A drag source speaking XDND (Enter / Position / Drop, serving text/uri-list) straight to a target window.

    No pointer is involved: the messages name the root coordinates to drop at, as a real source would after
    the user moved the mouse there.
    """

    def __init__(self, name: str) -> None:
        self.d = xdisplay.Display(name)
        self.root = self.d.screen().root
        self.win = self.root.create_window(0, 0, 1, 1, 0, X.CopyFromParent)
        a = self.d.intern_atom
        self.atoms = {n: a(n) for n in ("XdndAware", "XdndEnter", "XdndPosition", "XdndStatus", "XdndDrop",
                                        "XdndFinished", "XdndLeave", "XdndSelection", "XdndActionCopy",
                                        "XdndTypeList", "text/uri-list")}

    def close(self) -> None:
        self.d.close()

    def _send(self, target: object, kind: str, data: list[int]) -> None:
        win = self.d.create_resource_object("window", target.id)  # type: ignore[attr-defined]  # on our connection
        ev = xevent.ClientMessage(window=win, client_type=self.atoms[kind], data=(32, (data + [0] * 5)[:5]))
        win.send_event(ev, event_mask=X.NoEventMask, propagate=False)
        self.d.flush()

    def drop(self, target: object, x: int, y: int, uris: list[str], timeout: float = 10.0) -> dict[str, int]:
        """Drop ``uris`` at root (x, y) on ``target`` (the window carrying XdndAware); returns what the target
        answered: {"status": accept flag or -1, "finished": 1 when XdndFinished came, "requests": n}."""
        A = self.atoms
        payload = ("\r\n".join(uris) + "\r\n").encode("utf-8")
        aware = self.d.create_resource_object("window", target.id).get_full_property(  # type: ignore
            A["XdndAware"], X.AnyPropertyType)
        version = min(5, int(aware.value[0])) if aware is not None else 5
        self.win.set_selection_owner(A["XdndSelection"], X.CurrentTime)
        src = self.win.id
        self._send(target, "XdndEnter", [src, version << 24, A["text/uri-list"], 0, 0])
        self._send(target, "XdndPosition", [src, 0, (x << 16) | y, X.CurrentTime, A["XdndActionCopy"]])
        seen = {"status": -1, "finished": 0, "requests": 0}
        dropped = False
        end = time.monotonic() + timeout
        while time.monotonic() < end and not seen["finished"]:
            if self.d.pending_events() == 0:
                if seen["status"] >= 0 and not dropped:
                    self._send(target, "XdndDrop", [src, 0, X.CurrentTime])
                    dropped = True
                time.sleep(0.01)
                continue
            ev = self.d.next_event()
            if ev.type == X.SelectionRequest:
                self._serve(ev, payload)
                seen["requests"] += 1
            elif ev.type == X.ClientMessage and ev.client_type == A["XdndStatus"]:
                seen["status"] = ev.data[1][1] & 1
            elif ev.type == X.ClientMessage and ev.client_type == A["XdndFinished"]:
                seen["finished"] = 1
        if not dropped:
            self._send(target, "XdndLeave", [src, 0])
        return seen

    def _serve(self, ev: object, payload: bytes) -> None:
        """Answer a SelectionRequest for XdndSelection with the uri list (or refuse other targets)."""
        req = ev.requestor  # type: ignore[attr-defined]
        prop = ev.property or ev.target  # type: ignore[attr-defined]
        if ev.target in (self.atoms["text/uri-list"],):  # type: ignore[attr-defined]
            req.change_property(prop, ev.target, 8, payload)  # type: ignore[attr-defined]
        elif ev.target == self.d.intern_atom("TARGETS"):  # type: ignore[attr-defined]
            req.change_property(prop, Xatom.ATOM, 32, [self.atoms["text/uri-list"]])
        else:
            prop = X.NONE
        notify = xevent.SelectionNotify(time=ev.time, requestor=req, selection=ev.selection,  # type: ignore
                                        target=ev.target, property=prop)  # type: ignore[attr-defined]
        req.send_event(notify, event_mask=X.NoEventMask)
        self.d.flush()


def file_uri(path: Path) -> str:
    from urllib.parse import quote

    return "file://" + quote(str(path))

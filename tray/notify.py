"""Desktop notifications through org.freedesktop.Notifications on the session bus.

Uses jeepney (pure Python D-Bus, no compiled parts) and falls back to ``gdbus call`` (libglib2.0-bin, on
every GLib desktop) when jeepney is not importable. A missing bus or notification daemon is logged and
otherwise ignored: a notification never takes the tray down.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from typing import Any

log = logging.getLogger("hasr.tray.notify")

BUS_NAME = "org.freedesktop.Notifications"
OBJECT_PATH = "/org/freedesktop/Notifications"
APP_NAME = "hasr"
TIMEOUT_MS = 8000


def _with_jeepney(summary: str, body: str, icon: str, urgency: int, timeout_ms: int) -> int:
    from jeepney import DBusAddress, new_method_call
    from jeepney.io.blocking import open_dbus_connection

    addr = DBusAddress(OBJECT_PATH, bus_name=BUS_NAME, interface=BUS_NAME)
    hints: dict[str, Any] = {"urgency": ("y", urgency), "desktop-entry": ("s", "hasr-tray")}
    msg = new_method_call(addr, "Notify", "susssasa{sv}i",
                          (APP_NAME, 0, icon, summary, body, [], hints, timeout_ms))
    with open_dbus_connection(bus="SESSION") as conn:
        reply = conn.send_and_get_reply(msg, timeout=5)
    if reply.header.message_type.name == "error":
        raise RuntimeError(f"{BUS_NAME} refused: {reply.body}")
    return int(reply.body[0])


def _gvariant_str(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _with_gdbus(summary: str, body: str, icon: str, urgency: int, timeout_ms: int) -> int:
    gdbus = shutil.which("gdbus")
    if not gdbus:
        raise RuntimeError("neither jeepney nor gdbus is available")
    argv = [gdbus, "call", "--session", "--dest", BUS_NAME, "--object-path", OBJECT_PATH,
            "--method", f"{BUS_NAME}.Notify", APP_NAME, "0", icon, _gvariant_str(summary), _gvariant_str(body),
            "[]", f"{{'urgency': <byte {urgency:d}>, 'desktop-entry': <'hasr-tray'>}}", str(timeout_ms)]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip() or f"gdbus exited {out.returncode}")
    digits = "".join(ch for ch in out.stdout if ch.isdigit())
    return int(digits or 0)


def send(summary: str, body: str = "", *, icon: str = "hasr", error: bool = False,
         timeout_ms: int = TIMEOUT_MS) -> int | None:
    """Show a notification; the server's id, or None when it could not be shown (logged)."""
    urgency = 2 if error else 1
    try:
        import jeepney  # noqa: F401
        sender = _with_jeepney
    except ImportError:
        sender = _with_gdbus
    try:
        return sender(summary, body, icon, urgency, timeout_ms)
    except Exception as e:  # a tray without notifications still works
        log.warning("notification not shown (%s): %s: %s", e, summary, body)
        return None

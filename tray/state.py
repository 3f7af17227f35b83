"""Pure mapping from what the tray knows about the daemon to an icon, a title and a status line.

Input is either a snapshot of ``GET /api/events`` (docs/API.md) or a ``Link`` saying why there is none.
Nothing here touches a socket or a display, so it is unit-tested with plain dicts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

HEALTHS = ("idle", "loading", "ok", "busy", "error")

# Why the tray has no snapshot: the daemon is not running (nothing listens on the socket), asleep (systemd
# owns the socket and would start it on the next connection), or it answered something we cannot read.
DOWN, ASLEEP, BROKEN = "down", "asleep", "broken"


@dataclass(frozen=True)
class Link:
    """The daemon cannot be followed right now: ``kind`` is DOWN, ASLEEP or BROKEN; ``detail`` says why."""

    kind: str
    detail: str = ""
    hint: str = ""  # DOWN: why and how to bring it back, when systemd knows ("hasrd.socket stopped: systemctl ...")


@dataclass(frozen=True)
class View:
    """What the tray shows: ``icon`` (a tray.icons state), ``title`` (tooltip) and ``line`` (menu status)."""

    icon: str
    title: str
    line: str
    health: str  # idle | loading | ok | busy | error | offline
    model_loaded: bool = False


def _num(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def error_text(err: Any) -> str:
    """A human sentence from an error given as a string or ``{"code", "message"}``."""
    if isinstance(err, Mapping):
        return str(err.get("message") or err.get("code") or "unknown error")
    return str(err or "")


def job_text(job: Mapping[str, Any]) -> str:
    """``transcribing 会议.wav 40%`` (the percentage only when progress is known)."""
    name = str(job.get("name") or "audio")
    if job.get("live"):
        return f"live session ({_num(job.get('total_s')) or 0.0:.0f} s of audio)"
    progress = _num(job.get("progress"))
    if progress is None:
        done, total = _num(job.get("done_s")), _num(job.get("total_s"))
        if done is not None and total:
            progress = done / total
    if progress is None:
        return f"transcribing {name}"
    return f"transcribing {name} {int(max(0.0, min(1.0, progress)) * 100)}%"


def describe(snap: Mapping[str, Any]) -> str:
    """The state in words, built from the snapshot's fields (falling back to its ``status_text``)."""
    health = str(snap.get("health") or "")
    queue = int(_num(snap.get("queue")) or 0)
    waiting = f" (+{queue} queued)" if queue > 0 else ""
    if health == "busy":
        job = snap.get("job")
        if isinstance(job, Mapping):
            return job_text(job) + waiting
        return (str(snap.get("status_text") or "transcribing")) + waiting
    if snap.get("state") == "backoff":
        msg = error_text(snap.get("error")) or "no reason given"
        return f"loading failed: {msg} (the next request retries)" + waiting
    if health == "loading":
        elapsed = _num(snap.get("elapsed_s"))
        if elapsed is not None:
            return f"loading models {elapsed:.0f} s" + waiting
        return str(snap.get("status_text") or "loading models") + waiting
    if health == "ok":
        return "ready (model loaded)" + waiting
    if health == "idle":
        return "idle (model not loaded)" + waiting
    if health == "error" and snap.get("state") == "fatal":
        msg = error_text(snap.get("error")) or "no reason given"
        return f"loading failed repeatedly: {msg} (`hasrctl load` retries)"
    if health == "error":
        msg = error_text(snap.get("error"))
        return f"error: {msg}" if msg else "error"
    return str(snap.get("status_text") or health or "unknown")


def view(info: Mapping[str, Any] | Link) -> View:
    """The icon, title and status line for a snapshot, or for a Link when there is none."""
    if isinstance(info, Link):
        if info.kind == ASLEEP:
            return View("idle", "hasr: idle (daemon asleep, starts on demand)",
                        "Idle (daemon asleep, starts on demand)", "idle")
        if info.kind == BROKEN:
            detail = info.detail or "unexpected answer"
            return View("error", f"hasr: daemon error: {detail}", f"Daemon error: {detail}", "error")
        if info.hint:
            why = info.hint.split(":", 1)[0]
            return View("offline", f"hasr: daemon not running ({why})", f"Daemon not running ({info.hint})",
                        "offline")
        return View("offline", "hasr: daemon not running", "Daemon not running", "offline")
    health = str(info.get("health") or "")
    if health not in HEALTHS:
        health = "error" if info.get("error") else "idle"
    if info.get("state") == "backoff":  # the daemon calls it idle (the next request loads); the user sees why
        health = "error"
    words = describe({**info, "health": health})
    loaded = health in ("ok", "busy") or str(info.get("state") or "") in ("ready", "starting", "stopping")
    return View(health, f"hasr: {words}", words[:1].upper() + words[1:], health, loaded)


def listening(v: View) -> View:
    """``v`` while a dictation runs: the listening icon, the daemon's state still in the words."""
    return View("listening", f"hasr: listening (dictating); {v.title.removeprefix('hasr: ')}",
                f"Listening (dictating) — {v.line[:1].lower() + v.line[1:]}", v.health, v.model_loaded)


def from_health(h: Mapping[str, Any]) -> dict[str, Any]:
    """A snapshot-shaped dict from ``GET /health`` (used while the tray polls instead of streaming)."""
    status = str(h.get("status") or "idle")
    health = "busy" if h.get("busy") and status == "ok" else status
    if h.get("model_loaded"):
        state = "ready"
    elif h.get("loading"):
        state = "starting"
    elif status == "error":
        state = "fatal"
    elif h.get("error") or status == "loading":
        # an error while idle is the last load's (hasrd reports one only in backoff and fatal); loading without
        # a load in progress is how older daemons said it: the next request retries
        state = "backoff"
    else:
        state = "stopped"
    try:
        queue = int(h.get("queue") or 0)
    except (TypeError, ValueError):
        queue = 0
    return {"state": state, "health": health, "queue": queue, "in_flight": 1 if h.get("busy") else 0,
            "error": h.get("error"), "job": None, "status_text": status}


QUIET_STATES = ("stopped", "fatal", "backoff")


def is_quiet(snap: Mapping[str, Any]) -> bool:
    """True when nothing happens by itself: no worker loading or loaded, nothing queued or running.

    The daemon can idle-exit then (its idle clock counts stopped and fatal workers), so the tray stops
    streaming. ``backoff`` waits for the next request, so it is quiet too.
    """
    if int(_num(snap.get("queue")) or 0) > 0 or int(_num(snap.get("in_flight")) or 0) > 0:
        return False
    state = str(snap.get("state") or "")
    if state:
        return state in QUIET_STATES
    return str(snap.get("health") or "") in ("idle", "error")

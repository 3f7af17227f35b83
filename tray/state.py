"""Pure mapping from what the tray knows about the daemon to an icon, a title and a status line.

Input is either a snapshot of ``GET /api/events`` (docs/API.md; the daemon's :class:`~hasrd.status.PoolStatus`) or a
``Link`` saying why there is none. Nothing here touches a socket or a display, so it is unit-tested with plain values.
"""

from __future__ import annotations

from dataclasses import dataclass

from hasrd.status import Health, PoolStatus, State

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


def describe(snap: PoolStatus, health: str) -> str:
    """The state in words, built from the snapshot's fields (falling back to its ``status_text``)."""
    waiting = f" (+{snap.queue} queued)" if snap.queue > 0 else ""
    if health == "busy":
        return (snap.job.text() if snap.job else snap.status_text or "transcribing") + waiting
    if snap.state == State.BACKOFF:
        return f"loading failed: {snap.error or 'no reason given'} (the next request retries)" + waiting
    if health == "loading":
        return (f"loading models {snap.elapsed_s:.0f} s" if snap.elapsed_s else snap.status_text or "loading models"
                ) + waiting
    if health == "ok":
        return "ready (model loaded)" + waiting
    if health == "idle":
        return "idle (model not loaded)" + waiting
    if snap.state == State.FATAL:
        return f"loading failed repeatedly: {snap.error or 'no reason given'} (`hasrctl load` retries)"
    return f"error: {snap.error}" if snap.error else "error"


def view(info: PoolStatus | Link) -> View:
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
    health = info.health if info.health in HEALTHS else "error" if info.error else "idle"
    if info.state == State.BACKOFF:  # the daemon calls it idle (the next request loads); the user sees why
        health = "error"
    words = describe(info, health)
    loaded = health in ("ok", "busy") or info.state in (State.READY, State.STARTING, State.STOPPING)
    return View(health, f"hasr: {words}", words[:1].upper() + words[1:], health, loaded)


def listening(v: View) -> View:
    """``v`` while a dictation runs: the listening icon, the daemon's state still in the words."""
    return View("listening", f"hasr: listening (dictating); {v.title.removeprefix('hasr: ')}",
                f"Listening (dictating) — {v.line[:1].lower() + v.line[1:]}", v.health, v.model_loaded)


def from_health(h: Health) -> PoolStatus:
    """A snapshot from ``GET /health`` (used while the tray polls instead of streaming)."""
    health = "busy" if h.busy and h.status == "ok" else h.status
    if h.model_loaded:
        state = State.READY
    elif h.loading:
        state = State.STARTING
    elif h.status == "error":
        state = State.FATAL
    elif h.error or h.status == "loading":
        # an error while idle is the last load's (hasrd reports one only in backoff and fatal); loading without
        # a load in progress is how older daemons said it: the next request retries
        state = State.BACKOFF
    else:
        state = State.STOPPED
    return PoolStatus(state=state, health=health, queue=h.queue, in_flight=1 if h.busy else 0, error=h.error,
                      status_text=h.status)


def is_quiet(snap: PoolStatus) -> bool:
    """True when nothing happens by itself: no worker loading or loaded, nothing queued or running.

    The daemon can idle-exit then (its idle clock counts stopped and fatal workers), so the tray stops
    streaming. ``backoff`` waits for the next request, so it is quiet too.
    """
    return snap.queue <= 0 and snap.in_flight <= 0 and snap.state in (State.STOPPED, State.FATAL, State.BACKOFF)

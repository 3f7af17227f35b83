"""``hasrctl status``: the daemon's state in a few lines (or /api/ps as JSON), and ``--watch``.

Its own light module (json, time, click, the client): ``status`` is what scripts and the tray's users type
most, and must answer within 0.1 s (issue 32 #10), so it imports nothing of transcription.
"""

from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING, Any

import click

from hasrctl.client import EXIT_FAILED, EXIT_OK, EXIT_UNREACHABLE, Client, Unreachable, pool_status
from hasrctl.common import Daemon, not_running, say, socket_option

if TYPE_CHECKING:
    from hasrd.status import PoolStatus


def duration_text(seconds: float) -> str:
    s = max(0, int(seconds))
    if s >= 3600:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 60} min {s % 60} s" if s >= 60 else f"{s} s"


def _model(value: Any) -> str:
    """One model of an identity as ``name@revision (path)``: revisions shortened, repeated parts left out."""
    if not isinstance(value, dict):
        return str(value)
    path = str(value.get("path") or "")
    name = str(value.get("name") or (os.path.basename(path.rstrip("/")) if path else "?"))
    rev = str(value.get("revision") or "")
    text = name + (f"@{rev[:12]}" if rev and rev[:8] not in name else "")
    if path and not path.startswith("(") and path not in (name, rev):
        text += f" ({path})"
    return text


def _describe(ps: PoolStatus, socket: str) -> list[tuple[str, str]]:
    rows = [("state", ps.state.value + (f" (worker pid {ps.pid})" if ps.pid else ""))]
    if ps.phase:
        rows.append(("phase", ps.phase))
    ident = ps.identity
    selected = str(ident.get("engine") or "")
    if selected:
        parts = [selected]
        if device := ident.get("device"):
            compute = ident.get("compute_type")
            parts.append(f"on {device}" + (f" ({compute})" if compute else ""))
        if ps.engine and ps.engine != selected:
            parts.append(f"(HASR_ENGINE={ps.engine})")
        rows.append(("engine", " ".join(parts)))
    elif ps.engine:
        chosen = "; chosen when the models load" if ps.engine == "auto" else "; models not loaded"
        rows.append(("engine", f"{ps.engine}{chosen}"))
    models = ident.get("models")
    if isinstance(models, dict) and models:
        rows.append(("models", ", ".join(f"{role} {_model(m)}" for role, m in models.items())))
    if why := ident.get("auto_reason"):
        rows.append(("why", str(why)))
    if ps.load_s is not None:
        rows.append(("loaded in", f"{ps.load_s:.1f} s"))
    if ps.vram_mb is not None:
        rows.append(("vram", f"{ps.vram_mb / 1024:.1f} GiB"))
    if ps.workers:
        each = ", ".join(f"{w.model} (pid {w.pid or '-'}, {'busy' if w.busy else w.state.value})" for w in ps.workers)
        rows.append(("workers", f"{len(ps.workers)} of {ps.max_workers}: {each}"))
    rows.append(("queue", f"{ps.queue} waiting, {ps.in_flight} running"))
    if ps.expires_in_s is not None:
        rows.append(("unload in", duration_text(ps.expires_in_s)))
    if ps.error:
        rows.append(("error", ps.error))
    rows.append(("socket", socket))
    return rows


@click.command()
@click.option("--json", "as_json", is_flag=True, envvar="HASR_STATUS_JSON", show_envvar=True,
              help="Print /api/ps as JSON (plus the socket).")
@click.option("--watch", is_flag=True, envvar="HASR_STATUS_WATCH", show_envvar=True,
              help="Follow state changes (one line each; with --json the raw events) until Ctrl-C.")
@socket_option
def status(as_json: bool, watch: bool, daemon: Daemon) -> int:
    """Show the daemon's state: worker, engine and models, load time, VRAM, the workers, queue, time until unload.

    Does not start a daemon: exit 3 when none runs.
    """
    try:
        client = daemon.client(autostart=False)
    except Unreachable as e:
        say(f"hasrd is not running: {not_running(e)}")
        return EXIT_UNREACHABLE
    if watch:
        return _watch(client, as_json)
    ps = client.ps()
    if as_json:
        import msgspec  # loaded with the answer already

        click.echo(json.dumps({**msgspec.to_builtins(ps), "socket": client.path}, ensure_ascii=False))
    else:
        for key, value in _describe(ps, client.path):
            click.echo(f"{key:<10} {value}")
    return EXIT_FAILED if ps.state.value == "fatal" else EXIT_OK


def _watch(client: Client, as_json: bool) -> int:
    try:
        for ev in client.request("GET", "/api/events", timeout=None).ndjson():
            if as_json:
                click.echo(json.dumps(ev, ensure_ascii=False))
                continue
            ps = pool_status(ev)
            click.echo(f"{time.strftime('%H:%M:%S')}  {ps.health:<8} {ps.status_text or ps.state.value}  "
                       f"(queue {ps.queue}, running {ps.in_flight})")
    except KeyboardInterrupt:
        return EXIT_OK
    say("hasrd closed the event stream (it exited)")
    return EXIT_OK

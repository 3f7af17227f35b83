"""The pool's commands: ``hasrctl ps`` (the workers, as Ollama's ``ps``) and ``hasrctl models`` (what a request
may name)."""

from __future__ import annotations

import json
from typing import Any

import click

from hasrctl.client import EXIT_OK, EXIT_UNREACHABLE, Unreachable
from hasrctl.common import Daemon, say, socket_option


def _until(w: dict[str, Any]) -> str:
    if w.get("busy"):
        return "busy"
    left = w.get("expires_in_s")
    if left is None:
        return "forever" if w.get("state") == "ready" else "-"
    s = int(float(left))
    if s >= 3600:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 60} min {s % 60} s" if s >= 60 else f"{s} s"


def _size(w: dict[str, Any]) -> str:
    mb = w.get("vram_mb") if w.get("device") == "cuda" else w.get("rss_mb")
    if mb is None:
        return "-"
    return f"{float(mb) / 1024:.1f} GB" if float(mb) >= 1024 else f"{int(mb)} MB"


def _processor(w: dict[str, Any]) -> str:
    if w.get("device") == "cuda":
        return f"GPU {str(w.get('gpu_uuid') or '')[:12]}".rstrip()
    return "CPU"


def _doing(w: dict[str, Any]) -> str:
    if w.get("state") != "ready":
        return str(w.get("state"))
    return str(w.get("status_text") or "ready")


def table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip() for r in rows]


@click.command()
@click.option("--json", "as_json", is_flag=True, envvar="HASR_PS_JSON", show_envvar=True,
              help="Print the workers as JSON (/api/ps's \"workers\").")
@socket_option
def ps(as_json: bool, daemon: Daemon) -> int:
    """List the running workers: model, process, where it runs, its memory, what it does, until when it stays.

    \b
    NAME     PID    PROCESSOR  SIZE    STATE                     UNTIL
    base     4121   CPU        512 MB  transcribing talk.wav 40%  busy
    base     4388   CPU        498 MB  ready                     14 min 59 s

    Does not start a daemon: exit 3 when none runs.
    """
    try:
        client = daemon.client(autostart=False)
    except Unreachable as e:
        say(f"hasrd is not running: {e.message}")
        return EXIT_UNREACHABLE
    snap = client.get("/api/ps", timeout=10.0)
    workers = snap.get("workers") or []
    if as_json:
        click.echo(json.dumps(workers, ensure_ascii=False))
        return EXIT_OK
    if not workers:
        click.echo(f"no workers: nothing is loaded (up to {snap.get('max_workers')} may run; the next request "
                   f"starts one)")
        return EXIT_OK
    rows = [["NAME", "PID", "PROCESSOR", "SIZE", "STATE", "UNTIL"]]
    rows += [[str(w.get("model")), str(w.get("pid") or "-"), _processor(w), _size(w), _doing(w), _until(w)]
             for w in workers]
    for line in table(rows):
        click.echo(line)
    if snap.get("queue"):
        click.echo(f"{snap['queue']} request(s) waiting for a worker")
    return EXIT_OK


@click.command()
@click.option("--json", "as_json", is_flag=True, envvar="HASR_MODELS_JSON", show_envvar=True,
              help="Print /v1/models as JSON.")
@socket_option
def models(as_json: bool, daemon: Daemon) -> int:
    """List the models a request may name (--model, the OpenAI `model` field), with their size and place.

    The default's names (hasr and the OpenAI ids) run the configured engine; `base` is the embedded whisper
    base; others are faster-whisper models under $XDG_DATA_HOME/hasr/models/ or in the Hugging Face cache.
    """
    try:
        client = daemon.client(autostart=False)
    except Unreachable as e:
        say(f"hasrd is not running: {e.message}")
        return EXIT_UNREACHABLE
    data = client.get("/v1/models", timeout=30.0).get("data") or []
    if as_json:
        click.echo(json.dumps(data, ensure_ascii=False))
        return EXIT_OK
    rows = [["NAME", "KIND", "SIZE", "WHERE"]]
    for m in data:
        size = m.get("size_mb")
        rows.append([str(m.get("id")), str(m.get("kind") or ""), "-" if size is None else f"{int(size)} MB",
                     str(m.get("path") or "-")])
    for line in table(rows):
        click.echo(line)
    return EXIT_OK

"""The pool's commands: ``hasrctl ps`` (the workers, as Ollama's ``ps``), ``hasrctl models`` (what a request
may name, and the speaker models), and the models' management: ``hasrctl pull`` (a download with progress,
/api/pull; or a model directory's import, hasrctl/modelimport.py, or a speaker model file's,
hasrctl/speakerimport.py) and ``hasrctl rm`` (/api/delete)."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import click
import msgspec

from hasrctl import terminal
from hasrctl.client import EXIT_OK, CliError, Client, DaemonError, Unreachable, UsageError
from hasrctl.common import Daemon, daemon_options, not_running, say, socket_option
from hasrctl.status import duration_text
from hasrctl.pullview import PullEvent, PullView
from hasrctl.transcribe import ErrorBody

if TYPE_CHECKING:
    from hasrd.status import WorkerStatus


def running(daemon: Daemon) -> Client:
    """The running daemon's client: these commands never start one (exit 3 when none runs)."""
    try:
        return daemon.client(autostart=False)
    except Unreachable as e:
        raise Unreachable(f"hasrd is not running: {not_running(e)}") from None


def _until(w: WorkerStatus) -> str:
    if w.busy:
        return "busy"
    if w.expires_in_s is None:
        return "forever" if w.state.value == "ready" else "-"
    return duration_text(w.expires_in_s)


def _size(w: WorkerStatus) -> str:
    mb = w.vram_mb if w.device == "cuda" else w.rss_mb
    if not isinstance(mb, int):  # not measured, or not this device's
        return "-"
    return f"{mb / 1024:.1f} GB" if mb >= 1024 else f"{mb} MB"


def _row(w: WorkerStatus) -> list[str]:
    processor = f"GPU {(w.gpu_uuid or '')[:12]}".rstrip() if w.device == "cuda" else "CPU"
    doing = (w.status_text or "ready") if w.state.value == "ready" else w.state.value
    return [w.model, str(w.pid or "-"), processor, _size(w), doing, _until(w)]


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
    snap = running(daemon).ps()
    if as_json:
        import msgspec  # loaded with the answer already

        click.echo(json.dumps(msgspec.to_builtins(snap.workers), ensure_ascii=False))
        return EXIT_OK
    if not snap.workers:
        click.echo(f"no workers: nothing is loaded (up to {snap.max_workers} may run; the next request starts one)")
        return EXIT_OK
    for line in table([["NAME", "PID", "PROCESSOR", "SIZE", "STATE", "UNTIL"]] + [_row(w) for w in snap.workers]):
        click.echo(line)
    if snap.queue:
        click.echo(f"{snap.queue} request(s) waiting for a worker")
    return EXIT_OK


@click.command()
@click.option("--json", "as_json", is_flag=True, envvar="HASR_MODELS_JSON", show_envvar=True,
              help="Print the models as JSON: /v1/models's, then the speaker models (kind \"speaker\").")
@socket_option
def models(as_json: bool, daemon: Daemon) -> int:
    """List the models a request may name (--model, the OpenAI `model` field), with their size and place, and
    the speaker models.

    The default's names (hasr and the OpenAI ids) run the configured engine; `base` is the embedded whisper
    base; others are faster-whisper models under $XDG_DATA_HOME/hasr/models/ or in the Hugging Face cache.
    Speaker models (kind `speaker`, under $XDG_DATA_HOME/hasr/speakers/) tell speakers apart when a request asks
    for them; they transcribe nothing, so /v1/models leaves them out.
    """
    from hasrd import speakermodels

    client = running(daemon)
    data = client.get("/v1/models", timeout=30.0).get("data") or []
    speakers = speakermodels.installed()
    default = speakermodels.resolve() if speakers else None
    data += [{"id": m.name, "object": "model", "kind": "speaker", "path": str(m.path), "size_mb": m.size_mb,
              "default": m.path == default} for m in speakers]
    if as_json:
        click.echo(json.dumps(data, ensure_ascii=False))
        return EXIT_OK
    rows = [["NAME", "KIND", "SIZE", "WHERE"]]
    for m in data:
        size = m.get("size_mb")
        if m.get("kind") == "embedded":
            # the daemon states the embedded base in decimal megabytes of model.bin alone (145), while every
            # model on disk is measured whole in MB of 2**20 bytes (141 for the same bytes in the HF cache): one unit
            from hasrd.models import embedded_mb

            size = embedded_mb()
        rows.append([str(m.get("id")), str(m.get("kind") or ""), "-" if size is None else f"{int(size)} MB",
                     str(m.get("path") or "-")])
    for line in table(rows):
        click.echo(line)
    return EXIT_OK


@click.command()
@click.argument("name", metavar="NAME|PATH")
@click.option("--name", "as_name", metavar="NAME", envvar="HASR_PULL_NAME", show_envvar=True,
              help="Import PATH under this name (default: the directory's name, or the .onnx file's); then "
                   "--model NAME uses it (a speaker model: speaker_model NAME).")
@daemon_options
def pull(name: str, as_name: str | None, daemon: Daemon) -> int:
    """Download a faster-whisper model into the Hugging Face cache, or import a model directory; then
    `--model NAME` uses it.

    \b
    NAME: a faster-whisper size or a Hugging Face repo id, downloaded by the daemon:
      hasrctl pull large-v3        # Systran/faster-whisper-large-v3
      hasrctl pull distil-large-v3
      hasrctl pull Systran/faster-whisper-small
    PATH: a CTranslate2 model directory (/..., ./..., ~/..., or a directory here), copied by hasrctl into
    $XDG_DATA_HOME/hasr/models/NAME; the way in without the hub (a copy from another machine):
      hasrctl pull /media/usb/faster-whisper-large-v3 --name large-v3
      hasrctl pull ./faster-whisper-small  # named faster-whisper-small
    Speaker models (who said what: docs/SPEAKERS.md), into $XDG_DATA_HOME/hasr/speakers/NAME.onnx:
      hasrctl pull wespeaker-resnet34      # WeSpeaker's ResNet34-LM (25 MB), checked against its sha256
      hasrctl pull ~/usb/model.onnx --name mine   # an ONNX speaker-embedding model, checked, then copied

    The daemon downloads only the files faster-whisper loads, checks each against the hub's sha256, and installs
    the model only once it is whole. An interrupted pull continues where it stopped when run again. HF_ENDPOINT
    (a mirror) and HF_TOKEN in the daemon's environment apply. Starts the daemon if needed.

    An import checks the directory first (model.bin whole, config.json, tokenizer.json, vocabulary.*), copies
    those files and gives the model its name only once the copy is whole. It needs no daemon: one running uses
    the model at its next request. An existing NAME is refused (choose another --name, or `hasrctl rm NAME`).
    """
    from hasrctl import modelimport, speakerimport

    if speakerimport.is_speaker_file(name):
        return _import_speaker(name, as_name)
    if modelimport.is_path(name):
        return _import(name, as_name)
    given = click.get_current_context().get_parameter_source("as_name") == click.core.ParameterSource.COMMANDLINE
    if as_name is not None and given:  # HASR_PULL_NAME in the environment is for imports; a download ignores it
        raise UsageError(f"--name is for importing a model directory (hasrctl pull PATH --name NAME); a download "
                         f"is named by what you pull: `hasrctl pull {name}`, then --model {name}")
    client = daemon.client()
    view = PullView(sys.stderr, terminal.is_tty(sys.stderr))
    view.begin(name)
    body = json.dumps({"model": name}).encode()
    try:
        resp = client.request("POST", "/api/pull", body, {"Content-Type": "application/json",
                                                           "Accept": "application/x-ndjson"}, timeout=None)
        for ev in (msgspec.convert(e, PullEvent) for e in resp.ndjson()):
            if ev.error is not None:
                err = ev.error if isinstance(ev.error, ErrorBody) else ErrorBody(message=ev.error)
                view.close()
                raise DaemonError(err.code or "pull_failed", str(err.message))
            if ev.status == "success" and ev.kind == "speaker":
                view.close()
                click.echo(f"pulled {ev.repo}'s speaker model ({ev.size_mb} MB; license: {ev.license}) into "
                           f"{ev.path}; requests for speakers use it as {ev.model}")
                return EXIT_OK
            if ev.status == "success":
                view.close()
                click.echo(f"pulled {ev.repo} ({ev.size_mb} MB) into {ev.path}; use it as --model {ev.model or name}")
                return EXIT_OK
            view.event(ev)
    except KeyboardInterrupt:
        view.close()
        say(f"interrupted: what arrived is kept; `hasrctl pull {name}` continues from there")
        return 130
    finally:
        view.clear_pending()  # an error answer before the stream: its line goes where ours was
    view.close()
    raise CliError(f"hasrd ended the pull of {name} without a result (did it exit?); `hasrctl pull {name}` again "
                   f"continues where it stopped")


def _import(path: str, name: str | None) -> int:
    """``hasrctl pull PATH``: the copy, with a pull's progress on stderr and the result on stdout."""
    from hasrctl import modelimport

    view = PullView(sys.stderr, terminal.is_tty(sys.stderr), verb="copying")
    try:
        src, dest, total = modelimport.import_dir(path, name, view)
    except KeyboardInterrupt:
        say(f"interrupted: nothing was installed (`hasrctl pull {path}` copies it again)")
        return 130
    click.echo(f"imported {src} ({total // 2**20} MB) into {dest}; use it as --model {dest.name} "
               f"(hasrctl transcribe --model {dest.name} FILE)")
    return EXIT_OK


def _import_speaker(path: str, name: str | None) -> int:
    """``hasrctl pull PATH.onnx``: a speaker model's check and copy, the progress on stderr, the result on stdout."""
    from hasrctl import speakerimport
    from hasrd import speakermodels

    view = PullView(sys.stderr, terminal.is_tty(sys.stderr), verb="copying")
    try:
        done = speakerimport.import_file(path, name, view)
    except KeyboardInterrupt:
        say(f"interrupted: nothing was installed (`hasrctl pull {path}` copies it again)")
        return 130
    model = done.dest.name[:-len(speakermodels.SUFFIX)]
    default = speakermodels.resolve()
    use = ("requests for speakers use it" if default == done.dest else f"requests for speakers use it as "
           f"speaker_model {model} (the default is {default.name[:-len(speakermodels.SUFFIX)]})")
    click.echo(f"imported {done.src} ({done.size // 2**20} MB, {done.dim}-number embeddings) as the speaker model "
               f"{model} into {done.dest}; {use}")
    return EXIT_OK


@click.command()
@click.argument("name")
@socket_option
def rm(name: str, daemon: Daemon) -> int:
    """Remove an installed model: a directory under $XDG_DATA_HOME/hasr/models, a model in the Hugging Face
    cache, or a speaker model under $XDG_DATA_HOME/hasr/speakers (`hasrctl models` lists them). Its workers stop
    first. The default's names and `base` (embedded) cannot be removed.

    Does not start a daemon: exit 3 when none runs.
    """
    client = running(daemon)
    res = client.request("DELETE", "/api/delete", json.dumps({"model": name}).encode(),
                         {"Content-Type": "application/json"}, timeout=None).json()
    click.echo(f"removed {name} ({res.get('size_mb')} MB): {', '.join(res.get('removed') or [])}")
    return EXIT_OK

"""The daily commands: transcribe, load, unload, stop (status: hasrctl/status.py)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import click

from hasrctl import liveview, output, terminal
from hasrctl.client import EXIT_FAILED, EXIT_OK, CliError, Client, DaemonError, Unreachable, pool_status
from hasrctl.common import (NAMES_HELP, SPEAKERS_HELP, Daemon, cue_rules, daemon_options, engine_options,
                            model_argument, model_hint, names_option, speakers_for, speakers_option,
                            parse_formats, say, settings, socket_option)
from hasrctl.status import duration_text
from hasrd import subtitles
from hasrd.errors import InvalidOption
from hasrd.formats import lines, render
from hasrd.options import Options
from hasrd.status import PoolStatus
from hasrd.transcript import Transcript


def _view(name: str, stream: bool, progress: bool | None, quiet: bool,
          language: str | None = None) -> tuple[terminal.View, bool]:
    """The view for one file and whether it leaves the final text on stdout (then it is not printed again)."""
    if stream:
        if terminal.is_tty(sys.stdout):
            return liveview.LiveView(sys.stdout, language, name, lines=True), True
        if terminal.is_tty(sys.stderr):
            return liveview.LiveView(sys.stderr, language, name, lines=True), False
    show = terminal.is_tty(sys.stderr) if progress is None else progress
    if show and not quiet:
        return terminal.ProgressBar(sys.stderr, name), False
    return terminal.View(), False


def _summary(name: str, result: Transcript, took: float, targets: list[Path]) -> str:
    audio = result.duration_s or 0.0
    speed = f", {audio / took:.1f}x real time" if took > 0 and audio > 0 else ""
    where = f" -> {', '.join(map(str, targets))}" if targets else ""
    return f"{name}: ok, {audio:.1f} s of audio in {took:.2f} s{speed}{_language(result)}{where}"


def _language(result: Transcript) -> str:
    """", Chinese (detected, p=0.91)" when the engine chose the language, ", Chinese" when it was given."""
    name = result.language or result.language_code
    if not name:
        return ""
    if result.language_detected:
        p = result.language_probability
        return f", {name} (detected" + (f", p={p:.2f})" if isinstance(p, float) else ")")
    return f", {name}"


def _cue_option(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A subtitle limit checked when it is read: out of range is a usage error (exit 2) naming the range."""
    if value is not None and param.name:
        try:
            subtitles.rules_from({param.name: value})
        except InvalidOption as e:
            raise click.BadParameter(e.message.removeprefix(f"{param.name} ")) from None
    return value


@click.command(epilog="Exit: 0 all done, 1 some failed (or the daemon failed), 2 bad input or usage, "
                      "3 daemon unreachable. Several inputs: one failing makes the exit 1; when all fail "
                      "alike, their own code.")
@click.argument("files", nargs=-1, required=True, metavar="FILE...", type=click.Path(allow_dash=True))
@click.option("-f", "--format", "fmts", multiple=True, metavar="LIST", envvar="HASR_FORMAT", show_envvar=True,
              help="text (or txt), srt, vtt, json, verbose_json, diarized_json (speakers: --speakers auto unless "
                   "given), or all (txt, srt, vtt and verbose_json); several "
                   "with commas or -f again, all made from one transcription: they go to files (-o DIR or "
                   "--beside), one per format [default: text].")
@click.option("-o", "--output", "out", metavar="FILE|DIR", envvar="HASR_OUTPUT", show_envvar=True,
              help="Write to FILE, or to DIR/NAME.<ext> for each input and format; - is stdout (the default).")
@click.option("--beside", is_flag=True, envvar="HASR_BESIDE", show_envvar=True,
              help="Write NAME.<ext> next to each input, for each format.")
@click.option("--force", is_flag=True, envvar="HASR_FORCE", show_envvar=True,
              help="Overwrite existing files (a link is written through, never replaced).")
@click.option("-l", "--language", metavar="NAME", envvar="HASR_LANGUAGE", show_envvar=True,
              help="Spoken language: a name or code, e.g. Chinese, English, zh, en. Without it the engine "
                   "detects it (a vote over windows of speech; R2T2 detects its own) and the summary line on "
                   "stderr says which language it heard and how sure it was.")
@click.option("--stream/--no-stream", default=False, envvar="HASR_STREAM", show_envvar=True,
              help="Show the draft live on the terminal, replaced by final sentences as they settle.")
@click.option("--progress/--no-progress", default=None, envvar="HASR_PROGRESS", show_envvar=True,
              help="Progress line on stderr [default: when stderr is a terminal].")
@click.option("-q", "--quiet", is_flag=True, envvar="HASR_QUIET", show_envvar=True,
              help="No progress and no per-file summary lines (errors still show).")
@click.option("--prompt", metavar="TEXT", envvar="HASR_PROMPT", show_envvar=True,
              help="Text that guides faster-whisper: names, spelling, style "
              "(its initial prompt; R2T2's draft ignores it).")
@click.option("--word-timestamps", is_flag=True, envvar="HASR_WORD_TIMESTAMPS", show_envvar=True,
              help="Time every word: json and verbose_json carry `words`.")
@click.option("--speakers", metavar="auto|channels|N", callback=speakers_option, envvar="HASR_SPEAKERS",
              show_envvar=True, help=SPEAKERS_HELP)
@click.option("--speaker-names", metavar="LIST", callback=names_option, envvar="HASR_SPEAKER_NAMES",
              show_envvar=True, help=NAMES_HELP)
@click.option("--translate", is_flag=True, envvar="HASR_TRANSLATE", show_envvar=True,
              help="English text from any language (whisper's translate task; the "
              "whisper and hybrid engines).")
@click.option("--model", metavar="ID", envvar="HASR_MODEL", show_envvar=True,
              help="An id of `curl .../v1/models`: hasr (the default), or an OpenAI id such as whisper-1.")
@click.option("--max-line-width", metavar="N", callback=_cue_option, envvar="HASR_MAX_LINE_WIDTH", show_envvar=True,
              help="srt/vtt: characters a subtitle line at most, 8-200 [default: 42, 16 for Chinese and Japanese].")
@click.option("--max-line-count", metavar="N", callback=_cue_option, envvar="HASR_MAX_LINE_COUNT", show_envvar=True,
              help="srt/vtt: lines a cue at most, 1-4 [default: 2].")
@click.option("--max-cue-sec", metavar="SEC", callback=_cue_option, envvar="HASR_MAX_CUE_SEC", show_envvar=True,
              help="srt/vtt: seconds a cue stays on screen at most, 1-60 [default: 7]; a longer "
                   "sentence is cut between words, after a comma where there is one.")
@daemon_options
def transcribe(files: tuple[str, ...], fmts: tuple[str, ...], out: str | None, beside: bool, force: bool,
               language: str | None, stream: bool, progress: bool | None, quiet: bool, prompt: str | None,
               word_timestamps: bool, speakers: str | None, speaker_names: str | None, translate: bool,
               model: str | None, max_line_width: str | None, max_line_count: str | None, max_cue_sec: str | None,
               daemon: Daemon) -> int:
    """Transcribe audio files (any format FFmpeg reads; - reads stdin).

    \b
    The transcript goes to stdout (nothing else does), or to files with -o / --beside.
    Examples:
      hasrctl transcribe talk.wav > talk.txt
      hasrctl transcribe -f vtt -o out/ a.mp3 b.m4a     # out/a.vtt, out/b.vtt
      hasrctl transcribe --beside -f srt *.wav           # x.wav -> x.srt
      hasrctl transcribe -f txt,srt,vtt -o out/ a.mp3    # out/a.txt, out/a.srt, out/a.vtt from one pass
      ffmpeg -i video.mkv -f wav - | hasrctl transcribe -l English -
      hasrctl transcribe --speakers auto -f srt meeting.m4a   # A: / B: before the lines
      hasrctl transcribe --speakers channels --speaker-names Agent,Caller call.wav
    """
    formats = parse_formats(fmts)
    speakers = speakers_for(formats, speakers)
    model = model_argument(model)
    language = language or settings().language or None
    options = engine_options(prompt, word_timestamps, translate, model, speakers, speaker_names)
    rules = cue_rules(max_line_width, max_line_count, max_cue_sec)
    plans = output.plan(list(files), formats, out, beside)
    codes: list[int] = []
    client: Client | None = None
    # Every input and target is checked before the first transcription starts: a typo in the last name is
    # reported now, not after an hour of the files before it; the good ones are transcribed after.
    checked: list[tuple[str, Any]] = []
    for name, item in plans:
        try:
            if isinstance(item, CliError):
                raise item
            for _, target in item.targets:
                output.check_free(target, force)
            checked.append((name, item))
        except CliError as e:
            say(e.message if name in e.message else f"{name}: {e.message}")
            codes.append(e.exit_code)
    for name, item in checked:
        try:
            if client is None:
                client = daemon.client()
            view, shown = _view(name, stream, progress, quiet, language)
            t0 = time.monotonic()
            result = _transcribe(client, item, language, view, options)
            # every format from the one result, as the daemon sent it
            texts = {fmt: lines(result) if fmt == "text" else render(result, fmt, rules=rules) for fmt in formats}
            unwritten = [why for fmt, target in item.targets if (why := _write(target, texts[fmt], force))]
            if unwritten:
                raise CliError("; ".join(unwritten))
            if not item.targets and not (shown and formats == ["text"]):
                output.emit(texts[formats[0]])
            if not quiet:
                say(_summary(name, result, time.monotonic() - t0, [t for _, t in item.targets]))
            codes.append(EXIT_OK)
        except Unreachable:
            raise
        except CliError as e:
            message = _next_step(e, model)
            named = name in message or (isinstance(item, output.Plan) and item.source in message)
            say(message if named else f"{name}: {message}")
            _keep_partial(e, item, quiet)
            codes.append(e.exit_code)
    failed = [c for c in codes if c != EXIT_OK]
    if not failed:
        return EXIT_OK
    if len(failed) == len(codes) and len(set(failed)) == 1:
        return failed[0]
    return EXIT_FAILED


def _next_step(e: CliError, model: str | None) -> str:
    """An error's line, with what to do next where the daemon's own words do not say it."""
    if isinstance(e, DaemonError) and e.code == "model_not_found":
        return model_hint(model, e.message)
    return e.message


def _write(target: Path, text: str, force: bool) -> str | None:
    """Write one output once the work is done; when that fails (the directory turned read-only, the disk is
    full, the name was taken meanwhile) the text is kept in output.kept_dir(), or at worst printed: never lost.
    Returns what went wrong and where the text is, or None."""
    try:
        output.write(target, text, force)
        return None
    except (OSError, CliError) as e:
        why = e.message if isinstance(e, CliError) else f"cannot write {target}: {e.strerror or e}"
    try:
        return f"{why}; the transcript is kept in {output.keep(target, text)}"
    except OSError as e:
        output.emit(text)
        return f"{why}; nor in {output.kept_dir()} ({e.strerror or e}): the transcript is on stdout"


def _keep_partial(e: CliError, item: Any, quiet: bool) -> None:
    """A job that failed after some sentences were final: keep their text, beside the output (NAME.partial,
    never over the output itself) or on stdout."""
    partial: dict[str, Any] = getattr(e, "partial", None) or {}
    text = str(partial.get("text") or "").strip()
    if not text:
        return
    target = getattr(item, "target", None)
    if target is None:
        output.emit(text + "\n")
        return
    kept = Path(f"{target}.partial")
    try:
        output.write(kept, text + "\n", True)
    except CliError as err:
        say(err.message)
        return
    if not quiet:
        say(f"kept the {len(partial.get('sentences') or [])} final sentence(s) up to "
            f"{float(partial.get('done_s') or 0):.0f} s in {kept}")


def _transcribe(client: Client, item: output.Plan, language: str | None, view: terminal.View,
                options: Options | None = None) -> Transcript:
    from hasrctl import transcribe as tr

    try:
        return tr.run(client, item.source, language, view, settings().max_upload_mb, options)
    except BaseException:
        view.abort()
        raise


@click.command()
@click.option("--keep-alive", type=float, metavar="SEC", envvar="HASR_KEEP_ALIVE", show_envvar=True,
              help="Keep the models this long after the last request (<0: until unload) [default: HASR_IDLE_TTL_SEC].")
@click.option("--model", metavar="NAME", envvar="HASR_MODEL", show_envvar=True,
              help="Load this model's worker instead of the default's (`hasrctl models` lists them).")
@daemon_options
def load(keep_alive: float | None, model: str | None, daemon: Daemon) -> int:
    """Load the models now, so the next transcription starts at once (starts the daemon if needed)."""
    model = model_argument(model)
    client = daemon.client()
    if terminal.is_tty(sys.stderr):
        say("loading the models...")
    body: dict[str, Any] = {} if keep_alive is None else {"keep_alive": keep_alive}
    if model:
        body["model"] = model
    try:
        ps = pool_status(client.post("/api/load", body, timeout=None))
    except DaemonError as e:
        raise CliError(_next_step(e, model), e.exit_code) from None
    took = f" in {ps.load_s:.1f} s" if ps.load_s is not None else ""
    click.echo(f"{ps.state.value}: engine {ps.engine}, loaded{took}"
               + (f", unload in {duration_text(ps.expires_in_s)}" if ps.expires_in_s is not None else ""))
    return EXIT_OK


@click.command()
@click.option("--model", metavar="NAME", envvar="HASR_UNLOAD_MODEL", show_envvar=True,
              help="Stop only this model's workers [default: all].")
@socket_option
def unload(model: str | None, daemon: Daemon) -> int:
    """Stop the workers after their running jobs, so all their memory comes back (clears a fatal state too)."""
    try:
        client = daemon.client(autostart=False)
    except Unreachable:
        say("hasrd is not running: nothing to unload")
        return EXIT_OK
    client.post("/api/unload", {"model": model} if model else None, timeout=None)
    click.echo(f"unloaded: the workers{' of ' + model if model else ''} are stopped")
    return EXIT_OK


@click.command(epilog="Exit: 0 stopped (or not running), 1 still finishing after --wait (it goes on and exits when "
                      "done), 3 no answer.")
@click.option("--wait", type=float, default=30.0, show_default=True, metavar="SEC", envvar="HASR_STOP_WAIT_SEC",
              show_envvar=True, help="How long to wait for it to finish its transcriptions and exit.")
@click.option("--now", is_flag=True, envvar="HASR_STOP_NOW", show_envvar=True,
              help="Stop at once: running and waiting transcriptions fail (shutting_down) instead of finishing first.")
@socket_option
def stop(wait: float, now: bool, daemon: Daemon) -> int:
    """Stop the daemon once its running transcriptions are done (first it says which, and how to stop at once);
    systemd's service when it manages hasrd: its socket stays and starts it again on demand."""
    from hasrctl import discovery
    from hasrctl.client import peer_pid, wait_gone

    unit = None
    if not daemon.socket and discovery.socket_unit() is not None:
        active = {u: _systemctl("is-active", u).stdout.strip() for u in (discovery.UNIT_SOCKET, discovery.UNIT_SERVICE)}
        if "active" in active.values() or active[discovery.UNIT_SERVICE] == "deactivating":
            unit = active  # else no unit of systemd's runs: a daemon hasrctl started may hold the path
            if active[discovery.UNIT_SERVICE] not in ("active", "deactivating"):
                _systemctl("stop", discovery.UNIT_SERVICE)
                return _stopped(active, "hasrd.service was not running")
    if unit is not None and unit[discovery.UNIT_SERVICE] == "deactivating":  # a stop runs: connecting now would
        pid, work = _main_pid(), "its work"  # start the next instance, so nothing is asked
        if now:  # a SIGTERM to a stopping daemon stops it at once
            _systemctl("kill", "--kill-whom=main", "--signal=SIGTERM", discovery.UNIT_SERVICE)
        say("stopping hasrd.service now: what it was finishing fails" if now else
            f"hasrd.service is stopping already, finishing its work; waiting up to {wait:g} s (--wait); "
            f"`hasrctl stop --now` stops it at once")
    else:
        try:
            client = daemon.client(autostart=False)
        except Unreachable:
            say("hasrd is not running")
            return EXIT_OK
        pid = _main_pid() if unit is not None else peer_pid(client.path)  # under systemd the peer is systemd
        work = _work(client.ps())
        kill = f"`kill {pid}`" if pid else "a SIGTERM to hasrd"  # no pid: a daemon in another pid namespace
        how = "`hasrctl stop --now`" if unit is not None else f"{kill} (a SIGTERM while it stops)"
        if work:  # said before any waiting, so that nobody watches a silent terminal for --wait seconds
            say(f"stopping hasrd now: {work} fail" if now else f"hasrd is finishing {work} before it exits; "
                f"waiting up to {wait:g} s (--wait); {how} stops it at once, failing them")
        if now or unit is None:
            client.post("/api/stop", {"now": True} if now else None, timeout=30.0)
        if unit is not None:  # systemd stops it, not waited for here: --wait bounds the wait
            _systemctl("stop", "--no-block", discovery.UNIT_SERVICE)
    if pid and not wait_gone(pid, wait):
        how = "`hasrctl stop --now`" if unit is not None else f"`kill {pid}`"
        raise CliError(f"hasrd (pid {pid}) is still finishing {work or 'accepted work'} after {wait:g} s; it exits "
                       f"once that is done ({how} stops it at once)")
    if unit is not None:
        return _stopped(unit, "stopped hasrd.service")
    click.echo("stopped hasrd")
    return EXIT_OK


def _systemctl(*args: str) -> Any:
    """``systemctl --user ARGS`` that never blocks long: a manager that does not answer is an error in words."""
    import subprocess

    from hasrctl import discovery

    try:
        return discovery.systemctl(*args, timeout=10)
    except subprocess.TimeoutExpired:
        raise CliError(f"systemctl --user {' '.join(args)} did not answer within 10 s (is the user manager "
                       f"busy? see systemctl --user status hasrd.service)") from None


def _main_pid() -> int | None:
    """hasrd.service's main process, None when it has none (it is gone)."""
    from hasrctl import discovery

    return int(_systemctl("show", "-p", "MainPID", "--value", discovery.UNIT_SERVICE).stdout or 0) or None


def _stopped(active: dict[str, str], what: str) -> int:
    from hasrctl import discovery

    if active[discovery.UNIT_SOCKET] == "active":
        click.echo(f"{what} (hasrd.socket still listens and starts it on the next request)")
    else:
        click.echo(f"{what}; hasrd.socket is {active[discovery.UNIT_SOCKET] or 'inactive'}, so nothing starts it "
                   f"on demand (systemctl --user start hasrd.socket)")
    return EXIT_OK


def _work(ps: PoolStatus) -> str:
    """What a daemon would finish before it exits, in words ("" for nothing): its jobs, and those waiting."""
    jobs = ["a live session" if j.live else f"{j.name} ({j.progress:.0%})" for j in ps.jobs]
    waiting = ps.in_flight - len(jobs)
    return ", ".join(jobs + ([f"{waiting} more waiting"] if waiting > 0 else []))

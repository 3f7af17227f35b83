"""``hasrctl listen`` and ``hasrctl dictate``: live audio to the daemon's /v1/realtime, final sentences back.

Audio comes from the microphone (PortAudio through sounddevice; on a desktop that is PipeWire or PulseAudio
via ALSA's default device) or from anything FFmpeg opens (a file, a URL, ``-`` for stdin), decoded with PyAV
and sent as OpenAI's PCM16 at 24 kHz in 160 ms pieces, at real-time pace with ``--realtime``. Final sentences
go to stdout (and ``--output``); on a terminal the unstable draft is shown after them, dimmed. Ctrl-C (or the
end of the input) closes the last utterance and waits for its final text (``hasr.finish``).

``listen --meeting`` records the microphone and what the desktop plays as two speakers (hasrctl/meeting.py).

``dictate`` types each final sentence into the focused window: xdotool on X11, wtype or ydotool on Wayland.
``dictate --toggle`` (bind it to a desktop shortcut) starts dictation, or ends the running one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from hasrctl.client import EXIT_FAILED, EXIT_OK, CliError, UsageError
from hasrctl.common import daemon_options, say
from hasrctl.livesession import ffmpeg_source, interruptible, item_number, microphone_source, run, typist
from hasrctl.transcribe import Event


def live_options(func: Callable[..., Any]) -> Callable[..., Any]:
    for opt in reversed([
        click.option("-l", "--language", default="", envvar="HASR_LANGUAGE", show_envvar=True, metavar="LANG",
                     help="Spoken language (code or name); detected when not given."),
        click.option("--prompt", default="", envvar="HASR_PROMPT", metavar="TEXT",
                     help="Words to expect (names, jargon)."),
        click.option("--silence-ms", type=click.IntRange(100, 10000), default=500, show_default=True,
                     help="A pause this long ends an utterance (its final text follows)."),
        click.option("--device", metavar="NAME|INDEX", default=None,
                     help="Microphone (PortAudio's name or index; `python -m sounddevice` lists them)."),
    ]):
        func = opt(func)
    return func


@click.command(epilog="""\b
Examples:
  hasrctl listen                               # the microphone, until Ctrl-C
  hasrctl listen talk.flac --realtime          # a file played at real-time pace
  hasrctl listen https://radio/stream -o log.txt
  hasrctl listen -f srt -o talk.srt talk.mp3
  hasrctl listen --meeting -o standup          # You and Others, saved as standup.txt and standup.srt
  hasrctl listen --meeting --speaker-names \"Ann,Team\"""")
@click.argument("source", required=False, metavar="[FILE|URL|-]")
@click.option("--realtime", is_flag=True, help="Send a file or URL at real-time pace (as if it were live).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True), metavar="FILE",
              help="Also write the final transcript there (in --format) at the end; with --meeting: FILE.txt and "
                   "FILE.srt.")
@click.option("-f", "--format", "fmt", type=click.Choice(["text", "json", "srt", "vtt"]), default="text",
              show_default=True, help="Format of --output (stdout always gets one line per sentence).")
@click.option("--meeting", is_flag=True,
              help="A call: the microphone (\"You\") and what the desktop plays (\"Others\": the default output's "
                   "monitor, through PulseAudio or PipeWire) as two speakers, each line named; when stopped, saved "
                   "as .txt (speaker turns) and .srt (names before the lines): -o FILE writes FILE.txt and FILE.srt "
                   "(a .txt or .srt on FILE is dropped first: -o notes.srt writes notes.srt and notes.txt), else "
                   "./meeting-YYYYmmdd-HHMMSS.txt and .srt. --device names the "
                   "microphone's source (`pactl list short sources`). The others' voices that the speakers put "
                   "into the microphone are not written again as You (docs/SPEAKERS.md).")
@click.option("--speaker-names", metavar="MIC,OUTPUT", default=None,
              help="With --meeting: the two sides' names, comma separated, the microphone's first [default: "
                   "You,Others].")
@live_options
@daemon_options
def listen(source: str | None, realtime: bool, output: str | None, fmt: str, meeting: bool,
           speaker_names: str | None, language: str, prompt: str, silence_ms: int, device: str | None,
           daemon: Any) -> int:
    """Transcribe live audio: the microphone, or a file or URL; or a meeting (--meeting).

    Final sentences are printed as they are settled; on a terminal the draft of what is being said is shown
    after them, dimmed, and replaced. Ctrl-C stops listening and prints what was still being said.
    """
    if meeting or speaker_names is not None:
        return _meeting(source, realtime, output, meeting, speaker_names, language, prompt, silence_ms, device,
                        daemon)
    from hasrctl.liveview import LiveView
    from hasrctl.terminal import ProgressBar, is_tty

    stop = threading.Event()
    interruptible(stop)
    src = microphone_source(device, stop) if source is None else ffmpeg_source(source, realtime, stop)
    # On a terminal the live view draws everything, its status row too (loading, queueing): one writer, so
    # nothing moves the cursor under it. Else a redrawn stderr line, erased once there is text, or plain lines.
    view = LiveView(sys.stdout, language or None, "hasrctl:") if is_tty(sys.stdout) else None
    bar = ProgressBar(sys.stderr, "hasrctl:") if view is None and is_tty(sys.stderr) else None

    def status(ev: Event) -> None:
        shown: Any = view if view is not None else bar
        if ev.type == "hasr.loading":
            shown.loading(ev.phase or "", ev.elapsed_s)
        else:
            shown.queued(ev.position or 0)

    def on_sentence(ev: Event) -> None:
        if bar is not None:
            bar.finish(None)
        if view is not None:  # each sentence names its utterance: the draft shown is that utterance's rest
            view.sentence(ev.index or 0, ev.text or "", item_number(ev))
        else:
            click.echo(ev.text)
            sys.stdout.flush()

    def on_draft(text: str, item: int) -> None:
        if bar is not None:
            bar.finish(None)
        if view is not None:
            view.draft(text, item)

    def on_done(item: int) -> None:
        if view is not None:  # a late draft of a completed utterance is stale
            view.done(item)

    result = run(daemon.client().path, src, stop, language, prompt, silence_ms, on_sentence, on_draft,
                 status if view is not None or bar is not None else None, on_done)
    if bar is not None:
        bar.finish(None)
    if view is not None:
        view.finish(None)
    if output:
        from hasrd import formats
        from hasrd.transcript import from_json

        try:
            doc = from_json(result)
        except ValueError as e:  # a daemon of another version
            raise CliError(str(e)) from None
        text = formats.render(doc, formats.Format(fmt)) if fmt != "text" else "\n".join(doc.texts()) + "\n"
        Path(output).write_text(text, encoding="utf-8")
    return EXIT_OK


def _meeting(source: str | None, realtime: bool, output: str | None, meeting: bool, speaker_names: str | None,
             language: str, prompt: str, silence_ms: int, device: str | None, daemon: Any) -> int:
    """--meeting's options checked against the rest of listen's, then hasrctl.meeting."""
    from hasrctl.meeting import record

    from click.core import ParameterSource

    given = click.get_current_context().get_parameter_source("fmt") is not ParameterSource.DEFAULT
    if not meeting:
        raise UsageError("--speaker-names names the sides of --meeting")
    if source is not None or realtime:
        raise UsageError("--meeting records the microphone and the desktop's output: no FILE, URL or --realtime")
    if given:
        raise UsageError("--meeting saves both .txt and .srt: -f does not apply")
    return record(output, speaker_names, language, prompt, silence_ms, device, daemon)


# ---- dictation --------------------------------------------------------------------------------------------


def pidfile() -> Path:
    base = os.environ.get("XDG_RUNTIME_DIR") or f"/tmp/hasr-{os.getuid()}"
    return Path(base) / "hasr" / "dictate.pid"


def running_dictation() -> int | None:
    try:
        pid = int(pidfile().read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return pid if b"dictate" in cmdline else None


@click.command(epilog="""\b
Examples:
  hasrctl dictate                 # type what you say into the focused window, until Ctrl-C
  hasrctl dictate --toggle        # for a desktop shortcut: start, or stop the running dictation""")
@click.option("--toggle", is_flag=True, help="Stop the running dictation if there is one, else start one.")
@live_options
@daemon_options
def dictate(toggle: bool, language: str, prompt: str, silence_ms: int, device: str | None, daemon: Any) -> int:
    """Type what you say into the focused window, one final sentence at a time."""
    pid = running_dictation()
    if toggle and pid is not None:
        os.kill(pid, signal.SIGINT)
        say(f"dictation (pid {pid}) stopped")
        return EXIT_OK
    if pid is not None:
        raise CliError(f"dictation is already running (pid {pid}); `hasrctl dictate --toggle` stops it", EXIT_FAILED)
    command = typist()
    path = pidfile()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(str(os.getpid()))
    stop = threading.Event()
    interruptible(stop)

    def on_sentence(ev: Event) -> None:
        text = (ev.text or "").strip()
        if text:
            subprocess.run([*command, text + " "], check=False)

    try:
        source = microphone_source(device, stop)  # a missing microphone fails here, before "speak"
        say("dictating: speak; Ctrl-C or `hasrctl dictate --toggle` stops")
        run(daemon.client().path, source, stop, language, prompt, silence_ms, on_sentence, lambda text, seg: None)
    finally:
        with_pid = running_dictation()
        if with_pid in (None, os.getpid()):
            path.unlink(missing_ok=True)
    return EXIT_OK

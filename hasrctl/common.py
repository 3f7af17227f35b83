"""What every command shares: messages on stderr, settings, and the options that reach the daemon."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from hasrctl.client import Client, Unreachable, UsageError
from hasrd.formats import Format

if TYPE_CHECKING:
    from hasrd.options import Options
    from hasrd.subtitles import CueRules

# the formats as a user may name them: the daemon's (and OpenAI's) names, and txt for text, as files are named
FORMAT_NAMES = {**{f.value: f for f in Format}, "txt": Format.TEXT}
# -f all: every file a person keeps, as whisper's --output_format all; the json is verbose_json, the one that
# holds the whole result (segments, words, hasr's own fields), from which every other format can be made again
ALL_FORMATS = (Format.TEXT, Format.SRT, Format.VTT, Format.VERBOSE_JSON)


def parse_formats(values: tuple[str, ...] | list[str], default: Format = Format.TEXT) -> list[Format]:
    """``-f txt,srt -f vtt`` (or ``-f all``) -> the formats, each once, in the order given; ``default`` when none
    is given; UsageError naming the valid ones for anything else, or for json with verbose_json (both write
    NAME.json)."""
    out: list[Format] = []
    for value in values:
        for part in value.split(","):
            word = part.strip().lower()
            if word not in FORMAT_NAMES and word != "all":
                raise UsageError(f"-f {part.strip()!r}: use txt, srt, vtt, json, verbose_json, diarized_json or all "
                                 f"(several with commas, or -f again)")
            names = ALL_FORMATS if word == "all" else (FORMAT_NAMES[word],)
            out += [n for n in names if n not in out]
    jsons = [str(f) for f in out if f.extension == "json"]
    if len(jsons) > 1:
        raise UsageError(f"-f {' and '.join(jsons)} {'both' if len(jsons) == 2 else 'all'} write NAME.json: "
                         f"choose one")
    return out or [default]


def speakers_for(formats: list[Format], speakers: str | None) -> str | None:
    """diarized_json asks for speakers by itself (``auto``), as OpenAI's diarizing model does."""
    return "auto" if speakers is None and Format.DIARIZED_JSON in formats else speakers


def say(message: str) -> None:
    """One line for the person on stderr (stdout carries only results)."""
    click.echo(f"hasrctl: {message}", err=True)


@functools.lru_cache(maxsize=1)
def settings() -> Any:
    """hasrd's settings (HASR_* > config.toml > defaults), for what no option was given."""
    from hasrd import config

    try:
        return config.load()
    except config.ConfigError as e:
        raise UsageError(str(e)) from None


@dataclass
class Daemon:
    """How to reach the daemon, from the connection options every command shares."""

    socket: str | None
    autostart: bool
    autostart_timeout: float

    def client(self, autostart: bool | None = None) -> Client:
        from hasrctl import discovery

        start = self.autostart if autostart is None else autostart and self.autostart
        path = discovery.find(self.socket or settings().socket or None, autostart=start,
                              idle_exit=settings().idle_exit_sec, timeout=self.autostart_timeout, say=say)
        return Client(path)


def not_running(e: Unreachable) -> str:
    """Why no daemon answered, and how one starts, for the commands that never start one (status, ps, models,
    rm): they have no --autostart to drop, so the advice names the commands that do."""
    from hasrctl.discovery import NotRunning

    if not isinstance(e, NotRunning):
        return e.message
    how = ("systemctl --user start hasrd.socket" if e.unit is not None else
           "`hasrctl transcribe` or `hasrctl load` start one; `hasrctl setup` has systemd start it on demand")
    return f"nothing answers on {e.tried} ({how})"


def _is_path(name: str) -> bool:
    return name.startswith(("/", "~", "./", "../"))


def model_hint(name: str | None, message: str) -> str:
    """A model_not_found message with the next step: ``hasrctl pull NAME`` for a name that pull can fetch (a
    faster-whisper size, an owner/name repo id)."""
    if not name or _is_path(name):
        return message
    from hasrd.hub import REPO_ID, SIZES

    sizes = {s.strip() for s in SIZES.split(",")} | {"large", "large-v1", "large-v2", "turbo", "distil-large-v2"}
    if name in sizes or ("/" in name and REPO_ID.fullmatch(name)):
        return f"{message}; download it with `hasrctl pull {name}`"
    return message


def model_argument(name: str | None) -> str | None:
    """--model as the daemon needs it: a path (``/x``, ``~/x``, ``./x``) made absolute, and refused at once
    (UsageError, exit 2, before any daemon or Ray) when nothing is there; a name as it is."""
    if not name or not _is_path(name):
        return name
    path = os.path.abspath(os.path.expanduser(name))
    if not os.path.lexists(path):
        raise UsageError(f"--model {name}: no such directory (a model directory holds a CTranslate2 model.bin; "
                         f"`hasrctl models` lists the installed models)")
    return path


def daemon_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """--socket, --autostart/--no-autostart and --autostart-timeout, folded into one ``daemon`` argument."""

    @click.option("--socket", "socket_", metavar="PATH", envvar="HASR_SOCKET", show_envvar=True,
                  help="Daemon socket [default: $XDG_RUNTIME_DIR/hasr/hasrd.sock (/tmp/hasr-$UID/hasr/hasrd.sock "
                       "without XDG_RUNTIME_DIR), then /run/hasr/hasrd.sock].")
    @click.option("--autostart/--no-autostart", default=True, envvar="HASR_AUTOSTART", show_envvar=True,
                  show_default=True, help="Start hasrd in the background when none answers and no systemd "
                  "socket exists.")
    @click.option("--autostart-timeout", type=float, default=30.0, envvar="HASR_AUTOSTART_TIMEOUT_SEC",
                  show_envvar=True, show_default=True, metavar="SEC", help="How long to wait for it.")
    @functools.wraps(func)
    def wrapper(*args: Any, socket_: str | None, autostart: bool, autostart_timeout: float, **kw: Any) -> Any:
        return func(*args, daemon=Daemon(socket_, autostart, autostart_timeout), **kw)

    return wrapper


def socket_option(func: Callable[..., Any]) -> Callable[..., Any]:
    """--socket alone, for the commands that never start a daemon (status, unload, stop): offering
    --autostart there would promise what they do not do."""

    @click.option("--socket", "socket_", metavar="PATH", envvar="HASR_SOCKET", show_envvar=True,
                  help="Daemon socket [default: $XDG_RUNTIME_DIR/hasr/hasrd.sock (/tmp/hasr-$UID/hasr/hasrd.sock "
                       "without XDG_RUNTIME_DIR), then /run/hasr/hasrd.sock].")
    @functools.wraps(func)
    def wrapper(*args: Any, socket_: str | None, **kw: Any) -> Any:
        return func(*args, daemon=Daemon(socket_, False, 0.0), **kw)

    return wrapper


def cue_rules(max_line_width: str | None, max_line_count: str | None, max_cue_sec: str | None) -> CueRules:
    """The subtitle cue limits given (the settings' where none is), or UsageError naming the range."""
    from hasrd import subtitles
    from hasrd.errors import InvalidOption

    try:
        return subtitles.rules_from({"max_line_width": max_line_width, "max_line_count": max_line_count,
                                     "max_cue_sec": max_cue_sec}, subtitles.configured(settings()))
    except InvalidOption as e:
        raise UsageError(e.message) from None


def engine_options(prompt: str | None, word_timestamps: bool, translate: bool, model: str | None,
                   speakers: str | None = None, speaker_names: str | None = None) -> Options:
    """The engine options of the transcription options (what /transcribe passes to the worker; what
    ``hasrctl batch`` gives its actors); ``speakers`` and ``speaker_names`` as --speakers and --speaker-names
    give them (checked by click: speakers_option, names_option)."""
    from hasrd.options import Options  # msgspec: not for the commands that only ask the daemon's state

    who: int | str | None = int(speakers) if speakers and speakers.isdigit() else speakers or None
    return Options(model=model or "", task="translate" if translate else "transcribe", prompt=prompt or "",
                   word_timestamps=word_timestamps, speakers=who,  # type: ignore[arg-type]
                   speaker_names=split_names(speaker_names))


def split_names(raw: str | None) -> list[str]:
    """``--speaker-names "Ann, Bo"``: the names, blanks around them dropped."""
    return [n.strip() for n in (raw or "").split(",") if n.strip()]


def speakers_option(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """--speakers: auto, channels or a number from 1 to 16, checked before any work."""
    if value is None or value == "":
        return None
    v = value.strip().lower()
    if v in ("auto", "channels") or (v.isdigit() and 1 <= int(v) <= 16):
        return v
    raise click.BadParameter(f"{value!r}: use auto (the voices found and counted), channels (one speaker per "
                             f"channel) or a number of speakers from 1 to 16")


def names_option(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """--speaker-names: names of 1-64 characters, comma-separated."""
    names = split_names(value)
    for name in names:
        if len(name) > 64:
            raise click.BadParameter(f"{name[:20]!r}…: a name is at most 64 characters")
    if len(set(names)) != len(names):
        raise click.BadParameter(f"{value!r} names a speaker twice")
    return value


SPEAKERS_HELP = ("Who said what: auto (voices told apart by a speaker model: `hasrctl pull wespeaker-resnet34`), "
                 "channels (one speaker per channel: a call, a podcast recorded per microphone) or the number of "
                 "speakers. Text comes in speaker turns (A: …), srt names the speaker, vtt has voice tags.")
NAMES_HELP = "Names for the speakers, comma-separated, in order of first words (channels: channel 1, 2, …)."

"""What every command shares: messages on stderr, settings, and the options that reach the daemon."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click

from hasrctl.client import Client, UsageError
from hasrd.formats import FORMATS

# the formats as a user may name them: the daemon's (and OpenAI's) names, and txt for text, as files are named
FORMAT_NAMES = {**{f: f for f in FORMATS}, "txt": "text"}


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


def engine_options(prompt: str | None, word_timestamps: bool, translate: bool, model: str | None) -> dict[str, Any]:
    """The engine options of the transcription options (what /transcribe passes to the worker; what
    ``hasrctl batch`` gives its actors)."""
    options: dict[str, Any] = {}
    if prompt:
        options["prompt"] = prompt
    if word_timestamps:
        options["word_timestamps"] = True
    if translate:
        options["task"] = "translate"
    if model:
        options["model"] = model
    return options

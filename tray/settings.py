"""The tray's settings: the daemon's socket and language from ``hasrd.config``, plus its own.

Own settings come from HASR_TRAY_* variables, else the ``[tray]`` table of ``$XDG_CONFIG_HOME/hasr/config.toml``,
else defaults:

    HASR_TRAY_FORMAT=txt       transcript format written next to each file: txt | srt | vtt | json
    HASR_TRAY_POLL_SEC=3       while the daemon is quiet, probe /health this often (see tray/watch.py)
    HASR_TRAY_AUTOSTART=1      start ``hasrd`` for a transcription when no daemon and no systemd socket exist
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hasrd import config
from tray.output import check_format


@dataclass(frozen=True)
class TraySettings:
    socket: str
    format: str = "txt"
    language: str = ""
    poll_sec: float = 3.0
    autostart: bool = True


def _tray_table() -> dict[str, Any]:
    try:
        table = config.read_toml(config.config_file()).get("tray", {})
    except config.ConfigError:
        return {}
    return dict(table) if isinstance(table, dict) else {}


def load(env: Mapping[str, str] | None = None, **overrides: Any) -> TraySettings:
    """Effective tray settings; ``overrides`` (command-line values, None = unset) win over everything."""
    env = os.environ if env is None else env
    try:
        base = config.load(env)
        socket, language = base.socket_path(), base.language
    except config.ConfigError:
        socket, language = config.default_socket(), ""
    table = _tray_table()

    def pick(name: str, default: Any) -> Any:
        if overrides.get(name) is not None:
            return overrides[name]
        raw = env.get(f"HASR_TRAY_{name.upper()}")
        if raw not in (None, ""):
            return raw
        return table.get(name, default)

    try:
        poll = max(0.1, float(pick("poll_sec", 3.0)))
    except (TypeError, ValueError):
        poll = 3.0
    autostart = str(pick("autostart", True)).strip().lower() not in ("0", "false", "no", "off")
    try:
        fmt = check_format(str(pick("format", "txt")))
    except ValueError:
        fmt = "txt"
    return TraySettings(socket=str(overrides.get("socket") or socket), format=fmt,
                        language=str(overrides.get("language") or language), poll_sec=poll, autostart=autostart)

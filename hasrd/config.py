"""Every hasr setting in one place: name, default, meaning.

Precedence: HASR_* environment variables > ``$XDG_CONFIG_HOME/hasr/config.toml`` > defaults.
The TOML file uses the setting names in lower case without the prefix (``idle_ttl_sec = 600``).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any


def runtime_dir() -> Path:
    """$XDG_RUNTIME_DIR (systemd's per-user tmpfs) or a private fallback under /tmp."""
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg:
        return Path(xdg)
    return Path(f"/tmp/hasr-{os.getuid()}")


def default_socket() -> str:
    return str(runtime_dir() / "hasr" / "hasrd.sock")


SYSTEM_SOCKET = "/run/hasr/hasrd.sock"
ENGINES = ("auto", "hybrid", "whisper", "r2t2", "fake")
# Settings that take one of a few words: checked when the settings are loaded, not when a request fails.
CHOICES: dict[str, tuple[str, ...]] = {
    "engine": ENGINES,
    "fw_device": ("auto", "cpu", "cuda"),
    "v2c_final": ("thread", "inline", "after"),
    "draft": ("r2t2", "scripted"),
    "zh_script": ("simplified", "traditional", "as-is"),
}


@dataclass(frozen=True)
class Setting:
    """One setting as documented: docs/CONFIG.md and ``hasrctl doctor`` are made from these."""

    name: str
    default: Any
    help: str
    since: str = "0.1.0"
    kind: str = "str"


def _s(default: Any, help: str, since: str = "0.1.0") -> Any:
    """A field with its one-line meaning and the hasr version that introduced it."""
    return field(default=default, metadata={"help": help, "since": since})


@dataclass(frozen=True)
class Settings:
    """Effective configuration. Field names map to HASR_<NAME upper-cased>."""

    socket: str = _s("", "Unix socket path ('' = $XDG_RUNTIME_DIR/hasr/hasrd.sock, or /tmp/hasr-$UID/hasr/hasrd.sock "
                         "where XDG_RUNTIME_DIR is unset)")
    engine: str = _s("auto", "worker engine: auto | hybrid | whisper | r2t2 | fake")
    worker_python: str = _s("", "interpreter that runs the worker ('' = the daemon's own); the GPU venv")
    idle_ttl_sec: float = _s(900.0, "kill the worker after this many idle seconds (VRAM comes back)")
    idle_exit_sec: float = _s(1800.0, "socket-activated daemon exits after this many idle seconds")
    load_timeout_sec: float = _s(300.0, "longest a worker may take from spawn to Ready")
    hello_timeout_sec: float = _s(30.0, "longest a worker may take from spawn to Hello")
    stall_sec: float = _s(120.0, "a job whose worker reports no progress for this long is killed (504 stalled)")
    max_job_sec: float = _s(0.0, "hard cap on one job's running time, however it progresses (0 = none)")
    live_idle_sec: float = _s(120.0, "a live session that sends nothing (not even silence) this long is closed")
    live_queue_sec: float = _s(60.0, "a live session that waits this long behind a running job is refused "
                                     "(queue_full; 0 = wait for it however long)", since="0.2.0")
    live_max_pending_sec: float = _s(120.0, "audio a live session may have received and not yet decoded "
                                           "(queued, loading, or a worker behind, wherever it waits); appends "
                                           "past it are refused with an error event", since="0.2.0")
    max_queue: int = _s(16, "requests waiting, beyond those the workers hold, before '503 queue full'")
    max_workers: int = _s(0, "workers (each one model on one device) that may run at once; 0 = one per GPU, or 2 on "
                             "a CPU-only machine (a live session never waits behind a file)", since="0.2.0")
    worker_parallel: int = _s(0, "jobs (files, requests, live sessions) one worker holds at once, decoded together "
                                 "in batches; 0 = 4 for a worker on the CPU, 32 for a worker on a GPU (figures "
                                 "below)",
                              since="0.3.0")
    worker_batch: int = _s(0, "most windows (30 s encoder inputs) one batched decode step takes across a worker's "
                              "jobs; 0 = 8 on the CPU, 32 on a GPU (figures below)", since="0.3.0")
    worker_streams: int = _s(0, "model calls one worker runs at once (CTranslate2 replicas sharing the weights, "
                                "each on its own CUDA stream; one is kept for live sessions and short files); "
                                "0 = 1 on the CPU, 3 on a GPU (figures below)", since="0.3.0")
    max_load_failures: int = _s(5, "consecutive failed loads before the fatal state")
    backoff_base_sec: float = _s(0.5, "first retry delay after a failed load (doubles each time)")
    backoff_max_sec: float = _s(30.0, "longest retry delay after failed loads")
    stop_grace_sec: float = _s(3.0, "wait after Shutdown, then after SIGTERM, before escalating; and how long a "
                                    "stopping daemon lets live sessions finish the utterances in flight")
    cancel_grace_sec: float = _s(60.0, "a cancelled job may take this long to stop before its worker is killed")
    stop_max_sec: float = _s(3600.0, "longest a stopping daemon keeps finishing accepted work before it kills it")
    max_connections: int = _s(1024, "open connections at most; past it the oldest idle one is closed (or, when "
                                    "all are in a request, the new one gets 503)")
    read_timeout_sec: float = _s(30.0, "a request's headers must arrive, and its body may not stall, within this")
    shared_group: str = _s("", "members of this group may use a group-accessible socket (the system-wide "
                               "install sets hasr); load, unload and stop stay the owner's and root's")
    allowed_origins: str = _s("", "browser origins (comma-separated, e.g. http://localhost:3000) whose pages may "
                                  "call the optional TCP socket; any other Origin gets 403 ('' = none)",
                              since="0.2.0")
    max_audio_sec: float = _s(4 * 3600.0, "longest audio accepted")
    max_upload_mb: float = _s(512.0, "largest upload accepted")
    max_queued_audio_mb: float = _s(1024.0, "decoded audio (16 kHz float32: 225 MB an hour) that requests waiting "
                                            "for a worker may hold together; past it '503 queue full' (a request "
                                            "alone always gets in)", since="0.3.0")
    max_segment_sec: float = _s(60.0, "long audio is split at silences into segments of at most this")
    gpu: str = _s("", "GPU index or UUID for the worker ('' = let CUDA choose)")
    need_vram_mb: int = _s(0, "wait for this much free VRAM before a GPU load (0 = don't wait)")
    vram_wait_sec: float = _s(180.0, "longest wait for free VRAM")
    fw_model: str = _s("", "faster-whisper model: a directory or a name in the local cache ('' = embedded)")
    r2t2_model: str = _s("", "R2T2 weights: a directory, or a Hugging Face repo id in the local cache ('' = "
                             "netease-youdao/Confucius4-R2T2 from the cache)")
    fw_device: str = _s("auto", "faster-whisper device: auto | cpu | cuda")
    cublas_from_cuda13: bool = _s(False, "hosts with only CUDA 13: give CTranslate2 (faster-whisper) CUDA 13's "
                                         "cuBLAS under the CUDA 12 names it opens (a private link directory first "
                                         "on the worker's LD_LIBRARY_PATH; docs/GPU.md)", since="0.2.0")
    fw_compute_type: str = _s("default", "faster-whisper compute type (default: float16 on GPU, int8 on CPU)")
    language: str = _s("", "default language ('' = detect: R2T2 and faster-whisper each detect it)")
    whisper_batch: int = _s(-1, "whisper engine: VAD clips decoded together (faster on long files, deterministic); "
                                 "-1 = by device (2 on the CPU, 16 on CUDA: measured, docs/GPU.md); 0 = one after "
                                 "another")
    whisper_segment_sec: float = _s(60.0, "whisper engine: long audio is cut at silences into pieces of at most "
                                          "this, VAD'd one at a time while the clips before are decoded (bounds "
                                          "the worker's memory)")
    v2c_final: str = _s("thread", "when faster-whisper re-transcribes a closed sentence window: thread (while the "
                                  "draft goes on) | inline (the draft waits) | after (the seed's order); same result")
    draft: str = _s("r2t2", "hybrid engine's draft: r2t2 | scripted (tests: the fake engine's HASR_FAKE_SCRIPT "
                            "revealed over the audio, with real faster-whisper windows, on CPU)")
    zh_script: str = _s("simplified", "Chinese script for a plain 'zh': simplified | traditional | as-is (what "
                                      "the model wrote); zh-TW / zh-HK / zh-Hant and zh-CN / zh-Hans ask per request",
                        since="0.2.0")
    max_line_width: int = _s(0, "subtitles: characters a line at most (0 = by language: 42 Latin, 16 CJK)",
                             since="0.2.0")
    max_line_count: int = _s(2, "subtitles: lines a cue at most", since="0.2.0")
    max_cue_sec: float = _s(7.0, "subtitles: longest a cue stays on screen (a longer sentence is cut at a clause "
                                 "or a word)", since="0.2.0")
    debug: bool = _s(False, "show tracebacks and debug logs")

    @classmethod
    def describe(cls) -> list[Setting]:
        return [Setting(f.name, f.default, f.metadata.get("help", ""), f.metadata.get("since", "0.1.0"),
                        f.type if isinstance(f.type, str) else f.type.__name__) for f in fields(cls)]

    def socket_path(self) -> str:
        return self.socket or default_socket()


def env_name(name: str) -> str:
    return "HASR_" + name.upper()


def _coerce(kind: Any, raw: Any, name: str) -> Any:
    if isinstance(raw, str):
        raw = raw.strip()
    try:
        if kind is bool or kind == "bool":
            if isinstance(raw, bool):
                return raw
            if str(raw).lower() in ("1", "true", "yes", "on"):
                return True
            if str(raw).lower() in ("0", "false", "no", "off", ""):
                return False
            raise ValueError(raw)
        if kind is int or kind == "int":
            return int(raw)
        if kind is float or kind == "float":
            return float(raw)
        return str(raw)
    except ValueError:
        raise ConfigError(f"{env_name(name)}={raw!r} is not a valid {getattr(kind, '__name__', kind)}") from None


class ConfigError(ValueError):
    """A setting has a value of the wrong type."""


TABLES = ("tray",)  # config.toml tables that belong to other hasr programs

RETIRED = {"rtf_budget": "stall_sec", "budget_min_sec": "stall_sec", "budget_margin_sec": "stall_sec"}
"""Settings that are gone, and what replaced them (jobs stop only when they stop making progress)."""

DEPRECATED = {"max_concurrent": "worker_parallel"}
"""Old names still read, for old configs: the value becomes the new setting's (unless that one is set in the same
place or the environment), with a warning."""

NOT_NEGATIVE = ("worker_parallel", "worker_batch", "worker_streams")  # counts where 0 means "by device"


def suggest(key: str, known: Mapping[str, Any], as_env: bool = False) -> str:
    """ "; did you mean X?" for a mistyped setting, or what replaced a retired one."""
    import difflib

    if key in RETIRED:
        return f": it is no longer used; see {env_name(RETIRED[key]) if as_env else RETIRED[key]}"
    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    if not close:
        return " (`hasrctl doctor` lists every setting)"
    return f"; did you mean {env_name(close[0]) if as_env else repr(close[0])}?"


# HASR_* variables that are not settings: the command line's option defaults and the test knobs.
NOT_SETTINGS = ("HASR_FAKE_", "HASR_TEST_", "HASR_EVAL_", "HASR_DOCTOR_", "HASR_TRAY_", "HASR_SETUP_", "HASR_STATUS_",
                "HASR_AUTOSTART", "HASR_BESIDE", "HASR_FORCE", "HASR_FORMAT", "HASR_OUTPUT", "HASR_PROGRESS",
                "HASR_QUIET", "HASR_STREAM", "HASR_MODEL", "HASR_PROMPT", "HASR_WORD_TIMESTAMPS", "HASR_TRANSLATE",
                "HASR_SPEAKERS", "HASR_SPEAKER_NAMES",
                "HASR_KEEP_ALIVE", "HASR_STOP_WAIT_SEC", "HASR_STOP_NOW", "HASR_UNITS_DIR", "HASR_PS_",
                "HASR_UNLOAD_", "HASR_PULL_")


# What each of NOT_SETTINGS is, for docs/CONFIG.md (a test checks that every prefix has a line here).
NOT_SETTINGS_DOC: dict[str, str] = {
    "HASR_FAKE_": "the fake engine's behaviour in tests (HASR_FAKE_SCRIPT, HASR_FAKE_RTF, HASR_FAKE_LOAD_SEC ...)",
    "HASR_TEST_": "knobs of the test suite",
    "HASR_EVAL_": "`hasrctl eval` option defaults (HASR_EVAL_METRIC, HASR_EVAL_HOMOPHONES, HASR_EVAL_JSON ...)",
    "HASR_DOCTOR_": "`hasrctl doctor` option defaults (HASR_DOCTOR_QUICK, HASR_DOCTOR_JSON)",
    "HASR_TRAY_": "hasr-tray's own settings (the [tray] table below)",
    "HASR_SETUP_": "`hasrctl setup` option defaults (HASR_SETUP_TRAY, HASR_SETUP_FORCE)",
    "HASR_STATUS_": "`hasrctl status` option defaults (HASR_STATUS_JSON, HASR_STATUS_WATCH)",
    "HASR_AUTOSTART": "hasrctl: start a daemon when none answers (HASR_AUTOSTART, HASR_AUTOSTART_TIMEOUT_SEC)",
    "HASR_BESIDE": "`hasrctl transcribe --beside`: write each transcript next to its audio file",
    "HASR_FORCE": "`hasrctl transcribe --force`: overwrite existing output files",
    "HASR_FORMAT": "`hasrctl transcribe --format`",
    "HASR_OUTPUT": "`hasrctl transcribe --output`",
    "HASR_PROGRESS": "`hasrctl transcribe --progress`",
    "HASR_QUIET": "`hasrctl transcribe --quiet`",
    "HASR_STREAM": "`hasrctl transcribe --stream`",
    "HASR_MODEL": "`hasrctl transcribe --model` and `hasrctl load --model` (HASR_MODELS_JSON: `hasrctl models --json`)",
    "HASR_PROMPT": "`hasrctl transcribe --prompt`",
    "HASR_WORD_TIMESTAMPS": "`hasrctl transcribe --word-timestamps`",
    "HASR_SPEAKERS": "`hasrctl transcribe --speakers`",
    "HASR_SPEAKER_NAMES": "`hasrctl transcribe --speaker-names`",
    "HASR_TRANSLATE": "`hasrctl transcribe --translate`",
    "HASR_KEEP_ALIVE": "`hasrctl load --keep-alive`",
    "HASR_STOP_WAIT_SEC": "`hasrctl stop`: how long to wait for the daemon to exit",
    "HASR_STOP_NOW": "`hasrctl stop --now`: stop at once, failing what runs and waits",
    "HASR_UNITS_DIR": "`hasrctl setup --units-dir`",
    "HASR_PS_": "`hasrctl ps` option defaults (HASR_PS_JSON)",
    "HASR_UNLOAD_": "`hasrctl unload` option defaults (HASR_UNLOAD_MODEL)",
    "HASR_PULL_": "`hasrctl pull` option defaults (HASR_PULL_NAME: `--name`, an imported directory's name)",
}


@dataclass(frozen=True)
class TrayKey:
    """A key of the [tray] table (hasr-tray reads it, tray/settings.py; a test checks the two agree)."""

    name: str
    default: Any
    help: str
    since: str = "0.1.0"


TRAY_KEYS = (
    TrayKey("format", "txt", "transcript format written next to each dropped file: txt | srt | vtt | json"),
    TrayKey("poll_sec", 3.0, "while the daemon is quiet, probe /health this often (seconds; at least 0.1)"),
    TrayKey("autostart", True, "start hasrd for a transcription when no daemon and no systemd socket exist"),
)


def toml_value(value: Any) -> str:
    """A default as it would be written in config.toml."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(value)


def unknown_env(env: Mapping[str, str]) -> list[str]:
    """One line for each HASR_* variable that is no setting (a typo, or a retired one), with the closest name.
    Not an error (the environment is shared with hasrctl and the tests' knobs): hasrd logs these, doctor warns."""
    known = {f.name: f.type for f in fields(Settings)}
    out = []
    for name in sorted(env):
        if not name.startswith("HASR_") or name.startswith(NOT_SETTINGS):
            continue
        key = name[5:].lower()
        if key not in known and key not in DEPRECATED:  # a deprecated name is read, and load() warns
            out.append(f"{name} is not a setting{suggest(key, known, as_env=True)}")
    return out


def config_file() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "hasr" / "config.toml"


def read_toml(path: Path) -> dict[str, Any]:
    """The whole config file as a dict ({} when absent); ConfigError when it is not valid TOML."""
    if not path.is_file():
        return {}
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    try:
        with open(path, "rb") as f:
            return dict(tomllib.load(f))
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: {e}") from None


_warned: set[str] = set()


def _warn_deprecated(line: str) -> None:
    """Log a deprecated name once per process (the CLI, the tray and the daemon's spawns load settings often)."""
    if line not in _warned:
        _warned.add(line)
        logging.getLogger("hasrd.config").warning("%s", line)


def load(env: Mapping[str, str] | None = None, toml_path: Path | None = None, **overrides: Any) -> Settings:
    """Build Settings from defaults, the TOML file, the environment and explicit overrides (in that order)."""
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    known = {f.name: f.type for f in fields(Settings)}
    path = toml_path or config_file()
    toml = read_toml(path)
    for key, raw in toml.items():
        if key in TABLES and isinstance(raw, dict):
            continue  # another program's settings ([tray]: hasr-tray reads them)
        if key in DEPRECATED:
            new = DEPRECATED[key]
            _warn_deprecated(f"{path}: {key!r} is deprecated; use {new!r}")
            if new not in toml:
                values[new] = _coerce(known[new], raw, key)
            continue
        if key not in known:
            raise ConfigError(f"{path}: unknown setting {key!r}{suggest(key, known)}")
        values[key] = _coerce(known[key], raw, key)
    for old, new in DEPRECATED.items():
        raw = env.get(env_name(old))
        if raw is not None and raw != "":
            _warn_deprecated(f"{env_name(old)} is deprecated; use {env_name(new)}")
            values[new] = _coerce(known[new], raw, old)  # HASR_<new>, when set, wins just below
    for name, kind in known.items():
        raw = env.get(env_name(name))
        if raw is not None and raw != "":
            values[name] = _coerce(kind, raw, name)
    for name, val in overrides.items():
        if val is not None:
            values[name] = val
    settings = Settings(**values)
    for name in NOT_NEGATIVE:
        if getattr(settings, name) < 0:
            raise ConfigError(f"{env_name(name)}={getattr(settings, name)} is not valid: use 0 (chosen by device) "
                              f"or a positive number")
    for name, allowed in CHOICES.items():
        value = getattr(settings, name)
        if value not in allowed:
            raise ConfigError(f"{env_name(name)}={value!r} is not valid; choose one of {', '.join(allowed)}")
    return settings


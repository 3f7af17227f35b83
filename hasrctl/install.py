"""``hasrctl setup [--uninstall]``: the user units, the tray's desktop entries, and systemd enabling the socket.

The units come from the repository's systemd/ directory (or an installed share/hasr/systemd) with ExecStart
pointed at THIS installation's daemon. Every file written is recorded with its sha256 in a manifest, so that
a second run is a no-op, a file someone else put there is never replaced without --force, and --uninstall
removes exactly what setup installed (directories it created included) and nothing a person changed since.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import click

from hasrctl import discovery
from hasrctl.client import EXIT_OK, CliError, Client, UsageError, peer_pid, probe, wait_gone
from hasrctl.common import say
from hasrctl.output import write

TRAY_ENTRY = """[Desktop Entry]
Type=Application
Name=hasr
GenericName=Speech to text
Comment=Local speech-to-text: drop audio files on the window to transcribe them
Exec={exec}
Icon=audio-input-microphone
Terminal=false
Categories=AudioVideo;Audio;Utility;
Keywords=transcribe;speech;subtitles;asr;
StartupNotify=false
"""


def _xdg(var: str, fallback: str) -> Path:
    return Path(os.environ.get(var) or Path.home() / fallback)


def manifest_path() -> Path:
    return _xdg("XDG_DATA_HOME", ".local/share") / "hasr" / "setup-manifest.json"


def _repo() -> Path:
    return Path(__file__).resolve().parent.parent


def find_source(rel: str, names: list[str], override: str | None) -> Path | None:
    """The first directory holding all ``names``: --units-dir, the repository, then share/hasr under prefixes."""
    dirs = [Path(override)] if override else []
    dirs += [_repo() / rel, Path(sys.prefix) / "share" / "hasr" / rel, Path("/usr/share/hasr") / rel]
    return next((d for d in dirs if all((d / n).is_file() for n in names)), None)


def _unit_quote(argv: list[str]) -> str:
    """An ExecStart command line: specifiers (%) and variables ($) escaped, blanks double-quoted."""
    out = []
    for a in argv:
        a = a.replace("%", "%%").replace("$", "$$")
        if not re.fullmatch(r"[\w@%+=:,./-]+", a):
            a = '"' + a.replace("\\", "\\\\").replace('"', '\\"') + '"'
        out.append(a)
    return " ".join(out)


def _desktop_quote(argv: list[str]) -> str:
    """An Exec= command line of the Desktop Entry spec (reserved characters quoted, % doubled)."""
    out = []
    for a in argv:
        a = a.replace("%", "%%")
        if re.fullmatch(r"[\w@+=:,./-]+", a):
            out.append(a)
        else:
            out.append('"' + re.sub(r'(["`$\\])', r"\\\1", a) + '"')
    return " ".join(out)


def daemon_command() -> tuple[list[str], str | None]:
    """ExecStart for this installation, and a PYTHONPATH when hasrd is only importable from its checkout."""
    cmd = discovery.hasrd_command()
    if len(cmd) == 1:
        return cmd, None
    import hasrd

    root = str(Path(hasrd.__file__).resolve().parent.parent)
    return cmd, None if root.endswith(("site-packages", "dist-packages")) else root


def render_service(text: str) -> str:
    cmd, pythonpath = daemon_command()
    out, done = [], False
    for line in text.splitlines():
        m = re.match(r"^ExecStart=([-@:+!]*)(\S+)(.*)$", line)
        if m and not done:
            out.append(f"ExecStart={m.group(1)}{_unit_quote(cmd)}{m.group(3)}")
            if pythonpath:
                value = pythonpath.replace("%", "%%").replace("\\", "\\\\").replace('"', '\\"')
                out.append(f'Environment="PYTHONPATH={value}"')
            done = True
        else:
            out.append(line)
    if not done:
        raise UsageError("hasrd.service has no ExecStart= line to point at this installation")
    return "\n".join(out) + "\n"


def tray_exec() -> str:
    sibling = Path(sys.executable).parent / "hasr-tray"
    if sibling.is_file():
        return _desktop_quote([str(sibling)])
    return _desktop_quote([sys.executable, "-m", "tray.app"])


def render_desktop(text: str | None, autostart: bool) -> str:
    body = text if text is not None else TRAY_ENTRY.format(exec=tray_exec())
    body = re.sub(r"(?m)^Exec=\S+", lambda _m: "Exec=" + tray_exec(), body, count=1)
    if autostart and "X-GNOME-Autostart-enabled" not in body:
        body = body.rstrip("\n") + "\nX-GNOME-Autostart-enabled=true\n"
    return body


def planned_files(units_dir: str | None, tray: bool) -> dict[Path, str]:
    src = find_source("systemd", ["hasrd.socket", "hasrd.service"], units_dir)
    if src is None:
        raise UsageError("cannot find hasrd.socket and hasrd.service (looked in the repository's systemd/ and "
                         "share/hasr/systemd); point --units-dir at them")
    unit_dir = _xdg("XDG_CONFIG_HOME", ".config") / "systemd" / "user"
    files = {unit_dir / "hasrd.socket": (src / "hasrd.socket").read_text(),
             unit_dir / "hasrd.service": render_service((src / "hasrd.service").read_text())}
    if tray:
        pkg = find_source("packaging", ["hasr-tray.desktop"], None)
        entry = (pkg / "hasr-tray.desktop").read_text() if pkg else None
        files[_xdg("XDG_DATA_HOME", ".local/share") / "applications" / "hasr-tray.desktop"] = \
            render_desktop(entry, autostart=False)
        files[_xdg("XDG_CONFIG_HOME", ".config") / "autostart" / "hasr-tray.desktop"] = \
            render_desktop(entry, autostart=True)
    return files


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def read_manifest() -> dict[str, Any]:
    try:
        return dict(json.loads(manifest_path().read_text()))
    except FileNotFoundError:
        return {"files": {}, "dirs": []}
    except (OSError, ValueError) as e:
        raise CliError(f"{manifest_path()} is unreadable ({e}); remove it to start over") from None


def _mkdirs(path: Path, created: list[str]) -> None:
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        d.mkdir(mode=0o755)
        created.append(str(d))


def _systemctl(*args: str) -> None:
    try:
        res = discovery.systemctl(*args)
    except (OSError, Exception) as e:  # noqa: BLE001 - FileNotFoundError, TimeoutExpired
        raise CliError(f"systemctl --user {' '.join(args)}: {e}") from None
    if res.returncode != 0:
        raise CliError(f"systemctl --user {' '.join(args)} failed: {(res.stderr or res.stdout).strip()}")


def install(units_dir: str | None, tray: bool, force: bool) -> None:
    files = planned_files(units_dir, tray)
    manifest = read_manifest()
    owned: dict[str, str] = manifest["files"]
    for path, text in files.items():
        if path.exists() and str(path) not in owned and path.read_text(errors="replace") != text and not force:
            raise UsageError(f"{path} exists and was not installed by hasrctl setup (use --force to replace it)")
    if not discovery.user_manager_running():
        raise CliError("no systemd user manager is running (nothing at $XDG_RUNTIME_DIR/systemd/private): "
                       "log in through a systemd session, or keep using hasrctl's autostart")
    created: list[str] = list(manifest.get("dirs", []))
    for path, text in files.items():
        old = path.read_text(errors="replace") if path.exists() else None
        _mkdirs(path.parent, created)
        if old != text:
            write(path, text, force=True)
        owned[str(path)] = _sha(text)
        click.echo(f"{'unchanged' if old == text else 'updated' if old is not None else 'installed'}  {path}")
    wants = _xdg("XDG_CONFIG_HOME", ".config") / "systemd" / "user" / "sockets.target.wants"
    if not wants.exists() and str(wants) not in created:
        created.append(str(wants))  # `systemctl enable` creates it; uninstall removes it when empty
    _mkdirs(manifest_path().parent, created)
    write(manifest_path(), json.dumps({"files": owned, "dirs": created}, indent=2) + "\n", force=True)
    sock = discovery.default_socket()
    if probe(sock) and discovery.systemctl("is-active", "hasrd.socket").stdout.strip() != "active":
        # A daemon hasrctl started holds the path: let it finish so the socket unit can take the path over.
        say("stopping the hasrd that hasrctl started; systemd's socket takes over")
        pid = peer_pid(sock)
        Client(sock).post("/api/stop", timeout=30.0)
        if pid is not None and not wait_gone(pid, 60.0):
            raise CliError(f"the running hasrd (pid {pid}) did not exit; stop it and run setup again")
    _systemctl("daemon-reload")
    _systemctl("enable", "--now", "hasrd.socket")
    click.echo(f"enabled hasrd.socket: systemd listens on {sock} and starts hasrd on the first request")


def uninstall(force: bool) -> None:
    manifest = read_manifest()
    if not manifest["files"]:
        click.echo(f"nothing to uninstall (no {manifest_path()})")
        return
    if discovery.user_manager_running():
        for args in (("disable", "--now", "hasrd.socket"), ("stop", "hasrd.service")):
            res = discovery.systemctl(*args)
            if res.returncode != 0:
                say(f"systemctl --user {' '.join(args)}: {(res.stderr or res.stdout).strip()}")
    kept = {}
    for name, sha in manifest["files"].items():
        path = Path(name)
        if not path.exists():
            continue
        if _sha(path.read_text(errors="replace")) != sha and not force:
            say(f"{path} was changed since setup: left in place (--force removes it)")
            kept[name] = sha
            continue
        path.unlink()
        click.echo(f"removed  {path}")
    if kept:
        write(manifest_path(), json.dumps({"files": kept, "dirs": []}, indent=2) + "\n", force=True)
    else:
        manifest_path().unlink()
        for d in sorted(manifest.get("dirs", []), key=len, reverse=True):
            try:
                os.rmdir(d)  # only the directories setup created, and only when empty
            except OSError:
                pass
    if discovery.user_manager_running():
        discovery.systemctl("daemon-reload")


@click.command(epilog="Needs a running systemd user manager (a normal desktop login has one).")
@click.option("--uninstall", "remove", is_flag=True, help="Remove what setup installed (disables the socket).")
@click.option("--tray/--no-tray", default=True, show_default=True, envvar="HASR_SETUP_TRAY", show_envvar=True,
              help="Also install the tray's desktop entry and autostart entry.")
@click.option("--units-dir", metavar="DIR", envvar="HASR_UNITS_DIR", show_envvar=True,
              help="Take hasrd.socket and hasrd.service from DIR [default: the installation's].")
@click.option("--force", is_flag=True, envvar="HASR_FORCE", show_envvar=True,
              help="Replace files setup did not install; on --uninstall remove files changed since.")
def setup(remove: bool, tray: bool, units_dir: str | None, force: bool) -> int:
    """Install the systemd user units (socket activation) and the tray's desktop entries; idempotent.

    \b
    Afterwards systemd listens on $XDG_RUNTIME_DIR/hasr/hasrd.sock and starts hasrd on the first request;
    hasrd exits again when idle. Files go to ~/.config/systemd/user, ~/.local/share/applications and
    ~/.config/autostart; what was installed is listed in ~/.local/share/hasr/setup-manifest.json.
    """
    if remove:
        uninstall(force)
    else:
        install(units_dir, tray, force)
    return EXIT_OK

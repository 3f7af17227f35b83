"""``hasrctl setup [--uninstall]``: the user units, the tray's desktop entries and icons, and systemd enabling
the socket.

The units, entries and icons ship inside the package (``hasrctl/data``, read with importlib.resources; in a
checkout those are links to the repository's systemd/ and packaging/), and the service's ExecStart is pointed
at THIS installation's daemon. Every file written is recorded with its sha256 in a manifest, so that a second
run is a no-op, a file someone else put there is never replaced without --force, and --uninstall removes
exactly what setup installed (directories it created included) and nothing a person changed since.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import sys
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from hasrctl import discovery
from hasrctl.client import EXIT_OK, CliError, Client, UsageError, peer_pid, probe, wait_gone
from hasrctl.common import say
from hasrctl.output import write

if TYPE_CHECKING:
    from importlib.abc import Traversable

    Source = Path | Traversable

UNITS = ("hasrd.socket", "hasrd.service")
REINSTALL = "reinstall hasr (pip install --force-reinstall hasr)"


def _xdg(var: str, fallback: str) -> Path:
    return Path(os.environ.get(var) or Path.home() / fallback)


def manifest_path() -> Path:
    return _xdg("XDG_DATA_HOME", ".local/share") / "hasr" / "setup-manifest.json"


def shipped(kind: str) -> Traversable:
    """``hasrctl/data/<kind>`` (systemd or packaging) of this installation."""
    return resources.files("hasrctl") / "data" / kind


def unit_source(units_dir: str | None) -> Source:
    """Where hasrd.socket and hasrd.service come from: --units-dir, else the installation's own."""
    src: Source = Path(units_dir) if units_dir else shipped("systemd")
    missing = [n for n in UNITS if not (src / n).is_file()]
    if missing and units_dir:
        raise UsageError(f"--units-dir {units_dir} has no {' or '.join(missing)}")
    if missing:
        raise UsageError(f"this installation lacks its unit files ({', '.join(missing)} in {src}): {REINSTALL}, "
                         f"or point --units-dir at a directory holding them")
    return src


def _packaging(*parts: str) -> Traversable:
    src = shipped("packaging")
    for part in parts:
        src = src / part
    if not src.is_file():
        raise UsageError(f"this installation lacks {'/'.join(parts)} (looked in {shipped('packaging')}): {REINSTALL}")
    return src


def icons() -> Iterator[tuple[str, Traversable]]:
    """(``SIZE/apps/NAME``, file) for every icon under packaging/icons/hicolor."""
    root = shipped("packaging") / "icons" / "hicolor"
    if not root.is_dir():
        raise UsageError(f"this installation lacks its icons ({root}): {REINSTALL}")
    for size in sorted(root.iterdir(), key=lambda t: t.name):
        apps = size / "apps"
        if size.is_dir() and apps.is_dir():
            for icon in sorted(apps.iterdir(), key=lambda t: t.name):
                if icon.is_file() and icon.name.startswith("hasr") and icon.name.endswith((".png", ".svg")):
                    yield f"{size.name}/apps/{icon.name}", icon


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


def render_desktop(text: str) -> str:
    """A desktop entry with Exec= pointed at this installation's hasr-tray (its arguments kept)."""
    body, n = re.subn(r"(?m)^Exec=\S+", lambda _m: "Exec=" + tray_exec(), text, count=1)
    if not n:
        raise UsageError("the tray's desktop entry has no Exec= line to point at this installation")
    return body


def autostart_path() -> Path:
    return _xdg("XDG_CONFIG_HOME", ".config") / "autostart" / "hasr-tray.desktop"


def tray_cannot_run() -> str:
    """Why this installation's ``hasr-tray`` would fail at start (traydeps: Tk for Python, the tray extra),
    empty when it can run. The entries start it with this interpreter, so asking here is asking it."""
    from hasrctl import traydeps

    lacking = traydeps.missing()
    return traydeps.message(lacking) if lacking else ""


def planned_files(units_dir: str | None, tray: bool, autostart: bool = True) -> dict[Path, bytes]:
    """Every file setup writes, with its content (the tray's autostart entry only with ``autostart``)."""
    src = unit_source(units_dir)
    unit_dir = _xdg("XDG_CONFIG_HOME", ".config") / "systemd" / "user"
    files = {unit_dir / "hasrd.socket": (src / "hasrd.socket").read_bytes(),
             unit_dir / "hasrd.service": render_service((src / "hasrd.service").read_text()).encode()}
    if tray:
        data = _xdg("XDG_DATA_HOME", ".local/share")
        files[data / "applications" / "hasr-tray.desktop"] = \
            render_desktop(_packaging("hasr-tray.desktop").read_text()).encode()
        if autostart:
            files[autostart_path()] = render_desktop(_packaging("autostart", "hasr-tray.desktop").read_text()).encode()
        for rel, icon in icons():  # Icon=hasr in both entries; the tray's state icons beside it
            files[data / "icons" / "hicolor" / rel] = icon.read_bytes()
    return files


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read(path: Path) -> bytes | None:
    """The content of an installed file, None when there is none; never through a symbolic link."""
    if path.is_symlink():
        raise UsageError(f"{path} is a symbolic link (to {os.readlink(path)}): setup neither replaces links nor "
                         f"writes through them; remove the link and run setup again")
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise UsageError(f"{path} is a directory: remove it and run setup again") from None


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


def icon_root() -> Path:
    """Where the tray's icons go; setup reports them as one line, not one per size and state."""
    return _xdg("XDG_DATA_HOME", ".local/share") / "icons" / "hicolor"


def icons_line(counts: dict[str, int], root: Path) -> str:
    """``installed  72 icons under ~/.local/share/icons/hicolor`` (or ``installed 2, unchanged 70 icons ...``)."""
    order = ("installed", "updated", "unchanged", "removed")
    parts = [f"{what} {counts[what]}" for what in order if counts.get(what)]
    if len(parts) == 1:
        what, n = parts[0].split()
        return f"{what}  {n} icon{'s' if n != '1' else ''} under {root}"
    total = sum(counts.values())
    return f"{', '.join(parts)} of {total} icons under {root}"


def no_manager_message() -> str:
    """Why setup cannot enable anything, with the real path it looked at (not a literal $XDG_RUNTIME_DIR)."""
    where = discovery.runtime_dir() / "systemd" / "private"
    if os.environ.get("XDG_RUNTIME_DIR"):
        return (f"no systemd user manager is running (nothing at {where}): log in through a systemd session, or "
                f"keep using hasrctl's autostart")
    login = Path(f"/run/user/{os.getuid()}")
    hint = (f"one runs for you there: export XDG_RUNTIME_DIR={login} and run setup again"
            if (login / "systemd" / "private").exists() else
            f"a systemd login session sets it (to {login}); log in through one, or keep using hasrctl's autostart")
    return (f"no systemd user manager found: XDG_RUNTIME_DIR is not set, so setup looked for {where} and hasrd "
            f"would listen on {discovery.default_socket()}; {hint}")


def drop_autostart(owned: dict[str, str], why: str) -> None:
    """The tray cannot run: say so, and take back an autostart entry an earlier setup installed (unchanged
    since), which would fail at every login; one a person wrote or changed is left alone."""
    path = autostart_path()
    say(f"skipped the tray's autostart entry: {why}; then run hasrctl setup again")
    sha = owned.get(str(path))
    if sha is None or path.is_symlink() or not path.is_file():
        return
    if _sha(path.read_bytes()) != sha:
        say(f"{path} was changed since setup: left in place")
        return
    path.unlink()
    del owned[str(path)]
    click.echo(f"removed  {path}")


def install(units_dir: str | None, tray: bool, force: bool) -> None:
    why_not = tray_cannot_run() if tray else ""
    files = planned_files(units_dir, tray, autostart=not why_not)
    manifest = read_manifest()
    owned: dict[str, str] = manifest["files"]
    current = {path: _read(path) for path in files}
    for path, data in files.items():
        old = current[path]
        if old is not None and old != data and not force and (
                str(path) not in owned or _sha(old) != owned[str(path)]):
            why = "was changed since setup installed it" if str(path) in owned else \
                "exists and was not installed by hasrctl setup"
            raise UsageError(f"{path} {why} (use --force to replace it)")
    if not discovery.user_manager_running():
        raise CliError(no_manager_message())
    if why_not:
        drop_autostart(owned, why_not)
    created: list[str] = list(manifest.get("dirs", []))
    icon_dir = icon_root()
    done: dict[str, int] = {}
    for path, data in files.items():
        old = current[path]
        _mkdirs(path.parent, created)
        if old != data:
            write(path, data, force=True)
        owned[str(path)] = _sha(data)
        what = "unchanged" if old == data else "updated" if old is not None else "installed"
        if path.is_relative_to(icon_dir):
            done[what] = done.get(what, 0) + 1
        else:
            click.echo(f"{what}  {path}")
    if done:
        click.echo(icons_line(done, icon_dir))
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
    removed_icons = 0
    for name, sha in manifest["files"].items():
        path = Path(name)
        if not path.exists() or path.is_symlink():
            continue
        if _sha(path.read_bytes()) != sha and not force:
            say(f"{path} was changed since setup: left in place (--force removes it)")
            kept[name] = sha
            continue
        path.unlink()
        if path.is_relative_to(icon_root()):
            removed_icons += 1
        else:
            click.echo(f"removed  {path}")
    if removed_icons:
        click.echo(icons_line({"removed": removed_icons}, icon_root()))
    if kept:
        write(manifest_path(), json.dumps({"files": kept, "dirs": []}, indent=2) + "\n", force=True)
    else:
        manifest_path().unlink()
        for d in sorted(manifest.get("dirs", []), key=len, reverse=True):
            with contextlib.suppress(OSError):
                os.rmdir(d)  # only the directories setup created, and only when empty
    if discovery.user_manager_running():
        discovery.systemctl("daemon-reload")


@click.command(epilog="Needs a running systemd user manager (a normal desktop login has one).")
@click.option("--uninstall", "remove", is_flag=True, help="Remove what setup installed (disables the socket).")
@click.option("--tray/--no-tray", default=True, show_default=True, envvar="HASR_SETUP_TRAY", show_envvar=True,
              help="Also install the tray's desktop entry, autostart entry (only when the tray can run here: "
                   "Tk for Python and the tray extra) and icons.")
@click.option("--units-dir", metavar="DIR", envvar="HASR_UNITS_DIR", show_envvar=True,
              help="Take hasrd.socket and hasrd.service from DIR [default: the ones shipped with hasr].")
@click.option("--force", is_flag=True, envvar="HASR_SETUP_FORCE", show_envvar=True,
              help="Replace files setup did not install; on --uninstall remove files changed since.")
def setup(remove: bool, tray: bool, units_dir: str | None, force: bool) -> int:
    """Install the systemd user units (socket activation) and the tray's desktop entries; idempotent.

    \b
    Afterwards systemd listens on $XDG_RUNTIME_DIR/hasr/hasrd.sock (the last line names the real path)
    and starts hasrd on the first request; hasrd exits again when idle. Files go to ~/.config/systemd/user,
    ~/.local/share/applications, ~/.local/share/icons/hicolor and ~/.config/autostart; what was installed
    is listed in ~/.local/share/hasr/setup-manifest.json.
    """
    if remove:
        uninstall(force)
    else:
        install(units_dir, tray, force)
    return EXIT_OK

"""What ``hasrctl setup`` installs comes from the package itself (hasrctl/data), so that it works after a plain
``pip install`` (no checkout); and what it installs: units, desktop entries, the autostart entry, the icons.

The systemd side of setup (enable, socket activation, take-over) is tests/test_cli_setup.py; here systemctl is
a stand-in, so these run anywhere.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cliutil import REPO, cli_env, hasrctl, show

ICONS = sorted(str(p.relative_to(REPO / "packaging" / "icons" / "hicolor"))
               for p in (REPO / "packaging" / "icons" / "hicolor").glob("*/apps/hasr*"))


def test_a_build_carries_the_units_entries_and_icons_and_setup_finds_them_there(short_tmp: str) -> None:
    """Build the packages as the wheel gets them (setuptools build_py: the package files and their package data,
    copied from behind hasrctl/data's links), then plan setup from that build alone, outside the checkout."""
    src = Path(short_tmp, "src")
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "hasrd", "hasrctl", "tray", "systemd", "packaging"):
        copy = shutil.copytree if (REPO / name).is_dir() else shutil.copy2
        copy(REPO / name, src / name, **({"symlinks": True} if copy is shutil.copytree else {}))  # type: ignore
    assert (src / "hasrctl" / "data" / "systemd").is_symlink()  # the checkout keeps one copy: links
    out = Path(short_tmp, "build")
    res = subprocess.run([sys.executable, "-c", "import setuptools; setuptools.setup()", "-q", "build_py",
                          "-d", str(out)], cwd=src, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    data = out / "hasrctl" / "data"
    shipped = sorted(str(p.relative_to(data)) for p in data.rglob("*") if p.is_file())
    assert shipped == sorted(["systemd/hasrd.socket", "systemd/hasrd.service", "systemd/system/hasrd.socket",
                              "systemd/system/hasrd.service", "packaging/hasr-tray.desktop",
                              "packaging/autostart/hasr-tray.desktop"]
                             + [f"packaging/icons/hicolor/{i}" for i in ICONS])
    assert not any(p.is_symlink() for p in data.rglob("*"))  # real files in the wheel
    assert len(ICONS) > 20 and "48x48/apps/hasr.png" in ICONS and "scalable/apps/hasr.svg" in ICONS

    code = ("import json, hasrctl\nfrom hasrctl import install\n"
            "planned = install.planned_files(None, True)\n"
            "print(json.dumps([hasrctl.__file__, {str(k): len(v) for k, v in planned.items()}]))")
    env = cli_env(short_tmp, PYTHONPATH=str(out), HOME=short_tmp)
    res = subprocess.run([sys.executable, "-c", code], cwd="/", env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    where, planned = json.loads(res.stdout)
    assert where == str(out / "hasrctl" / "__init__.py")  # the build, not the checkout
    cfg, share = Path(env["XDG_CONFIG_HOME"]), Path(env["XDG_DATA_HOME"])
    assert str(cfg / "systemd/user/hasrd.socket") in planned and str(cfg / "autostart/hasr-tray.desktop") in planned
    assert planned[str(share / "icons/hicolor/48x48/apps/hasr.png")] == (REPO / "packaging/icons/hicolor/48x48/apps/"
                                                                        "hasr.png").stat().st_size


# --- setup's files, with a stand-in systemctl ------------------------------------------------------------------------
class Systemctl:
    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, *args: str, **_kw: Any) -> subprocess.CompletedProcess[str]:
        self.calls.append(args)
        return subprocess.CompletedProcess(["systemctl", "--user", *args], 0, "inactive\n" if "is-active" in args
                                           else "", "")


@pytest.fixture
def home(short_tmp: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    from hasrctl import discovery

    env = cli_env(short_tmp, HOME=short_tmp)
    for key in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_RUNTIME_DIR", "HOME"):
        monkeypatch.setenv(key, env[key])
    monkeypatch.setattr(discovery, "user_manager_running", lambda: True)
    monkeypatch.setattr(discovery, "systemctl", Systemctl())
    yield env


def _entry(path: Path) -> dict[str, str]:
    import configparser

    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(path, encoding="utf-8")
    return dict(parser["Desktop Entry"])


def test_setup_installs_the_icons_and_the_autostart_entry_and_uninstall_removes_them(home: dict[str, str]) -> None:
    from hasrctl import install

    share, cfg = Path(home["XDG_DATA_HOME"]), Path(home["XDG_CONFIG_HOME"])
    install.install(None, tray=True, force=False)
    icons = share / "icons" / "hicolor"
    for rel in ICONS:  # Icon=hasr resolves, and the state icons are there too
        assert (icons / rel).read_bytes() == (REPO / "packaging/icons/hicolor" / rel).read_bytes(), rel
    app, auto = _entry(share / "applications/hasr-tray.desktop"), _entry(cfg / "autostart/hasr-tray.desktop")
    assert app["Icon"] == auto["Icon"] == "hasr"
    assert app["Exec"].endswith(" --show-window")  # the menu entry opens the drop window ...
    assert "--show-window" not in auto["Exec"] and auto["NoDisplay"] == "true"  # ... the login start does not
    assert auto["X-GNOME-Autostart-enabled"] == "true" and auto["Exec"].split()[0] == app["Exec"].split()[0]
    manifest = json.loads(install.manifest_path().read_text())
    assert {str(icons / rel) for rel in ICONS} <= set(manifest["files"])

    install.uninstall(force=False)
    assert not icons.exists() and not (share / "icons").exists()  # setup created them: it removes them
    assert not (share / "applications").exists() and not install.manifest_path().exists()


def test_setup_never_writes_through_or_replaces_a_link(home: dict[str, str], short_tmp: str) -> None:
    from hasrctl import install
    from hasrctl.client import UsageError

    unit_dir = Path(home["XDG_CONFIG_HOME"], "systemd", "user")
    unit_dir.mkdir(parents=True)
    mine = Path(short_tmp, "dotfiles-hasrd.service")
    mine.write_text("[Service]\nExecStart=/bin/true\n")
    (unit_dir / "hasrd.service").symlink_to(mine)
    for force in (False, True):
        with pytest.raises(UsageError, match="symbolic link"):
            install.install(None, tray=False, force=force)
    assert (unit_dir / "hasrd.service").is_symlink() and mine.read_text() == "[Service]\nExecStart=/bin/true\n"


def test_exporting_hasr_force_does_not_make_uninstall_remove_a_changed_unit(home: dict[str, str]) -> None:
    """``transcribe --force`` reads HASR_FORCE; setup has its own HASR_SETUP_FORCE."""
    from hasrctl import install

    install.install(None, tray=False, force=False)
    unit = Path(home["XDG_CONFIG_HOME"], "systemd", "user", "hasrd.service")
    unit.write_text(unit.read_text() + "Environment=HASR_GPU=1\n")  # a person's change
    res = hasrctl("setup", "--uninstall", env={**home, "HASR_FORCE": "1"})
    assert res.returncode == 0 and "changed since setup" in res.stderr, show(res)
    assert unit.exists()
    res = hasrctl("setup", "--uninstall", env={**home, "HASR_SETUP_FORCE": "1"})
    assert res.returncode == 0 and not unit.exists(), show(res)
    assert "HASR_SETUP_FORCE" in hasrctl("setup", "--help", env=home).stdout


def test_setup_refuses_to_overwrite_a_unit_changed_since_it_installed_it(home: dict[str, str]) -> None:
    from hasrctl import install
    from hasrctl.client import UsageError

    install.install(None, tray=False, force=False)
    unit = Path(home["XDG_CONFIG_HOME"], "systemd", "user", "hasrd.service")
    changed = unit.read_text() + "Environment=HASR_GPU=1\n"
    unit.write_text(changed)
    with pytest.raises(UsageError, match="changed since setup installed it"):
        install.install(None, tray=False, force=False)
    assert unit.read_text() == changed
    install.install(None, tray=False, force=True)
    assert unit.read_text() != changed

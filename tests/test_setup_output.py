"""What ``hasrctl setup`` says: one line per unit and entry, one line for all the icons (not one per size and
state), and without XDG_RUNTIME_DIR the real paths it looked at, never a literal ``$XDG_RUNTIME_DIR``.
systemctl is a stand-in here (tests/test_cli_setup.py has the real manager)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cliutil import REPO, cli_env, hasrctl, show

ICONS = list((REPO / "packaging" / "icons" / "hicolor").glob("*/apps/hasr*"))


@pytest.fixture
def home(short_tmp: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    from hasrctl import discovery

    def systemctl(*args: str, **_kw: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(["systemctl", "--user", *args], 0,
                                           "inactive\n" if "is-active" in args else "", "")

    env = cli_env(short_tmp, HOME=short_tmp)
    for key in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_RUNTIME_DIR", "HOME"):
        monkeypatch.setenv(key, env[key])
    monkeypatch.setattr(discovery, "user_manager_running", lambda: True)
    monkeypatch.setattr(discovery, "systemctl", systemctl)
    yield env


def test_setup_reports_the_icons_in_one_line(home: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    from hasrctl import install

    share, cfg = Path(home["XDG_DATA_HOME"]), Path(home["XDG_CONFIG_HOME"])
    icons = share / "icons" / "hicolor"
    assert len(ICONS) > 20
    install.install(None, tray=True, force=False)
    lines = capsys.readouterr().out.splitlines()
    assert lines[:-1] == [f"installed  {cfg}/systemd/user/hasrd.socket", f"installed  {cfg}/systemd/user/hasrd.service",
                          f"installed  {share}/applications/hasr-tray.desktop",
                          f"installed  {cfg}/autostart/hasr-tray.desktop",
                          f"installed  {len(ICONS)} icons under {icons}"]  # was one line for each of them
    assert lines[-1].startswith("enabled hasrd.socket: systemd listens on ")
    assert all((icons / p.relative_to(REPO / "packaging/icons/hicolor")).is_file() for p in ICONS)

    install.install(None, tray=True, force=False)
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2] == f"unchanged  {len(ICONS)} icons under {icons}" and len(lines) == 6

    install.uninstall(force=False)
    lines = capsys.readouterr().out.splitlines()
    assert f"removed  {len(ICONS)} icons under {icons}" in lines and len(lines) == 5
    assert not icons.exists()


def test_the_icons_line_counts_each_kind_of_change() -> None:
    from hasrctl.install import icons_line

    root = Path("/h/icons/hicolor")
    assert icons_line({"installed": 1}, root) == "installed  1 icon under /h/icons/hicolor"
    assert icons_line({"installed": 2, "unchanged": 70}, root) == \
        "installed 2, unchanged 70 of 72 icons under /h/icons/hicolor"


def test_setup_without_xdg_runtime_dir_names_the_real_paths(short_tmp: str) -> None:
    env = cli_env(short_tmp, HOME=short_tmp)
    env.pop("XDG_RUNTIME_DIR", None)
    res = hasrctl("setup", env=env)
    assert res.returncode != 0, show(res)
    assert "$XDG_RUNTIME_DIR" not in res.stderr, show(res)
    uid = os.getuid()
    assert f"XDG_RUNTIME_DIR is not set, so setup looked for /tmp/hasr-{uid}/systemd/private" in res.stderr
    assert f"hasrd would listen on /tmp/hasr-{uid}/hasr/hasrd.sock" in res.stderr and f"/run/user/{uid}" in res.stderr
    assert not Path(env["XDG_CONFIG_HOME"], "systemd").exists()  # nothing written

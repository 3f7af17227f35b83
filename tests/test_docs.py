"""The documentation says what the code does: docs/CONFIG.md is the generated text of hasrd/config.py, the
README's commands can be pasted, and the references in docstrings resolve to sections that exist."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import click

from hasrd import __version__, config, protocol

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()


def test_config_md_is_the_generated_reference_so_it_cannot_drift() -> None:
    committed = (REPO / "docs" / "CONFIG.md").read_text()
    assert committed == config.markdown(), "docs/CONFIG.md is stale: python3 -m hasrd.config --markdown > docs/CONFIG.md"
    res = subprocess.run([sys.executable, "-m", "hasrd.config", "--markdown"], capture_output=True, text=True,
                         cwd=REPO, timeout=60)
    assert res.returncode == 0 and res.stdout == committed, res.stderr
    bad = subprocess.run([sys.executable, "-m", "hasrd.config", "--html"], capture_output=True, text=True,
                         cwd=REPO, timeout=60)
    assert bad.returncode == 2 and "--markdown" in bad.stderr


def _version(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in v.split("."))


def test_every_setting_has_a_meaning_and_a_version_and_a_row_in_config_md() -> None:
    doc = (REPO / "docs" / "CONFIG.md").read_text()
    described = config.Settings.describe()
    assert [s.name for s in described] == [f.name for f in dataclasses.fields(config.Settings)]
    for s in described:
        assert s.help and "\n" not in s.help, s.name
        assert re.fullmatch(r"\d+\.\d+\.\d+", s.since) and _version(s.since) <= _version(__version__), s
        row = next(ln for ln in doc.splitlines() if ln.startswith(f"| `{s.name}` |"))
        assert f"`{config.env_name(s.name)}`" in row and f"`{config.toml_value(s.default)}`" in row
        assert f"| {s.since} |" in row
    since = {s.name: s.since for s in described}
    assert {n for n, v in since.items() if v == "0.2.0"} == {"zh_script", "max_line_width", "max_line_count",
                                                            "max_cue_sec"}
    assert config.toml_value(900.0) == "900.0" and config.toml_value(False) == "false"
    assert config.toml_value('a"b') == '"a\\"b"'


def test_the_version_is_one_in_the_package_and_its_metadata() -> None:
    pyproject = (REPO / "pyproject.toml").read_text()
    assert re.search(r'(?m)^version = "([^"]+)"$', pyproject).group(1) == __version__  # type: ignore[union-attr]


def test_the_tray_table_in_config_md_is_what_hasr_tray_reads() -> None:
    from tray.settings import TraySettings

    own = {f.name: f.default for f in dataclasses.fields(TraySettings) if f.name not in ("socket", "language")}
    assert {k.name: k.default for k in config.TRAY_KEYS} == own
    doc = (REPO / "docs" / "CONFIG.md").read_text()
    for k in config.TRAY_KEYS:
        assert f"| `{k.name}` | `HASR_TRAY_{k.name.upper()}` |" in doc


def _commands(group: click.Group) -> list[click.Command]:
    ctx = click.Context(group)
    out: list[click.Command] = []
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        assert cmd is not None, name
        out += _commands(cmd) if isinstance(cmd, click.Group) else [cmd]
    return out


def test_every_hasr_variable_of_hasrctl_is_a_setting_or_documented_as_an_option_default() -> None:
    from hasrctl.cli import cli

    assert set(config.NOT_SETTINGS) == set(config.NOT_SETTINGS_DOC)
    settings = {config.env_name(f.name) for f in dataclasses.fields(config.Settings)}
    seen = set()
    for cmd in _commands(cli):
        for p in cmd.params:
            envvar = getattr(p, "envvar", None)
            for var in [envvar] if isinstance(envvar, str) else list(envvar or ()):
                if var.startswith("HASR_"):
                    seen.add(var)
                    assert var in settings or var.startswith(config.NOT_SETTINGS), f"{cmd.name}: {var}"
    assert {"HASR_KEEP_ALIVE", "HASR_SETUP_TRAY", "HASR_FORMAT"} <= seen
    doc = (REPO / "docs" / "CONFIG.md").read_text()
    assert all(f"`{name}" in doc for name in config.NOT_SETTINGS)
    assert config.unknown_env({"HASR_KEEP_ALIVE": "1", "HASR_IDLE_TTL": "1"}) == [
        "HASR_IDLE_TTL is not a setting; did you mean HASR_IDLE_TTL_SEC?"]


def test_api_md_reports_the_protocol_that_api_version_reports() -> None:
    api = (REPO / "docs" / "API.md").read_text()
    found = re.search(r'`GET /api/version` → `\{"version": "([^"]+)", "protocol": (\d+)', api)
    assert found, "docs/API.md lost its /api/version line"
    assert found.group(1) == __version__ and int(found.group(2)) == protocol.PROTOCOL_VERSION


def test_the_license_is_an_spdx_expression_and_the_build_needs_a_setuptools_that_reads_it() -> None:
    """The `project.license` table is deprecated (setuptools: unsupported after 2027-02-18); the SPDX string
    needs setuptools 77 or later."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert meta["project"]["license"] == "Apache-2.0"
    req = next(r for r in meta["build-system"]["requires"] if r.startswith("setuptools"))
    assert _version(re.fullmatch(r"setuptools>=([\d.]+)", req).group(1)) >= (77,)  # type: ignore[union-attr]

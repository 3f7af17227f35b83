"""The documentation says what the code does: docs/CONFIG.md is the generated text of hasrd/config.py, the
README's commands can be pasted, and the references in docstrings resolve to sections that exist."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import click

from hasrd import __version__, config, configdoc, protocol

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()


def test_config_md_is_the_generated_reference_so_it_cannot_drift() -> None:
    committed = (REPO / "docs" / "CONFIG.md").read_text()
    assert committed == configdoc.markdown(), \
        "docs/CONFIG.md is stale: python3 -m hasrd.configdoc --markdown > docs/CONFIG.md"
    res = subprocess.run([sys.executable, "-m", "hasrd.configdoc", "--markdown"], capture_output=True, text=True,
                         cwd=REPO, timeout=60)
    assert res.returncode == 0 and res.stdout == committed, res.stderr
    bad = subprocess.run([sys.executable, "-m", "hasrd.configdoc", "--html"], capture_output=True, text=True,
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
                                                            "max_cue_sec", "allowed_origins", "live_queue_sec",
                                                            "live_max_pending_sec", "max_workers",
                                                            "cublas_from_cuda13"}
    assert {n for n, v in since.items() if v == "0.3.0"} == {"worker_parallel", "worker_batch", "worker_streams",
                                                            "max_queued_audio_mb"}
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


def _sources() -> list[Path]:
    return [p for d in ("hasrd", "hasrctl", "tray", "tests", "benchmarks", "scripts") for p in (REPO / d).rglob("*")
            if p.is_file() and p.suffix in (".py", "") and "__pycache__" not in p.parts]


def test_the_architecture_sections_the_docstrings_cite_exist() -> None:
    arch = (REPO / "docs" / "ARCHITECTURE.md").read_text()
    headings = {ln.lstrip("#").strip() for ln in arch.splitlines() if ln.startswith("#")}
    cited: dict[str, str] = {}
    gone = "DESIGN" + ".md"  # outside the repository: every reference now points at docs/ARCHITECTURE.md
    for path in _sources():
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        assert gone not in text, f"{path.relative_to(REPO)} cites {gone}"
        for section in re.findall(r'ARCHITECTURE\.md "([^"]+)"', text):
            cited[section] = str(path.relative_to(REPO))
    assert {"Audio", "Engines", "HTTP API", "The v2c pipeline"} <= set(cited)
    missing = {s: where for s, where in cited.items() if s not in headings}
    assert not missing, f"cited sections that docs/ARCHITECTURE.md lacks: {missing}"
    assert "## Invariants" in arch


def test_the_readme_links_the_references() -> None:
    for target in ("docs/CONFIG.md", "docs/ARCHITECTURE.md", "docs/API.md"):
        assert f"]({target})" in README, target
        assert (REPO / target).is_file()


def _shell_blocks(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", text, flags=re.S)


def test_every_hasrctl_line_in_the_readme_is_a_command_that_parses() -> None:
    """`hasrctl load --keep-alive 3600 / unload / stop` was one line a reader could not paste."""
    from hasrctl.cli import cli

    lines = [ln.split("#", 1)[0].strip() for block in _shell_blocks(README) for ln in block.splitlines()]
    commands = [ln for ln in lines if ln.startswith("hasrctl ")]
    assert {"hasrctl load --keep-alive 3600", "hasrctl unload", "hasrctl stop"} <= set(commands), commands
    for line in commands:
        args = line.split()[1:]
        assert "/" not in args, line
        assert cli.get_command(click.Context(cli), args[0]) is not None, line
    for line in ("hasrctl load --keep-alive 3600", "hasrctl unload", "hasrctl stop", "hasrctl status --watch"):
        args = line.split()[1:]
        cmd = cli.get_command(click.Context(cli), args[0])
        assert cmd is not None
        cmd.make_context(args[0], args[1:])  # raises click.UsageError if the words do not parse


def test_the_gpu_setup_creates_the_config_directory_and_uses_hf() -> None:
    gpu = README[README.index("## Setting up the GPU stack"):]
    gpu = gpu[:gpu.index("\n## ", 3)]
    block = _shell_blocks(gpu)[0]
    assert "huggingface-cli download" not in README  # huggingface_hub ships `hf`; huggingface-cli is gone
    assert re.search(r"(?m)^\S*/bin/hf download netease-youdao/Confucius4-R2T2 --local-dir (\S+)", block)
    mkdir, cat = block.find("mkdir -p ~/.config/hasr"), block.find("cat >> ~/.config/hasr/config.toml")
    assert 0 <= mkdir < cat, "the config directory does not exist on a fresh account"


def test_the_model_messages_name_the_folder_the_readme_downloads_into() -> None:
    import pytest

    from hasrd.errors import EngineError
    from hasrd.models import resolve_weights

    folder = re.search(r"--local-dir (\S+)", README).group(1)  # type: ignore[union-attr]
    assert f'r2t2_model = "{folder.replace("~", "$HOME")}"' in README
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_CACHE", "/nonexistent/hf")
        mp.setenv("HF_HOME", "/nonexistent/hf")
        with pytest.raises(EngineError) as e:
            resolve_weights("")
    assert f"--local-dir {folder}" in e.value.message and f"HASR_R2T2_MODEL={folder}" in e.value.message


def test_the_readme_says_where_the_socket_is_without_xdg_runtime_dir() -> None:
    assert "/tmp/hasr-$UID/hasr/hasrd.sock" in README
    assert "/tmp/hasr-$UID/hasr/hasrd.sock" in config.Settings.describe()[0].help

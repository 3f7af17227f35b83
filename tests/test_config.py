"""Settings: HASR_* over config.toml over defaults; wrong values are refused when loaded, not mid-request."""

from __future__ import annotations

from pathlib import Path

import pytest

from hasrd import config


def test_environment_overrides_the_file_which_overrides_defaults(tmp_path: Path) -> None:
    toml = tmp_path / "config.toml"
    toml.write_text('idle_ttl_sec = 600\nmax_queue = 3\nengine = "whisper"\n')
    s = config.load(env={"HASR_MAX_QUEUE": "7"}, toml_path=toml)
    assert (s.idle_ttl_sec, s.max_queue, s.engine) == (600.0, 7, "whisper")
    assert config.load(env={}, toml_path=tmp_path / "absent.toml").idle_ttl_sec == 900.0


@pytest.mark.parametrize("env,needle", [
    ({"HASR_MAX_QUEUE": "many"}, "HASR_MAX_QUEUE='many' is not a valid int"),
    ({"HASR_ENGINE": "nonsense"}, "HASR_ENGINE='nonsense' is not valid"),
    ({"HASR_V2C_FINAL": "threads"}, "thread, inline, after"),
    ({"HASR_FW_DEVICE": "gpu"}, "auto, cpu, cuda"),
    ({"HASR_DEBUG": "maybe"}, "HASR_DEBUG"),
])
def test_a_wrong_value_is_refused_with_the_variable_and_the_choices(tmp_path: Path, env: dict[str, str],
                                                                    needle: str) -> None:
    with pytest.raises(config.ConfigError, match=needle.replace("(", r"\(")):
        config.load(env=env, toml_path=tmp_path / "absent.toml")


def test_a_broken_config_file_names_itself(tmp_path: Path) -> None:
    toml = tmp_path / "config.toml"
    toml.write_text("idle_ttl_sec = = 3\n")
    with pytest.raises(config.ConfigError, match=str(toml)):
        config.load(env={}, toml_path=toml)


def test_every_setting_is_described() -> None:
    described = config.Settings.describe()
    assert len(described) >= 25
    assert all(s.help for s in described)
    assert {"idle_ttl_sec", "idle_exit_sec", "max_queue", "worker_python", "gpu", "need_vram_mb"} <= \
        {s.name for s in described}


def test_an_unknown_config_key_is_refused_with_the_closest_known_name(tmp_path: Path) -> None:
    p = tmp_path / "config.toml"
    p.write_text("idle_ttl = 5\n")
    with pytest.raises(config.ConfigError, match=r"unknown setting 'idle_ttl'; did you mean 'idle_ttl_sec'\?"):
        config.load(env={}, toml_path=p)
    p.write_text("rtf_budget = 2\n")
    with pytest.raises(config.ConfigError, match=r"'rtf_budget': it is no longer used; see stall_sec"):
        config.load(env={}, toml_path=p)


def test_unknown_hasr_variables_are_named_with_the_closest_setting_and_knobs_are_not() -> None:
    lines = config.unknown_env({"HASR_IDLE_TTL": "5", "HASR_FAKE_RTF": "1", "HASR_FORMAT": "srt",
                                "HASR_ENGINE": "fake", "PATH": "/bin"})
    assert lines == ["HASR_IDLE_TTL is not a setting; did you mean HASR_IDLE_TTL_SEC?"]

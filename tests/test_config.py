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


def test_worker_parallel_and_batch_default_to_0_which_is_by_device(tmp_path: Path) -> None:
    s = config.load(env={}, toml_path=tmp_path / "absent.toml")
    assert (s.worker_parallel, s.worker_batch) == (0, 0)
    s = config.load(env={"HASR_WORKER_PARALLEL": "3", "HASR_WORKER_BATCH": "12"}, toml_path=tmp_path / "absent.toml")
    assert (s.worker_parallel, s.worker_batch) == (3, 12)


@pytest.mark.parametrize("name", ["HASR_WORKER_PARALLEL", "HASR_WORKER_BATCH", "HASR_MAX_CONCURRENT"])
def test_a_negative_worker_parallel_or_batch_is_refused_with_what_is_valid(tmp_path: Path, name: str) -> None:
    with pytest.raises(config.ConfigError, match=r"=-1 is not valid: use 0 \(chosen by device\) or a positive"):
        config.load(env={name: "-1"}, toml_path=tmp_path / "absent.toml")


def test_max_concurrent_is_read_as_worker_parallel_with_a_warning_and_the_new_name_wins(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    absent = tmp_path / "absent.toml"
    config._warned.clear()
    with caplog.at_level("WARNING", logger="hasrd.config"):
        assert config.load(env={"HASR_MAX_CONCURRENT": "2"}, toml_path=absent).worker_parallel == 2
    assert "HASR_MAX_CONCURRENT is deprecated; use HASR_WORKER_PARALLEL" in caplog.text
    env = {"HASR_MAX_CONCURRENT": "2", "HASR_WORKER_PARALLEL": "6"}
    assert config.load(env=env, toml_path=absent).worker_parallel == 6
    toml = tmp_path / "config.toml"
    toml.write_text("max_concurrent = 3\n")
    assert config.load(env={}, toml_path=toml).worker_parallel == 3
    toml.write_text("max_concurrent = 3\nworker_parallel = 5\n")
    assert config.load(env={}, toml_path=toml).worker_parallel == 5
    assert config.load(env={"HASR_MAX_CONCURRENT": "1"}, toml_path=toml).worker_parallel == 1  # env over file
    with pytest.raises(config.ConfigError, match="HASR_MAX_CONCURRENT='x' is not a valid int"):
        config.load(env={"HASR_MAX_CONCURRENT": "x"}, toml_path=absent)
    assert config.unknown_env({"HASR_MAX_CONCURRENT": "2"}) == []  # read, not unknown (load warned)

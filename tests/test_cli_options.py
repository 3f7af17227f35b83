"""hasrctl's transcription options and input handling (issue 12), through real daemons: the fake engine echoes
the options that reached its worker, the whisper engine shows their effect."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator

import pytest
from speech import DATA

from tests.cliutil import cli_env, hasrctl, show
from tests.daemon import Hasrd, whisper_hasrd, write_wav


@pytest.fixture(scope="module")
def base(module_tmp: str) -> str:
    return module_tmp


@pytest.fixture(scope="module")
def fake_env(base: str) -> Iterator[dict[str, str]]:
    d = Hasrd(os.path.join(base, "f.sock"))
    yield cli_env(base, HASR_SOCKET=d.sock)
    d.stop()


@pytest.fixture(scope="module")
def whisper_env(base: str) -> Iterator[dict[str, str]]:
    d = whisper_hasrd(os.path.join(base, "w.sock"))
    yield cli_env(base, HASR_SOCKET=d.sock)
    d.stop()


@pytest.fixture(scope="module")
def wav(base: str) -> str:
    return write_wav(os.path.join(base, "a.wav"), 2.0)


def test_prompt_word_timestamps_and_model_reach_the_engine(fake_env: dict[str, str], wav: str) -> None:
    res = hasrctl("transcribe", "-f", "verbose_json", "--prompt", "Zhang San, Li Si", "--word-timestamps",
                  "--model", "whisper-1", wav, env=fake_env)
    assert res.returncode == 0, show(res)
    seen = json.loads(res.stdout)["hasr"]["options"]
    assert seen == {"prompt": "Zhang San, Li Si", "word_timestamps": True, "model": "whisper-1"}


def test_an_unknown_model_is_refused_with_exit_2(fake_env: dict[str, str], wav: str) -> None:
    res = hasrctl("transcribe", "--model", "davinci", wav, env=fake_env)
    assert res.returncode == 2 and "model_not_found" in res.stderr and "davinci" in res.stderr, show(res)


def test_a_missing_known_size_suggests_hasrctl_pull_and_an_unknown_name_does_not(fake_env: dict[str, str],
                                                                                   wav: str) -> None:
    """Issue 32 #8: model_not_found for a faster-whisper size (or an owner/name id) names the next step."""
    for name in ("large-v3", "Systran/faster-whisper-small"):
        res = hasrctl("transcribe", "--model", name, wav, env=fake_env)
        assert res.returncode == 2 and "model_not_found" in res.stderr, show(res)
        assert f"download it with `hasrctl pull {name}`" in res.stderr, res.stderr
    res = hasrctl("load", "--model", "large-v3", env=fake_env)
    assert res.returncode == 2 and "`hasrctl pull large-v3`" in res.stderr, show(res)
    res = hasrctl("transcribe", "--model", "davinci", wav, env=fake_env)
    assert res.returncode == 2 and "hasrctl pull" not in res.stderr, show(res)


def test_a_model_path_that_does_not_exist_is_no_such_directory_not_a_download(base: str, wav: str) -> None:
    """Issue 32 #8: a missing directory is said so, before any daemon is reached (exit 2), for transcribe, load
    and batch alike; nothing mentions Hugging Face."""
    env = cli_env(base)  # no daemon: the refusal comes first
    for args in (["transcribe", wav], ["load"], ["batch", wav, "-o", os.path.join(base, "o")]):
        res = hasrctl(*args, "--no-autostart", "--model", "/no/such/model", env=env) if args[0] != "batch" else \
            hasrctl(*args, "--model", "/no/such/model", env=env)
        assert res.returncode == 2, show(res)
        assert "--model /no/such/model: no such directory" in res.stderr, show(res)
        assert "Hugging Face" not in res.stderr and "hf download" not in res.stderr


def test_hasr_fw_model_as_a_missing_path_is_no_such_directory_in_the_worker() -> None:
    from hasrd import models
    from hasrd.errors import EngineError

    with pytest.raises(EngineError) as e:
        models.resolve_fw("/no/such/model")
    assert "does not exist: no such directory" in e.value.message and "hf download" not in e.value.message
    with pytest.raises(EngineError) as e:
        models.resolve_fw(tempfile.gettempdir())
    assert "no model.bin" in e.value.message


def test_translate_asks_for_the_translate_task_and_an_engine_that_cannot_says_so(fake_env: dict[str, str],
                                                                                 wav: str) -> None:
    res = hasrctl("transcribe", "--translate", wav, env=fake_env)
    assert res.returncode == 2 and "unsupported" in res.stderr and "--engine whisper" in res.stderr, show(res)


def test_translate_gives_english_and_word_timestamps_give_words_with_the_whisper_engine(
        whisper_env: dict[str, str]) -> None:
    res = hasrctl("transcribe", "--translate", "-q", str(DATA / "zh_nihao_shijie.flac"), env=whisper_env)
    assert res.returncode == 0 and res.stdout.strip(), show(res)
    assert all(ord(ch) < 0x2E80 for ch in res.stdout), res.stdout  # English, not Chinese
    res = hasrctl("transcribe", "-f", "verbose_json", "--word-timestamps", "-l", "en",
                  str(DATA / "en_quick_brown_fox.flac"), env=whisper_env)
    doc = json.loads(res.stdout)
    assert [w["word"].lower().strip(".") for w in doc["words"]][:3] == ["the", "quick", "brown"], show(res)
    with open(DATA / "en_quick_brown_fox.flac", "rb") as f:  # the same through stdin (an upload)
        res = hasrctl("transcribe", "-f", "verbose_json", "--word-timestamps", "-l", "en", "-", env=whisper_env,
                      stdin=f.read())
    assert json.loads(res.stdout)["words"], show(res)


def test_output_directories_are_created_when_missing(fake_env: dict[str, str], wav: str, base: str) -> None:
    work = tempfile.mkdtemp(dir=base)
    res = hasrctl("transcribe", "-f", "srt", "-o", os.path.join(work, "subs") + "/", wav, env=fake_env)
    assert res.returncode == 0 and os.path.isfile(os.path.join(work, "subs", "a.srt")), show(res)
    other = write_wav(os.path.join(work, "b.wav"), 1.0)
    res = hasrctl("transcribe", "-o", os.path.join(work, "many", "deep"), wav, other, env=fake_env)
    assert res.returncode == 0, show(res)
    assert sorted(os.listdir(os.path.join(work, "many", "deep"))) == ["a.txt", "b.txt"]


def test_every_input_is_checked_before_the_first_transcription_starts(fake_env: dict[str, str], wav: str,
                                                                      base: str) -> None:
    work = tempfile.mkdtemp(dir=base)
    other = write_wav(os.path.join(work, "b.wav"), 1.0)
    res = hasrctl("transcribe", "-o", work + "/out/", wav, os.path.join(work, "typo.wav"), other, env=fake_env)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 1, show(res)
    assert "typo.wav" in lines[0] and "no such file" in lines[0]  # said first, before any file was done
    assert sum(": ok," in ln for ln in lines) == 2  # the good ones were still transcribed
    assert sorted(os.listdir(os.path.join(work, "out"))) == ["a.txt", "b.txt"]


def test_file_names_complete_in_the_shell(base: str, wav: str) -> None:
    env = cli_env(base, _HASRCTL_COMPLETE="bash_complete", COMP_WORDS="hasrctl transcribe a.", COMP_CWORD="2")
    res = hasrctl(env=env, cwd=base)
    assert res.stdout.splitlines()[:1] == ["file,a."], show(res)  # bash completes it as a file name


# --- live input that cannot work is refused before any daemon is asked ----------------------------------------
def test_listen_refuses_a_missing_or_non_audio_input_before_connecting(short_tmp: str) -> None:
    env = cli_env(short_tmp, HASR_SOCKET=os.path.join(short_tmp, "nobody.sock"), HASR_AUTOSTART="0")
    missing = hasrctl("listen", os.path.join(short_tmp, "nope.wav"), env=env)
    assert missing.returncode == 2 and "cannot open" in missing.stderr and "nope.wav" in missing.stderr, show(missing)
    text = os.path.join(short_tmp, "notes.txt")
    with open(text, "w") as f:
        f.write("not audio\n")
    bad = hasrctl("listen", text, env=env)
    assert bad.returncode == 2 and "notes.txt" in bad.stderr, show(bad)
    assert "no hasrd answers" not in missing.stderr + bad.stderr  # the input was checked first


def test_dictate_without_a_typing_tool_says_what_to_install(short_tmp: str) -> None:
    empty = os.path.join(short_tmp, "bin")
    os.mkdir(empty)
    env = cli_env(short_tmp, HASR_SOCKET=os.path.join(short_tmp, "nobody.sock"), HASR_AUTOSTART="0",
                  PATH=empty, DISPLAY=":9")
    env.pop("WAYLAND_DISPLAY", None)
    res = subprocess.run([sys.executable, "-m", "hasrctl", "dictate"], env=env, capture_output=True, text=True,
                         timeout=60)  # PATH has no python: the interpreter is named
    assert res.returncode == 1 and "install xdotool" in res.stderr, res.stderr


def test_dictate_without_any_display_says_there_is_no_graphical_session(short_tmp: str) -> None:
    empty = os.path.join(short_tmp, "bin")
    os.mkdir(empty)
    for tool in ("xdotool", "wtype"):  # installed, but with no display they cannot type anywhere
        with open(os.path.join(empty, tool), "w") as f:
            f.write("#!/bin/sh\nexit 1\n")
        os.chmod(os.path.join(empty, tool), 0o755)
    env = cli_env(short_tmp, HASR_SOCKET=os.path.join(short_tmp, "nobody.sock"), HASR_AUTOSTART="0", PATH=empty)
    env.pop("DISPLAY", None)
    env.pop("WAYLAND_DISPLAY", None)
    res = subprocess.run([sys.executable, "-m", "hasrctl", "dictate"], env=env, capture_output=True, text=True,
                         timeout=120)  # only a hung program meets this
    assert res.returncode == 1, res.stderr
    err = res.stderr
    assert "no graphical session to type into" in err and "DISPLAY" in err and "WAYLAND_DISPLAY" in err, err
    assert "install xdotool" not in err and "ydotool" in err, err  # what it needs: a session, or ydotool
    assert len([ln for ln in err.splitlines() if ln.strip()]) == 1, err  # one line, no traceback


def test_models_lists_the_embedded_base_and_its_hf_cache_copy_at_one_size(base: str) -> None:
    """Issue 32 #8: the same bytes were 145 MB (embedded) and 141 MB (the Hugging Face cache's copy): one unit,
    MB = 2**20 bytes, for every row."""
    from pathlib import Path

    from speech import model_dir

    cache = Path(base, "hf")
    snap = cache / "models--Systran--faster-whisper-base" / "snapshots" / "0"
    snap.mkdir(parents=True, exist_ok=True)
    (cache / "models--Systran--faster-whisper-base" / "refs").mkdir(exist_ok=True)
    (cache / "models--Systran--faster-whisper-base" / "refs" / "main").write_text("0")
    for f in Path(model_dir()).iterdir():
        if f.is_file() and not (snap / f.name).exists():
            (snap / f.name).symlink_to(f)
    d = Hasrd(os.path.join(base, "m.sock"), env={"HF_HUB_CACHE": str(cache)})
    try:
        res = hasrctl("models", env=cli_env(base, HASR_SOCKET=d.sock))
    finally:
        d.stop()
    assert res.returncode == 0, show(res)
    sizes = {ln.split()[0]: ln.split()[2:4] for ln in res.stdout.splitlines()[1:]}
    assert sizes["base"] == sizes["Systran/faster-whisper-base"] == ["141", "MB"], res.stdout


def test_listen_into_a_pipe_nobody_reads_ends_quietly(short_tmp: str) -> None:
    """Issue 39 #10: `hasrctl listen FILE | head` ended in a thread's traceback and BrokenPipeError."""
    d = Hasrd(os.path.join(short_tmp, "s.sock"), env={"HASR_FAKE_SCRIPT": "第一句话。第二句话。第三句话。第四句话。"})
    clip = write_wav(os.path.join(short_tmp, "a.wav"), 8.0)
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line: every write fails with EPIPE
    try:
        res = subprocess.run([sys.executable, "-m", "hasrctl", "listen", clip], stdout=write, stderr=subprocess.PIPE,
                             env=cli_env(short_tmp, HASR_SOCKET=d.sock), text=True, timeout=120)
    finally:
        os.close(write)
        d.stop()
    assert res.returncode == 0 and "Traceback" not in res.stderr and "BrokenPipe" not in res.stderr, res.stderr


def test_dictate_with_a_missing_microphone_fails_before_it_says_speak(short_tmp: str) -> None:
    """Issue 39 #10: `dictate --toggle` said "dictating: speak" before it failed on a missing microphone."""
    tools = os.path.join(short_tmp, "bin")
    os.mkdir(tools)
    with open(os.path.join(tools, "xdotool"), "w") as f:  # a typist that types nowhere
        f.write("#!/bin/sh\nexit 0\n")
    os.chmod(os.path.join(tools, "xdotool"), 0o755)
    env = cli_env(short_tmp, HASR_SOCKET=os.path.join(short_tmp, "nobody.sock"), HASR_AUTOSTART="0",
                  PATH=tools + os.pathsep + os.environ["PATH"], DISPLAY=":9")
    res = subprocess.run([sys.executable, "-m", "hasrctl", "dictate", "--toggle", "--device", "no-such-microphone"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode in (1, 2) and "speak" not in res.stderr, res.stderr
    assert "microphone" in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr

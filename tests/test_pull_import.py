"""``hasrctl pull PATH``: a CTranslate2 model directory imported into $XDG_DATA_HOME/hasr/models/NAME (the way in
without the hub, issue 32 #8). Real directories, the embedded whisper base as the source, hasrctl as a
subprocess (its exit codes and one-line errors), and one real daemon with faster-whisper on the CPU that
transcribes with the imported model."""

from __future__ import annotations

import errno
import io
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from cliutil import NO_OVERRIDE, REPO, cli_env, hasrctl, one_line, show
from daemon import Hasrd
from speech import DATA, cache_home, model_dir

from tests.conftest import wait_until

from hasrctl import modelimport
from hasrctl.client import CliError, UsageError
from hasrctl.pullview import PullView
from hasrd import models

FILES = {"config.json", "model.bin", "tokenizer.json", "vocabulary.txt"}


def env_for(tmp: str) -> dict[str, str]:
    """hasrctl's environment: private XDG directories under ``tmp`` (the data directory: tmp/data)."""
    return cli_env(tmp, XDG_CACHE_HOME=cache_home())


def models_dir(tmp: str) -> Path:
    return Path(tmp) / "data" / "hasr" / "models"


def leftovers(tmp: str) -> list[str]:
    """What an import may have left in the models directory besides the models it installed."""
    d = models_dir(tmp)
    return sorted(p.name for p in d.iterdir() if p.name.startswith(".")) if d.is_dir() else []


def small_model(base: Path, model_bin: bytes | None = None, drop: str = "") -> Path:
    """A model directory with the embedded base's small files and ``model_bin`` (the real one, linked, when
    None): a directory to spoil one way per test."""
    src = Path(model_dir())
    base.mkdir(parents=True)
    for name in ("config.json", "tokenizer.json", "vocabulary.txt"):
        if name != drop:
            shutil.copy(src / name, base / name)
    if model_bin is None:
        (base / "model.bin").symlink_to(src / "model.bin")  # a link (an HF snapshot's files are links): followed
    else:
        (base / "model.bin").write_bytes(model_bin)
    return base


def test_an_import_copies_what_faster_whisper_loads_under_its_name_and_refuses_that_name_again(short_tmp: str) -> None:
    env = env_for(short_tmp)
    src = small_model(Path(short_tmp) / "src" / "faster-whisper-mine")
    (src / "README.md").write_text("not a model file\n")
    res = hasrctl("pull", str(src), env=env)
    assert res.returncode == 0, show(res)
    dest = models_dir(short_tmp) / "faster-whisper-mine"  # the directory's own name
    assert {p.name for p in dest.iterdir()} == FILES  # only what faster-whisper loads: no README
    assert not (dest / "model.bin").is_symlink()  # a copy, not the link
    assert (dest / "model.bin").stat().st_size == (Path(model_dir()) / "model.bin").stat().st_size
    assert models.fw_dir_problem(dest) is None
    assert str(dest) in res.stdout and "use it as --model faster-whisper-mine" in res.stdout
    assert "copying model.bin (138.5 MB)" in res.stderr  # the pull's progress lines (no terminal: plain)

    again = hasrctl("pull", str(src), env=env)  # the same name: refused, the model untouched
    assert again.returncode == 2, show(again)
    line = one_line(again.stderr)
    assert "exists" in line and "--name" in line and "hasrctl rm faster-whisper-mine" in line
    assert models.fw_dir_problem(dest) is None and leftovers(short_tmp) == []

    # ./relative, --name, from another directory
    res = hasrctl("pull", "./faster-whisper-mine", "--name", "other", env=env, cwd=str(src.parent))
    assert res.returncode == 0 and (models_dir(short_tmp) / "other" / "model.bin").is_file(), show(res)
    # a bare name that is a directory here is that directory, not a model on the hub
    res = hasrctl("pull", "faster-whisper-mine", "--name", "third", env=env, cwd=str(src.parent))
    assert res.returncode == 0 and (models_dir(short_tmp) / "third" / "model.bin").is_file(), show(res)
    # a Hugging Face snapshot carried over from another machine's cache: named after its repo, not its commit
    snap = small_model(Path(short_tmp) / "hub" / "models--Systran--faster-whisper-tiny" / "snapshots" / ("c" * 40))
    res = hasrctl("pull", str(snap), env=env)
    assert res.returncode == 0 and "--model faster-whisper-tiny" in res.stdout, show(res)
    # a link to a snapshot, named by the person who made it: that name, not the commit's or the repo's
    (Path(short_tmp) / "my-tiny").symlink_to(snap)
    res = hasrctl("pull", str(Path(short_tmp) / "my-tiny"), env=env)
    assert res.returncode == 0 and "--model my-tiny" in res.stdout, show(res)
    assert leftovers(short_tmp) == []


@pytest.mark.parametrize("case", ["missing", "file", "no_model_bin", "truncated", "garbage", "trailing",
                                  "no_tokenizer", "slash", "dotdot", "hidden", "reserved", "unnamed", "existing",
                                  "not_a_model_there", "unwritable", "version_7", "version_64", "loop",
                                  "unreadable"])
def test_bad_input_is_one_line_exit_2_and_leaves_nothing(short_tmp: str, case: str) -> None:
    env = env_for(short_tmp)
    tmp = Path(short_tmp)
    real = (Path(model_dir()) / "model.bin").read_bytes() if case in ("truncated", "trailing") else b""
    args: list[str]
    words: tuple[str, ...]
    if case == "missing":
        args, words = [str(tmp / "nowhere")], ("no such directory",)
    elif case == "file":
        (tmp / "afile").write_bytes(b"x")
        args, words = [str(tmp / "afile")], ("not a directory",)
    elif case == "no_model_bin":
        (tmp / "empty").mkdir()
        args, words = [str(tmp / "empty")], ("no model.bin",)
    elif case == "truncated":  # a partial copy: the header is right, the tensors stop short
        args, words = [str(small_model(tmp / "m", real[: len(real) // 2]))], ("cut short",)
    elif case == "garbage":
        args, words = [str(small_model(tmp / "m", b"<html>404 not found</html>" * 100))], ("no CTranslate2 model",)
    elif case == "trailing":
        args, words = [str(small_model(tmp / "m", real + b"junk"))], ("no CTranslate2 model",)
    elif case == "no_tokenizer":
        args, words = [str(small_model(tmp / "m", drop="tokenizer.json"))], ("tokenizer.json",)
    elif case in ("slash", "dotdot", "hidden"):
        name = {"slash": "a/b", "dotdot": "..", "hidden": ".x"}[case]
        args, words = [str(small_model(tmp / "m")), "--name", name], ("no '/' or '..'",)
    elif case == "reserved":
        args, words = [str(small_model(tmp / "m")), "--name", "base"], ("embedded", "another --name")
    elif case == "unnamed":  # the directory's own name cannot be one: `hasrctl pull /`
        args, words = ["/"], ("no model.bin",)
    elif case == "existing":
        (models_dir(short_tmp) / "taken").mkdir(parents=True)
        (models_dir(short_tmp) / "taken" / "model.bin").write_bytes(b"x")
        args, words = [str(small_model(tmp / "m")), "--name", "taken"], ("exists", "--name", "hasrctl rm taken")
    elif case == "not_a_model_there":
        (models_dir(short_tmp) / "taken").mkdir(parents=True)
        args, words = [str(small_model(tmp / "m")), "--name", "taken"], ("exists", "no model")
    elif case in ("version_7", "version_64"):  # issue 39 #3: was imported, then every request got 503
        version = int(case.split("_")[1])
        args, words = [str(small_model(tmp / "m", version.to_bytes(4, "little")))], (f"format version {version}",)
    elif case == "loop":  # issue 39 #3: said "no such directory"
        (tmp / "a").symlink_to(tmp / "b")
        (tmp / "b").symlink_to(tmp / "a")
        args, words = [str(tmp / "a")], ("Too many levels of symbolic links",)
    elif case == "unreadable":  # issue 39 #3: failed without naming the file
        src = small_model(tmp / "m")
        (src / "tokenizer.json").chmod(0)
        args, words = [str(src)], ("its tokenizer.json cannot be read: Permission denied",)
    else:  # unwritable: the data directory's hasr/ is a file (root may write anywhere; nobody makes a dir in a file)
        (tmp / "data" / "hasr").write_text("")
        args, words = [str(small_model(tmp / "m")), "--name", "x"], ("cannot write the models directory",)
    res = hasrctl("pull", *args, env=env, wrap=NO_OVERRIDE if case == "unreadable" else ())
    assert res.returncode == 2, show(res)
    line = one_line(res.stderr)
    assert line.startswith("hasrctl: ") and all(w in line for w in words), (case, line)
    assert res.stdout == ""
    if case == "unwritable":
        return
    assert leftovers(short_tmp) == []
    kept = {"taken"} if case in ("existing", "not_a_model_there") else set()
    assert {p.name for p in models_dir(short_tmp).iterdir()} == kept if models_dir(short_tmp).exists() else True


def big_model(base: Path, mb: int) -> Path:
    """A model directory whose model.bin is whole by its table (one tensor of ``mb`` MB) and sparse on disk: a
    copy that takes a while."""
    src = small_model(base, b"")
    spec = b"WhisperSpec"
    with open(src / "model.bin", "wb") as f:
        f.write((6).to_bytes(4, "little") + len(spec).to_bytes(2, "little") + spec + (3).to_bytes(4, "little"))
        name = b"w"
        f.write((1).to_bytes(4, "little") + len(name).to_bytes(2, "little") + name + bytes([1])
                + (mb << 20).to_bytes(4, "little") + bytes([0]) + (mb << 20).to_bytes(4, "little"))
        f.seek(mb << 20, os.SEEK_CUR)
        f.write((0).to_bytes(4, "little"))
    assert models.fw_dir_problem(src) is None
    return src


def test_what_an_import_killed_outright_left_is_removed_by_the_next_one_and_said(short_tmp: str) -> None:
    """Issue 39 #3: a killed import left a hidden .hasr-import-* directory (1.2 GB) that nothing removed or
    listed. An import that runs beside a living one (stopped mid-copy) leaves that one's alone; once it is
    killed, the next import removes what it left, and says so."""
    env = env_for(short_tmp)
    src = big_model(Path(short_tmp) / "big", 400)
    first = subprocess.Popen([sys.executable, "-m", "hasrctl", "pull", str(src), "--name", "first"], env=env,
                             cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def copying() -> bool:
            return any(f.stat().st_size for f in models_dir(short_tmp).glob(".hasr-import-*/model.bin.partial"))
        assert wait_until(copying, 60)
        first.send_signal(signal.SIGSTOP)  # alive, mid-copy
        staging = leftovers(short_tmp)
        res = hasrctl("pull", str(small_model(Path(short_tmp) / "m")), "--name", "second", env=env)
        assert res.returncode == 0 and "removed" not in res.stderr, show(res)
        assert leftovers(short_tmp) == staging and len(staging) == 1
    finally:
        first.kill()
        first.wait()
    left = models_dir(short_tmp) / staging[0]
    assert left.is_dir() and not (models_dir(short_tmp) / "first").exists()
    res = hasrctl("pull", str(Path(short_tmp) / "m"), "--name", "third", env=env)
    assert res.returncode == 0, show(res)
    assert f"removed {left}: " in res.stderr and "import killed before it ended" in res.stderr, show(res)
    assert leftovers(short_tmp) == [] and (models_dir(short_tmp) / "third" / "model.bin").is_file()


def test_a_directory_with_an_unusable_name_asks_for_name(short_tmp: str) -> None:
    src = small_model(Path(short_tmp) / "src" / "base")  # a directory called `base`: the embedded model's name
    res = hasrctl("pull", str(src), env=env_for(short_tmp))
    assert res.returncode == 2 and "with --name" in one_line(res.stderr), show(res)
    res = hasrctl("pull", "large-v3", "--name", "x", "--no-autostart", env=env_for(short_tmp))
    assert res.returncode == 2 and "--name is for importing" in one_line(res.stderr), show(res)
    # HASR_PULL_NAME in the environment names imports only: a download goes on (here to the daemon, absent)
    res = hasrctl("pull", "large-v3", "--no-autostart", env={**env_for(short_tmp), "HASR_PULL_NAME": "x"})
    assert "--name is for importing" not in res.stderr and "no hasrd answers" in res.stderr, show(res)


def _view(tty: bool = False) -> tuple[PullView, io.StringIO]:
    out = io.StringIO()
    return PullView(out, tty, verb="copying"), out


def test_a_copy_that_fails_midway_or_is_interrupted_installs_nothing(short_tmp: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", os.path.join(short_tmp, "data"))
    src = small_model(Path(short_tmp) / "src" / "m")
    real = modelimport.copy_file
    seen: list[str] = []

    def failing(exc: BaseException) -> Callable[[Path, Path, object, str], None]:
        def copy(s: Path, d: Path, view: object, shown: str) -> None:
            seen.append(shown)
            if shown == "model.bin":
                with open(d, "wb") as f:  # half of it arrived
                    f.write(b"\0" * 1000)
                raise exc
            real(s, d, view, shown)
        return copy

    monkeypatch.setattr(modelimport, "copy_file", failing(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))))
    with pytest.raises(CliError) as e:
        modelimport.import_dir(str(src), "full", _view()[0])
    assert "disk is full" in e.value.message and "nothing was installed" in e.value.message
    assert e.value.exit_code == 1 and seen[-1] == "model.bin"
    assert not (models_dir(short_tmp) / "full").exists() and leftovers(short_tmp) == []

    monkeypatch.setattr(modelimport, "copy_file", failing(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        modelimport.import_dir(str(src), "ctrl-c", _view()[0])
    assert not (models_dir(short_tmp) / "ctrl-c").exists() and leftovers(short_tmp) == []

    # not enough room: refused before a byte is copied
    monkeypatch.setattr(modelimport, "copy_file", real)
    monkeypatch.setattr(modelimport.shutil, "disk_usage", lambda p: type("U", (), {"free": 1 << 20})())
    with pytest.raises(CliError) as e:
        modelimport.import_dir(str(src), "small-disk", _view()[0])
    assert "not enough space" in e.value.message and leftovers(short_tmp) == []
    assert {p.name for p in models_dir(short_tmp).iterdir()} == set()


def test_the_copy_shows_a_bar_on_a_terminal_and_a_damaged_copy_is_not_installed(
        short_tmp: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", os.path.join(short_tmp, "data"))
    src = small_model(Path(short_tmp) / "src" / "m")
    view, out = _view(tty=True)
    _src, dest, total = modelimport.import_dir(str(src), "bar", view)
    assert dest == models_dir(short_tmp) / "bar" and total == sum(f.stat().st_size for f in models.fw_files(src))
    assert "\rmodel.bin 100% [####################] 138.5 MB/138.5 MB" in out.getvalue(), out.getvalue()[-500:]

    def damaged(s: Path, d: Path, view: object, shown: str) -> None:  # the bytes that land differ from the source's
        d.write_bytes(s.read_bytes()[:-10] if shown == "model.bin" else s.read_bytes())

    monkeypatch.setattr(modelimport, "copy_file", damaged)
    with pytest.raises(CliError) as e:
        modelimport.import_dir(str(src), "damaged", _view()[0])
    assert "damaged" in e.value.message and not (models_dir(short_tmp) / "damaged").exists()
    assert leftovers(short_tmp) == []
    with pytest.raises(UsageError):
        modelimport.check_name("a/b", given=True)


def test_a_data_directory_name_is_hasr_fw_models_too(short_tmp: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """HASR_FW_MODEL=NAME (the default's model, large-v3 of the GPU engines) finds an imported model as a
    request's `model` does, before the Hugging Face cache."""
    monkeypatch.setenv("XDG_DATA_HOME", os.path.join(short_tmp, "data"))
    monkeypatch.setenv("HF_HUB_CACHE", os.path.join(short_tmp, "hub"))
    small_model(models_dir(short_tmp) / "large-v3")
    fw = models.resolve_fw("large-v3")
    assert fw.source == "directory" and fw.path == str(models_dir(short_tmp) / "large-v3")
    with pytest.raises(Exception) as e:
        models.resolve_fw("large-v2")
    assert "hasrctl pull /path/to/faster-whisper-large-v2 --name large-v2" in str(e.value)


def test_an_imported_model_transcribes_through_a_running_daemon(short_tmp: str) -> None:
    """The daemon is already running when the model arrives: its next request finds it (no restart)."""
    env = env_for(short_tmp)
    daemon_env = {**env, "HASR_ENGINE": "whisper", "HASR_FW_DEVICE": "cpu", "HASR_FW_MODEL": model_dir(),
                  "HF_HUB_OFFLINE": "1", "PYTHONPATH": env["PYTHONPATH"]}
    h = Hasrd(os.path.join(short_tmp, "s"), env=daemon_env)
    try:
        res = hasrctl("pull", model_dir(), "--name", "imported", env={**env, "HASR_SOCKET": h.sock})
        assert res.returncode == 0, show(res)
        cli = {**env, "HASR_SOCKET": h.sock, "HASR_ENGINE": "whisper"}
        listed = hasrctl("models", env=cli)
        assert listed.returncode == 0 and "imported" in listed.stdout, show(listed)
        out = hasrctl("transcribe", str(DATA / "en_quick_brown_fox.flac"), "--model", "imported", "-l", "en", env=cli,
                      timeout=240)
        assert out.returncode == 0, show(out) + "\n" + h.log()
        assert "brown fox" in out.stdout.lower()
        assert [w["model"] for w in h.get("/api/ps")["workers"]] == ["imported"]
    finally:
        h.stop()


def test_pull_help_teaches_both_forms() -> None:
    res = subprocess.run(["python3", "-m", "hasrctl", "pull", "--help"], capture_output=True, text=True,
                         cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)
    assert res.returncode == 0
    assert "hasrctl pull large-v3" in res.stdout and "--name large-v3" in res.stdout
    assert "$XDG_DATA_HOME/hasr/models/NAME" in res.stdout


def test_the_newest_model_format_hasr_reads_is_the_installed_ctranslate2s() -> None:
    """A model.bin newer than CT2_BINARY_VERSION is refused at import (issue 39 #3): the day CTranslate2 writes a
    newer one, this fails here rather than hasr refusing good models."""
    from ctranslate2.specs import model_spec

    assert models.CT2_BINARY_VERSION == model_spec.CURRENT_BINARY_VERSION

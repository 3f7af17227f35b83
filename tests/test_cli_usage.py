"""hasrctl without a daemon: usage, exit codes, discovery order, output naming and safe writing."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from hasrctl import discovery, output
from hasrctl.client import CliError, DaemonError, UsageError, status_of
from hasrd.formats import Format as F
from tests.cliutil import cli_env, hasrctl, one_line, show


@pytest.fixture
def env(short_tmp: str) -> dict[str, str]:
    return cli_env(short_tmp)


@pytest.fixture
def wav(short_tmp: str) -> str:
    from tests.daemon import write_wav

    return write_wav(os.path.join(short_tmp, "a.wav"), 0.5)


def test_help_shows_examples_exit_codes_and_shell_completion(env: dict[str, str]) -> None:
    res = hasrctl("--help", env=env)
    assert res.returncode == 0, show(res)
    for text in ("Examples:", "hasrctl transcribe meeting.wav", "Exit codes: 0 ok, 1", "3 daemon unreachable",
                 "_HASRCTL_COMPLETE=bash_source hasrctl", "zsh_source", "fish_source"):
        assert text in res.stdout
    for cmd in ("transcribe", "status", "load", "unload", "stop", "doctor", "setup", "eval", "ps", "models", "pull",
                "rm"):
        assert cmd in res.stdout


@pytest.mark.parametrize("cmd", ["transcribe", "status", "load", "unload", "stop", "doctor", "setup", "eval", "ps",
                                 "models", "pull", "rm"])
def test_every_option_of_every_command_names_its_hasr_variable(env: dict[str, str], cmd: str) -> None:
    import click

    from hasrctl.cli import cli

    command = cli.get_command(click.Context(cli), cmd)
    assert command is not None
    for param in command.params:
        if param.param_type_name == "option" and param.name not in ("help", "remove"):
            assert param.envvar and str(param.envvar).startswith("HASR_"), (cmd, param.name)
    assert "env var: HASR_" in hasrctl(cmd, "--help", env=env).stdout


def test_bash_completion_script_is_generated(env: dict[str, str]) -> None:
    res = hasrctl(env={**env, "_HASRCTL_COMPLETE": "bash_source"})
    assert res.returncode == 0 and "complete " in res.stdout and "_HASRCTL_COMPLETE" in res.stdout


def test_unknown_option_and_missing_file_argument_are_usage_errors(env: dict[str, str]) -> None:
    assert hasrctl("transcribe", env=env).returncode == 2
    assert hasrctl("transcribe", "--bogus", "x.wav", env=env).returncode == 2
    assert hasrctl("frobnicate", env=env).returncode == 2


def test_unknown_format_is_exit_2_listing_the_valid_ones(env: dict[str, str], wav: str) -> None:
    res = hasrctl("transcribe", "-f", "docx", wav, env=env)
    assert res.returncode == 2
    assert "json" in res.stderr and "verbose_json" in res.stderr and res.stdout == ""


def test_format_comes_from_hasr_format(env: dict[str, str], wav: str, short_tmp: str) -> None:
    res = hasrctl("transcribe", "--no-autostart", wav, env={**env, "HASR_FORMAT": "docx"})
    assert res.returncode == 2 and "docx" in res.stderr


def test_no_daemon_and_no_autostart_exits_3_in_one_line(env: dict[str, str], wav: str, short_tmp: str) -> None:
    res = hasrctl("transcribe", "--no-autostart", wav, env=env)
    assert res.returncode == 3, show(res)
    assert res.stdout == ""
    line = one_line(res.stderr)
    assert "hasrd" in line and "autostart" in line and "Traceback" not in res.stderr


def test_hasr_autostart_0_refuses_like_the_flag(env: dict[str, str], wav: str) -> None:
    assert hasrctl("transcribe", wav, env={**env, "HASR_AUTOSTART": "0"}).returncode == 3


def test_a_closed_socket_is_unreachable_not_a_crash(env: dict[str, str], wav: str, short_tmp: str) -> None:
    path = os.path.join(short_tmp, "dead.sock")
    s = socket.socket(socket.AF_UNIX)
    s.bind(path)
    s.close()  # the file stays, nothing listens: ECONNREFUSED
    res = hasrctl("transcribe", "--no-autostart", "--socket", path, wav, env=env)
    assert res.returncode == 3 and path in one_line(res.stderr)
    res = hasrctl("status", env={**env, "HASR_SOCKET": path})
    assert res.returncode == 3 and "not running" in one_line(res.stderr)


def test_unload_and_stop_without_a_daemon_succeed_quietly(env: dict[str, str], short_tmp: str) -> None:
    for cmd in ("unload", "stop"):
        res = hasrctl(cmd, env=env)
        assert res.returncode == 0 and "not running" in res.stderr, show(res)
    assert not os.path.exists(os.path.join(short_tmp, "run", "hasr", "hasrd.sock"))


def test_bad_inputs_fail_before_any_daemon_is_needed(env: dict[str, str], short_tmp: str) -> None:
    os.mkdir(os.path.join(short_tmp, "adir"))
    for arg, words in (("missing.wav", "no such file"), ("adir", "is a directory")):
        res = hasrctl("transcribe", "--no-autostart", arg, env=env, cwd=short_tmp)
        assert res.returncode == 2, show(res)
        assert words in one_line(res.stderr) and arg in res.stderr
    assert not os.path.exists(os.path.join(short_tmp, "run", "hasr"))  # nothing was started


def test_a_bad_setting_is_exit_2_in_one_line(env: dict[str, str], wav: str) -> None:
    res = hasrctl("transcribe", wav, env={**env, "HASR_IDLE_EXIT_SEC": "soon"})
    assert res.returncode == 2 and "HASR_IDLE_EXIT_SEC" in one_line(res.stderr)


def test_hasr_debug_shows_the_traceback(env: dict[str, str], wav: str) -> None:
    res = hasrctl("transcribe", "--no-autostart", wav, env={**env, "HASR_DEBUG": "1"})
    assert res.returncode == 3 and "Traceback" in res.stderr


def test_discovery_tries_the_explicit_socket_alone_else_user_then_system(short_tmp: str,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", short_tmp)
    assert discovery.candidates(None) == [(f"{short_tmp}/hasr/hasrd.sock", "user"),
                                          ("/run/hasr/hasrd.sock", "system")]
    monkeypatch.chdir(short_tmp)
    assert discovery.candidates("rel.sock") == [(f"{short_tmp}/rel.sock", "explicit")]


def test_discovery_takes_the_first_socket_that_answers(short_tmp: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", short_tmp)
    os.makedirs(f"{short_tmp}/hasr", mode=0o700)
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(f"{short_tmp}/hasr/hasrd.sock")
    listener.listen()
    try:
        found = discovery.find(None, autostart=False, idle_exit=1, timeout=1, say=print)
        assert found == f"{short_tmp}/hasr/hasrd.sock"
        with pytest.raises(Exception) as err:  # an explicit socket is never replaced by another
            discovery.find(f"{short_tmp}/other.sock", autostart=False, idle_exit=1, timeout=1, say=print)
        assert getattr(err.value, "exit_code", None) == 3
    finally:
        listener.close()


def test_stream_errors_map_to_exit_codes_like_http_statuses() -> None:
    assert status_of("undecodable") == 400 and status_of("empty_file") == 400
    assert status_of("unknown_format") == 400 and status_of("too_large") == 413
    assert status_of("worker_crashed") == 500 and status_of("queue_full") == 503
    assert DaemonError("invalid_audio", "bad").exit_code == 2
    assert DaemonError("timeout", "slow").exit_code == 1


def _plans(*args: object, **kw: object) -> list[output.Plan]:
    out = []
    for _, p in output.plan(*args, **kw):  # type: ignore[arg-type]
        assert isinstance(p, output.Plan), p
        out.append(p)
    return out


def test_several_formats_get_a_file_each_in_the_directory_or_beside_the_input(short_tmp: str, wav: str) -> None:
    [p] = _plans([wav], [F.TEXT, F.SRT, F.VERBOSE_JSON], short_tmp + "/", beside=False)
    assert p.targets == (("text", Path(short_tmp, "a.txt")), ("srt", Path(short_tmp, "a.srt")),
                         ("verbose_json", Path(short_tmp, "a.json")))
    [p] = _plans([wav], [F.SRT, F.VTT], None, beside=True)
    assert [t for _, t in p.targets] == [Path(short_tmp, "a.srt"), Path(short_tmp, "a.vtt")]
    [p] = _plans([wav], [F.SRT, F.VTT], f"{short_tmp}/subs", beside=False)  # no suffix: a directory, made
    assert p.target == Path(short_tmp, "subs", "a.srt") and Path(short_tmp, "subs").is_dir()
    for out, words in ((None, "cannot share stdout"), ("-", "cannot share stdout"),
                       (f"{short_tmp}/t.srt", "need a directory")):
        with pytest.raises(UsageError, match=words):
            output.plan([wav], [F.SRT, F.VTT], out, beside=False)
    with pytest.raises(UsageError, match="same NAME"):
        output.plan([wav], [F.JSON, F.VERBOSE_JSON], short_tmp, beside=False)


def test_outputs_go_into_a_directory_as_name_dot_extension(short_tmp: str, wav: str) -> None:
    plans = _plans([wav, "-"], F.SRT, short_tmp + "/", beside=False)
    assert [p.target for p in plans] == [Path(short_tmp, "a.srt"), Path(short_tmp, "stdin.srt")]
    [p] = _plans([wav], F.VERBOSE_JSON, None, beside=True)
    assert p.target == Path(short_tmp, "a.json")
    [p] = _plans([wav], F.TEXT, None, beside=False)
    assert p.target is None and p.source == wav


def test_relative_inputs_become_absolute(short_tmp: str, wav: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(short_tmp)
    [p] = _plans(["a.wav"], F.TEXT, None, beside=False)
    assert p.source == wav


def test_output_naming_conflicts_are_refused(short_tmp: str, wav: str) -> None:
    os.mkdir(f"{short_tmp}/sub")
    other = f"{short_tmp}/sub/a.wav"
    Path(other).write_bytes(Path(wav).read_bytes())
    plans = output.plan([wav, other], F.TEXT, short_tmp, beside=False)
    assert isinstance(plans[1][1], UsageError) and "would write" in plans[1][1].message
    with pytest.raises(UsageError, match="several inputs need a directory"):
        output.plan([wav, other], F.TEXT, f"{short_tmp}/out.txt", beside=False)
    with pytest.raises(UsageError, match="either"):
        output.plan([wav], F.TEXT, short_tmp, beside=True)
    [(_, err)] = output.plan(["-"], F.TEXT, None, beside=True)
    assert isinstance(err, UsageError)


def test_writing_never_overwrites_without_force(short_tmp: str) -> None:
    target = Path(short_tmp, "t.txt")
    output.write(target, "one\n", force=False)
    with pytest.raises(UsageError, match="--force"):
        output.check_free(target, force=False)
    with pytest.raises(UsageError, match="--force"):
        output.write(target, "two\n", force=False)
    assert target.read_text() == "one\n"
    output.write(target, "three\n", force=True)
    assert target.read_text() == "three\n"
    assert sorted(os.listdir(short_tmp)) == ["t.txt"]  # no temporary files left behind
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~_umask()


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


HEAVY = ("starlette", "uvicorn", "numpy", "av", "faster_whisper", "ctranslate2", "torch", "vllm", "httpx",
         "hasrd.server", "hasrd.scheduler", "hasrd.runner", "hasrd.audio")


@pytest.mark.parametrize("args", [["status"], ["transcribe", "--no-autostart", "x.wav"], ["--help"]])
def test_the_client_never_imports_the_server_or_gpu_stacks(env: dict[str, str], args: list[str]) -> None:
    import subprocess
    import sys

    code = ("import sys\nsys.argv = ['hasrctl', *sys.argv[1:]]\nfrom hasrctl.cli import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            f"print(sorted(m for m in sys.modules if m in {HEAVY!r} or m.split('.')[0] in {HEAVY!r}))")
    res = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=60)
    assert res.stdout.strip().splitlines()[-1] == "[]", res.stdout + res.stderr


def test_status_imports_nothing_of_transcription(env: dict[str, str]) -> None:
    """Issue 32 #10: ``hasrctl status`` loaded the transcribe command's modules (the subtitle splitter, msgspec,
    the output planner) before it asked the daemon anything; it has a 0.1 s budget."""
    import subprocess
    import sys

    light = ("msgspec", "hasrd.subtitles", "hasrd.transcript", "hasrctl.commands", "hasrctl.output",
             "hasrctl.terminal", "rjieba")
    code = ("import sys\nsys.argv = ['hasrctl', 'status']\nfrom hasrctl.cli import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            f"print(sorted(m for m in sys.modules if m in {light!r} or m.split('.')[0] in {light!r}))")
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert res.stdout.strip().splitlines()[-1] == "[]", res.stdout + res.stderr
    assert "hasrd is not running" in res.stderr  # it did run: status, without a daemon


# --- where transcripts may be written ------------------------------------------------------------------------------
def test_dash_and_dev_stdout_as_output_mean_stdout(wav: str) -> None:
    for out in ("-", "/dev/stdout"):
        [p] = _plans([wav], F.SRT, out, beside=False)
        assert p.target is None, out
    [p] = _plans([wav, "-"], F.TEXT, "-", beside=False)[1:]
    assert p.target is None


def test_force_onto_a_link_writes_through_it_and_keeps_the_link(short_tmp: str) -> None:
    real = Path(short_tmp, "real.txt")
    real.write_text("old\n")
    link = Path(short_tmp, "link.txt")
    link.symlink_to(real)
    with pytest.raises(UsageError, match="--force"):
        output.check_free(link, force=False)
    with pytest.raises(UsageError, match="--force"):
        output.write(link, "new\n", force=False)
    output.check_free(link, force=True)
    output.write(link, "new\n", force=True)
    assert link.is_symlink() and os.readlink(link) == str(real)  # the link itself is untouched ...
    assert real.read_text() == "new\n"  # ... and the file behind it has the transcript
    dangling = Path(short_tmp, "dangling.txt")
    dangling.symlink_to(Path(short_tmp, "nowhere", "x.txt"))
    for force in (False, True):
        with pytest.raises(UsageError, match="symbolic link to .* which does not exist"):
            output.check_free(dangling, force)
    assert sorted(os.listdir(short_tmp)) == ["dangling.txt", "link.txt", "real.txt"]  # no temporary files


def test_devices_and_fifos_are_written_not_renamed_over(short_tmp: str) -> None:
    import threading

    output.check_free(Path("/dev/null"), force=False)  # nothing to overwrite: no --force needed
    output.write(Path("/dev/null"), "text\n", force=False)
    output.write(Path("/dev/null"), "text\n", force=True)
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    fifo = Path(short_tmp, "pipe")
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    output.write(fifo, "through the pipe\n", force=False)
    reader.join(10)
    assert got == [b"through the pipe\n"] and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    with pytest.raises(UsageError, match="is a directory"):
        output.check_free(Path(short_tmp), force=True)
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(os.path.join(short_tmp, "s.sock"))
    try:
        with pytest.raises(UsageError, match="not a regular file"):
            output.write(Path(short_tmp, "s.sock"), "x", force=True)
    finally:
        sock.close()


def test_without_xdg_runtime_dir_the_logins_run_user_dir_comes_first(short_tmp: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 32 #6: `su - USER` leaves XDG_RUNTIME_DIR unset while /run/user/<uid> (systemd's socket after setup)
    is there: it is the user's runtime directory, then /tmp/hasr-<uid> (a daemon hasrctl started), then the
    system's; systemctl is given it too."""
    from hasrd import config

    root = Path(short_tmp, "run-user")
    login = root / str(os.getuid())
    login.mkdir(parents=True, mode=0o700)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(discovery, "LOGIN_RUNTIME_ROOT", root)
    tmp = config.runtime_dir()
    assert discovery.runtime_dir() == login and discovery.default_socket() == f"{login}/hasr/hasrd.sock"
    assert discovery.candidates(None) == [(f"{login}/hasr/hasrd.sock", "user"), (f"{tmp}/hasr/hasrd.sock", "user"),
                                          ("/run/hasr/hasrd.sock", "system")]
    assert discovery.private_dirs(f"{login}/hasr/hasrd.sock") == [login / "hasr"]
    assert discovery.private_dirs(f"{tmp}/hasr/hasrd.sock") == [tmp, tmp / "hasr"]
    assert discovery._scrubbed_env()["XDG_RUNTIME_DIR"] == str(login)
    os.makedirs(login / "hasr", mode=0o700)
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(f"{login}/hasr/hasrd.sock")
    listener.listen()
    try:
        assert discovery.find(None, autostart=False, idle_exit=1, timeout=1, say=print) == f"{login}/hasr/hasrd.sock"
    finally:
        listener.close()
    monkeypatch.setenv("XDG_RUNTIME_DIR", short_tmp)  # a login session's own variable wins
    assert discovery.default_socket() == f"{short_tmp}/hasr/hasrd.sock"


@pytest.mark.parametrize("how", ["open", "link", "missing"])
def test_a_run_user_dir_that_is_not_ours_and_private_is_not_used(short_tmp: str, monkeypatch: pytest.MonkeyPatch,
                                                                 how: str) -> None:
    from hasrd import config

    root = Path(short_tmp, "run-user")
    root.mkdir()
    login = root / str(os.getuid())
    if how == "open":
        login.mkdir(mode=0o755)
        login.chmod(0o755)
    elif how == "link":
        os.makedirs(Path(short_tmp, "elsewhere"), mode=0o700)
        login.symlink_to(Path(short_tmp, "elsewhere"))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(discovery, "LOGIN_RUNTIME_ROOT", root)
    assert discovery.runtime_dir() == config.runtime_dir()
    assert discovery.candidates(None)[0] == (config.default_socket(), "user")


@pytest.mark.parametrize("cmd", [["ps"], ["models"], ["rm", "large-v3"]])
def test_commands_that_never_start_a_daemon_do_not_suggest_an_option_they_lack(env: dict[str, str],
                                                                              cmd: list[str]) -> None:
    """Issue 32 #8: ps, models and rm have no --autostart, so `drop --no-autostart` was no advice."""
    res = hasrctl(*cmd, env=env)
    line = one_line(res.stderr)
    assert res.returncode == 3 and "not running" in line and "autostart" not in line, show(res)
    assert "`hasrctl transcribe` or `hasrctl load` start one" in line


# --- the socket directory ----------------------------------------------------------------------------------------
@pytest.fixture
def fallback(short_tmp: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """XDG_RUNTIME_DIR unset: the runtime directory is the /tmp/hasr-$UID stand-in (here under short_tmp)."""
    from hasrd import config

    rt = Path(short_tmp, f"hasr-{os.getuid()}")
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(config, "runtime_dir", lambda: rt)
    monkeypatch.setattr(discovery, "LOGIN_RUNTIME_ROOT", Path(short_tmp, "no-run-user"))
    return rt


def test_without_xdg_runtime_dir_the_socket_dirs_are_created_private(fallback: Path) -> None:
    assert discovery.default_socket() == str(fallback / "hasr" / "hasrd.sock")
    assert discovery.private_dirs(discovery.default_socket()) == [fallback, fallback / "hasr"]
    discovery.secure_dir(discovery.default_socket(), create=True)
    for d in (fallback, fallback / "hasr"):
        st = os.lstat(d)
        assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.getuid()


def test_a_planted_or_open_socket_dir_is_refused_before_anything_connects(fallback: Path, short_tmp: str) -> None:
    sock = discovery.default_socket()
    fallback.mkdir(mode=0o755)
    os.chmod(fallback, 0o755)  # group and others may enter (and with w, replace the socket)
    with pytest.raises(discovery.UnsafeDir, match="0755.*chmod 700"):
        discovery.secure_dir(sock, create=True)
    with pytest.raises(CliError, match="0755") as err:  # find() says it in one line, exit 3
        discovery.find(None, autostart=True, idle_exit=1, timeout=1, say=print)
    assert err.value.exit_code == 3
    os.rmdir(fallback)
    elsewhere = Path(short_tmp, "elsewhere")
    elsewhere.mkdir(mode=0o700)
    fallback.symlink_to(elsewhere)  # a link, even to a good directory
    with pytest.raises(discovery.UnsafeDir, match="symbolic link"):
        discovery.secure_dir(sock, create=True)
    fallback.unlink()
    if os.getuid() == 0:  # someone else's directory (only root can make one for the test)
        fallback.mkdir(mode=0o700)
        os.chown(fallback, 65534, 65534)
        with pytest.raises(discovery.UnsafeDir, match="belongs to uid 65534"):
            discovery.secure_dir(sock, create=True)


def test_hasrctl_refuses_an_open_socket_dir_in_one_line(env: dict[str, str], wav: str, short_tmp: str) -> None:
    os.makedirs(os.path.join(env["XDG_RUNTIME_DIR"], "hasr"), mode=0o755)
    os.chmod(os.path.join(env["XDG_RUNTIME_DIR"], "hasr"), 0o755)
    res = hasrctl("transcribe", wav, env=env)
    assert res.returncode == 3 and "must be 0700" in one_line(res.stderr), show(res)
    assert not os.path.exists(os.path.join(env["XDG_RUNTIME_DIR"], "hasr", "hasrd.log"))  # nothing started


def test_the_daemon_log_is_never_opened_through_a_link(env: dict[str, str], wav: str, short_tmp: str) -> None:
    run = os.path.join(env["XDG_RUNTIME_DIR"], "hasr")
    os.makedirs(run, mode=0o700)
    victim = Path(short_tmp, "victim.txt")
    victim.write_text("mine\n")
    os.symlink(victim, os.path.join(run, "hasrd.log"))
    res = hasrctl("transcribe", wav, env=env)
    assert res.returncode == 3 and "hasrd.log" in one_line(res.stderr), show(res)
    assert victim.read_text() == "mine\n"


def test_status_without_a_daemon_does_not_suggest_autostart_flags(env: dict[str, str]) -> None:
    res = hasrctl("status", env=env)
    line = one_line(res.stderr)
    assert res.returncode == 3 and "not running" in line and "autostart" not in line, show(res)
    assert "hasrctl transcribe" in line or "systemctl" in line


def test_language_help_says_what_each_engine_does_without_it(env: dict[str, str]) -> None:
    text = " ".join(hasrctl("transcribe", "--help", env=env).stdout.split())
    assert "[default: detect]" not in text
    assert "the engine detects it" in text and "R2T2 detects its own" in text and "how sure" in text


def test_help_has_no_stray_control_characters_and_offers_autostart_only_where_it_is_honoured() -> None:
    import subprocess
    import sys

    def helptext(*cmd: str) -> str:
        return subprocess.run([sys.executable, "-m", "hasrctl", *cmd, "--help"], capture_output=True,
                              text=True, timeout=60).stdout

    assert "\b" not in helptext()
    for cmd in ("transcribe", "load"):
        assert "--autostart" in helptext(cmd)
    for cmd in ("status", "unload", "stop"):  # they never start a daemon
        assert "--autostart" not in helptext(cmd) and "--socket" in helptext(cmd)

"""Autostart from nothing: no daemon, ``hasrctl transcribe`` starts one, which leaves after its idle time."""

from __future__ import annotations

import os
import re
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.cliutil import cli_env, hasrctl, one_line, show
from tests.conftest import pid_alive, wait_until
from tests.daemon import write_wav

FINAL = "今天天气很好。\n我们去公园散步\n"  # one sentence a line (the CLI's text format)


def _started_pid(stderr: str) -> int:
    m = re.search(r"started hasrd \(pid (\d+)\)", stderr)
    assert m, stderr
    return int(m.group(1))


@pytest.fixture
def env(short_tmp: str) -> dict[str, str]:
    return cli_env(short_tmp, HASR_IDLE_EXIT_SEC="2", HASR_IDLE_TTL_SEC="1")


def test_transcribe_starts_a_daemon_that_exits_when_idle(env: dict[str, str], short_tmp: str) -> None:
    wav = write_wav(os.path.join(short_tmp, "a.wav"), 1.0)
    sock = os.path.join(env["XDG_RUNTIME_DIR"], "hasr", "hasrd.sock")
    res = hasrctl("transcribe", wav, env=env)
    assert res.returncode == 0, show(res)
    assert res.stdout == FINAL
    started = [ln for ln in res.stderr.splitlines() if "started hasrd" in ln]
    assert len(started) == 1, res.stderr  # said once, on stderr (then the file's summary line)
    line = started[0]
    assert sock in line and "2 s idle" in line
    assert [ln for ln in res.stderr.splitlines() if ln != line and "a.wav: ok" not in ln] == [], res.stderr
    pid = _started_pid(line)
    log = os.path.join(env["XDG_RUNTIME_DIR"], "hasr", "hasrd.log")
    assert os.path.isfile(log) and oct(os.stat(log).st_mode & 0o777) == "0o600"
    try:
        assert pid_alive(pid)
        # It runs in its own session, detached from ours.
        assert os.getsid(pid) == pid
        again = hasrctl("transcribe", wav, env=env)
        assert again.returncode == 0 and "started hasrd" not in again.stderr, show(again)  # the summary alone
        assert wait_until(lambda: not pid_alive(pid), timeout=30), "the autostarted hasrd did not exit when idle"
        assert hasrctl("status", env=env).returncode == 3
        # The next command starts a fresh one on the same path.
        third = hasrctl("transcribe", wav, env=env)
        assert third.returncode == 0 and third.stdout == FINAL, show(third)
        pid = _started_pid(third.stderr)
    finally:
        if pid_alive(pid):
            os.kill(pid, 15)
            wait_until(lambda: not pid_alive(pid), timeout=20)


def test_no_autostart_exits_3_and_starts_nothing(env: dict[str, str], short_tmp: str) -> None:
    wav = write_wav(os.path.join(short_tmp, "a.wav"), 0.5)
    res = hasrctl("transcribe", "--no-autostart", wav, env=env)
    assert res.returncode == 3 and "autostart is off" in one_line(res.stderr)
    assert not os.path.exists(os.path.join(env["XDG_RUNTIME_DIR"], "hasr", "hasrd.sock"))


def test_concurrent_first_commands_start_one_daemon(env: dict[str, str], short_tmp: str) -> None:
    wav = write_wav(os.path.join(short_tmp, "a.wav"), 0.5)
    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda _: hasrctl("transcribe", wav, env=env), range(3)))
    assert [r.returncode for r in results] == [0, 0, 0], [show(r) for r in results]
    assert all(r.stdout == FINAL for r in results)
    started = [r for r in results if "started hasrd" in r.stderr]
    assert len(started) == 1
    pid = _started_pid(started[0].stderr)
    os.kill(pid, 15)
    assert wait_until(lambda: not pid_alive(pid), timeout=20)


def test_a_daemon_that_cannot_start_is_exit_3_with_its_last_words(env: dict[str, str], short_tmp: str) -> None:
    wav = write_wav(os.path.join(short_tmp, "a.wav"), 0.5)
    res = hasrctl("transcribe", wav, env={**env, "HASR_MAX_QUEUE": "many"})
    assert res.returncode == 2 and "HASR_MAX_QUEUE" in one_line(res.stderr)  # checked before starting anything
    res = hasrctl("transcribe", "--socket", "/proc/nope/s.sock", wav, env=env)
    assert res.returncode == 3 and "/proc/nope" in one_line(res.stderr), show(res)
    too_long = os.path.join(short_tmp, "x" * 120, "s.sock")  # AF_UNIX paths stop at 107 bytes
    res = hasrctl("transcribe", "--socket", too_long, wav, env=env)
    assert res.returncode == 3, show(res)
    line = one_line(res.stderr)
    assert "exited at once" in line and "hasrd.log" in line

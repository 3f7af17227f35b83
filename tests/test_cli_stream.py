"""--stream in a real terminal (tmux): the screen shows the draft first, then the final sentences replace it."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from typing import Iterator

import pytest

from tests.cliutil import REPO, cli_env
from tests.daemon import Hasrd, write_wav


@pytest.fixture
def tmux(short_tmp: str) -> Iterator[list[str]]:
    """A private tmux server (its own socket), killed afterwards."""
    assert shutil.which("tmux"), "tmux is needed: apt-get install tmux"
    base = ["tmux", "-S", os.path.join(short_tmp, "tmux.sock")]
    yield base
    subprocess.run([*base, "kill-server"], capture_output=True)


def _screen(tmux: list[str]) -> str:
    res = subprocess.run([*tmux, "capture-pane", "-e", "-p", "-t", "cli"], capture_output=True, text=True)
    return res.stdout


def _run_in_tmux(tmux: list[str], env: dict[str, str], args: list[str], done_file: str,
                 width: int = 100, redirect: str = "") -> list[str]:
    """Start ``hasrctl ARGS`` in a tmux window and take screenshots until it has finished."""
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items() if k.startswith(("HASR_", "XDG_", "PYTHON")))
    cmd = (f"cd {shlex.quote(str(REPO))} && env {exports} {shlex.quote(sys.executable)} -m hasrctl "
           f"{' '.join(shlex.quote(a) for a in args)} {redirect}; echo \"rc=$?\" > {shlex.quote(done_file)}; "
           "sleep 30")
    subprocess.run([*tmux, "new-session", "-d", "-s", "cli", "-x", str(width), "-y", "20", cmd], check=True)
    shots: list[str] = []
    end = time.monotonic() + 60
    while time.monotonic() < end:
        shots.append(_screen(tmux))
        if os.path.exists(done_file) and open(done_file).read().strip():
            time.sleep(0.2)
            shots.append(_screen(tmux))
            return shots
        time.sleep(0.03)
    raise AssertionError("hasrctl did not finish; last screen:\n" + shots[-1])


def _split(screen: str) -> tuple[str, str]:
    """(final text, dimmed draft text) of the first screen line; tmux -e marks the dim draft with SGR 2."""
    line = screen.splitlines()[0] if screen.strip() else ""
    final, _, draft = line.partition("\x1b[2m")
    strip = lambda t: re.sub(r"\x1b\[[0-9;]*m", "", t)  # noqa: E731
    return strip(final), strip(draft)


def test_stream_shows_the_draft_before_the_final_text(tmux: list[str], short_tmp: str) -> None:
    wav = write_wav(os.path.join(short_tmp, "talk.wav"), 4.0)
    d = Hasrd(os.path.join(short_tmp, "s.sock"), env={"HASR_FAKE_RTF": "1.0"})
    try:
        env = cli_env(short_tmp, HASR_SOCKET=d.sock)
        shots = _run_in_tmux(tmux, env, ["transcribe", "--stream", wav], os.path.join(short_tmp, "done"))
    finally:
        assert d.stop() == 0
    states = [_split(s) for s in shots]
    assert states[-1] == ("今天天气很好。我们去公园散步", ""), shots[-1]  # only the final text stays
    assert "rc=" not in shots[-1]
    first_draft = next(i for i, (fin, dr) in enumerate(states) if dr and not fin)
    first_final = states.index(states[-1])
    assert first_draft < first_final
    # The draft grew on screen before any sentence was final ...
    assert any(dr.startswith("今天") and "很好" not in dr for fin, dr in states[:first_final] if not fin), states
    # ... and after the first sentence settled, the draft of the second one followed it on the same line.
    assert any(fin == "今天天气很好。" and dr.startswith("我们") for fin, dr in states[:first_final]), states


def test_stream_to_a_file_keeps_the_live_view_on_the_terminal(tmux: list[str], short_tmp: str) -> None:
    wav = write_wav(os.path.join(short_tmp, "talk.wav"), 2.0)
    out = os.path.join(short_tmp, "out.srt")
    d = Hasrd(os.path.join(short_tmp, "s.sock"), env={"HASR_FAKE_RTF": "1.0"})
    try:
        env = cli_env(short_tmp, HASR_SOCKET=d.sock)
        shots = _run_in_tmux(tmux, env, ["transcribe", "--stream", "-f", "srt", "-o", out, wav],
                             os.path.join(short_tmp, "done"))
    finally:
        assert d.stop() == 0
    assert any("今天" in s for s in shots[:-1])
    assert open(out).read().startswith("1\n00:00:00,000 --> ")
    assert open(os.path.join(short_tmp, "done")).read().strip() == "rc=0"


def test_progress_shows_on_a_terminal_while_stdout_goes_to_a_file(tmux: list[str], short_tmp: str) -> None:
    wav = write_wav(os.path.join(short_tmp, "talk.wav"), 3.0)
    out = os.path.join(short_tmp, "talk.txt")
    d = Hasrd(os.path.join(short_tmp, "s.sock"), env={"HASR_FAKE_RTF": "0.7"})
    try:
        env = cli_env(short_tmp, HASR_SOCKET=d.sock)
        shots = _run_in_tmux(tmux, env, ["transcribe", wav], os.path.join(short_tmp, "done"),
                             redirect=f"> {shlex.quote(out)}")
    finally:
        assert d.stop() == 0
    bars = [s for s in shots if "s audio" in s]
    assert bars and any("[#" in s and "/3.0 s audio" in s for s in bars), shots
    assert _split(shots[-1]) == ("", "")  # erased when done: the terminal is left clean
    assert open(out).read() == "今天天气很好。我们去公园散步\n"  # the file has the transcript alone

"""An output hasrctl cannot write (issue 39 #5): `--beside ro/talk.wav` or `-o ro/` transcribed the whole file, then
ended in `internal error: PermissionError` and lost the text. Now it is refused before any work, in words; and a
write that still fails afterwards keeps the transcript where the tray keeps its own, and says where.

hasrctl runs as root without the rights that pass file permissions (cliutil.NO_OVERRIDE), as a user meets a
read-only directory; a real daemon with the fake engine.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cliutil import NO_OVERRIDE, REPO, cli_env, hasrctl, show
from tests.conftest import wait_until
from tests.daemon import Hasrd, write_wav


@pytest.fixture
def setup(short_tmp: str) -> tuple[Hasrd, dict[str, str], Path]:
    ro = Path(short_tmp) / "ro"
    ro.mkdir()
    write_wav(str(ro / "talk.wav"), 6.0)
    d = Hasrd(os.path.join(short_tmp, "s.sock"), env={"HASR_FAKE_RTF": "0.5"})
    return d, cli_env(short_tmp, HASR_SOCKET=d.sock), ro


@pytest.mark.parametrize("where", [["--beside"], ["-o", "ro/"]])
def test_an_output_directory_that_cannot_be_written_is_refused_before_any_work(
        setup: tuple[Hasrd, dict[str, str], Path], where: list[str]) -> None:
    d, env, ro = setup
    try:
        ro.chmod(0o555)
        res = hasrctl("transcribe", "-f", "srt", *where, "ro/talk.wav", env=env, cwd=str(ro.parent), wrap=NO_OVERRIDE)
        assert res.returncode == 2, show(res)
        assert res.stderr == f"hasrctl: ro/talk.wav: cannot write talk.srt in {ro}: Permission denied\n", show(res)
        assert d.get("/api/ps")["state"] == "stopped"  # nothing was transcribed: no worker ever started
    finally:
        ro.chmod(0o755)
        d.stop()


def test_a_write_that_fails_after_the_work_keeps_the_transcript_and_says_where(
        setup: tuple[Hasrd, dict[str, str], Path]) -> None:
    d, env, ro = setup
    try:
        proc = subprocess.Popen([*NO_OVERRIDE, sys.executable, "-m", "hasrctl", "transcribe", "-f", "txt,srt",
                                 "--beside", str(ro / "talk.wav")], env=env, cwd=REPO, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        assert wait_until(lambda: d.get("/api/ps")["running"] == 1, 60)
        ro.chmod(0o555)  # checked writable at the start; read-only by the time the text is there
        out, err = proc.communicate(timeout=60)
        kept = Path(env["XDG_DATA_HOME"]) / "hasr" / "transcripts"
        assert proc.returncode == 1 and "internal error" not in err, (out, err)
        assert f"cannot write {ro / 'talk.txt'}: Permission denied; the transcript is kept in {kept / 'talk.txt'}" \
            in err and f"the transcript is kept in {kept / 'talk.srt'}" in err, err
        assert "今天天气很好" in (kept / "talk.txt").read_text() and "-->" in (kept / "talk.srt").read_text()
        assert sorted(p.name for p in ro.iterdir()) == ["talk.wav"] and out == ""
    finally:
        ro.chmod(0o755)
        d.stop()

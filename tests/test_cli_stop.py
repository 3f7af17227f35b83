"""``hasrctl stop`` during long work (issue 39 #4): it says what it waits for before it waits, honours --wait,
names the way to stop at once, and never ends in an internal error. A daemon hasrctl talks to directly, and one
systemd runs (a real ``systemd --user`` manager, tests/sdmanager.py): before, `systemctl stop` ran silent for 60 s
and ended in `internal error: TimeoutExpired`.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys

from sdmanager import SdManager, sd_manager  # noqa: F401  (sd_manager is a fixture)
from hasrctl.client import probe
from tests.cliutil import REPO, cli_env, hasrctl, show
from tests.conftest import wait_until
from tests.daemon import Hasrd, client, write_wav
from tests.test_cli_setup import _env, _fake_service


def send(sock_path: str, wav: str) -> socket.socket:
    """A /transcribe request that stays: its answer is read with :func:`answer`."""
    raw = json.dumps({"audio_path": wav}).encode()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sock_path)
    s.sendall(f"POST /transcribe HTTP/1.1\r\nHost: hasr\r\nContent-Type: application/json\r\n"
              f"Content-Length: {len(raw)}\r\n\r\n".encode() + raw)
    return s


def answer(s: socket.socket) -> str:
    s.settimeout(60)
    data = b""
    while b"}}" not in data and (chunk := s.recv(65536)):
        data += chunk
    return data.decode(errors="replace")


def test_stop_says_what_it_waits_for_before_it_waits_and_the_way_it_names_stops_at_once(short_tmp: str) -> None:
    wav = write_wav(os.path.join(short_tmp, "long.wav"), 600.0)  # ten minutes of paced work
    d = Hasrd(os.path.join(short_tmp, "s.sock"), env={"HASR_FAKE_RTF": "1"})
    env = cli_env(short_tmp, HASR_SOCKET=d.sock)
    job = send(d.sock, wav)
    try:
        assert wait_until(lambda: d.get("/api/ps")["running"] == 1, 60)
        proc = subprocess.Popen([sys.executable, "-m", "hasrctl", "stop", "--wait", "600"], env=env, cwd=REPO,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stderr is not None
        said = proc.stderr.readline()  # while it waits: it would wait ten minutes
        assert proc.poll() is None and d.proc.poll() is None, "hasrctl had ended before it said what it waits for"
        assert said.startswith("hasrctl: hasrd is finishing long.wav (") and "waiting up to 600 s (--wait)" in said
        assert f"`kill {d.proc.pid}`" in said, said
        assert wait_until(lambda: not probe(d.sock), 60)  # asked to stop: it no longer listens, it finishes
        os.kill(d.proc.pid, signal.SIGTERM)  # the way it named: stops at once, the job fails in words
        assert '"code":"shutting_down"' in answer(job)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0 and out == "stopped hasrd\n" and err == "", (said, out, err)
        assert d.proc.wait(30) == 0
    finally:
        job.close()
        d.stop()


def test_stop_now_fails_the_running_work_at_once(short_tmp: str) -> None:
    wav = write_wav(os.path.join(short_tmp, "long.wav"), 600.0)
    d = Hasrd(os.path.join(short_tmp, "s.sock"), env={"HASR_FAKE_RTF": "1"})
    job = send(d.sock, wav)
    try:
        assert wait_until(lambda: d.get("/api/ps")["running"] == 1, 60)
        res = hasrctl("stop", "--now", env=cli_env(short_tmp, HASR_SOCKET=d.sock))
        assert res.returncode == 0 and res.stdout == "stopped hasrd\n", show(res)
        assert res.stderr.startswith("hasrctl: stopping hasrd now: long.wav ("), show(res)
        assert '"code":"shutting_down"' in answer(job)
        assert d.proc.wait(30) == 0
    finally:
        job.close()
        d.stop()


def test_stop_of_the_systemd_service_during_long_work_waits_as_long_as_asked_then_stops_now(
        sd_manager: SdManager) -> None:
    m = sd_manager
    env = _env(m)
    _fake_service(m, HASR_FAKE_RTF="1")
    assert hasrctl("setup", "--no-tray", env=env).returncode == 0
    sock = str(m.runtime_dir / "hasr" / "hasrd.sock")
    wavs = [write_wav(str(m.base / f"{n}.wav"), 600.0) for n in ("one", "two")]
    jobs = [send(sock, w) for w in wavs]
    try:
        m.wait_for("hasrd.service", "ActiveState", "active")
        with client(sock) as c:
            assert wait_until(lambda: c.get("/api/ps").json()["running"] == 2, 60)
        res = hasrctl("stop", "--wait", "1", env=env)  # --wait is honoured: exit 1, systemd goes on
        said, err = res.stderr.splitlines()[0], res.stderr.splitlines()[-1]
        assert "hasrd is finishing " in said and "one.wav (" in said and "two.wav (" in said, said
        assert "waiting up to 1 s (--wait); `hasrctl stop --now` stops it at once" in said, said
        assert res.returncode == 1 and "internal error" not in res.stderr and "still finishing" in err, show(res)
        assert m.show("hasrd.service", "ActiveState") == "deactivating"  # systemd goes on stopping it

        again = hasrctl("stop", "--now", env=env)
        assert again.returncode == 0, show(again) + m.log()
        assert "stopping hasrd.service now" in again.stderr and "stopped hasrd.service" in again.stdout
        assert all('"code":"shutting_down"' in answer(j) for j in jobs)
        m.wait_for("hasrd.service", "ActiveState", "inactive", "failed")
        assert m.show("hasrd.socket", "ActiveState") == "active"
    finally:
        for j in jobs:
            j.close()

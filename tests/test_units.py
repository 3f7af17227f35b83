"""The shipped systemd units: `systemd-analyze verify`, the properties the design relies on, and a real
`systemd --user` manager socket-activating a tiny Python service through them (tests/sdmanager.py)."""

from __future__ import annotations

import os
import functools
import shutil
import socket
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sdmanager import SdManager, sd_manager, test_dropin  # noqa: F401  (sd_manager is a fixture)
from tests.conftest import need

UNITS = Path(__file__).resolve().parent.parent / "systemd"
USER_UNITS = [UNITS / "hasrd.socket", UNITS / "hasrd.service"]
SYSTEM_UNITS = [UNITS / "system" / "hasrd.socket", UNITS / "system" / "hasrd.service"]

def needs_analyze(test: Callable[..., None]) -> Callable[..., None]:
    """systemd-analyze is required (skipped on a developer machine without it, a failure under CI)."""
    @functools.wraps(test)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        need(shutil.which("systemd-analyze") is not None, "systemd-analyze not installed")
        test(*args, **kwargs)
    return wrapper


def keys(path: Path) -> dict[str, list[str]]:
    """Unit file assignments, section.key -> values (keys may repeat, as DeviceAllow= does)."""
    out: dict[str, list[str]] = {}
    section = ""
    for line in path.read_text().splitlines():
        line = line.strip()
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
        elif line and not line.startswith(("#", ";")) and "=" in line:
            k, v = line.split("=", 1)
            out.setdefault(f"{section}.{k}", []).append(v)
    return out


def verify(units: list[Path], tmp_path: Path, *user: str) -> None:
    """systemd-analyze verify on copies whose ExecStart= names an executable stub (verify requires one)."""
    stub = tmp_path / "hasrd"
    stub.write_text("#!/bin/sh\nexit 0\n")
    stub.chmod(0o755)
    (tmp_path / "xdg").mkdir(mode=0o700)
    copies = []
    for u in units:
        lines = [f"ExecStart={stub}" if ln.startswith("ExecStart=") else ln for ln in u.read_text().splitlines()]
        (tmp_path / u.name).write_text("\n".join(lines) + "\n")
        copies.append(f"./{u.name}")
    res = subprocess.run(["systemd-analyze", "verify", *user, *copies], cwd=tmp_path, capture_output=True, text=True,
                         env={**os.environ, "XDG_RUNTIME_DIR": str(tmp_path / "xdg")}, timeout=60)
    # verify exits 0 on unknown keys and bad values, only printing them: any output is a failure
    assert res.returncode == 0 and not res.stderr.strip() and not res.stdout.strip(), res.stderr + res.stdout


@needs_analyze
def test_the_user_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    verify(USER_UNITS, tmp_path, "--user")


@needs_analyze
def test_the_system_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    verify(SYSTEM_UNITS, tmp_path)


@needs_analyze
def test_verify_as_used_here_does_catch_mistakes(tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "hasrd.service").write_text(USER_UNITS[1].read_text().replace("Type=notify", "Type=notifyy"))
    with pytest.raises(AssertionError, match="notifyy"):
        verify([bad / "hasrd.service"], tmp_path, "--user")


@pytest.mark.parametrize("units", [USER_UNITS, SYSTEM_UNITS], ids=["user", "system"])
def test_the_units_are_a_socket_activated_notify_service(units: list[Path]) -> None:
    sock, svc = keys(units[0]), keys(units[1])
    assert sock["Socket.Accept"] == ["no"] and sock["Socket.FileDescriptorName"] == ["hasrd"]
    assert sock["Socket.RemoveOnStop"] == ["yes"]
    for k, v in {"Type": "notify", "NotifyAccess": "main", "Restart": "no", "KillMode": "mixed"}.items():
        assert svc[f"Service.{k}"] == [v], k
    assert "Service.WatchdogSec" in svc and "Service.TimeoutStopSec" in svc and "Service.ExecStart" in svc
    for gpu_breaker in ("PrivateDevices", "MemoryDenyWriteExecute", "ProcSubset"):
        assert f"Service.{gpu_breaker}" not in svc, gpu_breaker


def test_the_user_units_are_private_and_need_no_user_namespaces() -> None:
    sock, svc = keys(USER_UNITS[0]), keys(USER_UNITS[1])
    assert sock["Socket.ListenStream"] == ["%t/hasr/hasrd.sock"]
    assert (sock["Socket.SocketMode"], sock["Socket.DirectoryMode"]) == (["0600"], ["0700"])
    assert svc["Service.ExecStart"] == ["%h/.local/bin/hasrd"]
    for needs_userns in ("ProtectSystem", "ProtectHome", "PrivateTmp", "PrivateUsers", "ProtectKernelTunables",
                         "ProtectControlGroups", "ProtectKernelModules", "ProtectClock", "ProtectHostname"):
        assert f"Service.{needs_userns}" not in svc, needs_userns


def test_the_system_units_share_a_group_socket_and_keep_the_gpu_reachable() -> None:
    sock, svc = keys(SYSTEM_UNITS[0]), keys(SYSTEM_UNITS[1])
    assert sock["Socket.ListenStream"] == ["/run/hasr/hasrd.sock"]
    assert (sock["Socket.SocketGroup"], sock["Socket.SocketMode"]) == (["hasr"], ["0660"])
    assert svc["Service.User"] == ["hasr"] and svc["Service.ProtectSystem"] == ["strict"]
    assert "char-nvidia* rw" in svc["Service.DeviceAllow"] and "/dev/nvidia-uvm rw" in svc["Service.DeviceAllow"]
    assert svc["Service.StateDirectory"] == ["hasr"] and svc["Service.CacheDirectory"] == ["hasr"]
    assert svc.get("Service.RuntimeDirectory") != ["hasr"]  # would delete the socket's directory on stop


# ---- a real systemd --user manager ----------------------------------------------------------------------

TINY = r'''"""Socket-activated stand-in for hasrd: READY=1 when served, one answer per connection, exit when idle."""
import os, socket, sys, time
from hasrd.systemd import Notifier, listen_fds_with_names

named = listen_fds_with_names()
assert [n for n, _ in named] == ["hasrd"], named
assert "LISTEN_FDS" not in os.environ
server = named[0][1]
notify = Notifier()
notify.ready(status="idle")
server.settimeout(float(os.environ["TINY_IDLE_EXIT_SEC"]))
served = 0
while True:
    try:
        conn, _ = server.accept()
    except socket.timeout:
        break
    served += 1
    conn.sendall(f"{os.getpid()}\n".encode())
    conn.close()
    notify.status(f"served {served} · 会议.wav")
notify.stopping("idle exit")
server.close()  # our copy only: never shutdown(), never unlink
time.sleep(float(os.environ["TINY_EXIT_DELAY_SEC"]))  # "finishing accepted work"
print(f"tiny {os.getpid()} exits after {served}", flush=True)
'''


def ask_pid(path: Path) -> int:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
        c.settimeout(20)
        c.connect(str(path))
        return int(c.makefile().readline())


@pytest.fixture()
def tiny(sd_manager: SdManager, tmp_path: Path) -> SdManager:
    """The shipped user units, with ExecStart= pointing at TINY and a 1 s idle exit."""
    script = sd_manager.base / "tiny.py"
    script.write_text(TINY)
    sd_manager.install(USER_UNITS[0], reload=False)
    sd_manager.install(USER_UNITS[1], exec_start=f"{sys.executable} {script}",
                       dropin=test_dropin(env={"TINY_IDLE_EXIT_SEC": "1", "TINY_EXIT_DELAY_SEC": "0.5"},
                                          stdout=sd_manager.base / "tiny.log"))
    return sd_manager


def test_a_real_user_manager_socket_activates_the_service_and_restarts_it_after_idle_exit(tiny: SdManager) -> None:
    m = tiny
    sock = m.runtime_dir / "hasr" / "hasrd.sock"
    m.systemctl("start", "hasrd.socket")
    assert m.show("hasrd.socket", "ActiveState") == "active" and m.show("hasrd.service", "ActiveState") == "inactive"
    assert stat.S_IMODE(sock.stat().st_mode) == 0o600 and stat.S_IMODE(sock.parent.stat().st_mode) == 0o700

    first = ask_pid(sock)  # the connection starts the service; READY=1 came from that pid (NotifyAccess=main)
    assert m.show("hasrd.service", "ActiveState") == "active"
    assert int(m.show("hasrd.service", "MainPID")) == first
    m.wait_for("hasrd.service", "StatusText", "served 1 · 会议.wav")
    assert ask_pid(sock) == first  # while it runs, the same instance answers

    m.wait_for("hasrd.service", "ActiveState", "inactive")  # idle exit
    assert m.show("hasrd.service", "Result") == "success"
    assert m.show("hasrd.service", "ExecMainStatus") == "0"
    assert m.show("hasrd.socket", "SubState") == "listening" and sock.exists()

    second = ask_pid(sock)  # the next connection starts a new instance
    assert second != first and int(m.show("hasrd.service", "MainPID")) == second

    m.systemctl("stop", "hasrd.socket")
    m.wait_for("hasrd.service", "ActiveState", "inactive")  # Requires= takes the service down too
    assert not sock.exists()  # RemoveOnStop=yes
    assert f"tiny {first} exits after 2" in (m.base / "tiny.log").read_text()


def test_a_connection_made_during_the_idle_exit_is_answered_by_the_next_instance(tiny: SdManager) -> None:
    m = tiny
    sock = m.runtime_dir / "hasr" / "hasrd.sock"
    m.systemctl("start", "hasrd.socket")
    first = ask_pid(sock)
    m.wait_for("hasrd.service", "ActiveState", "deactivating")  # STOPPING=1 sent, listener copy closed
    later = ask_pid(sock)  # waits in the backlog of systemd's socket until the next instance serves it
    assert later != first and int(m.show("hasrd.service", "MainPID")) == later
    assert f"tiny {first} exits after 1" in (m.base / "tiny.log").read_text()


def test_the_fixture_tears_the_manager_down_completely(tmp_path: Path) -> None:
    from sdmanager import unavailable_reason, user_manager

    need(not unavailable_reason(), unavailable_reason() or "")
    with user_manager() as m:
        base, cg, pid = m.base, m.cgroup, m.proc.pid
        assert cg.exists() and (m.runtime_dir / "systemd" / "private").exists()
    assert not base.exists() and not cg.exists()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)

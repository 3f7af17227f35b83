"""hasrd.systemd against real sockets and real child processes (the test plays the service manager)."""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from hasrd import systemd

# Puts the given fds at 3, 4, ... (as a socket unit does), then execs the child with LISTEN_PID=$$ (its own pid,
# since exec keeps it) unless the test sets LISTEN_PID itself.
LAUNCHER = r"""
import fcntl, os, sys
fds = [int(x) for x in sys.argv[1].split(",") if x]
high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 100) for fd in fds]
for i, fd in enumerate(high):
    os.dup2(fd, 3 + i)
for fd in set(fds + high) - set(range(3, 3 + len(fds))):
    os.close(fd)
argv = sys.argv[2:]
if "LISTEN_PID" not in os.environ:
    argv = ["sh", "-c", 'LISTEN_PID=$$ exec "$@"', "sh"] + argv
os.execvp(argv[0], argv)
"""

CHILD = r"""
import json, os, socket, sys
from hasrd.systemd import SocketActivationError, listen_fds_with_names
try:
    socks = listen_fds_with_names()
except SocketActivationError as e:
    print(json.dumps({"error": str(e), "env": sorted(k for k in os.environ if k.startswith("LISTEN_"))}))
    sys.exit(3)
import fcntl
print(json.dumps({"pid": os.getpid(), "env": sorted(k for k in os.environ if k.startswith("LISTEN_")),
                  "socks": [[n, s.fileno(), int(s.family), bool(fcntl.fcntl(s, fcntl.F_GETFD) & fcntl.FD_CLOEXEC)]
                            for n, s in socks]}), flush=True)
for _, s in socks:
    c, _ = s.accept()
    c.sendall(str(os.getpid()).encode())
    c.close()
"""


def activate(fds: list[int], env: dict[str, str], *, listen_pid: str | None = None) -> subprocess.Popen[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("LISTEN_")}
    full.update(env)
    if listen_pid is not None:
        full["LISTEN_PID"] = listen_pid
    return subprocess.Popen([sys.executable, "-c", LAUNCHER, ",".join(map(str, fds)), sys.executable, "-c", CHILD],
                            pass_fds=fds, env=full, stdout=subprocess.PIPE, text=True)


def first_line(proc: subprocess.Popen[str]) -> dict:  # type: ignore[type-arg]
    assert proc.stdout is not None
    return json.loads(proc.stdout.readline())


@pytest.fixture()
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sd")  # short enough for AF_UNIX paths


@pytest.fixture()
def listener(base: Path) -> Iterator[socket.socket]:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(base / "l.sock"))
    s.listen()
    yield s
    s.close()


def test_an_inherited_listening_socket_is_adopted_named_and_served(listener: socket.socket, base: Path) -> None:
    tcp = socket.create_server(("127.0.0.1", 0))
    try:
        proc = activate([listener.fileno(), tcp.fileno()], {"LISTEN_FDS": "2", "LISTEN_FDNAMES": "hasrd:tcp"})
        info = first_line(proc)
        assert info["env"] == []  # the variables are unset
        assert info["socks"] == [["hasrd", 3, socket.AF_UNIX, True], ["tcp", 4, socket.AF_INET, True]]
        for family, addr in [(socket.AF_UNIX, str(base / "l.sock")), (socket.AF_INET, tcp.getsockname())]:
            with socket.socket(family, socket.SOCK_STREAM) as c:
                c.settimeout(10)
                c.connect(addr)
                assert int(c.recv(64)) == proc.pid == info["pid"]  # the pid that answered is the one activated
        assert proc.wait(10) == 0
    finally:
        tcp.close()


def test_without_names_each_socket_is_called_unknown(listener: socket.socket, base: Path) -> None:
    proc = activate([listener.fileno()], {"LISTEN_FDS": "1"})
    assert first_line(proc)["socks"][0][0] == "unknown"
    with socket.socket(socket.AF_UNIX) as c:
        c.connect(str(base / "l.sock"))
        c.recv(64)
    assert proc.wait(10) == 0


def test_not_socket_activated_means_no_sockets(listener: socket.socket) -> None:
    proc = subprocess.run([sys.executable, "-c", CHILD.split("for _, s")[0]], capture_output=True, text=True,
                          env={k: v for k, v in os.environ.items() if not k.startswith("LISTEN_")}, timeout=30)
    assert json.loads(proc.stdout)["socks"] == []


def expect_refusal(proc: subprocess.Popen[str], *words: str) -> str:
    info = first_line(proc)
    assert proc.wait(10) == 3, info
    assert info["env"] == []  # unset even when refused
    for w in words:
        assert w in info["error"]
    return str(info["error"])


def test_sockets_meant_for_another_pid_are_refused(listener: socket.socket) -> None:
    expect_refusal(activate([listener.fileno()], {"LISTEN_FDS": "1"}, listen_pid="1"), "LISTEN_PID=1",
                   "another process")


@pytest.mark.parametrize("env, words", [({"LISTEN_FDS": "x"}, "not a number"), ({"LISTEN_FDS": "-1"}, "negative"),
                                        ({"LISTEN_FDS": "1", "LISTEN_FDNAMES": "a:b"}, "names 2 fds")])
def test_malformed_variables_are_refused(listener: socket.socket, env: dict[str, str], words: str) -> None:
    expect_refusal(activate([listener.fileno()], env), words)


def test_a_datagram_socket_is_refused(base: Path) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as d:
        d.bind(str(base / "d.sock"))
        expect_refusal(activate([d.fileno()], {"LISTEN_FDS": "1"}), "SOCK_DGRAM", "fd 3")


def test_a_stream_socket_that_is_not_listening_is_refused(base: Path) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(base / "n.sock"))
        expect_refusal(activate([s.fileno()], {"LISTEN_FDS": "1"}), "not listening")


def test_a_regular_file_and_a_missing_fd_are_refused(base: Path, listener: socket.socket) -> None:
    with open(base / "f", "w") as f:
        expect_refusal(activate([f.fileno()], {"LISTEN_FDS": "1"}), "fd 3", "not a socket")
    expect_refusal(activate([listener.fileno()], {"LISTEN_FDS": "2"}), "fd 4", "not open")


def test_a_udp_socket_is_refused() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
        u.bind(("127.0.0.1", 0))
        expect_refusal(activate([u.fileno()], {"LISTEN_FDS": "1"}), "SOCK_DGRAM")


# ---- sd_notify ----------------------------------------------------------------------------------------------

NOTIFY_CHILD = r"""
from hasrd.systemd import Notifier
n = Notifier()
assert n.enabled
assert n.ready(status="idle")
assert n.status("transcribing 会议.wav 40%")
assert n.watchdog()
assert n.stopping("bye\nnow")
"""


def receive(sock: socket.socket, count: int) -> list[tuple[int, int, str]]:
    """(sender pid, sender uid, message) of count datagrams, from SCM_CREDENTIALS."""
    out = []
    for _ in range(count):
        data, anc, _, _ = sock.recvmsg(4096, socket.CMSG_SPACE(struct.calcsize("iII")))
        creds = [struct.unpack("iII", d[:12]) for lvl, typ, d in anc
                 if lvl == socket.SOL_SOCKET and typ == socket.SCM_CREDENTIALS]
        assert creds, "no SCM_CREDENTIALS: SO_PASSCRED not honoured"
        out.append((creds[0][0], creds[0][1], data.decode("utf-8")))
    return out


@pytest.mark.parametrize("abstract", [False, True], ids=["path", "abstract"])
def test_notify_sends_utf8_status_with_the_senders_pid(base: Path, abstract: bool) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        sock.settimeout(10)
        if abstract:
            name = f"hasr-test-{uuid.uuid4().hex}"
            sock.bind(b"\0" + name.encode())
            addr = "@" + name
        else:
            addr = str(base / "notify")
            sock.bind(addr)
        proc = subprocess.Popen([sys.executable, "-c", NOTIFY_CHILD], env={**os.environ, "NOTIFY_SOCKET": addr})
        msgs = receive(sock, 4)
        assert proc.wait(30) == 0
    assert {pid for pid, _, _ in msgs} == {proc.pid}
    assert [m for _, _, m in msgs] == ["READY=1\nSTATUS=idle", "STATUS=transcribing 会议.wav 40%", "WATCHDOG=1",
                                       "STOPPING=1\nSTATUS=bye now"]


def test_notify_is_a_no_op_without_systemd_and_never_raises(base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    n = systemd.Notifier()
    assert not n.enabled and n.ready() is False and n.status("x") is False
    gone = systemd.Notifier(str(base / "nobody-listens"))  # the manager went away
    assert gone.enabled and gone.ready() is False and gone.watchdog() is False
    gone.close()
    assert not systemd.Notifier("relative/path").enabled  # neither absolute nor @abstract: disabled, logged


def test_extend_timeout_is_sent_in_microseconds(base: Path) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock, systemd.Notifier(str(base / "n")) as n:
        sock.bind(str(base / "n"))
        assert n.extend_timeout(2.5)
        assert sock.recv(100) == b"EXTEND_TIMEOUT_USEC=2500000"


# ---- watchdog and environment -----------------------------------------------------------------------------


@pytest.mark.parametrize("usec, pid, expected", [
    ("30000000", None, 15.0), ("30000000", "self", 15.0), ("30000000", "1", None), (None, None, None),
    ("0", None, None), ("soon", None, None), ("30000000", "x", None)])
def test_watchdog_interval_is_half_of_watchdog_usec_for_this_pid(monkeypatch: pytest.MonkeyPatch, usec: str | None,
                                                                 pid: str | None, expected: float | None) -> None:
    for key, val in [("WATCHDOG_USEC", usec), ("WATCHDOG_PID", str(os.getpid()) if pid == "self" else pid)]:
        if val is None:
            monkeypatch.delenv(key, raising=False)
        else:
            monkeypatch.setenv(key, val)
    assert systemd.watchdog_interval() == expected


def test_watchdog_variables_can_be_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WATCHDOG_USEC", "1000000")
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    assert systemd.watchdog_interval(unset_environment=True) == 0.5
    assert "WATCHDOG_USEC" not in os.environ and "WATCHDOG_PID" not in os.environ


def test_the_worker_environment_loses_every_systemd_variable() -> None:
    env = {"NOTIFY_SOCKET": "/run/x", "LISTEN_PID": "1", "LISTEN_FDS": "1", "LISTEN_FDNAMES": "hasrd",
           "WATCHDOG_USEC": "1", "WATCHDOG_PID": "1", "PATH": "/usr/bin", "HASR_ENGINE": "fake",
           "INVOCATION_ID": "abc", "MY_LISTEN_FDS": "kept"}
    assert systemd.scrubbed_env(env) == {"PATH": "/usr/bin", "HASR_ENGINE": "fake", "INVOCATION_ID": "abc",
                                         "MY_LISTEN_FDS": "kept"}
    assert "NOTIFY_SOCKET" in env  # the input is not modified
    assert systemd.scrubbed_env()["PATH"] == os.environ["PATH"]

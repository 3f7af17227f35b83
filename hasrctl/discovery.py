"""Find the daemon: --socket / HASR_SOCKET, then the user socket, then the system socket; start one if none.

Autostart exists so that ``hasrctl transcribe x.wav`` works on a fresh machine before ``hasrctl setup``: the
started ``hasrd`` runs detached (own session, output to a log next to its socket) and its idle exit ends it.
A socket unit, when systemd has one, is preferred: starting a second daemon beside it would fight over the path.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from hasrctl.client import Unreachable, probe
from hasrd.config import SYSTEM_SOCKET, default_socket, runtime_dir

UNIT_SOCKET = "hasrd.socket"
UNIT_SERVICE = "hasrd.service"


def candidates(explicit: str | None) -> list[tuple[str, str]]:
    """(path, kind) in the order tried; an explicit socket is the only candidate."""
    if explicit:
        return [(os.path.abspath(explicit), "explicit")]
    out = [(default_socket(), "user")]
    if SYSTEM_SOCKET != out[0][0]:
        out.append((SYSTEM_SOCKET, "system"))
    return out


def user_unit_dirs() -> list[Path]:
    """Where a user manager looks for units (systemd.unit(5)), most specific first."""
    cfg = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    data = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return [cfg / "systemd" / "user", Path("/etc/systemd/user"), data / "systemd" / "user",
            Path("/usr/local/lib/systemd/user"), Path("/usr/local/share/systemd/user"),
            Path("/usr/lib/systemd/user"), Path("/lib/systemd/user")]


def user_manager_running() -> bool:
    """A ``systemd --user`` manager serves $XDG_RUNTIME_DIR/systemd/private (systemctl --user talks to it)."""
    return (runtime_dir() / "systemd" / "private").exists() and shutil.which("systemctl") is not None


def socket_unit() -> Path | None:
    """The user unit file of hasrd.socket when a running user manager would know it."""
    if not user_manager_running():
        return None
    for d in user_unit_dirs():
        if (d / UNIT_SOCKET).exists():
            return d / UNIT_SOCKET
    return None


def systemctl(*args: str, check: bool = False, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["systemctl", "--user", *args], capture_output=True, text=True, check=check,
                          timeout=timeout)


def hasrd_command() -> list[str]:
    """This installation's daemon: the ``hasrd`` beside our interpreter, else ``python -m hasrd.server``."""
    sibling = Path(sys.executable).parent / "hasrd"
    if sibling.is_file() and os.access(sibling, os.X_OK):
        return [str(sibling)]
    return [sys.executable, "-m", "hasrd.server"]


def _scrubbed_env() -> dict[str, str]:
    env = dict(os.environ)
    for key in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES", "NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"):
        env.pop(key, None)
    return env


def _lock(dirpath: Path) -> int:
    import fcntl

    fd = os.open(dirpath / ".autostart.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def start_daemon(path: str, idle_exit: float, timeout: float, say: Callable[[str], None]) -> None:
    """Start ``hasrd`` detached on ``path`` and wait until it accepts; one line on stderr says so."""
    sockdir = Path(path).parent
    try:
        sockdir.mkdir(mode=0o700, parents=True, exist_ok=True)
        lock = _lock(sockdir)
    except OSError as e:
        raise Unreachable(f"cannot start hasrd on {path}: {e.strerror or e} ({sockdir})") from e
    try:
        if probe(path):  # another hasrctl started it while we waited for the lock
            return
        log_path = sockdir / "hasrd.log"
        cmd = [*hasrd_command(), "--socket", path, "--idle-exit", f"{idle_exit:g}"]
        with open(log_path, "ab") as log:
            os.chmod(log_path, 0o600)
            try:
                proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd="/",
                                        start_new_session=True, close_fds=True, env=_scrubbed_env())
            except OSError as e:
                raise Unreachable(f"could not start {cmd[0]}: {e.strerror or e}") from e
        deadline = time.monotonic() + timeout
        while not probe(path, timeout=0.5):
            if proc.poll() is not None:
                raise Unreachable(f"hasrd exited at once (status {proc.returncode}): {_last_line(log_path)}")
            if time.monotonic() > deadline:
                raise Unreachable(f"hasrd (pid {proc.pid}) did not answer within {timeout:g} s; see {log_path}")
            time.sleep(0.05)
        say(f"no daemon was running: started hasrd (pid {proc.pid}) on {path}; it exits after "
            f"{idle_exit:g} s idle (log: {log_path})")
    finally:
        os.close(lock)


def _last_line(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return f"see {path}"
    return f"{lines[-1].strip()[:300]} (log: {path})" if lines else f"no output (log: {path})"


def find(explicit: str | None, *, autostart: bool, idle_exit: float, timeout: float,
         say: Callable[[str], None]) -> str:
    """The socket of a daemon that answers, starting one when allowed; Unreachable (exit 3) otherwise."""
    cands = candidates(explicit)
    for path, _kind in cands:
        if probe(path):
            return path
    tried = ", ".join(p for p, _ in cands)
    target = cands[0][0]
    unit = socket_unit() if target == default_socket() else None
    if not autostart:
        hint = "systemctl --user start hasrd.socket" if unit else "run `hasrd` or drop --no-autostart"
        raise Unreachable(f"no hasrd answers on {tried} and autostart is off ({hint})")
    if unit is not None:
        res = systemctl("start", UNIT_SOCKET)
        if res.returncode == 0 and probe(target):
            return target
        raise Unreachable(f"{unit} exists but nothing listens on {target}: "
                          f"{(res.stderr or res.stdout).strip() or 'see systemctl --user status hasrd.socket'}")
    start_daemon(target, idle_exit, timeout, say)
    return target

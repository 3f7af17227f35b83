"""Find the daemon: --socket / HASR_SOCKET, then the user socket, then the system socket; start one if none.

The user socket is in $XDG_RUNTIME_DIR; where that is unset (``su - USER``, cron, ssh without a systemd
session) in the login's /run/user/<uid> when it exists, where systemd's hasrd.socket listens after ``hasrctl
setup``, and then in /tmp/hasr-<uid>, where a daemon hasrctl started without either may run.

Autostart exists so that ``hasrctl transcribe x.wav`` works on a fresh machine before ``hasrctl setup``: the
started ``hasrd`` runs detached (own session, output to a log next to its socket) and its idle exit ends it.
A socket unit, when systemd has one, is preferred: starting a second daemon beside it would fight over the path.

Without XDG_RUNTIME_DIR the socket lives under /tmp/hasr-$UID, a name anyone could create first: that directory
and the socket's own must be directories of ours with mode 0700 before we connect, start a daemon there or open
its log (with O_NOFOLLOW), or whoever planted them could swap the socket and receive the audio.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from hasrctl.client import CliError, Unreachable, probe
from hasrd import config
from hasrd.config import SYSTEM_SOCKET

UNIT_SOCKET = "hasrd.socket"
UNIT_SERVICE = "hasrd.service"
LOGIN_RUNTIME_ROOT = Path("/run/user")  # systemd-logind's runtime directory of each user: /run/user/<uid>


def login_runtime_dir() -> Path | None:
    """/run/user/<uid> when it is a directory of ours (not a link) with mode 0700: what systemd-logind made for a
    login session of this user, where the user manager and hasrd.socket live. ``su - USER``, cron, or ssh
    without pam_systemd leave XDG_RUNTIME_DIR unset while that directory (and the manager) are there."""
    d = LOGIN_RUNTIME_ROOT / str(os.getuid())
    try:
        st = os.lstat(d)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or stat.S_IMODE(st.st_mode) & 0o077:
        return None
    return d


def runtime_dir() -> Path:
    """The user's runtime directory: $XDG_RUNTIME_DIR; without it /run/user/<uid> where the login made one
    (login_runtime_dir); else hasrd's private fallback /tmp/hasr-<uid> (hasrd.config.runtime_dir)."""
    if os.environ.get("XDG_RUNTIME_DIR"):
        return config.runtime_dir()
    return login_runtime_dir() or config.runtime_dir()


def default_socket() -> str:
    """The user's socket: ``hasr/hasrd.sock`` in :func:`runtime_dir` (systemd's ``%t/hasr/hasrd.sock``)."""
    return str(runtime_dir() / "hasr" / "hasrd.sock")


def _tmp_fallback() -> Path | None:
    """/tmp/hasr-<uid> where XDG_RUNTIME_DIR is unset (a daemon hasrctl started there may run), else None."""
    return None if os.environ.get("XDG_RUNTIME_DIR") else config.runtime_dir()


def candidates(explicit: str | None) -> list[tuple[str, str]]:
    """(path, kind) in the order tried; an explicit socket is the only candidate. Without XDG_RUNTIME_DIR the
    login's /run/user/<uid> comes first (systemd's socket after `hasrctl setup`), then /tmp/hasr-<uid>."""
    if explicit:
        return [(os.path.abspath(explicit), "explicit")]
    out = [(default_socket(), "user")]
    tmp = _tmp_fallback()
    if tmp is not None and str(tmp / "hasr" / "hasrd.sock") != out[0][0]:
        out.append((str(tmp / "hasr" / "hasrd.sock"), "user"))
    if SYSTEM_SOCKET not in (p for p, _ in out):
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
    """``systemctl --user ARGS``; where XDG_RUNTIME_DIR is unset it is given the login's (runtime_dir), without
    which systemctl finds no user manager."""
    env = None
    if not os.environ.get("XDG_RUNTIME_DIR") and login_runtime_dir() is not None:
        env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime_dir())}
    return subprocess.run(["systemctl", "--user", *args], capture_output=True, text=True, check=check,
                          timeout=timeout, env=env)


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
    if not env.get("XDG_RUNTIME_DIR") and login_runtime_dir() is not None:
        env["XDG_RUNTIME_DIR"] = str(runtime_dir())  # the daemon's runtime files beside its socket, as in a login
    return env


class NotRunning(Unreachable):
    """No daemon answers and none may be started: ``tried`` the sockets, ``unit`` a socket unit that exists."""

    def __init__(self, message: str, tried: str, unit: Path | None) -> None:
        super().__init__(message)
        self.tried, self.unit = tried, unit


class UnsafeDir(CliError):
    """A directory for the socket (or the tray's lock) that someone else controls."""


def check_dir(path: Path, private: bool) -> None:
    """Refuse ``path`` unless it is a directory (not a link) of ours, and with ``private`` of mode 0700.

    Not private (an explicit --socket's directory): someone else's sticky directory such as /tmp is fine too,
    as hasrd itself accepts it. FileNotFoundError passes through.
    """
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeDir(f"{path} is not a directory ({'a symbolic link' if stat.S_ISLNK(st.st_mode) else 'a file'}); "
                        f"refusing to use it for hasrd's socket: remove it")
    if st.st_uid != os.getuid():
        if not private and st.st_mode & stat.S_ISVTX:
            return
        raise UnsafeDir(f"{path} belongs to uid {st.st_uid}, not to you ({os.getuid()}): whoever made it could "
                        f"swap hasrd's socket; remove it, or set XDG_RUNTIME_DIR")
    if private and stat.S_IMODE(st.st_mode) & 0o077:
        raise UnsafeDir(f"{path} has mode {stat.S_IMODE(st.st_mode):04o}, but it must be 0700: chmod 700 {path}")


def private_dirs(path: str) -> list[Path]:
    """The directories that must be ours with mode 0700 for the socket ``path``, outermost first: at the
    default place its own directory, and /tmp/hasr-$UID when that stands in for XDG_RUNTIME_DIR."""
    sockdir = Path(path).parent
    tmp = _tmp_fallback()
    if tmp is not None and sockdir == tmp / "hasr":
        return [tmp, sockdir]
    return [sockdir] if sockdir == runtime_dir() / "hasr" else []


def secure_dir(path: str, create: bool) -> Path:
    """The directory of the socket ``path``, checked (and with ``create`` made, mode 0700) before any use.

    UnsafeDir when someone else controls it; FileNotFoundError when it is missing and not ``create``.
    """
    sockdir = Path(path).parent
    private = private_dirs(path)
    for d in private:
        if create:
            os.makedirs(d, mode=0o700, exist_ok=True)
        check_dir(d, private=True)
    if not private:
        if create:
            os.makedirs(sockdir, mode=0o700, exist_ok=True)
        check_dir(sockdir, private=False)
    return sockdir


def open_private(path: Path, flags: int) -> int:
    """Open (creating, 0600) a file of ours in a checked directory; never through a symbolic link."""
    fd = os.open(path, flags | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
            raise OSError(f"{path} is not a regular file of ours")
        os.fchmod(fd, 0o600)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _lock(dirpath: Path) -> int:
    import fcntl

    fd = open_private(dirpath / ".autostart.lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def start_daemon(path: str, idle_exit: float, timeout: float, say: Callable[[str], None]) -> None:
    """Start ``hasrd`` detached on ``path`` and wait until it accepts; one line on stderr says so."""
    sockdir = Path(path).parent
    try:
        secure_dir(path, create=True)
        lock = _lock(sockdir)
    except UnsafeDir as e:
        raise Unreachable(f"cannot start hasrd on {path}: {e.message}") from None
    except OSError as e:
        raise Unreachable(f"cannot start hasrd on {path}: {e.strerror or e} ({sockdir})") from e
    try:
        if probe(path):  # another hasrctl started it while we waited for the lock
            return
        log_path = sockdir / "hasrd.log"
        cmd = [*hasrd_command(), "--socket", path, "--idle-exit", f"{idle_exit:g}"]
        try:
            log_fd = open_private(log_path, os.O_WRONLY | os.O_APPEND)
        except OSError as e:
            raise Unreachable(f"cannot open hasrd's log {log_path}: {e.strerror or e}") from None
        with os.fdopen(log_fd, "ab") as log:
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
        if private_dirs(path):
            try:  # before connecting: a socket in a directory someone else controls may not be hasrd at all
                secure_dir(path, create=False)
            except FileNotFoundError:
                continue
            except UnsafeDir as e:
                raise Unreachable(e.message) from None
        if probe(path):
            return path
    tried = ", ".join(p for p, _ in cands)
    target = cands[0][0]
    unit = socket_unit() if target == default_socket() else None
    if not autostart:
        hint = "systemctl --user start hasrd.socket" if unit else "run `hasrd` or drop --no-autostart"
        raise NotRunning(f"no hasrd answers on {tried} and autostart is off ({hint})", tried, unit)
    if unit is not None:  # said: whoever stopped it may have meant it (`hasrctl stop` leaves it listening)
        say("hasrd.socket was not listening: started it (systemctl --user start hasrd.socket; --no-autostart "
            "leaves it stopped)")
        res = systemctl("start", UNIT_SOCKET)
        if res.returncode == 0 and probe(target):
            return target
        raise Unreachable(f"{unit} exists but nothing listens on {target}: "
                          f"{(res.stderr or res.stdout).strip() or 'see systemctl --user status hasrd.socket'}")
    start_daemon(target, idle_exit, timeout, say)
    return target

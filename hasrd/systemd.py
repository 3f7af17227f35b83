"""systemd glue without dependencies: socket activation, sd_notify, the watchdog, a scrubbed worker environment.

Written here rather than taken from the ``sdnotify`` package, which encodes messages as latin-1 and so drops a
STATUS line naming ``会议.wav`` (sdnotify issue #9). The protocols are small and stable:

- socket activation (sd_listen_fds(3)): the manager passes LISTEN_FDS sockets from fd 3 on, names them in
  LISTEN_FDNAMES (colon-separated) and sets LISTEN_PID to the pid they are meant for;
- sd_notify(3): one AF_UNIX datagram of newline-separated ``KEY=VALUE`` lines to $NOTIFY_SOCKET (a path, or
  ``@name`` for the abstract namespace);
- the watchdog: WATCHDOG_USEC (and WATCHDOG_PID) ask for ``WATCHDOG=1`` more often than every WATCHDOG_USEC.
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket
import stat
from collections.abc import Mapping, MutableMapping

log = logging.getLogger(__name__)

LISTEN_FDS_START = 3
_FAMILIES = {socket.AF_UNIX: "AF_UNIX", socket.AF_INET: "AF_INET", socket.AF_INET6: "AF_INET6"}
_SCRUBBED_PREFIXES = ("LISTEN_", "WATCHDOG_")
_SCRUBBED = ("NOTIFY_SOCKET",)


class SocketActivationError(RuntimeError):
    """The socket-activation variables or the inherited fds are not what a socket unit passes."""


def _unset(env: MutableMapping[str, str]) -> None:
    for key in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
        env.pop(key, None)


def listen_fds_with_names(unset_environment: bool = True) -> list[tuple[str, socket.socket]]:
    """The listening sockets systemd passed to this process, with their FileDescriptorName=.

    Returns [] when not socket-activated (LISTEN_PID or LISTEN_FDS unset). Raises SocketActivationError when
    the variables are malformed, meant for another pid, or an fd is not a listening SOCK_STREAM socket of
    AF_UNIX / AF_INET / AF_INET6. The sockets are made close-on-exec so that the worker never inherits them.
    With ``unset_environment`` the three variables are removed (whatever the outcome), as sd_listen_fds does.
    """
    env = os.environ
    try:
        if "LISTEN_PID" not in env or "LISTEN_FDS" not in env:
            return []
        pid, count = _int_var(env, "LISTEN_PID"), _int_var(env, "LISTEN_FDS")
        if pid != os.getpid():
            raise SocketActivationError(
                f"LISTEN_PID={pid} is not this process ({os.getpid()}): the sockets were passed to another "
                "process (a wrapper must exec hasrd, not fork it)")
        if count < 0:
            raise SocketActivationError(f"LISTEN_FDS={count} is negative")
        names = env.get("LISTEN_FDNAMES")
        name_list = names.split(":") if names is not None else ["unknown"] * count
        if len(name_list) != count:
            raise SocketActivationError(f"LISTEN_FDNAMES={names!r} names {len(name_list)} fds, LISTEN_FDS={count}")
        return [(name, _adopt(LISTEN_FDS_START + i, name)) for i, name in enumerate(name_list)]
    finally:
        if unset_environment:
            _unset(env)


def listen_fds(unset_environment: bool = True) -> list[socket.socket]:
    """Like :func:`listen_fds_with_names`, without the names."""
    return [sock for _, sock in listen_fds_with_names(unset_environment)]


def _int_var(env: Mapping[str, str], key: str) -> int:
    try:
        return int(env[key])
    except ValueError:
        raise SocketActivationError(f"{key}={env[key]!r} is not a number") from None


def _adopt(fd: int, name: str) -> socket.socket:
    """Check that fd is a listening stream socket of a family we serve, and wrap it."""
    what = f"inherited fd {fd} ({name!r})"
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        raise SocketActivationError(f"{what} is not open") from None
    if not stat.S_ISSOCK(mode):
        raise SocketActivationError(f"{what} is not a socket")
    probe = socket.socket(fileno=os.dup(fd))  # learn the family/type without owning fd yet
    try:
        family, kind = probe.family, probe.type
        listening = probe.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
    finally:
        probe.close()
    if family not in _FAMILIES:
        raise SocketActivationError(f"{what} is a {family!r} socket; hasrd serves AF_UNIX, AF_INET and AF_INET6")
    if kind != socket.SOCK_STREAM:
        raise SocketActivationError(f"{what} is a {getattr(kind, 'name', kind)} socket, not SOCK_STREAM "
                                    "(ListenStream= in the unit)")
    if not listening:
        raise SocketActivationError(f"{what} is a stream socket that is not listening (Accept=no is required)")
    flags = fcntl.fcntl(fd, fcntl.F_GETFD)
    fcntl.fcntl(fd, fcntl.F_SETFD, flags | fcntl.FD_CLOEXEC)
    return socket.socket(fileno=fd)


def _address(value: str) -> str | bytes:
    if value.startswith("@"):
        return b"\0" + value[1:].encode()
    if value.startswith("/"):
        return value
    raise ValueError(f"NOTIFY_SOCKET={value!r} is neither an absolute path nor an abstract @name")


class Notifier:
    """sd_notify over $NOTIFY_SOCKET, UTF-8. Every method is a no-op (returning False) when not under systemd.

    Sending never raises: the service manager going away must not take the daemon down. Returns whether the
    datagram was sent. Safe to call from several threads (one datagram per call).
    """

    def __init__(self, notify_socket: str | None = None, *, timeout: float = 1.0) -> None:
        value = os.environ.get("NOTIFY_SOCKET", "") if notify_socket is None else notify_socket
        self._addr: str | bytes | None = None
        self._sock: socket.socket | None = None
        if value:
            try:
                self._addr = _address(value)
            except ValueError as e:
                log.warning("sd_notify disabled: %s", e)
                return
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._sock.settimeout(timeout)  # a full manager queue must not stall the event loop for long

    @property
    def enabled(self) -> bool:
        return self._sock is not None

    def notify(self, **fields: str | int) -> bool:
        """Send KEY=VALUE lines (``notify(READY=1, STATUS="idle")``); newlines in values become spaces."""
        if self._sock is None or self._addr is None:
            return False
        lines = [f"{k}={str(v).replace(chr(10), ' ').replace(chr(13), ' ')}" for k, v in fields.items()]
        try:
            self._sock.sendto("\n".join(lines).encode("utf-8", "replace"), self._addr)
            return True
        except OSError as e:
            log.debug("sd_notify %s failed: %s", list(fields), e)
            return False

    def ready(self, status: str | None = None) -> bool:
        return self.notify(READY=1, **({"STATUS": status} if status is not None else {}))

    def status(self, text: str) -> bool:
        return self.notify(STATUS=text)

    def stopping(self, status: str | None = None) -> bool:
        return self.notify(STOPPING=1, **({"STATUS": status} if status is not None else {}))

    def watchdog(self) -> bool:
        return self.notify(WATCHDOG=1)

    def extend_timeout(self, seconds: float) -> bool:
        """Ask for more time to start or stop (EXTEND_TIMEOUT_USEC), e.g. while finishing accepted work."""
        return self.notify(EXTEND_TIMEOUT_USEC=int(seconds * 1_000_000))

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> Notifier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def watchdog_interval(unset_environment: bool = False) -> float | None:
    """How often to send WATCHDOG=1, in seconds (half of WATCHDOG_USEC); None when no watchdog is asked for.

    None also when WATCHDOG_PID names another process or the values are malformed (logged).
    """
    env = os.environ
    try:
        raw = env.get("WATCHDOG_USEC")
        if not raw:
            return None
        pid = env.get("WATCHDOG_PID")
        try:
            usec = int(raw)
            if pid and int(pid) != os.getpid():
                return None
        except ValueError:
            log.warning("ignoring malformed WATCHDOG_USEC=%r / WATCHDOG_PID=%r", raw, pid)
            return None
        return usec / 2_000_000 if usec > 0 else None
    finally:
        if unset_environment:
            env.pop("WATCHDOG_USEC", None)
            env.pop("WATCHDOG_PID", None)


def scrubbed_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """A copy of env (default os.environ) without NOTIFY_SOCKET, LISTEN_* and WATCHDOG_*, for the worker.

    With NotifyAccess=main a child's messages are ignored anyway; scrubbing keeps a child from ever speaking for
    the service or mistaking the daemon's sockets for its own.
    """
    src = os.environ if env is None else env
    return {k: v for k, v in src.items() if k not in _SCRUBBED and not k.startswith(_SCRUBBED_PREFIXES)}

"""A real ``systemd --user`` manager for tests, in private mount and cgroup namespaces (notes/systemd-testing.md).

Only a *user* manager: a system manager started next to the host's root file system runs tmpfiles --boot and
empties the host's /tmp. Needs root and a cgroup2 hierarchy; elsewhere the fixture skips with the reason.

    from sdmanager import SdManager, sd_manager, test_dropin  # noqa: F401  (sd_manager is the fixture)

    def test_x(sd_manager: SdManager) -> None:
        sd_manager.install(Path("systemd/hasrd.socket"))
        sd_manager.install(Path("systemd/hasrd.service"), exec_start="/usr/bin/python3 /tmp/x.py",
                           dropin=test_dropin(env={"HASR_ENGINE": "fake"}, stdout=sd_manager.base / "out.log"))
        sd_manager.systemctl("start", "hasrd.socket")
        sd_manager.wait_for("hasrd.service", "ActiveState", "active")

The manager lives in its own cgroup; teardown runs ``systemctl --user exit``, then cgroup.kill, then removes the
cgroup tree and the base directory, even when the test failed. Paths stay short (AF_UNIX stops at 107 bytes).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import pytest

from tests.conftest import need

_MANAGERS = ("/lib/systemd/systemd", "/usr/lib/systemd/systemd")
_MASKED = ("systemd-tmpfiles-setup.service", "systemd-tmpfiles-clean.service", "systemd-tmpfiles-clean.timer")

INNER = r"""set -e
B="$1"
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mkdir -p /run/systemd
mount -t tmpfs -o mode=755 tmpfs /run/systemd
mkdir -p /run/systemd/system
mkfifo "$B/console"
# The manager logs to /dev/console: a FIFO whose reader also holds a write end, so it never sees EOF.
cat 0<>"$B/console" >>"$B/console.log" &
if [ -e /dev/console ]; then mount --bind "$B/console" /dev/console; fi
export XDG_RUNTIME_DIR="$B/xdg" XDG_CONFIG_HOME="$B/cfg" HOME="$B/home"
exec "$2" --user
"""


class CgroupUnavailable(RuntimeError):
    """The cgroup2 hierarchy is there but refuses a new cgroup (read-only in an unprivileged container)."""


def cgroup2_root() -> Path | None:
    """Where the cgroup2 hierarchy is mounted (/sys/fs/cgroup, or /sys/fs/cgroup/unified on hybrid hosts)."""
    with open("/proc/self/mounts") as f:
        points = [line.split()[1] for line in f if line.split()[2:3] == ["cgroup2"]]
    for p in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified", *points):
        if p in points:
            return Path(p)
    return None


def unavailable_reason() -> str | None:
    """Why a real user manager cannot run here (None when it can)."""
    if os.geteuid() != 0:
        return "a systemd --user manager in private namespaces needs root"
    if cgroup2_root() is None:
        return "no cgroup2 hierarchy is mounted"
    if not any(os.access(m, os.X_OK) for m in _MANAGERS):
        return "systemd is not installed (no /lib/systemd/systemd)"
    for tool in ("systemctl", "unshare", "mount", "bash"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    return None


def _quote(value: str) -> str:
    """An Environment= assignment value: specifiers (%) and quotes escaped."""
    return value.replace("%", "%%").replace("\\", "\\\\").replace('"', '\\"')


def test_dropin(*, env: Mapping[str, str] | None = None, stdout: Path | None = None, extra: str = "") -> str:
    """The drop-in tests need: no start rate limit, settings in Environment=, output to a file (no journald)."""
    lines = ["[Unit]", "StartLimitIntervalSec=0", "", "[Service]"]
    lines += [f'Environment="{k}={_quote(v)}"' for k, v in (env or {}).items()]
    if stdout is not None:
        lines += [f"StandardOutput=append:{stdout}", "StandardError=inherit"]
    return "\n".join(lines) + "\n" + extra


test_dropin.__test__ = False  # type: ignore[attr-defined]  # a helper, not a test


class SdManager:
    """One running ``systemd --user`` manager; talk to it with :meth:`systemctl` (no D-Bus involved)."""

    def __init__(self, base: Path, cgroup: Path, proc: subprocess.Popen[bytes]) -> None:
        self.base, self.cgroup, self.proc = base, cgroup, proc
        self.runtime_dir = base / "xdg"  # %t
        self.unit_dir = base / "cfg" / "systemd" / "user"
        self.home = base / "home"  # %h
        self.env = {"XDG_RUNTIME_DIR": str(self.runtime_dir), "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                    "LANG": "C.UTF-8", "SYSTEMD_PAGER": "", "SYSTEMD_COLORS": "0"}

    def systemctl(self, *args: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        res = subprocess.run(["systemctl", "--user", "--no-pager", *args], env=self.env, capture_output=True,
                             text=True, timeout=timeout)
        if check and res.returncode != 0:
            raise AssertionError(f"systemctl --user {' '.join(args)} failed ({res.returncode}): "
                                 f"{res.stderr.strip()}\n{self.log()}")
        return res

    def show(self, unit: str, prop: str) -> str:
        return self.systemctl("show", "-p", prop, "--value", unit).stdout.strip()

    def wait_for(self, unit: str, prop: str, *values: str, timeout: float = 20) -> str:
        """Poll until the property takes one of values; return it (AssertionError with the logs on timeout)."""
        deadline = time.monotonic() + timeout
        while True:
            got = self.show(unit, prop)
            if got in values:
                return got
            if time.monotonic() > deadline:
                raise AssertionError(f"{unit} {prop}={got!r}, expected {values} after {timeout} s\n{self.log()}")
            time.sleep(0.05)

    def install(self, src: Path | str, *, text: str | None = None, exec_start: str | None = None,
                dropin: str | None = None, reload: bool = True) -> Path:
        """Copy a unit (``src`` a file, or a name with ``text``), optionally rewrite ExecStart=, add a drop-in."""
        name = Path(src).name
        body = text if text is not None else Path(src).read_text()
        if exec_start is not None:
            body = "\n".join(f"ExecStart={exec_start}" if ln.startswith("ExecStart=") else ln
                             for ln in body.splitlines()) + "\n"
        dest = self.unit_dir / name
        dest.write_text(body)
        if dropin is not None:
            (self.unit_dir / f"{name}.d").mkdir(exist_ok=True)
            (self.unit_dir / f"{name}.d" / "50-test.conf").write_text(dropin)
        if reload:
            self.systemctl("daemon-reload")
        return dest

    def log(self) -> str:
        """The manager's console log and every *.log in the base directory, for failure messages."""
        parts = []
        for p in sorted(self.base.glob("*.log")):
            with contextlib.suppress(OSError):
                parts.append(f"--- {p.name}\n{p.read_text(errors='replace')[-4000:]}")
        return "\n".join(parts)


def _wait_running(m: SdManager, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        if m.proc.poll() is not None:
            raise RuntimeError(f"systemd --user exited with {m.proc.returncode}\n{m.log()}")
        if (m.runtime_dir / "systemd" / "private").exists():
            state = m.systemctl("show", "-p", "SystemState", "--value", check=False, timeout=10).stdout.strip()
            if state in ("running", "degraded"):
                if state == "degraded":
                    failed = m.systemctl("list-units", "--failed", check=False).stdout
                    raise RuntimeError(f"systemd --user is degraded:\n{failed}\n{m.log()}")
                return
        time.sleep(0.05)
    raise RuntimeError(f"systemd --user not running after {timeout} s (state {state!r})\n{m.log()}")


def _kill_cgroup(cg: Path, timeout: float = 10) -> None:
    """Kill everything left in our cgroup (only processes this helper started live there)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not cg.exists() or "populated 0" in (cg / "cgroup.events").read_text():
            return
        if (cg / "cgroup.kill").exists():
            (cg / "cgroup.kill").write_text("1")
        else:  # kernels before 5.14
            for procs in cg.rglob("cgroup.procs"):
                for pid in procs.read_text().split():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), signal.SIGKILL)
        time.sleep(0.05)
    raise RuntimeError(f"processes still alive in {cg} after {timeout} s")


def _remove_cgroup(cg: Path) -> None:
    for _ in range(100):
        if not cg.exists():
            return
        try:
            for d in sorted((p for p in cg.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                d.rmdir()
            cg.rmdir()
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"could not remove cgroup {cg}")


@contextlib.contextmanager
def user_manager(units: Iterable[Path] = ()) -> Iterator[SdManager]:
    """Start a manager (raises RuntimeError if it cannot start), yield it, always tear it down."""
    reason = unavailable_reason()
    if reason:
        raise RuntimeError(reason)
    root = cgroup2_root()
    assert root is not None
    base = Path(tempfile.mkdtemp(prefix="sd", dir="/tmp"))
    cg = root / f"hasr-sd-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    proc: subprocess.Popen[bytes] | None = None
    try:
        for d in ("xdg", "cfg/systemd/user", "home"):
            (base / d).mkdir(parents=True)
        (base / "xdg").chmod(0o700)
        for masked in _MASKED:
            (base / "cfg/systemd/user" / masked).symlink_to("/dev/null")
        (base / "inner.sh").write_text(INNER)
        try:
            cg.mkdir()
        except OSError as e:  # e.g. a read-only cgroup mount in an unprivileged container
            raise CgroupUnavailable(f"cannot create a cgroup for the manager in {root}: {e}") from None
        binary = next(b for b in _MANAGERS if os.access(b, os.X_OK))
        with open(base / "launch.log", "wb") as out:
            proc = subprocess.Popen(
                ["bash", "-c", 'echo $$ > "$1/cgroup.procs" && exec unshare --mount --cgroup --propagation private '
                 'bash "$2/inner.sh" "$2" "$3"', "launch", str(cg), str(base), binary],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"})
        m = SdManager(base, cg, proc)
        _wait_running(m)
        for unit in units:
            m.install(unit, reload=False)
        m.systemctl("daemon-reload")
        yield m
    finally:
        if proc is not None:
            if proc.poll() is None:
                with contextlib.suppress(subprocess.SubprocessError, OSError):
                    subprocess.run(["systemctl", "--user", "exit"], env={"XDG_RUNTIME_DIR": str(base / "xdg")},
                                   capture_output=True, timeout=10)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(10)
            if cg.exists():
                _kill_cgroup(cg)
            proc.wait(10)
        _remove_cgroup(cg)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture()
def sd_manager() -> Iterator[SdManager]:
    """A fresh ``systemd --user`` manager per test; skipped with the reason where root or cgroup2 is missing."""
    reason = unavailable_reason()
    need(not reason, reason or "")
    try:
        cm = user_manager()
        m = cm.__enter__()
    except CgroupUnavailable as e:
        need(False, str(e))
        raise
    try:
        yield m
    finally:
        cm.__exit__(None, None, None)

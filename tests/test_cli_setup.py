"""``hasrctl setup`` against a real ``systemd --user`` manager (tests/sdmanager.py; root + cgroup2).

Afterwards the socket is enabled and listening, a transcription goes through the socket-activated service,
a second setup changes nothing, and ``--uninstall`` removes exactly what setup installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from sdmanager import SdManager, sd_manager, test_dropin  # noqa: F401  (sd_manager is a fixture)
from tests.cliutil import REPO, hasrctl, show
from tests.conftest import need
from tests.daemon import write_wav

FINAL = "今天天气很好。\n我们去公园散步\n"  # one sentence a line (the CLI's text format)


def _tree(*roots: Path) -> set[str]:
    out: set[str] = set()
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            out.update(os.path.join(dirpath, n) for n in dirnames + filenames)
    return out


def _env(m: SdManager) -> dict[str, str]:
    """hasrctl as the manager's user sees it: its runtime dir, config and data homes."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HASR_", "XDG_", "LISTEN_", "NOTIFY_"))}
    env.update(m.env)
    env.update({"XDG_CONFIG_HOME": str(m.base / "cfg"), "XDG_DATA_HOME": str(m.home / ".local" / "share"),
                "HOME": str(m.home), "PYTHONPATH": str(REPO)})
    return env


def _fake_service(m: SdManager, **env: str) -> None:
    """hasrd.service's test drop-in: the fake engine from this checkout, ``env`` besides, output in hasrd.log."""
    (m.unit_dir / "hasrd.service.d").mkdir()
    (m.unit_dir / "hasrd.service.d" / "50-test.conf").write_text(test_dropin(
        env={"HASR_ENGINE": "fake", "PYTHONPATH": str(REPO), **env}, stdout=m.base / "hasrd.log"))


def test_setup_enables_the_socket_and_uninstall_removes_what_it_installed(sd_manager: SdManager) -> None:
    m = sd_manager
    env = _env(m)
    # The test's own drop-in (no start limit, fake engine, short idle, log to a file) is not setup's business.
    dropin_dir = m.unit_dir / "hasrd.service.d"
    dropin_dir.mkdir()
    (dropin_dir / "50-test.conf").write_text(test_dropin(
        env={"HASR_ENGINE": "fake", "HASR_IDLE_TTL_SEC": "1", "HASR_IDLE_EXIT_SEC": "1.5", "PYTHONPATH": str(REPO)},
        stdout=m.base / "hasrd.log"))
    before = _tree(m.base / "cfg", m.home)

    res = hasrctl("setup", env=env)
    assert res.returncode == 0, show(res) + m.log()
    icon_dir = m.home / ".local/share/icons/hicolor"
    icons = {icon_dir / p.relative_to(REPO / "packaging/icons/hicolor")
             for p in (REPO / "packaging/icons/hicolor").glob("*/apps/hasr*")}
    assert icon_dir / "48x48/apps/hasr.png" in icons and all(p.is_file() for p in icons)
    lines = res.stdout.splitlines()
    assert f"installed  {len(icons)} icons under {icon_dir}" in lines  # one line, not one per icon
    installed = {Path(line.split(None, 1)[1]) for line in lines if line.startswith("installed") and "icons" not in line}
    assert installed == {m.unit_dir / "hasrd.socket", m.unit_dir / "hasrd.service",
                         m.home / ".local/share/applications/hasr-tray.desktop",
                         m.base / "cfg/autostart/hasr-tray.desktop"}
    assert len(lines) == len(installed) + 2  # and the socket it enabled
    service = (m.unit_dir / "hasrd.service").read_text()
    exec_start = next(ln for ln in service.splitlines() if ln.startswith("ExecStart="))
    here = Path(sys.executable).parent / "hasrd"
    assert exec_start in (f"ExecStart={here}", f"ExecStart={sys.executable} -m hasrd.server"), exec_start
    assert "Exec=" in (m.base / "cfg/autostart/hasr-tray.desktop").read_text()
    assert m.show("hasrd.socket", "UnitFileState") == "enabled"
    assert m.show("hasrd.socket", "ActiveState") == "active"
    sock = m.runtime_dir / "hasr" / "hasrd.sock"
    assert sock.is_socket()

    # A transcription activates the service through the socket: no autostart, only its summary on stderr.
    wav = write_wav(str(m.base / "a.wav"), 1.0)
    res = hasrctl("transcribe", "--no-autostart", wav, env=env)
    assert res.returncode == 0 and res.stdout == FINAL and "started hasrd" not in res.stderr, show(res) + m.log()
    assert m.show("hasrd.service", "ActiveState") == "active"
    assert int(m.show("hasrd.service", "MainPID")) > 0
    assert hasrctl("status", env=env).returncode == 0

    # Idempotent: a second run changes nothing.
    again = hasrctl("setup", env=env)
    assert again.returncode == 0, show(again)
    assert [ln.split()[0] for ln in again.stdout.splitlines()[:-1]] == ["unchanged"] * (len(installed) + 1)

    # stop goes through systemd: the service stops, the socket stays and restarts it on demand.
    res = hasrctl("stop", env=env)
    assert res.returncode == 0 and "hasrd.service" in res.stdout, show(res)
    m.wait_for("hasrd.service", "ActiveState", "inactive", "failed")
    assert m.show("hasrd.socket", "ActiveState") == "active"
    assert hasrctl("transcribe", "--no-autostart", wav, env=env).stdout == FINAL

    res = hasrctl("setup", "--uninstall", env=env)
    assert res.returncode == 0, show(res) + m.log()
    assert m.show("hasrd.socket", "ActiveState") == "inactive"
    assert m.show("hasrd.socket", "LoadState") == "not-found"
    assert _tree(m.base / "cfg", m.home) == before
    assert (dropin_dir / "50-test.conf").exists()
    res = hasrctl("transcribe", "--no-autostart", wav, env=env)
    assert res.returncode == 3, show(res)
    assert hasrctl("setup", "--uninstall", env=env).stdout.startswith("nothing to uninstall")


def test_setup_refuses_to_replace_a_unit_it_did_not_install(sd_manager: SdManager) -> None:
    m = sd_manager
    env = _env(m)
    (m.unit_dir / "hasrd.service").write_text("[Service]\nExecStart=/bin/true\n")
    res = hasrctl("setup", env=env)
    assert res.returncode == 2 and "--force" in res.stderr, show(res)
    assert (m.unit_dir / "hasrd.service").read_text() == "[Service]\nExecStart=/bin/true\n"
    assert not (m.unit_dir / "hasrd.socket").exists()


def test_setup_takes_the_socket_over_from_an_autostarted_daemon(sd_manager: SdManager) -> None:
    import re

    from tests.conftest import pid_alive, wait_until

    m = sd_manager
    env = _env(m)
    _fake_service(m)
    wav = write_wav(str(m.base / "a.wav"), 1.0)
    first = hasrctl("transcribe", wav, env={**env, "HASR_ENGINE": "fake"})
    assert first.returncode == 0 and "started hasrd" in first.stderr, show(first)
    found = re.search(r"pid (\d+)", first.stderr)
    assert found
    pid = int(found.group(1))
    try:
        res = hasrctl("setup", "--no-tray", env=env)
        assert res.returncode == 0 and "systemd's socket takes over" in res.stderr, show(res) + m.log()
        assert wait_until(lambda: not pid_alive(pid), timeout=20)
        again = hasrctl("transcribe", "--no-autostart", wav, env=env)
        assert again.returncode == 0 and again.stdout == FINAL and "started" not in again.stderr, show(again) + m.log()
        assert int(m.show("hasrd.service", "MainPID")) not in (0, pid)
    finally:
        if pid_alive(pid):
            os.kill(pid, 9)


def _as_su(m: SdManager, *args: str) -> subprocess.CompletedProcess[str]:
    """``hasrctl ARGS`` as after ``su - USER``: no XDG_RUNTIME_DIR, while the login's /run/user/<uid> is the
    manager's runtime directory (bound there in a private mount namespace of this command alone)."""
    script = ('set -e; mount -t tmpfs -o mode=755 tmpfs /run/user; mkdir -m 700 "/run/user/$1"; '
              'mount --bind "$2" "/run/user/$1"; shift 2; exec "$@"')
    env = {k: v for k, v in _env(m).items() if k != "XDG_RUNTIME_DIR"}
    res = subprocess.run(["unshare", "--mount", "--propagation", "private", "bash", "-c", script, "su",
                          str(os.getuid()), str(m.runtime_dir), sys.executable, "-m", "hasrctl", *args],
                         env=env, cwd=str(REPO), capture_output=True, text=True, timeout=120)
    return res


def test_without_xdg_runtime_dir_hasrctl_finds_the_systemd_socket_in_run_user(sd_manager: SdManager) -> None:
    """Issue 32 #6: after setup, `su - $USER -c 'hasrctl transcribe x.wav'` (no XDG_RUNTIME_DIR) goes through
    systemd's socket in /run/user/<uid>/hasr, instead of autostarting a second daemon under /tmp; setup itself
    works there too, and stop says what systemd does."""
    need(os.path.isdir("/run/user") and shutil.which("unshare") is not None, "needs /run/user and unshare")
    m = sd_manager
    _fake_service(m)
    uid = os.getuid()
    res = _as_su(m, "setup", "--no-tray")
    assert res.returncode == 0, show(res) + m.log()
    assert f"systemd listens on /run/user/{uid}/hasr/hasrd.sock" in res.stdout, res.stdout
    assert m.show("hasrd.socket", "ActiveState") == "active"
    wav = write_wav(str(m.base / "a.wav"), 1.0)
    tmp_sock = Path(f"/tmp/hasr-{uid}/hasr/hasrd.sock")
    existed = tmp_sock.exists()
    res = _as_su(m, "transcribe", wav)
    assert res.returncode == 0 and res.stdout == FINAL, show(res) + m.log()
    assert "started hasrd" not in res.stderr, res.stderr
    assert m.show("hasrd.service", "ActiveState") == "active"  # systemd's daemon answered
    assert tmp_sock.exists() == existed  # no second daemon under /tmp
    res = _as_su(m, "stop")
    assert res.returncode == 0 and "stopped hasrd.service (hasrd.socket still listens" in res.stdout, show(res)
    m.wait_for("hasrd.service", "ActiveState", "inactive", "failed")


def test_stop_with_the_socket_unit_inactive_does_not_claim_it_listens(sd_manager: SdManager) -> None:
    """Issue 32 #8: units installed but hasrd.socket stopped: `stop` stops no unit and says nothing listens."""
    m = sd_manager
    env = _env(m)
    assert hasrctl("setup", "--no-tray", env=env).returncode == 0
    m.systemctl("stop", "hasrd.socket")
    res = hasrctl("stop", env=env)
    assert res.returncode == 0, show(res)
    assert "still listens" not in res.stdout + res.stderr and "not running" in res.stderr, show(res)


def test_a_command_that_starts_a_stopped_socket_unit_says_so(sd_manager: SdManager) -> None:
    """Issue 39 #10: hasrctl started hasrd.socket again, silently, after the user had stopped it."""
    m = sd_manager
    env = _env(m)
    _fake_service(m)
    assert hasrctl("setup", "--no-tray", env=env).returncode == 0
    m.systemctl("stop", "hasrd.socket")
    wav = write_wav(str(m.base / "a.wav"), 1.0)
    res = hasrctl("transcribe", wav, env=env)
    assert res.returncode == 0 and res.stdout == FINAL, show(res) + m.log()
    assert res.stderr.startswith("hasrctl: hasrd.socket was not listening: started it (systemctl --user start "
                                 "hasrd.socket; --no-autostart leaves it stopped)\n"), show(res)
    assert m.show("hasrd.socket", "ActiveState") == "active"

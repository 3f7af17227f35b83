"""hasr-tray on a real X server beside a real ``systemd --user`` manager holding the shipped hasrd.socket: a
daemon asleep behind its socket and a socket unit that was stopped are told apart at the next poll (the tray
used to keep what it knew of the socket unit for 60 s), and the tray never wakes the daemon to find out.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from sdmanager import SdManager, sd_manager, test_dropin  # noqa: F401  (sd_manager is a fixture)
from tests.test_tray_x import REPO, Desktop, _x_tools, desktop, start_tray  # noqa: F401

UNITS = Path(REPO) / "systemd"


def test_a_stopped_socket_unit_is_shown_at_the_next_poll_and_an_asleep_daemon_is_never_woken(
        desktop: Desktop, sd_manager: SdManager) -> None:
    m = sd_manager
    m.install(UNITS / "hasrd.socket", reload=False)
    m.install(UNITS / "hasrd.service", exec_start=f"{sys.executable} -m hasrd",
              dropin=test_dropin(env={"HASR_ENGINE": "fake", "PYTHONPATH": REPO}, stdout=m.base / "hasrd.log"))
    m.systemctl("start", "hasrd.socket")
    tray = start_tray(desktop, None, env={"XDG_RUNTIME_DIR": str(m.runtime_dir)})  # the default socket: systemd's
    try:
        icon = desktop.icon_window()
        desktop.wait_state(icon, "idle", "daemon asleep, starts on demand")

        m.systemctl("stop", "hasrd.socket")
        stopped = time.monotonic()
        desktop.wait_state(icon, "offline", "hasr: daemon not running (hasrd.socket stopped)", timeout=10)
        assert time.monotonic() - stopped < 3  # polled every 0.3 s: one or two polls, not a minute

        m.systemctl("start", "hasrd.socket")
        started = time.monotonic()
        desktop.wait_state(icon, "idle", "daemon asleep, starts on demand", timeout=10)
        assert time.monotonic() - started < 3
        time.sleep(1.0)  # a few more polls
        assert m.show("hasrd.service", "ActiveState") == "inactive", "the tray woke the sleeping daemon"
        assert tray.alive(), tray.text()[-2000:]
    finally:
        tray.stop()

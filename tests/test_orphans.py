"""The worker never outlives the daemon: PR_SET_PDEATHSIG, its own parent check, and channel EOF."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

from tests.conftest import pid_alive, wait_until

DAEMON = textwrap.dedent("""
    import asyncio, os, sys
    from hasrd import config
    from hasrd.runner import Runner
    from hasrd.spawn import make_spawn

    async def main():
        runner = Runner(config.Settings(engine="fake"), make_spawn("fake"))
        worker = await runner.ready()
        print(worker.pid, flush=True)
        await asyncio.sleep(3600)

    asyncio.run(main())
""")


def start_daemon() -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen([sys.executable, "-c", DAEMON], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    return proc, int(line)


def test_kill_9_of_the_daemon_leaves_no_worker_behind() -> None:
    for _ in range(3):
        daemon, worker_pid = start_daemon()
        assert pid_alive(worker_pid)
        os.kill(daemon.pid, signal.SIGKILL)
        daemon.wait()
        gone = wait_until(lambda pid=worker_pid: not pid_alive(pid), timeout=1.0)
        assert gone, f"worker {worker_pid} outlived the daemon"


def test_sigterm_of_the_daemon_leaves_no_worker_behind() -> None:
    daemon, worker_pid = start_daemon()
    daemon.terminate()
    daemon.wait()
    assert wait_until(lambda: not pid_alive(worker_pid), timeout=1.0)


def test_a_worker_whose_parent_is_already_gone_exits_at_once() -> None:
    # --parent-pid names a pid that is not our parent: the worker must notice the race and leave.
    import socket
    a, b = socket.socketpair()
    proc = subprocess.Popen([sys.executable, "-m", "hasrd.worker", "--engine", "fake", "--fd", str(b.fileno()),
                             "--parent-pid", "1"], pass_fds=(b.fileno(),))
    b.close()
    assert proc.wait(10) == 70
    a.close()

"""Run ``hasrctl`` as a person does: a subprocess with its own runtime/config dirs, against real sockets."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def cli_env(base: str, **extra: str) -> dict[str, str]:
    """A clean environment: no HASR_* from outside, private XDG dirs under ``base`` (a short path)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HASR_", "XDG_", "LISTEN_", "NOTIFY_"))}
    for name in ("run", "cfg", "data"):
        os.makedirs(os.path.join(base, name), mode=0o700, exist_ok=True)
    env.update({"XDG_RUNTIME_DIR": os.path.join(base, "run"), "XDG_CONFIG_HOME": os.path.join(base, "cfg"),
                "XDG_DATA_HOME": os.path.join(base, "data"), "HASR_ENGINE": "fake",
                "PYTHONPATH": str(REPO) + os.pathsep + env.get("PYTHONPATH", ""), "COLUMNS": "100"})
    env.update(extra)
    return env


# run as root without the rights to pass file permissions: what a user meets (a read-only directory, a file of mode 0)
NO_OVERRIDE = ("setpriv", "--bounding-set=-dac_override,-dac_read_search")


def hasrctl(*args: str, env: dict[str, str], stdin: bytes | None = None, cwd: str | None = None,
            timeout: float = 90.0, wrap: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """``hasrctl ARGS`` with text output (stdout, stderr) and the exit code; ``wrap`` runs it under a command
    (NO_OVERRIDE)."""
    res = subprocess.run([*wrap, sys.executable, "-m", "hasrctl", *args], env=env, input=stdin,
                         cwd=cwd or str(REPO), capture_output=True, timeout=timeout)
    return subprocess.CompletedProcess(res.args, res.returncode, res.stdout.decode("utf-8", "replace"),
                                       res.stderr.decode("utf-8", "replace"))


def one_line(text: str) -> str:
    """The single non-empty line of ``text`` (asserting there is exactly one: errors are one line)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert len(lines) == 1, f"expected one line, got: {text!r}"
    return lines[0]


def show(res: Any) -> str:
    return f"exit {res.returncode}\nstdout: {res.stdout!r}\nstderr: {res.stderr!r}"

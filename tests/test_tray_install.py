"""The tray as it installs: ``hasr-tray`` without Tk for Python (Debian's python3 lacks it until ``apt install
python3-tk``) or without the tray extra says so in one line.

A module is made missing the way it is on such a machine: a ``sitecustomize`` on PYTHONPATH puts a finder
first on ``sys.meta_path`` that answers ModuleNotFoundError for it, so both ``import`` and
``importlib.util.find_spec`` fail as they would without the package. Everything else runs for real.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.cliutil import REPO, cli_env

HIDE = '''import os, sys
HIDDEN = set(filter(None, os.environ.get("HASR_TEST_HIDE", "").split(",")))

class Hide:
    """Behave as if the modules named in HASR_TEST_HIDE (and their submodules) were not installed."""
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Hide())
'''


def hiding(base: Path, env: dict[str, str], *modules: str) -> dict[str, str]:
    """``env`` in which ``modules`` cannot be imported (and this checkout's code runs)."""
    site = base / "hide"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(HIDE)
    return {**env, "HASR_TEST_HIDE": ",".join(modules),
            "PYTHONPATH": os.pathsep.join([str(site), str(REPO), env.get("PYTHONPATH", "")])}


def run_tray(env: dict[str, str]) -> tuple[int, str, str]:
    """What the ``hasr-tray`` console script runs (tray.app:main), in a subprocess."""
    import subprocess

    res = subprocess.run([sys.executable, "-c", "import sys; from tray.app import main; sys.exit(main())"],
                         env=env, cwd=str(REPO), capture_output=True, text=True, timeout=60)
    return res.returncode, res.stdout, res.stderr


@pytest.mark.parametrize("hidden, names, fix", [
    ("tkinter", "tkinter (No module named 'tkinter')", "sudo apt install python3-tk"),
    ("_tkinter", "tkinter (No module named '_tkinter')", "sudo apt install python3-tk"),
    ("pystray", "pystray (No module named 'pystray')", "pip install '.[tray]'"),
])
def test_hasr_tray_without_what_it_needs_says_how_to_install_it_in_one_line(short_tmp: str, hidden: str,
                                                                             names: str, fix: str) -> None:
    env = hiding(Path(short_tmp), cli_env(short_tmp, DISPLAY=":0"), hidden)
    code, out, err = run_tray(env)
    assert code == 2 and out == ""
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"hasr-tray: the tray cannot run: it needs {names}; fix: "), err
    assert fix in err, err


def test_hasr_tray_on_a_display_it_cannot_open_says_so_in_one_line(short_tmp: str) -> None:
    n = next(n for n in range(4093, 5000) if not os.path.exists(f"/tmp/.X11-unix/X{n}"))  # no X server there
    code, out, err = run_tray(cli_env(short_tmp, DISPLAY=f":{n}", PYSTRAY_BACKEND="xorg"))
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"hasr-tray: cannot open the display :{n}: "), err

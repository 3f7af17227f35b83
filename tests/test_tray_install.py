"""The tray as it installs: ``hasr-tray`` without Tk for Python (Debian's python3 lacks it until ``apt install
python3-tk``) or without the tray extra says so in one line; ``hasrctl doctor`` checks the tray; ``hasrctl
setup`` leaves out (and takes back) the autostart entry while the tray cannot run.

A module is made missing the way it is on such a machine: a ``sitecustomize`` on PYTHONPATH puts a finder
first on ``sys.meta_path`` that answers ModuleNotFoundError for it, so both ``import`` and
``importlib.util.find_spec`` fail as they would without the package. Everything else runs for real.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from sdmanager import SdManager, sd_manager  # noqa: F401  (sd_manager is a fixture)
from tests.cliutil import REPO, cli_env, hasrctl, show

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


def _tray_checks(env: dict[str, str]) -> tuple[int, list[dict[str, str]]]:
    res = hasrctl("doctor", "--json", "--quick", env=env, timeout=300)
    assert res.returncode in (0, 1), show(res)
    return res.returncode, [c for c in json.loads(res.stdout)["checks"] if c["what"].startswith("tray: ")]


def test_doctor_says_whether_the_tray_can_run_and_how_to_make_it(short_tmp: str) -> None:
    env = cli_env(short_tmp)
    _, checks = _tray_checks(env)
    assert checks[0]["state"] == "ok" and checks[0]["what"].startswith("tray: hasr-tray can run ("), checks

    _, checks = _tray_checks(hiding(Path(short_tmp), env, "tkinter"))
    assert [c["state"] for c in checks] == ["warn"], checks  # the tray is optional: not a failure by itself
    assert "cannot run: it needs tkinter" in checks[0]["what"]
    assert checks[0]["fix"].startswith("sudo apt install python3-tk"), checks

    entry = Path(short_tmp, "cfg", "autostart", "hasr-tray.desktop")  # a login would start a tray that fails
    entry.parent.mkdir(parents=True)
    entry.write_text("[Desktop Entry]\nType=Application\nExec=hasr-tray\n")
    code, checks = _tray_checks(hiding(Path(short_tmp), env, "tkinter"))
    assert code == 1 and [c["state"] for c in checks] == ["fail"], checks
    assert f"its autostart entry {entry} fails at every login" in checks[0]["what"], checks
    assert "python3-tk" in checks[0]["fix"] and str(entry) in checks[0]["fix"]


def test_doctor_names_what_the_tray_does_without_an_optional_part(short_tmp: str) -> None:
    _, checks = _tray_checks(hiding(Path(short_tmp), cli_env(short_tmp), "tkinterdnd2"))
    assert checks[0]["state"] == "ok", checks  # it still runs
    dnd = next(c for c in checks if "tkinterdnd2" in c["what"])
    assert dnd["state"] == "warn" and "no drag and drop" in dnd["what"] and "[tray]" in dnd["fix"]


def test_setup_leaves_out_the_autostart_entry_while_the_tray_cannot_run(sd_manager: SdManager) -> None:
    from tests.test_cli_setup import _env

    m = sd_manager
    env = _env(m)
    entry = m.base / "cfg" / "autostart" / "hasr-tray.desktop"
    menu_entry = m.home / ".local/share/applications/hasr-tray.desktop"
    no_tk = hiding(m.base, env, "tkinter")

    res = hasrctl("setup", env=no_tk)
    assert res.returncode == 0, show(res) + m.log()
    assert not entry.exists() and str(entry) not in res.stdout
    assert menu_entry.is_file()  # the menu entry and icons stay: they work once python3-tk is installed
    assert "skipped the tray's autostart entry: the tray cannot run: it needs tkinter" in res.stderr, show(res)
    assert "sudo apt install python3-tk" in res.stderr and "run hasrctl setup again" in res.stderr
    assert m.show("hasrd.socket", "ActiveState") == "active"  # the daemon's part is done all the same

    res = hasrctl("setup", env=env)  # Tk installed: the entry comes
    assert res.returncode == 0 and f"installed  {entry}" in res.stdout.splitlines(), show(res)
    assert entry.is_file() and "skipped" not in res.stderr

    res = hasrctl("setup", env=no_tk)  # Tk gone again: setup takes back the entry it installed
    assert res.returncode == 0 and f"removed  {entry}" in res.stdout.splitlines(), show(res)
    assert not entry.exists() and menu_entry.is_file()
    manifest = json.loads((m.home / ".local/share/hasr/setup-manifest.json").read_text())
    assert str(entry) not in manifest["files"] and str(menu_entry) in manifest["files"]

    entry.write_text("[Desktop Entry]\nType=Application\nExec=my-own-tray\n")  # a person's own entry stays
    res = hasrctl("setup", env=no_tk)
    assert res.returncode == 0 and entry.read_text().endswith("Exec=my-own-tray\n"), show(res)

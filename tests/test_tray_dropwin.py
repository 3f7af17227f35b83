"""The drop window with many rows, a long header and a dropped folder (issue 39 #7), on a real X server: after
about 7 rows its buttons were pushed out of the window, a long "loading failed" header pushed "Save as" off, and a
dropped folder was refused. The rows scroll and the buttons stay (a real click on "Transcribe file…" opens its
dialog with 20 rows shown); the format menu stays reachable beside a long failure; a folder is the audio in it.

Set HASR_TRAY_SCREENSHOTS=DIR to save dropwindow.png (the README's screenshot, 20 rows) there.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from Xlib import X

from tests import xharness as xh
from tests.conftest import need
from tests.test_tray_x import MISSING, SHOTS, Desktop, desktop, make_wav, start_daemon, start_tray  # noqa: F401
from tray.client import Client, DaemonError


@pytest.fixture(autouse=True)
def _x_tools() -> None:
    need(not MISSING, f"needs {', '.join(MISSING)}")


def click(desk: Desktop, x: int, y: int) -> None:
    subprocess.run(["xdotool", "mousemove", str(x), str(y), "click", "1"], env=desk.env, check=True, timeout=20)


def shown(desk: Desktop, title: str) -> Any:
    """The mapped window of that title (Tk keeps a closed file dialog, withdrawn, for the next time)."""
    return xh.find_window(desk.d, lambda w: xh.wm_name(desk.d, w) == title
                          and w.get_attributes().map_state == X.IsViewable)  # type: ignore[attr-defined]


def test_twenty_rows_scroll_the_buttons_stay_and_a_dropped_folder_is_the_audio_in_it(desktop: Desktop) -> None:
    sock = str(desktop.dir / "d.sock")
    daemon = start_daemon(desktop, sock, {"HASR_FAKE_RTF": "0.1"})
    tray = start_tray(desktop, sock, "--show-window", "--format", "txt")
    folder = desktop.dir / "talks"
    (folder / "day 2").mkdir(parents=True)
    wavs = [make_wav(folder / ("day 2" if i >= 18 else "") / f"talk {i:02}.wav", 0.5) for i in range(20)]
    for i in (3, 7, 11, 15):  # rows whose failure's words take several lines
        wavs[i].write_text("a text file named like audio\n")
    (folder / "day 2" / "notes.txt").write_text("not audio\n")  # left out: not named like audio
    empty = desktop.dir / "empty"
    empty.mkdir()
    try:
        target = desktop.drop_window()
        desktop.drop(target, wavs[:18])
        outs = [w.with_suffix(".txt") for i, w in enumerate(wavs) if i not in (3, 7, 11, 15)]
        xh.wait_for(lambda: all(o.exists() for o in outs[:14]), 120, 0.2, "14 transcripts next to their files")
        desktop.wait_notifications(18)
        x, y, w, h = xh.root_box(desktop.d, target)
        click(desktop, x + 24, y + h - 22)  # where "Transcribe file…" sits: the bottom left corner, still there
        dialog = xh.wait_for(lambda: shown(desktop, "Transcribe with hasr"), 20, 0.1, "the Transcribe file… dialog")
        dx, dy, _, _ = xh.root_box(desktop.d, dialog)
        subprocess.run(["xdotool", "mousemove", str(dx + 20), str(dy + 20), "key", "Escape"], env=desktop.env,
                       check=True, timeout=20)  # no window manager: the keyboard follows the pointer
        xh.wait_for(lambda: not shown(desktop, "Transcribe with hasr"), 20, 0.1, "the dialog to close")
        desktop.drop(target, [folder / "day 2", empty])  # a folder of two (and a text file), an empty one
        xh.wait_for(lambda: all(o.exists() for o in outs), 120, 0.2, "the folder's two transcripts")
        assert not (folder / "day 2" / "notes-1.txt").exists()  # notes.txt was no job
        calls = desktop.wait_notifications(21)
        assert any("could not transcribe empty" in c and "holds no audio or video files" in c for c in calls), calls
        if SHOTS:
            desktop.save_window(target, Path(SHOTS) / "dropwindow.png")
        assert tray.alive()
    finally:
        tray.stop()
        daemon.stop()


def test_a_long_loading_failure_leaves_the_format_choice_in_reach(desktop: Desktop) -> None:
    reason = "model_unavailable:" + "no weights in /a/rather/long/path/to/where/the/models/were/expected " * 3
    sock = str(desktop.dir / "d.sock")
    daemon = start_daemon(desktop, sock, {"HASR_FAKE_FAIL_LOAD": reason})
    tray = start_tray(desktop, sock, "--show-window", "--format", "txt")
    try:
        icon = desktop.icon_window()
        target = desktop.drop_window()
        with pytest.raises(DaemonError):
            Client(sock).request("POST", "/api/load", {})
        desktop.wait_state(icon, "error", "hasr: loading failed: no weights", timeout=10)
        x, y, w, h = xh.root_box(desktop.d, target)
        def menu_shown() -> bool:  # Tk's menus are windows of class Menu, mapped while posted
            return any((xh.wm_class(win) or ("", ""))[1] == "Menu"
                       and win.get_attributes().map_state == X.IsViewable  # type: ignore[attr-defined]
                       for win in xh.walk(desktop.d.screen().root))

        assert not menu_shown()
        click(desktop, x + w - 30, y + 20)  # the format menu, at the top right corner beside the long words
        xh.wait_for(menu_shown, 20, 0.1, "the format menu to open")
        assert tray.alive()
    finally:
        tray.stop()
        daemon.stop()

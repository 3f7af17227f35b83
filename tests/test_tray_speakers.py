"""The drop window's "Speakers" toggle (issue 41), on a real X server with the real daemon (fake engine), a real
click and real XDND drops: off, a dropped file is transcribed as before; a click turns it on, and the next file's
request carries speakers="auto" (the fake engine echoes the options that reached the worker); with no speaker
model installed that file's row fails with the daemon's one line on how to get one (seen in its notification,
which carries the row's words); with the tests' model installed (speakernet.py) the transcript comes in speaker
turns.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import wave
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from speakernet import build
from tests import xharness as xh
from tests.conftest import need
from tests.test_tray_x import MISSING, Desktop, desktop, start_daemon, start_tray  # noqa: F401
from voices import LINES, conversation

SCRIPT = "The report is ready for everyone. Please water the plants on the balcony."


@pytest.fixture(autouse=True)
def _x_tools() -> None:
    need(not MISSING, f"needs {', '.join(MISSING)}")


def _talk(path: Path) -> Path:
    """Two espeak-ng voices, one after the other, as a 16 kHz mono WAV."""
    mix, _ref, _texts = conversation([("m", LINES[0]), ("f", LINES[1])])
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes((np.clip(mix, -1.0, 1.0) * 32000).astype("<i2").tobytes())
    return path


def _toggle_speakers(desk: Desktop, window: Any) -> None:
    """A real click on "Speakers", right-aligned under the format menu at the top right corner."""
    x, y, w, _h = xh.root_box(desk.d, window)
    subprocess.run(["xdotool", "mousemove", str(x + w - 30), str(y + 48), "click", "1"], env=desk.env, check=True,
                   timeout=20)


def _result(desk: Desktop, n: int, path: Path) -> dict[str, Any]:
    """hasr's whole result from a tray json transcript (verbose_json), once the ``n``-th notification says it is
    written (the file exists, empty, from the moment its name is taken)."""
    assert "hasr transcribed" in desk.wait_notifications(n)[n - 1]
    return dict(json.loads(path.read_text())["hasr"])


def test_the_speakers_toggle_asks_the_next_drop_for_speakers_and_a_missing_model_fails_its_row_with_the_how_to(
        desktop: Desktop) -> None:
    sock = str(desktop.dir / "d.sock")
    daemon = start_daemon(desktop, sock, {"HASR_FAKE_RTF": "0.1", "HASR_FAKE_SCRIPT": SCRIPT})
    tray = start_tray(desktop, sock, "--show-window", "--format", "json")
    talks = [_talk(desktop.dir / "first.wav")]
    talks += [Path(shutil.copy(talks[0], desktop.dir / f"{n}.wav")) for n in ("second", "third")]
    try:
        target = desktop.drop_window()
        desktop.drop(target, [talks[0]])
        off = _result(desktop, 1, desktop.dir / "first.json")
        assert "speakers" not in off["options"] and not off.get("speakers"), off  # the toggle starts off

        _toggle_speakers(desktop, target)
        desktop.drop(target, [talks[1]])  # no speaker model installed yet
        calls = desktop.wait_notifications(2)
        assert "could not transcribe second.wav" in calls[1], calls
        assert "no speaker model is installed" in calls[1] and "hasrctl pull wespeaker-resnet34" in calls[1], calls
        assert not (desktop.dir / "second.json").exists()

        model = build(desktop.dir / "data" / "hasr" / "speakers" / "test.onnx")  # where the daemon finds one
        desktop.drop(target, [talks[2]])
        on = _result(desktop, 3, desktop.dir / "third.json")
        assert on["options"]["speakers"] == "auto" and on["options"]["speaker_model"] == str(model), on
        assert on["speakers"] and on["speakers"][0] == "A", on
        assert all(s["speaker"] in on["speakers"] for s in on["per_sentence"]), on
        calls = desktop.wait_notifications(3)
        assert "hasr transcribed third.wav" in calls[2] and "A: " in calls[2], calls  # the preview in turns
        assert tray.alive()
    finally:
        tray.stop()
        daemon.stop()

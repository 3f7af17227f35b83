"""The tray's dictation (tray/dictation.py): a file played as the microphone into a real daemon (fake engine),
sentences typed through a recording typist, the drop window's text reported as it changes."""

from __future__ import annotations

import threading
from pathlib import Path

from daemon import Hasrd

from hasrctl.client import CliError
from hasrctl.livesession import ffmpeg_source, typist
from tray.dictation import Dictation

DATA = Path(__file__).parent / "data"


def test_a_dictation_types_its_final_sentences_and_reports_the_live_text(short_tmp: str) -> None:
    h = Hasrd(str(Path(short_tmp) / "s"))
    typed: list[str] = []
    texts: list[tuple[str, str]] = []
    ended: list[str | None] = []
    done = threading.Event()
    d = Dictation(lambda: h.sock, lambda f, dr: texts.append((f, dr)), lambda err: (ended.append(err), done.set()),
                  source=lambda stop: ffmpeg_source(str(DATA / "zh_jishu.flac"), True, stop),
                  typist=lambda: typed.append)
    try:
        d.start()
        assert d.active
        assert done.wait(60)
    finally:
        h.stop()
    assert ended == [None]
    assert typed == ["今天天气很好。 ", "我们去公园散步 "]  # the fake's scripted draft: one typed call per sentence
    assert any(dr for _, dr in texts) and texts[-1][0] == "今天天气很好。 我们去公园散步"
    assert not d.active


def test_a_dictation_without_a_daemon_ends_with_a_reason(short_tmp: str) -> None:
    ended: list[str | None] = []
    done = threading.Event()
    d = Dictation(lambda: str(Path(short_tmp) / "nobody.sock"), lambda f, dr: None,
                  lambda err: (ended.append(err), done.set()), source=lambda stop: iter([b"\0\0" * 3840]),
                  typist=lambda: (lambda text: None))
    d.start()
    assert done.wait(30)
    assert ended[0] and "does not answer" in ended[0]


def test_the_typist_is_xdotool_on_x11_and_wtype_or_ydotool_on_wayland(tmp_path: Path) -> None:
    for tool in ("xdotool", "wtype", "ydotool"):
        (tmp_path / tool).write_text("#!/bin/sh\n")
        (tmp_path / tool).chmod(0o755)
    path = str(tmp_path)
    assert typist({"PATH": path, "DISPLAY": ":0"})[0] == "xdotool"
    assert typist({"PATH": path, "WAYLAND_DISPLAY": "wayland-0", "DISPLAY": ":0"})[0] == "wtype"
    (tmp_path / "wtype").unlink()
    assert typist({"PATH": path, "WAYLAND_DISPLAY": "wayland-0"})[0] == "ydotool"
    empty = tmp_path / "empty"
    empty.mkdir()
    try:
        typist({"PATH": str(empty), "WAYLAND_DISPLAY": "wayland-0"})
    except CliError as e:
        assert "wtype or ydotool" in e.message
    else:
        raise AssertionError("no typing tool was not an error")

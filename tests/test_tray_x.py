"""hasr-tray on a real X server (Xvfb) with a real tray host (trayer), the real daemon (fake engine), a real
XDND drop and notifications captured by python-dbusmock on a private session bus. Nothing inside the app is
mocked: the tests only look at pixels, window titles, files and D-Bus calls.

Set HASR_TRAY_SCREENSHOTS=DIR to also save tray.png (the README's screenshot) there; test_tray_dropwin.py saves
dropwindow.png.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import numpy as np
from PIL import Image, ImageDraw, ImageFont
from Xlib import display as xdisplay

from tests import xharness as xh
from tests.conftest import need
from tray.client import Client, DaemonDown, DaemonError

SHOTS = os.environ.get("HASR_TRAY_SCREENSHOTS", "")
REPO = str(Path(__file__).resolve().parent.parent)
MISSING = xh.missing(xh.X_TOOLS + xh.DBUS_TOOLS) + ([] if xh.dbusmock_python() else ["python3-dbusmock"])
@pytest.fixture(autouse=True)
def _x_tools() -> None:
    need(not MISSING, f"needs {', '.join(MISSING)}")


def background(fn: Any) -> None:
    """Run a daemon request in a thread; its outcome is judged through the tray, so errors are ignored."""
    def run() -> None:
        with contextlib.suppress(Exception):
            fn()
    threading.Thread(target=run, daemon=True).start()


def make_wav(path: Path, seconds: float) -> Path:
    """A short 16 kHz mono tone (the fake engine only needs its length)."""
    import wave

    n = int(16000 * seconds)
    pcm = (np.sin(np.arange(n) * 2 * np.pi * 330 / 16000) * 6000).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(pcm.tobytes())
    return path


class Desktop:
    """One test's Xvfb + trayer + private session bus with a mock notification daemon, in ``dir``."""

    def __init__(self, base: Path, tray_host: bool = True) -> None:
        self.dir = base
        self.procs: list[xh.Proc] = []
        xvfb, self.name = xh.start_xvfb(log=base / "xvfb.log")
        self.procs.append(xvfb)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DBUS_", "WAYLAND_", "LISTEN_"))}
        env.update(DISPLAY=self.name, NO_AT_BRIDGE="1", XDG_RUNTIME_DIR=str(base / "run"),
                   XDG_CONFIG_HOME=str(base / "config"), XDG_DATA_HOME=str(base / "data"), HOME=str(base))
        (base / "run").mkdir(mode=0o700)
        bus, env["DBUS_SESSION_BUS_ADDRESS"] = xh.start_dbus(env)
        self.procs.append(bus)
        self.notes = base / "notifications.log"
        self.procs.append(xh.start_notification_mock(env, self.notes, base / "dbusmock.log"))
        if tray_host:
            self.procs.append(xh.start_trayer(self.name, env, base / "trayer.log"))
        self.env = env
        self.d = xdisplay.Display(self.name)
        self.tray: xh.Proc | None = None

    def close(self) -> None:
        self.d.close()
        for p in reversed(self.procs):
            p.stop()

    # --- the icon -----------------------------------------------------------------------------------------------
    def icon_window(self, timeout: float = 20) -> Any:
        def find() -> Any:
            return xh.find_window(self.d, lambda w: (xh.wm_class(w) or ("", ""))[0] == "hasrSystemTrayIcon"
                                  and xh.root_box(self.d, w)[2] > 4)
        return xh.wait_for(find, timeout, 0.1, "the tray icon to dock")

    def look(self, icon: Any) -> tuple[str, str, Image.Image]:
        img = xh.grab(self.name, xh.root_box(self.d, icon))
        return xh.classify(img), xh.wm_name(self.d, icon), img

    def wait_state(self, icon: Any, state: str, words: str, timeout: float = 20) -> Image.Image:
        """Wait until the icon's pixels show ``state`` and its title contains ``words``; the slot's image."""
        last: list[Any] = []

        def ok() -> Image.Image | None:
            try:  # through the current connection (it may have been replaced below)
                last[:] = self.look(self.d.create_resource_object("window", icon.id))
            except Exception as e:  # noqa: BLE001
                # python-xlib mis-parses some error replies (AttributeError: 'BadRRModeError' object has no
                # attribute 'sequence_number') and leaves the connection unusable: reconnect and look again.
                print(f"X read failed ({type(e).__name__}: {e}); reconnecting")
                self.d = xdisplay.Display(self.name)
                return None
            return last[2] if last[0] == state and words in last[1] else None
        try:
            return xh.wait_for(ok, timeout, 0.05, f"icon {state!r} titled {words!r}")  # type: ignore[return-value]
        except TimeoutError:
            self.dump_tray()
            last[2].save(self.dir / f"failed-{state}.png")
            top = sorted(last[2].getcolors(100000) or [], reverse=True)[:6]
            print(f"slot {xh.root_box(self.d, icon)} colours {top}")
            raise AssertionError(f"wanted {state!r} / {words!r}, icon shows {last[0]!r} / {last[1]!r}") from None

    def dump_tray(self) -> None:
        """Ask the tray for its threads' stacks (faulthandler on SIGUSR1) so a failure shows where it was."""
        if self.tray is not None and self.tray.alive():
            os.kill(self.tray.pid, signal.SIGUSR1)
            time.sleep(0.5)

    def wait_title(self, icon: Any, pred: Any, timeout: float = 20) -> str:
        seen: list[str] = []

        def ok() -> str | None:
            t = xh.wm_name(self.d, icon)
            if not seen or seen[-1] != t:
                seen.append(t)
            return t if pred(t) else None
        try:
            return str(xh.wait_for(ok, timeout, 0.05, "a title"))
        except TimeoutError:
            raise AssertionError(f"no matching title among {seen}") from None

    # --- the drop window and notifications ------------------------------------------------------------------------
    def drop_window(self) -> Any:
        return xh.wait_for(lambda: xh.find_window(self.d, lambda w: xh.has_property(self.d, w, "XdndAware")
                                                  and "hasr" in xh.wm_name(self.d, w)), 20, 0.1, "the drop window")

    def drop(self, target: Any, files: list[Path]) -> dict[str, int]:
        x, y, w, h = xh.root_box(self.d, target)
        src = xh.XdndSource(self.name)
        try:
            return src.drop(target, x + w // 2, y + 70, [xh.file_uri(f) for f in files])
        finally:
            src.close()

    def wait_notifications(self, n: int, timeout: float = 30) -> list[str]:
        raw = xh.wait_for(lambda: len(self._calls()) >= n and self._calls(), timeout, 0.1, f"{n} notifications")
        return list(raw)  # type: ignore[call-overload]

    def _calls(self) -> list[str]:
        """Notify calls from the dbusmock log (a call's body may span lines; each call starts with a time)."""
        if not self.notes.exists():
            return []
        calls: list[str] = []
        for line in self.notes.read_text(encoding="utf-8", errors="replace").splitlines():
            head = line.split(" ", 2)
            if len(head) > 1 and head[1] == "Notify" and head[0].replace(".", "").isdigit():
                calls.append(line)
            elif calls:
                calls[-1] += "\n" + line
        return calls

    # --- screenshots ------------------------------------------------------------------------------------------------
    def save_window(self, target: Any, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        xh.grab(self.name, xh.root_box(self.d, target)).save(path, optimize=True)

    def save_tray_strip(self, path: Path, seen: dict[str, Any]) -> None:
        """The docked icon in each state (real trayer pixels, enlarged 4x) with the state's name."""
        names = {"idle": "idle", "loading": "loading", "ok": "ready", "busy": "transcribing", "error": "error",
                 "offline": "no daemon"}
        tiles = [(names[k], img) for k, img in seen.items() if k in names]
        scale, pad = 4, 16
        w = max(img.width for _, img in tiles) * scale
        h = max(img.height for _, img in tiles) * scale
        strip = Image.new("RGB", (len(tiles) * (w + pad) + pad, h + 3 * pad), (245, 245, 245))
        draw = ImageDraw.Draw(strip)
        try:
            font: Any = ImageFont.truetype("DejaVuSans.ttf", 13)
        except OSError:
            font = ImageFont.load_default()
        for i, (label, img) in enumerate(tiles):
            x = pad + i * (w + pad)
            strip.paste(img.resize((img.width * scale, img.height * scale), Image.Resampling.NEAREST), (x, pad // 2))
            draw.text((x, h + pad), label, fill=(40, 40, 40), font=font)
        path.parent.mkdir(parents=True, exist_ok=True)
        strip.save(path, optimize=True)


@pytest.fixture
def desktop(short_tmp: str) -> Iterator[Desktop]:
    desk = Desktop(Path(short_tmp))
    try:
        yield desk
    finally:
        desk.close()
        for log in ("tray.log", "hasrd.log", "notifications.log"):  # shown by pytest when the test failed
            path = desk.dir / log
            if path.exists():
                print(f"--- {log} ---\n" + path.read_text(errors="replace")[-3000:])


def start_daemon(desk: Desktop, sock: str, knobs: dict[str, str]) -> xh.Proc:
    """``hasrd --engine fake`` on ``sock`` with fake-engine knobs; returns once /health answers."""
    env = {**desk.env, "HASR_IDLE_TTL_SEC": "600", **knobs}
    proc = xh.Proc([sys.executable, "-m", "hasrd", "--socket", sock, "--engine", "fake"], env=env,
                   log=desk.dir / "hasrd.log", cwd=REPO)

    def up() -> bool:
        try:
            return bool(Client(sock, timeout=2).health())
        except (DaemonDown, OSError):
            if not proc.alive():
                raise AssertionError("hasrd exited: " + proc.text()[-2000:]) from None
            return False
    xh.wait_for(up, 30, 0.1, "hasrd to answer /health")
    return proc


def start_tray(desk: Desktop, sock: str | None, *args: str, env: dict[str, str] | None = None) -> xh.Proc:
    argv = [sys.executable, "-m", "tray.app", "-v", "--backend", "xorg"] + (["--socket", sock] if sock else [])
    full = {**desk.env, "HASR_TRAY_POLL_SEC": "0.3", **(env or {})}
    desk.tray = xh.Proc(argv + list(args), env=full, log=desk.dir / "tray.log", cwd=REPO)
    return desk.tray


def test_icon_docks_and_its_colour_follows_the_daemon_through_every_state(desktop: Desktop) -> None:
    sock = str(desktop.dir / "d.sock")
    knobs = {"HASR_FAKE_LOAD_SEC": "2", "HASR_FAKE_RTF": "1.0"}
    daemon = start_daemon(desktop, sock, knobs)
    tray = start_tray(desktop, sock)
    client = Client(sock)
    seen: dict[str, Any] = {}
    try:
        icon = desktop.icon_window()
        seen["idle"] = desktop.wait_state(icon, "idle", "model not loaded")
        background(lambda: client.request("POST", "/api/load", {}))
        seen["loading"] = desktop.wait_state(icon, "loading", "loading models")
        seen["ok"] = desktop.wait_state(icon, "ok", "ready")
        wav = make_wav(desktop.dir / "会议.wav", 3.0)
        background(lambda: client.transcribe(str(wav)))
        seen["busy"] = desktop.wait_state(icon, "busy", "transcribing 会议.wav")
        seen["ok2"] = desktop.wait_state(icon, "ok", "ready")

        daemon.stop()  # the daemon goes away: the tray says so and keeps running
        seen["offline"] = desktop.wait_state(icon, "offline", "daemon not running")
        assert tray.alive()

        failing = {"HASR_FAKE_FAIL_LOAD": "model_unavailable:no weights in /nowhere", "HASR_MAX_LOAD_FAILURES": "1"}
        daemon = start_daemon(desktop, sock, failing)  # it comes back (with a model that cannot load)
        desktop.wait_state(icon, "idle", "model not loaded")
        with pytest.raises(DaemonError):
            client.request("POST", "/api/load", {})
        seen["error"] = desktop.wait_state(icon, "error", "no weights in /nowhere")
        assert tray.alive(), tray.text()[-2000:]
    finally:
        daemon.stop()
        tray.stop()
    if SHOTS:
        desktop.save_tray_strip(Path(SHOTS) / "tray.png", seen)


def error_pixels(desk: Desktop, window: Any) -> int:
    """How many pixels of ``window`` have the error colour (the drop window's state icon when red)."""
    img = xh.grab(desk.name, xh.root_box(desk.d, window)).convert("RGB")
    red = xh.COLORS["error"]
    return sum(n for n, (r, g, b) in img.getcolors(img.width * img.height) or []  # type: ignore[misc]
               if abs(r - red[0]) + abs(g - red[1]) + abs(b - red[2]) < 60)


def test_one_failed_load_turns_the_icon_and_the_drop_window_red_with_the_reason(desktop: Desktop) -> None:
    sock = str(desktop.dir / "d.sock")  # the default HASR_MAX_LOAD_FAILURES (5): one failure is a backoff
    daemon = start_daemon(desktop, sock, {"HASR_FAKE_FAIL_LOAD": "model_unavailable:no weights in /nowhere"})
    tray = start_tray(desktop, sock, "--show-window")
    client = Client(sock)
    try:
        icon = desktop.icon_window()
        desktop.wait_state(icon, "idle", "model not loaded")
        window = desktop.drop_window()
        assert error_pixels(desktop, window) < 20
        with pytest.raises(DaemonError, match="no weights in /nowhere"):
            client.request("POST", "/api/load", {})
        assert client.health().status == "idle"  # hasrd calls it idle (the next request loads again) ...
        desktop.wait_state(icon, "error", "hasr: loading failed: no weights in /nowhere (the next request retries)",
                           timeout=5)  # ... the tray shows the failure at once
        xh.wait_for(lambda: error_pixels(desktop, window) > 150, 5, 0.1, "the drop window's status icon to turn red")
        client.unload()  # clears the failure
        desktop.wait_state(icon, "idle", "model not loaded", timeout=5)
        assert error_pixels(desktop, window) < 20
        assert tray.alive()
    finally:
        tray.stop()
        daemon.stop()


def test_dropped_audio_files_are_transcribed_next_to_themselves_and_announced(desktop: Desktop) -> None:
    sock = str(desktop.dir / "d.sock")
    daemon = start_daemon(desktop, sock, {"HASR_FAKE_RTF": "0.2"})
    tray = start_tray(desktop, sock, "--show-window", "--format", "srt")
    music = desktop.dir / "in box"
    music.mkdir()
    cjk = make_wav(music / "会议 录音 1.wav", 2.0)
    plain = make_wav(music / "plain.wav", 1.0)
    (music / "plain.srt").write_text("keep me\n", encoding="utf-8")  # must not be overwritten
    try:
        target = desktop.drop_window()
        answer = desktop.drop(target, [cjk, plain])
        assert answer["requests"] >= 1, answer  # the window asked for the dropped data

        out_cjk, out_plain = music / "会议 录音 1.srt", music / "plain-1.srt"
        xh.wait_for(lambda: out_cjk.exists() and out_plain.exists(), 60, 0.1, "both transcripts")
        assert "今天天气很好。" in out_cjk.read_text(encoding="utf-8")
        assert "-->" in out_plain.read_text(encoding="utf-8")
        assert (music / "plain.srt").read_text(encoding="utf-8") == "keep me\n"
        calls = desktop.wait_notifications(2)
        assert any("transcribed 会议 录音 1.wav" in c and str(out_cjk) in c for c in calls), calls
        assert any(str(out_plain) in c for c in calls), calls

        text = music / "notes.txt"
        text.write_text("not audio\n", encoding="utf-8")
        desktop.drop(target, [text])
        calls = desktop.wait_notifications(3)
        assert "could not transcribe notes.txt" in calls[-1] and "decoded" in calls[-1], calls[-1]
        assert not (music / "notes-1.srt").exists()

        late = make_wav(music / "after the failure.wav", 1.0)  # the app keeps working after a failed file
        desktop.drop(target, [late])
        xh.wait_for((music / "after the failure.srt").exists, 30, 0.1, "a transcript after the failure")
        assert tray.alive()
    finally:
        tray.stop()
        daemon.stop()


def test_the_title_names_the_file_and_progress_in_words(desktop: Desktop) -> None:
    sock = str(desktop.dir / "d.sock")
    daemon = start_daemon(desktop, sock, {"HASR_FAKE_LOAD_SEC": "1.5", "HASR_FAKE_RTF": "1.0"})
    tray = start_tray(desktop, sock)
    try:
        icon = desktop.icon_window()
        wav = make_wav(desktop.dir / "长 会议.wav", 4.0)
        background(lambda: Client(sock).transcribe(str(wav)))
        title = desktop.wait_title(icon, lambda t: t.startswith("hasr: loading models ") and t.endswith(" s"))
        assert title
        title = desktop.wait_title(icon, lambda t: t.startswith("hasr: transcribing 长 会议.wav ") and
                                   t.endswith("%") and t != "hasr: transcribing 长 会议.wav 0%")
        assert 0 < int(title.rsplit(" ", 1)[1].rstrip("%")) <= 100
    finally:
        tray.stop()
        daemon.stop()


def test_a_second_tray_shows_the_first_ones_drop_window_and_exits(desktop: Desktop) -> None:
    from Xlib import X

    sock = str(desktop.dir / "d.sock")
    tray = start_tray(desktop, sock)  # without --show-window: only the icon
    try:
        desktop.icon_window()
        win = desktop.drop_window()

        def viewable() -> bool:
            return bool(win.get_attributes().map_state == X.IsViewable)  # type: ignore[attr-defined]

        assert not viewable()
        second = xh.Proc([sys.executable, "-m", "tray.app", "--backend", "xorg", "--socket", sock],
                         env={**desktop.env}, log=desktop.dir / "second.log", cwd=REPO)
        assert second.p.wait(20) == 0, second.text()
        assert "already running" in second.text() and str(tray.pid) in second.text()
        xh.wait_for(viewable, 10, 0.05, "the first tray's drop window")
        time.sleep(1.0)  # a second icon would have docked by now
        icons = []
        for w in xh.walk(desktop.d.screen().root):
            try:
                if (xh.wm_class(w) or ("", ""))[0] == "hasrSystemTrayIcon" and xh.root_box(desktop.d, w)[2] > 4:
                    icons.append(w)
            except Exception:
                continue
        assert len(icons) == 1, icons
        assert tray.alive()
    finally:
        tray.stop()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-v"]))


def test_notifications_reach_the_bus_through_jeepney_and_through_gdbus(desktop: Desktop,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from tray import notify

    monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", desktop.env["DBUS_SESSION_BUS_ADDRESS"])
    assert notify._with_jeepney("hasr transcribed 会议.wav", "Saved to /x/会议.txt", "hasr", 1, 5000) > 0
    assert notify._with_gdbus("it's \"quoted\" 会议", "back\\slash", "hasr", 2, 5000) > 0
    calls = desktop.wait_notifications(2)
    assert "hasr transcribed 会议.wav" in calls[0] and "Saved to /x/会议.txt" in calls[0]
    assert "it's" in calls[1] and "会议" in calls[1] and '"urgency": 2' in calls[1]
    monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", "unix:path=/nonexistent/bus")
    assert notify.send("nobody listens") is None  # logged, never raised

"""The tray's pure parts without a display: icons, state -> icon and title, menu, output naming, settings,
the events-connection policy (Watcher against a scripted client) and the job queue (against a scripted client).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("PYSTRAY_BACKEND", "dummy")  # importing pystray without DISPLAY raises otherwise

from tray import icons, menu, output, settings  # noqa: E402
from hasrctl.traydeps import choose_backend  # noqa: E402
from tray.client import DaemonDown, DaemonError  # noqa: E402
from tray.jobs import DONE, FAILED, Jobs, JobView  # noqa: E402
from hasrd.status import Health, PoolStatus, decode  # noqa: E402
from hasrd.transcript import Transcript, from_json  # noqa: E402
from tray.state import ASLEEP, BROKEN, DOWN, Link, from_health, is_quiet, listening, view  # noqa: E402
from tray.watch import Watcher  # noqa: E402

RESULT = {"final": "今天天气很好。", "duration_s": 2.0, "language": "Chinese",
          "per_sentence": [{"text": "今天天气很好。", "engine": "draft", "start_s": 0.0, "end_s": 2.0}]}


def snap(**kw: Any) -> PoolStatus:
    """A snapshot of /api/events as the tray decodes it, with these fields."""
    base = {"state": "stopped", "health": "idle", "in_flight": 0, "queue": 0, "job": None, "error": None,
            "elapsed_s": 0.0, "status_text": "idle"}
    return decode({**base, **kw}, PoolStatus)


def health(**kw: Any) -> PoolStatus:
    """What the tray makes of a /health answer with these fields."""
    return from_health(decode(kw, Health))


# --- icons ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("state", icons.STATES)
def test_each_state_has_its_own_dominant_colour(state: str) -> None:
    img = icons.flatten(icons.draw(state, 64))
    counts = sorted(img.getcolors(64 * 64) or [], reverse=True)
    colours = [c for _, c in counts if c not in (icons.PANEL, (255, 255, 255))]
    assert colours[0] == icons.COLORS[state]
    assert len(set(icons.COLORS.values())) == len(icons.STATES)


def test_packaged_icons_are_what_icons_py_draws(tmp_path: Path) -> None:
    repo = Path(__file__).resolve().parent.parent / "packaging" / "icons"
    written = icons.write_theme(tmp_path)
    assert len(written) == (len(icons.PNG_SIZES) + 1) * (len(icons.STATES) + 1)
    for path in written:
        rel = path.relative_to(tmp_path)
        assert (repo / rel).is_file(), f"packaging/icons/{rel} missing: run python -m tray.icons packaging/icons"
        if path.suffix == ".svg":
            assert (repo / rel).read_text() == path.read_text()


def test_unknown_icon_state_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown icon state"):
        icons.draw("sleepy")


# --- state -> icon, title ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("info, icon, title", [
    (snap(), "idle", "hasr: idle (model not loaded)"),
    (snap(state="starting", health="loading", elapsed_s=23.2, in_flight=1), "loading", "hasr: loading models 23 s"),
    (snap(state="ready", health="ok"), "ok", "hasr: ready (model loaded)"),
    (snap(state="ready", health="busy", in_flight=1, job={"name": "会议.wav", "progress": 0.4}),
     "busy", "hasr: transcribing 会议.wav 40%"),
    (snap(state="ready", health="busy", queue=2, job={"name": "a.wav", "done_s": 1.0, "total_s": 4.0}),
     "busy", "hasr: transcribing a.wav 25% (+2 queued)"),
    (snap(state="fatal", health="error", error="no weights"), "error",
     "hasr: loading failed repeatedly: no weights (`hasrctl load` retries)"),
    (snap(state="backoff", health="idle", error="oom"), "error",
     "hasr: loading failed: oom (the next request retries)"),
    (Link(DOWN, "refused"), "offline", "hasr: daemon not running"),
    (Link(DOWN, "refused", "hasrd.socket stopped: systemctl --user restart hasrd.socket"), "offline",
     "hasr: daemon not running (hasrd.socket stopped)"),
    (Link(ASLEEP), "idle", "hasr: idle (daemon asleep, starts on demand)"),
    (Link(BROKEN, "not JSON"), "error", "hasr: daemon error: not JSON"),
])
def test_view_names_the_state_in_words(info: Any, icon: str, title: str) -> None:
    v = view(info)
    assert (v.icon, v.title) == (icon, title)
    assert v.line[0].isupper() and v.line.lower().startswith(title[len("hasr: "):].lower()[:8])


# What hasrd answers after one failed load (HASR_MAX_LOAD_FAILURES not reached): /health and /api/events.
FAILED_HEALTH = {"status": "idle", "model_loaded": False, "engine": "fake", "loading": False, "busy": False,
                 "queue": 0, "error": "no weights in /nowhere"}
FAILED_SNAPSHOT = snap(state="backoff", health="idle", error="no weights in /nowhere", error_code="model_unavailable",
                       failures=1)


@pytest.mark.parametrize("info", [health(**FAILED_HEALTH), FAILED_SNAPSHOT], ids=["health", "events"])
def test_a_failed_load_is_red_with_its_reason_in_the_title_and_the_menu(info: PoolStatus) -> None:
    v = view(info)
    assert v.icon == "error" and v.title == "hasr: loading failed: no weights in /nowhere (the next request retries)"
    items = menu.build(v)
    assert items[0].label == "Loading failed: no weights in /nowhere (the next request retries)"  # type: ignore
    assert menu.actions(items)[menu.UNLOAD].enabled  # an unload clears the failure
    assert is_quiet(info)  # nothing happens until the next request: the tray polls, the daemon may idle-exit
    cleared = view(health(**{**FAILED_HEALTH, "error": None}))
    assert (cleared.icon, cleared.title) == ("idle", "hasr: idle (model not loaded)")


def test_an_unknown_health_is_shown_as_idle_not_a_crash() -> None:
    assert view(snap(health="weird")).icon == "idle"
    assert view(PoolStatus()).title == "hasr: idle (model not loaded)"


def test_quiet_means_no_worker_and_nothing_waiting() -> None:
    assert is_quiet(snap())
    assert is_quiet(snap(state="fatal", health="error"))
    assert not is_quiet(snap(state="ready", health="ok"))
    assert not is_quiet(snap(state="starting", health="loading"))
    assert not is_quiet(snap(queue=1))
    assert is_quiet(health(status="idle", busy=False, queue=0))
    assert not is_quiet(health(status="loading", loading=True))
    assert health(status="ok", busy=True, model_loaded=True).health == "busy"


# --- menu -------------------------------------------------------------------------------------------------------
def test_menu_has_the_status_line_and_every_action() -> None:
    items = menu.build(view(snap()), last_output=None)
    labels = [i.label if i else "---" for i in items]
    assert labels == ["Idle (model not loaded)", "---", "Transcribe file…", "Dictate", "Open drop window",
                      "Unload model", "Open last transcript", "---", "Quit"]
    acts = menu.actions(items)
    assert not items[0].enabled  # type: ignore[union-attr]
    assert not acts[menu.UNLOAD].enabled and not acts[menu.OPEN_LAST].enabled
    assert acts[menu.DROPWIN].default


def test_unload_and_open_last_are_enabled_when_they_can_act() -> None:
    acts = menu.actions(menu.build(view(snap(state="ready", health="ok")), last_output="/x/a.txt", jobs_pending=2))
    assert acts[menu.UNLOAD].enabled and acts[menu.OPEN_LAST].enabled
    assert acts[menu.TRANSCRIBE].label == "Transcribe file… (2 pending)"
    assert not menu.actions(menu.build(view(Link(DOWN))))[menu.UNLOAD].enabled


def test_a_live_session_is_shown_by_how_long_it_has_listened() -> None:
    v = view(snap(state="ready", health="busy", job={"name": "live session", "live": True, "total_s": 61.7}))
    assert v.line == "Live session (62 s of audio)"


def test_while_dictating_the_entry_stops_it_and_the_icon_listens() -> None:
    v = view(snap(state="ready", health="ok"))
    assert menu.actions(menu.build(v, dictating=True))[menu.DICTATE].label == "Stop dictating"
    lv = listening(v)
    assert lv.icon == "listening" and lv.health == "ok" and lv.model_loaded
    assert lv.title == "hasr: listening (dictating); ready (model loaded)"
    assert lv.line == "Listening (dictating) — ready (model loaded)"


# --- output naming ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt, name", [("txt", "会议 录音.txt"), ("srt", "会议 录音.srt"), ("vtt", "会议 录音.vtt"),
                                       ("json", "会议 录音.json"), ("TEXT", "会议 录音.txt")])
def test_transcript_goes_next_to_the_audio_with_the_format_extension(tmp_path: Path, fmt: str, name: str) -> None:
    src = tmp_path / "会议 录音.wav"
    out = output.write_next_to(src, output.render(from_json(RESULT), fmt), fmt)
    assert out == tmp_path / name
    assert "今天天气很好" in out.read_text(encoding="utf-8")


def test_existing_transcripts_are_never_overwritten(tmp_path: Path) -> None:
    src = tmp_path / "a.b.wav"
    (tmp_path / "a.b.txt").write_text("old")
    (tmp_path / "a.b-1.txt").write_text("older")
    out = output.write_next_to(src, "new\n", "txt")
    assert out.name == "a.b-2.txt"
    assert (tmp_path / "a.b.txt").read_text() == "old" and (tmp_path / "a.b-1.txt").read_text() == "older"


def test_a_text_source_is_not_its_own_transcript(tmp_path: Path) -> None:
    src = tmp_path / "notes.txt"
    src.write_text("mine")
    assert output.write_next_to(src, "t\n", "txt").name == "notes-1.txt" and src.read_text() == "mine"


def test_a_read_only_folder_falls_back_to_the_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    out = output.write_next_to(Path("/sys/x.wav"), "t\n", "srt")  # /sys refuses new files, even to root
    assert out == tmp_path / "data" / "hasr" / "transcripts" / "x.srt"


def test_subtitle_formats_carry_timestamps() -> None:
    assert "00:00:00,000 --> 00:00:02,000" in output.render(from_json(RESULT), "srt")
    assert output.render(from_json(RESULT), "vtt").startswith("WEBVTT")
    with pytest.raises(ValueError, match="txt, srt, vtt, json"):
        output.check_format("docx")


# --- settings and backend ---------------------------------------------------------------------------------------
def test_tray_settings_come_from_env_then_toml_then_defaults(tmp_path: Path) -> None:
    cfg = tmp_path / "hasr"
    cfg.mkdir()
    (cfg / "config.toml").write_text('language = "Chinese"\n[tray]\nformat = "vtt"\npoll_sec = 7\n')
    env = {"XDG_CONFIG_HOME": str(tmp_path), "XDG_RUNTIME_DIR": "/run/user/1", "HASR_TRAY_POLL_SEC": "2"}
    os_env = dict(os.environ)
    try:
        os.environ.update(env)
        s = settings.load(env)
        assert (s.format, s.poll_sec, s.language) == ("vtt", 2.0, "Chinese")
        assert s.socket == "/run/user/1/hasr/hasrd.sock"
        assert settings.load({**env, "HASR_TRAY_FORMAT": "bogus"}).format == "txt"
        assert settings.load(env, format="json", socket="/s").format == "json"
    finally:
        os.environ.clear()
        os.environ.update(os_env)


def test_backend_is_xorg_without_gi_unless_one_is_named() -> None:
    assert choose_backend({"PYSTRAY_BACKEND": "gtk"}) == "gtk"
    try:
        import gi  # noqa: F401
    except ImportError:
        assert choose_backend({}) == "xorg"


# --- the events-connection policy ---------------------------------------------------------------------------------
class ScriptedClient:
    """Answers /health and /api/events from scripts; counts connections."""

    path = "/nonexistent/hasrd.sock"

    def __init__(self, healths: list[Any], streams: list[list[PoolStatus]]) -> None:
        self.healths, self.streams, self.connections = healths, streams, 0

    def health(self) -> Health:
        self.connections += 1
        h = self.healths.pop(0)
        if isinstance(h, Exception):
            raise h
        return decode(h, Health)

    def events(self) -> Stream:
        self.connections += 1
        return Stream(self.streams.pop(0))


class Stream(list):  # type: ignore[type-arg]
    closed = False

    def close(self) -> None:
        self.closed = True


def published(client: ScriptedClient, steps: int, asleep: bool = False) -> list[Any]:
    seen: list[Any] = []
    w = Watcher(client, seen.append, poll_sec=0.01, asleep=lambda: asleep)  # type: ignore[arg-type]
    for _ in range(steps):
        w.step()
    return seen


def test_a_quiet_daemon_is_probed_not_streamed() -> None:
    c = ScriptedClient([{"status": "idle"}] * 3, [])
    seen = published(c, 3)
    assert [s.health for s in seen] == ["idle"] * 3 and c.connections == 3  # three short /health probes


def test_activity_opens_the_stream_until_the_daemon_is_quiet_again() -> None:
    stream = [snap(state="starting", health="loading", in_flight=1), snap(state="ready", health="ok"),
              snap(state="stopped", health="idle"), snap(state="ready", health="ok")]
    c = ScriptedClient([{"status": "loading", "loading": True}], [stream])
    seen = published(c, 1)
    assert [s.health for s in seen] == ["loading", "ok", "idle"]  # stopped reading at the quiet snapshot


def test_no_daemon_is_shown_as_down_and_a_broken_answer_as_broken() -> None:
    c = ScriptedClient([DaemonDown("refused"), DaemonError("bad_answer", "not JSON"), {"status": "idle"}], [])
    seen = published(c, 3)
    assert seen[0] == Link(DOWN, "refused") and seen[1] == Link(BROKEN, "not JSON") and seen[2].health == "idle"


def test_a_stopped_socket_unit_is_down_with_the_command_that_brings_it_back() -> None:
    seen: list[Any] = []
    hint = "hasrd.socket stopped: systemctl --user restart hasrd.socket"
    w = Watcher(ScriptedClient([DaemonDown("nothing listens")], []), seen.append, poll_sec=0.01,  # type: ignore
                asleep=lambda: False, hint=lambda: hint)
    w.step()
    assert seen == [Link(DOWN, "nothing listens", hint)]
    assert view(seen[0]).line == f"Daemon not running ({hint})"


def test_an_asleep_socket_activated_daemon_is_never_connected_to() -> None:
    c = ScriptedClient([], [])
    assert published(c, 3, asleep=True) == [Link(ASLEEP)] * 3 and c.connections == 0


def test_poke_cuts_the_wait_short() -> None:
    w = Watcher(ScriptedClient([], []), lambda _: None, poll_sec=30, asleep=lambda: True)  # type: ignore[arg-type]
    t = threading.Thread(target=w._wait)
    t.start()
    w.poke()
    t.join(2)
    assert not t.is_alive()


# --- the job queue ------------------------------------------------------------------------------------------------
class TranscribingClient:
    path = "/nonexistent/hasrd.sock"

    def transcribe(self, path: str, language: str, view: JobView, options: Any = None) -> Transcript:
        view.progress(1.0, 2.0)
        if path.endswith(".txt"):
            raise DaemonError("undecodable", f"{path!r} could not be decoded")
        return from_json(RESULT)


def run_jobs(paths: list[str], fmt: str = "txt") -> tuple[Jobs, list[tuple[str, str, bool]]]:
    notes: list[tuple[str, str, bool]] = []
    done = threading.Event()
    def notify(summary: str, body: str = "", error: bool = False) -> None:
        notes.append((summary, body, error))
        if len(notes) == len(paths):
            done.set()

    jobs = Jobs(TranscribingClient(), lambda: (fmt, ""), lambda j: None, notify, autostart=False)  # type: ignore
    jobs.add(paths)
    assert done.wait(10)
    return jobs, notes


def test_each_file_gets_a_transcript_and_a_notification_naming_it(tmp_path: Path) -> None:
    a, b = tmp_path / "会议 1.wav", tmp_path / "b.wav"
    a.write_bytes(b"x")
    b.write_bytes(b"x")
    jobs, notes = run_jobs([str(a), str(b)], "vtt")
    assert [j.state for j in jobs.jobs] == [DONE, DONE]
    assert notes[0] == ("hasr transcribed 会议 1.wav", f"Saved to {tmp_path / '会议 1.vtt'}\n今天天气很好。", False)
    assert jobs.last_output == tmp_path / "b.vtt"


def test_bad_files_fail_alone_with_a_reason(tmp_path: Path) -> None:
    txt = tmp_path / "notes.txt"
    txt.write_text("hi")
    jobs, notes = run_jobs([str(txt), str(tmp_path / "gone.wav"), str(tmp_path)])
    assert [j.state for j in jobs.jobs] == [FAILED] * 3
    assert [n[2] for n in notes] == [True] * 3
    assert notes[0][1] == "the file could not be decoded"
    assert "does not exist" in notes[1][1] and "folder" in notes[2][1]


def test_a_dropped_folder_is_walked_on_the_queues_thread_and_each_of_its_files_is_a_job(tmp_path: Path) -> None:
    """Issue 39 #7: a folder is the audio and video in it (not a text file). It is walked when its turn comes, on
    the queue's thread: on the window's, a big folder (every file's first bytes are read) froze the window."""
    from tests.daemon import write_wav

    folder = tmp_path / "talks"
    (folder / "day 2").mkdir(parents=True)
    wavs = [Path(write_wav(str(folder / "a.wav"))), Path(write_wav(str(folder / "day 2" / "b.wav")))]
    (folder / "notes.txt").write_text("not audio")
    seen: dict[Path, str] = {}
    done = threading.Event()
    jobs = Jobs(TranscribingClient(), lambda: ("txt", ""),  # type: ignore[arg-type]
                lambda j: seen.setdefault(j.path, threading.current_thread().name),
                lambda *note, **kw: done.set() if len(jobs.jobs) == 3 and jobs.pending() == 0 else None,
                autostart=False)
    assert [j.path for j in jobs.add([str(folder)])] == [folder]
    assert done.wait(10)
    assert [(j.path, j.state) for j in jobs.jobs] == [(folder, DONE), (wavs[0], DONE), (wavs[1], DONE)]
    assert seen[wavs[0]] == seen[wavs[1]] == "hasr-jobs" and all(w.with_suffix(".txt").exists() for w in wavs)


def test_progress_events_become_a_fraction_and_words() -> None:
    shown: list[tuple[str, float | None]] = []
    view = JobView(lambda detail, frac: shown.append((detail, frac)))
    view.progress(1, 4)
    view.loading("", 3.4)
    view.queued(2)
    assert shown[0] == ("transcribing 25%", 0.25)
    assert shown[1][0] == "loading models 3 s"
    assert shown[2][0] == "queued in the daemon (position 2)"


# --- packaging ----------------------------------------------------------------------------------------------------
def test_desktop_entries_start_the_tray_with_a_packaged_icon() -> None:
    import configparser

    root = Path(__file__).resolve().parent.parent / "packaging"
    for rel, exec_ in (("hasr-tray.desktop", "hasr-tray --show-window"), ("autostart/hasr-tray.desktop", "hasr-tray")):
        entry = configparser.ConfigParser(interpolation=None)
        entry.optionxform = str  # type: ignore[assignment,method-assign]
        entry.read(root / rel, encoding="utf-8")
        e = entry["Desktop Entry"]
        assert (e["Type"], e["Exec"], e["Icon"]) == ("Application", exec_, "hasr")
    assert (root / "icons" / "hicolor" / "scalable" / "apps" / "hasr.svg").is_file()
    assert (root / "icons" / "hicolor" / "48x48" / "apps" / "hasr.png").is_file()

"""``hasrctl listen --meeting`` against a real sound server: PulseAudio in a private runtime directory, a null sink
as the default output (what the others play into; its monitor is what meeting mode hears as "Others") and a
second null sink whose monitor is the default input (the "microphone"), espeak-ng voices played into each with
paplay, and the whisper engine on the CPU transcribing both sides; the saved .txt and .srt are read back. Also
the pure parts: names, file names, the merge by time."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from cliutil import REPO
from conftest import need, wait_until
from daemon import Hasrd, whisper_hasrd

from hasrctl.client import UsageError
from hasrctl.meeting import merge, speaker_names, targets
from hasrd import formats
from hasrd.transcript import TimedSentence, Transcript

OTHERS = ("The weather is nice today, and we are going to the park.", "en-us", {"weather", "park"})
YOU = ("Please send me the quarterly report before Friday morning.", "en+f3", {"quarterly", "report"})
BLEED_VOLUME = "30419"  # PulseAudio's cubic volume: (30419 / 65536) ** 3 = 0.1, the others' voice at -20 dB


@pytest.fixture(scope="module")
def voices(module_tmp: str) -> dict[str, str]:
    """The two sentences as espeak-ng wav files: "others" and "you"."""
    need(bool(shutil.which("espeak-ng")), "espeak-ng for the meeting's voices")
    out = {}
    for name, (text, voice, _words) in (("others", OTHERS), ("you", YOU)):
        out[name] = wav = str(Path(module_tmp) / f"{name}.wav")
        subprocess.run(["espeak-ng", "-v", voice, "-w", wav, text], check=True, capture_output=True)
    return out


@pytest.fixture(scope="module")
def sound(module_tmp: str) -> Iterator[dict[str, str]]:
    """The sound server's environment: the output "call" (default sink), the microphone "hasrmic.monitor"."""
    need(bool(shutil.which("pulseaudio") and shutil.which("paplay") and shutil.which("parec")),
         "PulseAudio (pulseaudio, pulseaudio-utils) for meeting mode")
    runtime = Path(module_tmp) / "xdg"
    runtime.mkdir(mode=0o700)
    env = {k: v for k, v in os.environ.items() if k != "PULSE_SERVER"}
    env.update(XDG_RUNTIME_DIR=str(runtime), PULSE_RUNTIME_PATH=str(runtime / "pulse"), HOME=module_tmp,
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    subprocess.run(["pulseaudio", "--daemonize=yes", "--exit-idle-time=-1", "-n", "--use-pid-file=yes",
                    "--load=module-native-protocol-unix", "--load=module-null-sink sink_name=call",
                    "--load=module-null-sink sink_name=hasrmic"], env=env, check=True, capture_output=True)
    try:
        wait_until(lambda: subprocess.run(["pactl", "info"], env=env, capture_output=True).returncode == 0,
                   timeout=60)
        subprocess.run(["pactl", "set-default-sink", "call"], env=env, check=True)
        subprocess.run(["pactl", "set-default-source", "hasrmic.monitor"], env=env, check=True)
        yield env
    finally:
        subprocess.run(["pulseaudio", "-k"], env=env, capture_output=True)


@pytest.fixture(scope="module")
def hasrd(module_tmp: str) -> Iterator[Hasrd]:
    """The whisper engine's daemon with its model loaded."""
    h = whisper_hasrd(os.path.join(module_tmp, "s"))
    try:
        with h.client(120) as c:
            assert c.post("/api/load").status_code == 200
        yield h
    finally:
        h.stop()


class Meeting:
    """``hasrctl listen --meeting`` running: its stdout and stderr lines as they come."""

    def __init__(self, env: dict[str, str], h: Hasrd, cwd: str, *args: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "hasrctl", "listen", "--meeting", "--socket", h.sock,
                                      "-l", "en", *args], env=env, cwd=cwd, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.out: list[str] = []
        self.err: list[str] = []
        for stream, lines in ((self.proc.stdout, self.out), (self.proc.stderr, self.err)):
            assert stream is not None
            threading.Thread(target=lambda s=stream, ls=lines: ls.extend(iter(s.readline, "")), daemon=True).start()
        # both sides record once it says so (the sound server has both streams, the first blocks arrived)
        assert wait_until(lambda: any("recording" in x for x in self.err) or self.proc.poll() is not None, 300)
        assert self.proc.poll() is None, self.err

    def said(self, name: str, words: set[str]) -> bool:
        return any(x.startswith(f"{name}: ") and words & set(re.findall(r"\w+", x.lower())) for x in self.out)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        assert self.proc.wait(300) == 0, (self.out, self.err)


def play(env: dict[str, str], *plays: tuple[str, str, str]) -> None:
    """paplay each (file, sink, volume) at once, and wait for all."""
    procs = [subprocess.Popen(["paplay", f"--device={sink}", f"--volume={volume}", path], env=env)
             for path, sink, volume in plays]
    assert [p.wait(120) for p in procs] == [0] * len(procs)


def lines_of(text: str, name: str) -> str:
    return " ".join(x for x in text.splitlines() if x.startswith(f"{name}: ")).lower()


def test_meeting_labels_the_microphone_you_and_the_desktop_output_others_and_not_their_bleed(
        sound: dict[str, str], voices: dict[str, str], hasrd: Hasrd, module_tmp: str) -> None:
    """The others' sentence plays into the output and, 20 dB quieter, into the microphone (speakers heard by
    the microphone); then the user's sentence into the microphone alone. -o NAME.txt saves NAME.txt and .srt."""
    m = Meeting(sound, hasrd, module_tmp, "-o", os.path.join(module_tmp, "call.txt"))
    play(sound, (voices["others"], "call", "65536"), (voices["others"], "hasrmic", BLEED_VOLUME))
    assert wait_until(lambda: m.said("Others", OTHERS[2]), 300), (m.out, m.err)
    play(sound, (voices["you"], "hasrmic", "65536"))
    assert wait_until(lambda: m.said("You", YOU[2]), 300), (m.out, m.err)
    m.stop()
    txt = Path(module_tmp, "call.txt").read_text()
    srt = Path(module_tmp, "call.srt").read_text()
    assert txt.startswith("Others: "), txt  # merged by time: the others spoke first
    for text in (txt, srt):
        others, you = lines_of(text, "Others"), lines_of(text, "You")
        assert OTHERS[2] & set(re.findall(r"\w+", others)), text
        assert YOU[2] & set(re.findall(r"\w+", you)), text
        assert not OTHERS[2] & set(re.findall(r"\w+", you)), text  # the bleed was not written as You
        assert not YOU[2] & set(re.findall(r"\w+", others)), text
    assert re.search(r"^\d\d:\d\d:\d\d,\d{3} --> ", srt, re.M), srt
    assert any(f"saved {os.path.join(module_tmp, 'call.txt')}" in x for x in m.err), m.err


def test_speaker_names_rename_the_sides_and_talking_at_once_keeps_both(
        sound: dict[str, str], voices: dict[str, str], hasrd: Hasrd, module_tmp: str) -> None:
    """Both sentences at the same time, no -o: ./meeting-YYYYmmdd-HHMMSS.txt and .srt, named on stderr."""
    cwd = Path(module_tmp) / "names"
    cwd.mkdir()
    m = Meeting(sound, hasrd, str(cwd), "--speaker-names", "Ann,Team")
    play(sound, (voices["others"], "call", "65536"), (voices["you"], "hasrmic", "65536"))
    assert wait_until(lambda: m.said("Team", OTHERS[2]) and m.said("Ann", YOU[2]), 300), (m.out, m.err)
    m.stop()
    txt, srt = sorted(cwd.glob("meeting-*.txt")), sorted(cwd.glob("meeting-*.srt"))
    assert len(txt) == len(srt) == 1 and re.fullmatch(r"meeting-\d{8}-\d{6}", txt[0].stem), list(cwd.iterdir())
    assert txt[0].stem == srt[0].stem and any(txt[0].name in x for x in m.err), m.err
    for text in (txt[0].read_text(), srt[0].read_text()):
        assert OTHERS[2] & set(re.findall(r"\w+", lines_of(text, "Team"))), text
        assert YOU[2] & set(re.findall(r"\w+", lines_of(text, "Ann"))), text
        assert "You: " not in text and "Others: " not in text, text


def test_meeting_without_a_sound_server_is_one_line_and_exit_1(short_tmp: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "PULSE_"))}
    env.update(XDG_RUNTIME_DIR=short_tmp, HOME=short_tmp, PULSE_SERVER=f"unix:{short_tmp}/none",
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    need(bool(shutil.which("pactl")), "pactl (pulseaudio-utils)")
    res = subprocess.run([sys.executable, "-m", "hasrctl", "listen", "--meeting", "--no-autostart", "--socket",
                          f"{short_tmp}/hasrd.sock"], env=env, cwd=short_tmp, capture_output=True, text=True)
    assert res.returncode == 1, res
    assert len(res.stderr.strip().splitlines()) == 1 and "no sound server answers" in res.stderr, res.stderr
    assert not list(Path(short_tmp).glob("meeting-*")), "nothing recorded, nothing saved"


def test_meeting_refuses_an_input_that_is_the_outputs_own_monitor_and_a_daemon_that_is_not_there(
        sound: dict[str, str], short_tmp: str) -> None:
    """A server without a microphone makes the output's monitor its default input: both sides would be the
    others. With a microphone, a daemon that does not answer is listen's exit 3, before anything records."""
    args = [sys.executable, "-m", "hasrctl", "listen", "--meeting", "--no-autostart", "--socket",
            f"{short_tmp}/hasrd.sock"]
    subprocess.run(["pactl", "set-default-source", "call.monitor"], env=sound, check=True)
    try:
        res = subprocess.run(args, env=sound, cwd=short_tmp, capture_output=True, text=True)
    finally:
        subprocess.run(["pactl", "set-default-source", "hasrmic.monitor"], env=sound, check=True)
    assert res.returncode == 1 and len(res.stderr.strip().splitlines()) == 1, res
    assert "call.monitor, the output's own monitor" in res.stderr and "--device" in res.stderr, res.stderr
    res = subprocess.run(args, env=sound, cwd=short_tmp, capture_output=True, text=True)
    assert res.returncode == 3 and len(res.stderr.strip().splitlines()) == 1, res
    assert not list(Path(short_tmp).glob("meeting-*"))


def test_meeting_options_that_do_not_fit_are_usage_errors(short_tmp: str) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for args, says in ((["--speaker-names", "Ann,Team"], "--meeting"), (["--meeting", "-f", "srt"], "-f"),
                       (["--meeting", "talk.flac"], "no FILE"), (["--meeting", "--speaker-names", "Ann"], "two")):
        res = subprocess.run([sys.executable, "-m", "hasrctl", "listen", *args], env=env, cwd=short_tmp,
                             capture_output=True, text=True)
        assert res.returncode == 2 and says in res.stderr, (args, res.stderr)


# ---- the pure parts ------------------------------------------------------------------------------------------


def test_speaker_names_are_the_microphones_then_the_outputs() -> None:
    assert speaker_names(None) == ("You", "Others")
    assert speaker_names(" Ann , Team ") == ("Ann", "Team")
    for bad in ("Ann", "Ann,Team,Bob", "Ann,", "Ann,Ann", "A," + "x" * 65):
        with pytest.raises(UsageError):
            speaker_names(bad)


def test_output_names_get_both_extensions_and_an_existing_file_is_refused_before_recording(short_tmp: str) -> None:
    now = datetime(2026, 3, 4, 5, 6, 7)
    base = Path(short_tmp)
    for given in ("notes", "notes.txt", "notes.srt", "notes.SRT"):
        assert targets(str(base / given), now) == (base / "notes.txt", base / "notes.srt")
    assert targets(str(base / "call.2026"), now) == (base / "call.2026.txt", base / "call.2026.srt")
    assert targets(None, now) == (Path("meeting-20260304-050607.txt"), Path("meeting-20260304-050607.srt"))
    (base / "notes.srt").write_text("kept")
    with pytest.raises(UsageError, match="exists"):
        targets(str(base / "notes"), now)
    with pytest.raises(UsageError, match="no such directory"):
        targets(str(base / "missing" / "notes"), now)


def test_the_sides_merge_by_start_time_and_render_as_speaker_turns_and_named_cues() -> None:
    you = Transcript(language="en", duration_s=9.0, per_sentence=[
        TimedSentence(text="Hello everyone.", start_s=0.5, end_s=1.5),
        TimedSentence(text="Thanks, bye.", start_s=6.0, end_s=7.0)])
    others = Transcript(language="en", duration_s=9.2, per_sentence=[
        TimedSentence(text="Hi there.", start_s=2.0, end_s=3.0), TimedSentence(text="How are you?", start_s=3.2,
                                                                               end_s=4.5),
        TimedSentence(text=" ", start_s=5.0, end_s=5.1)])
    doc = merge([("You", you), ("Others", others)])
    assert [(s.speaker, s.text) for s in doc.per_sentence] == [
        ("You", "Hello everyone."), ("Others", "Hi there."), ("Others", "How are you?"), ("You", "Thanks, bye.")]
    assert doc.final == "Hello everyone. Hi there. How are you? Thanks, bye."
    assert doc.duration_s == 9.2 and doc.speakers == ["You", "Others"] and doc.speaker_mode == "channels"
    assert formats.lines(doc) == "You: Hello everyone.\nOthers: Hi there. How are you?\nYou: Thanks, bye.\n"
    srt = formats.render(doc, formats.Format.SRT)
    assert "\nYou: Hello everyone.\n" in srt and "\nOthers: Hi there.\n" in srt, srt

"""A real microphone path: PulseAudio's null sink whose monitor is the default input, a file played into it with
paplay, and ``hasrctl listen`` (PortAudio through sounddevice, ALSA's pulse device) printing its sentences from
the whisper engine on the CPU."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import need, wait_until
from daemon import Hasrd, whisper_hasrd
from speech import CLIPS, error_rate

DATA = Path(__file__).parent / "data"


@pytest.fixture
def pulse(short_tmp: str) -> Iterator[dict[str, str]]:
    need(bool(shutil.which("pulseaudio") and shutil.which("paplay") and shutil.which("pactl")),
         "PulseAudio (pulseaudio, pulseaudio-utils) for the microphone test")
    runtime = Path(short_tmp) / "xdg"
    runtime.mkdir(mode=0o700)
    env = dict(os.environ, XDG_RUNTIME_DIR=str(runtime), PULSE_RUNTIME_PATH=str(runtime / "pulse"),
               HOME=str(Path(short_tmp)))
    subprocess.run(["pulseaudio", "--daemonize=yes", "--exit-idle-time=-1", "-n", "--use-pid-file=yes",
                    "--load=module-native-protocol-unix", "--load=module-null-sink sink_name=hasrmic"],
                   env=env, check=True, capture_output=True)
    try:
        wait_until(lambda: subprocess.run(["pactl", "info"], env=env, capture_output=True).returncode == 0,
                   timeout=60)
        subprocess.run(["pactl", "set-default-source", "hasrmic.monitor"], env=env, check=True)
        yield env
    finally:
        subprocess.run(["pulseaudio", "-k"], env=env, capture_output=True)


def recording(env: dict[str, str]) -> None:
    """Wait until a client records from the null sink's monitor (hasrctl has opened the microphone)."""
    def streams() -> bool:
        out = subprocess.run(["pactl", "list", "short", "source-outputs"], env=env, capture_output=True, text=True)
        return bool(out.stdout.strip())
    assert wait_until(streams, timeout=60), "hasrctl never opened the microphone"


def loaded_whisper(tmp: str) -> Hasrd:
    """The whisper engine's daemon with its model loaded (the microphone records from the first second)."""
    need(subprocess.run([sys.executable, "-c", "import sounddevice"], capture_output=True).returncode == 0,
         "sounddevice and libportaudio2 for the microphone")
    h = whisper_hasrd(os.path.join(tmp, "s"))
    with h.client(120) as c:
        assert c.post("/api/load").status_code == 200
    return h


def test_hasrctl_listen_prints_the_sentences_played_into_the_microphone(pulse: dict[str, str],
                                                                         short_tmp: str) -> None:
    h = loaded_whisper(short_tmp)
    try:
        listen = subprocess.Popen([sys.executable, "-m", "hasrctl", "listen", "--socket", h.sock, "-l", "en"],
                                  env=pulse, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        printed: list[str] = []
        stdout = listen.stdout
        assert stdout is not None
        reader = threading.Thread(target=lambda: printed.extend(iter(stdout.readline, "")), daemon=True)
        reader.start()
        recording(pulse)
        for name in ("en_quick_brown_fox", "en_hello_world"):
            subprocess.run(["paplay", "--device=hasrmic", str(DATA / f"{name}.flac")], env=pulse, check=True)
            time.sleep(1.0)  # a pause in the speech: the utterance ends (audio, not waiting)
        # Ctrl-C once the last sentence is printed: what was played has been heard, however slow the machine
        assert wait_until(lambda: len([x for x in printed if x.strip()]) >= 2, 300), printed  # a line each
        listen.send_signal(signal.SIGINT)
        _out, err = listen.communicate(timeout=300)
        reader.join(60)
    finally:
        h.stop()
    assert listen.returncode == 0, err
    lines = [x for x in printed if x.strip()]
    assert len(lines) >= 2, (printed, err)
    text = " ".join(lines)
    ref = CLIPS["en_quick_brown_fox"][1] + " " + CLIPS["en_hello_world"][1]
    assert error_rate("en", ref, text) <= 0.3, (text, err)


def test_dictate_types_each_final_sentence_and_toggle_stops_it(pulse: dict[str, str], short_tmp: str) -> None:
    """``hasrctl dictate`` with a recording stand-in for xdotool on PATH; ``dictate --toggle`` ends it."""
    bindir = Path(short_tmp) / "bin"
    bindir.mkdir()
    typed = Path(short_tmp) / "typed.txt"
    (bindir / "xdotool").write_text(f"#!/bin/sh\nprintf '%s\\n' \"$*\" >> {typed}\n")
    (bindir / "xdotool").chmod(0o755)
    env = dict(pulse, PATH=f"{bindir}:{pulse['PATH']}", DISPLAY=":77")
    env.pop("WAYLAND_DISPLAY", None)
    h = loaded_whisper(short_tmp)
    try:
        dictate = subprocess.Popen([sys.executable, "-m", "hasrctl", "dictate", "--socket", h.sock, "-l", "en"],
                                   env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        recording(pulse)
        again = subprocess.run([sys.executable, "-m", "hasrctl", "dictate", "--socket", h.sock], env=env,
                               capture_output=True, text=True)
        assert again.returncode == 1 and "already running" in again.stderr
        subprocess.run(["paplay", "--device=hasrmic", str(DATA / "en_hello_world.flac")], env=pulse, check=True)
        # toggle once the sentence was typed (the program's own record of it), however slow the machine
        assert wait_until(lambda: typed.exists() and typed.read_text().strip() != "", 300)
        toggle = subprocess.run([sys.executable, "-m", "hasrctl", "dictate", "--toggle"], env=env,
                                capture_output=True, text=True)
        assert toggle.returncode == 0 and "stopped" in toggle.stderr, toggle.stderr
        _out, err = dictate.communicate(timeout=300)
    finally:
        h.stop()
    assert dictate.returncode == 0, err
    lines = typed.read_text().splitlines()
    assert lines and all(x.startswith("type --clearmodifiers --delay 0 -- ") for x in lines), lines
    text = " ".join(x.split(" -- ", 1)[1] for x in lines)
    assert error_rate("en", CLIPS["en_hello_world"][1], text) <= 0.3, text

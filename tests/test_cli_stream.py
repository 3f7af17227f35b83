"""--stream in a real terminal (tmux): the screen shows the draft first, then the final sentences replace it."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import wave
from typing import Iterator

import pytest

from tests.cliutil import REPO, cli_env, hasrctl, show
from tests.daemon import Hasrd, write_wav


@pytest.fixture
def tmux(short_tmp: str) -> Iterator[list[str]]:
    """A private tmux server (its own socket), killed afterwards."""
    assert shutil.which("tmux"), "tmux is needed: apt-get install tmux"
    base = ["tmux", "-S", os.path.join(short_tmp, "tmux.sock")]
    yield base
    subprocess.run([*base, "kill-server"], capture_output=True)


def _screen(tmux: list[str]) -> str:
    res = subprocess.run([*tmux, "capture-pane", "-e", "-p", "-t", "cli"], capture_output=True, text=True)
    return res.stdout


def _run_in_tmux(tmux: list[str], env: dict[str, str], args: list[str], done_file: str,
                 width: int = 100, redirect: str = "") -> list[str]:
    """Start ``hasrctl ARGS`` in a tmux window and take screenshots until it has finished."""
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items() if k.startswith(("HASR_", "XDG_", "PYTHON")))
    cmd = (f"cd {shlex.quote(str(REPO))} && env {exports} {shlex.quote(sys.executable)} -m hasrctl "
           f"{' '.join(shlex.quote(a) for a in args)} {redirect}; echo \"rc=$?\" > {shlex.quote(done_file)}; "
           "sleep 30")
    subprocess.run([*tmux, "new-session", "-d", "-s", "cli", "-x", str(width), "-y", "20", cmd], check=True)
    shots: list[str] = []
    end = time.monotonic() + 60
    while time.monotonic() < end:
        shots.append(_screen(tmux))
        if os.path.exists(done_file) and open(done_file).read().strip():
            time.sleep(0.2)
            shots.append(_screen(tmux))
            return shots
        time.sleep(0.03)
    raise AssertionError("hasrctl did not finish; last screen:\n" + shots[-1])


def _split(screen: str) -> tuple[str, str]:
    """(final text, dimmed draft text) of the first screen line; tmux -e marks the dim draft with SGR 2."""
    line = screen.splitlines()[0] if screen.strip() else ""
    final, _, draft = line.partition("\x1b[2m")
    strip = lambda t: re.sub(r"\x1b\[[0-9;]*m", "", t)  # noqa: E731
    return strip(final), strip(draft)


def test_stream_shows_the_draft_before_the_final_text(tmux: list[str], short_tmp: str) -> None:
    wav = write_wav(os.path.join(short_tmp, "talk.wav"), 4.0)
    d = Hasrd(os.path.join(short_tmp, "s.sock"), env={"HASR_FAKE_RTF": "1.0"})
    try:
        env = cli_env(short_tmp, HASR_SOCKET=d.sock)
        shots = _run_in_tmux(tmux, env, ["transcribe", "--stream", wav], os.path.join(short_tmp, "done"))
    finally:
        assert d.stop() == 0
    states = [_split(s) for s in shots]
    assert states[-1] == ("今天天气很好。我们去公园散步", ""), shots[-1]  # only the final text stays
    assert "rc=" not in shots[-1]
    first_draft = next(i for i, (fin, dr) in enumerate(states) if dr and not fin)
    first_final = states.index(states[-1])
    assert first_draft < first_final
    # The draft grew on screen before any sentence was final ...
    assert any(dr.startswith("今天") and "很好" not in dr for fin, dr in states[:first_final] if not fin), states
    # ... and after the first sentence settled, the draft of the second one followed it on the same line.
    assert any(fin == "今天天气很好。" and dr.startswith("我们") for fin, dr in states[:first_final]), states


def test_stream_to_a_file_keeps_the_live_view_on_the_terminal(tmux: list[str], short_tmp: str) -> None:
    wav = write_wav(os.path.join(short_tmp, "talk.wav"), 2.0)
    out = os.path.join(short_tmp, "out.srt")
    d = Hasrd(os.path.join(short_tmp, "s.sock"), env={"HASR_FAKE_RTF": "1.0"})
    try:
        env = cli_env(short_tmp, HASR_SOCKET=d.sock)
        shots = _run_in_tmux(tmux, env, ["transcribe", "--stream", "-f", "srt", "-o", out, wav],
                             os.path.join(short_tmp, "done"))
    finally:
        assert d.stop() == 0
    assert any("今天" in s for s in shots[:-1])
    assert open(out).read().startswith("1\n00:00:00,000 --> ")
    assert open(os.path.join(short_tmp, "done")).read().strip() == "rc=0"


def test_progress_shows_on_a_terminal_while_stdout_goes_to_a_file(tmux: list[str], short_tmp: str) -> None:
    wav = write_wav(os.path.join(short_tmp, "talk.wav"), 3.0)
    out = os.path.join(short_tmp, "talk.txt")
    d = Hasrd(os.path.join(short_tmp, "s.sock"), env={"HASR_FAKE_RTF": "0.7"})
    try:
        env = cli_env(short_tmp, HASR_SOCKET=d.sock)
        shots = _run_in_tmux(tmux, env, ["transcribe", wav], os.path.join(short_tmp, "done"),
                             redirect=f"> {shlex.quote(out)}")
    finally:
        assert d.stop() == 0
    bars = [s for s in shots if "s audio" in s]
    assert bars and any("[#" in s and "/3.0 s audio" in s for s in bars), shots
    assert _split(shots[-1]) == ("", "")  # erased when done: the terminal is left clean
    assert open(out).read() == "今天天气很好。我们去公园散步\n"  # the file has the transcript alone


# --- the live view itself, driven with scripted events in a real terminal ------------------------------------------
LIVE = r"""
import json, subprocess, sys, time
from hasrctl.terminal import LiveView
tmux, events, shots, language = json.loads(sys.argv[1])
view = LiveView(sys.stdout, language)
n = 0
for ev in events:
    kind, args = ev[0], ev[1:]
    if kind == "shot":  # what tmux shows now, once the screen has settled
        last = None
        for _ in range(100):
            time.sleep(0.05)
            cur = subprocess.run([*tmux, "capture-pane", "-e", "-J", "-p", "-t", "cli"], capture_output=True,
                                 text=True).stdout
            if cur == last:
                break
            last = cur
        with open(f"{shots}/{n}", "w") as f:
            f.write(cur)
        n += 1
    else:
        getattr(view, kind)(*args)
"""


def _live(tmux: list[str], short_tmp: str, events: list[list[object]], language: str | None = None,
          width: int = 100) -> list[str]:
    """Feed ``events`` (["draft", text], ["sentence", i, text], ["finish", text], ["shot"]) to a LiveView on a
    tmux terminal ``width`` columns wide; the screens (logical lines, SGR kept) taken at each "shot"."""
    shots = os.path.join(short_tmp, "shots")
    os.makedirs(shots, exist_ok=True)
    arg = json.dumps([tmux, events, shots, language])
    done = os.path.join(short_tmp, "done")
    cmd = (f"cd {shlex.quote(str(REPO))} && {shlex.quote(sys.executable)} -c {shlex.quote(LIVE)} {shlex.quote(arg)}; "
           f"echo \"rc=$?\" > {shlex.quote(done)}; sleep 30")
    subprocess.run([*tmux, "new-session", "-d", "-s", "cli", "-x", str(width), "-y", "20", cmd], check=True)
    end = time.monotonic() + 60
    while not (os.path.exists(done) and open(done).read().strip()):
        assert time.monotonic() < end, "the live view script did not finish"
        time.sleep(0.05)
    assert open(done).read().strip() == "rc=0"
    return [open(os.path.join(shots, str(i))).read() for i in range(sum(1 for e in events if e[0] == "shot"))]


def _lines(screen: str) -> list[tuple[str, str]]:
    """(final, dimmed draft) of every non-empty logical line."""
    out = []
    for line in screen.splitlines():
        final, _, draft = line.partition("\x1b[2m")
        strip = lambda t: re.sub(r"\x1b\[[0-9;]*m", "", t).rstrip()  # noqa: E731
        if strip(final) or strip(draft):
            out.append((strip(final), strip(draft).lstrip()))  # the space before a draft may be dimmed too
    return out


def test_the_draft_of_a_later_segment_shows_after_the_final_sentences(tmux: list[str], short_tmp: str) -> None:
    # Long audio is drafted in segments, and a draft event carries the current segment's draft alone.
    shots = _live(tmux, short_tmp, [
        ["draft", "今天天气"], ["shot"],
        ["draft", "今天天气很好。我们"], ["sentence", 0, "今天天气很好。"], ["shot"],
        ["draft", "今天天气很好。我们去公园。"], ["sentence", 1, "我们去公园。"],
        ["draft", "明天"], ["shot"],  # the second segment begins
        ["draft", "明天下雨。后天"], ["sentence", 2, "明天下雨。"], ["shot"],
        ["finish", "今天天气很好。我们去公园。明天下雨。后天晴。"], ["shot"]])
    assert _lines(shots[0]) == [("", "今天天气")]
    assert _lines(shots[1]) == [("今天天气很好。", "我们")]
    assert _lines(shots[2]) == [("今天天气很好。我们去公园。", "明天")]
    assert _lines(shots[3]) == [("今天天气很好。我们去公园。明天下雨。", "后天")]
    assert _lines(shots[4]) == [("今天天气很好。我们去公园。明天下雨。后天晴。", "")]


def test_a_final_text_that_differs_from_the_stream_replaces_it_on_screen(tmux: list[str], short_tmp: str) -> None:
    # English sentences are joined with a space, as the daemon joins them; a differing final text is redrawn
    # in place over the streamed one (also across wrapped rows), never printed a second time.
    long = "This sentence is long enough to wrap over more than one row of this narrow terminal!"
    draft = "Hello world? The quick brown fox! jumps over"
    shots = _live(tmux, short_tmp, [
        ["sentence", 0, "Hello world?"], ["sentence", 1, " The quick brown fox!"], ["draft", draft], ["shot"],
        ["sentence", 2, long], ["draft", f"{draft} {long} the lazy dog"], ["shot"],
        ["finish", f"Hello, world? The quick brown fox! {long} The lazy dog."], ["shot"]], width=40)
    assert _lines(shots[0]) == [("Hello world? The quick brown fox!", "jumps over")]
    assert _lines(shots[1]) == [(f"Hello world? The quick brown fox! {long}", "the lazy dog")]
    assert _lines(shots[2]) == [(f"Hello, world? The quick brown fox! {long} The lazy dog.", "")]


def test_wide_characters_wrap_and_are_rewritten_in_place(tmux: list[str], short_tmp: str) -> None:
    zh = "天地玄黄宇宙洪荒。日月盈昃辰宿列张。寒来暑往秋收冬藏。"
    final = zh.replace("。", "，", 1)  # differs in the first row, which has wrapped out of the cursor's row
    shots = _live(tmux, short_tmp, [
        ["sentence", 0, zh[:9]], ["sentence", 1, zh[9:18]], ["draft", zh[:21]], ["shot"],
        ["finish", final], ["shot"]], language="Chinese", width=21)  # odd width: wide characters wrap early
    assert _lines(shots[0]) == [(zh[:18], zh[18:21])]
    assert _lines(shots[1]) == [(final, "")]


def test_english_speech_streams_exactly_the_final_text_once(tmux: list[str], short_tmp: str) -> None:
    """The reviewer's repro: three English clips with pauses, the whisper engine, ``--stream`` on a terminal."""
    import numpy as np

    from tests.speech import load, model_dir

    pcm = np.concatenate([x for n in ("en_hello_world", "en_quick_brown_fox", "en_espeak_park")
                          for x in (load(n), np.zeros(16000, np.float32))])
    wav = os.path.join(short_tmp, "en3.wav")
    with wave.open(wav, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes((pcm * 32767).astype("<i2").tobytes())
    d = Hasrd(os.path.join(short_tmp, "s.sock"), env={"HASR_ENGINE": "whisper", "HASR_FW_MODEL": model_dir(),
                                                       "HASR_FW_DEVICE": "cpu"})
    try:
        env = cli_env(short_tmp, HASR_SOCKET=d.sock)
        plain = hasrctl("transcribe", wav, env=env)
        assert plain.returncode == 0, show(plain)
        final = plain.stdout.strip()
        _run_in_tmux(tmux, env, ["transcribe", "--stream", wav], os.path.join(short_tmp, "done"))
        res = subprocess.run([*tmux, "capture-pane", "-J", "-p", "-t", "cli"], capture_output=True, text=True)
    finally:
        assert d.stop() == 0
    assert final.count(". ") >= 3, final  # several sentences, joined with spaces
    shown = [ln.rstrip() for ln in res.stdout.splitlines() if ln.strip()]
    assert shown[0] == final  # the live view left exactly the final text, once
    # then the stderr summary: no --language was given, so it says which language was heard and how surely
    assert len(shown) == 2 and "ok, 11.2 s of audio" in shown[1] and "English (detected, p=" in shown[1], shown


def test_a_labelled_segment_rebases_the_live_view_where_guessing_would_not() -> None:
    import io

    from hasrctl.terminal import LiveView

    out = io.StringIO()
    view = LiveView(out, "Chinese")
    view.draft("你好。", 0)
    view.sentence(0, "你好。")
    # The next segment's first draft is longer and shares no prefix: a guess from the text alone would keep
    # counting final sentences from the first segment and hide this draft's first sentence.
    view.draft("我们明天见。再见朋友们一起来吧", 1)
    assert view.base == 1 and view.segment == 1
    assert "我们明天见" in view._tail()


def test_listen_shows_the_live_draft_dimmed_then_the_final_sentences(tmux: list[str], short_tmp: str) -> None:
    """``hasrctl listen FILE --realtime`` in a terminal: a file played as if live through /v1/realtime."""
    d = Hasrd(os.path.join(short_tmp, "s.sock"))
    try:
        env = cli_env(short_tmp, HASR_SOCKET=d.sock)
        clip = str(REPO / "tests" / "data" / "zh_jishu.flac")
        shots = _run_in_tmux(tmux, env, ["listen", "--realtime", "-l", "zh", clip], os.path.join(short_tmp, "done"))
    finally:
        assert d.stop() == 0
    states = [_split(s) for s in shots]
    assert open(os.path.join(short_tmp, "done")).read().strip() == "rc=0"
    assert states[-1] == ("今天天气很好。我们去公园散步", ""), shots[-1]
    first_final = next(i for i, (fin, _dr) in enumerate(states) if fin.startswith("今天"))
    assert any(dr.startswith("今") and not fin for fin, dr in states[:first_final]), states
    assert not any("loading" in s for s in shots[first_final:]), "the loading line was left on the screen"

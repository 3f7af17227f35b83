"""--stream and listen in a real terminal (tmux): what the program wrote, and what the screen holds at the end.

Nothing here depends on a screenshot catching a moment: the terminal stream is recorded from its first byte
(tmux pipe-pane) and read after the program has exited, so "a dim draft was written before the final text"
is a fact about the stream, however slowly a busy machine ran it. The end of the run is a marker the shell
writes into the same stream (a window title, invisible), so the recording and the screen are complete when
it is read. The final screen is taken with its scrollback: a draft pushed out of the window stays there.
"""

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
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.cliutil import REPO, cli_env, hasrctl, show
from tests.daemon import Hasrd, write_wav

LIMIT = 600.0  # seconds: only a hung program runs into this (the machine may be very busy)
END = re.compile(r"\x1b\]2;hasr-end-(\d+)\x07")


@pytest.fixture
def tmux(short_tmp: str) -> Iterator[list[str]]:
    """A private tmux server (its own socket), killed afterwards."""
    assert shutil.which("tmux"), "tmux is needed: apt-get install tmux"
    base = ["tmux", "-S", os.path.join(short_tmp, "tmux.sock")]
    yield base
    subprocess.run([*base, "kill-server"], capture_output=True)


def _capture(tmux: list[str], *flags: str) -> str:
    return subprocess.run([*tmux, "capture-pane", "-e", "-J", "-p", *flags, "-t", "cli"], capture_output=True,
                          text=True).stdout


class Term:
    """``hasrctl ARGS`` in a tmux window ``width`` columns wide, its output recorded from the first byte."""

    def __init__(self, tmux: list[str], short_tmp: str, env: dict[str, str], args: list[str], width: int = 100,
                 redirect: str = "", tag: str = "cli") -> None:
        self.tmux = tmux
        self.record = os.path.join(short_tmp, f"{tag}.rec")
        go = os.path.join(short_tmp, f"{tag}.go")
        script = os.path.join(short_tmp, f"{tag}.sh")
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()
                           if k.startswith(("HASR_", "XDG_", "PYTHON", "NO_COLOR")))
        with open(script, "w") as f:  # the program starts once the recording runs; the title marks its end
            f.write(f"while [ ! -e {shlex.quote(go)} ]; do sleep 0.02; done\n"
                    f"cd {shlex.quote(str(REPO))}\n"
                    f"env {exports} {shlex.quote(sys.executable)} -m hasrctl "
                    f"{' '.join(shlex.quote(a) for a in args)} {redirect}\n"
                    "printf '\\033]2;hasr-end-%d\\007' $?\nexec sleep 3600\n")
        subprocess.run([*tmux, "new-session", "-d", "-s", "cli", "-x", str(width), "-y", "20", f"sh {script}"],
                       check=True)
        subprocess.run([*tmux, "pipe-pane", "-o", "-t", "cli", f"cat > {shlex.quote(self.record)}"], check=True)
        self._until(lambda: os.path.exists(self.record), "the recording did not start")
        open(go, "w").close()

    def _until(self, pred: Callable[[], object], what: str) -> None:
        end = time.monotonic() + LIMIT
        while not pred():
            assert time.monotonic() < end, f"{what}; the screen:\n{_capture(self.tmux)}"
            time.sleep(0.05)

    def stream(self) -> str:
        with open(self.record, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def screen(self) -> str:
        """The window now, without its scrollback (SGR kept, wrapped rows joined)."""
        return _capture(self.tmux)

    def wait(self) -> int:
        """Wait for the program to exit; its exit code."""
        self._until(lambda: END.search(self.stream()), "hasrctl did not finish")
        m = END.search(self.stream())
        assert m
        return int(m.group(1))

    def final_lines(self) -> list[str]:
        """The non-empty lines of the whole screen, scrollback included (SGR kept), once the program ended."""
        return [ln.rstrip() for ln in _capture(self.tmux, "-S", "-").splitlines() if _plain(ln).strip()]


def _plain(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def runs(stream: str) -> list[tuple[bool, str]]:
    """The text of a recorded terminal stream in the order written: runs of printable characters, each with
    whether it was written dimmed (SGR 2). A run ends at any cursor movement or erase; SGR changes only split
    it where the dimness changes (the live view dims each new draft piece on its own)."""
    out: list[tuple[bool, str]] = []
    dim, cur, pos = False, "", 0

    def flush() -> None:
        nonlocal cur
        if cur:
            out.append((dim, cur))
        cur = ""

    for m in re.finditer(r"\x1b\[([0-9;?]*)([A-Za-z])|\x1b\][^\x07]*\x07|[\r\n\x07\x08]", stream):
        cur += stream[pos:m.start()]
        pos = m.end()
        if m.group(2) == "m":
            new = dim
            for param in (m.group(1) or "0").split(";"):
                new = True if param == "2" else False if param in ("", "0", "22") else new
            if new != dim:
                flush()
                dim = new
        else:
            flush()
    cur += stream[pos:]
    flush()
    return out


def first(items: list[tuple[bool, str]], dim: bool, text: str, after: int = -1) -> int:
    """The index of the first run after ``after`` written dim (or not) that contains ``text``; -1 if none."""
    return next((i for i, (d, t) in enumerate(items) if i > after and d == dim and text in t), -1)


def dimmed(items: list[tuple[bool, str]], start: int, stop: int) -> str:
    """All that was written dimmed between two runs (the draft grows a piece at a time, each piece dimmed,
    and the status row below it is redrawn in between)."""
    return "".join(t for d, t in items[max(0, start):stop] if d)


def no_dim_left(lines: list[str]) -> None:
    assert not any("\x1b[2m" in ln for ln in lines), f"a dimmed draft stayed on the screen: {lines}"


# --- the live view itself, driven with scripted events in a real terminal ------------------------------------------
LIVE = r"""
import json, subprocess, sys, time
from hasrctl.liveview import LiveView
tmux, events, shots, language = json.loads(sys.argv[1])
view = LiveView(sys.stdout, language)
n = 0
for ev in events:
    kind, args = ev[0], ev[1:]
    if kind == "shot":  # what tmux shows once it has read everything written so far: a title set after it
        sys.stdout.write(f"\x1b]2;shot-{n}\x07")
        sys.stdout.flush()
        end = time.monotonic() + 600
        while subprocess.run([*tmux, "display", "-p", "-t", "cli", "#{pane_title}"], capture_output=True,
                             text=True).stdout.strip() != f"shot-{n}":
            assert time.monotonic() < end, "tmux never read the output"
            time.sleep(0.02)
        cur = subprocess.run([*tmux, "capture-pane", "-e", "-J", "-p", "-t", "cli"], capture_output=True,
                             text=True).stdout
        with open(f"{shots}/{n}", "w") as f:
            f.write(cur)
        n += 1
    else:
        getattr(view, kind)(*args)
"""


def _live(tmux: list[str], short_tmp: str, events: list[list[object]], language: str | None = None,
          width: int = 100) -> list[str]:
    """Feed ``events`` (["draft", text], ["sentence", i, text], ["finish", text], ["shot"]) to a LiveView on a
    tmux terminal ``width`` columns wide; the screens (logical lines, SGR kept) taken at each "shot", each once
    tmux has read everything the view wrote before it."""
    shots = os.path.join(short_tmp, "shots")
    os.makedirs(shots, exist_ok=True)
    arg = json.dumps([tmux, events, shots, language])
    done = os.path.join(short_tmp, "done")
    cmd = (f"cd {shlex.quote(str(REPO))} && {shlex.quote(sys.executable)} -c {shlex.quote(LIVE)} {shlex.quote(arg)}; "
           f"echo \"rc=$?\" > {shlex.quote(done)}; sleep 3600")
    subprocess.run([*tmux, "new-session", "-d", "-s", "cli", "-x", str(width), "-y", "20", cmd], check=True)
    end = time.monotonic() + LIMIT
    while not (os.path.exists(done) and Path(done).read_text().strip()):
        assert time.monotonic() < end, "the live view script did not finish"
        time.sleep(0.05)
    assert Path(done).read_text().strip() == "rc=0"
    return [Path(shots, str(i)).read_text() for i in range(sum(1 for e in events if e[0] == "shot"))]


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


def test_a_labelled_segment_rebases_the_live_view_where_guessing_would_not() -> None:
    import io

    from hasrctl.liveview import LiveView

    out = io.StringIO()
    view = LiveView(out, "Chinese")
    view.draft("你好。", 0)
    view.sentence(0, "你好。")
    # The next segment's first draft is longer and shares no prefix: a guess from the text alone would keep
    # counting final sentences from the first segment and hide this draft's first sentence.
    view.draft("我们明天见。再见朋友们一起来吧", 1)
    assert view.base == 1 and view.segment == 1
    assert "我们明天见" in view._tail()


def test_the_progress_line_says_what_runs_before_the_first_words() -> None:
    """Issue 32 #1: the line sat at "0% 0.0/121.0 s" while the VAD and the language vote ran."""
    import io

    from hasrctl.terminal import ProgressBar

    out = io.StringIO()
    bar = ProgressBar(out, "talk.wav")
    bar.progress(0.0, 121.0, "finding_speech")
    bar.progress(0.0, 121.0, "detecting_language")  # at once, though not 50 ms later: the phase changed
    bar.progress(30.0, 121.0)
    shown = [line for line in out.getvalue().split("\r") if line]
    assert [line.split()[1:3] for line in shown] == [["finding", "speech"], ["detecting", "language"],
                                                     ["transcribing", "25%"]]


def test_listen_keeps_the_status_and_the_draft_of_a_finished_utterance_off_the_screen() -> None:
    import io

    from hasrctl.liveview import LiveView

    out = io.StringIO()
    view = LiveView(out, "English", "hasrctl:")
    view.loading("loading models", 0.0)
    assert view.status.startswith("loading: loading models")
    view.draft("Hello wor", 0)
    assert view.status == "" and view._tail() == "Hello wor"  # text came: the model is loaded
    view.sentence(0, "Hello world.", 0)
    view.done(0)
    view.draft("Hello world and", 0)  # a late draft of the utterance just completed
    assert view._tail() == ""
    view.draft("The quick", 1)
    assert view._tail() == " The quick"
    view.finish(None)
    assert (view.drawn_text, view.drawn_tail) == ("Hello world.", "")  # no draft, no status row
    said = out.getvalue()
    view.abort()
    view.loading("late", 1.0)
    assert out.getvalue() == said  # after the end nothing more is drawn: the screen below is not the view's


# --- whole runs: hasrctl in a terminal against a real daemon -----------------------------------------------------


def _wav(path: str, pcm: np.ndarray) -> str:
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes((pcm * 32767).astype("<i2").tobytes())
    return path


def _speech(short_tmp: str, names: list[str], name: str = "speech.wav") -> str:
    from tests.speech import load

    return _wav(os.path.join(short_tmp, name),
                np.concatenate([x for n in names for x in (load(n), np.zeros(16000, np.float32))]))


def _fw_env() -> dict[str, str]:
    from tests.speech import model_dir

    return {"HASR_FW_MODEL": model_dir(), "HASR_FW_DEVICE": "cpu"}


def test_stream_shows_the_progress_and_the_draft_before_the_final_text(tmux: list[str], short_tmp: str) -> None:
    wav = write_wav(os.path.join(short_tmp, "talk.wav"), 4.0)
    d = Hasrd(os.path.join(short_tmp, "s.sock"), env={"HASR_FAKE_RTF": "1.0"})
    try:
        t = Term(tmux, short_tmp, cli_env(short_tmp, HASR_SOCKET=d.sock), ["transcribe", "--stream", "-l", "zh", wav])
        assert t.wait() == 0
        lines = t.final_lines()
    finally:
        assert d.stop() == 0
    w = runs(t.stream())
    first_final = first(w, False, "今天天气很好。")
    assert first(w, False, "s audio") >= 0, w  # the progress line was drawn ...
    assert first_final > 0 and "今天" in dimmed(w, 0, first_final), w  # ... the draft, dimmed, before the sentence
    assert "我们" in dimmed(w, first_final, first(w, False, "我们去公园散步")), w  # ... and then the next one
    # only the final text stays, a sentence a line (issue 32 #2), then the summary line
    assert [_plain(ln) for ln in lines[:2]] == ["今天天气很好。", "我们去公园散步"], lines
    assert len(lines) == 3 and lines[2].startswith("hasrctl: ") and "s of audio" in lines[2], lines
    no_dim_left(lines)


def test_stream_to_a_file_keeps_the_live_view_on_the_terminal(tmux: list[str], short_tmp: str) -> None:
    wav = write_wav(os.path.join(short_tmp, "talk.wav"), 2.0)
    out = os.path.join(short_tmp, "out.srt")
    d = Hasrd(os.path.join(short_tmp, "s.sock"), env={"HASR_FAKE_RTF": "1.0"})
    try:
        t = Term(tmux, short_tmp, cli_env(short_tmp, HASR_SOCKET=d.sock),
                 ["transcribe", "--stream", "-f", "srt", "-o", out, wav])
        assert t.wait() == 0
        lines = t.final_lines()
    finally:
        assert d.stop() == 0
    w = runs(t.stream())
    assert "今天" in dimmed(w, 0, len(w)), w
    assert Path(out).read_text().startswith("1\n00:00:00,000 --> ")
    no_dim_left(lines)


def test_progress_shows_on_a_terminal_while_stdout_goes_to_a_file(tmux: list[str], short_tmp: str) -> None:
    wav = write_wav(os.path.join(short_tmp, "talk.wav"), 3.0)
    out = os.path.join(short_tmp, "talk.txt")
    d = Hasrd(os.path.join(short_tmp, "s.sock"), env={"HASR_FAKE_RTF": "0.7"})
    try:
        t = Term(tmux, short_tmp, cli_env(short_tmp, HASR_SOCKET=d.sock), ["transcribe", wav],
                 redirect=f"> {shlex.quote(out)}")
        assert t.wait() == 0
        lines = t.final_lines()
    finally:
        assert d.stop() == 0
    assert any("[#" in text and "/3.0 s audio" in text for _dim, text in runs(t.stream())), t.stream()
    # the progress line is erased when done: only the summary line is left (issue 32 #8: every file says it)
    assert len(lines) == 1 and lines[0].startswith("hasrctl: ") and "3.0 s of audio" in lines[0], lines
    assert Path(out).read_text().splitlines() == ["今天天气很好。", "我们去公园散步"]  # the transcript alone


def test_stream_with_the_whisper_engine_shows_progress_and_sentences_while_the_job_runs(
        tmux: list[str], short_tmp: str) -> None:
    """The default CPU engine drafts nothing: the terminal shows the progress line at once and each sentence
    as its batch is decoded, while the job is still running (the daemon says so), not all at the end."""
    from tests.daemon import client

    names = ["en_hello_world", "en_quick_brown_fox", "en_espeak_park"] * 3  # ~34 s: more than one batch
    wav = _speech(short_tmp, names + names)
    out = os.path.join(short_tmp, "out.json")
    d = Hasrd(os.path.join(short_tmp, "s.sock"), env={"HASR_ENGINE": "whisper", **_fw_env()})
    try:
        t = Term(tmux, short_tmp, cli_env(short_tmp, HASR_SOCKET=d.sock),
                 ["transcribe", "--stream", "-l", "en", "-f", "verbose_json", "-o", out, wav])
        seen_running = False
        with client(d.sock, 60) as c:
            while not END.search(t.stream()):
                shown = "Hello world" in _plain(t.screen())
                if shown and c.get("/api/ps").json()["running"]:  # on screen now, and the job not done
                    seen_running = True
                    break
                time.sleep(0.05)
        assert t.wait() == 0
        lines = t.final_lines()
    finally:
        assert d.stop() == 0
    assert seen_running, "no sentence was on screen while the job ran"
    w = runs(t.stream())
    assert 0 <= first(w, False, "transcribing") < first(w, False, "Hello world"), w  # progress came first
    result = json.loads(Path(out).read_text())["hasr"]
    final = result["final"]
    words = re.sub(r"[^\w\s]", "", final.lower())  # "Hello, world!" counts: whisper's marks vary with the clip
    assert words.count("hello world") >= 5, final  # the whole file, six times the same words
    # the final text, once, a sentence a line (issue 32 #2), then the summary (-o) and nothing else
    assert [_plain(ln) for ln in lines[:-1]] == [s["text"] for s in result["per_sentence"]], lines
    assert lines[-1].startswith("hasrctl: ") and "s of audio" in lines[-1], lines
    no_dim_left(lines)


def test_english_speech_streams_exactly_the_final_text_once(tmux: list[str], short_tmp: str) -> None:
    """The reviewer's repro: three English clips with pauses, the whisper engine, ``--stream`` on a terminal."""
    wav = _speech(short_tmp, ["en_hello_world", "en_quick_brown_fox", "en_espeak_park"], "en3.wav")
    d = Hasrd(os.path.join(short_tmp, "s.sock"), env={"HASR_ENGINE": "whisper", **_fw_env()})
    try:
        env = cli_env(short_tmp, HASR_SOCKET=d.sock)
        plain = hasrctl("transcribe", "-f", "verbose_json", wav, env=env, timeout=LIMIT)
        assert plain.returncode == 0, show(plain)
        final = json.loads(plain.stdout)["text"]
        sentences = [s["text"] for s in json.loads(plain.stdout)["hasr"]["per_sentence"]]
        t = Term(tmux, short_tmp, env, ["transcribe", "--stream", wav])
        assert t.wait() == 0
        shown = [_plain(ln) for ln in t.final_lines()]
    finally:
        assert d.stop() == 0
    assert final.count(". ") >= 3, final  # several sentences, joined with spaces
    assert shown[:-1] == sentences  # the live view left exactly the final text, once, a sentence a line
    # then the stderr summary: no --language was given, so it says which language was heard and how surely
    assert "ok, 11.2 s of audio" in shown[-1] and "English (detected, p=" in shown[-1], shown


def test_stream_with_the_hybrid_engine_shows_its_draft_then_the_final_text(tmux: list[str], short_tmp: str) -> None:
    wav = _speech(short_tmp, ["zh_nihao_shijie", "zh_jishu", "zh_pangrama"])
    out = os.path.join(short_tmp, "out.json")
    d = Hasrd(os.path.join(short_tmp, "s.sock"), env={"HASR_ENGINE": "hybrid", "HASR_DRAFT": "scripted",
                                                       **_fw_env()})
    try:
        t = Term(tmux, short_tmp, cli_env(short_tmp, HASR_SOCKET=d.sock),
                 ["transcribe", "--stream", "-l", "zh", "-f", "verbose_json", "-o", out, wav])
        assert t.wait() == 0
        lines = t.final_lines()
    finally:
        assert d.stop() == 0
    result = json.loads(Path(out).read_text())["hasr"]
    w = runs(t.stream())
    first_final = first(w, False, result["per_sentence"][0]["text"].strip())
    assert first_final > 0 and "今天" in dimmed(w, 0, first_final), w  # the scripted draft, dimmed, first
    assert first(w, False, "s audio") >= 0, w
    # a sentence a line (issue 32 #2), then the summary (-o), nothing else
    assert [_plain(ln) for ln in lines[:-1]] == [s["text"] for s in result["per_sentence"]], lines
    assert lines[-1].startswith("hasrctl: ") and "s of audio" in lines[-1], lines
    no_dim_left(lines)


def test_listen_shows_the_live_draft_dimmed_then_the_final_sentences(tmux: list[str], short_tmp: str) -> None:
    """``hasrctl listen FILE --realtime`` in a terminal: a file played as if live through /v1/realtime. The
    view starts on the window's first row, where an erase to the end of the screen erases the whole screen and
    tmux keeps that screen in the scrollback: a dimmed draft stayed above the final text there."""
    d = Hasrd(os.path.join(short_tmp, "s.sock"))
    try:
        clip = str(REPO / "tests" / "data" / "zh_jishu.flac")
        t = Term(tmux, short_tmp, cli_env(short_tmp, HASR_SOCKET=d.sock), ["listen", "--realtime", "-l", "zh", clip])
        assert t.wait() == 0
        lines = t.final_lines()
    finally:
        assert d.stop() == 0
    w = runs(t.stream())
    first_final = first(w, False, "今天")
    assert first_final > 0 and "今" in dimmed(w, 0, first_final), w  # the draft, dimmed, before the final text
    assert first(w, False, "loading", first_final) == -1, w  # the loading line went when text came
    assert [_plain(ln) for ln in lines] == ["今天天气很好。我们去公园散步"], lines  # scrollback included
    no_dim_left(lines)

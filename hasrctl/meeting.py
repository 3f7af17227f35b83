"""``hasrctl listen --meeting``: the microphone ("You") and what the desktop plays ("Others": the monitor of the
default output) recorded as two sides, each its own live session on the daemon's /v1/realtime (no daemon change:
a session per side is what ``hasrctl listen`` already runs), shown live with the side's name, and saved as .txt
(speaker turns) and .srt (the name before each cue's text) when stopped.

The sides' final sentences are merged by start time: both sessions are sent one 100 ms block each at a time, so
their clocks agree (hasrctl/soundserver.py pads a side that falls behind). The microphone's blocks pass the bleed
rule first (hasrctl/bleed.py), so the others' voices from the speakers are not written again as "You". What a
side's session said as it went is kept, so a session that breaks, or a second Ctrl-C while the last sentences
are awaited, still leaves a transcript (timed by arrival) rather than nothing.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec

from hasrctl import output
from hasrctl.bleed import BleedGate
from hasrctl.client import EXIT_FAILED, EXIT_OK, CliError, UsageError
from hasrctl.common import say
from hasrctl.livesession import Said, Session, interruptible
from hasrctl.meetingview import MeetingView
from hasrctl.soundserver import Recorder, Sources, find_sources, paired
from hasrctl.terminal import is_tty
from hasrctl.transcribe import Event
from hasrd.transcript import TimedSentence, Transcript

NAMES = ("You", "Others")  # the microphone's side, the desktop output's side
SUFFIXES = (".txt", ".srt")


def speaker_names(raw: str | None) -> tuple[str, str]:
    """--speaker-names "Ann,Team": the microphone's name, then the desktop output's."""
    if raw is None:
        return NAMES
    names = [n.strip() for n in raw.split(",")]
    if len(names) != 2 or not all(names) or any(len(n) > 64 for n in names) or names[0] == names[1]:
        raise UsageError(f"--speaker-names {raw!r}: two different names of 1-64 characters, comma separated: the "
                         f"microphone's, then the desktop output's (e.g. \"Ann,Team\")")
    return names[0], names[1]


def targets(out: str | None, now: datetime) -> tuple[Path, Path]:
    """Where the .txt and .srt go: ``-o PATH`` gives PATH.txt and PATH.srt (a .txt or .srt on PATH is taken
    off first: ``-o notes.srt`` writes notes.srt and notes.txt), no -o ./meeting-YYYYmmdd-HHMMSS.*; refused before
    recording (UsageError) when one exists or its directory cannot be written."""
    stamp = f"meeting-{now:%Y%m%d-%H%M%S}"
    path = Path(stamp if out is None else out).expanduser()
    base = path.with_suffix("") if path.suffix.lower() in SUFFIXES else path
    txt, srt = (base.with_name(base.name + s) for s in SUFFIXES)
    for target in (txt, srt):
        if os.path.lexists(target):  # listen has no --force: check_free's advice would not do
            raise UsageError(f"{target} exists: name another with -o (a meeting's transcript never replaces a file)")
        output.check_free(target, force=True)  # its directory exists and can be written
    return txt, srt


def merge(sides: Sequence[tuple[str, Transcript]]) -> Transcript:
    """One transcript of both sides: every sentence with its side's name as ``speaker``, in order of start time
    (a side's own order where two start together)."""
    from hasrd.formats import DeltaJoiner

    said = sorted(((name, s) for name, doc in sides for s in doc.per_sentence if s.text.strip()),
                  key=lambda pair: (pair[1].start_s, pair[1].end_s))
    joiner = DeltaJoiner()
    for _name, s in said:
        joiner.add(s.text)
    known = [doc for _name, doc in sides]
    durations = [d.duration_s for d in known if d.duration_s is not None]
    return Transcript(engine=next((d.engine for d in known if d.engine), ""),
                      language=next((d.language for d in known if d.language), ""), final=joiner.text,
                      per_sentence=[msgspec.structs.replace(s, speaker=name) for name, s in said],
                      duration_s=max(durations) if durations else None, live=True, speaker_mode="channels",
                      speakers=list(dict.fromkeys(name for name, _s in said)))


def save(doc: Transcript, txt: Path, srt: Path) -> list[Path]:
    """The transcript as ``txt`` (speaker turns) and ``srt`` (names before the lines), said on stderr; one that
    cannot be written there is kept in hasrctl.output.kept_dir() (a meeting is not recorded twice)."""
    from hasrd.formats import Format, lines, render

    written = []
    for target, text in ((txt, lines(doc)), (srt, render(doc, Format.SRT))):
        try:
            output.write(target, text, force=False)
            written.append(target)
        except (OSError, CliError) as e:
            why = e.message if isinstance(e, CliError) else str(e)
            try:
                kept = output.keep(target, text)
            except OSError as e2:
                raise CliError(f"{target} could not be written ({why}), nor kept in {output.kept_dir()} "
                               f"({e2})", EXIT_FAILED) from None
            say(f"{target} could not be written ({why}); it is in {kept}")
            written.append(kept)
    say(f"saved {written[0]} and {written[1]}")
    return written


class Side:
    """One side: its name, its live session, and its final sentences as they came (timed by arrival)."""

    def __init__(self, name: str, view: MeetingView, clock: Callable[[], float]) -> None:
        self.name, self.view, self.clock = name, view, clock
        self.session: Session | None = None
        self.heard: list[TimedSentence] = []
        self.result: dict[str, Any] | None = None

    def open(self, path: str, language: str, prompt: str, silence_ms: int,
             on_status: Callable[[Event], None]) -> None:
        self.session = Session(path, language, prompt, silence_ms, self._sentence,
                               lambda text, item: self.view.draft(self.name, text), on_status,
                               lambda item: self.view.done(self.name))

    def _sentence(self, ev: Event) -> None:
        at = round(self.clock(), 3)
        self.heard.append(TimedSentence(text=ev.text or "", start_s=at, end_s=at))
        self.view.sentence(self.name, ev.text or "")

    def finish(self) -> None:
        if self.session is not None:
            self.result = self.session.finish()

    def close(self) -> None:
        """Leave without waiting for anything (the other side's session could not open)."""
        if self.session is not None:
            self.session.ws.close()

    def transcript(self) -> Transcript:
        """The session's result, or what it said as it went where no result came."""
        if self.result is not None:
            from hasrd.transcript import from_json

            try:
                return from_json(self.result)
            except ValueError as e:  # a daemon of another version
                say(str(e))
        return Transcript(per_sentence=list(self.heard), live=True)


def _record(sides: Sequence[Side], sources: Sources, stop: threading.Event, started: list[float],
            running: Callable[[], None]) -> str | None:
    """Record both sides into their sessions until ``stop`` or a failure; why it failed, or None."""
    recorders: list[Recorder] = []
    try:
        recorders.append(Recorder(sources.microphone, sides[0].name))
        recorders.append(Recorder(sources.monitor, sides[1].name))
        gate = BleedGate()
        for mic, monitor in paired(recorders[0], recorders[1], stop, running):
            pair = gate.push(mic, monitor)
            if pair is not None and not _send(sides, pair, started):
                return None  # a session ended: its reader said why
        last = gate.flush()
        if last is not None:
            _send(sides, last, started)
    except CliError as e:
        return e.message
    finally:
        for rec in recorders:
            rec.close()
    return None


def _send(sides: Sequence[Side], pair: tuple[bytes, bytes], started: list[float]) -> bool:
    if not started:
        started.append(time.monotonic())
    return all(side.session is not None and side.session.send(block) for side, block in zip(sides, pair, strict=True))


def _finish(sides: Sequence[Side]) -> None:
    """Both sessions' last sentences, awaited side by side."""
    threads = [threading.Thread(target=side.finish, name="hasr-meeting-finish", daemon=True) for side in sides]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def record(out: str | None, names_raw: str | None, language: str, prompt: str, silence_ms: int,
           device: str | None, daemon: Any) -> int:
    """The whole meeting: checks, recording, the last sentences, the files."""
    names = speaker_names(names_raw)
    txt, srt = targets(out, datetime.now())
    sources = find_sources(device)
    path = daemon.client().path
    stop = threading.Event()
    interruptible(stop)
    view = MeetingView(sys.stdout, is_tty(sys.stdout))
    said = Said()
    seen: set[tuple[str, str | None, int | None]] = set()  # both sessions report the same phases: said once

    def status(ev: Event) -> None:
        if not view.live:
            key = (ev.type, ev.phase, ev.position)
            if key not in seen:
                seen.add(key)
                said.status(ev)
        elif ev.type == "hasr.loading":
            view.loading(ev.phase or "")
        else:
            view.queued(ev.position or 0)

    started: list[float] = []
    sides = [Side(name, view, lambda: time.monotonic() - (started[0] if started else time.monotonic()))
             for name in names]
    try:
        for side in sides:
            side.open(path, language, prompt, silence_ms, status)
    except BaseException:
        for side in sides:
            side.close()
        raise
    try:
        failure = _record(sides, sources, stop, started, lambda: say(
            f"recording {sources.microphone} as {names[0]} and {sources.monitor} as {names[1]}; Ctrl-C stops and "
            f"saves {txt} and {srt}"))
        stop.set()
        _finish(sides)
    except KeyboardInterrupt:  # a second Ctrl-C: no waiting for the last sentences, but what was said is saved
        view.finish()
        save(merge([(side.name, side.transcript()) for side in sides]), txt, srt)
        raise
    finally:
        view.finish()
    save(merge([(side.name, side.transcript()) for side in sides]), txt, srt)
    if any(side.session is not None and side.session.broken for side in sides):
        raise BrokenPipeError
    lost = [side for side in sides if side.result is None]
    if failure or lost:
        session = lost[0].session if lost else None
        raise CliError(failure or (session.error if session else None) or
                       f"{lost[0].name}'s live session ended without a result", EXIT_FAILED)
    return EXIT_OK

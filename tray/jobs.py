"""The tray's transcription queue: files in, transcripts next to them, a notification for each.

One worker thread takes the files in order (one at a time: a dropped folder's files come back in order), so a file
shows ``queued`` until its turn, then ``running`` with progress, then ``done`` (naming the transcript) or
``failed`` (with the daemon's sentence). ``on_change`` is called from that thread after every change. With the
drop window's Speakers toggle on, a file is transcribed with ``speakers="auto"``: its transcript (and the
notification's preview) comes in speaker turns, ``A: …`` a line.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hasrctl.terminal import View
from hasrd import formats
from hasrd.options import Options
from hasrd.transcript import Transcript
from tray import output
from tray.client import Client, DaemonDown, DaemonError, start_daemon

log = logging.getLogger("hasr.tray.jobs")

QUEUED, RUNNING, DONE, FAILED = "queued", "running", "done", "failed"
Notify = Callable[..., Any]


@dataclass
class Job:
    id: int
    path: Path
    state: str = QUEUED
    progress: float | None = None
    detail: str = "waiting"
    output: Path | None = None
    started: float = field(default_factory=time.monotonic)


class JobView(View):
    """A job's progress as a short line and a fraction (or None) of its row, from the /transcribe events."""

    def __init__(self, show: Callable[[str, float | None], None]) -> None:
        self.show = show

    def queued(self, position: int) -> None:
        self.show(f"queued in the daemon (position {position})", None)

    def loading(self, phase: str, elapsed: float | None) -> None:
        self.show(f"loading models {elapsed or 0:.0f} s", None)

    def progress(self, done: float, total: float, phase: str = "decoding") -> None:
        if not total:
            return self.show("transcribing", None)
        frac = max(0.0, min(1.0, done / total))
        self.show(f"transcribing {int(frac * 100)}%", frac)

    def draft(self, text: str, segment: int | None = None) -> None:
        self.show("transcribing", None)

    def sentence(self, index: int, text: str) -> None:
        self.show("transcribing", None)


class Jobs:
    """Queue of files to transcribe through ``client``; ``settings()`` gives the current (format, language) and
    ``speakers()`` whether the drop window's Speakers toggle is on, both read when a file's turn comes."""

    def __init__(self, client: Client, settings: Callable[[], tuple[str, str]],
                 on_change: Callable[[Job], None], notify: Notify, autostart: bool = True,
                 speakers: Callable[[], bool] = lambda: False) -> None:
        self.client, self.settings, self.on_change, self.notify = client, settings, on_change, notify
        self.autostart, self.speakers = autostart, speakers
        self.jobs: list[Job] = []
        self.last_output: Path | None = None
        self._ids = itertools.count(1)
        self._queue: queue.Queue[Job | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="hasr-jobs", daemon=True)
        self._thread.start()

    def add(self, paths: list[str]) -> list[Job]:
        """Queue files (absolute or relative paths, in order; a folder: the audio and video in it, found when
        its turn comes: :meth:`_folder`); returns their jobs."""
        new = [self._new(Path(p).expanduser().absolute()) for p in paths]
        for job in new:
            self._queue.put(job)
        return new

    def _new(self, path: Path) -> Job:
        job = Job(next(self._ids), path)
        self.jobs.append(job)
        self.on_change(job)
        return job

    def pending(self) -> int:
        return sum(1 for j in self.jobs if j.state in (QUEUED, RUNNING))

    def close(self) -> None:
        self._queue.put(None)

    def _update(self, job: Job, **changes: Any) -> None:
        for k, v in changes.items():
            setattr(job, k, v)
        self.on_change(job)

    def _transcribe(self, job: Job, language: str, options: Options | None) -> Transcript:
        def show(detail: str, frac: float | None) -> None:
            self._update(job, detail=detail, progress=frac if frac is not None else job.progress)

        view = JobView(show)
        try:
            return self.client.transcribe(str(job.path), language, view, options)
        except DaemonDown:
            if not self.autostart:
                raise
        self._update(job, detail="starting the daemon")
        start_daemon(self.client.path)  # returns once it answers (DaemonDown with the reason otherwise)
        return self.client.transcribe(str(job.path), language, view, options)

    def _fail(self, job: Job, message: str) -> None:
        self._update(job, state=FAILED, detail=message)
        self.notify(f"hasr could not transcribe {job.path.name}", message, error=True)

    def _folder(self, job: Job) -> None:
        """A dropped folder: the audio and video in it, each a job of its own, run now in order. Found here, on
        this thread: walking a big folder reads the first bytes of every file, and would freeze the window."""
        from hasrctl.batch.inputs import media_in

        self._update(job, state=RUNNING, detail="looking for audio and video in it")
        files = [self._new(Path(f)) for f in media_in(str(job.path))]
        if not files:
            return self._fail(job, f"the folder {job.path.name} holds no audio or video files")
        self._update(job, state=DONE, progress=1.0, detail=f"{len(files)} file(s)")
        for f in files:
            self._guarded(f)

    def _one(self, job: Job) -> None:
        if job.path.is_dir():
            return self._folder(job)
        fmt, language = self.settings()
        # Speakers on: the voices told apart (the daemon's installed speaker model; none installed fails the row
        # with the daemon's one line on how to get one) and the transcript in speaker turns
        options = Options(speakers="auto") if self.speakers() else None
        self._update(job, state=RUNNING, detail="sending to the daemon", progress=0.0)
        if not job.path.exists():
            return self._fail(job, f"{job.path} does not exist")
        try:
            result = self._transcribe(job, language, options)
            out = output.write_next_to(job.path, output.render(result, fmt), fmt)
        except DaemonDown as e:
            return self._fail(job, f"the hasr daemon is not running ({e})")
        except DaemonError as e:  # the daemon quotes the path; the row and the summary already name the file
            return self._fail(job, e.message.replace(repr(str(job.path)), "the file"))
        except output.OutputError as e:
            return self._fail(job, str(e))
        self.last_output = out
        self._update(job, state=DONE, progress=1.0, output=out, detail=f"→ {out.name}")
        text = (formats.speaker_text(result) or result.final).strip()  # "A: …" a line where speakers were asked
        preview = text if len(text) <= 120 else text[:119] + "…"
        self.notify(f"hasr transcribed {job.path.name}", f"Saved to {out}" + (f"\n{preview}" if preview else ""))

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            self._guarded(job)

    def _guarded(self, job: Job) -> None:
        try:
            self._one(job)
        except Exception as e:  # a bug in one job must not stop the queue
            log.exception("job %s failed unexpectedly", job.path)
            self._fail(job, f"internal error: {e}")

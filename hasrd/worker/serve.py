"""The jobs a worker holds: each file, request and live session in its own thread, its texts through the
request's script, its failure its own (a failed request never ends the worker).

Every text leaves through one boundary, whatever the engine and for files and live sessions alike: the
request's :class:`hasrd.zhscript.Scripter` writes Chinese in the script its language tag (or HASR_ZH_SCRIPT)
asks for, with Chinese punctuation, in the draft, sentence and turn events and in the result, which records
``script``.

Each job thread binds its request as a :class:`hasrd.worker.batcher.JobTag`: its model steps meet the other
jobs' in the worker's decode loop (live sessions first, files round robin), and leave it when it is cancelled.
"""

from __future__ import annotations

import functools
import mmap
import os
import queue
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from hasrd import protocol as p
from hasrd import zhscript
from hasrd.config import Settings
from hasrd.worker import batcher
from hasrd.worker.channel import Channel, Inbox
from hasrd.worker.engine import EngineError, NullEmitter

if TYPE_CHECKING:
    import numpy as np

    from hasrd.transcript import Transcript
    from hasrd.worker.engine import Engine
    from hasrd.worker.live import LiveBase

SHORT_FRAMES = 30 * 16000
"""A job of at most one whisper window of audio is short: its steps go ahead of long files' (batchpolicy)."""


class ScriptEmitter(NullEmitter):
    """A job's emitter where nobody watches its events (``hasrctl batch``): only the language an engine heard
    counts, for the script of its result."""

    def __init__(self, script: zhscript.Scripter) -> None:
        self.script = script

    def language(self, code: str) -> None:
        """An engine heard this language (no language was asked): the script follows it from now on."""
        self.script.detected(code)


class SocketEmitter(ScriptEmitter):
    """An engine's events as protocol messages on the worker's channel; their texts pass through the request's
    script first."""

    def __init__(self, ch: Channel, req_id: int, script: zhscript.Scripter) -> None:
        super().__init__(script)
        self.ch = ch
        self.id = req_id
        self._last_progress = 0.0
        self._last_done = -1.0
        self._last_phase: p.Phase = "decoding"

    def progress(self, done_s: float, total_s: float, phase: p.Phase = "decoding") -> None:
        """At most ~20 events a second, except a step of 1 % or more or a new phase: segments decoded in a batch
        arrive in a burst, and the burst's last position must not be the one dropped."""
        now = time.monotonic()
        if (now - self._last_progress >= 0.05 or done_s >= total_s or phase != self._last_phase
                or done_s - self._last_done >= max(0.01 * total_s, 1e-9)):
            self._last_progress, self._last_done, self._last_phase = now, done_s, phase
            self.ch.send(p.Progress(id=self.id, done_s=done_s, total_s=total_s, phase=phase))

    def draft(self, text: str, segment: int = 0) -> None:
        self.ch.send(p.Draft(id=self.id, text=self.script.text(text), segment=segment))

    def sentence(self, index: int, text: str, engine: str, start_s: float, end_s: float,
                 segment: int = 0, speaker: str = "") -> None:
        self.ch.send(p.Sentence(id=self.id, index=index, text=self.script.sentence(text, segment), engine=engine,
                                start_s=start_s, end_s=end_s, segment=segment, speaker=speaker))

    def turn(self, segment: int, kind: p.TurnKind, start_s: float = 0.0, end_s: float = 0.0, text: str = "") -> None:
        if kind == "completed":
            text = self.script.turn_text(segment, text)
        self.ch.send(p.Turn(id=self.id, segment=segment, kind=kind, start_s=start_s, end_s=end_s, text=text))


def read_pcm(ch: Channel, req: p.Transcribe) -> np.ndarray:
    """Map the request's PCM (memfd or 0600 file) read-only; returns a float32 numpy view ([frames, channels] when
    the request keeps its channels)."""
    pcm = _mapped(ch, req, req.frames * max(1, req.channels))
    return pcm.reshape(req.frames, req.channels) if req.channels > 1 else pcm


def _mapped(ch: Channel, req: p.Transcribe, count: int) -> np.ndarray:
    import numpy as np

    nbytes = count * 4
    if req.pcm == "fd":
        fd = ch.take_fd()
        try:
            if nbytes == 0:
                return np.zeros(0, dtype=np.float32)
            m = mmap.mmap(fd, nbytes, prot=mmap.PROT_READ)
        finally:
            os.close(fd)
    else:
        with open(req.pcm, "rb") as f:
            if nbytes == 0:
                return np.zeros(0, dtype=np.float32)
            m = mmap.mmap(f.fileno(), nbytes, prot=mmap.PROT_READ)
    return np.frombuffer(m, dtype=np.float32, count=count)


def load_settings() -> Settings:
    """The worker's settings (the daemon's environment and config.toml, as the engines read them); the daemon
    already refused bad values, so a failure here falls back to the defaults with a word on stderr."""
    from hasrd import config

    try:
        return config.load()
    except (config.ConfigError, OSError, ValueError) as e:
        print(f"hasr worker: {e}; using default settings", file=sys.stderr, flush=True)
        return config.Settings()


def scripter(req_language: str, settings: Settings) -> zhscript.Scripter:
    """The request's script: its tag, else HASR_LANGUAGE (the engines' default too), and HASR_ZH_SCRIPT."""
    return zhscript.Scripter(req_language or settings.language, settings.zh_script)


def fail_of(req_id: int, e: BaseException) -> p.Failed:
    """A request's failure as the message the daemon gets (one bad request never ends the worker)."""
    if isinstance(e, EngineError):
        return p.Failed(id=req_id, code=e.code, message=e.message)
    if isinstance(e, MemoryError):
        return p.Failed(id=req_id, code="out_of_memory", message="the worker ran out of memory")
    code = "out_of_memory" if "out of memory" in str(e).lower() else "runtime_failure"
    return p.Failed(id=req_id, code=code, message=f"{type(e).__name__}: {e}")


class Jobs:
    """The jobs this worker holds, each in its own thread (files and requests: :meth:`serve_one`; live sessions:
    :meth:`serve_live`); the daemon decides how many (HASR_WORKER_PARALLEL) and the decode loop batches them."""

    def __init__(self, ch: Channel, engine: Engine, settings: Settings) -> None:
        self.ch, self.engine, self.settings = ch, engine, settings
        self.threads: dict[int, threading.Thread] = {}

    def start(self, msg: p.Transcribe | p.LiveStart) -> None:
        self.threads = {k: t for k, t in self.threads.items() if t.is_alive()}
        if isinstance(msg, p.Transcribe):
            t = threading.Thread(target=self.serve_one, args=(msg,), name=f"hasr-job-{msg.id}", daemon=True)
        else:
            inbox = self.ch.sessions.setdefault(msg.id, queue.Queue())
            t = threading.Thread(target=self.serve_live, args=(msg, inbox), name=f"hasr-live-{msg.id}", daemon=True)
        self.threads[msg.id] = t
        t.start()

    def join(self, timeout: float) -> None:
        """Give running jobs ``timeout`` seconds in all to end (at shutdown they see it as a cancel)."""
        deadline = time.monotonic() + timeout
        for t in list(self.threads.values()):
            t.join(max(0.0, deadline - time.monotonic()))

    def serve_one(self, req: p.Transcribe) -> None:
        """One file or request, in its own thread; its model steps are batched with the other jobs' (its tag)."""
        ch = self.ch
        script = scripter(req.language, self.settings)
        try:
            pcm = read_pcm(ch, req)
        except (OSError, ValueError) as e:
            ch.send(p.Failed(id=req.id, code="invalid_audio", message=f"could not read the PCM: {e}"))
            return
        cancelled = functools.partial(ch.cancelled_or_shut, req.id)
        try:
            emit = SocketEmitter(ch, req.id, script)
            with batcher.bound(batcher.JobTag(req.id, cancelled=cancelled, short=req.frames <= SHORT_FRAMES)):
                result = self._transcribe(pcm, req, emit, cancelled)
            ch.send(p.Result(id=req.id, result=script.result(result)))
        except Exception as e:  # one bad request never ends the worker
            ch.send(fail_of(req.id, e))
        finally:
            ch.cancelled.discard(req.id)

    def _transcribe(self, pcm: np.ndarray, req: p.Transcribe, emit: SocketEmitter,
                    cancelled: Callable[[], bool]) -> Transcript:
        """The engine's transcription, through the speakers stage when the request asks who spoke."""
        match req.options.speakers:
            case None:
                return self.engine.transcribe(pcm, req.language, req.options, emit, cancelled)
            case "channels":
                from hasrd.worker import speakers

                if pcm.ndim != 2:
                    raise EngineError("invalid_speakers", "speakers=channels needs the audio's channels")
                return speakers.by_channel(self.engine, pcm, req.language, req.options, emit, cancelled)
            case _:
                from hasrd.worker import speakers

                return speakers.by_voice(self.engine, pcm, req.language, req.options, emit, cancelled)

    def serve_live(self, req: p.LiveStart, inbox: Inbox) -> None:
        """One live session, in its own thread: audio is fed as it arrives in the session's ``inbox`` (the
        reader thread routes its frames there); everything queued behind a slow step is fed as one piece. Its
        model steps go ahead of files' in the decode loop (a live tag)."""
        import numpy as np

        ch = self.ch
        script = scripter(req.language, self.settings)
        cancelled = functools.partial(ch.cancelled_or_shut, req.id)
        session: LiveBase | None = None
        try:
            with batcher.bound(batcher.JobTag(req.id, live=True, cancelled=cancelled)):
                session = self.engine.live(req.language, req.options, SocketEmitter(ch, req.id, script), cancelled)
                held: list[p.DaemonMsg] = []  # taken from the inbox while coalescing audio, handled next in order
                while True:
                    try:
                        msg = held.pop(0) if held else inbox.get(timeout=0.1)
                    except queue.Empty:
                        if cancelled():
                            session.check()
                        session.poll()
                        continue
                    match msg:
                        case p.LiveAudio():
                            parts = [msg.pcm]
                            while not held:  # coalesce: audio that waited while we decoded is one step, not a queue
                                try:
                                    nxt = inbox.get_nowait()
                                except queue.Empty:
                                    break
                                if isinstance(nxt, p.LiveAudio):
                                    parts.append(nxt.pcm)
                                else:
                                    held.append(nxt)
                            # a commit or the end queued right behind this audio goes ahead of its drafts (issue 31 #4)
                            ends = bool(held) and isinstance(held[0], (p.LiveCommit, p.LiveEnd))
                            session.feed(np.frombuffer(b"".join(parts), dtype="<f4").astype(np.float32), hurry=ends)
                        case p.LiveCommit():
                            session.commit()
                        case p.LiveEnd():
                            ch.send(p.Result(id=req.id, result=script.result(session.finish())))
                            return
        except Exception as e:
            if session is not None:
                session.abort()
            ch.send(fail_of(req.id, e))
        finally:
            ch.cancelled.discard(req.id)
            ch.sessions.pop(req.id, None)

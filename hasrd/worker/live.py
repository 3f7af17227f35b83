"""Live sessions in the worker: audio arrives while it is transcribed (protocol 2, ``LiveStart`` .. ``LiveEnd``).

A session cuts the stream into *utterances* with a streaming voice-activity detector (:class:`StreamingVad`):
speech opens one (``Turn started``), a pause of ``silence_ms`` closes it (``Turn stopped``), its final sentences
follow, and ``Turn completed`` says that all of them are out. An utterance longer than ``MAX_UTTERANCE_S`` is
closed where it stands and a new one opened at once (a hard reset: R2T2 re-feeds an utterance's whole audio on
every chunk, and faster-whisper's window is 30 s). ``commit()`` (the client's ``input_audio_buffer.commit``)
closes the open utterance now, ``finish()`` closes it and waits for every final.

Between utterances nothing is decoded: silence costs only the VAD. :class:`LiveBase` owns that bookkeeping;
an engine's session (live_whisper.py: faster-whisper with local agreement; live_draft.py: R2T2 with v2c)
implements what happens inside an utterance. Audio that arrives while a decode runs waits in the worker's
inbox and is fed as one piece (serve.py coalesces it), so a slow step never builds a queue of steps: the lag
stays bounded by one step.
"""

from __future__ import annotations

import abc
import bisect
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal

import msgspec
import numpy as np
from msgspec import UnsetType

from hasrd.options import Options
from hasrd.transcript import UNSET, TimedSentence, Timings, Transcript, TurnRecord
from hasrd.worker.engine import EngineError, LiveEmitter

if TYPE_CHECKING:
    from faster_whisper.vad import SileroVADModel

SR = 16000
FRAME = 512  # Silero's window at 16 kHz (32 ms)
CONTEXT = 64  # the samples of the previous window Silero sees with each one
MAX_UTTERANCE_S = 60  # then a hard reset (see the module docstring)
VadKind = Literal["silero", "energy"]  # energy: a window is speech above -40 dBFS (no faster-whisper, or tests)


class Knobs(msgspec.Struct, kw_only=True):
    """A live session's settings: ``silence_ms`` (a pause that ends an utterance; the only one a request's Options
    carry), and the VAD and live_whisper's final beam, which tests set."""

    silence_ms: Annotated[int, msgspec.Meta(ge=100, le=10000)] = 500
    vad: VadKind = "silero"
    final_beam: Annotated[int, msgspec.Meta(ge=0, le=10)] = 0  # 0: the beam decode made at the pause

    @classmethod
    def of(cls, options: Options | Mapping[str, Any]) -> Knobs:
        """A request's Options (its ``silence_ms``), or a mapping of these fields (tests drive sessions directly)."""
        raw = msgspec.to_builtins(options) if isinstance(options, Options) else options
        try:
            return msgspec.convert(raw, cls, strict=False)
        except msgspec.ValidationError as e:
            raise EngineError("invalid_audio", f"live session settings: {e}") from None


class Audio:
    """The session's audio with absolute sample positions; the front is dropped once nothing needs it."""

    def __init__(self) -> None:
        self.data = np.zeros(1 << 16, dtype=np.float32)
        self.start = 0  # absolute position of data[0]
        self.n = 0  # valid samples in data
        self.lock = threading.Lock()  # v2c's final-stage thread reads windows while audio arrives

    @property
    def end(self) -> int:
        return self.start + self.n

    def __len__(self) -> int:  # FinalStage clamps windows to the audio's length (absolute)
        return self.end

    def append(self, pcm: np.ndarray) -> None:
        with self.lock:
            self._append(pcm)

    def _append(self, pcm: np.ndarray) -> None:
        if self.n + len(pcm) > len(self.data):
            grown = np.zeros(max(2 * len(self.data), self.n + len(pcm)), dtype=np.float32)
            grown[:self.n] = self.data[:self.n]
            self.data = grown
        self.data[self.n:self.n + len(pcm)] = pcm
        self.n += len(pcm)

    def __getitem__(self, s: slice) -> np.ndarray:
        with self.lock:
            a = max(self.start, s.start if s.start is not None else self.start)
            b = min(self.end, s.stop if s.stop is not None else self.end)
            if b <= a:
                return np.zeros(0, dtype=np.float32)
            return self.data[a - self.start:b - self.start].copy()

    def trim(self, keep_from: int) -> None:
        """Forget audio before ``keep_from`` (absolute); compacts only when that frees at least half."""
        with self.lock:
            drop = min(max(0, keep_from - self.start), self.n)
            if drop and drop * 2 >= self.n:
                self.data[:self.n - drop] = self.data[drop:self.n]
                self.n -= drop
                self.start += drop


class StreamingVad:
    """Speech start and end positions as audio arrives.

    Silero (faster-whisper's bundled ONNX model) scores each 512-sample window with the previous window's last
    64 samples as context, so scoring the new windows (plus the last one, for its context) gives the scores a
    whole-file pass would, up to the rounding of ONNX's batch sizes (an end may move by one window). Without
    faster-whisper, or with ``kind="energy"``, a window is speech when its level is above -40 dBFS. Speech starts
    at the first speech window; it ends after ``silence_ms`` of windows below the lower threshold (hysteresis), at
    the first of them.
    """

    def __init__(self, kind: VadKind = "silero", silence_ms: int = 500, threshold: float = 0.5) -> None:
        self.model: SileroVADModel | None = None
        if kind == "silero":
            try:
                from faster_whisper.vad import get_vad_model
            except ImportError:
                kind = "energy"
            else:
                self.model = get_vad_model()
        self.threshold = threshold
        self.low = max(threshold - 0.15, 0.01)
        self.silence = max(1, int(silence_ms * SR / 1000 / FRAME))
        self.pending = np.zeros(0, dtype=np.float32)
        self.prev = np.zeros(FRAME, dtype=np.float32)
        self.pos = 0  # absolute position of the next window
        self.speaking = False
        self.quiet = 0  # consecutive non-speech windows while speaking
        self.quiet_from = 0

    def scores(self, windows: np.ndarray) -> np.ndarray:
        if self.model is None:
            rms = np.sqrt(np.mean(windows.astype(np.float64) ** 2, axis=1) + 1e-12)
            return (20 * np.log10(rms) > -40.0).astype(np.float32)
        batch = np.concatenate([self.prev, windows.reshape(-1)])
        out = np.asarray(self.model(batch, num_samples=FRAME, context_size_samples=CONTEXT)).reshape(-1)
        return out[1:]

    def feed(self, pcm: np.ndarray) -> list[tuple[str, int]]:
        """-> [("start" | "end", absolute sample position)] in order."""
        self.pending = np.concatenate([self.pending, pcm]) if len(self.pending) else np.asarray(pcm, np.float32)
        k = len(self.pending) // FRAME
        if k == 0:
            return []
        windows = self.pending[:k * FRAME].reshape(k, FRAME)
        self.pending = self.pending[k * FRAME:].copy()
        probs = self.scores(windows)
        self.prev = windows[-1].copy()
        events: list[tuple[str, int]] = []
        for i, prob in enumerate(probs):
            at = self.pos + i * FRAME
            if not self.speaking:
                if prob >= self.threshold:
                    self.speaking, self.quiet = True, 0
                    events.append(("start", at))
            elif prob < self.low:
                if self.quiet == 0:
                    self.quiet_from = at
                self.quiet += 1
                if self.quiet >= self.silence:
                    self.speaking = False
                    events.append(("end", self.quiet_from))
            elif prob >= self.threshold:
                self.quiet = 0
        self.pos += k * FRAME
        return events


class LiveBase(abc.ABC):
    """Utterance bookkeeping shared by the engines' live sessions; see the module docstring.

    Subclasses implement ``_opened(seg, start)``, ``_advance(upto)`` (decode what arrived inside the open
    utterance), ``_closed(seg, end)`` (emit its finals, or hand them to a thread) and may override ``_poll()``
    (announce utterances whose finals are all out), ``_drain()`` (wait for every final) and ``_done_to()``.
    """

    PRE_ROLL = int(0.4 * SR)  # audio kept before the VAD's start: the onset (as the file path's VAD pads 400 ms)

    def __init__(self, emit: LiveEmitter, cancelled: Callable[[], bool], options: Options | Mapping[str, Any]) -> None:
        self.emit = emit
        self.cancelled = cancelled
        self.knobs = Knobs.of(options)
        self.vad = StreamingVad(self.knobs.vad, self.knobs.silence_ms)
        self.audio = Audio()
        self.open: int | None = None  # the open utterance's number
        self.open_start = 0
        self.onset = 0  # where the VAD heard the open utterance's speech start (open_start is before it)
        self.last_end = 0  # where the last utterance ended (the next one's pre-roll stops there)
        self.segments = 0
        self.index = 0  # next sentence index (session-wide)
        self.sentences: list[TimedSentence] = []
        self.turns: list[TurnRecord] = []  # per utterance, indexed by its number
        self.turn_starts: list[float] = []  # their start times (ascending): which utterance a time is in
        self.said: dict[int, list[str]] = {}  # final texts of utterances not yet completed
        self.first_text_s: float | None = None  # audio fed when the first text (draft or final) went out
        self.hurry = False  # the audio being fed is followed by a commit or the end (see feed)
        self.t0 = time.monotonic()

    # ---- the session's API (serve.py) -------------------------------------------------------------------

    def feed(self, pcm: np.ndarray, *, hurry: bool = False) -> None:
        """Take ``pcm``; ``hurry``: the end of the utterance follows at once (a commit or the session's end is
        queued behind this audio), so no draft is decoded for it: the end's one decode of the whole utterance
        starts sooner (issue 31 #4). Engines whose drafts must see every piece of audio (R2T2) ignore it."""
        self.check()
        self.hurry = hurry
        self.audio.append(pcm)
        for kind, at in self.vad.feed(pcm):
            if kind == "start" and self.open is None:
                self._open(max(self.last_end, at - self.PRE_ROLL), onset=at)
            elif kind == "end" and self.open is not None:
                self._close(at)
        if self.open is not None:
            if self.audio.end - self.open_start >= MAX_UTTERANCE_S * SR:
                self._close(self.audio.end)  # the hard reset: speech goes on in a new utterance
                self._open(self.audio.end)
            else:
                self._advance(self.audio.end)
        self._poll()
        self.audio.trim(self._keep_from())
        self.emit.progress(round(self._done_to() / SR, 3), round(self.audio.end / SR, 3))

    def commit(self) -> None:
        """End the open utterance now (the client said so); speech that goes on opens the next one."""
        self.check()
        if self.open is not None:
            self._close(self.audio.end)
            self.vad.speaking, self.vad.quiet = False, 0  # its next speech window is a start, not more of this
        self._poll()

    def finish(self) -> Transcript:
        self.commit()
        self._drain()
        self._poll()
        end_s = round(self.audio.end / SR, 3)
        self.emit.progress(end_s, end_s)
        return self.result()

    def poll(self) -> None:
        """Called while no audio arrives: finals that a thread settled go out."""
        self._poll()

    def abort(self) -> None:  # noqa: B027 - an optional hook: nothing to stop unless the engine has a thread
        """The session ends without a result (cancel, shutdown, error)."""

    def result(self) -> Transcript:
        from hasrd.languages import join_sentences

        # the file result's fields (docs/API.md), each engine adding its own, plus turns and live
        return Transcript(final=join_sentences([s.text for s in self.sentences], self.language_code()),
                          per_sentence=list(self.sentences), first_text_s=self.first_text_s,
                          segments=self.segments, language_detected=False, turns=list(self.turns),
                          duration_s=round(self.audio.end / SR, 3), live=True,
                          timings=Timings(session_s=round(time.monotonic() - self.t0, 3)))

    def language_code(self) -> str:
        return ""

    # ---- shared steps -----------------------------------------------------------------------------------

    def check(self) -> None:
        if self.cancelled():
            raise EngineError("cancelled", "the live session was cancelled")

    def _open(self, start: int, onset: int | None = None) -> None:
        seg = self.segments
        self.segments += 1
        self.open, self.open_start = seg, self._align(start)
        self.onset = max(self.open_start, start if onset is None else onset)
        self.turns.append(TurnRecord(segment=seg, start_s=round(self.open_start / SR, 3)))
        self.turn_starts.append(self.turns[-1].start_s)
        self.emit.turn(seg, "started", round(self.open_start / SR, 3))
        self._opened(seg, self.open_start)

    def _close(self, end: int) -> None:
        assert self.open is not None
        seg, self.open = self.open, None
        end = max(end, self.open_start)
        self.last_end = end
        self.turns[seg].end_s = round(end / SR, 3)
        self.emit.turn(seg, "stopped", round(self.open_start / SR, 3), round(end / SR, 3))
        self._advance(end)
        self._closed(seg, end)

    def _draft(self, text: str, seg: int) -> None:
        """Emit the open utterance's draft."""
        self._noted(text)
        self.emit.draft(text, seg)

    def _noted(self, text: str) -> None:
        if self.first_text_s is None and text.strip():
            self.first_text_s = round(min(self._decoded_to(), self.audio.end) / SR, 3)  # audio decoded by then

    def say(self, seg: int, text: str, engine: str, start: float, end: float,
            truncated_by: str | None | UnsetType = UNSET) -> None:
        """Emit one final sentence (times in seconds), within its utterance's turn: an utterance is decoded a
        few chunks past the end the VAD found, and a sentence must not end after its turn (issue 31 #8)."""
        turn = self.turns[seg] if 0 <= seg < len(self.turns) else None
        if turn is not None:
            start = max(start, turn.start_s)
            if turn.end_s is not None:
                end = min(end, turn.end_s)
            end = max(end, start)
        self._noted(text)
        entry = TimedSentence(text=text, engine=engine, start_s=round(start, 3), end_s=round(end, 3),
                              truncated_by=truncated_by, segment=seg)
        self.sentences.append(entry)
        self.said.setdefault(seg, []).append(text)
        self.emit.sentence(self.index, text, engine, entry.start_s, entry.end_s, segment=seg)
        self.index += 1

    def _completed(self, seg: int) -> None:
        from hasrd.languages import join_sentences

        t = self.turns[seg]
        t.text = join_sentences(self.said.pop(seg, []), self.language_code())
        self.emit.turn(seg, "completed", t.start_s, t.end_s or 0.0, t.text)

    def segment_at(self, t: float) -> int:
        """The utterance that time ``t`` (seconds) falls in."""
        return max(0, bisect.bisect_right(self.turn_starts, t + 1e-6) - 1)

    def _align(self, start: int) -> int:
        return start

    def _keep_from(self) -> int:
        if self.open is not None:
            return self.open_start
        return max(0, self.audio.end - self.PRE_ROLL)

    def _done_to(self) -> int:
        return self.audio.end

    def _decoded_to(self) -> int:
        """How far the engine has decoded (absolute samples): first_text_s is that when the first text came."""
        return self.audio.end

    # ---- the engine's part ------------------------------------------------------------------------------

    @abc.abstractmethod
    def _opened(self, seg: int, start: int) -> None:
        """Utterance ``seg`` begins at ``start`` (absolute samples, after ``_align``)."""

    @abc.abstractmethod
    def _advance(self, upto: int) -> None:
        """Audio up to ``upto`` has arrived inside the open utterance: decode what is due."""

    @abc.abstractmethod
    def _closed(self, seg: int, end: int) -> None:
        """Utterance ``seg`` ended at ``end``: emit its finals (then ``_completed``), or hand them to a thread."""

    def _poll(self) -> None:  # noqa: B027 - an optional hook, for engines that settle finals in a thread
        pass

    def _drain(self) -> None:  # noqa: B027 - an optional hook, for engines that settle finals in a thread
        pass

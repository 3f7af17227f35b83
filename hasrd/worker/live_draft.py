"""Live transcription with a streaming draft (R2T2, or the fake engine's scripted one) and v2c's final stage.

Per utterance (live.py cuts them) a fresh draft state, as R2T2's own streaming server does at each VAD end:
``init_streaming_state`` with v2c's parameters, 160 ms chunks to ``streaming_transcribe`` as they arrive, and
``finish_streaming_transcribe`` when the utterance ends (its last chunk kept buffered so that the finish really
decodes it). Windows are decided exactly as for files (v2c.py, sentences.Windows: on committed text only) and
shifted onto the session's chunk grid; the one :class:`~hasrd.worker.finalstage.FinalStage` of the session settles
them, faster-whisper on a thread (``mode="thread"``) so the draft never waits for it. Sentences go out in order
across utterances, and ``Turn completed`` once every window of an utterance is out.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from hasrd import transcript
from hasrd.options import Options
from hasrd.transcript import Transcript
from hasrd.worker import v2c
from hasrd.worker.engine import EngineError, LiveEmitter, NullEmitter, heard
from hasrd.worker.finalstage import FinalStage, WindowFn
from hasrd.worker.live import LiveBase
from hasrd.worker.sentences import CHUNK, CHUNK_SEC, PAD, Window, Windows
from hasrd.worker.v2c import DraftModel, DraftState

class _Sentences(NullEmitter):
    """FinalStage's emitter: each sentence is recorded by the session under the utterance its window opened in."""

    def __init__(self, live: DraftLive) -> None:
        self.live = live

    def sentence(self, index: int, text: str, engine: str, start_s: float, end_s: float, segment: int = 0,
                 speaker: str = "") -> None:
        entry = self.live.stage.current
        self.live.say(self.live.segment_at(start_s), text, engine, start_s, end_s,
                      truncated_by=entry.truncated_by if entry is not None else None)


class DraftLive(LiveBase):
    def __init__(self, model: DraftModel, language: str | None, window_fn: WindowFn | None, mode: str,
                 emit: LiveEmitter, cancelled: Callable[[], bool], options: Options | Mapping[str, Any],
                 engine: str = "hybrid-asr-v2c", code: str = "") -> None:
        super().__init__(emit, cancelled, options)
        self.model = model
        self.language = language or None
        self.code = code
        self.engine = engine
        self.stage = FinalStage(self.audio, window_fn, mode, _Sentences(self), cancelled)  # type: ignore[arg-type]
        self.take: Callable[[], list[str]] | None = getattr(model, "take_generations", None)
        self.state: DraftState | None = None
        self.ws = Windows()
        self.chunk0 = 0
        self.fed = 0  # absolute position of the next sample the draft gets
        self.shown = ""
        self.last_window: dict[int, int] = {}  # utterance -> index of its last window (-1: none)
        self.unannounced: list[int] = []  # closed utterances not yet announced as completed, in order
        self.drafts: list[str] = []
        self.detected = ""

    def language_code(self) -> str:
        return self.code

    def _align(self, start: int) -> int:
        return start // CHUNK * CHUNK  # the session's chunk grid: windows keep global chunk indices

    def _opened(self, seg: int, start: int) -> None:
        try:
            self.state = self.model.init_streaming_state(context="", language=self.language, unfixed_chunk_num=0,
                                                         unfixed_token_num=1, chunk_size_sec=CHUNK_SEC)
        except ValueError as e:
            raise EngineError("invalid_audio", f"the draft model does not take language {self.language!r}: {e}"
                              ) from None
        if self.take is not None:
            self.take()
        self.ws = Windows()
        self.chunk0 = start // CHUNK
        self.fed = start
        self.shown = ""

    def _bar(self) -> bool:
        return any("|" in g for g in self.take()) if self.take is not None else False

    def _step(self, state: DraftState, chunk: np.ndarray) -> None:
        i = (self.fed - self.chunk0 * CHUNK) // CHUNK
        _, fixed = self.model.streaming_transcribe(chunk, state, max_new_tokens=v2c.MAX_NEW_TOKENS)
        self.fed += len(chunk)
        text = v2c.draft_text(state.text)
        committed = text if text == self.shown and text else v2c.draft_text(fixed)
        self._show(text)
        self.ws.observe(text, self._bar())
        self._language()
        w = self.ws.commit(committed, i)
        if w is not None:
            self._submit(w)

    def _show(self, text: str) -> None:
        if text != self.shown:
            self.shown = text
            self._draft(self.ws.open_text(text), self.turns[-1].segment)

    def _language(self) -> None:
        name = str(getattr(self.state, "language", "") or "")
        if name and not self.code and name != self.detected:
            from hasrd.languages import UnknownLanguage, resolve

            self.detected = name
            with contextlib.suppress(UnknownLanguage):
                _name, self.code = resolve(name)
                heard(self.emit, self.code)  # the session's script follows what R2T2 heard

    def _submit(self, w: Window) -> None:
        c0 = self.chunk0
        self.stage.submit(dataclasses.replace(w, start_chunk=w.start_chunk + c0, end_chunk=w.end_chunk + c0,
                                              open_chunk=w.open_chunk + c0))

    def _advance(self, upto: int) -> None:
        state = self.state
        if state is None:
            return
        while self.fed + CHUNK <= upto:
            self.check()
            self._step(state, self.audio[self.fed:self.fed + CHUNK])

    def _closed(self, seg: int, end: int) -> None:
        state = self.state
        assert state is not None, "an utterance closes after it opened"
        rest = self.audio[self.fed:min(self.audio.end, max(end, self.fed + 1))]
        if len(rest) >= CHUNK:
            rest = rest[:CHUNK - 1]  # stays buffered: the finish decodes it
        last = (self.fed - self.chunk0 * CHUNK + len(rest) - 1) // CHUNK
        if len(rest):
            self.model.streaming_transcribe(rest, state, max_new_tokens=v2c.MAX_NEW_TOKENS)
            self.fed += len(rest)
        with contextlib.redirect_stdout(sys.stderr):  # R2T2 prints the final text; stdout is not ours
            self.model.finish_streaming_transcribe(state, max_new_tokens=v2c.FINISH_MAX_NEW_TOKENS)
        full = v2c.draft_text(state.text)
        bar = self._bar()  # the finish's own "|": its utterance's tail goes to faster-whisper (issue 31 #9)
        self.ws.observe(full, bar)
        self._language()
        self._show(full)
        w = self.ws.finish(full, max(0, last), bar=bar)
        if w is not None:
            self._submit(w)
        self.drafts.append(full)
        self.last_window[seg] = len(self.stage.windows) - 1
        self.unannounced.append(seg)
        self.state = None
        self._draft("", seg)
        self._poll()

    def _poll(self) -> None:
        self.stage.check()
        with self.stage.lock:
            out = self.stage.next_emit
        while self.unannounced and self.last_window[self.unannounced[0]] < out:
            self._completed(self.unannounced.pop(0))

    def _drain(self) -> None:
        self.stage.close()

    def abort(self) -> None:
        self.stage.abort()

    def _keep_from(self) -> int:
        keep = super()._keep_from()
        with self.stage.lock:
            k = self.stage.next_emit
            if k < len(self.stage.windows):  # a window faster-whisper has not settled yet
                keep = min(keep, self.stage.windows[k].start_chunk * CHUNK - PAD)
        return max(0, keep)

    def _done_to(self) -> int:
        return self.fed if self.open is not None else self.audio.end

    def _decoded_to(self) -> int:
        return self.fed

    def result(self) -> Transcript:
        """The file result's fields (docs/API.md) for the session: ``sent_windows`` on the session's chunk grid,
        ``truncated_by`` in each sentence, ``language`` (the name asked for, else the one R2T2 named, else "")."""
        out = super().result()
        with self.stage.lock:
            windows = [transcript.Window(text=w.text, start_chunk=w.start_chunk, end_chunk=w.end_chunk,
                                         truncated_by=w.truncated_by) for w in self.stage.windows]
        out.engine, out.language, out.language_code = self.engine, self.language or self.detected, self.code
        out.draft, out.fw_calls, out.sent_windows = " ".join(self.drafts), self.stage.fw_calls, windows
        out.language_detected = self.language is None and bool(self.detected and self.code)
        out.bar_signal = "generation" if self.take is not None else "state_text"
        return out

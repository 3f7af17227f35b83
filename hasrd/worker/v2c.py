"""The v2c pipeline (seed 000 §2.4; docs/ARCHITECTURE.md "The v2c pipeline"): a streaming draft, sentence windows,
faster-whisper only where truncated.

Engine-agnostic: the draft is anything with R2T2ASRModel's streaming API (:class:`DraftModel`: R2T2 itself or
a scripted stand-in), and the final stage is any ``window_fn(audio) -> text`` (faster-whisper, or a fake).

Stage 1 (draft): the seed's parameters, 160 ms chunks to ``streaming_transcribe``, which returns ``(state.text,
fixed_text)``. The real R2T2's text is not append-only (notes/r2t2.md): the last token is regenerated on every
chunk, and the text shrinks (rollback, the ``|`` cut, qwen_asr's repetition fix). So windows are decided on
*committed* text only (sentences.Windows): ``fixed_text`` (the text minus its last token, which every later prompt
is forced to continue), or the whole text once a chunk regenerated it unchanged (otherwise a final mark would wait
for the next sentence). The last chunk is fed one sample short so that it stays buffered and
``finish_streaming_transcribe(state, max_new_tokens=FINISH_MAX_NEW_TOKENS)`` really decodes the segment's end.
SENT_END is the seed's set without the ASCII full stop (decimals, abbreviations): English text closes windows only
at ``?!;``, so a run of English sentences ending in ``.`` is one window.

The ``|`` symptom ("bar") is read from what the model generated (engines/r2t2.py), or from ``state.text`` for an
older R2T2 that leaves it there; it marks the open sentence as truncated, which still ends at its mark. (The seed
closed a window whenever ``|`` was anywhere in ``state.text``: with a ``|`` that stays, that is a fragment per
chunk, and fragments are what makes faster-whisper hallucinate, seed §2.5.)

Stage 2 (final, finalstage.py): only truncated windows ("bar", "no_end_mark") go to ``window_fn``, their audio
from LAG_CHUNKS (0.8 s, the seed's measured median first-text delay) before the chunk after the previous close,
with 0.32 s of padding: the seed's character offset used as a chunk index covered the draft's lag only by accident
(docs/API.md). ``per_sentence`` times are on the draft's clock, from the chunk after the previous close to the end
of its own: contiguous, so subtitle cues follow each other. A sentence left empty (a withdrawn tail that
faster-whisper found silent) is not emitted.

Long audio arrives as segments (segment.py), each with a fresh draft state and its offset; windows, chunk indices
and times are global. ``progress`` goes out per chunk, per settled window, and every HEARTBEAT_SEC while one
faster-whisper call runs (the daemon's stall watchdog is about a worker gone silent, not about one long window on a
slow device). Stage 2 may run beside the draft (``mode="thread"``), inline, or after it (the seed's order): each
window depends only on its own audio and text, so the three modes return the same result.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from hasrd import transcript
from hasrd.languages import join_sentences
from hasrd.transcript import TimedSentence, Timings, Transcript
from hasrd.worker.engine import Emitter, EngineError
from hasrd.worker.finalstage import HEARTBEAT_SEC, FinalStage, Heartbeat, WindowFn
from hasrd.worker.sentences import (CHUNK, CHUNK_SEC, CLOSERS, LAG_CHUNKS, SENT_END, SR, Window, Windows, choose,
                                    ends_with_mark, n_chunks, truncation, window_span)
from hasrd.worker.textrules import clean_text

__all__ = ["CHUNK", "CHUNK_SEC", "CLOSERS", "FINISH_MAX_NEW_TOKENS", "HEARTBEAT_SEC", "LAG_CHUNKS", "MAX_NEW_TOKENS",
           "MODES", "SENT_END", "SR", "choose", "draft_windows", "DraftModel", "DraftState", "ends_with_mark",
           "FinalStage", "Heartbeat", "n_chunks", "Outcome", "result", "run", "truncation", "Window", "window_span",
           "WindowFn", "Windows"]

MAX_NEW_TOKENS = 4
# The budget of ``finish_streaming_transcribe``. Without one R2T2 falls back to the default it was loaded with,
# which is the seed's ``max_new_tokens=4`` (vLLM SamplingParams): the finish would regenerate the rolled-back
# last token and at most three more, and every word the draft still lagged behind the audio would be lost at
# the end of each segment. The model stops at its end token long before 64 when nothing is left, so a large
# budget costs nothing on a settled draft.
FINISH_MAX_NEW_TOKENS = 64
MODES = ("thread", "inline", "after")


class DraftState(Protocol):
    """A draft's streaming state as v2c reads it: the text so far (R2T2 rewrites it: notes/r2t2.md)."""

    text: str


class DraftModel(Protocol):
    """The streaming part of ``r2t2.R2T2ASRModel`` that v2c uses (each model takes its own state).

    A model may also have ``take_generations() -> list[str]``: the raw generations of the model calls since the
    last take (engines/r2t2.py observes R2T2's generate step), where a ``|`` is still visible.
    """

    def init_streaming_state(self, context: str = "", language: str | None = None, unfixed_chunk_num: int = 2,
                             unfixed_token_num: int = 5, chunk_size_sec: float = 2.0) -> DraftState: ...

    def streaming_transcribe(self, pcm16k: np.ndarray, state: Any,
                             max_new_tokens: int | None = None) -> tuple[str, str]: ...

    def finish_streaming_transcribe(self, state: Any, max_new_tokens: int | None = None) -> str: ...


def draft_windows(model: DraftModel, pcm: np.ndarray, language: str | None, *,
                  cancelled: Callable[[], bool] = lambda: False,
                  on_text: Callable[[str], None] = lambda t: None,
                  on_window: Callable[[Window], None] = lambda w: None,
                  on_chunk: Callable[[int], None] = lambda i: None,
                  on_language: Callable[[str], None] = lambda name: None,
                  during_finish: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext,
                  ) -> tuple[list[Window], str, float | None]:
    """Stage 1 over one segment -> (windows, full draft, first_text_s). Checks ``cancelled`` per chunk;
    ``during_finish`` wraps R2T2's finish (the job's heartbeat).

    ``language`` None or "" lets R2T2 detect it. The last chunk is fed one sample short, so that it stays in
    R2T2's buffer and the finish decodes the whole segment with FINISH_MAX_NEW_TOKENS (a finish with nothing
    buffered returns at once without decoding).
    """
    try:
        state = model.init_streaming_state(context="", language=language or None, unfixed_chunk_num=0,
                                           unfixed_token_num=1, chunk_size_sec=CHUNK_SEC)
    except ValueError as e:  # R2T2 refuses languages it does not know
        raise EngineError("invalid_audio", f"the draft model does not take language {language!r}: {e}") from None
    take: Callable[[], list[str]] | None = getattr(model, "take_generations", None)
    if take is not None:
        take()  # forget generations of earlier calls (warm-up, another segment)
    ws = Windows()
    shown = ""
    first_text_s: float | None = None
    total = n_chunks(len(pcm))
    for i in range(total):
        if cancelled():
            raise EngineError("cancelled", "the request was cancelled")
        end = min(len(pcm), (i + 1) * CHUNK)
        if i == total - 1 and end - i * CHUNK == CHUNK:
            end -= 1  # keep the last chunk buffered for the finish
        chunk = np.array(pcm[i * CHUNK:end], dtype=np.float32)
        _, fixed = model.streaming_transcribe(chunk, state, max_new_tokens=MAX_NEW_TOKENS)
        text = draft_text(state.text)
        bar = any("|" in g for g in take()) if take is not None else False
        committed = text if text == shown and text and i < total - 1 else draft_text(fixed)  # the last stays buffered
        if text != shown:
            if first_text_s is None and text.strip():  # the audio fed so far (the last chunk may be short)
                first_text_s = round(min(len(pcm), (i + 1) * CHUNK) / SR, 3)
            shown = text
            on_text(text)
        ws.observe(text, bar)
        on_language(str(getattr(state, "language", "") or ""))
        w = ws.commit(committed, i)
        if w is not None:
            on_window(w)
        on_chunk(i)
    # R2T2 prints the final text (stdout is not ours); its finish decodes up to FINISH_MAX_NEW_TOKENS tokens,
    # which on a slow device is longer than the stall watchdog waits for progress: the heartbeat runs
    with during_finish(), contextlib.redirect_stdout(sys.stderr):
        model.finish_streaming_transcribe(state, max_new_tokens=FINISH_MAX_NEW_TOKENS)
    full = draft_text(state.text)
    bar = any("|" in g for g in take()) if take is not None else False
    if full != shown:
        if first_text_s is None and full.strip():
            first_text_s = round(len(pcm) / SR, 3)
        on_text(full)
    ws.observe(full, bar)
    w = ws.finish(full, total - 1, bar=bar)
    if w is not None:
        on_window(w)
    return ws.windows, full, first_text_s


def draft_text(raw: str | None) -> str:
    """R2T2's text as everyone reads it: without U+FFFD or invisible characters. Its streaming step loops until
    a token completes a character; its finish decodes the rolled-back prefix without that loop (issue 31 #11).
    A filter per character, so a prefix of the raw text stays a prefix of the read one."""
    return clean_text(str(raw or ""), strip=False)


@dataclass
class Outcome:
    """Everything one run of v2c over the whole audio produced (segment offsets applied)."""

    draft: list[str] = field(default_factory=list)
    sent_windows: list[transcript.Window] = field(default_factory=list)
    per_sentence: list[TimedSentence] = field(default_factory=list)
    fw_calls: int = 0
    first_text_s: float | None = None
    draft_s: float = 0.0
    final_s: float = 0.0
    fw_s: float = 0.0
    segments: int = 0


def run(model: DraftModel, pcm: np.ndarray, language: str | None, window_fn: WindowFn | None, *,
        emit: Emitter, cancelled: Callable[[], bool] = lambda: False, mode: str = "thread",
        segments: Iterable[tuple[int, int]] | None = None,
        on_language: Callable[[str], None] = lambda name: None, heartbeat_s: float = HEARTBEAT_SEC) -> Outcome:
    """v2c over ``pcm``, one fresh draft state per segment (``(start, end)`` samples; chunk-aligned starts).

    ``on_language`` hears the draft state's language after every chunk (what R2T2 detected, when asked to).
    ``heartbeat_s``: how often the progress is re-sent while one faster-whisper call runs.
    """
    if mode not in MODES:
        raise ValueError(f"v2c mode must be one of {MODES}, not {mode!r}")
    n = len(pcm)
    total_s = round(n / SR, 3)
    out = Outcome()
    beat = Heartbeat(emit, heartbeat_s)
    for seg_no, (start, end) in enumerate(segments if segments is not None else [(0, n)]):
        if start % CHUNK:
            raise ValueError(f"segment start {start} is not a multiple of {CHUNK} samples")
        seg = pcm[start:end]
        chunk0 = start // CHUNK
        stage = FinalStage(seg, window_fn, mode, emit, cancelled, index0=len(out.per_sentence), offset=start,
                           segment=seg_no, heartbeat=beat)

        def on_chunk(i: int, start: int = start, stage: FinalStage = stage) -> None:
            stage.check()
            beat.report(round(min(n, start + (i + 1) * CHUNK) / SR, 3), total_s)

        t0 = time.monotonic()
        try:
            windows, draft, first = draft_windows(model, seg, language, cancelled=cancelled,
                                                  on_text=functools.partial(emit.draft, segment=seg_no),
                                                  on_window=stage.submit, on_chunk=on_chunk,
                                                  on_language=on_language, during_finish=beat.during)
            t1 = time.monotonic()
            settled = stage.close()
        finally:
            stage.abort()
        out.final_s += time.monotonic() - t1
        out.draft_s += t1 - t0
        out.fw_s += stage.fw_s
        out.fw_calls += stage.fw_calls
        out.segments += 1
        out.draft.append(draft)
        if out.first_text_s is None and first is not None:
            out.first_text_s = round(min(n, start + round(first * SR)) / SR, 3)  # never past the audio's end
        for w in windows:
            out.sent_windows.append(transcript.Window(text=w.text, start_chunk=chunk0 + w.start_chunk,
                                                      end_chunk=chunk0 + w.end_chunk, truncated_by=w.truncated_by))
        out.per_sentence.extend(settled)
    beat.report(total_s, total_s)  # everything settled: the last event before the result
    return out


def result(engine: str, language: str, code: str, out: Outcome, n_samples: int) -> Transcript:
    """The result object of docs/API.md (the daemon adds audio_path and its own timings)."""
    return Transcript(
        engine=engine, language=language,
        draft=join_sentences(out.draft, code) if len(out.draft) > 1 else "".join(out.draft),
        final=join_sentences([p.text for p in out.per_sentence], code),
        sent_windows=out.sent_windows, fw_calls=out.fw_calls, first_text_s=out.first_text_s,
        per_sentence=out.per_sentence, duration_s=round(n_samples / SR, 3), segments=out.segments,
        timings=Timings(draft_s=round(out.draft_s, 4), final_s=round(out.final_s, 4), fw_s=round(out.fw_s, 4)))


"""The v2c pipeline (seed 000 §2.4): a streaming draft, sentence windows, faster-whisper only where truncated.

Engine-agnostic: the draft is anything with R2T2ASRModel's streaming API (:class:`DraftModel`: R2T2 itself or
a scripted stand-in), and the final stage is any ``window_fn(audio) -> text`` (faster-whisper, or a fake).

Stage 1 (draft): ``init_streaming_state(context="", language=<name or None = detect>, unfixed_chunk_num=0,
unfixed_token_num=1, chunk_size_sec=0.160)``, then 160 ms chunks to ``streaming_transcribe(chunk, state,
max_new_tokens=4)`` (the seed's parameters), which returns ``(state.text, fixed_text)``. The real R2T2's text is
not append-only (notes/r2t2.md): the last token is regenerated on every chunk, and the text shrinks (rollback,
the ``|`` cut, qwen_asr's repetition fix). So windows are decided on *committed* text only: ``fixed_text`` (the
text minus its last token, which every later prompt is forced to continue), or the whole text once a chunk
regenerated it unchanged (otherwise a final mark would wait for the next sentence). A window closes right
after the last sentence-end mark (SENT_END = ``。！？；?!;``, with closing quotes) in the committed text past the
closed windows (:class:`Windows`): a ``，`` rewritten to ``。`` closes it, several marks in one update close one
window. A draft that rewrote text a closed window holds is re-aligned by length (closed sentences may already
be out to the client; never taken back), so every window's text is a piece of one version of the draft and no
text is counted twice. The last chunk is fed one sample short so that it stays buffered and
``finish_streaming_transcribe(state, max_new_tokens=FINISH_MAX_NEW_TOKENS)`` really decodes the segment's
end; what follows the last close is the last window (also when the draft withdrew it: that audio still goes to
faster-whisper rather than being dropped).

The ``|`` symptom: this R2T2 cuts its raw generation at ``|`` before storing ``state.text``, so ``|`` is seen in
what the model generated (``take_generations()``, which engines/r2t2.py adds by observing R2T2's generate step),
or in ``state.text`` for an older R2T2 that leaves it there. A ``|`` marks the open sentence as truncated
("bar"); the sentence still ends at its mark. (The seed closed a window whenever ``|`` was anywhere in
``state.text``: with a ``|`` that stays, that is a fragment per chunk, and fragments are what makes
faster-whisper hallucinate, seed §2.5.)

Stage 2 (final): a window is *truncated* when its sentence saw a ``|`` ("bar") or does not end with a
sentence-end mark ("no_end_mark"; only the last window or a bar window can lack one, as windows end at marks);
only those go to ``window_fn`` with 0.32 s of padding on both sides (clamped to the audio). Truncated -> the fw
text, or the draft cut at ``|`` when fw returns nothing (engine "fw"); complete -> the draft text (engine
"draft"). ``truncated_by`` is in every window and sentence of the result. A sentence left empty (a withdrawn tail
that faster-whisper found silent) is not emitted.

Changes from the seed (window start): the seed records a window's start as a *character* offset into the
draft and then uses it as a chunk index for the audio span (mixed units). For Chinese (fewer characters than
160 ms chunks) that lands earlier than the chunk where the previous window closed, and so, by accident, covers
the draft's lag behind the audio. Starting at the chunk after the previous close instead would cut off the
first syllables of a truncated sentence that began while the draft lagged, exactly where faster-whisper is
asked to repair it. Here a window's audio starts at ``max(0, previous_close + 1 - LAG_CHUNKS)`` (chunk 0 for the
first window; never before its segment's start), with LAG_CHUNKS = 5 (0.8 s: the seed's measured median
first-text delay), then 0.32 s of padding on both sides, clamped to the audio, as in the seed. The price: where
the draft keeps up with the audio, a window also hears up to 0.8 s of the previous sentence's end (the seed's
windows reached back further still). Units are chunks throughout; the character offset
is kept as ``Window.start_char``. ``sent_windows[k]`` = ``{start_chunk, end_chunk}`` is that audio window
before padding (so consecutive windows overlap by up to LAG_CHUNKS chunks); ``per_sentence[k]`` ``start_s`` /
``end_s`` are the sentence's times on the draft's clock, from the chunk after the previous close
(``Window.open_chunk``) to the end of its own close chunk: contiguous and never overlapping, so subtitle cues
follow each other, trailing the speech by the draft's lag.

Long audio arrives as segments (segment.py), each with a fresh draft state and its offset; windows, chunk
indices and times are global. Events: ``draft`` carries the current segment's draft whenever it changes
(shrinks included; bounded in size for a 4-hour file), ``sentence`` each settled sentence in order,
``progress`` per chunk and once more when everything is settled.

Stage 2 may run while stage 1 continues (``mode="thread"``), at once in the draft loop (``"inline"``), or
after the draft (``"after"``, the seed's order). Each window's result depends only on its own audio and text,
so the three modes return the same result; sentences are emitted in order as soon as they and every earlier
one are settled.
"""

from __future__ import annotations

import contextlib
import queue
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Protocol

import numpy as np

from hasrd.worker.engines import Emitter, EngineError
from hasrd.worker.languages import join_sentences

SENT_END = "。！？；?!;"
# Closing quotes and brackets that may follow a sentence's end mark ("他说：“好。”").
CLOSERS = "\"'”’）)」』》】 \t\n"
SR = 16000
CHUNK_SEC = 0.160
CHUNK = 2560  # 160 ms at 16 kHz
PAD = int(0.32 * SR)  # window padding on each side
# How far (in chunks) a window's audio reaches back before the chunk after the previous close: the draft lags
# the audio, so a sentence's speech starts before its text appears. 5 chunks = 0.8 s, the seed's measured
# median first-text delay of R2T2 (seed 000 §2.4); see "Changes from the seed" above.
LAG_CHUNKS = 5
MAX_NEW_TOKENS = 4
# The budget of ``finish_streaming_transcribe``. Without one R2T2 falls back to the default it was loaded with,
# which is the seed's ``max_new_tokens=4`` (vLLM SamplingParams): the finish would regenerate the rolled-back
# last token and at most three more, and every word the draft still lagged behind the audio would be lost at
# the end of each segment. The model stops at its end token long before 64 when nothing is left, so a large
# budget costs nothing on a settled draft.
FINISH_MAX_NEW_TOKENS = 64
MODES = ("thread", "inline", "after")
TRUNCATED_BY = ("bar", "no_end_mark")

WindowFn = Callable[[np.ndarray], str]


class DraftModel(Protocol):
    """The streaming part of ``r2t2.R2T2ASRModel`` that v2c uses.

    A model may also have ``take_generations() -> list[str]``: the raw generations of the model calls since the
    last take (engines/r2t2.py observes R2T2's generate step), where a ``|`` is still visible.
    """

    def init_streaming_state(self, context: str = "", language: str | None = None, unfixed_chunk_num: int = 2,
                             unfixed_token_num: int = 5, chunk_size_sec: float = 2.0) -> Any: ...

    def streaming_transcribe(self, pcm16k: np.ndarray, state: Any,
                             max_new_tokens: int | None = None) -> tuple[str, str]: ...

    def finish_streaming_transcribe(self, state: Any, max_new_tokens: int | None = None) -> str: ...


@dataclass(frozen=True)
class Window:
    """A sentence window of one segment: draft text and its chunks (segment-local).

    ``start_chunk``..``end_chunk``: the audio faster-whisper gets (before padding), reaching LAG_CHUNKS back
    for the draft's lag; ``open_chunk``: the chunk after the previous window closed, where the sentence starts
    on the draft's clock (``per_sentence.start_s``); ``truncated_by``: which symptom fired ("bar": the model
    generated ``|`` in it; "no_end_mark": it does not end with a sentence-end mark), None for a complete one.
    """

    text: str
    start_char: int
    start_chunk: int
    end_chunk: int
    open_chunk: int
    truncated_by: str | None = None


def has_end_mark(text: str) -> bool:
    return any(m in text for m in SENT_END)


def ends_with_mark(text: str) -> bool:
    """The text's last character, past closing quotes, brackets and spaces, is a sentence-end mark."""
    t = text.rstrip(CLOSERS)
    return bool(t) and t[-1] in SENT_END


def truncation(text: str, bar: bool = False) -> str | None:
    """The symptom gate: "bar" (``|`` generated in the sentence), "no_end_mark", or None (complete)."""
    if bar or "|" in text:
        return "bar"
    if not ends_with_mark(text):
        return "no_end_mark"
    return None


def is_truncated(text: str) -> bool:
    """The seed's gate on a sentence's text alone: ``|`` in it, or no sentence-end mark at its end."""
    return truncation(text) is not None


def choose(sent_text: str, fw_text: str | None, truncated_by: str | None = "") -> tuple[str, str]:
    """The v2c selection rule -> (text, engine). ``fw_text=None``: no final model (draft-only engine).

    ``truncated_by`` is the window's symptom ("" = judge the text alone). Truncated -> the fw text, or the draft
    cut at ``|`` when fw returns nothing; complete -> the draft.
    """
    why = truncation(sent_text) if truncated_by == "" else truncated_by
    if why is None:
        return sent_text, "draft"
    if fw_text is None:
        return sent_text.split("|")[0], "draft"
    return (fw_text if fw_text else sent_text.split("|")[0]), "fw"


def n_chunks(n_samples: int) -> int:
    return (n_samples + CHUNK - 1) // CHUNK


def window_start(open_chunk: int) -> int:
    """First audio chunk of the window opened at ``open_chunk`` (previous close + 1): LAG_CHUNKS earlier."""
    return max(0, open_chunk - LAG_CHUNKS)


def window_span(start_chunk: int, end_chunk: int, n_samples: int) -> tuple[int, int]:
    """Sample range given to faster-whisper: the window's chunks plus 0.32 s each side, clamped to the audio."""
    a0 = max(0, int(start_chunk * CHUNK - PAD))
    a1 = min(n_samples, int((end_chunk + 1) * CHUNK + PAD))
    return a0, max(a0, a1)


def last_mark(text: str) -> int:
    """Index just past the last sentence-end mark (and the closers after it) in ``text``; 0 if none."""
    for i in range(len(text) - 1, -1, -1):
        if text[i] in SENT_END:
            j = i + 1
            while j < len(text) and text[j] in CLOSERS.strip():
                j += 1
            return j
    return 0


class Windows:
    """Sentence windows from a draft that rewrites itself: decided on committed text, re-aligned after rewrites.

    ``closed`` is the text of the windows closed so far, as the draft said it when the last one closed. A new
    version of the draft that still starts with it continues the open window at ``len(closed)``. One that does
    not (the draft rewrote or withdrew text that a closed window holds: qwen_asr's repetition fix, a rolled-back
    mark) is re-aligned by length, snapped forward to the end of a Latin word, because closed sentences may
    already be out to the client and are never taken back. So every window's text is a piece of one version of
    the draft, and no text is counted twice.
    """

    def __init__(self) -> None:
        self.closed = ""
        self.bars: list[int] = []  # where "|" was seen past the closed windows (character offsets in the draft)
        self.seen_open = False  # the draft once showed text in the open window (a shrink must not drop it)
        self.windows: list[Window] = []
        self.open_chunk = 0  # the chunk after the previous close

    def cut(self, view: str) -> int:
        """Where the open window starts in ``view``."""
        if view.startswith(self.closed):
            return len(self.closed)
        cut = len(self.closed)
        while 0 < cut < len(view) and _latin(view[cut]) and _latin(view[cut - 1]):
            cut += 1
        return min(cut, len(view))

    def open_text(self, view: str) -> str:
        return view[self.cut(view):]

    def observe(self, text: str, bar: bool) -> None:
        """The draft's latest full text (not yet committed) and whether the model generated a ``|``.

        A generated ``|`` stands where R2T2 cut its text, at the text's end; an older R2T2 leaves it in place.
        A ``|`` right after a sentence's end mark belongs to the sentence that follows.
        """
        c = self.cut(text)
        part = text[c:]
        if part.strip():
            self.seen_open = True
        if "|" in part:
            self.bars.append(c + part.index("|"))
        elif bar:
            self.bars.append(max(c, len(text)))

    def commit(self, fixed: str, chunk: int) -> Window | None:
        """Committed text after ``chunk``: close the open window at its last sentence-end mark, if any."""
        c = self.cut(fixed)
        part = fixed[c:]
        m = last_mark(part)
        if m == 0 or not any(ch.isalnum() for ch in part[:m]):
            return None  # no mark, or a mark alone (a rewrite's leftover): the sentence is still open
        return self._close(fixed, c, part[:m], chunk)

    def finish(self, final: str, last_chunk: int) -> Window | None:
        """After the finish: the rest of the draft is the last window (also when the draft withdrew it)."""
        c = self.cut(final)
        part = final[c:]
        if not part.strip() and not (self.seen_open or self.bars):
            return None
        if last_chunk < 0 or (not part.strip() and self.open_chunk > last_chunk):
            return None
        return self._close(final, c, part, last_chunk, last=True)

    def _close(self, view: str, c: int, text: str, chunk: int, last: bool = False) -> Window:
        oc = min(self.open_chunk, chunk)
        end = c + len(text)
        bar = any(b < end or last for b in self.bars)
        w = Window(text, c, window_start(oc), chunk, oc, truncation(text, bar))
        self.windows.append(w)
        self.closed = view[:end]
        self.open_chunk = chunk + 1
        self.bars = [b for b in self.bars if b >= end and not last]
        self.seen_open = False
        return w


def _latin(ch: str) -> bool:
    return ch.isascii() and ch.isalnum()


def draft_windows(model: DraftModel, pcm: np.ndarray, language: str | None, *,
                  cancelled: Callable[[], bool] = lambda: False,
                  on_text: Callable[[str], None] = lambda t: None,
                  on_window: Callable[[Window], None] = lambda w: None,
                  on_chunk: Callable[[int], None] = lambda i: None,
                  on_language: Callable[[str], None] = lambda name: None) -> tuple[list[Window], str, float | None]:
    """Stage 1 over one segment -> (windows, full draft, first_text_s). Checks ``cancelled`` per chunk.

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
        text = str(state.text)
        bar = any("|" in g for g in take()) if take is not None else False
        # Committed: fixed_text (the text minus its last token, which every later prompt must continue), or the
        # whole text once a chunk regenerated its last token unchanged (a final mark is otherwise never fixed
        # until the next sentence starts).
        committed = text if text == shown and text and i < total - 1 else str(fixed or "")  # the last stays buffered
        if text != shown:
            if first_text_s is None and text.strip():
                first_text_s = round((i + 1) * CHUNK_SEC, 3)
            shown = text
            on_text(text)
        ws.observe(text, bar)
        on_language(str(getattr(state, "language", "") or ""))
        w = ws.commit(committed, i)
        if w is not None:
            on_window(w)
        on_chunk(i)
    with contextlib.redirect_stdout(sys.stderr):  # R2T2 prints the final text; stdout is not ours
        model.finish_streaming_transcribe(state, max_new_tokens=FINISH_MAX_NEW_TOKENS)
    full = str(state.text)
    bar = any("|" in g for g in take()) if take is not None else False
    if full != shown:
        if first_text_s is None and full.strip():
            first_text_s = round(total * CHUNK_SEC, 3)
        on_text(full)
    ws.observe(full, bar)
    w = ws.finish(full, total - 1)
    if w is not None:
        on_window(w)
    return ws.windows, full, first_text_s


class FinalStage:
    """Stage 2 for one segment: settles windows in order and emits each sentence once it and all earlier are."""

    def __init__(self, pcm: np.ndarray, window_fn: WindowFn | None, mode: str, emit: Emitter,
                 cancelled: Callable[[], bool], *, index0: int = 0, offset: int = 0) -> None:
        self.pcm, self.window_fn, self.mode, self.emit, self.cancelled = pcm, window_fn, mode, emit, cancelled
        self.index0, self.offset = index0, offset
        self.windows: list[Window] = []
        self.settled: list[dict[str, Any] | None] = []
        self.next_emit = 0
        self.emitted = 0
        self.fw_calls = 0
        self.fw_s = 0.0
        self.error: BaseException | None = None
        self.lock = threading.Lock()
        self.deferred: list[int] = []
        self.queue: queue.Queue[int | None] = queue.Queue()
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        if mode == "thread" and window_fn is not None:
            self.thread = threading.Thread(target=self._worker, name="hasr-v2c-final", daemon=True)
            self.thread.start()

    def submit(self, w: Window) -> None:
        """A window closed: settle it now when that is free, else per the mode."""
        self.check()
        with self.lock:
            k = len(self.windows)
            self.windows.append(w)
            self.settled.append(None)
        if self.window_fn is None or w.truncated_by is None or self.mode == "inline":
            self._settle(k)
        elif self.mode == "after":
            self.deferred.append(k)
        else:
            self.queue.put(k)

    def check(self) -> None:
        """Re-raise a failure of the final-stage thread in the caller."""
        if self.error is not None:
            raise self.error

    def close(self) -> list[dict[str, Any]]:
        """Wait until every window is settled; return the per-sentence entries in order."""
        for k in self.deferred:
            if self.cancelled():
                raise EngineError("cancelled", "the request was cancelled")
            self._settle(k)
        self.deferred = []
        if self.thread is not None:
            self.queue.put(None)
            while self.thread.is_alive():
                self.thread.join(0.1)
                if self.cancelled():
                    raise EngineError("cancelled", "the request was cancelled")
        self.check()
        if any(s is None for s in self.settled):
            if self.cancelled():
                raise EngineError("cancelled", "the request was cancelled")
            raise RuntimeError("the v2c final stage ended with unsettled windows")
        return [s for s in self.settled if s is not None and s["text"]]

    def abort(self) -> None:
        """Stop the thread after its current window (cancel, error, or normal end)."""
        self.stop.set()
        if self.thread is not None and self.thread.is_alive():
            self.queue.put(None)

    def _worker(self) -> None:
        try:
            while not self.stop.is_set():
                k = self.queue.get()
                if k is None or self.cancelled():
                    return
                self._settle(k)
        except BaseException as e:  # handed to the draft loop via check()
            self.error = e

    def _settle(self, k: int) -> None:
        w = self.windows[k]
        fw_text: str | None = None
        if self.window_fn is not None and w.truncated_by is not None:
            a0, a1 = window_span(w.start_chunk, w.end_chunk, len(self.pcm))
            t0 = time.monotonic()
            fw_text = self.window_fn(self.pcm[a0:a1])
            with self.lock:
                self.fw_s += time.monotonic() - t0
                self.fw_calls += 1
        text, engine = choose(w.text, fw_text, w.truncated_by)
        start_s = round((self.offset + w.open_chunk * CHUNK) / SR, 3)  # the draft's clock: contiguous cues
        end_s = round((self.offset + min(len(self.pcm), (w.end_chunk + 1) * CHUNK)) / SR, 3)
        with self.lock:
            self.settled[k] = {"text": text, "engine": engine, "start_s": start_s, "end_s": end_s,
                               "truncated_by": w.truncated_by}
            while not self.stop.is_set() and self.next_emit < len(self.settled) and self.settled[self.next_emit] is not None:
                s = self.settled[self.next_emit]
                assert s is not None
                if s["text"]:  # a withdrawn tail that faster-whisper found silent is no sentence
                    self.emit.sentence(self.index0 + self.emitted, s["text"], s["engine"], s["start_s"], s["end_s"])
                    self.emitted += 1
                self.next_emit += 1


@dataclass
class Outcome:
    """Everything one run of v2c over the whole audio produced (segment offsets applied)."""

    draft: list[str] = field(default_factory=list)
    sent_windows: list[dict[str, Any]] = field(default_factory=list)
    per_sentence: list[dict[str, Any]] = field(default_factory=list)
    fw_calls: int = 0
    first_text_s: float | None = None
    draft_s: float = 0.0
    final_s: float = 0.0
    fw_s: float = 0.0
    segments: int = 0


def run(model: DraftModel, pcm: np.ndarray, language: str | None, window_fn: WindowFn | None, *,
        emit: Emitter, cancelled: Callable[[], bool] = lambda: False, mode: str = "thread",
        segments: Iterable[tuple[int, int]] | None = None,
        on_language: Callable[[str], None] = lambda name: None) -> Outcome:
    """v2c over ``pcm``, one fresh draft state per segment (``(start, end)`` samples; chunk-aligned starts).

    ``on_language`` hears the draft state's language after every chunk (what R2T2 detected, when asked to).
    """
    if mode not in MODES:
        raise ValueError(f"v2c mode must be one of {MODES}, not {mode!r}")
    n = len(pcm)
    total_s = round(n / SR, 3)
    out = Outcome()
    for seg_no, (start, end) in enumerate(segments if segments is not None else [(0, n)]):
        if start % CHUNK:
            raise ValueError(f"segment start {start} is not a multiple of {CHUNK} samples")
        seg = pcm[start:end]
        chunk0 = start // CHUNK
        stage = FinalStage(seg, window_fn, mode, emit, cancelled, index0=len(out.per_sentence), offset=start)

        def on_chunk(i: int, start: int = start, stage: FinalStage = stage) -> None:
            stage.check()
            emit.progress(round(min(n, start + (i + 1) * CHUNK) / SR, 3), total_s)

        t0 = time.monotonic()
        try:
            windows, draft, first = draft_windows(model, seg, language, cancelled=cancelled,
                                                  on_text=_segment_drafts(emit, seg_no),
                                                  on_window=stage.submit, on_chunk=on_chunk,
                                                  on_language=on_language)
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
            out.first_text_s = round(start / SR + first, 3)
        for w in windows:
            out.sent_windows.append({"text": w.text, "start_chunk": chunk0 + w.start_chunk,
                                     "end_chunk": chunk0 + w.end_chunk, "truncated_by": w.truncated_by})
        out.per_sentence.extend(settled)
    emit.progress(total_s, total_s)  # everything settled: the last event before the result
    return out


def result(engine: str, language: str, code: str, out: Outcome, n_samples: int) -> dict[str, Any]:
    """The result object of docs/API.md (the daemon adds audio_path and its own timings)."""
    return {
        "engine": engine,
        "language": language,
        "draft": join_sentences(out.draft, code) if len(out.draft) > 1 else "".join(out.draft),
        "final": join_sentences([p["text"] for p in out.per_sentence], code),
        "sent_windows": out.sent_windows,
        "fw_calls": out.fw_calls,
        "first_text_s": out.first_text_s,
        "per_sentence": out.per_sentence,
        "duration_s": round(n_samples / SR, 3),
        "segments": out.segments,
        "timings": {"draft_s": round(out.draft_s, 4), "final_s": round(out.final_s, 4),
                    "fw_s": round(out.fw_s, 4)},
    }


def _segment_drafts(emit: Emitter, segment: int) -> Callable[[str], None]:
    """Draft events of one segment, labelled with it (a client resets its draft display per segment)."""
    def on_text(text: str) -> None:
        emit.draft(text, segment=segment)
    return on_text

"""Live transcription with faster-whisper alone (the CPU path): a growing buffer and local agreement.

Inside an utterance (live.py cuts them), every ``STEP_S`` of new audio the unfinalised part of it is decoded
again (greedy, word timestamps). Words on which two successive decodes agree are *stable*; once a stable word
ends a sentence (``. ? ! 。 ？ ！ …``), everything up to it is final: emitted as a sentence and cut from the
buffer, so the buffer stays short. The rest is the draft (``hasr.draft``), replaced by each decode.

The first decode of an utterance waits until ``FIRST_S`` (0.3 s) of audio has come past the VAD's onset,
which Silero finds 0.15-0.18 s into the speech: with less, whisper hears no word (the six test clips: a word in
6 of 6 at 0.3 s past the onset, 5 of 6 at 0.2 s; 0.1 s, where the first decode used to run, gives nothing),
and a decode costs most of a second whatever its length (the encoder always sees 30 s), so a decode of the
onset alone only put the first words off by a decode. Later utterances mostly start while the last one's final
is decoded and have that much speech by then; the first utterance of a session, met by an idle worker, paid
that empty decode (benchmarks/live.py: first words 3.0 s after the onset against 1.4 s for the rest). Without a
language the first decode also detects it (then kept for the session), for which faster-whisper would encode
the audio twice; :class:`OneEncoding` makes it once.

Pauses: once the speaker has been quiet for 160 ms, the utterance is decoded once more up to the speech's end
(plus 0.2 s), with beam 5 as files are, and no further step runs while the quiet lasts. If the pause reaches
``silence_ms`` (the utterance's end) that decode's words are its final sentences at once; if speech resumes,
steps go on. On two CPU cores a decode takes most of a second: decoding at the pause, inside the silence the
VAD must wait out anyway, is what keeps the final text and the next utterance's first words from queueing
behind it (benchmarks/live.py: both medians about halved, to 1.3 and 1.1 s). An utterance closed without such
a decode (``commit``, the hard reset, or a worker that fell behind and got the pause and the utterance's end in
one piece of audio) is decoded at its end, with the same beam 5, so a final is always a beam decode;
``final_beam=N`` (1-10) asks for every final to be decoded at the utterance's end with beam N instead (1:
greedy). Whisper's no-speech rule drops a segment that is probably silence ("you" after the speech). Every
decode is at temperature 0, without earlier text as a prompt (as files): the same audio gives the same text.
A buffer that grows past ``BUFFER_S`` without a sentence end (a run-on) is finalised at its stable words, or,
when no two decodes agree, at what lies more than ``TAIL_S`` before its end. So the same ``Draft`` /
``Sentence`` / ``Turn`` events flow as with R2T2. The file path's loop rules apply to live text
(:meth:`WhisperLive._say_sentences`; whisper base looped "殿下" 15 times on Mandarin).
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from hasrd.options import Options
from hasrd.transcript import Transcript
from hasrd.worker import resegment
from hasrd.worker.engine import LiveEmitter
from hasrd.worker.engines.fwterms import is_no_speech
from hasrd.worker.textrules import RETRY_KW, clean_text, collapse_loops, looped, token_cap
from hasrd.worker.live import FRAME, SR, LiveBase

if TYPE_CHECKING:
    from faster_whisper import WhisperModel

SENTENCE_END = re.compile(r"[.?!。？！…]+[\"'”’)\]]*$")
BUFFER_S = 20.0
TAIL_S = 3.0
FINAL_PAD = int(0.2 * SR)
FINAL_LEAD = int(1.0 * SR)  # a final's decode starts this much before the utterance (see _final_from)
STEP_S = 0.5  # a draft decode once this much new audio came
DRAFT_DUTY = 2.0  # a greedy draft is due again after this many times the last one took, at the least
PAUSE_WINDOWS = 5  # 160 ms of quiet: a pause (see _advance)
PAUSE_BEAM = 5
FIRST_S = 0.3  # an utterance's first decode: once this much audio has come past the VAD's onset
LANGUAGE_RECHECK_S = 4.0  # no language asked: detected again (on twice the audio each time) until one had this


@dataclass
class Word:
    text: str  # with its leading space, as whisper writes it
    start: int  # absolute samples
    end: int

    @property
    def key(self) -> str:
        return re.sub(r"[^\w']+", "", self.text.lower())


def agreed(prev: list[Word], cur: list[Word]) -> int:
    """How many leading words two decodes agree on (case and punctuation aside)."""
    n = 0
    for a, b in zip(prev, cur, strict=False):
        if a.key != b.key or not a.key:
            break
        n += 1
    return n


def sentence_cut(words: list[Word], stable: int) -> int:
    """The number of words up to the last stable word that ends a sentence (0: none)."""
    for i in range(stable - 1, -1, -1):
        if SENTENCE_END.search(words[i].text.strip()):
            return i + 1
    return 0


def join(words: list[Word]) -> str:
    return "".join(w.text for w in words).strip()


class OneEncoding:
    """The encoder's output for one ``transcribe`` call that detects the language, computed once.

    faster-whisper (1.2) detects the language by encoding the first 30 s window (``detect_language``), then
    encodes that window again to decode it, from a mel spectrogram that differs from the first in one frame
    (the decode leaves out the audio's last, partial frame and pads a zero frame in its place). Put on the
    model for one call (:meth:`on`), this hands the decode the detection's encoding when the two inputs differ
    in at most one frame, and encodes anything else as usual. Measured with whisper base on two cores: a first
    decode without a language took 1.9-2.4 s, with a language 1.0 s.
    """

    def __init__(self, encode: Callable[[Any], Any]) -> None:
        self.encode = encode
        self.kept: tuple[np.ndarray, Any] | None = None
        self.calls = 0
        self.reused = 0

    def __call__(self, features: object) -> Any:
        self.calls += 1
        kept, self.kept = self.kept, None
        if kept is not None and isinstance(features, np.ndarray) and _one_frame_apart(kept[0], features):
            self.reused += 1
            return kept[1]
        out = self.encode(features)
        if self.calls == 1 and isinstance(features, np.ndarray):  # the detection's: kept for the decode
            self.kept = (features.copy(), out)
        return out

    @classmethod
    @contextlib.contextmanager
    def on(cls, model: WhisperModel) -> Iterator[OneEncoding | None]:
        """Serve ``model.encode`` from this for the duration (None where the model has no ``encode``)."""
        encode = getattr(model, "encode", None)
        if not callable(encode) or "encode" in getattr(model, "__dict__", {"encode": None}):
            yield None  # no encoder to share (a stand-in), or one of the instance's own: left alone
            return
        memo = cls(encode)
        model.encode = memo  # the instance's attribute, over the class's method, for this call only
        try:
            yield memo
        finally:
            del model.encode


def _one_frame_apart(a: np.ndarray, b: np.ndarray) -> bool:
    """Two mel spectrograms (..., mels, frames) of one shape that differ in at most one frame."""
    if a.shape != b.shape or a.ndim < 2:
        return False
    differ = (a != b).reshape(-1, a.shape[-1]).any(axis=0)
    return int(np.count_nonzero(differ)) <= 1


class WhisperLive(LiveBase):
    def __init__(self, model: WhisperModel, code: str | None, task: str, prompt: str | None, emit: LiveEmitter,
                 cancelled: Callable[[], bool], options: Options | Mapping[str, Any]) -> None:
        super().__init__(emit, cancelled, options)
        self.model = model
        self.code = code  # None: detected by the first decode, then kept for the session
        self.asked = code is not None
        self.detected_on = 0  # samples of audio the language was last detected on
        self.task = task
        # the user's prompt only: like files (condition_on_previous_text=False), earlier text is not fed back, where
        # whisper would continue it ("But ..." before the next sentence) or repeat its errors
        self.prompt = prompt or None
        self.final_beam = self.knobs.final_beam
        self.buf_start = 0
        self.decoded_to = 0
        self.due = 0  # the next step's decode: once the audio reaches this (absolute samples)
        self.paused_at = -1  # the pause (its quiet_from) that the last beam decode at a pause was for
        self.prev: list[Word] = []
        self.loops = resegment.LoopFilter()
        self.decodes = 0
        self.lead_from = 0  # where the open utterance's final decode starts (_final_from)
        self.pause_to = 0  # where the last beam decode (at a pause, or a final's own) ended
        self.final_to = 0  # where the last utterance's final decode ended: the next one's lead stops there

    def language_code(self) -> str:
        return self.code or ""

    def _decode(self, a: int, b: int, beam: int = 1) -> list[Word]:
        a = max(a, self.audio.start)  # the words' times count from the audio really decoded
        audio = self.audio[a:b]
        if len(audio) < SR // 10:
            return []
        # No language asked: the first decode detects it, on as little as FIRST_S of speech, which is not enough
        # (an English file came back in Japanese once in six). It is detected again on twice the audio, until a
        # detection had LANGUAGE_RECHECK_S of it (issue 31 #5); each such decode encodes its audio once for both
        # (OneEncoding), so a detection costs little more than the decode.
        detect = not self.asked and (self.code is None or (
            self.detected_on < LANGUAGE_RECHECK_S * SR and len(audio) >= 2 * self.detected_on))

        def decode(language: str | None, **extra: int) -> tuple[list[Word], Any]:
            segments, info = self.model.transcribe(
                audio, language=language, task=self.task, beam_size=max(1, beam), temperature=0.0,
                vad_filter=False, max_new_tokens=token_cap(len(audio) / SR),
                word_timestamps=True, condition_on_previous_text=False, initial_prompt=self.prompt,
                without_timestamps=False, **extra)
            words: list[Word] = []
            for s in segments:  # lazy: the decode runs here
                if is_no_speech(s):
                    continue
                for w in s.words or []:
                    text = clean_text(str(w.word), strip=False)
                    if text.strip():
                        words.append(Word(text, a + int(float(w.start) * SR), a + int(float(w.end) * SR)))
            self.decodes += 1
            return words, info

        with OneEncoding.on(self.model) if detect else contextlib.nullcontext():
            words, info = decode(None if detect else self.code)
        if looped(join(words)):  # decoded once more, as every path does (fwterms.unlooped)
            again, _ = decode(getattr(info, "language", None) or self.code, **RETRY_KW)
            words = words if looped(join(again)) else again
        if detect and getattr(info, "language", None):
            self.code = str(info.language)
            self.detected_on = len(audio)
        return words

    def _opened(self, seg: int, start: int) -> None:
        # not into what the last utterance's final decoded (up to FINAL_PAD past that utterance's end)
        self.lead_from = min(start, max(self.final_to, start - FINAL_LEAD))
        self.buf_start = self.decoded_to = start
        self.due = self.onset + int(FIRST_S * SR)  # no decode of the onset alone: it hears no word yet
        self.paused_at = -1
        self.prev = []
        self.loops = resegment.LoopFilter()  # per utterance: each is decoded on its own

    def _advance(self, upto: int) -> None:
        if self.open is None or self.hurry:
            return  # hurry: the commit behind this audio decodes the whole utterance at once (_closed)
        pause = self.vad.speaking and self.vad.quiet >= PAUSE_WINDOWS
        if (not pause and self.vad.speaking and self.vad.quiet > 0
                and self.audio.end - self.vad.quiet_from <= PAUSE_WINDOWS * FRAME):
            # the speech may be ending: no greedy step now, whose decode a commit would wait behind (issue 31
            # #4); the pause's beam decode comes within PAUSE_WINDOWS, or the speech goes on and so do the steps
            # (scores between the VAD's two thresholds neither end a quiet run nor add to it: past the pause's
            # length the steps go on)
            return
        if pause:
            if self.paused_at == self.vad.quiet_from:
                return  # still the same pause, already decoded: nothing new to show
            # the speech stopped: decode up to its end now, with beam search as files are, so that if this is
            # the utterance's end its final text needs no decode of its own (see _closed); even right after a
            # step's decode, whose words were greedy
            upto = self.vad.quiet_from + FINAL_PAD
        elif upto < self.due:
            return
        self.check()
        t0 = time.monotonic()
        words = self._decode(self._final_from() if pause else self.buf_start, min(upto, self.audio.end),
                             PAUSE_BEAM if pause else 1)
        took = time.monotonic() - t0
        self.decoded_to = self.audio.end if pause else upto
        # a machine slower than the step: drafts take at most half of the worker's time (the next one is due
        # after twice what this one took), so drafts do not queue up behind each other, stale when they show,
        # and a commit finds the worker idle half the time instead of waiting for a draft in flight (issue 31 #4)
        self.due = self.decoded_to + max(int(STEP_S * SR), 0 if pause else int(DRAFT_DUTY * took * SR))
        if pause:
            self.paused_at = self.vad.quiet_from
            self.pause_to = min(upto, self.audio.end)
        stable = agreed(self.prev, words)
        cut = sentence_cut(words, stable)
        if not cut and upto - self.buf_start > BUFFER_S * SR:  # a run-on: bound the buffer anyway
            cut = stable or sum(1 for w in words if w.end < upto - TAIL_S * SR)
        if cut:
            done, words = words[:cut], words[cut:]
            self._say_sentences(self.open, done)
            self.buf_start = done[-1].end
        self.prev = words
        self._draft(collapse_loops(join(words)), self.open)

    def _final_from(self) -> int:
        """Where a final's decode starts: nothing of the utterance said yet, up to FINAL_LEAD of the audio
        before it (never into the utterance before), as a client that commits its buffer hears it decoded
        (wyoming-faster-whisper decodes everything since the stream began); else where the said part ended.
        Whisper's text on the same speech changes with the silence in front of it ("The weather is nice" or
        "But wherever is ice" for 48 ms less, measured on whisper base), so the final is decoded over what the
        client sent rather than from where the VAD heard the onset (issue 31 #4)."""
        return self.lead_from if self.buf_start == self.open_start else self.buf_start

    def _keep_from(self) -> int:
        if self.open is not None:
            return min(self.open_start, self.lead_from)
        # the next utterance opens up to PRE_ROLL (and a VAD window) before its onset, its final FINAL_LEAD before
        return max(0, self.audio.end - FINAL_LEAD - self.PRE_ROLL - FRAME)

    def _say_sentences(self, seg: int, words: list[Word]) -> None:
        """One sentence per end mark; what follows the last mark is a sentence too. The file path's loop rules
        apply: a phrase four times in a row is said once, and so is a sentence four times back to back (held
        until a different one, or the utterance's end, shows it)."""
        start = 0
        for i, w in enumerate(words):
            if SENTENCE_END.search(w.text.strip()) or i == len(words) - 1:
                done = words[start:i + 1]
                start = i + 1
                text = collapse_loops(join(done))
                if not text:
                    continue
                piece = resegment.Piece([resegment.Word(text, done[0].start / SR, done[-1].end / SR)])
                for kept, p in self.loops.add(text, piece):
                    self.say(seg, kept, "fw", p.start, p.end)

    def _closed(self, seg: int, end: int) -> None:
        words = self.prev
        # the final is the beam decode made at this pause: the VAD's end of speech, or a commit while the pause
        # it was made for goes on (nothing was said since: the audio after it is quiet). Without one (a commit
        # mid-speech, the hard reset, a worker that got the pause and the end in one piece of audio, or a greedy
        # step that already reached the pause) the utterance is decoded now, with the same beam; final_beam=N:
        # always decoded now, with beam N
        same_pause = self.paused_at >= 0 and (
            self.paused_at == end and self.decoded_to >= end
            or self.vad.speaking and self.vad.quiet > 0 and self.vad.quiet_from == self.paused_at
            and self.vad.pos - self.vad.quiet_from == self.vad.quiet * FRAME)  # every window since: quiet
        if self.final_beam or not same_pause:
            self.pause_to = min(self.audio.end, end + FINAL_PAD)
            words = self._decode(self._final_from(), self.pause_to, self.final_beam or PAUSE_BEAM)
        self.final_to = max(self.final_to, self.pause_to)  # the audio this final heard
        self._say_sentences(seg, words)
        for kept, p in self.loops.flush():  # the sentences held back as possible repeats
            self.say(seg, kept, "fw", p.start, p.end)
        self.prev = []
        self._draft("", seg)
        self._completed(seg)

    def _done_to(self) -> int:
        return self.decoded_to if self.open is not None else self.audio.end

    def _decoded_to(self) -> int:
        return self.decoded_to

    def result(self) -> Transcript:
        out = super().result()
        from hasrd.languages import NAMES

        code = self.code or ""
        out.engine, out.language, out.language_code = "whisper", NAMES.get(code, code), code
        out.decodes, out.language_detected = self.decodes, not self.asked and bool(code)
        return out

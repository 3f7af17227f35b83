"""Live transcription with faster-whisper alone (the CPU path): a growing buffer and local agreement.

Inside an utterance (live.py cuts them), every ``step_s`` of new audio the unfinalised part of it is decoded
again (greedy, word timestamps). Words on which two successive decodes agree are *stable*; once a stable word
ends a sentence (``. ? ! 。 ？ ！ …``), everything up to it is final: emitted as a sentence and cut from the
buffer, so the buffer stays short. The rest is the draft (``hasr.draft``), replaced by each decode.

Pauses: once the speaker has been quiet for 160 ms, the utterance is decoded once more up to the speech's end
(plus 0.2 s), with beam 5 as files are, and no further step runs while the quiet lasts. If the pause reaches
``silence_ms`` (the utterance's end) that decode's words are its final sentences at once; if speech resumes,
steps go on. On two CPU cores a decode takes most of a second: decoding at the pause, inside the silence the
VAD must wait out anyway, is what keeps the final text and the next utterance's first words from queueing
behind it (benchmarks/live.py: both medians about halved, to 1.3 and 1.1 s). An utterance
closed without such a decode (``commit``, the hard reset, ``final_beam=N``) is decoded at its end. Whisper's
no-speech rule drops a segment that is probably silence ("you" after the speech). Every decode is at
temperature 0, without earlier text as a prompt (as files): the same audio gives the same text. A buffer that grows past ``BUFFER_S`` without
a sentence end (a run-on) is finalised at its stable words, or, when no two decodes agree, at what lies more
than ``TAIL_S`` before its end. So the same ``Draft`` / ``Sentence`` / ``Turn`` events flow as with R2T2.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable


from hasrd.worker.engines import EngineError
from hasrd.worker.engines.whisper import clean_text, token_cap
from hasrd.worker.live import SR, LiveBase, LiveEmitter

SENTENCE_END = re.compile(r"[.?!。？！…]+[\"'”’)\]]*$")
BUFFER_S = 20.0
TAIL_S = 3.0
FINAL_PAD = int(0.2 * SR)
PAUSE_WINDOWS = 5  # 160 ms of quiet: a pause (see _advance)
PAUSE_BEAM = 5


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
    for a, b in zip(prev, cur):
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


class WhisperLive(LiveBase):
    def __init__(self, model: Any, code: str | None, task: str, prompt: str | None, emit: LiveEmitter,
                 cancelled: Callable[[], bool], options: dict[str, Any]) -> None:
        super().__init__(emit, cancelled, options)
        self.model = model
        self.code = code  # None: detected by the first decode, then kept for the session
        self.task = task
        self.prompt = prompt
        try:
            self.step = int(float(options.get("step_s") or 0.5) * SR)
            self.final_beam = int(options.get("final_beam") or 0)
        except (TypeError, ValueError):
            raise EngineError("invalid_audio", "step_s and final_beam must be numbers") from None
        if not 0.1 * SR <= self.step <= 10 * SR or not 0 <= self.final_beam <= 10:
            raise EngineError("invalid_audio", "step_s must be 0.1-10 and final_beam 0-10")
        self.buf_start = 0
        self.decoded_to = 0
        self.prev: list[Word] = []
        self.decodes = 0
        self.language = ""

    def language_code(self) -> str:
        return self.code or ""

    def _context(self) -> str | None:
        """The user's prompt only: like files (condition_on_previous_text=False), earlier text is not fed back,
        where whisper would continue it ("But ..." before the next sentence) or repeat its errors."""
        return self.prompt or None

    def _decode(self, a: int, b: int, beam: int = 1) -> list[Word]:
        audio = self.audio[a:b]
        if len(audio) < SR // 10:
            return []
        segments, info = self.model.transcribe(
            audio, language=self.code, task=self.task, beam_size=max(1, beam), temperature=0.0, vad_filter=False,
            max_new_tokens=token_cap(len(audio) / SR),
            word_timestamps=True, condition_on_previous_text=False, initial_prompt=self._context(),
            without_timestamps=False)
        words: list[Word] = []
        for s in segments:
            if float(s.no_speech_prob) > 0.6 and float(s.avg_logprob) < -1.0:
                continue  # whisper's no-speech rule: "you" from the silence after the speech
            for w in s.words or []:
                text = clean_text(str(w.word), strip=False)
                if text.strip():
                    words.append(Word(text, a + int(float(w.start) * SR), a + int(float(w.end) * SR)))
        self.decodes += 1
        if self.code is None and getattr(info, "language", None):
            self.code = str(info.language)
        return words

    def _opened(self, seg: int, start: int) -> None:
        self.buf_start = self.decoded_to = start
        self.prev = []

    def _advance(self, upto: int) -> None:
        if self.open is None or upto - self.decoded_to < self.step:
            return
        pause = self.vad.speaking and self.vad.quiet >= PAUSE_WINDOWS
        if pause and self.decoded_to >= self.vad.quiet_from:
            return  # still the same pause, already decoded: nothing new to show
        if pause:  # the speech stopped: decode up to its end now, so that if this is the utterance's end its
            upto = self.vad.quiet_from + FINAL_PAD  # final text needs no decode of its own (see _closed)
        self._check()
        # at a pause the decode is likely the utterance's final text: beam search there, as for files
        words = self._decode(self.buf_start, min(upto, self.audio.end), PAUSE_BEAM if pause else 1)
        self.decoded_to = self.audio.end if pause else upto
        stable = agreed(self.prev, words)
        cut = sentence_cut(words, stable)
        if not cut and upto - self.buf_start > BUFFER_S * SR:  # a run-on: bound the buffer anyway
            cut = stable or sum(1 for w in words if w.end < upto - TAIL_S * SR)
        if cut:
            done, words = words[:cut], words[cut:]
            self._say_sentences(self.open, done)
            self.buf_start = done[-1].end
        self.prev = words
        self.emit.draft(join(words), self.open)

    def _say_sentences(self, seg: int, words: list[Word]) -> None:
        """One sentence per end mark; what follows the last mark is a sentence too."""
        start = 0
        for i, w in enumerate(words):
            if SENTENCE_END.search(w.text.strip()) or i == len(words) - 1:
                done = words[start:i + 1]
                self._say(seg, join(done), "fw", done[0].start / SR, done[-1].end / SR)
                start = i + 1

    def _closed(self, seg: int, end: int) -> None:
        words = self.prev
        if self.final_beam or self.decoded_to < end:  # no decode covers the speech yet
            words = self._decode(self.buf_start, min(self.audio.end, end + FINAL_PAD), self.final_beam)
        self._say_sentences(seg, words)
        self.prev = []
        self.emit.draft("", seg)
        self._completed(seg)

    def _done_to(self) -> int:
        return self.decoded_to if self.open is not None else self.audio.end

    def result(self) -> dict[str, Any]:
        out = super().result()
        out.update(engine="whisper", language_code=self.code or "", decodes=self.decodes)
        return out

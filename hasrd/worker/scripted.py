"""A scripted draft model with R2T2's streaming API: the fake engine's draft and ``HASR_DRAFT=scripted``.

It reveals a script in proportion to the audio it is fed, one sentence window per script sentence, with
``|`` left in its text the way older R2T2 versions left it (v2c takes that as the "bar" symptom). For tests
of the pipeline around the draft; the library-like stand-in for R2T2 itself is tests/stand_in/real/r2t2.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from hasrd.worker import v2c

SENT_END = v2c.SENT_END
DEFAULT_SCRIPT = "今天天气很好。我们去公园散步|吧。"


def split_sentences(text: str) -> list[str]:
    """Split after every SENT_END mark; trailing text without a mark is its own sentence."""
    out: list[str] = []
    cur = ""
    for ch in text:
        cur += ch
        if ch in SENT_END:
            out.append(cur)
            cur = ""
    if cur:
        out.append(cur)
    return out


@dataclass
class ScriptedState:
    text: str = ""
    char0: int = 0  # where in the script this state began


class ScriptedDraft:
    """A draft model with R2T2's streaming API that reveals ``script`` in proportion to the audio consumed.

    Reveals stop at most once per chunk at a sentence end and never inside the ``|...`` tail of a sentence;
    once ``|`` is in a state's text only whole sentences appear. So v2c closes exactly one window per script
    sentence (given at least one chunk per sentence), the way R2T2 closes one per spoken sentence. Each chunk
    takes ``chunk_s`` seconds, the model's time (the fake engine's HASR_FAKE_RTF).
    """

    def __init__(self, script: str, total_samples: int, chunk_s: float = 0.0) -> None:
        self.script = script
        self.total = max(1, v2c.n_chunks(total_samples))
        self.chunk_s = chunk_s
        self.consumed = 0
        self.revealed = 0
        self.bounds: list[int] = []
        self.pipe_of: dict[int, int] = {}  # sentence end -> index of its "|"
        acc = 0
        for s in split_sentences(script):
            if "|" in s:
                self.pipe_of[acc + len(s)] = acc + s.index("|")
            acc += len(s)
            self.bounds.append(acc)
        self.bound_set = set(self.bounds)

    def init_streaming_state(self, context: str = "", language: str | None = None, unfixed_chunk_num: int = 2,
                             unfixed_token_num: int = 5, chunk_size_sec: float = 2.0) -> ScriptedState:
        return ScriptedState(char0=self.revealed)

    def _allowed(self, p: int, sticky_pipe: bool) -> bool:
        if p in self.bound_set:
            return True
        if sticky_pipe:
            return False
        end = next(b for b in self.bounds if b > p)
        return end not in self.pipe_of or p <= self.pipe_of[end]

    def streaming_transcribe(self, pcm16k: np.ndarray, state: ScriptedState,
                             max_new_tokens: int | None = None) -> tuple[str, str]:
        if self.chunk_s > 0:
            time.sleep(self.chunk_s)
        self.consumed += 1
        target = len(self.script) * min(self.consumed, self.total) // self.total
        nxt = next((b for b in self.bounds if b > self.revealed), len(self.script))
        sticky = "|" in state.text
        for p in range(min(target, nxt), self.revealed, -1):
            if self._allowed(p, sticky):
                self.revealed = p
                state.text = self.script[state.char0:p]
                return state.text, state.text
        return "", ""

    def finish_streaming_transcribe(self, state: ScriptedState, max_new_tokens: int | None = None) -> str:
        target = len(self.script) * min(self.consumed, self.total) // self.total
        if target > self.revealed:
            self.revealed = target
            state.text = self.script[state.char0:target]
        return state.text

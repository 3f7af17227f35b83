"""A streaming draft's model calls (R2T2's, or the fake engine's scripted draft's) as steps of the worker's decode
loop: each ``streaming_transcribe`` and ``finish_streaming_transcribe`` a serial step of its own (vLLM's ``LLM``
takes one call at a time, and R2T2 decodes one state per call), ordered with every other step of the worker (a live
session's draft ahead of a file's). The raw generations an observed R2T2 made (engines/r2t2.py ``observing``) are
taken in the same step, so each job reads its own: a :class:`SteppedDraft` is made per job.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import numpy as np

from hasrd.worker.batcher import Batcher
from hasrd.worker.v2c import DraftModel, DraftState

T = TypeVar("T")


class SteppedDraft:
    """``model`` (a :class:`~hasrd.worker.v2c.DraftModel`) for one job, its streaming calls run by ``loop`` (None: in
    the caller's thread, for an engine driven without a worker). ``take_generations`` is there when the model's
    is (v2c reads the ``|`` symptom from it), else None."""

    def __init__(self, model: DraftModel, loop: Batcher | None) -> None:
        self.model, self.loop = model, loop
        self._take: Callable[[], list[str]] | None = getattr(model, "take_generations", None)
        self._generations: list[str] = []
        self.take_generations: Callable[[], list[str]] | None = self._taken if self._take is not None else None

    def init_streaming_state(self, context: str = "", language: str | None = None, unfixed_chunk_num: int = 2,
                             unfixed_token_num: int = 5, chunk_size_sec: float = 2.0) -> DraftState:
        return self.model.init_streaming_state(context=context, language=language, unfixed_chunk_num=unfixed_chunk_num,
                                               unfixed_token_num=unfixed_token_num, chunk_size_sec=chunk_size_sec)

    def streaming_transcribe(self, pcm16k: np.ndarray, state: DraftState,
                             max_new_tokens: int | None = None) -> tuple[str, str]:
        return self._step(lambda: self.model.streaming_transcribe(pcm16k, state, max_new_tokens=max_new_tokens))

    def finish_streaming_transcribe(self, state: DraftState, max_new_tokens: int | None = None) -> str:
        return self._step(lambda: self.model.finish_streaming_transcribe(state, max_new_tokens=max_new_tokens))

    def _step(self, call: Callable[[], T]) -> T:
        def step() -> tuple[T, list[str]]:  # the call and the generations it made (no other ran meanwhile)
            return call(), self._take() if self._take is not None else []

        out, generations = step() if self.loop is None else self.loop.alone("draft", 1, step, serial=True)
        self._generations += generations
        return out

    def _taken(self) -> list[str]:
        out, self._generations = self._generations, []
        return out

"""faster-whisper's model calls from every job of a worker, batched together (issue 30).

:class:`BatchedWhisper` stands in for the ``ctranslate2.models.Whisper`` a ``WhisperModel`` holds
(``model.model``): faster-whisper's own code (``transcribe``, ``BatchedInferencePipeline``, language detection,
word alignment) runs unchanged in each job's thread, and its four model calls go through the worker's
:class:`~hasrd.worker.batcher.Batcher`, where steps of several jobs that can share one call are stacked along the
batch axis and the results split back.

What may share a call (the step's key): the same call and array shape; for ``generate`` every option (beam
size, temperature, length limits, suppressed tokens...) and the prompts' shape (CTranslate2 requires the
``<|startoftranscript|>`` token at the same position in every prompt of a batch). Language and prompt text vary
per item. ``align`` runs alone (the loop still orders it): whisper's alignment normalises attention over all the
text tokens of its batch, padding included, so another job's text in the batch moved a word's end by 20 ms.

Same text as alone: on the CPU (int8) a window's encoder output and its generated tokens and scores are
bit-identical whether it runs alone or batched with other jobs' windows (measured with the embedded model:
tests/test_batcher.py, benchmarks/batch_same_text.py). On a GPU the encoder output is brought to the host
(``to_cpu``) so that windows encoded in one call can go to different generate calls (float16 copies are exact);
there float16 kernels chosen by batch shape change a word where whisper hesitates (docs/CONFIG.md has the figures),
as faster-whisper's own batch size does.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from hasrd.worker.batcher import Batcher


def _frozen(value: Any) -> Hashable:
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    return value  # type: ignore[no-any-return]


def _split(results: Sequence[Any], counts: Sequence[int]) -> list[list[Any]]:
    out, at = [], 0
    for n in counts:
        out.append(list(results[at:at + n]))
        at += n
    return out


class BatchedWhisper:
    """A ``ctranslate2.models.Whisper`` whose encode, generate, align and detect_language calls are batched
    across a worker's jobs; anything else is the model's own."""

    def __init__(self, model: Any, batcher: Batcher, sot: int) -> None:
        self._model = model
        self._batcher = batcher
        self._sot = sot
        # on a GPU windows encoded together may be generated apart: their encoder output lives on the host
        self._host = str(getattr(model, "device", "cpu")) != "cpu"

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    # ---- the calls faster-whisper makes -----------------------------------------------------------------

    def encode(self, features: Any, to_cpu: bool = False) -> Any:
        arr = np.asarray(features)
        to_cpu = to_cpu or self._host
        return self._batcher.run(("encode", arr.shape[1:], to_cpu), arr.shape[0], (features, arr, to_cpu),
                                 self._encode)

    def generate(self, features: Any, prompts: list[list[int]], **kw: Any) -> Any:
        if kw.get("asynchronous") or not prompts:
            return self._model.generate(features, prompts, **kw)
        arr = np.asarray(features)
        shape = tuple(p.index(self._sot) if self._sot in p else -1 for p in prompts[:1]) + (len(prompts[0]),)
        key: Hashable = ("generate", arr.shape[1:], shape, _frozen(kw))
        if any(len(p) != shape[-1] for p in prompts):
            key = ("generate", id(prompts))  # prompts that cannot share with any other call: alone
        return self._batcher.run(key, len(prompts), (features, arr, prompts, kw), self._generate)

    def align(self, features: Any, start_sequence: list[int], text_tokens: list[list[int]],
              num_frames: int | list[int], **kw: Any) -> Any:
        arr = np.asarray(features)
        frames = [num_frames] * len(text_tokens) if isinstance(num_frames, int) else list(num_frames)
        # alone: the alignment's attention is normalised over a batch's text tokens, padding included, so batched
        # with another job's text a word's end moved by 20 ms (measured); aligning is cheap beside encode/generate
        key = ("align", id(text_tokens))
        return self._batcher.run(key, max(1, len(text_tokens)),
                                 (features, arr, start_sequence, text_tokens, frames, num_frames, kw), self._align)

    def detect_language(self, features: Any) -> Any:
        arr = np.asarray(features)
        return self._batcher.run(("detect", arr.shape[1:]), arr.shape[0], (features, arr), self._detect)

    # ---- the batched calls (the decode loop's thread) ---------------------------------------------------

    @staticmethod
    def _stacked(arrays: list[np.ndarray]) -> Any:
        import ctranslate2

        return ctranslate2.StorageView.from_array(np.ascontiguousarray(np.concatenate(arrays)))

    def _encode(self, payloads: list[Any]) -> list[Any]:
        to_cpu = payloads[0][2]
        if len(payloads) == 1:
            return [self._model.encode(payloads[0][0], to_cpu=to_cpu)]
        import ctranslate2

        out = np.asarray(self._model.encode(self._stacked([p[1] for p in payloads]), to_cpu=True))
        counts = [p[1].shape[0] for p in payloads]
        return [ctranslate2.StorageView.from_array(np.ascontiguousarray(np.stack(part)))
                for part in _split(list(out), counts)]

    def _generate(self, payloads: list[Any]) -> list[Any]:
        if len(payloads) == 1:
            features, _arr, prompts, kw = payloads[0]
            return [self._model.generate(features, prompts, **kw)]
        kw = payloads[0][3]
        results = self._model.generate(self._stacked([p[1] for p in payloads]),
                                       [q for p in payloads for q in p[2]], **kw)
        return _split(results, [len(p[2]) for p in payloads])

    def _align(self, payloads: list[Any]) -> list[Any]:
        if len(payloads) == 1:
            features, _arr, start, tokens, _frames, num_frames, kw = payloads[0]
            return [self._model.align(features, start, tokens, num_frames, **kw)]
        start, kw = payloads[0][2], payloads[0][6]
        results = self._model.align(self._stacked([p[1] for p in payloads]), start,
                                    [t for p in payloads for t in p[3]], [f for p in payloads for f in p[4]], **kw)
        return _split(results, [len(p[3]) for p in payloads])

    def _detect(self, payloads: list[Any]) -> list[Any]:
        if len(payloads) == 1:
            return [self._model.detect_language(payloads[0][0])]
        results = self._model.detect_language(self._stacked([p[1] for p in payloads]))
        return _split(results, [p[1].shape[0] for p in payloads])


def install(whisper_model: Any, batcher: Batcher) -> BatchedWhisper:
    """Route a loaded ``faster_whisper.WhisperModel``'s model calls through ``batcher`` (idempotent)."""
    inner = whisper_model.model
    if isinstance(inner, BatchedWhisper):
        return inner
    sot = 50258
    tok = getattr(whisper_model, "hf_tokenizer", None)
    if tok is not None and tok.token_to_id("<|startoftranscript|>") is not None:
        sot = int(tok.token_to_id("<|startoftranscript|>"))
    whisper_model.model = BatchedWhisper(inner, batcher, sot)
    return whisper_model.model

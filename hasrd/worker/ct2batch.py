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
from typing import TYPE_CHECKING, Any, NamedTuple, TypeAlias

import numpy as np

from hasrd.worker.batcher import Batcher

if TYPE_CHECKING:
    import ctranslate2
    from faster_whisper import WhisperModel

    Features: TypeAlias = "np.ndarray | ctranslate2.StorageView"


def _frozen(value: object) -> Hashable:
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    return value  # type: ignore[return-value]


def _split(results: Sequence[Any], counts: Sequence[int]) -> list[list[Any]]:
    out, at = [], 0
    for n in counts:
        out.append(list(results[at:at + n]))
        at += n
    return out


class Encode(NamedTuple):
    features: Features
    to_cpu: bool


class Generate(NamedTuple):
    features: Features
    prompts: list[list[int]]
    kw: dict[str, Any]  # every generate option: the same in every step of a call (they are in its key)


class BatchedWhisper:
    """A ``ctranslate2.models.Whisper`` whose encode, generate, align and detect_language calls are steps of the
    worker's decode loop, batched across its jobs where they can share a call; anything else is the model's own."""

    def __init__(self, model: ctranslate2.models.Whisper, batcher: Batcher, sot: int) -> None:
        self._model = model
        self._batcher = batcher
        self._sot = sot
        # on a GPU windows encoded together may be generated apart: their encoder output lives on the host
        self._host = str(getattr(model, "device", "cpu")) != "cpu"

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    # ---- the calls faster-whisper makes -----------------------------------------------------------------

    def encode(self, features: Features, to_cpu: bool = False) -> Any:
        shape = np.asarray(features).shape
        to_cpu = to_cpu or self._host
        return self._batcher.run(("encode", shape[1:], to_cpu), shape[0], Encode(features, to_cpu), self._encode)

    def generate(self, features: Features, prompts: list[list[int]], **kw: Any) -> Any:
        if kw.get("asynchronous") or not prompts:
            return self._model.generate(features, prompts, **kw)
        shape = tuple(p.index(self._sot) if self._sot in p else -1 for p in prompts[:1]) + (len(prompts[0]),)
        key: Hashable = ("generate", np.asarray(features).shape[1:], shape, _frozen(kw))
        if any(len(p) != shape[-1] for p in prompts):
            key = ("generate", id(prompts))  # prompts that cannot share with any other call: alone
        return self._batcher.run(key, len(prompts), Generate(features, prompts, kw), self._generate)

    def align(self, features: Features, start_sequence: list[int], text_tokens: list[list[int]],
              num_frames: int | list[int], **kw: Any) -> Any:
        # alone: the alignment's attention is normalised over a batch's text tokens, padding included, so batched
        # with another job's text a word's end moved by 20 ms (measured); aligning is cheap beside encode/generate
        return self._batcher.alone("align", max(1, len(text_tokens)),
                                   lambda: self._model.align(features, start_sequence, text_tokens, num_frames, **kw))

    def detect_language(self, features: Features) -> Any:
        shape = np.asarray(features).shape
        return self._batcher.run(("detect", shape[1:]), shape[0], features, self._detect)

    # ---- the batched calls (the decode loop's thread) ---------------------------------------------------

    @staticmethod
    def _stacked(features: list[Features]) -> ctranslate2.StorageView:
        import ctranslate2

        stacked = np.concatenate([np.asarray(f) for f in features])
        return ctranslate2.StorageView.from_array(np.ascontiguousarray(stacked))

    def _encode(self, steps: list[Encode]) -> list[Any]:
        if len(steps) == 1:
            return [self._model.encode(steps[0].features, to_cpu=steps[0].to_cpu)]
        import ctranslate2

        out = np.asarray(self._model.encode(self._stacked([s.features for s in steps]), to_cpu=True))
        return [ctranslate2.StorageView.from_array(np.ascontiguousarray(np.stack(part)))
                for part in _split(list(out), [len(np.asarray(s.features)) for s in steps])]

    def _generate(self, steps: list[Generate]) -> list[Any]:
        if len(steps) == 1:
            return [self._model.generate(steps[0].features, steps[0].prompts, **steps[0].kw)]
        results = self._model.generate(self._stacked([s.features for s in steps]),
                                       [q for s in steps for q in s.prompts], **steps[0].kw)
        return _split(results, [len(s.prompts) for s in steps])

    def _detect(self, features: list[Features]) -> list[Any]:
        if len(features) == 1:
            return [self._model.detect_language(features[0])]
        results = self._model.detect_language(self._stacked(features))
        return _split(results, [len(np.asarray(f)) for f in features])


def install(whisper_model: WhisperModel, batcher: Batcher) -> BatchedWhisper:
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

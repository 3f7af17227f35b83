"""Stand-in for Confucius4-R2T2's ``r2t2`` package (tests only): its documented streaming API, no model.

What it "recognises" is scripted in the weights directory handed to ``LLM(model=...)``, which must hold a
``config.json`` (as real weights do) and ``script.tsv``: lines ``<seconds>\t<state.text>``; once that much audio
has been fed, ``state.text`` becomes that snapshot (text may carry ``|`` and be rewritten, as R2T2's does).
Like the real one: language must be a full name ("zh" raises ValueError); ``streaming_transcribe`` returns
``(state.text, fixed_text)`` with "" meaning "no update"; every call re-feeds the audio from the state's start
(counted in ``fed_samples``); ``finish_streaming_transcribe`` returns the text and prints it to stdout.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

__version__ = "0.1.0-stand-in"
LANGUAGES = ("Chinese", "English", "Cantonese", "Japanese", "Korean", "French", "German", "Spanish")
SR = 16000


class ASRStreamingState:
    def __init__(self, language: str | None, chunk_size_sec: float) -> None:
        self.language = language
        self.chunk_size_sec = chunk_size_sec
        self.audio = np.zeros(0, dtype=np.float32)
        self.text = ""
        self.fed_samples = 0  # total re-fed audio (quadratic growth, as in R2T2)


class R2T2ASRModel:
    loads: list[dict[str, Any]] = []  # every LLM(...) call's arguments, for tests

    def __init__(self, script: list[tuple[float, str]], kwargs: dict[str, Any]) -> None:
        self.script = script
        self.kwargs = kwargs

    @classmethod
    def LLM(cls, model: str, forced_aligner: Any = None, forced_aligner_kwargs: Any = None,
            max_inference_batch_size: int = -1, max_new_tokens: int = 4096, **kwargs: Any) -> "R2T2ASRModel":
        if not os.path.isfile(os.path.join(model, "config.json")):
            raise OSError(f"{model} does not appear to have a file named config.json")
        script: list[tuple[float, str]] = []
        with open(os.path.join(model, "script.tsv"), encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    t, _, text = line.rstrip("\n").partition("\t")
                    script.append((float(t), text))
        args = dict(kwargs, model=model, max_new_tokens=max_new_tokens)
        cls.loads.append(args)
        with open(os.path.join(model, "config.json")) as f:
            json.load(f)
        return cls(sorted(script), args)

    def init_streaming_state(self, context: str = "", language: str | None = None, unfixed_chunk_num: int = 2,
                             unfixed_token_num: int = 5, chunk_size_sec: float = 2.0) -> ASRStreamingState:
        if language is not None and language not in LANGUAGES:
            raise ValueError(f"Unsupported language: {language}. Use a full name such as 'Chinese'.")
        return ASRStreamingState(language, chunk_size_sec)

    def _snapshot(self, seconds: float) -> str:
        text = ""
        for t, snap in self.script:
            if t <= seconds + 1e-9:
                text = snap
        return text

    def streaming_transcribe(self, pcm16k: np.ndarray, state: ASRStreamingState, max_new_tokens: int | None = None,
                             rollback_punctuation: bool = False) -> tuple[str, str]:
        pcm16k = np.asarray(pcm16k, dtype=np.float32)
        state.audio = np.concatenate([state.audio, pcm16k])
        state.fed_samples += len(state.audio)
        snap = self._snapshot(len(state.audio) / SR)
        if snap == state.text:
            return "", ""
        state.text = snap
        return state.text, state.text.split("|")[0]

    def finish_streaming_transcribe(self, state: ASRStreamingState, max_new_tokens: int | None = None) -> str:
        final = self._snapshot(float("inf"))
        if final:
            state.text = final
        print(state.text)
        return state.text

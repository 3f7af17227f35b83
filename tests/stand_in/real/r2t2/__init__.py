"""Stand-in for Confucius4-R2T2's ``r2t2`` package (tests only): the real library's streaming behaviour, no model.

Written from reading ``r2t2/r2t2_asr.py`` of netease-youdao/Confucius4-R2T2 (public mirror
TheSecondComing123/Confucius4-R2T2) and qwen_asr's ``Qwen3ASRModel`` it inherits from; nothing is copied. The
"model" is a script; everything the library does around the model call is modelled, because that is what v2c
has to survive. Each behaviour, with where it comes from:

1. ``R2T2ASRModel.LLM(model, forced_aligner=None, forced_aligner_kwargs=None, max_inference_batch_size=-1,
   max_new_tokens=4096, **kwargs)`` (inherited ``Qwen3ASRModel.LLM``): builds ``cls(...)``, so a subclass's LLM
   returns the subclass; ``max_new_tokens`` becomes the default budget of every generation whose caller passes
   ``None`` (its SamplingParams ``max_tokens``). Like vLLM it needs ``config.json`` in the directory.
2. ``init_streaming_state(context="", language=None, unfixed_chunk_num=2, unfixed_token_num=5,
   chunk_size_sec=2.0)``: ``None`` or "" = auto-detection (the model writes ``language X<asr_text>`` first);
   anything else is case-normalised ("chinese" -> "Chinese", qwen_asr ``normalize_language_name``) and must be
   one of 30 languages (``validate_language``: ValueError, so "zh" raises). chunk_size_sec <= 0 raises.
3. ``streaming_transcribe(pcm16k, state, max_new_tokens=None, rollback_punctuation=False)`` buffers its input:
   only full chunks (chunk_size_sec x 16000 samples) are decoded; a partial chunk stays buffered and the call
   returns ``(state.text, "")`` with nothing changed. It returns ``(state.text, fixed_text)``.
4. Per decoded chunk the whole audio so far is re-fed (``fed_samples`` counts it: quadratic). The prompt is the
   chat prompt plus a prefix: nothing for the first ``unfixed_chunk_num`` chunks, else the previous raw text
   cut at ``|`` minus its last ``unfixed_token_num`` tokens. ``_streaming_generate(prompt, audio,
   max_new_tokens)`` is the one model call; its return value is the raw generation, the only place a ``|`` can
   be seen in this version.
5. After the call: punctuation in the generation is normalised by the character before it (``。`` after a
   Latin letter becomes ``.``, ``,`` after a CJK character ``，``: ``_normalize_punct_by_context``), raw =
   prefix + generation, spaces between CJK characters are removed for Chinese, qwen_asr's repetition fix
   collapses a character or short pattern repeated more than 20 times (``parse_asr_output`` ->
   ``detect_and_fix_repetitions``: the text can shrink by dozens of characters), the text is stripped, and raw
   is cut at the first ``|``. ``state.text`` is the parsed text (language tag removed): NOT append-only, the
   last token is regenerated on every chunk. ``fixed_text`` is raw minus its last ``unfixed_token_num`` tokens
   (0 when nothing follows the tag), tag removed, cut at ``|``: "" only while the text is that short.
6. Auto language: until the generated raw holds ``<asr_text>``, ``state.text`` and ``fixed_text`` are "".
7. ``finish_streaming_transcribe(state, max_new_tokens=None)``: decodes only when audio is still buffered (else
   returns ``state.text`` as is, no call, no print); then the prefix keeps at least one token, the tail is
   decoded with the given budget (or the LLM default), and it prints ``finish state.text=...`` to stdout.
8. Option ``!legacy_bar`` (older R2T2 versions, the seed's loop): no ``|`` cut anywhere, so ``|`` and what
   follows stay in ``state.text``, ``fixed_text`` and the next prompt.
9. Option ``!bar_before_mark\t<n>,<n>...`` (measured on the real one: the regenerated last token of a closed
   sentence is sometimes ``|``): at those model calls (0-based), when what the prompt forces ends just before a
   sentence-end mark that the two previous calls already wrote there (a closed sentence's mark, regenerated),
   the model writes ``|`` in front of it; the library cuts there, so the text loses that mark for the chunk
   (it comes back on a later call).
10. Option ``!mark_to_comma\t<n>,<n>...``: at those calls, a sentence-end mark the model is about to write right
   after the forced prefix is written as ``，`` (``,`` after Latin) instead, and the model keeps that reading from
   then on (the state remembers the rewritten place), so ``你好。`` becomes ``你好，我们...``.
11. Option ``!engine_thread`` (vLLM's engine): ``LLM(...)`` keeps the vLLM object as ``model`` (as qwen_asr's
   vLLM backend does), whose ``llm_engine.engine_core`` runs a background worker that is NOT a daemon thread
   and ends only when ``shutdown()`` is called; until then the interpreter cannot exit (a process that
   returns from main hangs in its shutdown, the way a worker with the real R2T2 loaded needed SIGTERM).

The script (``script.tsv`` in the weights directory), one item a line:

    <seconds>\t<text>     what the model believes was said once that much audio has been fed (a hypothesis;
                          may hold ``|`` where the model emits one). Generation continues the prompt's text along
                          the latest hypothesis, at most the token budget; where the hypothesis disagrees with the
                          forced prefix the model generates nothing, so the library rolls the text back one token
                          per chunk until they agree (rewrites and shrinks, as the real one shows).
    @<n>\t<generation>    the raw generation of a state's n-th model call (0-based, finish included) verbatim,
                          overriding the hypothesis (for exact rewrites, repetitions that collapse, ``|``)
    !legacy_bar           behaviour 8
    !bar_before_mark\t<n,...>   behaviour 9
    !mark_to_comma\t<n,...>     behaviour 10
    !engine_thread              behaviour 11
    !language\t<Name>     the language auto-detection "hears" (default: Chinese if the script has CJK, else
                          English)

Tokens: a Latin word with its leading spaces, ``<asr_text>``, or any other single character with its leading
spaces (CJK characters and marks are one token each, as in Qwen's vocabulary for common characters).
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__version__ = "0.1.0-stand-in"
SR = 16000
TAG = "<asr_text>"
LANGUAGES = ("Chinese", "English", "Cantonese", "Arabic", "German", "French", "Spanish", "Portuguese",
             "Indonesian", "Italian", "Korean", "Russian", "Thai", "Vietnamese", "Japanese", "Turkish", "Hindi",
             "Malay", "Dutch", "Swedish", "Danish", "Finnish", "Polish", "Czech", "Filipino", "Persian", "Greek",
             "Hungarian", "Macedonian", "Romanian")
PROMPT_END = "<|im_start|>assistant\n"
REPEAT_LIMIT = 20
_TOKEN = re.compile(r"\s*(?:<asr_text>|[A-Za-z0-9']+|\S)|\s+")
_ZH_OF = {",": "，", ".": "。", "!": "！", "?": "？", ";": "；", ":": "：", "(": "（", ")": "）"}
_EN_OF = {v: k for k, v in _ZH_OF.items()}


SENT_END = "。！？；?!;"


def _calls(spec: str) -> set[int]:
    return {int(x) for x in spec.replace(" ", "").split(",") if x}


def _comma(before: str) -> str:
    prev = before.rstrip()[-1:]
    return "," if prev.isascii() and prev.isalnum() else "，"


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text)


def _cjk(ch: str) -> bool:
    return "\u4e00" <= ch <= "\u9fff"


def normalize_punct(gen: str) -> str:
    """Marks take the script of the character before them, within the generation (behaviour 5)."""
    out = list(gen)
    for i, ch in enumerate(gen):
        if ch not in _ZH_OF and ch not in _EN_OF:
            continue
        prev = next((c for c in reversed(gen[:i]) if not c.isspace()), "")
        if prev and _cjk(prev):
            out[i] = _ZH_OF.get(ch, ch)
        elif prev and prev.isascii() and (prev.isalnum() or prev in "\"'"):
            out[i] = _EN_OF.get(ch, ch)
    return "".join(out)


def fix_repetitions(text: str, limit: int = REPEAT_LIMIT) -> str:
    """A unit of 1-8 characters repeated more than ``limit`` times in a row collapses to one copy."""
    for unit in range(1, 9):
        i, out, changed = 0, [], False
        while i < len(text):
            piece = text[i:i + unit]
            j = i + unit
            count = 1
            while len(piece) == unit and text[j:j + unit] == piece:
                count += 1
                j += unit
            if count > limit:
                out.append(piece)
                i, changed = j, True
            else:
                out.append(text[i])
                i += 1
        if changed:
            text = "".join(out)
    return text


@dataclass
class ASRStreamingState:
    unfixed_chunk_num: int
    unfixed_token_num: int
    chunk_size_sec: float
    chunk_size_samples: int
    prompt_raw: str
    context: str
    force_language: str | None
    chunk_id: int = 0
    buffer: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float32))
    audio_accum: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float32))
    language: str = ""
    text: str = ""
    _raw_decoded: str = ""
    calls: int = 0  # model calls made for this state (the script's @n)
    commas: set[int] = field(default_factory=set)  # target positions whose end mark the model reads as a comma
    raws: list[str] = field(default_factory=list)  # the raw texts of the last two calls (behaviour 9)
    fed_samples: int = 0  # total audio re-fed to the model: grows quadratically, as in R2T2


class _EngineCore:
    """Behaviour 11: a non-daemon background worker, ended only by ``shutdown()``."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.stop.wait, name="stand-in-engine-core", daemon=False)
        self.thread.start()
        self.shutdowns = 0

    def shutdown(self) -> None:
        self.shutdowns += 1
        self.stop.set()
        self.thread.join()


class _LLM:
    """The vLLM ``LLM`` object's shape that matters here: ``llm_engine.engine_core``."""

    def __init__(self) -> None:
        self.llm_engine = type("LLMEngine", (), {})()
        self.llm_engine.engine_core = _EngineCore()


class R2T2ASRModel:
    loads: list[dict[str, Any]] = []  # every LLM(...) call's arguments, for tests

    def __init__(self, hypotheses: list[tuple[float, str]], generations: dict[int, str], options: dict[str, str],
                 kwargs: dict[str, Any], max_new_tokens: int | None) -> None:
        self.hypotheses = hypotheses
        self.generations = generations
        self.legacy_bar = "legacy_bar" in options
        self.bar_before_mark = _calls(options.get("bar_before_mark", ""))
        self.mark_to_comma = _calls(options.get("mark_to_comma", ""))
        text = "".join(t for _, t in hypotheses) + "".join(generations.values())
        self.heard_language = options.get("language") or ("Chinese" if any(_cjk(c) for c in text) else "English")
        self.kwargs = kwargs
        self.default_budget = max_new_tokens
        self.generate_calls = 0
        self._state: ASRStreamingState | None = None
        self.model: Any = _LLM() if "engine_thread" in options else None

    @classmethod
    def LLM(cls, model: str, forced_aligner: Any = None, forced_aligner_kwargs: Any = None,
            max_inference_batch_size: int = -1, max_new_tokens: int | None = 4096, **kwargs: Any) -> R2T2ASRModel:
        if not os.path.isfile(os.path.join(model, "config.json")):
            raise OSError(f"{model} does not appear to have a file named config.json")
        hyps: list[tuple[float, str]] = []
        gens: dict[int, str] = {}
        opts: dict[str, str] = {}
        with open(os.path.join(model, "script.tsv"), encoding="utf-8") as f:
            for line in f:
                line = line.rstrip("\n")
                if not line.strip():
                    continue
                head, _, text = line.partition("\t")
                if head.startswith("!"):
                    opts[head[1:]] = text
                elif head.startswith("@"):
                    gens[int(head[1:])] = text
                else:
                    hyps.append((float(head), text))
        args = dict(kwargs, model=model, max_new_tokens=max_new_tokens)
        cls.loads.append(args)
        return cls(sorted(hyps, key=lambda h: h[0]), gens, opts, args, max_new_tokens)

    # ---- the library's streaming API ---------------------------------------------------------------------

    def init_streaming_state(self, context: str = "", language: str | None = None, unfixed_chunk_num: int = 2,
                             unfixed_token_num: int = 5, chunk_size_sec: float = 2.0) -> ASRStreamingState:
        if chunk_size_sec is None or float(chunk_size_sec) <= 0:
            raise ValueError(f"chunk_size_sec must be > 0, got: {chunk_size_sec}")
        force = None
        if language is not None and str(language).strip():
            s = str(language).strip()
            force = s[:1].upper() + s[1:].lower()
            if force not in LANGUAGES:
                raise ValueError(f"Unsupported language: {force}. Supported: {', '.join(LANGUAGES)}")
        prompt = f"<|im_start|>system\n{context}<|im_end|>\n<|im_start|>user\n<|audio|><|im_end|>\n{PROMPT_END}"
        if force:
            prompt += f"language {force}{TAG}"
        return ASRStreamingState(int(unfixed_chunk_num), int(unfixed_token_num), float(chunk_size_sec),
                                 max(1, int(round(float(chunk_size_sec) * SR))), prompt, context or "", force)

    def streaming_transcribe(self, pcm16k: np.ndarray, state: ASRStreamingState, max_new_tokens: int | None = None,
                             rollback_punctuation: bool = False) -> tuple[str, str]:
        if state is None:
            raise ValueError("state must not be None. Call init_streaming_state() first.")
        x = np.asarray(pcm16k).reshape(-1)
        x = x.astype(np.float32) / 32768.0 if x.dtype == np.int16 else x.astype(np.float32, copy=False)
        if len(x):
            state.buffer = np.concatenate([state.buffer, x])
        fixed = ""
        while len(state.buffer) >= state.chunk_size_samples:
            chunk, state.buffer = state.buffer[:state.chunk_size_samples], state.buffer[state.chunk_size_samples:]
            state.audio_accum = np.concatenate([state.audio_accum, chunk])
            prefix = ""
            if state.chunk_id >= state.unfixed_chunk_num:
                state._raw_decoded = self._cut(state._raw_decoded)
                prefix = self._drop_tokens(state._raw_decoded, state.unfixed_token_num)
            raw = self._decode(state, self._cut(prefix), max_new_tokens)
            k = state.unfixed_token_num
            if TAG in raw and raw.split(TAG, 1)[1] == "":
                k = 0
            fixed = self._cut(self._drop_tokens(raw, k).split(TAG, 1)[-1])
            if TAG not in raw and state.force_language is None:
                state.text, fixed = "", ""  # no language tag yet (auto): nothing to show; chunk_id stays
                continue
            state.text = self._cut(self._text_of(raw, state))
            state.chunk_id += 1
        return state.text, fixed

    def finish_streaming_transcribe(self, state: ASRStreamingState, max_new_tokens: int | None = None) -> str:
        if state is None:
            raise ValueError("state must not be None.")
        if len(state.buffer) == 0:
            return state.text
        tail, state.buffer = state.buffer, np.zeros(0, dtype=np.float32)
        state.audio_accum = np.concatenate([state.audio_accum, tail])
        prefix = ""
        if state.chunk_id >= state.unfixed_chunk_num:
            toks = tokens(state._raw_decoded)
            prefix = "".join(toks[:max(1, len(toks) - state.unfixed_token_num)])
        raw = self._decode(state, self._cut(prefix), max_new_tokens)
        state.text = self._cut(self._text_of(raw, state))
        state.chunk_id += 1
        print(f"finish state.text={state.text}")
        return state.text

    def _streaming_generate(self, prompt: str, audio: np.ndarray, max_new_tokens: int | None = None) -> str:
        """The model: continue the prompt's assistant text along the script, at most the token budget."""
        state = self._state
        assert state is not None
        self.generate_calls += 1
        n = state.calls
        state.calls += 1
        budget = max_new_tokens or self.default_budget or 4096
        if n in self.generations:
            return "".join(tokens(self.generations[n])[:budget])
        said = prompt.split(PROMPT_END, 1)[-1]
        target = f"language {state.force_language or self.heard_language}{TAG}" + self._hypothesis(len(audio) / SR)
        for at in state.commas:  # behaviour 10: a reading the model keeps
            if at < len(target) and target[at] in SENT_END:
                target = target[:at] + _comma(target[:at]) + target[at + 1:]
        if not target.startswith(said):
            return ""  # the forced prefix disagrees with what the model hears: it stops at once
        rest = target[len(said):]
        body = said.split(TAG)[-1]
        if rest[:1] and rest[:1] in SENT_END and any(ch.isalnum() for ch in body):
            if n in self.mark_to_comma:
                state.commas.add(len(said))
                rest = _comma(said) + rest[1:]
            elif n in self.bar_before_mark and len(state.raws) == 2 and all(
                    r.split(TAG)[-1][len(body):len(body) + 1] == rest[:1] for r in state.raws):
                return "|" + "".join(tokens(rest)[:max(0, budget - 1)])
        return "".join(tokens(rest)[:budget])

    # ---- helpers -----------------------------------------------------------------------------------------

    def _decode(self, state: ASRStreamingState, prefix: str, max_new_tokens: int | None) -> str:
        """One model call and the library's post-processing -> the new raw text (stored in the state)."""
        state.fed_samples += len(state.audio_accum)
        self._state = state
        try:
            gen = self._streaming_generate(state.prompt_raw + prefix, state.audio_accum, max_new_tokens)
        finally:
            self._state = None
        raw = prefix + normalize_punct(gen).replace("\ufffd", "")
        meta, tagged, body = raw.rpartition(TAG) if TAG in raw else ("", "", raw)
        lang = state.force_language or (meta.replace("language", "").strip() if tagged else "")
        if lang == "Chinese":
            body = re.sub(r"(?<=[\u4e00-\u9fff])\s+(?=[\u4e00-\u9fff])", "", body)
        body = fix_repetitions(body).strip()
        state.language = lang
        state._raw_decoded = self._cut(meta + tagged + body)
        state.raws = (state.raws + [state._raw_decoded])[-2:]
        return state._raw_decoded

    def _text_of(self, raw: str, state: ASRStreamingState) -> str:
        return raw.split(TAG, 1)[1].strip() if TAG in raw else raw.strip()

    def _cut(self, text: str) -> str:
        return text if self.legacy_bar else text.split("|")[0]

    @staticmethod
    def _drop_tokens(text: str, k: int) -> str:
        toks = tokens(text)
        return "".join(toks[:max(0, len(toks) - k)])

    def _hypothesis(self, seconds: float) -> str:
        text = ""
        for t, h in self.hypotheses:
            if t <= seconds + 1e-9:
                text = h
        return text

"""The R2T2 draft (Confucius4-R2T2 through vLLM): import checks, the seed's load call, the draft-only engine.

``from r2t2 import R2T2ASRModel`` must come from github.com/netease-youdao/Confucius4-R2T2 (distribution
``confucius4-r2t2``). The PyPI package named ``r2t2`` is an unrelated project with the same import name; with it
installed the import fails with "cannot import name" (an ImportError, not ModuleNotFoundError), which is told
apart here. Each way of not having R2T2 (package missing or wrong, weights missing, no usable CUDA) is a
``model_unavailable`` error whose sentence says what to install or download and how.

The load parameters are the seed's, verbatim (:data:`LOAD_KW`; max_model_len 8192 blows the KV cache). R2T2
wants full language names ("Chinese"); codes are mapped, no language means R2T2's own detection
(``language=None``), and a language outside R2T2's 30 is the caller's to route elsewhere (:func:`draft_language`).

The ``|`` symptom: this R2T2 cuts its raw generation at the first ``|`` before it stores ``state.text``, so the
seed's ``"|" in state.text`` never fires. The class is loaded through :func:`observing`, a subclass whose
``_streaming_generate`` (the one model call per chunk; vLLM or transformers backend) records each raw
generation, so v2c sees whether the model wrote ``|`` before the library cut it. An R2T2 without that method
still works, with only ``|`` in ``state.text`` to go by (what older versions left there).
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from hasrd.config import Settings
from hasrd.languages import R2T2_LANGUAGES, UnknownLanguage, resolve
from hasrd.models import resolve_weights
from hasrd.options import Options
from hasrd.transcript import Transcript
from hasrd.worker import segment, v2c
from hasrd.worker.batcher import Batcher
from hasrd.worker.draftsteps import SteppedDraft
from hasrd.worker.engine import Emitter, EngineError, LiveEmitter, Loaded, heard
from hasrd.worker.engines.fwterms import language_of
from hasrd.worker.v2c import DraftModel, WindowFn

if TYPE_CHECKING:
    from hasrd.worker.live import LiveBase

M = TypeVar("M")

REPO = "https://github.com/netease-youdao/Confucius4-R2T2"
LOAD_KW: dict[str, Any] = {"gpu_memory_utilization": 0.35, "max_model_len": 4096, "max_new_tokens": 4}
WARM_UP_LANGUAGES = ("Chinese", "English")
GENERATIONS_KEPT = 256
GPU_VENV = "~/.local/share/hasr/gpu-venv"
# What the README's "Setting up the GPU stack" says. hasr itself is not installed there (it is not published):
# the daemon makes its own hasrd package importable in HASR_WORKER_PYTHON's interpreter.
INSTALL = (f"the GPU stack lives in its own venv (Python 3.10-3.13): python3.12 -m venv {GPU_VENV} && "
           f"{GPU_VENV}/bin/pip install 'git+{REPO}' faster-whisper msgspec numpy (this pulls vllm==0.14.0), "
           f"then set HASR_WORKER_PYTHON={GPU_VENV}/bin/python (hasrd makes its own package importable there; "
           f"README: Setting up the GPU stack)")


def import_r2t2() -> Any:
    """``R2T2ASRModel``, or EngineError telling a missing package from the unrelated PyPI ``r2t2``."""
    try:
        from r2t2 import R2T2ASRModel  # type: ignore[import-not-found]
    except ModuleNotFoundError as e:
        if e.name not in (None, "r2t2"):  # r2t2 is there but one of its dependencies is not
            raise EngineError("model_unavailable", f"R2T2 is installed for {sys.executable} but cannot import "
                                                   f"{e.name!r} ({e}); reinstall it: {INSTALL}") from None
        raise EngineError("model_unavailable", f"R2T2 (confucius4-r2t2) is not installed for {sys.executable}; "
                                               f"{INSTALL}") from None
    except ImportError as e:
        if "cannot import name" in str(e) and "R2T2ASRModel" in str(e):
            raise EngineError("model_unavailable", unrelated_message()) from None
        raise EngineError("model_unavailable", f"R2T2 failed to import for {sys.executable}: {e}; {INSTALL}") from None
    return R2T2ASRModel


def unrelated_message() -> str:
    version = ""
    try:
        from importlib.metadata import version as dist_version

        version = " " + dist_version("r2t2")
    except Exception:
        pass
    return (f"the 'r2t2' package importable by {sys.executable} is the unrelated PyPI project r2t2{version} (a "
            f"research-references tool), not Confucius4-R2T2: run 'pip uninstall r2t2' in that environment, then "
            f"install the real one: {INSTALL}")


def cuda_usable() -> tuple[bool, str]:
    """Whether a CUDA device is usable from this interpreter (torch first: vLLM needs it)."""
    try:
        import torch  # type: ignore[import-not-found]
    except ImportError:
        try:
            import ctranslate2

            n = ctranslate2.get_cuda_device_count()
            return n > 0, f"{n} CUDA device(s) seen by CTranslate2"
        except Exception as e:  # no CUDA runtime at all
            return False, f"no CUDA runtime ({type(e).__name__}: {e})"
    if torch.cuda.is_available():
        return True, f"{torch.cuda.device_count()} CUDA device(s) seen by torch {torch.__version__}"
    return False, f"torch {torch.__version__} sees no CUDA device"


def observing(cls: type[M]) -> type[M]:
    """``cls`` with its generate step observed (see the module docstring), when it has one: each raw generation is
    kept until ``take_generations()``. The decode loop runs R2T2's streaming calls one at a time and takes each
    call's generations in the same step (hasrd.worker.draftsteps), so every job reads its own."""
    if not callable(getattr(cls, "_streaming_generate", None)):
        return cls

    class Observed(cls):  # type: ignore[valid-type,misc]
        def _streaming_generate(self, prompt: str, audio: np.ndarray, max_new_tokens: int | None = None) -> str:
            out = super()._streaming_generate(prompt, audio, max_new_tokens)
            log = self._hasr_log()
            log.append(str(out))
            del log[:-GENERATIONS_KEPT]  # bounded when nobody takes them
            return out

        def take_generations(self) -> list[str]:
            """The raw generations since the last take, oldest first."""
            log = self._hasr_log()
            out = list(log)
            log.clear()
            return out

        def _hasr_log(self) -> list[str]:
            log: list[str] = self.__dict__.setdefault("_hasr_generations", [])
            return log

    Observed.__name__ = Observed.__qualname__ = f"Observed{cls.__name__}"
    return Observed


def refuse_translation(options: Options, who: str) -> None:
    if options.task == "translate":
        raise EngineError("unsupported", f"{who} cannot translate: run hasrd with --engine whisper or hybrid")


def bar_signal(model: object) -> str:
    """Where this model's ``|`` symptom is read: "generation" (observed) or "state_text" (only what it keeps)."""
    return "generation" if callable(getattr(model, "take_generations", None)) else "state_text"


def warm_up(draft: DraftModel, phase: Callable[[str], None]) -> float:
    """Three silent 160 ms chunks and a finish for Chinese and for English, as the official streaming server does
    after its load: CUDA kernels, graphs and the vLLM scheduler are ready before the first request. It runs inside
    ``load``, so ``load_s`` includes it."""
    t0 = time.monotonic()
    phase("warming up R2T2 (3 silent chunks and a finish, Chinese and English)")
    silence = np.zeros(v2c.CHUNK, dtype=np.float32)
    with contextlib.redirect_stdout(sys.stderr):
        for language in WARM_UP_LANGUAGES:
            state = draft.init_streaming_state(context="", language=language, unfixed_chunk_num=0,
                                               unfixed_token_num=1, chunk_size_sec=v2c.CHUNK_SEC)
            for _ in range(3):
                draft.streaming_transcribe(silence, state, max_new_tokens=v2c.MAX_NEW_TOKENS)
            draft.streaming_transcribe(silence[:-1], state, max_new_tokens=v2c.MAX_NEW_TOKENS)  # stays buffered
            draft.finish_streaming_transcribe(state, max_new_tokens=v2c.FINISH_MAX_NEW_TOKENS)
    take = getattr(draft, "take_generations", None)
    if take is not None:
        take()
    return time.monotonic() - t0


def load_draft(weights: Path, cuda: Callable[[], tuple[bool, str]] = cuda_usable) -> DraftModel:
    """The seed's R2T2ASRModel.LLM(...) with every way of failing mapped to a sentence."""
    cls = observing(import_r2t2())
    ok, why = cuda()
    if not ok:
        raise EngineError("model_unavailable", f"R2T2 runs on vLLM and needs a CUDA GPU; none is usable here ({why}). "
                                               f"Use --engine whisper on this machine")
    try:
        return cls.LLM(model=str(weights), **LOAD_KW)
    except Exception as e:
        msg = f"{type(e).__name__}: {e}"
        if "out of memory" in msg.lower() or "kv cache" in msg.lower():
            raise EngineError("out_of_memory", f"R2T2 could not get its GPU memory ({msg}); free VRAM or set "
                                               f"HASR_NEED_VRAM_MB so that hasr waits for it") from None
        raise EngineError("model_unavailable", f"R2T2 failed to load from {weights}: {msg}") from None


def shutdown_draft(draft: object) -> list[str]:
    """End what the loaded R2T2 runs besides this thread, so that the worker can exit by itself -> what was shut.

    vLLM's ``LLM`` (qwen_asr keeps it as the model's ``model``) runs its engine core in the background (a
    process and the threads that talk to it) until ``llm_engine.engine_core.shutdown()``; dropping the
    reference leaves that to the garbage collector and to interpreter-exit hooks, and a worker that returned
    from main then hung in its shutdown until the daemon's SIGTERM (6 of 10 Shutdowns, issue 21). Each step is
    best-effort: a close must not fail.
    """
    done: list[str] = []
    if draft is None:
        return done
    for where in ("model", "llm", ""):
        llm = getattr(draft, where, None) if where else draft
        engine = getattr(llm, "llm_engine", None)
        for name, obj in (("engine_core", getattr(engine, "engine_core", None)), ("llm_engine", engine)):
            fn = getattr(obj, "shutdown", None)
            if callable(fn):
                try:
                    fn()
                    done.append(f"{where or 'draft'}.llm_engine{'.engine_core' if name == 'engine_core' else ''}")
                except Exception as e:  # pragma: no cover - a real vLLM's teardown
                    print(f"hasr worker: R2T2 shutdown ({name}): {type(e).__name__}: {e}", file=sys.stderr)
                break
        if done:
            break
    dist = sys.modules.get("torch.distributed")  # only when vLLM brought torch in: never import it here
    if dist is not None:
        with contextlib.suppress(Exception):
            if dist.is_initialized():
                dist.destroy_process_group()
                done.append("torch.distributed")
    import gc

    gc.collect()
    return done


def draft_language(language: str, settings: Settings) -> tuple[str, str]:
    """(full name for R2T2, whisper code); ("", "") lets R2T2 detect the language (``language=None``).

    Raises EngineError("invalid_audio") for a language R2T2 does not know (:func:`r2t2_knows`).
    """
    name, code = language_of(language or settings.language)
    if name and not r2t2_knows(name):
        raise EngineError("invalid_audio", f"R2T2 does not know {name}; it knows {', '.join(R2T2_LANGUAGES)}. "
                                           f"Use --engine whisper for {name}")
    return name, code


def r2t2_knows(name: str) -> bool:
    return name in R2T2_LANGUAGES


class Detected:
    """The language R2T2 detected in an auto-language request, for faster-whisper's windows."""

    def __init__(self, code: str) -> None:
        self.code = code  # the request's code; "" until R2T2 names one
        self.name = ""

    def set(self, name: str) -> None:
        if name and not self.code:
            with contextlib.suppress(UnknownLanguage):
                self.name, self.code = resolve(name)


def run_v2c(engine_name: str, draft: DraftModel, window: Callable[[Callable[[], str]], WindowFn] | None,
            settings: Settings,
            pcm: np.ndarray, language: str, emit: Emitter, cancelled: Callable[[], bool]) -> Transcript:
    """v2c over segments of at most HASR_MAX_SEGMENT_SEC; ``window(code)`` builds the final stage (or None).

    ``code`` is called per window: the request's language code, else the one R2T2 detected by then, else ""
    (faster-whisper detects it).
    """
    name, code = draft_language(language, settings)
    detected = Detected(code)

    def on_language(said: str) -> None:
        before = detected.code
        detected.set(said)
        if detected.code != before:
            heard(emit, detected.code)  # the streamed sentences' script follows it, as the result's does

    ranges = segment.speech_ranges(segment.iter_segments(pcm, settings.max_segment_sec))
    out = v2c.run(draft, pcm, name or None, window(lambda: detected.code) if window else None, emit=emit,
                  cancelled=cancelled, mode=settings.v2c_final, segments=ranges, on_language=on_language,
                  heartbeat_s=(min(v2c.HEARTBEAT_SEC, settings.stall_sec / 4) if settings.stall_sec > 0
                               else v2c.HEARTBEAT_SEC))
    if not name:
        name, code = detected.name, detected.code
    res = v2c.result(engine_name, name, code, out, len(pcm))
    # detected = asked to detect and R2T2 named one (nothing heard, or a name we do not know: not detected)
    res.language_detected = not bool(language or settings.language) and bool(name)
    res.bar_signal = bar_signal(draft)
    return res


def versions(*dists: str) -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str] = {}
    for d in dists:
        with contextlib.suppress(PackageNotFoundError):
            out[d] = version(d)
    return out


class R2T2Engine:
    """The draft alone: v2c with no final model, so truncated sentences are cut at ``|``."""

    name = "r2t2"

    def __init__(self, settings: Settings, cuda: Callable[[], tuple[bool, str]] = cuda_usable) -> None:
        self.settings = settings
        self.cuda = cuda
        self.draft: DraftModel | None = None
        self.loop: Batcher | None = None

    def _load_draft(self, phase: Callable[[str], None]) -> tuple[Path, DraftModel]:
        """Load R2T2 (the hybrid's draft too) -> where its weights are, and the model."""
        weights = resolve_weights(self.settings.r2t2_model)
        phase(f"loading R2T2 from {weights} (vLLM)")
        self.draft = load_draft(weights, self.cuda)
        return weights, self.draft

    def load(self, phase: Callable[[str], None]) -> Loaded:
        weights, draft = self._load_draft(phase)
        warm_s = warm_up(draft, phase)
        return Loaded({"engine": "r2t2", "models": {"draft": {"path": str(weights), "name": weights.name}},
                       "device": "cuda", "load": LOAD_KW, "warm_up_s": round(warm_s, 3),
                       "bar_signal": bar_signal(draft), "versions": versions("confucius4-r2t2", "vllm", "torch")})

    def attach(self, loop: Batcher) -> None:
        self.loop = loop

    def transcribe(self, pcm: np.ndarray, language: str, options: Options, emit: Emitter,
                   cancelled: Callable[[], bool]) -> Transcript:
        refuse_translation(options, "the r2t2 engine (R2T2 only transcribes)")
        return run_v2c("r2t2", self._stepped(), None, self.settings, pcm, language, emit, cancelled)

    def live(self, language: str, options: Options, emit: LiveEmitter, cancelled: Callable[[], bool]) -> LiveBase:
        """The draft alone per utterance: truncated sentences are cut at ``|`` (live_draft.py)."""
        from hasrd.worker.live_draft import DraftLive

        refuse_translation(options, "the r2t2 engine (R2T2 only transcribes)")
        name, code = draft_language(language, self.settings)
        return DraftLive(self._stepped(), name or None, None, "inline", emit, cancelled, options, engine="r2t2",
                         code=code)

    def _stepped(self) -> SteppedDraft:
        """One job's handle on the loaded R2T2: its calls are steps of the worker's decode loop."""
        assert self.draft is not None, "load() first"
        return SteppedDraft(self.draft, self.loop)

    def close(self) -> None:
        draft, self.draft = self.draft, None
        shutdown_draft(draft)

"""The hybrid engine: R2T2 streaming draft + faster-whisper on truncated sentence windows (v2c).

Load parameters are the seed's: ``R2T2ASRModel.LLM(model=..., gpu_memory_utilization=0.35, max_model_len=4096,
max_new_tokens=4)`` and ``WhisperModel(path, device="cuda", device_index=0, compute_type="float16")`` (the
device and compute type follow HASR_FW_DEVICE / HASR_FW_COMPUTE_TYPE when those are set).

Scripted draft, for end-to-end tests without a GPU: with ``HASR_DRAFT=scripted`` the draft is the fake
engine's :class:`~hasrd.worker.scripted.ScriptedDraft` over ``HASR_FAKE_SCRIPT`` (or ``options["fake"]
["script"]`` per request; default: the fake engine's script), revealed in proportion to the audio, while the
final stage is the real faster-whisper model (HASR_FW_MODEL, or the embedded one on the CPU). Through the
daemon, fw_calls is then the number of truncated script sentences, and exactly those sentences carry
faster-whisper's text of their window.

The request's prompt (``options["prompt"]``, the OpenAI ``prompt``) is not used here, on purpose: the draft
is initialised with the seed's ``context=""`` and the windows are the seed's call verbatim (language,
beam_size=5, vad_filter=False), which is what the v2c CER was measured with; and a window is a short piece of
a truncated sentence, where an initial prompt is what whisper most readily echoes or continues (seed §2.5:
small windows amplify fw hallucinations). The whisper engine passes the prompt on.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from hasrd.config import Settings
from hasrd.models import resolve_fw, resolve_weights
from hasrd.transcript import Transcript
from hasrd.worker.engine import Emitter, EngineError
from hasrd.worker.engines.r2t2 import (LOAD_KW, bar_signal, cuda_usable, load_draft, r2t2_knows, run_v2c,
                                       versions, warm_up)
from hasrd.worker.engines.fwload import load_shared
from hasrd.worker.engines.fwload import warm_up as fw_warm_up
from hasrd.worker.engines.fwterms import language_of, whisper_code, window_fn
from hasrd.worker.engines.whisper import WhisperEngine

RESULT_ENGINE = "hybrid-asr-v2c"  # the seed's name in results


class HybridEngine:
    name = "hybrid"

    def __init__(self, settings: Settings, fw_spec: str, fw_device: str, compute_type: str, *,
                 cuda: Callable[[], tuple[bool, str]] = cuda_usable, identity: dict[str, Any] | None = None,
                 env: dict[str, str] | None = None) -> None:
        if settings.draft not in ("r2t2", "scripted"):
            raise EngineError("model_unavailable", f"HASR_DRAFT={settings.draft!r}: use r2t2 or scripted")
        self.settings = settings
        self.fw_spec = fw_spec  # HASR_FW_MODEL's syntax; '' = the embedded model
        self.fw_device = fw_device
        self.compute_type = compute_type
        self.cuda = cuda
        self.extra = dict(identity or {})
        e = os.environ if env is None else env
        self.script = e.get("HASR_FAKE_SCRIPT", "")
        self.draft: Any = None
        self.fw: Any = None

    @property
    def scripted(self) -> bool:
        return self.settings.draft == "scripted"

    def load(self, phase: Callable[[str], None]) -> dict[str, Any]:
        if self.scripted:
            from hasrd.worker.scripted import DEFAULT_SCRIPT

            self.script = self.script or DEFAULT_SCRIPT
            draft_id: dict[str, Any] = {"name": "scripted", "script": self.script}
        else:
            weights = resolve_weights(self.settings.r2t2_model)
            phase(f"loading R2T2 from {weights} (vLLM)")
            self.draft = load_draft(weights, self.cuda)
            draft_id = {"path": str(weights), "name": weights.name, "load": LOAD_KW,
                        "bar_signal": bar_signal(self.draft)}
        fw_ref = resolve_fw(self.fw_spec, phase)
        phase(f"loading faster-whisper {fw_ref.name} on {self.fw_device} ({self.compute_type})")
        self.fw, _lanes = load_shared(fw_ref, self.fw_device, self.compute_type, self.settings)
        if self.fw_device == "cuda":  # CTranslate2's kernels compiled now, not in the first window (docs/GPU.md)
            phase("preparing the GPU's kernels for faster-whisper (the first load on a machine compiles them)")
            fw_warm_up(self.fw, fw_ref.name)
        if not self.scripted:
            draft_id["warm_up_s"] = round(warm_up(self.draft, phase), 3)
        ident: dict[str, Any] = {"engine": "hybrid", "models": {"draft": draft_id, "final": fw_ref.describe()},
                                 "device": self.fw_device, "compute_type": self.compute_type,
                                 "v2c_final": self.settings.v2c_final}
        ident.update(self.extra)
        ident.setdefault("versions", {}).update(versions("confucius4-r2t2", "vllm", "torch"))
        return ident

    def transcribe(self, pcm: np.ndarray, language: str, options: dict[str, Any], emit: Emitter,
                   cancelled: Callable[[], bool]) -> Transcript:
        draft = self.draft
        if self.scripted:
            from hasrd.worker.scripted import ScriptedDraft

            script = str((options.get("fake") or {}).get("script") or self.script)
            draft = ScriptedDraft(script, len(pcm))
        name, _code = language_of(language or self.settings.language)
        if options.get("task") == "translate":  # R2T2 only transcribes; its faster-whisper translates
            return self.whisper_alone(pcm, language, options, emit, cancelled,
                                      "translation: faster-whisper alone (R2T2 only transcribes)")
        if name and not r2t2_knows(name):
            return self.whisper_alone(pcm, language, options, emit, cancelled,
                                      f"R2T2 does not know {name}: faster-whisper alone transcribed this request")

        def windows(code: Callable[[], str]) -> Callable[[np.ndarray], str]:
            def transcribe_window(audio: np.ndarray) -> str:
                return window_fn(self.fw, whisper_code(self.fw, code()))(audio)
            return transcribe_window

        return run_v2c(RESULT_ENGINE, draft, windows, self.settings, pcm, language, emit, cancelled)

    def live(self, language: str, options: dict[str, Any], emit: Any, cancelled: Callable[[], bool]) -> Any:
        """R2T2's draft per utterance with faster-whisper on a thread for truncated sentences (live_draft.py);
        faster-whisper alone (live_whisper.py) for translation and languages R2T2 does not know."""
        from hasrd.worker.engines.r2t2 import draft_language
        from hasrd.worker.live_draft import DraftLive

        name, _code = language_of(language or self.settings.language)
        if options.get("task") == "translate" or (name and not r2t2_knows(name)):
            alone = WhisperEngine(self.settings, self.fw_spec, self.fw_device, self.compute_type)
            alone.model = self.fw
            return alone.live(language, options, emit, cancelled)
        draft = self.draft
        if self.scripted:
            from hasrd.worker.scripted import ScriptedDraft

            fake = options.get("fake") or {}
            draft = ScriptedDraft(str(fake.get("script") or self.script), int(float(fake.get("script_s") or 3) * 16000))
        dname, code = draft_language(language, self.settings)
        session: Any = None

        def transcribe_window(audio: np.ndarray) -> str:
            return window_fn(self.fw, whisper_code(self.fw, session.code if session else code))(audio)

        session = DraftLive(draft, dname or None, transcribe_window, "thread", emit, cancelled, options,
                            engine=RESULT_ENGINE, code=code)
        return session

    def whisper_alone(self, pcm: np.ndarray, language: str, options: dict[str, Any], emit: Emitter,
                      cancelled: Callable[[], bool], note: str) -> Transcript:
        """The whisper engine's whole-file transcription with the loaded faster-whisper, and why in ``note``."""
        alone = WhisperEngine(self.settings, self.fw_spec, self.fw_device, self.compute_type)
        alone.model = self.fw
        result = alone.transcribe(pcm, language, options, emit, cancelled)
        result.note = note
        return result

    def close(self) -> None:
        """End R2T2's background engine (r2t2.shutdown_draft) so that the worker exits by itself."""
        from hasrd.worker.engines.r2t2 import shutdown_draft

        draft, self.draft, self.fw = self.draft, None, None
        if not self.scripted:
            shutdown_draft(draft)

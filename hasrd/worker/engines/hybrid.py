"""The hybrid engine: R2T2 streaming draft + faster-whisper on truncated sentence windows (v2c), both loaded with
the seed's parameters (r2t2.py; faster-whisper float16 on CUDA unless HASR_FW_DEVICE / HASR_FW_COMPUTE_TYPE say
otherwise).

Scripted draft, for end-to-end tests without a GPU: with ``HASR_DRAFT=scripted`` the draft is the fake
engine's :class:`~hasrd.worker.scripted.ScriptedDraft` over ``HASR_FAKE_SCRIPT`` (or ``Options.fake.script``
per request; default: the fake engine's script), revealed in proportion to the audio, while the final stage is
the real faster-whisper model (HASR_FW_MODEL, or the embedded one on the CPU). Through the daemon, fw_calls is
then the number of truncated script sentences, and exactly those sentences carry faster-whisper's text of their
window.

The request's prompt (``Options.prompt``, the OpenAI ``prompt``) is not used here, on purpose: the draft
is initialised with the seed's ``context=""`` and the windows are the seed's call verbatim (language,
beam_size=5, vad_filter=False), which is what the v2c CER was measured with; and a window is a short piece of
a truncated sentence, where an initial prompt is what whisper most readily echoes or continues (seed §2.5:
small windows amplify fw hallucinations). The whisper engine passes the prompt on.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from hasrd.config import Settings
from hasrd.models import resolve_fw
from hasrd.options import Fake, Options
from hasrd.transcript import Transcript
from hasrd.worker import ct2batch
from hasrd.worker.batcher import Batcher
from hasrd.worker.draftsteps import SteppedDraft
from hasrd.worker.engine import Emitter, EngineError, LiveEmitter, Loaded
from hasrd.worker.engines.r2t2 import (LOAD_KW, R2T2Engine, bar_signal, cuda_usable, draft_language, r2t2_knows,
                                       run_v2c, versions, warm_up)
from hasrd.worker.engines.fwload import load_shared
from hasrd.worker.engines.fwload import warm_up as fw_warm_up
from hasrd.worker.engines.fwterms import language_of, whisper_code, window_fn
from hasrd.worker.engines.whisper import WhisperEngine
from hasrd.worker.scripted import DEFAULT_SCRIPT, ScriptedDraft
from hasrd.worker.v2c import WindowFn

if TYPE_CHECKING:
    from faster_whisper import WhisperModel

    from hasrd.worker.live import LiveBase
    from hasrd.worker.live_draft import DraftLive

RESULT_ENGINE = "hybrid-asr-v2c"  # the seed's name in results


class HybridEngine(R2T2Engine):
    """R2T2's draft (loaded, stepped and shut down as the draft-only engine's) and faster-whisper's windows; ``fw``
    is there from ``load`` until ``close``."""

    name = "hybrid"
    fw: WhisperModel

    def __init__(self, settings: Settings, fw_spec: str, fw_device: str, compute_type: str, *,
                 cuda: Callable[[], tuple[bool, str]] = cuda_usable, identity: dict[str, Any] | None = None,
                 env: dict[str, str] | None = None) -> None:
        if settings.draft not in ("r2t2", "scripted"):
            raise EngineError("model_unavailable", f"HASR_DRAFT={settings.draft!r}: use r2t2 or scripted")
        super().__init__(settings, cuda)
        self.fw_spec = fw_spec  # HASR_FW_MODEL's syntax; '' = the embedded model
        self.fw_device = fw_device
        self.compute_type = compute_type
        self.extra = dict(identity or {})
        e = os.environ if env is None else env
        self.script = e.get("HASR_FAKE_SCRIPT", "") or DEFAULT_SCRIPT

    @property
    def scripted(self) -> bool:
        return self.settings.draft == "scripted"

    def load(self, phase: Callable[[str], None]) -> Loaded:
        if self.scripted:
            draft_id: dict[str, Any] = {"name": "scripted", "script": self.script}
        else:
            weights, draft = self._load_draft(phase)
            draft_id = {"path": str(weights), "name": weights.name, "load": LOAD_KW, "bar_signal": bar_signal(draft)}
        fw_ref = resolve_fw(self.fw_spec, phase)
        phase(f"loading faster-whisper {fw_ref.name} on {self.fw_device} ({self.compute_type})")
        self.fw, lanes, batch = load_shared(fw_ref, self.fw_device, self.compute_type, self.settings)
        if self.fw_device == "cuda":  # CTranslate2's kernels compiled now, not in the first window (docs/GPU.md)
            phase("preparing the GPU's kernels for faster-whisper (the first load on a machine compiles them)")
            fw_warm_up(self.fw, fw_ref.name)
        if self.draft is not None:
            draft_id["warm_up_s"] = round(warm_up(self.draft, phase), 3)
        ident: dict[str, Any] = {"engine": "hybrid", "models": {"draft": draft_id, "final": fw_ref.describe()},
                                 "device": self.fw_device, "compute_type": self.compute_type,
                                 "v2c_final": self.settings.v2c_final}
        ident.update(self.extra)
        ident.setdefault("versions", {}).update(versions("confucius4-r2t2", "vllm", "torch"))
        return Loaded(ident, lanes, batch)

    def attach(self, loop: Batcher) -> None:
        super().attach(loop)
        ct2batch.install(self.fw, loop)

    def transcribe(self, pcm: np.ndarray, language: str, options: Options, emit: Emitter,
                   cancelled: Callable[[], bool]) -> Transcript:
        note = self._whisper_alone(language, options)
        if note:  # the whisper engine's whole-file transcription with the loaded faster-whisper, and why
            result = self._alone().transcribe(pcm, language, options, emit, cancelled)
            result.note = note
            return result
        return run_v2c(RESULT_ENGINE, self._job_draft(options, len(pcm)), self._windows, self.settings, pcm, language,
                       emit, cancelled)

    def live(self, language: str, options: Options, emit: LiveEmitter, cancelled: Callable[[], bool]) -> LiveBase:
        """R2T2's draft per utterance with faster-whisper on a thread for truncated sentences (live_draft.py);
        faster-whisper alone (live_whisper.py) for translation and languages R2T2 does not know."""
        from hasrd.worker.live_draft import DraftLive

        if self._whisper_alone(language, options):
            return self._alone().live(language, options, emit, cancelled)
        dname, code = draft_language(language, self.settings)
        session: DraftLive | None = None
        session = DraftLive(self._job_draft(options, int((options.fake or Fake()).script_s * 16000)), dname or None,
                            self._windows(lambda: session.code if session else code), "thread", emit, cancelled,
                            options, engine=RESULT_ENGINE, code=code)
        return session

    def _windows(self, code: Callable[[], str]) -> WindowFn:
        """faster-whisper on v2c's windows, in the language ``code()`` names as each runs (R2T2 may name one)."""
        return lambda audio: window_fn(self.fw, whisper_code(self.fw, code()))(audio)

    def _job_draft(self, options: Options, samples: int) -> SteppedDraft:
        """One job's draft, its calls steps of the worker's decode loop: R2T2, or the script revealed over
        ``samples`` of audio (HASR_DRAFT=scripted)."""
        if self.scripted:
            return SteppedDraft(ScriptedDraft((options.fake or Fake()).script or self.script, samples), self.loop)
        return self._stepped()

    def _alone(self) -> WhisperEngine:
        """The whisper engine over the loaded faster-whisper (its calls already go through the loop)."""
        alone = WhisperEngine(self.settings, self.fw_spec, self.fw_device, self.compute_type)
        alone.model = self.fw
        return alone

    def _whisper_alone(self, language: str, options: Options) -> str:
        """Why faster-whisper alone serves a request ("": the hybrid does): R2T2 only transcribes (its faster-whisper
        translates), and knows 30 languages."""
        name, _code = language_of(language or self.settings.language)
        if options.task == "translate":
            return "translation: faster-whisper alone (R2T2 only transcribes)"
        if name and not r2t2_knows(name):
            return f"R2T2 does not know {name}: faster-whisper alone transcribed this request"
        return ""

    def close(self) -> None:
        vars(self).pop("fw", None)
        super().close()

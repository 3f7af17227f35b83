"""The ``fake`` engine: no models, deterministic scripted drafts, and misbehaviour on request.

Knobs are read from the environment when the worker starts (the daemon passes its environment on), and
the per-request ones can also be given in ``Options.fake`` (hasrd.options.Fake):

    HASR_FAKE_LOAD_SEC=2          slow load (reports a loading phase every 0.1 s)
    HASR_FAKE_FAIL_LOAD=code:msg  load fails with that code and message
    HASR_FAKE_CRASH_AFTER=N       serve N requests, then die (SIGKILL) at the start of the next
    HASR_FAKE_CRASH_MID=1         die (SIGKILL) half-way through every request         options: {"crash": true}
    HASR_FAKE_HANG=1              hang in every request, ignoring Cancel                options: {"hang": true}
    HASR_FAKE_RTF=0.5             take audio_s x RTF seconds per request                options: {"rtf": 0.5}
                                  (the draft's chunks, each a step of the worker's decode loop as R2T2's are:
                                  one at a time, never shared)
    HASR_FAKE_IGNORE_SIGTERM=1    ignore SIGTERM and Shutdown (only SIGKILL ends it)
    HASR_FAKE_SCRIPT=...          the draft text, revealed over the audio (default below)
                                  options: {"script": "..."} for one request
    HASR_FAKE_ALLOC_MB=N          allocate N MB on the GPU with torch while loaded (VRAM tests on a GPU host)
    HASR_FAKE_STDERR_BYTES=N      write one line of N bytes to stderr while loading and again at shutdown
                                  (what vLLM and Rust libraries do; the daemon must keep draining)
                                  options: {"fail": "code"} fails that request

The draft is the script revealed in proportion to the audio (:class:`Misbehaving` over a :class:`ScriptedDraft`),
through the real v2c pipeline (inline mode) with a final stage that returns nothing: a sentence carrying ``|``
(what R2T2 emits for a truncated one) or lacking an end mark is "re-transcribed", i.e. cut at ``|`` with engine
"fw" and counted in fw_calls; other sentences keep their draft text (engine "draft"). The hybrid engine runs the
same scripted draft with the real faster-whisper final stage (``HASR_DRAFT=scripted``).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable

import msgspec
import numpy as np

from hasrd.languages import UnknownLanguage, resolve
from hasrd.options import Fake, Options
from hasrd.transcript import Transcript
from hasrd.worker import v2c
from hasrd.worker.batcher import Batcher
from hasrd.worker.draftsteps import SteppedDraft
from hasrd.worker.engine import Emitter, EngineError, LiveEmitter, Loaded
from hasrd.worker.live_draft import DraftLive
from hasrd.worker.scripted import DEFAULT_SCRIPT, ScriptedDraft
from hasrd.worker.v2c import DraftState

SR = v2c.SR


class Misbehaving(SteppedDraft):
    """One job's scripted draft on R2T2's path, and before each chunk, in the job's own thread, what the request
    asked to go wrong: a hang that ignores Cancel, or a crash (SIGKILL) at chunk ``crash_at``."""

    def __init__(self, draft: ScriptedDraft, loop: Batcher | None, hang: bool, crash_at: int | None) -> None:
        super().__init__(draft, loop)
        self.hang, self.crash_at, self.chunks = hang, crash_at, 0

    def streaming_transcribe(self, pcm16k: np.ndarray, state: DraftState,
                             max_new_tokens: int | None = None) -> tuple[str, str]:
        while self.hang:
            time.sleep(3600)
        if self.crash_at is not None and self.chunks >= self.crash_at:
            os.kill(os.getpid(), signal.SIGKILL)
        self.chunks += 1
        return super().streaming_transcribe(pcm16k, state, max_new_tokens)


class Env(msgspec.Struct, kw_only=True, rename=lambda name: f"HASR_FAKE_{name.upper()}"):
    """The HASR_FAKE_* variables (the module docstring's table)."""

    load_sec: float = 0.0
    fail_load: str = ""
    crash_after: int = -1
    crash_mid: bool = False
    hang: bool = False
    rtf: float = 0.0
    ignore_sigterm: bool = False
    script: str = DEFAULT_SCRIPT
    alloc_mb: int = 0
    stderr_bytes: int = 0


class FakeEngine:
    name = "fake"

    def __init__(self, env: dict[str, str] | None = None) -> None:
        given = {k: v for k, v in (os.environ if env is None else env).items() if v}
        self.env = msgspec.convert(given, Env, strict=False)
        self.served = 0
        self.loop: Batcher | None = None
        self._gpu_block: object | None = None
        if self.env.ignore_sigterm:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)

    @property
    def ignores_shutdown(self) -> bool:
        return self.env.ignore_sigterm

    def load(self, phase: Callable[[str], None]) -> Loaded:
        t0 = time.monotonic()
        phase("loading fake models")
        self._shout("load")
        while time.monotonic() - t0 < self.env.load_sec:
            time.sleep(min(0.1, self.env.load_sec))
            phase(f"loading fake models {time.monotonic() - t0:.1f} s")
        if self.env.fail_load:
            code, _, msg = self.env.fail_load.partition(":")
            raise EngineError(code or "model_unavailable", msg or "the fake engine was told to fail its load")
        device = "cpu"
        if self.env.alloc_mb:
            import torch  # only on a GPU host, for the VRAM-release check

            block = torch.empty(self.env.alloc_mb * 1024 * 1024, dtype=torch.uint8, device="cuda")
            block.fill_(1)
            torch.cuda.synchronize()
            self._gpu_block = block
            device = f"cuda:{torch.cuda.current_device()}"
        print("fake engine: loaded (like vLLM, it prints to stdout; the worker sends that to stderr)")
        return Loaded({"engine": "fake", "models": {"draft": "scripted", "final": "scripted"}, "device": device,
                       "script": self.env.script})

    def attach(self, loop: Batcher) -> None:
        self.loop = loop

    def _draft(self, fake: Fake, samples: int, rtf_s: float, crash_at: int) -> Misbehaving:
        """The request's scripted draft over ``samples`` of audio, ``rtf_s`` seconds of model time per second of
        audio (HASR_FAKE_RTF); or the failure it asked for."""
        if fake.fail:
            raise EngineError(fake.fail, f"the fake engine was told to fail with {fake.fail}")
        crash = self.env.crash_mid if fake.crash is None else fake.crash
        rtf = self.env.rtf if fake.rtf is None else fake.rtf
        return Misbehaving(ScriptedDraft(fake.script or self.env.script, samples, rtf * rtf_s), self.loop,
                           self.env.hang if fake.hang is None else fake.hang, crash_at if crash else None)

    def transcribe(self, pcm: np.ndarray, language: str, options: Options, emit: Emitter,
                   cancelled: Callable[[], bool]) -> Transcript:
        fake = options.fake or Fake()
        if 0 <= self.env.crash_after <= self.served:
            os.kill(os.getpid(), signal.SIGKILL)
        self.served += 1
        if options.task == "translate":  # like the draft-only engine: no translation
            raise EngineError("unsupported", "the fake engine cannot translate: run hasrd with --engine whisper")
        n = len(pcm)
        chunks = max(1, v2c.n_chunks(n))
        draft = self._draft(fake, n, n / SR / chunks, chunks // 2)
        if n == 0:
            raise EngineError("invalid_audio", "no audio samples")
        try:
            _name, code = resolve(language)
        except UnknownLanguage:
            code = ""
        out = v2c.run(draft, pcm, language or None, lambda audio: "", emit=emit, cancelled=cancelled,
                      mode="inline")
        result = v2c.result("fake", language, code, out, n)
        result.draft = fake.script or self.env.script
        result.final = "".join(p.text for p in out.per_sentence)  # the script decides its own spacing
        result.options = msgspec.to_builtins(msgspec.structs.replace(options, fake=None))  # what reached the worker
        return result

    def live(self, language: str, options: Options, emit: LiveEmitter, cancelled: Callable[[], bool]) -> DraftLive:
        """The scripted draft over a live stream: the script is revealed over ``script_s`` seconds of speech
        (options ``fake.script_s``, default 3), through the real live v2c loop with an empty final stage."""
        fake = options.fake or Fake()
        draft = self._draft(fake, int(fake.script_s * SR), v2c.CHUNK_SEC, 3)
        try:
            name, code = resolve(language)
        except UnknownLanguage:
            name, code = "", ""
        return DraftLive(draft, name or None, lambda audio: "", "inline", emit, cancelled, options, engine="fake",
                         code=code)

    def _shout(self, when: str) -> None:
        if self.env.stderr_bytes > 0:
            sys.stderr.write(f"fake engine {when}: " + "x" * self.env.stderr_bytes + "\n")
            sys.stderr.flush()

    def close(self) -> None:
        self._shout("close")
        self._gpu_block = None

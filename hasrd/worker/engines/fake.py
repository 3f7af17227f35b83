"""The ``fake`` engine: no models, deterministic scripted drafts, and misbehaviour on request.

Knobs are read from the environment when the worker starts (the daemon passes its environment on), and
the per-request ones can also be given in ``options["fake"]``:

    HASR_FAKE_LOAD_SEC=2          slow load (reports a loading phase every 0.1 s)
    HASR_FAKE_FAIL_LOAD=code:msg  load fails with that code and message
    HASR_FAKE_CRASH_AFTER=N       serve N requests, then die (SIGKILL) at the start of the next
    HASR_FAKE_CRASH_MID=1         die (SIGKILL) half-way through every request         options: {"crash": true}
    HASR_FAKE_HANG=1              hang in every request, ignoring Cancel                options: {"hang": true}
    HASR_FAKE_RTF=0.5             take audio_s x RTF seconds per request                options: {"rtf": 0.5}
                                  (its draft chunks go through the worker's decode loop, where the chunks of
                                  up to HASR_WORKER_BATCH streams (default 16) take one chunk's time)
    HASR_FAKE_IGNORE_SIGTERM=1    ignore SIGTERM and Shutdown (only SIGKILL ends it)
    HASR_FAKE_SCRIPT=...          the draft text, revealed over the audio (default below)
                                  options: {"script": "..."} for one request
    HASR_FAKE_ALLOC_MB=N          allocate N MB on the GPU with torch while loaded (VRAM tests on a GPU host)
    HASR_FAKE_STDERR_BYTES=N      write one line of N bytes to stderr while loading and again at shutdown
                                  (what vLLM and Rust libraries do; the daemon must keep draining)
                                  options: {"fail": "code"} fails that request

The draft is the script's text revealed proportionally to the audio by :class:`ScriptedDraft`, which has
R2T2's streaming API, and the request runs through the real v2c pipeline (``hasrd.worker.v2c``, inline mode)
with a final stage that returns nothing: a sentence carrying ``|`` (what R2T2 emits for a truncated one) or
lacking an end mark is "re-transcribed", i.e. cut at ``|`` with engine "fw" and counted in fw_calls; other
sentences keep their draft text (engine "draft"). The hybrid engine can run the same scripted draft with the
real faster-whisper final stage (``HASR_DRAFT=scripted``, see hybrid.py).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from hasrd.worker import batcher, v2c
from hasrd.transcript import Transcript
from hasrd.worker.engine import Emitter, EngineError
from hasrd.languages import UnknownLanguage, resolve
from hasrd.worker.scripted import DEFAULT_SCRIPT, ScriptedDraft

SR = v2c.SR

SENT_END = v2c.SENT_END
DRAFT_BATCH = 16
"""Streams whose draft chunks one step takes when HASR_WORKER_BATCH is 0 (vLLM batches its requests itself)."""


def _sleep_longest(payloads: list[float]) -> list[None]:
    time.sleep(max(payloads))
    return [None] * len(payloads)


def draft_step(seconds: float) -> None:
    """One draft chunk's model time, in the worker's decode loop: a batch of several streams' chunks costs one
    chunk's time, as R2T2's requests batched by vLLM do (the stand-in for that; docs/CONFIG.md)."""
    batcher.default().run(("fake-draft",), 1, seconds, _sleep_longest)
class FakeEngine:
    name = "fake"

    def __init__(self, env: dict[str, str] | None = None) -> None:
        e = dict(os.environ if env is None else env)
        self.load_sec = float(e.get("HASR_FAKE_LOAD_SEC", "0") or 0)
        self.fail_load = e.get("HASR_FAKE_FAIL_LOAD", "")
        self.crash_after = int(e.get("HASR_FAKE_CRASH_AFTER", "-1") or -1)
        self.crash_mid = e.get("HASR_FAKE_CRASH_MID", "") == "1"
        self.hang = e.get("HASR_FAKE_HANG", "") == "1"
        self.rtf = float(e.get("HASR_FAKE_RTF", "0") or 0)
        self.ignore_term = e.get("HASR_FAKE_IGNORE_SIGTERM", "") == "1"
        self.script = e.get("HASR_FAKE_SCRIPT", "") or DEFAULT_SCRIPT
        self.alloc_mb = int(e.get("HASR_FAKE_ALLOC_MB", "0") or 0)
        self.stderr_bytes = int(e.get("HASR_FAKE_STDERR_BYTES", "0") or 0)
        self.served = 0
        self.batch = int(e.get("HASR_WORKER_BATCH", "0") or 0) or DRAFT_BATCH
        self._gpu_block: Any = None
        if self.ignore_term:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)

    @property
    def ignores_shutdown(self) -> bool:
        return self.ignore_term

    def load(self, phase: Callable[[str], None]) -> dict[str, Any]:
        t0 = time.monotonic()
        phase("loading fake models")
        self._shout("load")
        while time.monotonic() - t0 < self.load_sec:
            time.sleep(min(0.1, self.load_sec))
            phase(f"loading fake models {time.monotonic() - t0:.1f} s")
        if self.fail_load:
            code, _, msg = self.fail_load.partition(":")
            raise EngineError(code or "model_unavailable", msg or "the fake engine was told to fail its load")
        batcher.default().max_items = self.batch
        device = "cpu"
        if self.alloc_mb:
            import torch  # only on a GPU host, for the VRAM-release check

            n = self.alloc_mb * 1024 * 1024
            self._gpu_block = torch.empty(n, dtype=torch.uint8, device="cuda")
            self._gpu_block.fill_(1)
            torch.cuda.synchronize()
            device = f"cuda:{torch.cuda.current_device()}"
        print("fake engine: loaded (like vLLM, it prints to stdout; the worker sends that to stderr)")
        return {"engine": "fake", "models": {"draft": "scripted", "final": "scripted"}, "device": device,
                "script": self.script}

    def transcribe(self, pcm: np.ndarray, language: str, options: dict[str, Any], emit: Emitter,
                   cancelled: Callable[[], bool]) -> Transcript:
        opts = dict(options.get("fake") or {})
        if 0 <= self.crash_after <= self.served:
            os.kill(os.getpid(), signal.SIGKILL)
        self.served += 1
        if options.get("task") == "translate":  # like the draft-only engine: no translation
            raise EngineError("unsupported", "the fake engine cannot translate: run hasrd with --engine whisper")
        if opts.get("fail"):
            raise EngineError(str(opts["fail"]), f"the fake engine was told to fail with {opts['fail']}")
        hang = bool(opts.get("hang", self.hang))
        crash_mid = bool(opts.get("crash", self.crash_mid))
        rtf = float(opts.get("rtf", self.rtf))
        script = str(opts.get("script") or self.script)
        n = len(pcm)
        if n == 0:
            raise EngineError("invalid_audio", "no audio samples")
        chunks = v2c.n_chunks(n)
        per_chunk = (n / SR * rtf) / chunks if rtf > 0 else 0.0

        def on_chunk(i: int, total: int) -> None:
            if hang:
                while True:
                    time.sleep(3600)
            if crash_mid and i >= total // 2:
                os.kill(os.getpid(), signal.SIGKILL)
            if per_chunk:
                draft_step(per_chunk)

        try:
            _name, code = resolve(language)
        except UnknownLanguage:
            code = ""
        draft = ScriptedDraft(script, n, on_chunk)
        out = v2c.run(draft, pcm, language or None, lambda audio: "", emit=emit, cancelled=cancelled,
                      mode="inline")
        result = v2c.result("fake", language, code, out, n)
        result.draft = script
        result.final = "".join(p.text for p in out.per_sentence)  # the script decides its own spacing
        result.options = {k: v for k, v in options.items() if k != "fake"}  # what reached the worker (tests)
        return result

    def live(self, language: str, options: dict[str, Any], emit: Any, cancelled: Callable[[], bool]) -> Any:
        """The scripted draft over a live stream: the script is revealed over ``script_s`` seconds of speech
        (options ``fake.script_s``, default 3), through the real live v2c loop with an empty final stage."""
        from hasrd.worker.live_draft import DraftLive

        opts = dict(options.get("fake") or {})
        if opts.get("fail"):
            raise EngineError(str(opts["fail"]), f"the fake engine was told to fail with {opts['fail']}")
        script = str(opts.get("script") or self.script)
        rtf = float(opts.get("rtf", self.rtf))
        crash_mid = bool(opts.get("crash", self.crash_mid))
        hang = bool(opts.get("hang", self.hang))

        def on_chunk(i: int, total: int) -> None:
            if hang:
                while True:
                    time.sleep(3600)
            if crash_mid and i >= 3:
                os.kill(os.getpid(), signal.SIGKILL)
            if rtf:
                draft_step(v2c.CHUNK_SEC * rtf)

        try:
            name, code = resolve(language)
        except UnknownLanguage:
            name, code = "", ""
        draft = ScriptedDraft(script, int(float(opts.get("script_s") or 3.0) * SR), on_chunk)
        return DraftLive(draft, name or None, lambda audio: "", "inline", emit, cancelled, options,
                         engine="fake", code=code)

    def _shout(self, when: str) -> None:
        if self.stderr_bytes > 0:
            import sys

            sys.stderr.write(f"fake engine {when}: " + "x" * self.stderr_bytes + "\n")
            sys.stderr.flush()

    def close(self) -> None:
        self._shout("close")
        self._gpu_block = None

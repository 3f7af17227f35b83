"""The ``fake`` engine: no models, deterministic scripted drafts, and misbehaviour on request.

Knobs are read from the environment when the worker starts (the supervisor passes its environment on), and
the per-request ones can also be given in ``options["fake"]``:

    HASR_FAKE_LOAD_SEC=2          slow load (reports a loading phase every 0.1 s)
    HASR_FAKE_FAIL_LOAD=code:msg  load fails with that code and message
    HASR_FAKE_CRASH_AFTER=N       serve N requests, then die (SIGKILL) at the start of the next
    HASR_FAKE_CRASH_MID=1         die (SIGKILL) half-way through every request         options: {"crash": true}
    HASR_FAKE_HANG=1              hang in every request, ignoring Cancel                options: {"hang": true}
    HASR_FAKE_RTF=0.5             take audio_s x RTF seconds per request                options: {"rtf": 0.5}
    HASR_FAKE_IGNORE_SIGTERM=1    ignore SIGTERM and Shutdown (only SIGKILL ends it)
    HASR_FAKE_SCRIPT=...          the draft text, revealed over the audio (default below)
    HASR_FAKE_ALLOC_MB=N          allocate N MB on the GPU with torch while loaded (VRAM tests on a GPU host)
                                  options: {"fail": "code"} fails that request

The draft is the script's text revealed proportionally to the audio; sentences end at SENT_END marks, and a
sentence carrying ``|`` is what R2T2 emits for a truncated one (the v2c pipeline re-transcribes those).
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any, Callable

import numpy as np

from hasrd.worker.engines import EngineError, Emitter

SENT_END = "。！？；?!;"
DEFAULT_SCRIPT = "今天天气很好。我们去公园散步|吧。"
SR = 16000
CHUNK = 2560  # 160 ms


def split_sentences(text: str) -> list[str]:
    """Split after every SENT_END mark; trailing text without a mark is its own sentence."""
    out: list[str] = []
    cur = ""
    for ch in text:
        cur += ch
        if ch in SENT_END:
            out.append(cur)
            cur = ""
    if cur:
        out.append(cur)
    return out


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
        self.served = 0
        self._gpu_block: Any = None
        if self.ignore_term:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)

    @property
    def ignores_shutdown(self) -> bool:
        return self.ignore_term

    def load(self, phase: Callable[[str], None]) -> dict[str, Any]:
        t0 = time.monotonic()
        phase("loading fake models")
        while time.monotonic() - t0 < self.load_sec:
            time.sleep(min(0.1, self.load_sec))
            phase(f"loading fake models {time.monotonic() - t0:.1f} s")
        if self.fail_load:
            code, _, msg = self.fail_load.partition(":")
            raise EngineError(code or "model_unavailable", msg or "the fake engine was told to fail its load")
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
                   cancelled: Callable[[], bool]) -> dict[str, Any]:
        opts = dict(options.get("fake") or {})
        if 0 <= self.crash_after <= self.served:
            os.kill(os.getpid(), signal.SIGKILL)
        self.served += 1
        if opts.get("fail"):
            raise EngineError(str(opts["fail"]), f"the fake engine was told to fail with {opts['fail']}")
        hang = bool(opts.get("hang", self.hang))
        crash_mid = bool(opts.get("crash", self.crash_mid))
        rtf = float(opts.get("rtf", self.rtf))
        t0 = time.monotonic()
        n = len(pcm)
        total_s = n / SR
        if n == 0:
            raise EngineError("invalid_audio", "no audio samples")
        chunks = max(1, (n + CHUNK - 1) // CHUNK)
        script = self.script
        per_chunk = (total_s * rtf) / chunks if rtf > 0 else 0.0
        revealed = 0
        sent_idx = 0
        sentences = split_sentences(script)
        bounds = []  # (end_char, sentence_text)
        acc = 0
        for s in sentences:
            acc += len(s)
            bounds.append(acc)
        win_start_chunk = 0
        per_sentence: list[dict[str, Any]] = []
        sent_windows: list[dict[str, Any]] = []
        first_text_s = None
        for i in range(chunks):
            if hang:
                while True:
                    time.sleep(3600)
            if cancelled():
                raise EngineError("cancelled", "the request was cancelled")
            if crash_mid and i >= chunks // 2:
                os.kill(os.getpid(), signal.SIGKILL)
            if per_chunk:
                time.sleep(per_chunk)
            want = (len(script) * (i + 1)) // chunks
            if want > revealed:
                revealed = want
                if first_text_s is None:
                    first_text_s = round((i + 1) * 0.160, 3)
                emit.draft(script[:revealed])
                while sent_idx < len(sentences) and revealed >= bounds[sent_idx]:
                    text = sentences[sent_idx]
                    truncated = "|" in text or not any(m in text for m in SENT_END)
                    final = text.split("|")[0] if truncated else text
                    start_s = round(win_start_chunk * CHUNK / SR, 3)
                    end_s = round(min(n, (i + 1) * CHUNK) / SR, 3)
                    eng = "fw" if truncated else "draft"
                    emit.sentence(sent_idx, final, eng, start_s, end_s)
                    per_sentence.append({"text": final, "engine": eng, "start_s": start_s, "end_s": end_s})
                    sent_windows.append({"text": text, "start_chunk": win_start_chunk, "end_chunk": i})
                    sent_idx += 1
                    win_start_chunk = i + 1
            emit.progress(round(min(n, (i + 1) * CHUNK) / SR, 3), round(total_s, 3))
        elapsed = time.monotonic() - t0
        return {
            "engine": "fake",
            "language": language,
            "draft": script,
            "final": "".join(p["text"] for p in per_sentence),
            "sent_windows": sent_windows,
            "fw_calls": sum(1 for p in per_sentence if p["engine"] == "fw"),
            "first_text_s": first_text_s,
            "per_sentence": per_sentence,
            "duration_s": round(total_s, 3),
            "timings": {"draft_s": round(elapsed, 4), "final_s": 0.0},
        }

    def close(self) -> None:
        self._gpu_block = None

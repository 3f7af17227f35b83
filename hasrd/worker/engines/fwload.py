"""faster-whisper on a device: the compute type and batch by device, the model's load, the GPU warm-up, and CUDA's
failures as the worker reports them (the whisper and hybrid engines load through this).

The defaults by device are measured (docs/GPU.md): float16 and batches of 16 on CUDA, int8 and 2 on the CPU; across a
worker's jobs, steps of up to 32 windows on CUDA and 8 on the CPU (docs/CONFIG.md).
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

import numpy as np

from hasrd import cudalibs, placement
from hasrd.config import Settings
from hasrd.models import FwModel
from hasrd.worker.engine import EngineError

if TYPE_CHECKING:
    from faster_whisper import WhisperModel

SR = 16000


def compute_type_for(device: str, setting: str) -> str:
    """float16 on CUDA, int8 on the CPU, unless a compute type is configured."""
    if setting and setting != "default":
        return setting
    return "float16" if device == "cuda" else "int8"


BATCH_BY_DEVICE = {"cpu": 2, "cuda": 16}
"""VAD clips decoded together when HASR_WHISPER_BATCH is -1 (docs/CONFIG.md has the measurements behind them)."""


def batch_for(device: str, setting: int) -> int:
    """The batch the whisper engine decodes with: the setting, or by device when it is negative (pure)."""
    if setting >= 0:
        return setting
    return BATCH_BY_DEVICE.get(device, BATCH_BY_DEVICE["cpu"])


def load_shared(model: FwModel, device: str, compute_type: str, settings: Settings) -> tuple[WhisperModel, int, int]:
    """The worker's WhisperModel, its lanes and its batch: loaded with one CTranslate2 replica per lane of the decode
    loop the worker builds for it (HASR_WORKER_STREAMS; on a GPU the replicas share the weights, each on its own
    CUDA stream), which takes up to HASR_WORKER_BATCH windows a step from all the jobs the worker holds
    (hasrd.worker.ct2batch; placement has the defaults by device and docs/CONFIG.md the figures behind them)."""
    where = placement.CPU if device == "cpu" else device
    lanes = placement.streams_for(where, max(0, settings.worker_streams))
    return (load_model(model, device, compute_type, replicas=lanes), lanes,
            placement.batch_for(where, max(0, settings.worker_batch)))


def warm_up(model: WhisperModel, name: str) -> float:
    """Seconds spent running what a request runs (language detection, beam search, word alignment) once on a second
    of quiet noise.

    Why: on a GPU the first use of CTranslate2's kernels costs seconds (measured on the H200: ~10 s for the first
    5 s clip of a fresh machine, 0.24 s in any later process; the driver compiles the kernels the wheel ships as
    PTX only, and caches them). Paying it here makes it part of the load, shown as a loading phase, instead of
    the first request's wait. A CUDA failure here (cuBLAS 12 missing) is the load's, as :func:`cuda_error` says.
    """
    t0 = time.monotonic()
    noise = (np.random.default_rng(0).standard_normal(SR) * 1e-3).astype(np.float32)
    try:
        model.detect_language(audio=noise)
        segments, _info = model.transcribe(noise, language="en", beam_size=5, word_timestamps=True,
                                           vad_filter=False, temperature=0.0, condition_on_previous_text=False)
        for _segment in segments:
            pass
    except (RuntimeError, ValueError, OSError) as e:
        raise cuda_error(e, name) from None
    return round(time.monotonic() - t0, 3)


def load_model(model: FwModel, device: str, compute_type: str, device_index: int = 0,
               replicas: int = 1) -> WhisperModel:
    """WhisperModel(...) with failures mapped to protocol codes and sentences; ``replicas`` calls may run at once
    (CTranslate2's inter_threads: on a GPU the replicas share the weights, each on its own CUDA stream)."""
    from faster_whisper import WhisperModel

    if device == "cuda":
        cudalibs.preload_cuda12()  # the nvidia-cublas-cu12 wheel, where CTranslate2 does not look by itself
    try:
        if model.files is not None:
            return WhisperModel(model.name, device=device, device_index=device_index, compute_type=compute_type,
                                files=dict(model.files), num_workers=max(1, replicas))
        return WhisperModel(model.path or model.name, device=device, device_index=device_index,
                            compute_type=compute_type, local_files_only=True, num_workers=max(1, replicas))
    except (RuntimeError, ValueError, OSError) as e:
        msg = str(e)
        if device == "cuda" and ("cuda" in msg.lower() or "libcu" in msg.lower() or "memory" in msg.lower()):
            raise cuda_error(e, model.name) from None
        if "out of memory" in msg.lower():
            raise EngineError("out_of_memory", f"faster-whisper ran out of memory loading {model.name} on "
                                               f"{device}: {msg}") from None
        print(f"hasr worker: loading {model.path or model.name} failed: {msg}", file=sys.stderr, flush=True)
        raise EngineError("model_unavailable", f"faster-whisper could not load {model.path or model.name} on "
                                               f"{device} ({compute_type}): {load_failure(msg)}") from None


def load_failure(msg: str) -> str:
    """Why a model did not load, in words of ours: CTranslate2's own message may quote what it read from the
    file (a 'binary version' is its first bytes read as a number), which a caller who named the directory
    must not learn. The whole message goes to the daemon's log."""
    low = msg.lower()
    if "binary version" in low or "unsupported model" in low:
        return "model.bin is not a CTranslate2 model this version reads"
    if "incomplete" in low or "failed to read" in low:
        return "model.bin is incomplete"
    if "config.json" in low or "tokenizer" in low or "vocabulary" in low:
        return "the directory lacks a file a whisper model needs (config.json, tokenizer.json, vocabulary)"
    if "no such file" in low or "not found" in low or "does not exist" in low:
        return "a file of the model is missing"
    return "it is not a whisper model faster-whisper can load (the daemon's log has CTranslate2's message)"


def cuda_error(e: BaseException, model: str) -> EngineError:
    """A CUDA failure while loading or warming up, as the worker reports it: a missing CUDA 12 library gets
    cudalibs' advice and its own code, running out of memory out_of_memory, anything else model_unavailable."""
    msg = str(e)
    lib = cudalibs.missing_library(msg)
    if lib:
        return EngineError(cudalibs.CODE, cudalibs.advice(lib, sys.executable, cudalibs.find_cuda13()))
    if "out of memory" in msg.lower():
        return EngineError("out_of_memory", f"faster-whisper ran out of GPU memory loading {model}: {msg}")
    return EngineError("model_unavailable", f"faster-whisper cannot run {model} on the GPU ({msg}); or set "
                                            f"HASR_FW_DEVICE=cpu")

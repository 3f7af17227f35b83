"""A speaker-embedding model run by ONNX Runtime: a window of speech in, one vector that is near the vectors of the
same voice out (the diarization's ear, diarize.py).

The interface is WeSpeaker's ONNX exports' (the ResNet34 family ``hasrctl pull wespeaker-resnet34`` fetches):
input ``[batch, frames, 80]`` Kaldi-style log-mel filterbanks (25 ms frames every 10 ms, 16-bit scale, Hamming
window, each band's mean over the window taken out), output ``[batch, dim]``. :func:`fbank` computes those
features in numpy (no torch in the worker's CPU install), :func:`check` tells a usable model from anything else
before it is installed or used, :class:`SpeakerModel` embeds windows in batches.

ONNX Runtime comes with faster-whisper (its Silero VAD), so the CPU install needs nothing more; it is imported
here only, in the worker (or ``hasrctl pull`` checking a file it imports).
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING, Any

import numpy as np

from hasrd.errors import EngineError

if TYPE_CHECKING:
    import onnxruntime

SR = 16000
MELS = 80
FRAME = 400  # 25 ms
HOP = 160  # 10 ms
FFT = 512
MIN_DIM, MAX_DIM = 8, 8192


class BadSpeakerModel(EngineError):
    """The file is not a speaker-embedding model hasr can run; the message says what is wrong with it."""

    def __init__(self, message: str) -> None:
        super().__init__("invalid_speaker_model", message)


@functools.lru_cache(maxsize=2)
def _mel_banks(mels: int = MELS) -> np.ndarray:
    """Kaldi's triangular mel filters (``1127 ln(1 + f/700)``, 20 Hz to Nyquist) over the FFT's bins: [bins, mels]."""
    def mel(f: np.ndarray | float) -> np.ndarray:
        return 1127.0 * np.log(1.0 + np.asarray(f, dtype=np.float64) / 700.0)

    lo, hi = mel(20.0), mel(SR / 2)
    centres = lo + (hi - lo) * np.arange(mels + 2) / (mels + 1)
    freqs = mel(np.arange(FFT // 2 + 1) * SR / FFT)
    banks = np.zeros((FFT // 2 + 1, mels), dtype=np.float32)
    for m in range(mels):
        left, centre, right = centres[m], centres[m + 1], centres[m + 2]
        up = (freqs - left) / (centre - left)
        down = (right - freqs) / (right - centre)
        banks[:, m] = np.maximum(0.0, np.minimum(up, down))
    return banks


def fbank(samples: np.ndarray, mels: int = MELS) -> np.ndarray:
    """Log-mel filterbank features of 16 kHz float PCM as WeSpeaker computes them (torchaudio's Kaldi fbank with
    dither 0, Hamming window, then the mean over time taken out): [frames, mels] float32 ([0, mels] when shorter
    than one frame)."""
    feats = logmel(samples, mels)
    return (feats - feats.mean(axis=0, keepdims=True)).astype(np.float32) if len(feats) else feats


def frames_of(seconds: float) -> int:
    """How many feature frames ``seconds`` of audio give (Kaldi's snip_edges: whole frames only)."""
    n = int(round(seconds * SR))
    return 1 + (n - FRAME) // HOP if n >= FRAME else 0


def logmel(samples: np.ndarray, mels: int = MELS) -> np.ndarray:
    """:func:`fbank` before the mean is taken out: a long stretch is computed once and its windows sliced from it
    (frame k starts at k * 10 ms), each then centred on its own."""
    x = np.asarray(samples, dtype=np.float32) * 32768.0
    n = 1 + (len(x) - FRAME) // HOP if len(x) >= FRAME else 0
    if n <= 0:
        return np.zeros((0, mels), dtype=np.float32)
    frames = np.lib.stride_tricks.as_strided(x, shape=(n, FRAME), strides=(x.strides[0] * HOP, x.strides[0]))
    frames = frames - frames.mean(axis=1, keepdims=True)
    emphasised = np.empty_like(frames)
    emphasised[:, 1:] = frames[:, 1:] - 0.97 * frames[:, :-1]
    emphasised[:, 0] = frames[:, 0] * (1 - 0.97)
    power = np.abs(np.fft.rfft(emphasised * np.hamming(FRAME).astype(np.float32), n=FFT)) ** 2
    return np.log(np.maximum(power.astype(np.float32) @ _mel_banks(mels), np.finfo(np.float32).eps))


def _session(path: str) -> onnxruntime.InferenceSession:
    import onnxruntime

    opts = onnxruntime.SessionOptions()
    opts.log_severity_level = 3  # its warnings about unused initializers are not the user's business
    opts.intra_op_num_threads = max(1, min(4, len(os.sched_getaffinity(0))))
    try:
        return onnxruntime.InferenceSession(path, sess_options=opts, providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime raises its own Fail / InvalidProtobuf / NoSuchFile: all "not a model"
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise BadSpeakerModel(f"{path} is not an ONNX model ONNX Runtime can load ({first[:200]})") from None


def _interface(sess: onnxruntime.InferenceSession, path: str) -> tuple[str, int]:
    """(input name, feature size) of a model whose one input is ``[batch, frames, features]``."""
    inputs = sess.get_inputs()
    if len(inputs) != 1 or len(inputs[0].shape) != 3:
        shapes = ", ".join(f"{i.name} {i.shape}" for i in inputs)
        raise BadSpeakerModel(f"{path} is not a speaker-embedding model of the kind hasr runs: it takes {shapes}, "
                              f"not one [batch, frames, {MELS}] filterbank input")
    feat = inputs[0].shape[2]
    if feat != MELS:
        raise BadSpeakerModel(f"{path} takes {feat} features a frame; hasr computes {MELS}-band filterbanks "
                              f"(WeSpeaker's interface)")
    return inputs[0].name, MELS


def _probe(sess: onnxruntime.InferenceSession, name: str, path: str) -> int:
    """Run the model on one second of silence's features: its output must be one vector per window."""
    try:
        out = sess.run(None, {name: np.zeros((2, 98, MELS), dtype=np.float32)})[0]
    except Exception as e:
        raise BadSpeakerModel(f"{path} fails on filterbank input: {str(e).strip().splitlines()[0][:200]}") from None
    shape = tuple(np.asarray(out).shape)
    if len(shape) != 2 or shape[0] != 2 or not MIN_DIM <= shape[1] <= MAX_DIM:
        raise BadSpeakerModel(f"{path} gives output of shape {list(shape)} for 2 windows; a speaker-embedding model "
                              f"gives one vector of {MIN_DIM}-{MAX_DIM} numbers per window")
    return int(shape[1])


def check(path: str) -> int:
    """The embedding size of the speaker-embedding model at ``path``, or BadSpeakerModel saying why it is not one
    (not ONNX, another input, not one vector per window)."""
    if not os.path.isfile(path):
        raise BadSpeakerModel(f"{path} is not a file")
    sess = _session(path)
    name, _ = _interface(sess, path)
    return _probe(sess, name, path)


class SpeakerModel:
    """A loaded, checked model: :meth:`embed` gives unit vectors, one per window of speech."""

    def __init__(self, path: str) -> None:
        if not os.path.isfile(path):
            raise BadSpeakerModel(f"{path} is not a file")
        self.path = path
        self._sess = _session(path)
        self._input, _ = _interface(self._sess, path)
        self.dim = _probe(self._sess, self._input, path)

    def embed(self, windows: list[np.ndarray], batch: int = 32) -> np.ndarray:
        """[len(windows), dim] unit vectors of windows of PCM (:meth:`embed_feats` of their fbank)."""
        return self.embed_feats([fbank(w) for w in windows], batch)

    def embed_feats(self, feats: list[np.ndarray], batch: int = 32) -> np.ndarray:
        """[len(feats), dim] unit vectors of windows' features; windows of the same length run together (``batch``
        at a time); a window without frames gets zeros (no voice)."""
        out = np.zeros((len(feats), self.dim), dtype=np.float32)
        by_len: dict[int, list[int]] = {}
        for k, f in enumerate(feats):
            if len(f):
                by_len.setdefault(len(f), []).append(k)
        for idx in by_len.values():
            for i in range(0, len(idx), batch):
                part = idx[i:i + batch]
                got: Any = self._sess.run(None, {self._input: np.stack([feats[k] for k in part])})[0]
                out[part] = np.asarray(got, dtype=np.float32).reshape(len(part), self.dim)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.maximum(norms, 1e-9)

"""A small speaker-embedding ONNX model with fixed weights, built by the tests (the real WeSpeaker model cannot be
fetched on these machines): it has WeSpeaker's interface (``feats [batch, frames, 80]`` log-mel filterbanks with
the mean over time taken out, ``embs [batch, dim]``), so hasr loads, checks and runs it exactly as it would the real
one, and it tells voices of different pitch apart, which is what espeak-ng's voices differ by.

How it hears a voice: each frame's low bands (about 100 Hz to 2 kHz) are matched against harmonic templates, the
log-mel pattern of a voice whose pitch is F0, for 40 pitches from 70 to 400 Hz (the frame's own level taken out,
so only the pattern counts); a softmax turns the matches into how likely each pitch is, and the window's
embedding is the average over its frames, centred: a histogram of the pitches the voice spoke at. espeak-ng's
male and female English voices come out about 0.1 apart in cosine similarity while windows of one voice are
about 0.9 from their own centre; a copy pitched down or up by half an octave is a voice of its own.

Variants that are wrong on purpose (``feat_dim``, ``per_frame``) are the bad models of the tests.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hasrd.worker.speakermodel import FFT, SR, _mel_banks

LO, HI = 2, 45  # the bands matched: ~100 Hz to ~2 kHz
F0S = np.geomspace(70.0, 400.0, 40)
SHARPNESS = 20.0  # the softmax's scale over the templates' correlations (-1..1)


def templates(mels: int = 80) -> tuple[np.ndarray, np.ndarray]:
    """([mels, pitches] harmonic templates, unit length and zero mean over LO:HI; [mels, mels] the projection that
    centres a frame's LO:HI bands)."""
    banks = _mel_banks(80)
    freqs = np.arange(FFT // 2 + 1) * SR / FFT
    out = np.zeros((80, len(F0S)), dtype=np.float64)
    for j, f0 in enumerate(F0S):
        spec = np.zeros_like(freqs)
        for h in range(1, int(1500 / f0) + 1):
            spec += np.exp(-0.5 * ((freqs - h * f0) / (f0 * 0.08)) ** 2)
        seg = np.log(spec @ banks + 1e-3)[LO:HI]
        seg = seg - seg.mean()
        out[LO:HI, j] = seg / np.linalg.norm(seg)
    n = HI - LO
    centre = np.zeros((80, 80))
    centre[LO:HI, LO:HI] = np.eye(n) - 1.0 / n
    return out[:mels].astype(np.float32), centre[:mels, :mels].astype(np.float32)


def build(path: Path, *, feat_dim: int = 80, per_frame: bool = False) -> Path:
    """Write the model to ``path``. ``feat_dim`` other than 80 makes a model hasr must refuse (another input);
    ``per_frame`` one whose output is a vector per frame, not per window (refused too)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    tm, centre = templates(feat_dim)
    inits = [numpy_helper.from_array(tm, "templates"), numpy_helper.from_array(centre, "centre"),
             numpy_helper.from_array(np.array(1e-3, np.float32), "eps"),
             numpy_helper.from_array(np.array(SHARPNESS, np.float32), "sharp"),
             numpy_helper.from_array(np.array(1.0 / len(F0S), np.float32), "uniform"),
             numpy_helper.from_array(np.array([-1], np.int64), "last")]
    nodes = [
        helper.make_node("MatMul", ["feats", "templates"], ["match"]),  # [B, T, P]
        helper.make_node("MatMul", ["feats", "centre"], ["centred"]),  # [B, T, 80]
        helper.make_node("Mul", ["centred", "centred"], ["sq"]),
        helper.make_node("ReduceSum", ["sq", "last"], ["sumsq"], keepdims=1),
        helper.make_node("Sqrt", ["sumsq"], ["norm"]),
        helper.make_node("Add", ["norm", "eps"], ["norm_eps"]),
        helper.make_node("Div", ["match", "norm_eps"], ["corr"]),
        helper.make_node("Mul", ["corr", "sharp"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["pitch"], axis=-1),
    ]
    if per_frame:
        nodes.append(helper.make_node("Sub", ["pitch", "uniform"], ["embs"]))
        out_shape: list[str | int] = ["B", "T", len(F0S)]
    else:
        nodes += [helper.make_node("ReduceMean", ["pitch"], ["hist"], axes=[1], keepdims=0),
                  helper.make_node("Sub", ["hist", "uniform"], ["embs"])]
        out_shape = ["B", len(F0S)]
    graph = helper.make_graph(
        nodes, "hasr-test-speakernet",
        [helper.make_tensor_value_info("feats", TensorProto.FLOAT, ["B", "T", feat_dim])],
        [helper.make_tensor_value_info("embs", TensorProto.FLOAT, out_shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="hasr-tests")
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path

"""Which real engine to build: what is available here, and the ``auto`` rule (docs/ARCHITECTURE.md "Engines";
models: hasrd/models.py).

``auto`` is :func:`choose`, a pure function of :class:`Available`. A model that is *configured* (HASR_FW_MODEL,
HASR_R2T2_MODEL) but missing is always an error, never silently replaced. Unconfigured, models come from the local
Hugging Face cache only (no downloads in the worker): R2T2's weights, and faster-whisper large-v3 on a GPU (the
whisper engine where the cache has it), else the embedded whisper base.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hasrd import config
from hasrd.worker.engine import Engine, EngineError
from hasrd.models import GPU_DEFAULT, fw_found, resolve_fw, resolve_weights
from hasrd.worker.engines.fwload import compute_type_for

@dataclass(frozen=True)
class Available:
    """What this machine offers; every field has a human detail for the error and /api/ps."""

    cuda: bool = False
    r2t2: str = "unchecked"  # ok | missing | unrelated | broken | unchecked
    r2t2_weights: bool = False
    fw_model: bool = False  # the configured model, or large-v3 in the cache when none is configured
    fw_configured: bool = False
    r2t2_configured: bool = False
    embedded: bool = False
    fw_device: str = "auto"  # the HASR_FW_DEVICE setting
    details: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Choice:
    engine: str  # hybrid | whisper
    model: str  # configured | gpu-default | embedded
    device: str  # cuda | cpu
    reason: str


def choose(av: Available) -> Choice:
    """The ``auto`` rule (pure)."""
    d = av.details
    if av.fw_configured and not av.fw_model:
        raise EngineError("model_unavailable", d.get("fw_model", "the configured faster-whisper model is missing"))
    if av.r2t2_configured and not av.r2t2_weights:
        raise EngineError("model_unavailable", d.get("r2t2_weights", "the configured R2T2 weights are missing"))
    fw_cuda = (av.cuda and av.fw_device != "cpu") or av.fw_device == "cuda"
    model = "configured" if av.fw_configured else "gpu-default"
    if av.cuda and av.r2t2 == "ok" and av.r2t2_weights and av.fw_model:
        return Choice("hybrid", model, "cuda" if fw_cuda else "cpu", "R2T2, CUDA and both models are available")
    # without CUDA that is the whole reason: the downloads the hybrid also lacks (R2T2's 4.1 GB) would not run here
    missing = [d[k] for k in ("cuda",) if k in d] or [d[k] for k in ("r2t2", "r2t2_weights", "fw_model") if k in d]
    why = "hybrid unavailable: " + "; ".join(missing) if missing else "hybrid unavailable"
    if fw_cuda and (av.fw_model or av.embedded):
        return Choice("whisper", model if av.fw_model else "embedded", "cuda", why)
    if av.fw_configured:
        return Choice("whisper", "configured", "cpu", why)
    if av.embedded:
        return Choice("whisper", "embedded", "cpu", why)
    raise EngineError("model_unavailable", "no engine can run here: " + "; ".join(
        missing + [d.get("embedded", "the embedded model is not installed: pip install 'hasr[cpu]'")]))


def cuda_devices() -> tuple[bool, str]:
    try:
        import ctranslate2

        n = ctranslate2.get_cuda_device_count()
    except Exception as e:
        return False, f"no usable CUDA ({type(e).__name__}: {e})"
    return n > 0, f"{n} CUDA device(s)" if n else "no CUDA device is usable (CTranslate2 sees none)"


def probe(settings: config.Settings) -> Available:
    """Look at this machine (cheap checks first; R2T2 is imported only when CUDA and its weights are there)."""
    from hasrd.worker.engines.r2t2 import import_r2t2

    details: dict[str, str] = {}
    cuda, why = cuda_devices()
    if not cuda:
        details["cuda"] = why
    weights = False
    try:
        resolve_weights(settings.r2t2_model)
        weights = True
    except EngineError as e:
        details["r2t2_weights"] = e.message
    r2t2 = "unchecked"
    if cuda and weights:
        try:
            import_r2t2()
            r2t2 = "ok"
        except EngineError as e:
            r2t2 = "unrelated" if "unrelated" in e.message else "missing"
            details["r2t2"] = e.message
    fw_spec = settings.fw_model or (GPU_DEFAULT if cuda else "")
    fw_model = False
    if fw_spec:
        try:
            resolve_fw(fw_spec)
            fw_model = True
        except EngineError as e:
            details["fw_model"] = e.message
    embedded_ok = False
    try:
        from hasrd import embedded

        embedded.sources()
        embedded_ok = True
    except EngineError as e:
        details["embedded"] = e.message
    return Available(cuda=cuda, r2t2=r2t2, r2t2_weights=weights, fw_model=fw_model,
                     fw_configured=bool(settings.fw_model), r2t2_configured=bool(settings.r2t2_model),
                     embedded=embedded_ok, fw_device=settings.fw_device, details=details)


def package_versions() -> dict[str, str]:
    from hasrd.worker.engines.r2t2 import versions

    return versions("faster-whisper", "ctranslate2", "vllm", "confucius4-r2t2", "torch", "onnxruntime")


def create_real(name: str, settings: config.Settings | None = None) -> Engine:
    """Build the engine ``name`` (auto | hybrid | whisper | r2t2); nothing heavy is loaded until load()."""
    s = settings or config.load()
    ident: dict[str, Any] = {"versions": package_versions()}
    if name == "r2t2":
        from hasrd.worker.engines.r2t2 import R2T2Engine

        return R2T2Engine(s)
    cuda, _why = cuda_devices() if s.fw_device == "auto" else (s.fw_device == "cuda", "")
    if name == "auto":
        choice = choose(probe(s))
        ident.update(selected_by="auto", auto_reason=choice.reason)
        name, device = choice.engine, choice.device
        spec = s.fw_model if choice.model == "configured" else GPU_DEFAULT if choice.model == "gpu-default" else ""
    elif name in ("hybrid", "whisper"):
        real_draft = name == "hybrid" and s.draft == "r2t2"
        device = s.fw_device if s.fw_device != "auto" else ("cuda" if cuda or real_draft else "cpu")
        # large-v3 where it is found: pulled into the Hugging Face cache or imported into the data directory
        gpu_default = device == "cuda" and (real_draft or fw_found(GPU_DEFAULT))
        spec = s.fw_model or (GPU_DEFAULT if gpu_default else "")
    else:
        raise EngineError("model_unavailable", f"unknown engine {name!r}")
    compute = compute_type_for(device, s.fw_compute_type)
    if name == "hybrid":
        from hasrd.worker.engines.hybrid import HybridEngine

        return HybridEngine(s, spec, device, compute, identity=ident)
    from hasrd.worker.engines.whisper import WhisperEngine

    return WhisperEngine(s, spec, device, compute, identity=ident)

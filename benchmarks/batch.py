"""``hasrctl batch`` on Ray against the daemon transcribing the same files one after another, in one run.

Real faster-whisper base on the CPU (HASR_ENGINE=auto HASR_FW_DEVICE=cpu, as tests/test_batch.py runs it) on real
speech: the six clips of tests/data joined with sox into ``--files`` FLAC files of about ``--min-sec`` to
``--max-sec`` seconds (English and Mandarin in turn; each file the clips of its language one after another with
0.5 s pauses), written to a temporary directory. Measured side by side:

1. The daemon: ``hasrctl transcribe -q -f text FILE`` (the txt) for each file in turn, the daemon autostarted by
   the first call with private XDG dirs (tests/cliutil.cli_env) and HASR_MAX_WORKERS=1. Its worker is warmed
   first with tests/data/en_hello_world.flac, so the daemon's start and the model's load are NOT in its figure
   (printed apart). Each file's time includes hasrctl's own process start, as a person waits for it.
2. ``hasrctl batch DIR -o OUT --workers 1 --no-progress -q``, and the same with ``--workers 2`` (a fresh OUT
   each), on the local Ray the command starts itself (its own RAY_TMPDIR, so nothing here touches another Ray
   of the host). "wall" is the whole command: Ray's start, the actors' start and model load, the files, Ray's
   stop. "excl. startup" is the window from the first moment an actor is seen running a file (Ray titles the
   process ``ray::MapWorker(...).submit``; this run's actors only, polled every 0.2 s) to the last row landing
   in OUT: it leaves out Ray's start, the actors' start and model load and Ray's stop, and keeps every gap
   between files.
3. The ``--workers 2`` command again over its OUT (everything up to date): its wall time against the first.
4. A two-node Ray cluster on this one host, ``ray start --head --port=PORT --num-cpus=1`` and ``ray start
   --address=127.0.0.1:PORT --num-cpus=1`` (a private RAY_TMPDIR; PYTHONPATH is this tree), then ``hasrctl
   batch ... --address 127.0.0.1:PORT --workers 2``: which node and pid did each file (an actor's node is the
   raylet it descends from) and the throughput. The ``ray start`` times are printed, not counted. Ray 2.60
   turns token authentication on for ``ray start --head`` when ~/.ray/auth_token exists (any local
   ``ray.init()`` writes it, hasrctl batch's own local runs included), but neither for ``ray start --address``
   nor for a driver given an explicit address: without RAY_AUTH_MODE=token both fail (InvalidAuthToken; the
   driver after about 20 s, exit 3). So the cluster, its second node and the driver get RAY_AUTH_MODE
   (``token`` when a token exists, else ``disabled``). At the end only this cluster's processes are killed, by
   pid (those naming its RAY_TMPDIR, and their children): ``ray stop --force`` would also end every other Ray
   of the host, a test suite's beside this one. If the cluster does not come up, the reason is printed and the
   table goes on without it.

Printed: per mode the actors (pid, node, files, busy seconds, model load), and a table of seconds of audio per
wall second, with and without the startup, and the ratio to the daemon's, all measured in this run; the
rerun's time; and whether each file's batch text equals the daemon's (OUT's .txt byte for byte against
``hasrctl transcribe -f text``; the manifest's ``text`` against that .txt with all white space left out). The
load average is printed before and after: other work on the host skews every row.

    python benchmarks/batch.py [--quick] [--files 8] [--min-sec 20] [--max-sec 40] [--skip-cluster] [--keep]

``--quick``: 4 files of about 8-12 s (the whole pipeline in about a minute; the ratios mean little).

Measured on this 2-core machine (2026-12-02, Ray 2.60, whisper base int8; 8 files, 255 s of audio, 23-42 s
each; load average 0.2 at the start): the daemon 5.45x real time (46.7 s; its warm-up 2.0 s not counted);
batch with 1 worker 4.62x wall (55.2 s, 0.85 of the daemon), 5.65x excluding the 8.3 s until its first file
(1.04); 2 workers 7.11x wall (35.8 s, 1.30), 9.23x excluding 6.9 s of startup (1.69); the two-node cluster, 2
workers of 1 CPU, 7.81x wall (32.6 s, 1.43; its two ``ray start`` 6.4 s more), 9.50x excluding its 5.3 s
(1.74), 4 files on each node. Every file's txt was the daemon's byte for byte (8/8 in each mode). The rerun:
1.03 s, 0.029 of the first run, no Ray started, manifest unchanged.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from cliutil import cli_env  # noqa: E402
from speech import CLIPS, DATA  # noqa: E402

GAP_S = 0.5
WARM = DATA / "en_hello_world.flac"
HASRCTL = [sys.executable, "-m", "hasrctl"]
RAY = str(Path(sys.executable).parent / "ray") if (Path(sys.executable).parent / "ray").is_file() else "ray"


# ---------------------------------------------------------------------------------------------- the corpus

def soxi_seconds(path: Path) -> float:
    return float(subprocess.run(["soxi", "-D", str(path)], capture_output=True, text=True, check=True).stdout)


def build_corpus(directory: Path, files: int, lo: float, hi: float) -> dict[Path, float]:
    """``files`` FLAC files, English and Mandarin in turn, from ``lo`` to ``hi`` seconds: path -> seconds."""
    directory.mkdir(parents=True)
    gap = directory.parent / "gap.wav"
    subprocess.run(["sox", "-n", "-r", "16000", "-c", "1", "-b", "16", str(gap), "trim", "0", str(GAP_S)],
                   check=True)
    by_lang = {lang: sorted(n for n, (lg, _) in CLIPS.items() if lg == lang) for lang in ("en", "zh")}
    lengths = {n: soxi_seconds(DATA / f"{n}.flac") for n in CLIPS}
    out: dict[Path, float] = {}
    for k in range(files):
        lang = "en" if k % 2 == 0 else "zh"
        names = by_lang[lang]
        target = lo + (hi - lo) * k / max(1, files - 1)
        parts: list[str] = []
        total, i = 0.0, k // 2  # each file starts on another clip of its language
        while total < target:
            name = names[i % len(names)]
            parts += [str(DATA / f"{name}.flac"), str(gap)]
            total += lengths[name] + GAP_S
            i += 1
        path = directory / f"{k:02d}_{lang}_{round(target)}s.flac"
        subprocess.run(["sox", *parts, "-r", "16000", "-c", "1", str(path)], check=True)
        out[path] = soxi_seconds(path)
    gap.unlink()
    return out


# ------------------------------------------------------------------------------------------- processes

def run(cmd: list[str], env: dict[str, str], timeout: float = 3600) -> tuple[int, str, str, float]:
    """(exit, stdout, stderr, wall seconds) of one command, from this tree's root."""
    t0 = time.monotonic()
    res = subprocess.run(cmd, env=env, cwd=str(ROOT), capture_output=True, timeout=timeout)
    return (res.returncode, res.stdout.decode("utf-8", "replace"), res.stderr.decode("utf-8", "replace"),
            time.monotonic() - t0)


def procs() -> dict[int, tuple[int, str]]:
    """pid -> (ppid, command line) of every process now."""
    out: dict[int, tuple[int, str]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            out[int(d)] = (int(fields[1]), cmd)
    return out


def tree_of(marker: str) -> set[int]:
    """The processes whose command line names ``marker``, and all their descendants."""
    ps = procs()
    found = {p for p, (_, cmd) in ps.items() if marker in cmd and p != os.getpid()}
    while True:
        more = {p for p, (pp, _) in ps.items() if pp in found} - found
        if not more:
            return found
        found |= more


def kill_tree(marker: str) -> int:
    """SIGKILL this benchmark's own Ray processes (by pid); how many were still alive after."""
    for _ in range(3):
        pids = tree_of(marker)
        for p in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
        time.sleep(1.0)
    return len(tree_of(marker))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sessions_in(ray_tmpdir: Path) -> set[str]:
    """The Ray sessions started under a RAY_TMPDIR so far."""
    try:
        return {n for n in os.listdir(ray_tmpdir / "ray") if n.startswith("session_2")}
    except FileNotFoundError:
        return set()


def load_avg() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


# ------------------------------------------------------------------------------------------ the watcher

def read_rows(path: Path) -> list[dict[str, Any]]:
    rows = []
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return rows
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue  # a line being written
        if isinstance(row, dict) and "path" in row:
            rows.append(row)
    return rows


def parents() -> dict[int, int]:
    """pid -> ppid of every live process (zombies left out)."""
    out: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                out[int(d)] = int(fields[1])
    return out


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return ""


class Watch:
    """While a batch runs, every 0.2 s: when each input's row first lands in OUT (journal or manifest), and
    which Ray actors descend from ``roots`` (the driver, or a cluster's raylets: pid -> node label): the first
    moment each is seen running a file (Ray titles it ``ray::MapWorker(...).submit`` meanwhile) and its node.
    Times are seconds after ``t0``. Only this run's actors are looked at: another Ray on the host is not."""

    def __init__(self, out: Path, t0: float, roots: dict[int, str]) -> None:
        self.out, self.t0, self.roots = out, t0, dict(roots)
        self.seen: dict[str, float] = {}
        self.busy_from: dict[int, float] = {}  # actor pid -> first seen running a file
        self.nodes: dict[int, str] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self) -> None:
        while not self.stop.is_set():
            self.poll()
            self.actors()
            self.stop.wait(0.2)

    def poll(self) -> None:
        now = time.monotonic() - self.t0
        for name in (".hasr-batch.journal", "manifest.jsonl"):
            for row in read_rows(self.out / name):
                self.seen.setdefault(row["path"], now)

    def actors(self) -> None:
        now = time.monotonic() - self.t0
        pp = parents()
        label = dict(self.roots)
        todo = list(label)
        while todo:  # the roots' descendants, each with its root's label
            p = todo.pop()
            for child in [c for c, parent in pp.items() if parent == p and c not in label]:
                label[child] = label[p]
                todo.append(child)
        for pid in set(label) - set(self.roots):
            cmd = cmdline(pid)
            if cmd.startswith("ray::MapWorker"):
                self.nodes[pid] = label[pid]
                if cmd.endswith(".submit"):
                    self.busy_from.setdefault(pid, now)

    def finish(self) -> None:
        self.stop.set()
        self.thread.join()


# ----------------------------------------------------------------------------------------------- modes

def daemon_baseline(files: dict[Path, float], env: dict[str, str]) -> dict[str, Any]:
    """Each file through the warm daemon, one after another; the txt of each."""
    rc, _out, err, warm = run([*HASRCTL, "transcribe", "-q", "-f", "text", str(WARM)], env)
    if rc != 0:
        raise SystemExit(f"hasrctl transcribe (warm-up) failed ({rc}): {err.strip()}")
    texts: dict[str, str] = {}
    each: list[float] = []
    t0 = time.monotonic()
    for path in files:
        rc, out, err, took = run([*HASRCTL, "transcribe", "-q", "-f", "text", str(path)], env)
        if rc != 0:
            raise SystemExit(f"hasrctl transcribe {path.name} failed ({rc}): {err.strip()}")
        texts[str(path)] = out
        each.append(took)
    return {"wall": time.monotonic() - t0, "warm": warm, "texts": texts, "each": each}


def batch(label: str, corpus: Path, out: Path, env: dict[str, str], *extra: str,
          raylets: dict[int, str] | None = None) -> dict[str, Any]:
    """One ``hasrctl batch`` command, timed: its rows, when each landed, when its actors began their files."""
    cmd = [*HASRCTL, "batch", str(corpus), "-o", str(out), "--no-progress", "-q", *extra]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, cwd=str(ROOT), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    watch = Watch(out, t0, {proc.pid: "local", **(raylets or {})})
    try:
        _, err_b = proc.communicate(timeout=3600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        watch.finish()
    wall = time.monotonic() - t0
    err = err_b.decode("utf-8", "replace")
    watch.poll()
    rows = read_rows(out / "manifest.jsonl")
    if proc.returncode != 0:
        print(f"  {label}: exit {proc.returncode}\n    " + "\n    ".join(err.strip().splitlines()[-15:]), flush=True)
    return {"label": label, "rc": proc.returncode, "wall": wall, "rows": rows, "seen": watch.seen,
            "nodes": watch.nodes, "busy_from": watch.busy_from, "stderr": err, "cmd": cmd}


def window(res: dict[str, Any]) -> tuple[float, float] | None:
    """(the first moment an actor was seen running a file, the last row's landing), seconds after the command
    started (the first row's landing would leave out the first file's own time)."""
    ok = [r for r in res["rows"] if r.get("status") == "ok" and r["path"] in res["seen"]]
    if not ok or not res["busy_from"]:
        return None
    return min(res["busy_from"].values()), max(res["seen"][r["path"]] for r in ok)


def describe(res: dict[str, Any], audio: float) -> None:
    """What a batch run's rows say: actors, their load, the window, files per actor (and node)."""
    rows = res["rows"]
    ok = [r for r in rows if r.get("status") == "ok"]
    by_pid: dict[int, list[dict[str, Any]]] = {}
    for r in ok:
        by_pid.setdefault(int(r["pid"]), []).append(r)
    w = window(res)
    print(f"  {res['label']}: exit {res['rc']}, {len(ok)}/{len(rows)} ok, wall {res['wall']:.1f} s", flush=True)
    if w:
        print(f"    first file began {w[0]:.1f} s after the command started (Ray, actors, model load), last row "
              f"at {w[1]:.1f} s, command exited at {res['wall']:.1f} s; window {w[1] - w[0]:.1f} s for "
              f"{audio:.0f} s of audio")
    for pid, rs in sorted(by_pid.items()):
        node = res["nodes"].get(pid, "local")
        where = f"{rs[0].get('host')}" + (f" ({node})" if node != "local" else "")
        busy = sum(float(r["timings"]["total_s"]) for r in rs)
        began = res["busy_from"].get(pid)
        print(f"    pid {pid} on {where}: {len(rs)} file(s), {sum(float(r['duration_s']) for r in rs):.0f} s of "
              f"audio, busy {busy:.1f} s (sum of timings.total_s), model load {rs[0]['timings'].get('load_s', 0):.1f}"
              f" s, first file at " + (f"{began:.1f} s" if began is not None else "? (not seen)"))


def same_texts(res: dict[str, Any], out: Path, daemon: dict[str, str]) -> tuple[int, int, int]:
    """(txt files equal to the daemon's byte for byte, manifest texts equal to it without white space, total)."""
    files = txt = text = 0
    rows = {r["path"]: r for r in res["rows"]}
    for path, want in daemon.items():
        files += 1
        row = rows.get(path)
        if not row or row.get("status") != "ok":
            continue
        got = (out / (row.get("outputs") or ["?"])[0]).read_text(encoding="utf-8")
        txt += got == want
        text += re.sub(r"\s+", "", str(row.get("text") or "")) == re.sub(r"\s+", "", want)
        if got != want:
            print(f"    {res['label']}: {Path(path).name} differs:\n      daemon {want!r}\n      batch  {got!r}")
    return txt, text, files


def auth_mode() -> str:
    """``token`` when a Ray token is to be found (Ray then turns token auth on for ``ray start --head``)."""
    if os.environ.get("RAY_AUTH_TOKEN") or os.path.isfile(os.environ.get("RAY_AUTH_TOKEN_PATH", "") or "/"):
        return "token"
    return "token" if (Path.home() / ".ray" / "auth_token").is_file() else "disabled"


def two_nodes(base: Path, corpus: Path, env: dict[str, str], audio: float,
              daemon: dict[str, str]) -> dict[str, Any] | None:
    """A head and a second node of 1 CPU each on this host, the batch through them; None when it cannot run."""
    ray_tmp = base / "rc"
    ray_tmp.mkdir()
    mode = auth_mode()
    renv = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS",)}
    renv.update(RAY_TMPDIR=str(ray_tmp), RAY_AUTH_MODE=mode,
                PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    port = free_port()
    common = ["--num-cpus=1", "--disable-usage-stats"]
    try:
        rc, _o, err, head_s = run([RAY, "start", "--head", f"--port={port}", "--include-dashboard=false",
                                   *common], renv, timeout=180)
        if rc != 0:
            print(f"  two-node cluster: `ray start --head` failed ({rc}): {err.strip().splitlines()[-1:]}")
            return None
        rc, _o, err, node_s = run([RAY, "start", f"--address=127.0.0.1:{port}", *common], renv, timeout=180)
        if rc != 0:
            print(f"  two-node cluster: the second `ray start --address` failed ({rc}): "
                  f"{err.strip().splitlines()[-1:]}")
            return None
        raylets = {pid: ("head" if " --head" in cmd else "node 2") for pid, (_, cmd) in procs().items()
                   if str(ray_tmp) in cmd and "/raylet/raylet " in cmd}
        print(f"  two-node cluster up at 127.0.0.1:{port} (RAY_AUTH_MODE={mode}): `ray start --head` "
              f"{head_s:.1f} s, second `ray start --address` {node_s:.1f} s; raylets {sorted(raylets.values())}",
              flush=True)
        if sorted(raylets.values()) != ["head", "node 2"]:
            print(f"  two-node cluster: expected two raylets, found {raylets}; going on anyway")
        benv = dict(env, RAY_AUTH_MODE=mode)
        out = base / "out-cluster"
        res = batch("cluster, 2 nodes x 1 CPU, --workers 2", corpus, out, benv, "--address",
                    f"127.0.0.1:{port}", "--workers", "2", raylets=raylets)
        describe(res, audio)
        res["same"] = same_texts(res, out, daemon)
        res["ray_start"] = head_s + node_s
        return res
    finally:
        left = kill_tree(str(ray_tmp))
        print(f"  two-node cluster stopped (its processes killed by pid; {left} left)", flush=True)


# ------------------------------------------------------------------------------------------------ main

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--min-sec", type=float, default=20.0)
    ap.add_argument("--max-sec", type=float, default=40.0)
    ap.add_argument("--quick", action="store_true", help="4 files of about 8-12 s")
    ap.add_argument("--skip-cluster", action="store_true", help="no two-node cluster")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (printed)")
    a = ap.parse_args()
    if a.quick:
        a.files, a.min_sec, a.max_sec = 4, 8.0, 12.0
    for tool in ("sox", "soxi"):
        if not shutil.which(tool):
            raise SystemExit(f"{tool} is needed to build the corpus")
    try:
        import ray  # noqa: F401
    except ImportError:
        raise SystemExit("Ray is not installed: pip install '.[cpu,batch]'") from None

    base = Path(tempfile.mkdtemp(prefix="hb", dir="/tmp"))  # short: Ray's socket paths live under it
    corpus = base / "corpus"
    files = build_corpus(corpus, a.files, a.min_sec, a.max_sec)
    audio = sum(files.values())
    print(f"corpus: {len(files)} files, {audio:.0f} s of audio ({min(files.values()):.1f}-"
          f"{max(files.values()):.1f} s each) in {corpus}; {os.cpu_count()} CPUs; load average {load_avg()}",
          flush=True)

    denv = cli_env(str(base / "d"), HASR_ENGINE="auto", HASR_FW_DEVICE="cpu", HASR_MAX_WORKERS="1",
                   HASR_IDLE_EXIT_SEC="600")
    benv = cli_env(str(base / "b"), HASR_ENGINE="auto", HASR_FW_DEVICE="cpu", RAY_TMPDIR=str(base / "rl"))
    benv.pop("RAY_ADDRESS", None)
    (base / "rl").mkdir()
    results: list[dict[str, Any]] = []
    cluster: dict[str, Any] | None = None
    try:
        print("daemon, one file after another (hasrctl transcribe -q -f text):", flush=True)
        try:
            d = daemon_baseline(files, denv)
        finally:
            run([*HASRCTL, "stop"], denv, timeout=120)
        print(f"  warm-up (autostart, worker start, model load, a 1 s clip; not counted): {d['warm']:.1f} s; "
              f"then {len(files)} files in {d['wall']:.1f} s (per file {min(d['each']):.1f}-{max(d['each']):.1f} "
              f"s, median {statistics.median(d['each']):.1f} s)", flush=True)

        print("hasrctl batch on a local Ray it starts itself:", flush=True)
        for workers in (1, 2):
            out = base / f"out-w{workers}"
            res = batch(f"local Ray, --workers {workers}", corpus, out, benv, "--workers", str(workers))
            describe(res, audio)
            res["same"] = same_texts(res, out, d["texts"])
            results.append(res)
        first = results[-1]
        before = (base / "out-w2" / "manifest.jsonl").read_bytes()
        sessions = sessions_in(base / "rl")
        rerun = batch("rerun of --workers 2, same OUT", corpus, base / "out-w2", benv, "--workers", "2")
        unchanged = (base / "out-w2" / "manifest.jsonl").read_bytes() == before
        started = sessions_in(base / "rl") - sessions
        print(f"  rerun: exit {rerun['rc']}, {rerun['wall']:.2f} s against {first['wall']:.1f} s (ratio "
              f"{rerun['wall'] / first['wall']:.3f}); manifest {'unchanged' if unchanged else 'CHANGED'}; "
              f"{len(started)} Ray session(s) started", flush=True)

        if a.skip_cluster or not shutil.which(RAY):
            print("two-node cluster: skipped (" + ("--skip-cluster" if a.skip_cluster else "no `ray` command") + ")")
        else:
            print("hasrctl batch on a two-node Ray cluster on this host:", flush=True)
            try:
                cluster = two_nodes(base, corpus, benv, audio, d["texts"])
            except (OSError, subprocess.SubprocessError) as e:
                print(f"  two-node cluster: could not run ({type(e).__name__}: {e})")
    finally:
        if a.keep:
            print(f"kept: {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)

    base_rate = audio / d["wall"]
    print(f"\nload average now {load_avg()}")
    print(f"{len(files)} files, {audio:.0f} s of audio, whisper base int8 on {os.cpu_count()} CPUs; x = seconds of "
          f"audio per wall second")
    head = f"{'mode':44} {'wall s':>7} {'x':>6} {'vs daemon':>9} {'excl. startup x':>16} {'vs daemon':>9}  same text"
    print(head)
    print("-" * len(head))
    print(f"{'daemon, sequential, warm (load not counted)':44} {d['wall']:7.1f} {base_rate:6.2f} {1:9.2f} "
          f"{base_rate:16.2f} {1:9.2f}  (reference)")
    for res in results + ([cluster] if cluster else []):
        if res["rc"] != 0:
            print(f"{res['label']:44} exit {res['rc']}")
            continue
        rate = audio / res["wall"]
        w = window(res)
        ex = audio / (w[1] - w[0]) if w else float("nan")
        txt, text, n = res["same"]
        print(f"{res['label']:44} {res['wall']:7.1f} {rate:6.2f} {rate / base_rate:9.2f} {ex:16.2f} "
              f"{ex / base_rate:9.2f}  txt {txt}/{n}, text {text}/{n}")
    print(f"{'rerun of --workers 2 (all up to date)':44} {rerun['wall']:7.2f} {'':6} {'':9} {'':16} {'':9}  "
          f"{rerun['wall'] / first['wall']:.3f} of the first run's wall time")
    if not a.skip_cluster and shutil.which(RAY) and cluster is None:
        print("two-node cluster: did not run (see above)")
    ok = all(r["rc"] == 0 and r["same"][0] == r["same"][2] for r in results + ([cluster] if cluster else []))
    return 0 if ok and rerun["rc"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

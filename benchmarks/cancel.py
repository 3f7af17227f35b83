"""A client that leaves: how soon its share of the worker is free, this tree against an older one, side by side.

A whisper-engine daemon (the embedded model, CPU, one worker) transcribes a long file for client A, whose
connection is then closed (the client vanished). Two figures per trial, for each tree (issue 31 #18: within 1 s,
without throwing the model away):

- queued: client B's short clip waits behind A (``HASR_WORKER_PARALLEL=1``, the old one-job worker); the seconds
  from A leaving until B's job starts (its first event after ``queued``: ``loading`` when the worker was
  replaced, else ``progress``), and until B's result.
- alone: nobody else (the default: several jobs a worker); the seconds from A leaving until ``/api/ps`` shows
  the worker holding no job and the worker process stops using the CPU, and whether it is still the same
  process (the model kept).

    python benchmarks/cancel.py [--baseline REV] [--trials 3] [--long FILE]

``--baseline`` (default: the parent of the commit that made cancelled CPU jobs stop at once) is checked out
with ``git archive`` into a temporary directory and run the same way.

Measured (2026-12-03, 2 trials each, the corpus's 3-minute English file, load average 4.5 with other work
beside it), against 7120bba28f (before cancelled CPU jobs stopped at once): queued, B started 0.13 s after A left
against 6.73 s; alone, the worker was free 0.37 s after A left against 6.77 s, the same process in every trial
(target: 1 s, the model kept). The one-job worker of 2026-12-02 started B after 0.56 s by killing the worker.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import corpus  # noqa: E402
from _uds import http_json, transcribe_events  # noqa: E402
from speech import model_dir  # noqa: E402

SHORT = ROOT / "tests" / "data" / "en_quick_brown_fox.flac"


def stream(sock: str, path: str, on_event: Any) -> socket.socket:
    """POST /transcribe with NDJSON events; ``on_event(ev, t)`` for each; returns the socket (close = leave)."""
    return transcribe_events(sock, {"audio_path": path, "language": "en"}, on_event)[0]


def wait(pred: Any, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.01)
    return False


def trial(sock: str, long_path: str) -> tuple[float, float]:
    a_events: list[dict[str, Any]] = []
    b_events: list[tuple[dict[str, Any], float]] = []
    a = stream(sock, long_path, lambda ev, t: a_events.append(ev))
    assert wait(lambda: any(e.get("event") == "sentence" for e in a_events), 300), "A never got going"
    b = stream(sock, str(SHORT), lambda ev, t: b_events.append((ev, t)))
    assert wait(lambda: any(e.get("event") == "queued" for e, _ in b_events), 60), "B was not queued"
    left = time.monotonic()
    a.shutdown(socket.SHUT_RDWR)
    a.close()
    assert wait(lambda: any(e.get("event") in ("done", "error") for e, _ in b_events), 600), "B never finished"
    b.close()
    started = next(t for e, t in b_events if e.get("event") not in ("queued",))
    done = next(t for e, t in b_events if e.get("event") in ("done", "error"))
    return started - left, done - left


def workers(sock: str) -> list[dict[str, Any]]:
    """/api/ps's worker rows (whatever key a tree lists them under)."""
    _status, doc = http_json(sock, "GET", "/api/ps")
    rows = [r for v in doc.values() if isinstance(v, list) for r in v if isinstance(r, dict) and "pid" in r]
    return rows


def holds_a_job(row: dict[str, Any]) -> bool:
    return bool(row.get("jobs") or row.get("job") or row.get("busy"))


def cpu_s(pid: int) -> float:
    """The process's CPU seconds so far (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def busy_after(pid: int, left: float, timeout: float = 120.0) -> float:
    """Seconds from ``left`` until the worker stops computing: the start of the first half second in which it
    used under 5% of a core (what /api/ps says can be sooner: an older tree dropped the job from its books while
    the worker went on decoding it)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            t0, c0 = time.monotonic(), cpu_s(pid)
            time.sleep(0.5)
            if cpu_s(pid) - c0 < 0.025:
                return t0 - left
        except OSError:  # the worker is gone (killed): free, the model thrown away
            return time.monotonic() - left
    return timeout


def children(pid: int) -> set[int]:
    """The daemon's child processes (its workers), found the same way in any tree."""
    out = set()
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.add(int(d))
            except (OSError, ValueError, IndexError):
                continue
    return out


def trial_alone(sock: str, long_path: str, daemon: int) -> tuple[float, bool]:
    """A alone, then gone: (seconds until no worker holds a job and the worker stops computing, whether the
    worker is the same process)."""
    a_events: list[dict[str, Any]] = []
    a = stream(sock, long_path, lambda ev, t: a_events.append(ev))
    assert wait(lambda: any(e.get("event") == "sentence" for e in a_events), 300), "A never got going"
    pids = children(daemon)
    assert pids, "no worker process"
    left = time.monotonic()
    a.shutdown(socket.SHUT_RDWR)
    a.close()
    assert wait(lambda: not any(holds_a_job(r) for r in workers(sock)), 600), "the worker never let A go"
    freed = max(time.monotonic() - left, max(busy_after(pid, left) for pid in pids))
    return freed, children(daemon) == pids


def run_tree(tree: Path, long_path: str, trials: int, label: str, parallel: int) -> list[tuple[float, float]]:
    """``parallel`` 1: the queued figure, 0 (the default): the alone figure (freed seconds, same process)."""
    tmp = tempfile.mkdtemp(prefix="hc", dir="/tmp")
    sock = os.path.join(tmp, "s")
    # one worker: with the pool's default (2 on a CPU-only machine) B would not queue behind A at all
    env = dict(os.environ, PYTHONPATH=str(tree), HASR_ENGINE="whisper", HASR_FW_DEVICE="cpu",
               HASR_FW_MODEL=model_dir(), HASR_MAX_WORKERS="1", HASR_WORKER_PARALLEL=str(parallel))
    with open(os.path.join(tmp, "log"), "wb") as log:  # the daemon keeps its own copy of the descriptor
        proc = subprocess.Popen([sys.executable, "-m", "hasrd.server", "--socket", sock], cwd=tree, env=env,
                                stdout=subprocess.DEVNULL, stderr=log)
    try:
        assert wait(lambda: os.path.exists(sock), 30)
        assert wait(lambda: http_json(sock)[0] == 200, 30)
        http_json(sock, "POST", "/api/load", b"{}")
        rows: list[tuple[float, float]] = []
        for k in range(trials):
            if parallel == 1:
                rows.append(trial(sock, long_path))
                print(f"{label:>10} trial {k + 1} queued: B started {rows[-1][0]:.2f} s after A left, done after "
                      f"{rows[-1][1]:.2f} s", flush=True)
            else:
                freed, same = trial_alone(sock, long_path, proc.pid)
                rows.append((freed, float(same)))
                print(f"{label:>10} trial {k + 1} alone: the worker was free {freed:.2f} s after A left; "
                      f"{'same process' if same else 'a NEW process (the model was thrown away)'}", flush=True)
        return rows
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", default="", help="git revision to compare with")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--long", default="", help="the long file (default: the corpus's en_long_3min)")
    args = ap.parse_args()
    long_path = corpus.corpus_file("en_long_3min.wav", args.long)
    rev = args.baseline or subprocess.run(["git", "log", "-1", "--format=%H^",
                                           "--grep=A cancelled job whose worker reloads",
                                           "--", "hasrd/policy.py"], cwd=ROOT, capture_output=True,
                                          text=True).stdout.strip() or "HEAD"
    old = Path(tempfile.mkdtemp(prefix="hasr-old-"))
    subprocess.run(f"git archive {rev} | tar -x -C {old}", shell=True, cwd=ROOT, check=True)
    base = rev[:10]
    queued = {"this tree": run_tree(ROOT, long_path, args.trials, "this tree", 1),
              base: run_tree(old, long_path, args.trials, base, 1)}
    alone = {"this tree": run_tree(ROOT, long_path, args.trials, "this tree", 0),
             base: run_tree(old, long_path, args.trials, base, 0)}
    print(f"\nload average {os.getloadavg()[0]:.1f}; target: within 1 s, the model kept")
    print(f"{'':>12}  {'queued: B starts':>18}  {'alone: worker free':>18}  model kept")
    for label in queued:
        q, a = queued[label], alone[label]
        q_s, a_s = statistics.median(r[0] for r in q), statistics.median(r[0] for r in a)
        print(f"{label:>12}  {q_s:>16.2f} s  {a_s:>16.2f} s  {sum(r[1] for r in a):.0f} of {len(a)}")
    for name, res in (("queued", queued), ("alone", alone)):
        new_s, base_s = (statistics.median(r[0] for r in res[k]) for k in ("this tree", base))
        print(f"ratio (this tree / baseline), {name}: {new_s / max(1e-9, base_s):.2f}")

if __name__ == "__main__":
    main()

"""One loaded model, many requests at once (issue 30): one worker holding every job against one job at a time,
side by side in one run, printed as a table.

A real hasrd with the whisper engine and ONE worker (HASR_MAX_WORKERS=1), run twice: with the worker's default
parallel jobs (HASR_WORKER_PARALLEL=0) and with HASR_WORKER_PARALLEL=1 (a worker serves one job at a time, the
seed's lock: hasr before 0.3). Rows (goals from the issue):

- a 5 s file sent 3 s after a 270 s file: seconds from its sending to its answer (goal <= 12 s on the CPU), and
  whether the long file's text is exactly the one it gets alone;
- a live session opened beside a running file: seconds from the speech onset to the first draft (goal <= 3 s);
- 4 files of 25 s sent together against one after another: the wall-time ratio (goal <= 1.0: serving together
  loses nothing).

    python benchmarks/parallel.py            # the CPU rows (the embedded base model, int8)
    python benchmarks/parallel.py --gpu      # the same rows on a GPU (HASR_FW_MODEL, float16), plus 16 files

The load average is printed with each row: the ratios are what count on a busy machine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))  # first: benchmarks/daemon.py would shadow tests/daemon.py

import corpus  # noqa: E402
from daemon import Hasrd  # noqa: E402
from live_client import pcm16_24k  # noqa: E402
from speech import cache_home, load, model_dir  # noqa: E402

import numpy as np  # noqa: E402

SR = 16000
GAP_S = 1.2


def daemon(tmp: str, name: str, parallel: int, gpu: bool, workers: int = 1) -> Hasrd:
    env = {"HASR_ENGINE": "whisper", "XDG_CACHE_HOME": cache_home(), "HASR_MAX_WORKERS": str(workers),
           "HASR_WORKER_PARALLEL": str(parallel), "HASR_LIVE_QUEUE_SEC": "0", "HASR_MAX_QUEUE": "64"}
    if gpu:
        env["HASR_FW_DEVICE"] = "cuda"
    else:
        env.update({"HASR_FW_MODEL": model_dir(), "HASR_FW_DEVICE": "cpu"})
    h = Hasrd(os.path.join(tmp, name), env=env)
    with h.client(900) as c:
        r = c.post("/api/load")
        assert r.status_code == 200, r.text
    return h


def load_avg() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def post(h: Hasrd, path: str, out: dict[str, Any], language: str = "en") -> None:
    out["sent"] = time.monotonic()
    with h.client(7200) as c:
        r = c.post("/transcribe", json={"audio_path": path, "language": language})
    out["end"] = time.monotonic()
    out["code"] = r.status_code
    out["wall_s"] = out["end"] - out["sent"]
    out["text"] = r.json().get("final", "") if r.status_code == 200 else r.text


def wav(tmp: str, name: str, pcm: np.ndarray) -> str:
    path = Path(tmp) / f"{name}.wav"
    corpus.write_wav(path, pcm)
    return str(path)


def short_behind_long(h: Hasrd, long_paths: list[str], short_path: str, long_alone: str) -> tuple[float, bool]:
    """Seconds from sending the short file (3 s after the long ones) to its answer; the first long file's text
    the same as alone."""
    jobs: list[dict[str, Any]] = [{} for _ in long_paths]
    short_job: dict[str, Any] = {}
    threads = [threading.Thread(target=post, args=(h, p, j)) for p, j in zip(long_paths, jobs, strict=True)]
    for t in threads:
        t.start()
    time.sleep(3.0)
    post(h, short_path, short_job)
    for t in threads:
        t.join(7200)
    assert short_job["code"] == 200 and all(j["code"] == 200 for j in jobs), (short_job, jobs)
    return short_job["wall_s"], jobs[0]["text"] == long_alone


def live_beside_files(h: Hasrd, long_paths: list[str], sessions: int, minutes: float
                      ) -> tuple[list[float], list[float], int]:
    """``sessions`` live sessions streaming clips at real time, opened 2 s after ``long_paths`` were sent: every
    clip's seconds from its speech onset to its first words, and from its end to its final; clips with none."""
    import live as livebench

    jobs: list[dict[str, Any]] = [{} for _ in long_paths]
    threads = [threading.Thread(target=post, args=(h, p, j)) for p, j in zip(long_paths, jobs, strict=True)]
    for t in threads:
        t.start()
    time.sleep(2.0)
    audio, spans = livebench.stream(minutes)
    pcm = pcm16_24k(audio)
    got: list[Any] = [None] * sessions

    def one(i: int) -> None:
        got[i] = livebench.run_session(h.sock, pcm, spans, "en", False)

    live_threads = [threading.Thread(target=one, args=(i,)) for i in range(sessions)]
    for t in live_threads:
        t.start()
    for t in live_threads + threads:
        t.join(7200)
    assert all(j["code"] == 200 for j in jobs), jobs
    firsts = [x for g in got if g for x in g.first if x is not None]
    finals = [x for g in got if g for x in g.final if x is not None]
    missing = sum(1 for g in got for x in (g.first if g else [None]) if x is None)
    by_clip = [[x for g in got if g and k < len(g.first) and (x := g.first[k]) is not None]
               for k in range(max((len(g.first) for g in got if g), default=0))]
    print("first words by utterance (sessions' median / max): " + ", ".join(
        f"#{k + 1} {sorted(xs)[len(xs) // 2]:.2f}/{max(xs):.2f}" for k, xs in enumerate(by_clip) if xs), flush=True)
    return firsts, finals, missing


def p90(xs: list[float]) -> str:
    if not xs:
        return "none"
    ys = sorted(xs)
    return f"median {ys[len(ys) // 2]:.2f} s, p90 {ys[int(0.9 * (len(ys) - 1))]:.2f} s"


def together_vs_sequential(h: Hasrd, paths: list[str]) -> tuple[float, float]:
    """Wall seconds for ``paths`` sent together, and one after another."""
    outs: list[dict[str, Any]] = [{} for _ in paths]
    threads = [threading.Thread(target=post, args=(h, p, o)) for p, o in zip(paths, outs, strict=True)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(7200)
    together = time.monotonic() - t0
    assert all(o["code"] == 200 for o in outs), outs
    t0 = time.monotonic()
    for p in paths:
        o: dict[str, Any] = {}
        post(h, p, o)
        assert o["code"] == 200, o
    return together, time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpu", action="store_true",
                    help="run the worker on the GPU (HASR_FW_MODEL) with the GPU rows' sizes: 16 files of 300 s, "
                         "16 long files beside the short one, 16 live sessions")
    ap.add_argument("--files", type=int, default=0, help="files sent together in the throughput row (CPU 4)")
    ap.add_argument("--file-sec", type=float, default=0.0, help="length of each of those files (CPU 25)")
    ap.add_argument("--long-files", type=int, default=0, help="long files the short one is sent behind (CPU 1)")
    ap.add_argument("--sessions", type=int, default=0, help="live sessions beside the long files (CPU 1)")
    ap.add_argument("--live-minutes", type=float, default=0.5, help="speech each live session streams")
    ap.add_argument("--skip-live", action="store_true")
    ap.add_argument("--only-parallel", action="store_true", help="skip the one-job-at-a-time daemon")
    ap.add_argument("--workers", type=int, default=1, help="HASR_MAX_WORKERS (the issue's rows: 1)")
    ap.add_argument("--rows", default="short,live,files", help="which rows to run (comma-separated)")
    ap.add_argument("--english-only", action="store_true",
                    help="cut the files from English speech only (by default a fifth is Mandarin sent as English, "
                         "where whisper base writes long hallucinated runs)")
    args = ap.parse_args()
    files_n = args.files or (16 if args.gpu else 4)
    file_sec = args.file_sec or (300.0 if args.gpu else 25.0)
    long_n = args.long_files or (16 if args.gpu else 1)
    sessions = args.sessions or (16 if args.gpu else 1)
    long_sec = 300 if args.gpu else 270
    where_from = corpus.default_dir()
    if not all((where_from / f"{n}.wav").exists() for n in ("en_long_3min", "en_long_1min", "zh_long_1min")):
        corpus.build(where_from)  # espeak-ng speaks them once; a machine without it is given the files
    en3, en1, zh1 = (corpus.read_wav(where_from / f"{n}.wav") for n in ("en_long_3min", "en_long_1min",
                                                                          "zh_long_1min"))
    speech = np.concatenate([en3, en1 if args.english_only else zh1, en1])  # 5 minutes, files cut from it
    with tempfile.TemporaryDirectory(prefix="hasr-parallel-", dir="/tmp") as tmp:
        long_path = wav(tmp, "long", np.concatenate([en3, en1, en1])[:long_sec * SR])
        longs = [long_path] + [wav(tmp, f"long{i}", np.roll(speech, -i * 17 * SR)[:long_sec * SR])
                               for i in range(1, long_n)]
        short_path = wav(tmp, "short_5s", np.concatenate([load("en_espeak_park"), np.zeros(SR // 2, np.float32)]))
        files = [wav(tmp, f"piece{i}", np.tile(np.roll(speech, -i * 23 * SR), 2)[:int(file_sec * SR)])
                 for i in range(files_n)]
        results: dict[int, dict[str, Any]] = {}
        for parallel in (0,) if args.only_parallel else (0, 1):
            h = daemon(tmp, f"p{parallel}", parallel, args.gpu, args.workers)
            r = results[parallel] = {}
            try:
                rows_wanted = set(args.rows.split(","))
                if "short" in rows_wanted:
                    alone: dict[str, Any] = {}
                    post(h, long_path, alone)
                    r["long_alone_s"] = alone["wall_s"]
                    r["short_s"], r["long_right"] = short_behind_long(h, longs, short_path, alone["text"])
                    r["load_short"] = load_avg()
                if "live" in rows_wanted and not args.skip_live and (parallel == 0 or sessions == 1):
                    r["firsts"], r["finals"], r["missing"] = live_beside_files(h, longs[:max(1, long_n)], sessions,
                                                                            args.live_minutes)
                    r["load_live"] = load_avg()
                if "files" in rows_wanted:
                    r["together_s"], r["sequential_s"] = together_vs_sequential(h, files)
                    r["load_tp"] = load_avg()
            finally:
                h.stop()
            print(f"HASR_WORKER_PARALLEL={parallel}: " + json.dumps({k: v for k, v in r.items()
                                                                      if k not in ("firsts", "finals")}), flush=True)
        where = "GPU" if args.gpu else "CPU"
        p, one = results[0], results.get(1, {})

        def other(key: str, fmt: str = "{:.1f} s") -> str:
            return fmt.format(one[key]) if key in one else "-"

        where += f", {args.workers} worker{'s' if args.workers > 1 else ''}"
        table = []
        if "short_s" in p:
            table.append((f"{where}: a 5 s file sent 3 s after {long_n} file(s) of {long_sec} s: answered after",
                          f"{p['short_s']:.2f} s (long file {'same text' if p['long_right'] else 'TEXT DIFFERS'})",
                          other("short_s", "{:.2f} s"),
                          f"{'<= 1 s' if args.gpu else '<= 12 s'}  (load {p['load_short']})"))
        if "firsts" in p:
            table.append((f"{where}: {sessions} live session(s) beside them: first words after the onset",
                          p90(p["firsts"]) + (f", {p['missing']} clips without" if p["missing"] else ""),
                          p90(one["firsts"]) if "firsts" in one else "-",
                          f"{'p90 <= 1 s' if args.gpu else '<= 3 s'}  (load {p['load_live']})"))
            table.append((f"{where}: ... and finals after the sentence's end", p90(p["finals"]),
                          p90(one["finals"]) if "finals" in one else "-", "p90 <= 1.5 s" if args.gpu else ""))
        if "together_s" in p:
            ratio = p["sequential_s"] / p["together_s"]
            table.append((f"{where}: {files_n} files of {file_sec:g} s together / one after another",
                          f"{p['together_s']:.1f} / {p['sequential_s']:.1f} s: wall x{1 / ratio:.2f}, "
                          f"throughput x{ratio:.2f}",
                          f"{other('together_s')} / {other('sequential_s')}",
                          f"{'throughput >= x3' if args.gpu else 'wall <= x1.0'}  (load {p['load_tp']})"))
        width = max(len(row[0]) for row in table)
        print(f"\n{'figure':<{width}} | one worker, parallel jobs | one job at a time | goal")
        for row in table:
            print(f"{row[0]:<{width}} | {row[1]} | {row[2]} | {row[3]}")


if __name__ == "__main__":
    main()

"""The Realtime commit beside wyoming-faster-whisper on short commands (issue 31 #4), printed as a ratio.

A push-to-talk client speaks a 2-5 s command and waits for its text. Both servers run side by side in one run,
on the same machine, with the same model (the embedded whisper base that hasr uses, CPU, int8) and the same
audio, one command after another, alternating which server goes first so that the machine's noise hits both:

- hasr: a real hasrd (whisper engine) from the repository this script lives in. A Realtime session
  (``/v1/realtime?intent=transcription``, as an OpenAI client opens it, language set by
  ``transcription_session.update``) gets the command as 24 kHz PCM16 ``input_audio_buffer.append`` at real-time
  pace, then ``input_audio_buffer.commit`` right after the last audio. Timed: commit ->
  ``conversation.item.input_audio_transcription.completed`` (the last one, should the VAD have cut the command
  in two; the text is every utterance's transcript in order).
- wyoming-faster-whisper: a real server (``wyoming-faster-whisper`` from PyPI in a scratch venv, made here with
  ``python3 -m venv`` + pip when missing) on 127.0.0.1, given the same model directory through ``--model PATH``
  (faster-whisper loads a directory as it is: no hub), ``--stt-library faster-whisper --local-files-only
  --device cpu --compute-type int8``, its default beam size and threads. Driven over TCP with the ``wyoming``
  package, as Home Assistant does: Transcribe(language), AudioStart, 16 kHz AudioChunks at real-time pace,
  AudioStop. Timed: AudioStop -> Transcript.

Both get the same samples (16 kHz float, made 24 kHz for hasr), the same 160 ms pieces and the same lead-in of
silence (``--lead-s``); nothing after the last speech. CPU: utime+stime of the server's processes (for hasr the
daemon and its workers) from just before the command is sent until its text came and ``--settle-s`` passed.
Word error rate: tests/speech.py's English normalisation (lower case, number words -> digits, no punctuation).

Commands: the English test clips of 2-5 s (tests/data) and short spoken commands made with espeak-ng (en-us,
when it is installed), cycled for ``--commands``. One warm-up command per side is not counted.

Goal (issue 31 #4): hasr / wyoming <= 1.0 on the median commit -> completed, same text or better. The machine's
load average is printed at the start and the end: compare the ratio, not the seconds, across runs.

    python benchmarks/realtime_commit.py [--commands 10] [--keep-venv /tmp/wfw-venv] [--language en]

Run it from any checkout (/work/main, a worktree): the daemon runs that checkout's hasrd.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))
# The daemon (``python -m hasrd.server``) and its workers import hasrd from this checkout, whatever the cwd or
# an installed copy (an editable install may point at another checkout).
os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in [os.environ.get("PYTHONPATH", "")] if p])

from daemon import Hasrd, whisper_hasrd  # noqa: E402
from live_client import PIECE, RATE, LiveClient, pcm16_24k  # noqa: E402
from speech import CLIPS, errors, load, model_dir  # noqa: E402

SR = 16000
PIECE_S = PIECE / RATE  # 160 ms, both sides
TEST_CLIPS = [n for n, (lang, _) in CLIPS.items() if lang == "en"]
SPOKEN = [  # what a user dictates or says to an assistant: 2-5 s at espeak-ng's 150 words a minute
    "Set a timer for ten minutes for the pasta.",
    "Remind me to call the dentist at nine.",
    "Turn off all the lights in the kitchen and the hall.",
    "What is the weather like tomorrow morning?",
    "Add milk and eggs to the shopping list.",
    "Send a message to Anna saying I am running late.",
    "Play some quiet music in the living room.",
    "Schedule a meeting with the team on Friday at three.",
]
WFW_PACKAGE = "wyoming-faster-whisper"


@dataclass
class Command:
    name: str
    text: str
    pcm: np.ndarray  # 16 kHz float32, speech only

    @property
    def seconds(self) -> float:
        return len(self.pcm) / SR


@dataclass
class Result:
    latency: float | None  # end of audio (commit / AudioStop) -> text; None: no text came
    cpu: float  # server CPU seconds for the command
    cpu_after: float  # of which after the end of the audio
    text: str
    edits: int
    words: int
    parts: int = 1  # utterances the server made of the command (hasr's VAD may cut it)


@dataclass
class Side:
    name: str
    results: list[Result] = field(default_factory=list)


# -- commands -------------------------------------------------------------------------------------------------

def commands(lo: float, hi: float) -> list[Command]:
    out = [Command(n, CLIPS[n][1], load(n)) for n in TEST_CLIPS]
    out = [c for c in out if lo <= c.seconds <= hi]
    if _has("espeak-ng") and _has("sox"):
        sys.path.insert(0, str(REPO / "benchmarks"))
        from corpus import speak

        for k, text in enumerate(SPOKEN):
            pcm = _trim(speak(text, "en"))
            if lo <= len(pcm) / SR <= hi:
                out.append(Command(f"espeak_{k}", text, pcm))
    else:
        print("espeak-ng or sox not found: only the test clips are used", file=sys.stderr)
    if not out:
        raise SystemExit(f"no command of {lo}-{hi} s")
    # interleave the sources, so that a short run still gets both kinds
    clips = [c for c in out if not c.name.startswith("espeak_")]
    spoken = [c for c in out if c.name.startswith("espeak_")]
    mixed: list[Command] = []
    while clips or spoken:
        for src in (spoken, clips):
            if src:
                mixed.append(src.pop(0))
    return mixed


def _trim(pcm: np.ndarray, floor: float = 0.01) -> np.ndarray:
    """espeak-ng's leading and trailing silence off (the test clips are trimmed the same way)."""
    loud = np.flatnonzero(np.abs(pcm) > floor)
    return pcm[loud[0]:loud[-1] + 1] if len(loud) else pcm


def _has(prog: str) -> bool:
    import shutil

    return shutil.which(prog) is not None


# -- CPU of a process tree ------------------------------------------------------------------------------------

TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2:].split()  # fields from 3 (state) on; the name may hold spaces


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def tree(pid: int) -> list[int]:
    """``pid`` and its descendants."""
    parent: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            st = _stat(int(d))
            if st:
                parent[int(d)] = int(st[1])
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += [c for c, pp in parent.items() if pp == p]
    return out


def cpu(pid: int) -> float:
    """utime+stime of ``pid`` and its live descendants, in seconds."""
    total = 0
    for p in tree(pid):
        st = _stat(p)
        if st:
            total += int(st[11]) + int(st[12])  # utime, stime (fields 14, 15)
    return total / TICK


# -- hasr -----------------------------------------------------------------------------------------------------

def hasr_command(h: Hasrd, cmd: Command, language: str, lead_s: float, settle_s: float) -> Result:
    audio = pcm16_24k(np.concatenate([np.zeros(int(lead_s * SR), np.float32), cmd.pcm]))
    c0 = cpu(h.proc.pid)
    lc = LiveClient(h.sock, "?intent=transcription")
    try:
        if language:
            lc.update(language=language)
        lc.feed(audio)
        t_commit = time.monotonic() - lc.t0
        lc.send({"type": "input_audio_buffer.commit"})
        c_end = cpu(h.proc.pid)
        latency, text, parts = _hasr_wait(lc, t_commit)
    finally:
        lc.close()
    time.sleep(settle_s)
    c1 = cpu(h.proc.pid)
    e, n = errors("en", cmd.text, text)
    return Result(latency, c1 - c0, c1 - c_end, text, e, n, parts)


def _hasr_wait(lc: LiveClient, t_commit: float, timeout: float = 180.0) -> tuple[float | None, str, int]:
    """Until every utterance the session opened has its ``completed`` and the commit was answered (its
    ``committed``, or nothing at all for 1 s when the VAD had already closed the last utterance)."""
    end = time.monotonic() + timeout
    with lc.lock:
        while True:
            evs = list(lc.events)
            opened = [e["item_id"] for e in evs if e["type"] in ("input_audio_buffer.speech_started",
                                                               "input_audio_buffer.committed")]
            done = {e["item_id"]: e for e in evs
                    if e["type"] == "conversation.item.input_audio_transcription.completed"}
            answered = any(e["type"] == "input_audio_buffer.committed" and e["_t"] >= t_commit for e in evs)
            now = time.monotonic() - lc.t0
            if opened and all(i in done for i in opened) and (answered or now - t_commit > 1.0):
                order = list(dict.fromkeys(opened))
                text = " ".join(done[i]["transcript"].strip() for i in order).strip()
                return max(done[i]["_t"] for i in order) - t_commit, text, len(order)
            if lc.closed.is_set() or time.monotonic() > end or any(e["type"] == "error" for e in evs):
                errs = [e.get("error") for e in evs if e["type"] == "error"]
                print(f"  hasr: no completed ({errs or 'timed out'}); events {[e['type'] for e in evs][-12:]}",
                      file=sys.stderr)
                return None, "", 0
            lc.lock.wait(0.05)


# -- wyoming-faster-whisper -----------------------------------------------------------------------------------

def ensure_venv(path: Path) -> Path:
    exe = path / "bin" / WFW_PACKAGE
    if not exe.exists():
        print(f"installing {WFW_PACKAGE} into {path} ...", file=sys.stderr)
        for cmd in (["python3", "-m", "venv", str(path)], [str(path / "bin" / "pip"), "install", "-q", WFW_PACKAGE]):
            run = subprocess.run(cmd, capture_output=True, text=True)
            if run.returncode:
                raise SystemExit(f"{' '.join(cmd)} failed ({run.returncode}):\n{run.stdout}{run.stderr}")
    return exe


def wyoming_import(venv: Path) -> None:
    """The ``wyoming`` package (pure Python) from the venv, after this interpreter's own packages."""
    try:
        import wyoming  # noqa: F401
        return
    except ImportError:
        pass
    sp = sorted(venv.glob("lib/python3*/site-packages"))
    if not sp:
        raise SystemExit(f"no site-packages in {venv}")
    sys.path.append(str(sp[0]))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Wyoming:
    def __init__(self, exe: Path, model: str, language: str, tmp: Path) -> None:
        self.port = free_port()
        self.log_path = tmp / "wyoming.log"
        (tmp / "wfw-data").mkdir()
        args = [str(exe), "--uri", f"tcp://127.0.0.1:{self.port}", "--model", model, "--data-dir",
                str(tmp / "wfw-data"), "--stt-library", "faster-whisper", "--local-files-only", "--device", "cpu",
                "--compute-type", "int8"]
        if language:
            args += ["--language", language]
        self.args = args
        env = dict(os.environ, HF_HUB_OFFLINE="1")
        env.pop("PYTHONPATH", None)
        self.logf = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(args, env=env, stdout=self.logf, stderr=subprocess.STDOUT)
        end = time.monotonic() + 120
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{WFW_PACKAGE} exited with {self.proc.returncode}:\n{self.log()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.5).close()
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"{WFW_PACKAGE} did not listen within 120 s:\n{self.log()}")

    def log(self) -> str:
        self.logf.flush()
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.logf.close()


def wyoming_command(w: Wyoming, cmd: Command, language: str, lead_s: float, settle_s: float) -> Result:
    pcm = np.concatenate([np.zeros(int(lead_s * SR), np.float32), cmd.pcm])
    audio = (np.clip(pcm, -1, 1) * 32767).astype("<i2").tobytes()
    c0 = cpu(w.proc.pid)
    latency, text, c_end = asyncio.run(_wyoming_session(w.port, audio, language, w.proc.pid))
    time.sleep(settle_s)
    c1 = cpu(w.proc.pid)
    e, n = errors("en", cmd.text, text)
    return Result(latency, c1 - c0, c1 - c_end, text, e, n)


async def _wyoming_session(port: int, audio: bytes, language: str, pid: int) -> tuple[float | None, str, float]:
    from wyoming.asr import Transcribe, Transcript
    from wyoming.audio import AudioChunk, AudioStart, AudioStop
    from wyoming.client import AsyncTcpClient

    step = int(PIECE_S * SR) * 2
    async with AsyncTcpClient("127.0.0.1", port) as client:
        await client.write_event(Transcribe(language=language or None).event())
        await client.write_event(AudioStart(rate=SR, width=2, channels=1).event())
        start = time.monotonic()
        for k, i in enumerate(range(0, len(audio), step)):
            ahead = start + k * PIECE_S - time.monotonic()
            if ahead > 0:
                await asyncio.sleep(ahead)
            await client.write_event(AudioChunk(rate=SR, width=2, channels=1, audio=audio[i:i + step]).event())
        t_stop = time.monotonic()
        await client.write_event(AudioStop().event())
        c_end = cpu(pid)
        while True:
            ev = await asyncio.wait_for(client.read_event(), 180)
            if ev is None:
                return None, "", c_end
            if Transcript.is_type(ev.type):
                return time.monotonic() - t_stop, Transcript.from_event(ev).text.strip(), c_end


# -- report ---------------------------------------------------------------------------------------------------

def p90(xs: list[float]) -> float:
    return float(np.percentile(xs, 90))


def _f(x: float | None) -> str:
    return "   -- " if x is None else f"{x:6.2f}"


def summary(hasr: Side, wfw: Side) -> None:
    print()
    rows = []
    for s in (hasr, wfw):
        lat = [r.latency for r in s.results if r.latency is not None]
        cpus = [r.cpu for r in s.results]
        after = [r.cpu_after for r in s.results]
        edits, words = sum(r.edits for r in s.results), sum(r.words for r in s.results)
        missing = sum(r.latency is None for r in s.results)
        rows.append((lat, cpus))
        print(f"  {s.name:8s} end of audio -> text: median {statistics.median(lat) if lat else float('nan'):.2f} s  "
              f"p90 {p90(lat) if lat else float('nan'):.2f} s   CPU/command median {statistics.median(cpus):.2f} s "
              f"(after the end {statistics.median(after):.2f} s)   WER {edits / max(1, words):.3f} "
              f"({edits} edits / {words} words){f'   {missing} without text' if missing else ''}")
    (hl, hc), (wl, wc) = rows
    if hl and wl:
        cpu_median = statistics.median(hc) / max(1e-9, statistics.median(wc))
        print(f"  ratio hasr / wyoming: latency median x{statistics.median(hl) / statistics.median(wl):.2f} "
              f"(goal <= 1.0), p90 x{p90(hl) / p90(wl):.2f}; CPU median x{cpu_median:.2f}, "
              f"total x{sum(hc) / max(1e-9, sum(wc)):.2f}")
    worse = sum(h.edits > w.edits for h, w in zip(hasr.results, wfw.results, strict=True))
    better = sum(h.edits < w.edits for h, w in zip(hasr.results, wfw.results, strict=True))
    print(f"  text: hasr worse than wyoming on {worse} command(s), better on {better}, "
          f"the same on {len(hasr.results) - worse - better}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--commands", type=int, default=10, help="commands measured on each side (default 10)")
    ap.add_argument("--keep-venv", metavar="PATH", type=Path,
                    help="the venv of wyoming-faster-whisper: used if it holds it, else made there, and kept "
                         "(default: a temporary one, made and removed by this run)")
    ap.add_argument("--language", default="en", help="language given to both ('' = detected; default en)")
    ap.add_argument("--lead-s", type=float, default=0.3, help="silence before the speech (default 0.3)")
    ap.add_argument("--min-s", type=float, default=2.0, help="shortest command (default 2)")
    ap.add_argument("--max-s", type=float, default=5.0, help="longest command (default 5)")
    ap.add_argument("--settle-s", type=float, default=1.0,
                    help="pause after each command before its CPU is read and the next starts (default 1)")
    args = ap.parse_args()

    cmds = commands(args.min_s, args.max_s)
    model = model_dir()
    load0 = os.getloadavg()
    hasr, wfw = Side("hasr"), Side("wyoming")
    h: Hasrd | None = None
    w: Wyoming | None = None
    stray: set[int] = set()

    def on_term(*_: object) -> None:
        raise SystemExit(143)

    signal.signal(signal.SIGTERM, on_term)
    with tempfile.TemporaryDirectory(prefix="hasr-rc-") as tmp_s:
        tmp = Path(tmp_s)
        try:
            venv = args.keep_venv.resolve() if args.keep_venv else tmp / "wfw-venv"
            exe = ensure_venv(venv)
            wyoming_import(venv)
            w = Wyoming(exe, model, args.language, tmp)
            h = whisper_hasrd(str(tmp / "s"))
            with h.client(300) as c:
                c.post("/api/load")
            rev = subprocess.run(["git", "-C", str(REPO), "log", "-1", "--format=%h %s"], capture_output=True,
                                 text=True).stdout.strip()[:70]
            print(f"hasr: {REPO} ({rev})")
            print(f"wyoming: {' '.join(w.args[1:])}")
            print(f"model: {model}; {len(cmds)} distinct commands of {args.min_s:g}-{args.max_s:g} s, "
                  f"{args.commands} measured per side, language {args.language or 'detected'}, "
                  f"lead-in {args.lead_s:g} s; load average at start {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}")
            hs, ws = h, w

            def measure(side: str, cmd: Command) -> Result:
                if side == "hasr":
                    return hasr_command(hs, cmd, args.language, args.lead_s, args.settle_s)
                return wyoming_command(ws, cmd, args.language, args.lead_s, args.settle_s)

            for side in ("hasr", "wyoming"):  # the first decode of each pays for lazy set-ups: not counted
                r = measure(side, cmds[0])
                print(f"  warm-up {side}: {_f(r.latency)} s  {r.text!r}")
            print(f"\n  {'#':>2} {'command':18s} {'len s':>5} | {'hasr s':>6} {'cpu s':>5} | {'wyo s':>6} "
                  f"{'cpu s':>5} | {'ratio':>5} | hasr text / wyoming text (edits)")
            for k in range(args.commands):
                cmd = cmds[k % len(cmds)]
                for side in (("wyoming", "hasr") if k % 2 else ("hasr", "wyoming")):  # alternate who goes first
                    (hasr if side == "hasr" else wfw).results.append(measure(side, cmd))
                stray |= set(tree(h.proc.pid))
                a, b = hasr.results[-1], wfw.results[-1]
                ratio = f"{a.latency / b.latency:5.2f}" if a.latency and b.latency else "   --"
                parts = f", {a.parts} utterances" if a.parts > 1 else ""
                print(f"  {k + 1:2d} {cmd.name:18s} {cmd.seconds:5.2f} | {_f(a.latency)} {a.cpu:5.2f} | "
                      f"{_f(b.latency)} {b.cpu:5.2f} | {ratio} | {a.text!r} ({a.edits}{parts}) / "
                      f"{b.text!r} ({b.edits})",
                      flush=True)
        finally:
            if h is not None:
                stray |= set(tree(h.proc.pid))
                h.stop()
            if w is not None:
                w.stop()
    left = [p for p in stray if (_stat(p) or ["Z"])[0] != "Z" and b"hasrd" in _cmdline(p)]
    for p in left:  # a worker the daemon left behind: this run started it, so this run ends it
        print(f"process {p} outlived the daemon: killed", file=sys.stderr)
        os.kill(p, signal.SIGKILL)
    load1 = os.getloadavg()
    print(f"\nrealtime commit vs {WFW_PACKAGE}, {args.commands} commands each, "
          f"load average {load0[0]:.2f} at start, {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f} at end "
          f"({os.cpu_count()} CPUs)")
    if hasr.results:
        summary(hasr, wfw)


if __name__ == "__main__":
    main()

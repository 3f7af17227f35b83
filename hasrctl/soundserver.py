"""Meeting mode's audio: the microphone and what the desktop plays (the monitor of the default output), recorded
from the desktop's sound server, PulseAudio or PipeWire (which answers through pipewire-pulse), with ``parec``,
as PCM16 24 kHz mono in 100 ms blocks paired by time.

Why parec and not PortAudio (``hasrctl listen``'s microphone): ALSA's pulse device, which PortAudio reaches, cannot
choose a monitor source, and both sides recorded by one server run on its clock. The sources are looked up with
``pactl`` before anything records, so that no sound server, no default output or no microphone is one line said
at once rather than a stream error later.
"""

from __future__ import annotations

import os
import queue
import subprocess
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from hasrctl.client import EXIT_FAILED, CliError, UsageError

RATE = 24000
BLOCK_BYTES = RATE // 10 * 2  # 100 ms of PCM16 mono
SILENCE = bytes(BLOCK_BYTES)
LAG_BLOCKS = 5  # a side this far ahead of an empty other: the other gets a block of silence (see paired)
TOOLS = ("meeting mode records with parec and pactl (apt install pulseaudio-utils; on PipeWire, pipewire-pulse "
         "answers them)")


@dataclass(frozen=True)
class Sources:
    """The sound server's source names of the two sides."""

    microphone: str
    monitor: str  # the default output's monitor: what the desktop plays


def _pactl(*args: str) -> str:
    env = dict(os.environ, LC_ALL="C")  # pactl translates "Default Sink:"
    try:
        out = subprocess.run(["pactl", *args], capture_output=True, text=True, timeout=15, env=env,
                             stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise CliError(f"pactl is not installed: {TOOLS}", EXIT_FAILED) from None
    except subprocess.TimeoutExpired:
        raise CliError(f"the sound server does not answer (pactl {args[0]} took over 15 s)", EXIT_FAILED) from None
    if out.returncode != 0:
        why = (out.stderr.strip().splitlines() or [f"pactl exited with status {out.returncode}"])[-1]
        raise CliError(f"no sound server answers ({why}): meeting mode records through PulseAudio or PipeWire's "
                       f"pipewire-pulse, run from your desktop session (XDG_RUNTIME_DIR, PULSE_SERVER)", EXIT_FAILED)
    return out.stdout


def find_sources(device: str | None = None) -> Sources:
    """The microphone (``device``, or the default input) and the default output's monitor, checked to exist and
    to differ; CliError in one line when there is no server, no output, no microphone (UsageError: no ``device``)."""
    info = dict(line.strip().split(": ", 1) for line in _pactl("info").splitlines() if ": " in line)
    names = [line.split("\t")[1] for line in _pactl("list", "short", "sources").splitlines()
             if len(line.split("\t")) > 1]
    sink = info.get("Default Sink", "").strip()
    monitor = f"{sink}.monitor"
    if not sink or monitor not in names:
        raise CliError(f"the sound server has no monitor of the default output ({sink or 'no default output'}): "
                       f"meeting mode hears the others there; `pactl list short sources` lists what it has",
                       EXIT_FAILED)
    if device is not None and device not in names:
        raise UsageError(f"the sound server has no source {device}: `pactl list short sources` lists them")
    mic = device or info.get("Default Source", "").strip()
    if not mic or mic not in names:
        raise CliError("the sound server has no default input (no microphone): plug one in, or name a source with "
                       "--device (`pactl list short sources` lists them)", EXIT_FAILED)
    if mic == monitor:
        raise CliError(f"the microphone would be {monitor}, the output's own monitor (the server's default input "
                       f"when it has no microphone): plug one in, or name a source with --device", EXIT_FAILED)
    return Sources(mic, monitor)


class Recorder:
    """One source recorded by a parec process; a reader thread hands its 100 ms blocks to ``blocks``, then None
    when parec ends."""

    def __init__(self, source: str, role: str) -> None:
        self.source = source
        self.blocks: queue.Queue[bytes | None] = queue.Queue()
        # 50 ms latency: parec's default hands over seconds at a time. Its own session: the terminal's Ctrl-C
        # goes to hasrctl alone, which stops the recording once the last blocks are sent (parec, also hit,
        # would end first, and look like a failure); when hasrctl is gone, parec's next write fails and it ends.
        try:
            self.proc = subprocess.Popen(["parec", f"--device={source}", "--format=s16le", f"--rate={RATE}",
                                          "--channels=1", "--raw", "--latency-msec=50", "--client-name=hasrctl",
                                          f"--stream-name=meeting: {role}"], stdin=subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        except FileNotFoundError:
            raise CliError(f"parec is not installed: {TOOLS}", EXIT_FAILED) from None
        self.thread = threading.Thread(target=self._read, name=f"hasr-parec-{role}", daemon=True)
        self.thread.start()

    def _read(self) -> None:
        out = self.proc.stdout
        assert out is not None
        while len(block := out.read(BLOCK_BYTES)) == BLOCK_BYTES:
            self.blocks.put(block)
        self.blocks.put(None)

    def failure(self) -> str:
        """Why parec ended by itself, in a line."""
        try:
            rc = self.proc.wait(5)
        except subprocess.TimeoutExpired:
            return f"recording {self.source} stopped"
        err = self.proc.stderr.read().decode(errors="replace").strip() if self.proc.stderr else ""
        why = err.splitlines()[-1] if err else f"parec exited with status {rc}"
        return f"recording {self.source} stopped: {why}"

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.thread.join(5)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


def _ready(rec: Recorder, wait: float) -> list[bytes]:
    """The blocks ``rec`` has recorded, waiting up to ``wait`` seconds for the first; CliError when parec ended."""
    out: list[bytes] = []
    try:
        item = rec.blocks.get(timeout=wait) if wait else rec.blocks.get_nowait()
        while True:
            if item is None:
                raise CliError(rec.failure(), EXIT_FAILED)
            out.append(item)
            item = rec.blocks.get_nowait()
    except queue.Empty:
        pass
    return out


def paired(mic: Recorder, monitor: Recorder, stop: threading.Event,
           running: Callable[[], None] = lambda: None) -> Iterator[tuple[bytes, bytes]]:
    """(microphone, monitor) blocks of the same 100 ms, until ``stop``; ``running`` is called once both record.

    Both sides start together: what one recorded before the other's parec was running (a process started late
    on a busy machine: hundreds of milliseconds) is dropped, so that block k of each covers the same time, give or
    take a block. Later, a side more than LAG_BLOCKS ahead while the other has nothing (two devices' clocks
    drifting apart over an hour) is paired with a block of silence: both sides' sessions keep one timeline,
    which the merge by start time relies on, and nothing recorded after the start is dropped."""
    bufs: tuple[deque[bytes], deque[bytes]] = (deque(), deque())
    sides = (mic, monitor)
    while not stop.is_set() and not (bufs[0] and bufs[1]):
        for rec, buf in zip(sides, bufs, strict=True):
            buf.extend(_ready(rec, 0.0 if buf else 0.05))
    for rec, buf in zip(sides, bufs, strict=True):
        buf.clear()
        _ready(rec, 0.0)
    if not stop.is_set():
        running()
    while not stop.is_set():
        for rec, buf in zip(sides, bufs, strict=True):
            buf.extend(_ready(rec, 0.0 if buf else 0.05))
        a, b = bufs
        if a and b:
            yield a.popleft(), b.popleft()
        elif len(a) > LAG_BLOCKS or len(b) > LAG_BLOCKS:
            yield (a.popleft() if a else SILENCE), (b.popleft() if b else SILENCE)

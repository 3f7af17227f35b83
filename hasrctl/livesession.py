"""The live client library of ``hasrctl listen``, ``hasrctl dictate`` and the tray's Dictate entry: audio sources
(the microphone through PortAudio / sounddevice, or anything FFmpeg opens, decoded with PyAV) as OpenAI's PCM16
at 24 kHz in 160 ms pieces, a session over the daemon's /v1/realtime that hands final sentences and drafts to
callbacks, and the tool that types text into the focused window (xdotool on X11, wtype or ydotool on Wayland).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import queue
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import msgspec

from hasrctl.client import EXIT_FAILED, CliError, UsageError
from hasrctl.common import say
from hasrctl.transcribe import Event

RATE = 24000


PIECE = RATE * 16 // 100  # 160 ms


def _to_pcm16(resampler: Any, frame: Any) -> bytes:
    from hasrd.resample import frames_bytes

    return frames_bytes(resampler.resample(frame), 2)


def ffmpeg_source(url: str, realtime: bool, stop: threading.Event) -> Iterator[bytes]:
    """PCM16 24 kHz mono from anything FFmpeg opens, in 160 ms pieces (paced to the clock with ``realtime``).

    The input is opened here, before any connection: a typo is a usage error, not a session."""
    import av

    try:
        container = av.open(sys.stdin.buffer if url == "-" else url, "r")
    except (av.FFmpegError, OSError) as e:
        raise UsageError(f"cannot open {url}: {e}") from None
    if not container.streams.audio:
        container.close()
        raise UsageError(f"{url} has no audio stream")
    return _pieces(container, url, realtime, stop)


def _pieces(container: Any, url: str, realtime: bool, stop: threading.Event) -> Iterator[bytes]:
    import av

    resampler = av.AudioResampler(format="s16", layout="mono", rate=RATE)
    t0 = time.monotonic()
    sent = 0
    buf = b""
    with container:
        frames = container.decode(audio=0)
        while not stop.is_set():
            try:
                frame = next(frames)
            except StopIteration:
                buf += _to_pcm16(resampler, None)
                break
            except av.FFmpegError as e:
                raise CliError(f"decoding {url} failed: {e}", EXIT_FAILED) from None
            buf += _to_pcm16(resampler, frame)
            while len(buf) >= PIECE * 2:
                piece, buf = buf[:PIECE * 2], buf[PIECE * 2:]
                if realtime:
                    ahead = t0 + sent / RATE - time.monotonic()
                    if ahead > 0:
                        time.sleep(ahead)
                sent += PIECE
                yield piece
    if buf and not stop.is_set():
        yield buf


def microphone_source(device: str | None, stop: threading.Event) -> Iterator[bytes]:
    """PCM16 24 kHz mono from the microphone (PortAudio's default input, or ``device``), until ``stop``.

    The device is looked up and opened here, before any connection (and before dictate says "speak")."""
    try:
        import sounddevice as sd
    except (ImportError, OSError) as e:
        raise CliError(f"the microphone needs PortAudio and sounddevice ({e}); install libportaudio2 and "
                       f"`pip install sounddevice`, or give a file or URL", EXIT_FAILED) from None
    dev: Any = int(device) if device and device.isdigit() else device
    try:
        info = sd.query_devices(dev, "input")
    except (ValueError, sd.PortAudioError) as e:
        raise UsageError(f"no microphone {device or '(default)'}: {e}; `python -m sounddevice` lists them") from None
    return _recorded(sd, dev, int(info["default_samplerate"]), stop)


def _recorded(sd: Any, dev: Any, rate: int, stop: threading.Event) -> Iterator[bytes]:
    q: queue.Queue[bytes] = queue.Queue()

    def callback(indata: Any, frames: int, _time: Any, _status: Any) -> None:
        q.put(bytes(indata))

    try:
        stream = sd.RawInputStream(samplerate=rate, channels=1, dtype="int16", device=dev,
                                   blocksize=rate * 16 // 100, callback=callback)
    except sd.PortAudioError as e:
        raise CliError(f"the microphone could not be opened: {e}", EXIT_FAILED) from None
    return _pcm(stream, q, rate, stop)


def _pcm(stream: Any, q: queue.Queue[bytes], rate: int, stop: threading.Event) -> Iterator[bytes]:
    import av

    from hasrd.resample import s16_mono_frame

    resampler = av.AudioResampler(format="s16", layout="mono", rate=RATE)
    with stream:
        while not stop.is_set():
            try:
                data = q.get(timeout=0.2)
            except queue.Empty:
                continue
            out = _to_pcm16(resampler, s16_mono_frame(data, rate))
            if out:
                yield out


def item_number(ev: Event) -> int:
    """The utterance an event belongs to: N of its ``item_id`` (``item_<session>_<N>``)."""
    try:
        return int(ev.item_id.rsplit("_", 1)[-1])
    except ValueError:
        return 0


class Session:
    """One /v1/realtime connection: a reader thread for the daemon's events, audio sent from the caller's."""

    def __init__(self, path: str, language: str, prompt: str, silence_ms: int,
                 on_sentence: Callable[[Event], None], on_draft: Callable[[str, int], None],
                 on_status: Callable[[Event], None] | None = None,
                 on_done: Callable[[int], None] | None = None) -> None:
        from websockets.sync.client import unix_connect

        try:
            self.ws = unix_connect(path, "ws://hasr/v1/realtime?intent=transcription&hasr_events=true", max_size=None,
                                   open_timeout=30).__enter__()  # closed by finish()
        except OSError as e:
            raise CliError(f"hasrd does not answer on {path}: {e}", 3) from None
        self.on_sentence, self.on_draft = on_sentence, on_draft
        self.on_status = on_status or Said().status
        self.on_done = on_done
        self.result: dict[str, Any] | None = None
        self.error: str | None = None
        self.broken = False  # our stdout's reader went away (hasrctl listen | head)
        self.done = threading.Event()
        session: dict[str, Any] = {"input_audio_format": "pcm16", "turn_detection": {
            "type": "server_vad", "silence_duration_ms": silence_ms}}
        session["input_audio_transcription"] = {"model": "hasr", "language": language or None, "prompt": prompt}
        self.ws.send(json.dumps({"type": "transcription_session.update", "session": session}))
        self.thread = threading.Thread(target=self._read, name="hasr-listen", daemon=True)
        self.thread.start()

    def _read(self) -> None:
        from websockets.exceptions import ConnectionClosed

        try:
            for raw in self.ws:
                ev = msgspec.json.decode(raw, type=Event)
                kind = ev.type
                if kind == "hasr.sentence":
                    self.on_sentence(ev)
                elif kind == "hasr.draft":
                    self.on_draft(ev.text or "", item_number(ev))
                elif kind == "conversation.item.input_audio_transcription.completed":
                    if self.on_done is not None:
                        self.on_done(item_number(ev))
                elif kind == "hasr.done":
                    self.result = ev.result or {}
                elif kind in ("hasr.loading", "hasr.queued"):
                    self.on_status(ev)
                elif kind == "error":
                    self.error = f"{ev.error.message} ({ev.error.code})"
                    say(self.error)
        except ConnectionClosed:
            pass
        except BrokenPipeError:  # nobody reads what we print: end the session (run() raises it where the
            self.broken = True  # command's handler ends quietly), never a traceback from this thread
            self.ws.close()
        finally:
            self.done.set()

    def send(self, pcm16: bytes) -> bool:
        if self.done.is_set():
            return False
        from websockets.exceptions import ConnectionClosed

        try:
            self.ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm16).decode()}))
        except ConnectionClosed:  # the daemon ended the session (the reader reports why)
            return False
        return True

    def finish(self) -> dict[str, Any] | None:
        """Ask for the last finals and wait for them, however long a busy machine takes: the daemon's stall
        watchdog, not a timer here, decides when a worker is stuck (the socket then closes)."""
        from websockets.exceptions import ConnectionClosed

        with contextlib.suppress(ConnectionClosed):
            self.ws.send(json.dumps({"type": "hasr.finish"}))
        self.done.wait()
        self.ws.close()
        return self.result


class Said:
    """Loading and queue events as lines on stderr, each once (the daemon repeats a phase per listener)."""

    def __init__(self) -> None:
        self.last = ""

    def status(self, ev: Event) -> None:
        line = (f"loading: {ev.phase}" if ev.type == "hasr.loading"
                else f"waiting for the worker (position {ev.position})")
        if line != self.last:
            self.last = line
            say(line)


def run(path: str, source: Iterator[bytes], stop: threading.Event, language: str, prompt: str, silence_ms: int,
        on_sentence: Callable[[Event], None], on_draft: Callable[[str, int], None],
        on_status: Callable[[Event], None] | None = None,
        on_done: Callable[[int], None] | None = None) -> dict[str, Any]:
    s = Session(path, language, prompt, silence_ms, on_sentence, on_draft, on_status, on_done)
    try:
        for piece in source:
            if not s.send(piece):
                break
    except KeyboardInterrupt:
        pass
    stop.set()
    result = s.finish()
    if s.broken:
        raise BrokenPipeError
    if result is None:
        raise CliError(s.error or "the live session ended without a result", EXIT_FAILED)
    return result


def interruptible(stop: threading.Event) -> None:
    """SIGINT and SIGTERM end the input; the session still gets its last final sentences."""
    def handler(signum: int, frame: Any) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)


def typist(env: dict[str, str] | None = None) -> list[str]:
    """The command that types text into the focused window, for this session (X11 or Wayland; ydotool, which
    writes to the kernel's input device, also without either)."""
    e = os.environ if env is None else env
    wayland = bool(e.get("WAYLAND_DISPLAY"))
    tools = (["wtype", "ydotool", "xdotool"] if wayland else ["xdotool", "wtype", "ydotool"])
    for tool in tools:
        if tool == "xdotool" and not e.get("DISPLAY") or tool == "wtype" and not wayland:
            continue  # xdotool needs an X display (XWayland's reaches only X windows); wtype needs Wayland
        if shutil.which(tool, path=e.get("PATH")):
            return {"xdotool": ["xdotool", "type", "--clearmodifiers", "--delay", "0", "--"],
                    "wtype": ["wtype", "--"], "ydotool": ["ydotool", "type", "--"]}[tool]
    if not wayland and not e.get("DISPLAY"):  # no desktop session here: xdotool and wtype have nothing to reach
        raise CliError("there is no graphical session to type into: neither DISPLAY (X11) nor WAYLAND_DISPLAY "
                       "(Wayland) is set; run dictate from a terminal in your desktop session (X11 needs "
                       "xdotool, Wayland wtype or ydotool), or install ydotool with its ydotoold to type "
                       "without one; `hasrctl listen` prints what you say instead", EXIT_FAILED)
    where = "Wayland (install wtype or ydotool)" if wayland else "X11 (install xdotool)"
    raise CliError(f"nothing can type into windows here: on {where}", EXIT_FAILED)

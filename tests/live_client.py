"""A plain WebSocket client of /v1/realtime that follows OpenAI's Realtime transcription protocol (tests)."""

from __future__ import annotations

import base64
import json
import threading
import time
from typing import Any

import numpy as np
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import unix_connect

RATE = 24000
PIECE = 3840  # 160 ms at 24 kHz


def pcm16_24k(pcm16k: np.ndarray) -> bytes:
    """16 kHz float32 -> the protocol's PCM16 at 24 kHz (linear interpolation is plenty for speech tests)."""
    n = int(len(pcm16k) * 1.5)
    x = np.interp(np.arange(n) / 1.5, np.arange(len(pcm16k)), pcm16k)
    return (np.clip(x, -1, 1) * 32767).astype("<i2").tobytes()


class LiveClient:
    def __init__(self, sock: str, query: str = "?intent=transcription&hasr_events=true") -> None:
        # closed by close()
        self.ws = unix_connect(sock, f"ws://hasr/v1/realtime{query}", max_size=None, open_timeout=30).__enter__()
        self.events: list[dict[str, Any]] = []
        self.t0 = time.monotonic()
        self.closed = threading.Event()
        self.close_code: int | None = None
        self.lock = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for raw in self.ws:
                ev = json.loads(raw)
                ev["_t"] = time.monotonic() - self.t0
                with self.lock:
                    self.events.append(ev)
                    self.lock.notify_all()
        except ConnectionClosed:
            pass
        finally:
            self.close_code = self.ws.close_code
            self.closed.set()
            with self.lock:
                self.lock.notify_all()

    def send(self, event: dict[str, Any] | str | bytes) -> None:
        self.ws.send(event if isinstance(event, (str, bytes)) else json.dumps(event))

    def update(self, **transcription: Any) -> dict[str, Any]:
        n = len(self.of("transcription_session.updated"))
        self.send({"type": "transcription_session.update", "session": {"input_audio_format": "pcm16",
                   "input_audio_transcription": {"model": "gpt-4o-transcribe", **transcription}}})
        return self.wait_for("transcription_session.updated", count=n + 1)

    def feed(self, pcm24: bytes, realtime: bool = True) -> float:
        """Send the audio in 160 ms appends (paced to the clock); returns when the last one was sent."""
        start = time.monotonic()
        for k, i in enumerate(range(0, len(pcm24), PIECE * 2)):
            if realtime:
                ahead = start + k * PIECE / RATE - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
            try:
                self.send({"type": "input_audio_buffer.append",
                           "audio": base64.b64encode(pcm24[i:i + PIECE * 2]).decode()})
            except ConnectionClosed:  # the daemon ended the session (its error event says why)
                break
        return time.monotonic() - self.t0

    def of(self, kind: str) -> list[dict[str, Any]]:
        with self.lock:
            return [e for e in self.events if e["type"] == kind]

    def wait_for(self, kind: str, count: int = 1, timeout: float = 60.0) -> dict[str, Any]:
        end = time.monotonic() + timeout
        with self.lock:
            while True:
                found = [e for e in self.events if e["type"] == kind]
                if len(found) >= count:
                    return found[count - 1]
                left = end - time.monotonic()
                if left <= 0 or self.closed.is_set():
                    raise AssertionError(f"no {kind} (#{count}) within {timeout} s; got "
                                         f"{[e['type'] for e in self.events][-30:]}")
                self.lock.wait(min(left, 0.5))

    def finish(self, timeout: float = 120.0) -> dict[str, Any]:
        self.send({"type": "hasr.finish"})
        result: dict[str, Any] = self.wait_for("hasr.done", timeout=timeout)["result"]
        self.closed.wait(10)
        return result

    def close(self) -> None:
        self.ws.close()

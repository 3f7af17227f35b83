"""16 kHz mono float32 PCM from FFmpeg's frames (PyAV), for the decoder (audio.py) and live audio
(realtime_events.py, hasrctl's microphone): a filter graph that averages the channels and resamples, the grouping
of short frames that keeps it fast, PCM16 bytes as a frame, and a frame's samples as bytes.

No numpy (the daemon's decode path stays free of it): the samples go from the frames' own buffers.
"""

from __future__ import annotations

from typing import cast

import av
import av.filter

SAMPLE_RATE = 16_000
_GROUP_SEC = 0.5  # decoded audio gathered into one frame before the filter graph (memory stays a second at most)


class Resampler:
    """16 kHz mono planar float through an FFmpeg filter graph; rebuilt when the input format/rate/layout changes
    mid-stream (chained ogg, mp3), after flushing the old one.

    The channels are *averaged* (``pan`` with a gain of 1/N on each): FFmpeg's own mono downmix adds channels at
    -3 dB, which lifts dual-mono recordings by 1.41 (peaks above 1.0); the mean stays in range. The mix is done in
    float before resampling (both are linear, so the order only changes rounding), which resamples one channel
    instead of N.
    """

    def __init__(self, keep_channels: bool = False) -> None:
        self.keep = keep_channels  # speakers="channels": interleaved float32, each channel as the source has it
        self._key: tuple[str, str, int] | None = None
        self._graph: av.filter.Graph | None = None
        self._sink: av.filter.context.FilterContext | None = None

    def resample(self, frame: av.AudioFrame | None) -> list[av.AudioFrame]:
        return self.resample_many([frame])

    def resample_many(self, frames: list[av.AudioFrame | None]) -> list[av.AudioFrame]:
        """Push frames (None flushes), then drain once: the sink says "no more for now" by raising, so one drain
        per batch instead of one per frame is most of the decoder's speed on short-packet formats (WAV, Opus)."""
        out: list[av.AudioFrame] = []
        pushed = False
        for frame in frames:
            if frame is None:
                if self._graph is not None:
                    self._graph.push(None)
                    out += self._drain()
                    self._graph = self._sink = self._key = None
                pushed = False
                continue
            key = (frame.format.name, frame.layout.name, frame.sample_rate)
            if key != self._key:
                if self._graph is not None:
                    if pushed:
                        out += self._drain()
                    self._graph.push(None)
                    out += self._drain()
                self._build(frame)
                self._key = key
            assert self._graph is not None
            self._graph.push(frame)
            pushed = True
        if pushed:
            out += self._drain()
        return out

    def _build(self, frame: av.AudioFrame) -> None:
        g = av.filter.Graph()
        rate = frame.sample_rate
        tb = frame.time_base or f"1/{rate}"
        nodes = [g.add("abuffer", sample_rate=str(rate), sample_fmt=frame.format.name,
                       channel_layout=frame.layout.name, time_base=str(tb))]
        if self.keep:
            nodes.append(g.add("aformat", sample_fmts="flt"))  # interleaved: frame after frame of every channel
        elif frame.layout.name != "mono":  # also one channel that is not FC ("FL", "1 channels"): pan maps it as is
            n = frame.layout.nb_channels
            gain = repr(1.0 / n)  # exact in float for 1, 2, 4, 8 channels
            nodes.append(g.add("aformat", sample_fmts="fltp"))  # mix in float, not in the decoder's s16/s32
            nodes.append(g.add("pan", "mono|c0=" + "+".join(f"{gain}*c{i}" for i in range(n))))
        if rate != SAMPLE_RATE:  # at 16 kHz already, aformat converts the samples alone (a copy less)
            nodes.append(g.add("aresample", out_sample_rate=str(SAMPLE_RATE)))
        # Planar mono is one plane of packed float32: the bytes of "flt" without a conversion pass.
        if self.keep:
            nodes.append(g.add("aformat", sample_fmts="flt", sample_rates=str(SAMPLE_RATE)))
        else:
            nodes.append(g.add("aformat", sample_fmts="fltp", channel_layouts="mono", sample_rates=str(SAMPLE_RATE)))
        nodes.append(g.add("abuffersink"))
        g.link_nodes(*nodes)
        g.configure()
        self._graph, self._sink = g, nodes[-1]

    def _drain(self) -> list[av.AudioFrame]:
        assert self._sink is not None
        out: list[av.AudioFrame] = []
        while True:
            try:
                out.append(cast(av.AudioFrame, self._sink.pull()))
            except (av.error.BlockingIOError, av.error.EOFError):  # wants more input / flushed
                return out


class Grouper:
    """Decoded frames gathered into frames of about _GROUP_SEC (an FFmpeg FIFO): WAV and Opus packets hold
    1,024 samples or less, and each frame costs a push, a pull and a write in Python; grouped, the decoder keeps
    up with ``faster_whisper.decode_audio`` (which groups the same way). A format change flushes the group."""

    def __init__(self) -> None:
        self._fifo: av.AudioFifo | None = None
        self._key: tuple[str, str, int] | None = None

    def add(self, decoded: list[av.AudioFrame]) -> list[av.AudioFrame | None]:
        out: list[av.AudioFrame | None] = []
        for frame in decoded:
            key = (frame.format.name, frame.layout.name, frame.sample_rate)
            if key != self._key or self._fifo is None:
                out += self.flush()
                self._fifo, self._key = av.AudioFifo(), key
            frame.pts = None  # the FIFO checks that timestamps follow on; damaged input skips some
            self._fifo.write(frame)
            if self._fifo.samples >= frame.sample_rate * _GROUP_SEC:
                out.append(self._fifo.read())
        return out

    def flush(self) -> list[av.AudioFrame | None]:
        if self._fifo is None or not self._fifo.samples:
            return []
        return [self._fifo.read()]


def s16_mono_frame(data: bytes, rate: int) -> av.AudioFrame:
    """Interleaved PCM16 mono bytes as a frame to resample (live audio: the WebSocket's, the microphone's)."""
    frame = av.AudioFrame(format="s16", layout="mono", samples=len(data) // 2)
    plane = frame.planes[0]
    plane.update(data + bytes(plane.buffer_size - len(data)))  # the plane is padded past the samples
    frame.sample_rate = rate
    return frame


def frames_bytes(frames: list[av.AudioFrame], sample_bytes: int) -> bytes:
    """The samples of packed mono frames (without their planes' padding)."""
    return b"".join(bytes(memoryview(f.planes[0]).cast("B")[:f.samples * sample_bytes]) for f in frames)

"""The daemon <-> worker protocol: one msgspec Struct per message, tagged unions, length-prefixed frames.

A frame is a 4-byte big-endian length followed by a msgpack body. The worker speaks first (``Hello``) before
it imports anything heavy; PROTOCOL_VERSION is checked on both sides (the daemon passes ``--protocol``).
PCM travels out of band: a memfd attached to the ``Transcribe`` frame with SCM_RIGHTS (``pcm="fd"``), or
the path of a 0600 file in the daemon's private runtime directory.

A live session (protocol 2) is ``LiveStart``, then ``LiveAudio`` frames (float32 16 kHz mono, in band: a few
KB each), ``LiveCommit`` (end the current utterance now) and one ``LiveEnd``; the worker answers with the same
``Draft`` / ``Sentence`` / ``Progress`` events as a file job (``segment`` = the utterance), ``Turn`` at each
utterance's start, stop and completion, and a ``Result`` (or ``Failed``) after ``LiveEnd`` or ``Cancel``.

This module is imported by the worker before ``Hello``: it must stay free of heavy imports.
"""

from __future__ import annotations

import struct
from typing import Any, Literal

import msgspec

from hasrd.options import Options
from hasrd.transcript import Transcript, numbers

PROTOCOL_VERSION = 2
MAX_FRAME = 64 * 1024 * 1024
_LEN = struct.Struct(">I")

Phase = Literal["decoding", "finding_speech", "detecting_language", "finding_speakers"]
"""What a job's worker runs now (``Progress.phase``)."""
TurnKind = Literal["started", "stopped", "completed"]
"""A live utterance's turn (``Turn.kind``)."""


class Msg(msgspec.Struct, tag=True, forbid_unknown_fields=False):
    """Base of every message; the tag is the class name."""


# ---- worker -> daemon -------------------------------------------------------------------------------------


class Hello(Msg):
    protocol: int
    pid: int
    python: str
    hasr_version: str


class Loading(Msg):
    phase: str
    expected_s: float = 0.0


class Ready(Msg):
    load_s: float
    identity: dict[str, Any] = {}


class LoadFailed(Msg):
    code: str
    message: str


class Progress(Msg):
    """How far a job is: ``done_s`` of ``total_s`` seconds of audio are settled. Sent per decoded segment, per
    piece of audio the VAD passed (a silent stretch moves it too), and again while one long step runs, so that a
    worker that sends nothing is stuck, not busy; ``phase`` says what runs now."""

    id: int
    done_s: float
    total_s: float
    phase: Phase = "decoding"


class Draft(Msg):
    id: int
    text: str
    segment: int = 0  # long audio is drafted per silence-split segment; text is that segment's draft


class Sentence(Msg):
    id: int
    index: int
    text: str
    engine: str
    start_s: float
    end_s: float
    segment: int = 0  # the segment (file: long-audio segment, as in Draft; live: the utterance) it belongs to
    speaker: str = ""  # who said it, where speakers were asked for


class Turn(Msg):
    """Live only: utterance ``segment`` started (speech heard), stopped (its end: finals follow) or completed
    (every final sentence of it is out; ``text`` is all of them joined)."""

    id: int
    segment: int
    kind: TurnKind
    start_s: float = 0.0
    end_s: float = 0.0
    text: str = ""


class Result(Msg):
    id: int
    result: Transcript


class Failed(Msg):
    id: int
    code: str
    message: str


class Pong(Msg):
    nonce: int


# ---- daemon -> worker -------------------------------------------------------------------------------------


class Transcribe(Msg):
    id: int
    pcm: str  # "fd" (memfd attached to this frame) or an absolute path to raw float32 16 kHz mono
    frames: int
    channels: int = 1  # speakers="channels": the PCM is this many channels, interleaved (frames counts samples of one)
    language: str = ""
    options: Options = msgspec.field(default_factory=Options)


class LiveStart(Msg):
    id: int
    language: str = ""
    options: Options = msgspec.field(default_factory=Options)


class LiveAudio(Msg):
    id: int
    pcm: bytes  # float32 little-endian, 16 kHz mono


class LiveCommit(Msg):
    id: int


class LiveEnd(Msg):
    id: int


class Cancel(Msg):
    id: int


class Ping(Msg):
    nonce: int


class Shutdown(Msg):
    pass


WorkerMsg = Hello | Loading | Ready | LoadFailed | Progress | Draft | Sentence | Turn | Result | Failed | Pong
DaemonMsg = Transcribe | LiveStart | LiveAudio | LiveCommit | LiveEnd | Cancel | Ping | Shutdown

_encoder = msgspec.msgpack.Encoder(enc_hook=numbers)  # numpy numbers in events and results
worker_decoder: msgspec.msgpack.Decoder[WorkerMsg] = msgspec.msgpack.Decoder(WorkerMsg)  # type: ignore[arg-type]
daemon_decoder: msgspec.msgpack.Decoder[DaemonMsg] = msgspec.msgpack.Decoder(DaemonMsg)  # type: ignore[arg-type]


class FrameError(Exception):
    """A frame is malformed or too large: the channel is unusable."""


def encode(msg: Msg) -> bytes:
    body = _encoder.encode(msg)
    return _LEN.pack(len(body)) + body


def split_frames(buf: bytearray) -> list[bytes]:
    """Remove every complete frame body from ``buf`` (in place) and return them in order."""
    out: list[bytes] = []
    while len(buf) >= 4:
        (n,) = _LEN.unpack_from(buf)
        if n > MAX_FRAME:
            raise FrameError(f"frame of {n} bytes exceeds the {MAX_FRAME}-byte limit")
        if len(buf) < 4 + n:
            break
        out.append(bytes(buf[4 : 4 + n]))
        del buf[: 4 + n]
    return out


def decode_worker(body: bytes) -> WorkerMsg:
    try:
        return worker_decoder.decode(body)
    except msgspec.DecodeError as e:
        raise FrameError(f"undecodable worker message: {e}") from None


def decode_daemon(body: bytes) -> DaemonMsg:
    try:
        return daemon_decoder.decode(body)
    except msgspec.DecodeError as e:
        raise FrameError(f"undecodable daemon message: {e}") from None

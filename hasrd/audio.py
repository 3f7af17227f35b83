"""Audio checks and decoding in the daemon, before any worker is used (docs/ARCHITECTURE.md "Audio", invariant 2).

Every input becomes 16 kHz mono float32 little-endian PCM, decoded and resampled by PyAV (FFmpeg) *streaming*
into a binary file object, so a four-hour file costs no more memory than a four-second one. The daemon writes
into a sealed memfd (:func:`decode_to_memfd`) that it hands to the worker with SCM_RIGHTS.

The decode path does not import numpy (about 14 MB of the daemon's idle RSS): the channels are averaged and
resampled by an FFmpeg filter graph (resample.py), and the PCM is written straight from the frames' buffers. Only
:func:`decode_to_array` (tests, short inputs) uses numpy, imported when it is called.

This is the one boundary where ``av.error.*`` and ``OSError`` become hasr errors, each with its own code:

- ``errors.AUDIO_PATH_CODES`` (:class:`~hasrd.errors.AudioPathError`, 400): the named file cannot be used.
- ``errors.AUDIO_DECODE_CODES`` (:class:`~hasrd.errors.AudioDecodeError`, 400): the bytes are not decodable audio.
- ``audio_too_long`` (:class:`~hasrd.errors.AudioTooLong`, 400): longer than ``max_audio_sec``.
- ``pcm_store_failed`` (:class:`~hasrd.errors.HasrError`, 500): writing the PCM failed (the daemon's fault).

Damaged input: a truncated or partly corrupt file yields the audio FFmpeg can still decode (as the ffmpeg
command does); packets that fail to decode are skipped and counted in ``AudioInfo.damaged``. Only when nothing
decodes at all is it an error. Files that refer to other files (HLS playlists, ffconcat scripts) are refused:
FFmpeg's nested opens are blocked, so a path or an upload can never make the daemon read a third file.
"""

from __future__ import annotations

import array
import errno
import fcntl
import io
import os
import stat
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, BinaryIO, Protocol

import av

if TYPE_CHECKING:  # numpy is imported by decode_to_array only: the daemon's decode path never loads it
    import numpy as np

from hasrd.errors import AudioDecodeError, AudioPathError, AudioTooLong, Cancelled, HasrError, InvalidSpeakers
from hasrd.resample import SAMPLE_RATE, Grouper, Resampler

BYTES_PER_FRAME = 4  # float32
# A header may only estimate the duration (a VBR mp3's is its size over the first frame's bitrate; ADTS, MPEG
# streams, raw AC-3 likewise): there refuse early only when it is clearly over the limit. Other containers
# (WAV, FLAC, Ogg, MP4, Matroska, ...) state it: refused at once (a 5-hour WAV was decoded for 27 s first, issue
# 32 #8). The exact limit is enforced on the decoded frames either way.
_EARLY_SLACK = 1.25
_ESTIMATED = frozenset({"mp3", "aac", "mpeg", "mpegts", "ac3", "eac3", "dts", "amr", "mp2"})
# Give up on input whose first packets all fail (random bytes that probe as mp3): no need to walk 1 GB of it.
_MAX_LEADING_FAILURES = 64
_LITTLE = sys.byteorder == "little"

Source = str | bytes | bytearray | memoryview | IO[bytes]


class Writer(Protocol):
    """Where PCM goes: any binary writer (a buffered memfd file, BytesIO, a raw file; short writes are retried)."""

    def write(self, data: Any, /) -> int | None: ...


@dataclass(frozen=True)
class AudioInfo:
    """What was decoded: ``frames`` samples of 16 kHz mono PCM, and what the source was."""

    frames: int
    duration_s: float
    sample_rate: int  # of the source stream
    channels: int  # of the source stream
    container: str  # FFmpeg's demuxer name, e.g. "wav", "mov,mp4,m4a,3gp,3g2,mj2"
    codec: str  # FFmpeg's decoder name, e.g. "mp3float"
    decode_s: float
    damaged: int = 0  # packets skipped because they did not decode (+1 when reading stopped early)
    kept_channels: int = 1  # channels in the PCM: 1 (mixed), or the source's (keep_channels)


def _path_error(code: str, path: str, what: str) -> AudioPathError:
    return AudioPathError(f"'{path}' {what}", code=code)


def _open_path(path: str | os.PathLike[str] | None) -> BinaryIO:
    """Open a named audio file for reading after every check; the checks run on the opened fd (no race)."""
    if path is None or path == "":
        raise AudioPathError("an audio file path is required", code="path_required")
    if not isinstance(path, str):
        path = os.fspath(path)
    if "\0" in path:
        raise AudioPathError(f"{path!r} is not a valid path (it contains a NUL byte)", code="path_invalid")
    if not os.path.isabs(path):
        raise _path_error("path_not_absolute", path, "is not an absolute path (the daemon has its own working "
                          "directory; give the full path)")
    try:
        st = os.stat(path)
    except OSError as e:
        raise _stat_error(path, e) from None
    _check_mode(path, st)
    try:
        # O_NONBLOCK: should the file have become a FIFO since stat(), open() must not hang the daemon.
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError as e:
        raise _stat_error(path, e) from None
    try:
        st = os.fstat(fd)
        _check_mode(path, st)
        if st.st_size == 0:
            raise _path_error("empty_file", path, "is empty (0 bytes)")
        return os.fdopen(fd, "rb", buffering=0)
    except BaseException:
        os.close(fd)
        raise


def _stat_error(path: str, e: OSError) -> AudioPathError:
    if e.errno == errno.ENOENT:
        if os.path.islink(path):
            return _path_error("file_not_found", path, "is a broken symbolic link (its target does not exist)")
        return _path_error("file_not_found", path, "does not exist")
    if e.errno == errno.ENOTDIR:
        return _path_error("file_not_found", path, "does not exist (a component of the path is not a directory)")
    if e.errno == errno.ELOOP:
        return _path_error("symlink_loop", path, "is a loop of symbolic links")
    if e.errno in (errno.EACCES, errno.EPERM):
        return _path_error("permission_denied", path, f"cannot be read by the daemon (uid {os.geteuid()}): "
                           "permission denied; upload the file instead")
    if e.errno == errno.ENAMETOOLONG:
        return _path_error("path_invalid", path[:200], "is too long a path")
    return _path_error("read_error", path, f"cannot be read: {e.strerror or e}")


def _check_mode(path: str, st: os.stat_result) -> None:
    if stat.S_ISREG(st.st_mode):
        return
    kind = ("a directory" if stat.S_ISDIR(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode)
            else "a named pipe (FIFO)" if stat.S_ISFIFO(st.st_mode) else "a device" if
            stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "not a regular file")
    raise _path_error("not_a_file", path, f"is {kind}, not an audio file")


def check_path(path: str | os.PathLike[str] | None) -> str:
    """Validate a client-named audio file (absolute, exists, regular, readable, non-empty); return the path."""
    _open_path(path).close()
    assert path is not None
    return os.fspath(path)


class _NestedOpen(PermissionError):
    """FFmpeg tried to open a second file or URL named inside the input."""


def _refuse_nested_open(url: str, flags: int, options: dict[str, Any]) -> Any:
    raise _NestedOpen(f"refers to another file or URL ({url}), and playlists are not followed")


def _write_all(out: Writer, frame: av.AudioFrame) -> int:
    n = frame.samples
    # The plane is padded (aligned) past its samples: write only the samples (of every channel, when interleaved).
    width = BYTES_PER_FRAME * (frame.layout.nb_channels if not frame.format.is_planar else 1)
    view = memoryview(frame.planes[0]).cast("B")[:n * width]
    if not _LITTLE:  # pragma: no cover - Linux on big-endian hardware
        swapped = array.array("f")
        swapped.frombytes(view)
        swapped.byteswap()
        view = memoryview(swapped).cast("B")
    while view:
        w = out.write(view)
        if w is None:  # pragma: no cover - a non-blocking raw writer
            raise BlockingIOError(errno.EAGAIN, "output would block")
        view = view[w:]
    return n


def _as_file(source: Source, name: str | None) -> tuple[IO[bytes], str, bool]:
    """Return (readable file, name for messages, whether we own the file)."""
    if isinstance(source, (str, os.PathLike)):
        return _open_path(source), os.fspath(source), True
    label = f"upload '{name}'" if name else "upload"
    if isinstance(source, (bytes, bytearray, memoryview)):
        if len(source) == 0:
            raise AudioPathError(f"the {label} is empty (0 bytes)", code="empty_file")
        return io.BytesIO(source), label, True
    if _remaining(source) == 0:
        raise AudioPathError(f"the {label} is empty (0 bytes)", code="empty_file")
    return source, label, False


def _remaining(f: IO[bytes]) -> int | None:
    """Bytes left in a seekable file (None when it cannot seek: FFmpeg will find out)."""
    try:
        pos = f.tell()
        end = f.seek(0, os.SEEK_END)
        f.seek(pos)
        return end - pos
    except (OSError, ValueError):
        return None


def decode(source: Source, out: Writer, *, max_audio_sec: float | None = None,
           name: str | None = None, stop: Callable[[int], bool] = lambda frames: False,
           keep_channels: bool = False) -> AudioInfo:
    """Decode a path (checked as by :func:`check_path`), bytes or a seekable binary file into ``out``.

    Writes 16 kHz mono float32 LE PCM to ``out`` as it goes; ``name`` labels an upload in messages; ``stop(frames)``
    is asked between packets with the frames written so far (True: the client left, Cancelled; it may raise).
    ``keep_channels``: the source's channels interleaved instead of their mean (speakers="channels").
    Raises AudioPathError / AudioDecodeError / AudioTooLong (400) or HasrError ``pcm_store_failed`` (500).
    """
    t0 = time.perf_counter()
    f, label, owned = _as_file(source, name)
    shown = f"'{label}'" if isinstance(source, (str, os.PathLike)) else label
    try:
        return _decode_file(f, shown, out, max_audio_sec, t0, stop, keep_channels)
    finally:
        if owned:
            f.close()


def _open(f: IO[bytes]) -> Any:
    """av.open, telling PyAV before 19 to decode metadata leniently (``metadata_errors="ignore"``); 19 dropped the
    argument and refuses it (every file failed as 'internal' on a machine with 19.0.2)."""
    kw: dict[str, Any] = dict(mode="r", io_open=_refuse_nested_open, buffer_size=1 << 16)
    try:
        return av.open(f, metadata_errors="ignore", **kw)
    except TypeError as e:
        if "metadata_errors" not in str(e):
            raise
        return av.open(f, **kw)


def _decode_file(f: IO[bytes], shown: str, out: Writer, max_sec: float | None, t0: float,
                 stop: Callable[[int], bool], keep: bool = False) -> AudioInfo:
    try:
        container = _open(f)
    except _NestedOpen as e:
        raise AudioDecodeError(f"{shown} could not be decoded: it {e}", code="undecodable") from None
    except av.error.FFmpegError as e:  # also FFmpeg's own refusals (concat "unsafe file name")
        raise AudioDecodeError(f"{shown} could not be decoded: not an audio or video format FFmpeg recognises, "
                               f"or damaged or truncated ({e.strerror or e})", code="undecodable") from None
    except OSError as e:
        raise AudioPathError(f"{shown} cannot be read: {e.strerror or e}", code="read_error") from None
    with container:
        if not container.streams.audio:
            found = ", ".join(f"{s.type} {s.codec_context.name if s.codec_context else '?'}"
                              for s in container.streams) or "no streams"
            raise AudioDecodeError(f"{shown} contains no audio stream (FFmpeg read it as "
                                   f"'{container.format.name}': {found})", code="no_audio_stream")
        stream = container.streams.audio[0]
        ctx = stream.codec_context
        declared = _declared_seconds(container, stream)
        if max_sec is not None and declared is not None and declared > _early_limit(container, max_sec):
            raise _too_long(shown, declared, max_sec)
        max_frames = None if max_sec is None else int(max_sec * SAMPLE_RATE) + 1
        channels = int(ctx.layout.nb_channels if ctx.layout else 0)
        frames, damaged = _pump(container, stream, out, shown, max_frames, max_sec, stop, channels if keep else 0)
        if frames == 0:
            if damaged:
                raise AudioDecodeError(f"{shown} could not be decoded: none of its {ctx.name} audio "
                                       f"packets decode (damaged, or not really {ctx.name})", code="undecodable")
            raise AudioDecodeError(f"{shown} contains no audio (its {ctx.name} stream has 0 samples)",
                                   code="no_audio_frames")
        return AudioInfo(frames=frames, duration_s=frames / SAMPLE_RATE, sample_rate=int(ctx.sample_rate or 0),
                         channels=channels, container=container.format.name, codec=ctx.name,
                         decode_s=time.perf_counter() - t0, damaged=damaged,
                         kept_channels=channels if keep else 1)


def _early_limit(container: Any, max_sec: float) -> float:
    """The declared duration past which a file is refused before decoding (see _ESTIMATED)."""
    names = set(str(container.format.name or "").split(","))
    if names & _ESTIMATED:
        return max_sec * _EARLY_SLACK + 1
    return max_sec + 0.05  # a header's rounding


def _declared_seconds(container: Any, stream: Any) -> float | None:
    if stream.duration and stream.time_base:
        return float(stream.duration * stream.time_base)
    if container.duration:
        return container.duration / av.time_base
    return None


def _too_long(shown: str, seconds: float, max_sec: float) -> AudioTooLong:
    return AudioTooLong(f"{shown} is longer than the limit of {_secs(max_sec)} (HASR_MAX_AUDIO_SEC); it is at least "
                        f"{_secs(seconds)} long")


def _secs(s: float) -> str:
    """Seconds for people: '2.5 s', '14 min 3 s', '4 h 0 min'."""
    if s < 60:
        return f"{s:.1f} s".replace(".0 s", " s")
    if s < 3600:
        return f"{int(s // 60)} min {int(s % 60)} s"
    return f"{int(s // 3600)} h {int(s % 3600 // 60)} min"


def _pump(container: Any, stream: Any, out: Writer, shown: str, max_frames: int | None,
          max_sec: float | None, stop: Callable[[int], bool], keep: int = 0) -> tuple[int, int]:
    """Demux, decode, resample and write; return (frames written, damaged packets). ``keep``: the stream's channel
    count, kept interleaved (0: mixed to mono); a stream whose count changes midway cannot keep them."""
    resampler = Resampler(keep_channels=bool(keep))
    grouper = Grouper()
    frames = damaged = 0
    packets = container.demux(stream)
    while True:
        try:
            packet = next(packets)
        except StopIteration:
            break
        except av.error.FFmpegError:  # a demuxer error mid-file: keep what decoded, as ffmpeg does
            damaged += 1
            break
        except OSError as e:
            raise AudioPathError(f"{shown} cannot be read: {e.strerror or e}", code="read_error") from None
        if stop(frames):
            raise Cancelled(f"decoding {shown} was stopped: the client went away")
        try:
            decoded = packet.decode()
        except av.error.FFmpegError:
            damaged += 1
            if frames == 0 and damaged >= _MAX_LEADING_FAILURES:
                break
            continue
        if keep and any(d.layout.nb_channels != keep for d in decoded):
            raise AudioDecodeError(f"{shown} changes its number of channels midway: its channels cannot be told "
                                   f"apart", code="undecodable")
        batch = grouper.add(decoded)
        if batch:
            frames += _emit(resampler.resample_many(batch), out)
            if max_frames is not None and frames > max_frames:
                assert max_sec is not None
                raise _too_long(shown, frames / SAMPLE_RATE, max_sec)
    frames += _emit(resampler.resample_many([*grouper.flush(), None]), out)
    if max_frames is not None and frames > max_frames:
        assert max_sec is not None
        raise _too_long(shown, frames / SAMPLE_RATE, max_sec)
    return frames, damaged


def _emit(frames: list[av.AudioFrame], out: Writer) -> int:
    n = 0
    try:
        for frame in frames:
            n += _write_all(out, frame)
    except OSError as e:
        raise HasrError(f"could not store the decoded audio: {e.strerror or e}", code="pcm_store_failed") from None
    return n


MAX_CHANNELS = 8  # speakers="channels": one speaker per channel, at most this many


def check_channels(info: AudioInfo, name: str, flag: str = "speakers=channels") -> None:
    """Speakers per channel need a file of 2 to MAX_CHANNELS channels: InvalidSpeakers saying what to ask instead
    (``flag``: how the asker spells the request)."""
    if info.kept_channels < 2:
        raise InvalidSpeakers(f"{name} has one channel: {flag} needs a recording with one speaker per channel (a "
                              f"call, a podcast recorded per microphone); {flag.replace('channels', 'auto')} tells "
                              f"the voices of a mixed recording apart", param="speakers")
    if info.kept_channels > MAX_CHANNELS:
        raise InvalidSpeakers(f"{name} has {info.kept_channels} channels: {flag} takes at most {MAX_CHANNELS}",
                              param="speakers")


def decode_to_array(source: Source, *, max_audio_sec: float | None = None, name: str | None = None,
                    keep_channels: bool = False) -> tuple[np.ndarray, AudioInfo]:
    """Decode into memory: (float32 array of 16 kHz mono samples, or ``[frames, channels]`` with
    ``keep_channels``, info). For tests, short inputs and ``hasrctl batch``'s actors."""
    import numpy as np  # here only: the daemon's decode path stays free of numpy (its idle RSS)

    buf = io.BytesIO()
    info = decode(source, buf, max_audio_sec=max_audio_sec, name=name, keep_channels=keep_channels)
    pcm = np.frombuffer(buf.getbuffer(), dtype="<f4").astype(np.float32)
    return (pcm.reshape(-1, info.kept_channels) if keep_channels else pcm), info


def decode_to_memfd(source: Source, *, max_audio_sec: float | None = None, name: str | None = None,
                    stop: Callable[[int], bool] = lambda frames: False,
                    keep_channels: bool = False) -> tuple[int, AudioInfo]:
    """Decode into a new sealed memfd ("hasr-pcm"); return (fd, info). The caller owns and closes the fd.

    The memfd is sealed against writes, growth and shrinking, so the worker can map it and trust its size.
    """
    fd = os.memfd_create("hasr-pcm", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        with open(fd, "wb", buffering=1 << 20, closefd=False) as out:
            info = decode(source, out, max_audio_sec=max_audio_sec, name=name, stop=stop, keep_channels=keep_channels)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS,
                    fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SEAL)
        os.lseek(fd, 0, os.SEEK_SET)
        return fd, info
    except BaseException:
        os.close(fd)
        raise

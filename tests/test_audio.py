"""hasrd.audio against real files written by PyAV (FFmpeg) in temporary directories."""

from __future__ import annotations

import errno
import fcntl
import io
import os
import random
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import wave
from collections.abc import Iterator, Sequence
from pathlib import Path

import av
import numpy as np
import pytest

from hasrd import audio
from hasrd.errors import AudioDecodeError, AudioPathError, AudioTooLong, HasrError, InvalidAudio
from tests.conftest import need


def tone(rate: int, seconds: float, freq: float, amp: float = 0.5) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def write_media(path: Path, codec: str = "pcm_s16le", *, fmt: str | None = None, rate: int = 44100,
                channels: list[np.ndarray] | None = None, seconds: float = 2.0,
                more_audio: Sequence[float] = (), video: str | None = None, audio_stream: bool = True) -> Path:
    """Encode a 440 Hz tone (or the given channels) with PyAV; optionally extra audio streams or a video."""
    chans = channels if channels is not None else [tone(rate, seconds, 440.0)] * 2
    layout = "mono" if len(chans) == 1 else "stereo"
    with av.open(str(path), "w", format=fmt) as c:
        streams = []
        if audio_stream:
            opts = {"strict": "experimental"} if codec == "vorbis" else {}  # FFmpeg's own vorbis encoder
            streams.append((c.add_stream(codec, rate=rate, layout=layout, options=opts), np.stack(chans)))
        for freq in more_audio:
            streams.append((c.add_stream(codec, rate=rate, layout=layout),
                            np.stack([tone(rate, seconds, freq)] * len(chans))))
        if video:
            v = c.add_stream(video, rate=10)
            v.width, v.height, v.pix_fmt = 64, 48, "yuv420p"
            for i in range(int(seconds * 10)):
                img = np.full((48, 64, 3), i * 10 % 255, np.uint8)
                for p in v.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                    c.mux(p)
            for p in v.encode(None):
                c.mux(p)
        for s, data in streams:
            step = s.codec_context.frame_size or 1024
            for i in range(0, data.shape[1], step):
                frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(data[:, i:i + step]), format="fltp",
                                                   layout=layout)
                frame.sample_rate = rate
                for p in s.encode(frame):
                    c.mux(p)
            for p in s.encode(None):
                c.mux(p)
    return path


def dominant_hz(x: np.ndarray) -> float:
    spec = np.abs(np.fft.rfft(x * np.hanning(len(x))))
    return float(np.argmax(spec) * audio.SAMPLE_RATE / len(x))


def code_of(fn, *args, **kw) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidAudio) as ei:
        fn(*args, **kw)
    assert ei.value.status == 400 and ei.value.message
    return ei.value.code


@pytest.fixture()
def wav(tmp_path: Path) -> Path:
    return write_media(tmp_path / "tone.wav")


@pytest.fixture()
def shared_dir() -> Iterator[Path]:
    """A directory that other users may traverse (pytest's tmp_path is 0700 under /tmp/pytest-of-root)."""
    d = Path(tempfile.mkdtemp(prefix="hasr-audio-", dir="/tmp"))
    d.chmod(0o755)
    yield d
    for p in d.iterdir():
        p.chmod(0o600)
        p.unlink()
    d.rmdir()


# ---- check_path -------------------------------------------------------------------------------------------


def test_a_good_path_is_returned_and_symlinks_to_files_are_followed(wav: Path, tmp_path: Path) -> None:
    link = tmp_path / "link.wav"
    link.symlink_to(wav)
    assert audio.check_path(str(wav)) == str(wav)
    assert audio.check_path(link) == str(link)


@pytest.mark.parametrize("path, code", [(None, "path_required"), ("", "path_required"),
                                        ("tone.wav", "path_not_absolute"), ("./x/../tone.wav", "path_not_absolute"),
                                        ("/tmp/a\0b.wav", "path_invalid"), ("/" + "x" * 5000, "path_invalid")])
def test_paths_that_cannot_name_a_file_are_refused(path: str | None, code: str) -> None:
    assert code_of(audio.check_path, path) == code


def test_a_missing_file_a_broken_link_and_a_file_used_as_directory_are_not_found(wav: Path, tmp_path: Path) -> None:
    (tmp_path / "dangling").symlink_to(tmp_path / "gone.wav")
    for p, words in [(tmp_path / "nope.wav", "does not exist"), (tmp_path / "dangling", "broken symbolic link"),
                     (wav / "x.wav", "not a directory")]:
        with pytest.raises(AudioPathError) as ei:
            audio.check_path(str(p))
        assert ei.value.code == "file_not_found" and words in ei.value.message and str(p) in ei.value.message


def test_a_symlink_loop_is_refused_with_its_own_code(tmp_path: Path) -> None:
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    (tmp_path / "self").symlink_to(tmp_path / "self")
    assert code_of(audio.check_path, str(tmp_path / "a")) == "symlink_loop"
    assert code_of(audio.check_path, str(tmp_path / "self")) == "symlink_loop"


def test_directories_sockets_and_fifos_are_not_files_and_a_fifo_never_blocks(tmp_path: Path) -> None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(tmp_path / "s.wav"))
    os.mkfifo(tmp_path / "f.wav")
    try:
        for name, kind in [("", "a directory"), ("s.wav", "a socket"), ("f.wav", "a named pipe")]:
            # in a thread: opening a fifo with no writer blocks for ever, which a join can see
            raised: list[BaseException] = []

            def decode(name: str, raised: list[BaseException]) -> None:
                try:
                    audio.decode_to_array(str(tmp_path / name))
                except BaseException as e:  # noqa: BLE001 - handed to the test thread
                    raised.append(e)

            t = threading.Thread(target=decode, args=(name, raised), daemon=True)
            t.start()
            t.join(120)  # only a blocked open runs into this
            assert not t.is_alive(), f"decoding {kind} blocked"
            assert raised and isinstance(raised[0], AudioPathError), raised
            assert raised[0].code == "not_a_file" and kind in raised[0].message
        assert code_of(audio.check_path, "/dev/null") == "not_a_file"
    finally:
        sock.close()


def test_an_empty_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "empty.mp3").touch()
    assert code_of(audio.check_path, str(tmp_path / "empty.mp3")) == "empty_file"
    assert code_of(audio.decode_to_array, b"", name="x.wav") == "empty_file"
    with tempfile.SpooledTemporaryFile() as spooled:
        assert code_of(audio.decode_to_array, spooled, name="x.wav") == "empty_file"


def _check_as_nobody(path: str) -> str:
    """check_path in a forked child that dropped root for nobody; returns the code (or 'ok')."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        code = "crash"
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            try:
                audio.check_path(path)
                code = "ok"
            except AudioPathError as e:
                code = e.code
        finally:
            os.write(w, code.encode())
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        out = f.read().decode()
    os.waitpid(pid, 0)
    return out


def test_a_file_the_daemon_user_cannot_read_is_permission_denied(wav: Path, shared_dir: Path) -> None:
    need(os.geteuid() == 0, "needs root to switch to the nobody user")
    readable = shared_dir / "ok.wav"
    readable.write_bytes(wav.read_bytes())
    readable.chmod(0o644)
    locked = shared_dir / "locked.wav"
    locked.write_bytes(wav.read_bytes())
    locked.chmod(0o600)
    assert _check_as_nobody(str(readable)) == "ok"
    assert _check_as_nobody(str(locked)) == "permission_denied"
    shared_dir.chmod(0o700)  # now the directory is not searchable: stat() itself is refused
    assert _check_as_nobody(str(readable)) == "permission_denied"


def test_a_name_with_spaces_and_cjk_characters_decodes(tmp_path: Path) -> None:
    p = write_media(tmp_path / "会议 记录 2024 (final).wav")
    x, info = audio.decode_to_array(str(p))
    assert info.frames == 32000 and len(x) == 32000
    with pytest.raises(AudioPathError) as ei:
        audio.check_path(str(tmp_path / "不存在 的.wav"))
    assert "不存在 的.wav" in ei.value.message


# ---- decoding ---------------------------------------------------------------------------------------------

CONTAINERS = [("wav", "pcm_s16le", None), ("mp3", "libmp3lame", None), ("flac", "flac", None),
              ("opus", "libopus", "ogg"), ("ogg", "vorbis", "ogg"), ("m4a", "aac", "ipod"), ("webm", "libopus", "webm"),
              ("mka", "libmp3lame", "matroska")]


@pytest.mark.parametrize("ext, codec, fmt", CONTAINERS)
def test_every_container_decodes_to_the_same_16k_mono_signal(tmp_path: Path, ext: str, codec: str,
                                                             fmt: str | None) -> None:
    rate = 48000 if codec == "libopus" else 44100
    p = write_media(tmp_path / f"tone.{ext}", codec, fmt=fmt, rate=rate, seconds=3.0)
    x, info = audio.decode_to_array(str(p))
    assert x.dtype == np.float32 and info.frames == len(x)
    assert abs(info.frames - 48000) <= 0.05 * audio.SAMPLE_RATE  # encoder priming/padding only
    assert info.duration_s == pytest.approx(3.0, abs=0.05)
    assert abs(dominant_hz(x) - 440) < 3
    assert 0.4 < float(np.abs(x).max()) < 0.6  # dual-mono is averaged, not summed at -3 dB
    assert (info.sample_rate, info.channels) == (rate, 2) and info.codec and info.container


def test_the_first_audio_stream_of_a_video_is_used(tmp_path: Path) -> None:
    p = write_media(tmp_path / "clip.mkv", "aac", fmt="matroska", more_audio=[1000.0], video="mpeg4")
    x, info = audio.decode_to_array(str(p))
    assert abs(dominant_hz(x) - 440) < 3 and info.duration_s == pytest.approx(2.0, abs=0.05)
    p = write_media(tmp_path / "clip.mp4", "aac", fmt="mp4", video="mpeg4")
    assert audio.decode_to_array(str(p))[1].duration_s == pytest.approx(2.0, abs=0.05)


def test_8k_stereo_and_48k_float_inputs_are_resampled_and_channels_averaged(tmp_path: Path) -> None:
    left, right = tone(8000, 2.0, 300.0, 0.4), tone(8000, 2.0, 300.0, 0.2)
    x, info = audio.decode_to_array(str(write_media(tmp_path / "phone.wav", rate=8000, channels=[left, right])))
    assert (info.sample_rate, info.channels, info.frames) == (8000, 2, 32000)
    assert float(np.abs(x[1000:-1000]).max()) == pytest.approx(0.3, abs=0.01)
    assert abs(dominant_hz(x) - 300) < 3
    f32 = write_media(tmp_path / "studio.wav", "pcm_f32le", rate=48000, channels=[tone(48000, 2.0, 1000.0, 0.9)])
    x, info = audio.decode_to_array(str(f32))
    assert (info.sample_rate, info.channels, info.codec, info.frames) == (48000, 1, "pcm_f32le", 32000)
    assert float(np.abs(x).max()) == pytest.approx(0.9, abs=0.01) and abs(dominant_hz(x) - 1000) < 3


def write_s16(path: Path, layout: str, channels: list[np.ndarray], rate: int = 16000) -> Path:
    """A wav of packed s16 frames in the given layout (PyAV cannot build planar frames of 8+ channels)."""
    inter = (np.stack(channels).T * 32767).astype(np.int16).reshape(1, -1)
    n = len(channels)
    with av.open(str(path), "w") as c:
        s = c.add_stream("pcm_s16le", rate=rate, layout=layout)
        for i in range(0, inter.shape[1], 1024 * n):
            frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(inter[:, i:i + 1024 * n]), format="s16",
                                               layout=layout)
            frame.sample_rate = rate
            for p in s.encode(frame):
                c.mux(p)
        for p in s.encode(None):
            c.mux(p)
    return path


def test_surround_and_unnamed_layouts_are_averaged_over_all_their_channels(tmp_path: Path) -> None:
    # Not FFmpeg's downmix (which drops the LFE and weighs the others): the plain mean, signs included.
    # 8+ channels also guard against PyAV's AudioFrame.to_ndarray(), which crashed the process on 7.1 input.
    amps = [0.8, 0.4, -0.4, 0.2, 0.6, 0.0, 0.2, 0.2]
    cases = [("5.1", amps[:6], 48000), ("7.1", amps, 44100), ("8 channels", amps, 8000)]
    for layout, gains, rate in cases:
        p = write_s16(tmp_path / f"{layout}.wav", layout, [tone(rate, 2.0, 300.0, a) for a in gains], rate)
        x, info = audio.decode_to_array(str(p))
        assert (info.channels, info.frames, len(x)) == (len(gains), 32000, 32000), layout
        assert float(np.abs(x[1000:-1000]).max()) == pytest.approx(sum(gains) / len(gains), abs=0.005), layout
        assert abs(dominant_hz(x) - 300) < 3
    with wave.open(str(tmp_path / "w12.wav"), "wb") as w:  # a plain WAVE header: no layout, just 12 channels
        w.setnchannels(12)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes((np.stack([tone(16000, 1.0, 300.0, 0.6)] + [np.zeros(16000, np.float32)] * 11).T
                       * 32767).astype("<i2").tobytes())
    x, info = audio.decode_to_array(str(tmp_path / "w12.wav"))
    assert info.channels == 12 and float(np.abs(x).max()) == pytest.approx(0.05, abs=0.002)


def test_a_change_of_rate_and_layout_mid_stream_is_followed(tmp_path: Path) -> None:
    a = write_media(tmp_path / "a.mp3", "libmp3lame", rate=44100, seconds=3.0)  # stereo, 440 Hz
    b = write_media(tmp_path / "b.mp3", "libmp3lame", rate=22050, seconds=3.0, channels=[tone(22050, 3.0, 1000.0)])
    (tmp_path / "ab.mp3").write_bytes(a.read_bytes() + b.read_bytes())
    x, info = audio.decode_to_array(str(tmp_path / "ab.mp3"))
    assert info.duration_s == pytest.approx(6.0, abs=0.2)
    first, last = x[4000:40000], x[-40000:-4000]
    assert abs(dominant_hz(first) - 440) < 3 and abs(dominant_hz(last) - 1000) < 3
    assert 0.4 < float(np.abs(first).max()) < 0.6 and 0.4 < float(np.abs(last).max()) < 0.6


def test_a_video_without_audio_has_no_audio_stream(tmp_path: Path) -> None:
    p = write_media(tmp_path / "silent.mp4", fmt="mp4", video="mpeg4", audio_stream=False)
    with pytest.raises(AudioDecodeError) as ei:
        audio.decode_to_array(str(p))
    assert ei.value.code == "no_audio_stream" and "video mpeg4" in ei.value.message


@pytest.mark.parametrize("name, content", [
    # seeded, so a lucky draw cannot probe as some container
    ("noise.wav", random.Random(1).randbytes(200_000)), ("noise", random.Random(2).randbytes(200_000)),
    ("notes.mp3", b"hello world, this is not audio\n" * 500), ("notes.txt", "会议记录\n".encode() * 500),
    ("list.m3u8", b"#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:5,\n/etc/passwd\n#EXT-X-ENDLIST\n"),
    ("cat.ffconcat", b"ffconcat version 1.0\nfile /etc/passwd\n")])
def test_random_bytes_text_and_playlists_are_undecodable(tmp_path: Path, name: str, content: bytes) -> None:
    p = tmp_path / name
    p.write_bytes(content)
    assert code_of(audio.decode_to_array, str(p)) == "undecodable"
    assert code_of(audio.decode_to_array, content, name=name) == "undecodable"
    # a file object with a .name lets FFmpeg probe by extension too
    with open(p, "rb") as f, pytest.raises(AudioDecodeError) as ei:
        audio.decode_to_array(f, name=name)
    assert ei.value.code == "undecodable" and name in ei.value.message


def test_a_wav_header_without_frames_has_no_audio_frames(tmp_path: Path) -> None:
    with wave.open(str(tmp_path / "h.wav"), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
    assert (tmp_path / "h.wav").stat().st_size == 44
    assert code_of(audio.decode_to_array, str(tmp_path / "h.wav")) == "no_audio_frames"


def test_truncated_files_yield_the_audio_before_the_cut(tmp_path: Path) -> None:
    for ext, codec in [("mp3", "libmp3lame"), ("wav", "pcm_s16le"), ("flac", "flac")]:
        whole = write_media(tmp_path / f"whole.{ext}", codec, seconds=4.0).read_bytes()
        cut = tmp_path / f"cut.{ext}"
        cut.write_bytes(whole[:len(whole) // 2])
        x, info = audio.decode_to_array(str(cut))
        assert 1.5 < info.duration_s < 2.5, ext
        assert abs(dominant_hz(x) - 440) < 3


def test_a_truncated_mp4_without_its_index_is_undecodable(tmp_path: Path) -> None:
    whole = write_media(tmp_path / "a.m4a", "aac", fmt="ipod", seconds=4.0).read_bytes()
    (tmp_path / "cut.m4a").write_bytes(whole[:len(whole) // 2])  # the moov atom is at the end
    with pytest.raises(AudioDecodeError, match="damaged or truncated"):
        audio.decode_to_array(str(tmp_path / "cut.m4a"))


def test_corrupt_packets_are_skipped_and_counted(tmp_path: Path) -> None:
    data = bytearray(write_media(tmp_path / "a.flac", "flac", seconds=4.0).read_bytes())
    for i in range(len(data) // 3, len(data) // 2, 997):
        data[i] ^= 0xFF
    x, info = audio.decode_to_array(bytes(data), name="a.flac")
    assert info.damaged > 0 and 1.0 < info.duration_s <= 4.0


def test_audio_over_the_limit_is_refused_from_the_header_or_while_decoding(wav: Path, tmp_path: Path) -> None:
    seen = []

    class Sink(io.RawIOBase):
        def writable(self) -> bool:
            return True

        def write(self, b) -> int:  # type: ignore[no-untyped-def,override]
            seen.append(len(b))
            return len(b)

    with pytest.raises(AudioTooLong) as ei:
        audio.decode(str(wav), Sink(), max_audio_sec=0.5)  # header says 2 s: refused before decoding
    assert ei.value.code == "audio_too_long" and "HASR_MAX_AUDIO_SEC" in ei.value.message and not seen
    with pytest.raises(AudioTooLong):  # a WAV states its length: refused at once, however close (issue 32 #8)
        audio.decode(str(wav), Sink(), max_audio_sec=1.9)
    assert not seen
    assert audio.decode(str(wav), Sink(), max_audio_sec=2.0).frames == 32000
    seen.clear()
    mp3 = write_media(tmp_path / "a.mp3", "libmp3lame", seconds=2.0)  # its length is an estimate: some slack
    with pytest.raises(AudioTooLong):
        audio.decode(str(mp3), Sink(), max_audio_sec=1.9)  # within the slack: counted while decoding
    assert 0 < sum(seen) <= (1.9 * audio.SAMPLE_RATE + 20000) * 4


def test_uploads_decode_from_bytes_and_file_objects(wav: Path) -> None:
    data = wav.read_bytes()
    a, _ = audio.decode_to_array(data, name="x.wav")
    b, _ = audio.decode_to_array(io.BytesIO(data))
    with tempfile.SpooledTemporaryFile(max_size=1000) as spooled:  # what multipart parsers hand over
        spooled.write(data)
        spooled.seek(0)
        c, info = audio.decode_to_array(spooled)  # type: ignore[arg-type]
        assert not spooled.closed  # the caller's file stays open
    assert np.array_equal(a, b) and np.array_equal(a, c) and info.frames == 32000


def test_decoding_streams_into_the_output_in_small_writes(tmp_path: Path) -> None:
    p = write_media(tmp_path / "long.flac", "flac", seconds=60.0)
    sizes: list[int] = []

    class Recorder(io.RawIOBase):
        def writable(self) -> bool:
            return True

        def write(self, b) -> int:  # type: ignore[no-untyped-def,override]
            sizes.append(len(memoryview(b).cast("B")))
            return len(sizes) and sizes[-1]

    info = audio.decode(str(p), Recorder())
    assert sum(sizes) == info.frames * 4 == 60 * audio.SAMPLE_RATE * 4
    assert len(sizes) > 100 and max(sizes) <= audio.SAMPLE_RATE * 4  # never a second of PCM at once


def test_short_writes_are_completed(wav: Path) -> None:
    chunks: list[bytes] = []

    class Dribble(io.RawIOBase):
        def writable(self) -> bool:
            return True

        def write(self, b) -> int:  # type: ignore[no-untyped-def,override]
            chunks.append(bytes(memoryview(b).cast("B")[:7]))
            return len(chunks[-1])

    info = audio.decode(str(wav), Dribble())
    ref, _ = audio.decode_to_array(str(wav))
    assert np.array_equal(np.frombuffer(b"".join(chunks), "<f4"), ref) and info.frames == len(ref)


def test_a_failing_output_is_the_daemons_error_not_the_clients(wav: Path) -> None:
    class Full(io.RawIOBase):
        def writable(self) -> bool:
            return True

        def write(self, b) -> int:  # type: ignore[no-untyped-def,override]
            raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(HasrError) as ei:
        audio.decode(str(wav), Full())
    assert ei.value.code == "pcm_store_failed" and ei.value.status == 500


def test_decode_to_memfd_gives_a_sealed_fd_with_exactly_the_pcm(wav: Path) -> None:
    fd, info = audio.decode_to_memfd(str(wav))
    try:
        assert os.fstat(fd).st_size == info.frames * 4 and os.lseek(fd, 0, os.SEEK_CUR) == 0
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
        assert seals & fcntl.F_SEAL_WRITE and seals & fcntl.F_SEAL_SHRINK and seals & fcntl.F_SEAL_GROW
        with pytest.raises(PermissionError):
            os.write(fd, b"x")
        assert fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC
        pcm = np.frombuffer(os.pread(fd, info.frames * 4, 0), "<f4")
        assert np.array_equal(pcm, audio.decode_to_array(str(wav))[0])
        assert stat.S_ISREG(os.fstat(fd).st_mode) and os.readlink(f"/proc/self/fd/{fd}").startswith("/memfd:hasr-pcm")
    finally:
        os.close(fd)
    with pytest.raises(AudioDecodeError):  # no fd leaks on failure
        before = len(os.listdir("/proc/self/fd"))
        try:
            audio.decode_to_memfd(b"junk" * 100, name="junk")
        finally:
            assert len(os.listdir("/proc/self/fd")) == before


def test_the_daemons_decode_path_does_not_import_numpy(tmp_path: Path) -> None:
    # numpy is ~14 MB of RSS that the daemon would keep for its whole life after its first transcription.
    stereo = write_media(tmp_path / "stereo.mp3", "libmp3lame", seconds=1.0)
    mono = write_media(tmp_path / "mono.flac", "flac", rate=16000, seconds=1.0, channels=[tone(16000, 1.0, 440.0)])
    code = ("import os, sys\n"
            "from hasrd.audio import decode_to_memfd\n"
            "for p in sys.argv[1:]:\n"
            "    fd, info = decode_to_memfd(p)\n"
            "    assert os.fstat(fd).st_size == info.frames * 4 > 0\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'numpy'))\n")
    root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-c", code, str(stereo), str(mono)], cwd=root, env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_decoding_is_much_faster_than_real_time(tmp_path: Path) -> None:
    p = write_media(tmp_path / "minute.mp3", "libmp3lame", seconds=60.0)
    info = min((audio.decode(str(p), io.BytesIO()) for _ in range(2)), key=lambda i: i.decode_s)
    # ~800x on an idle core (benchmarks report the real figure); this only guards against a gross regression
    assert info.duration_s / info.decode_s > 50

"""``hasrctl batch``'s rules without Ray: which files are audio by content, where outputs go, the manifest's journal
and lock, what a rerun skips, and the progress line."""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hasrctl.batch import inputs, manifest
from hasrctl.batch.command import _sizes, parse_formats
from hasrctl.batch.progress import Progress
from hasrctl.client import UsageError
from hasrd.formats import Format
from cliutil import cli_env
from conftest import need
from speech import DATA


@pytest.mark.parametrize("head, media", [
    (b"RIFF\x24\x00\x00\x00WAVEfmt ", True),
    (b"ID3\x04\x00\x00\x00\x00\x00\x00", True),
    (b"\xff\xfb\x90\x64\x00\x00\x00\x00", True),  # an MP3 frame without a tag
    (b"\xff\xf1\x50\x80\x00\x1f\xfc\x00", True),  # ADTS AAC
    (b"fLaC\x00\x00\x00\x22", True),
    (b"OggS\x00\x02\x00\x00", True),
    (b"\x00\x00\x00\x20ftypM4A \x00\x00\x00\x00", True),
    (b"\x00\x00\x00\x1cftypavif\x00\x00\x00\x00", False),  # an AVIF image is ISO BMFF too
    (b"\x1a\x45\xdf\xa3\x01\x00\x00\x00", True),  # Matroska / WebM
    (b"FORM\x00\x00\x00\x00AIFF", True),
    (b"FORM\x00\x00\x00\x00ILBM", False),
    (b"\xff\xd8\xff\xe0\x00\x10JFIF", False),  # JPEG
    (b"\x89PNG\r\n\x1a\n", False),
    (b"%PDF-1.7\n", False),
    (b"hello world\n", False),
    (b"", False),
])
def test_audio_is_known_by_its_first_bytes_not_its_name(head: bytes, media: bool) -> None:
    assert inputs.looks_like_media(head) is media


def test_directories_are_walked_for_audio_by_content(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "talk.bin").write_bytes((DATA / "en_hello_world.flac").read_bytes())
    (tmp_path / "a" / "x.wav").write_text("not really a wav\n")  # a suffix is not content
    (tmp_path / "a" / ".hidden.flac").write_bytes((DATA / "en_hello_world.flac").read_bytes())
    os.symlink(tmp_path / "nowhere", tmp_path / "a" / "dangling.flac")
    found = inputs.expand([str(tmp_path / "a")])
    assert [os.path.relpath(f, tmp_path) for f in found.files] == ["a/b/talk.bin"]
    assert found.skipped == 0 and found.suspects == [str(tmp_path / "a" / "x.wav")]  # named like audio: a row


def test_outdir_inside_an_input_directory_is_not_walked(tmp_path: Path) -> None:
    (tmp_path / "out" / "x").mkdir(parents=True)
    (tmp_path / "out" / "x" / "a.flac").write_bytes(b"fLaC")  # what a user put there is not an input
    (tmp_path / "b.flac").write_bytes(b"fLaC")
    found = inputs.expand([str(tmp_path)], exclude=str(tmp_path / "out"))
    assert [Path(f).name for f in found.files] == ["b.flac"]


def test_a_named_file_is_always_taken_so_its_failure_is_recorded(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("hi\n")
    assert inputs.expand([str(notes)]).files == [str(notes)]


def test_the_same_file_twice_is_one_input(tmp_path: Path) -> None:
    clip = tmp_path / "c.flac"
    clip.write_bytes((DATA / "en_hello_world.flac").read_bytes())
    os.symlink(clip, tmp_path / "link.flac")
    assert inputs.expand([str(clip), str(tmp_path), str(tmp_path / "*.flac")]).files == [str(clip)]


def test_globs_are_expanded_even_when_the_shell_did_not(tmp_path: Path) -> None:
    for name in ("a.flac", "b.flac", "c.mp3"):
        (tmp_path / name).write_bytes(b"fLaC")
    assert [Path(f).name for f in inputs.expand([str(tmp_path / "*.flac")]).files] == ["a.flac", "b.flac"]


def test_missing_inputs_are_all_named_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as e:
        inputs.expand([str(tmp_path / "gone.wav"), str(tmp_path / "*.nope"), str(tmp_path)])
    assert "gone.wav (no such file or directory)" in e.value.message and "*.nope (the pattern" in e.value.message


def test_an_empty_list_is_bad_usage() -> None:
    with pytest.raises(UsageError, match="standard input lists no input"):
        inputs.expand(["-"], io.StringIO("# nothing\n\n"))


def test_outputs_mirror_the_inputs_and_same_stems_keep_their_whole_names() -> None:
    files = ["/r/a/x.wav", "/r/a/x.mp3", "/r/a/y.wav", "/r/b/x.wav", "/r/b/.env", "/r/noext"]
    names = inputs.output_names(files, "/r")
    assert names == {"/r/a/x.wav": "a/x.wav", "/r/a/x.mp3": "a/x.mp3", "/r/a/y.wav": "a/y", "/r/b/x.wav": "b/x",
                     "/r/b/.env": "b/.env", "/r/noext": "noext"}
    found = inputs.Found(files=files, roots=["/r/a", "/r/b"])
    assert inputs.mirror_root(found) == "/r"


def test_formats_are_parsed_once_each_in_order() -> None:
    assert parse_formats(("txt,srt", "vtt", "SRT")) == ["text", "srt", "vtt"]
    assert parse_formats(()) == ["text"]
    with pytest.raises(UsageError):
        parse_formats(("pdf",))


@pytest.mark.parametrize("cpus, gpus, workers, gpw, expected", [
    (16, 0, None, None, (8, 0.0, 2.0)),  # CPU actors: half the CPUs, two CPUs each
    (2, 0, None, None, (2, 0.0, 1.0)),  # at least two where there are two CPUs
    (1, 0, None, None, (1, 0.0, 1.0)),
    (2, 0, 1, None, (1, 0.0, 2.0)),
    (16, 2, None, None, (2, 1.0, 1.0)),  # one actor per GPU
    (16, 2, None, 0.5, (4, 0.5, 1.0)),  # two actors on each GPU
    (16, 2, None, 0, (8, 0.0, 2.0)),  # CPU actors on a GPU cluster when asked
])
def test_actor_sizes(cpus: int, gpus: float, workers: int | None, gpw: float | None,
                     expected: tuple[int, float, float]) -> None:
    assert _sizes(cpus, gpus, workers, gpw) == expected


def test_more_gpus_per_worker_than_the_cluster_has_is_bad_usage() -> None:
    with pytest.raises(UsageError, match="has 1 GPU"):
        _sizes(8, 1, None, 2)


def _row(path: str, **kw: object) -> dict[str, object]:
    st = os.stat(path)
    row: dict[str, object] = {"path": path, "status": "ok", "options": {"f": 1}, "outputs": [],
                              "size": st.st_size, "mtime_ns": st.st_mtime_ns, "hash": manifest.file_hash(path)}
    row.update(kw)
    return row


def test_a_rerun_skips_only_what_is_done_with_the_same_bytes_and_options(tmp_path: Path) -> None:
    f = tmp_path / "a.flac"
    f.write_bytes(b"fLaC one")
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.txt").write_text("x\n")
    row = _row(str(f), outputs=["a.txt"])
    hashed: list[str] = []

    def hasher(p: str) -> str:
        hashed.append(p)
        return manifest.file_hash(p)

    assert manifest.up_to_date(row, {"f": 1}, str(f), str(out), hasher) and not hashed
    assert not manifest.up_to_date(row, {"f": 2}, str(f), str(out))  # other options
    os.utime(f, ns=(1, 1))  # touched, same bytes: hashed, still skipped
    assert manifest.up_to_date(row, {"f": 1}, str(f), str(out), hasher) and hashed == [str(f)]
    f.write_bytes(b"fLaC two")  # same size, other bytes
    assert not manifest.up_to_date(row, {"f": 1}, str(f), str(out))
    f.write_bytes(b"fLaC one")
    (out / "a.txt").unlink()  # an output deleted: redone
    assert not manifest.up_to_date(row, {"f": 1}, str(f), str(out))


def test_failures_of_the_file_itself_are_settled_others_retried(tmp_path: Path) -> None:
    f = tmp_path / "bad.wav"
    f.write_bytes(b"RIFF junk")
    content = _row(str(f), status="failed", error={"code": "undecodable", "message": "..."})
    crash = _row(str(f), status="failed", error={"code": "worker_died", "message": "..."})
    assert manifest.up_to_date(content, {"f": 1}, str(f), str(tmp_path))
    assert not manifest.up_to_date(content, {"f": 1}, str(f), str(tmp_path), retry_failed=True)
    assert not manifest.up_to_date(crash, {"f": 1}, str(f), str(tmp_path))


def test_a_driver_killed_mid_run_loses_no_row_and_leaves_one_per_input(tmp_path: Path) -> None:
    """Rows in the journal that the manifest does not hold yet, a row of each in both, and a last line cut in
    half (kill -9 mid-write): the next run has every whole row once, the manifest rewritten."""
    out = tmp_path / "out"
    out.mkdir()
    (out / manifest.NAME).write_text(json.dumps({"path": "/a", "status": "failed"}) + "\n"
                                     + json.dumps({"path": "/b", "status": "ok"}) + "\n")
    (out / manifest.JOURNAL).write_text(json.dumps({"path": "/a", "status": "ok"}) + "\n"
                                        + json.dumps({"path": "/c", "status": "ok"}) + "\n" + '{"path": "/d", "sta')
    book = manifest.Manifest(str(out)).open()
    try:
        assert {p: r["status"] for p, r in book.rows.items()} == {"/a": "ok", "/b": "ok", "/c": "ok"}
        rows = [json.loads(line) for line in (out / manifest.NAME).read_text().splitlines()]
        assert [r["path"] for r in rows] == ["/a", "/b", "/c"]
        assert (out / manifest.JOURNAL).read_text() == ""
        book.record({"path": "/d", "status": "ok"})
        journal = (out / manifest.JOURNAL).read_text()  # on disk at once, before any rewrite
        assert json.loads(journal)["path"] == "/d"
    finally:
        book.close()
    assert not (out / manifest.JOURNAL).exists()
    assert [json.loads(x)["path"] for x in (out / manifest.NAME).read_text().splitlines()] == ["/a", "/b", "/c", "/d"]


def test_a_ctrl_c_between_the_journal_line_and_the_books_keeps_the_row(tmp_path: Path, monkeypatch: Any) -> None:
    """Ctrl-C lands just after a row's journal line is fsynced, before the run's own books hold it (CI saw this:
    the journal was deleted at the end and the finished file vanished): closing folds the journal in first."""
    real_fsync = os.fsync

    def fsync_then_ctrl_c(fd: int) -> None:
        real_fsync(fd)
        raise KeyboardInterrupt

    book = manifest.Manifest(str(tmp_path)).open()
    try:
        monkeypatch.setattr(manifest.os, "fsync", fsync_then_ctrl_c)
        with pytest.raises(KeyboardInterrupt):
            book.record({"path": "/a", "status": "ok"})
        monkeypatch.setattr(manifest.os, "fsync", real_fsync)
    finally:
        book.close()
    assert not (tmp_path / manifest.JOURNAL).exists()
    assert [json.loads(x)["path"] for x in (tmp_path / manifest.NAME).read_text().splitlines()] == ["/a"]


def test_two_runs_cannot_write_one_outdir(tmp_path: Path) -> None:
    book = manifest.Manifest(str(tmp_path)).open()
    try:
        with pytest.raises(UsageError, match="another hasrctl batch is writing there"):
            manifest.Manifest(str(tmp_path)).open()
        # another process too (flock is per open file description)
        code = f"from hasrctl.batch import manifest; manifest.Manifest({str(tmp_path)!r}).open()"
        res = subprocess.run(["python3", "-c", code], capture_output=True, text=True)
        assert res.returncode != 0 and "another hasrctl batch" in res.stderr
    finally:
        book.close()
    manifest.Manifest(str(tmp_path)).open().close()  # free again


def test_the_progress_line_counts_files_hours_speed_and_eta() -> None:
    now = [100.0]
    out = io.StringIO()
    bar = Progress(out, 4, {"a": 600.0, "b": 600.0, "c": 1200.0, "d": 1200.0}, tty=False, clock=lambda: now[0])
    now[0] = 160.0
    bar.file("a", "a.wav", True, "600 s", 600.0)
    assert out.getvalue() == "[1/4] a.wav: ok, 600 s\n"
    assert bar.line() == "batch: 1/4 files, 10.0 min of audio, 10.0x real time, ETA 0:05:00"
    bar.file("b", "b.wav", False, "undecodable", 0.0)
    assert "failed, undecodable" in out.getvalue()
    assert bar.line() == "batch: 2/4 files, 10.0 min of audio, 1 failed, 10.0x real time, ETA 0:04:00"
    quiet = io.StringIO()
    q = Progress(quiet, 2, {}, tty=False, quiet=True)
    q.file("a", "a.wav", True, "ok", 1.0)
    q.file("b", "b.wav", False, "bad", 0.0)
    assert quiet.getvalue() == "[2/2] b.wav: failed, bad\n"


def _actor(monkeypatch: pytest.MonkeyPatch, **env: str) -> object:
    """The Ray actor's class run in this process (no Ray): the fake engine, as an actor gets its job."""
    from hasrctl.batch.actor import JOB_VAR, Transcriber

    monkeypatch.setenv("HASR_ENGINE", "fake")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv(JOB_VAR, json.dumps({"engine": "fake", "language": "", "options": {}, "formats": ["text"],
                                            "rules": {"max_line_width": 0, "max_line_count": 2, "max_cue_sec": 7.0,
                                                      "min_cue_sec": 0.83}, "model": "base"}))
    return Transcriber()


def test_a_bad_file_is_a_failed_row_with_the_daemons_code_never_an_exception(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    t = _actor(monkeypatch)
    (tmp_path / "empty.wav").write_bytes(b"")
    (tmp_path / "notes.txt").write_text("not audio at all\n" * 10)
    (tmp_path / "subs.srt").write_text("1\n00:00:00,000 --> 00:00:01,000\nhello\n")
    codes = {name: t.transcribe(str(tmp_path / name))["error"]["code"]  # type: ignore[attr-defined]
             for name in ("empty.wav", "notes.txt", "gone.flac")}
    assert codes == {"empty.wav": "empty_file", "notes.txt": "undecodable", "gone.flac": "read_error"}
    ok = t.transcribe(str(DATA / "en_hello_world.flac"))  # type: ignore[attr-defined]
    assert ok["status"] == "ok" and ok["rendered"]["text"].strip() and ok["duration_s"] > 0.9


def test_a_model_that_cannot_load_fails_each_file_with_the_reason(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    t = _actor(monkeypatch, HASR_FAKE_FAIL_LOAD="model_unavailable:no weights here")
    row = t.transcribe(str(DATA / "en_hello_world.flac"))  # type: ignore[attr-defined]
    assert row["status"] == "failed" and row["error"]["code"] == "model_unavailable"
    assert "could not load" in row["error"]["message"] and "no weights here" in row["error"]["message"]
    assert row["hash"].startswith("sha256:")  # the file itself was read: a rerun retries it (not its content)


def test_without_ray_installed_it_says_how_to_get_it(tmp_path: Path) -> None:
    """A machine without the batch extra: exit 2 and the pip line, before any input is scanned."""
    from cliutil import cli_env, hasrctl

    fake = tmp_path / "noray" / "ray"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('No module named ray')\n")
    env = cli_env(str(tmp_path / "e"))
    env["PYTHONPATH"] = f"{tmp_path / 'noray'}{os.pathsep}{env['PYTHONPATH']}"
    res = hasrctl("batch", str(tmp_path / "missing-but-not-checked-yet"), "-o", str(tmp_path / "o"), env=env)
    assert res.returncode == 2, res
    assert "pip install 'hasr[cpu,batch]'" in res.stderr


def test_an_mpeg_ts_stream_is_known_by_its_sync_bytes(tmp_path: Path) -> None:
    ts = bytearray(os.urandom(600))
    ts[0] = ts[188] = ts[376] = 0x47
    (tmp_path / "rec.ts").write_bytes(bytes(ts))
    ts[376] = 0x00
    (tmp_path / "not.ts").write_bytes(bytes(ts))
    assert [Path(f).name for f in inputs.expand([str(tmp_path)]).files] == ["rec.ts"]


class _RayThatRefuses:
    """ray.init as the Ray Client fails it: the messages are Ray 2.60's."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.inits = 0

    def init(self, **kwargs: object) -> None:
        self.inits += 1
        if self.errors:
            raise self.errors.pop(0)

    def shutdown(self) -> None:
        pass


SERVER_FAILED = RuntimeError("Initialization failure from server:\nRuntimeError: Starting Ray client server failed. "
                             "See ray_client_server_23000.err for detailed logs.")


@pytest.mark.parametrize("errors, inits, refused", [
    ([SERVER_FAILED], 2, None),  # the head's per-driver server died at start once: a second try connects
    ([SERVER_FAILED] * 3, 4, None),  # three times: the fourth try connects
    ([SERVER_FAILED] * 4, 4, "Starting Ray client server failed"),  # not a fifth
    ([ConnectionError("ray client connection timeout")], 1, "set RAY_AUTH_MODE=token"),  # no retry for this
])
def test_the_ray_client_is_tried_again_only_when_the_heads_server_failed_to_start(
        monkeypatch: pytest.MonkeyPatch, errors: list[Exception], inits: int, refused: str | None) -> None:
    from hasrctl.batch import run

    fake = _RayThatRefuses(*errors)
    monkeypatch.setattr(run, "import_ray", lambda: fake)
    monkeypatch.setattr(run.time, "sleep", lambda _s: None)
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    with socket.socket() as head:  # something answers at the address: the TCP check passes
        head.bind(("127.0.0.1", 0))
        head.listen()
        address = f"ray://127.0.0.1:{head.getsockname()[1]}"
        if refused is None:
            assert run.connect(address, None) is fake
        else:
            with pytest.raises(run.RayUnreachable, match=refused):
                run.connect(address, None)
    assert fake.inits == inits


class _WatchedFifo:
    """A real FIFO with a writer waiting on it: if anything opens it for reading, the writer's open returns and
    is counted (and closed at once, so the reader gets end of file instead of hanging the test)."""

    def __init__(self, path: Path) -> None:
        os.mkfifo(path)
        self.path, self.opened, self._over = path, 0, threading.Event()
        self._thread = threading.Thread(target=self._write_end, daemon=True)
        self._thread.start()

    def _write_end(self) -> None:
        while True:
            os.close(os.open(self.path, os.O_WRONLY))  # blocks until a reader opens it
            if self._over.is_set():
                return
            self.opened += 1
            time.sleep(0.01)  # the reader reads end of file and closes before the next rendezvous

    def close(self) -> None:
        self._over.set()
        fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)  # lets the waiting writer's open return
        self._thread.join(5)
        os.close(fd)


def _kind_of_row(row: dict[str, object]) -> tuple[object, str]:
    error = row["error"]
    assert isinstance(error, dict)
    return error["code"], str(error["message"])


def test_a_fifo_a_device_or_a_socket_is_never_opened_and_is_a_failed_row(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 31 #16: a FIFO named as an input hung the run for ever (opened to be hashed, or by the decoder).
    Named directly, by a glob or in a list file it is taken, so that its row says what it is; a walk skips it;
    hashing it, asking whether a rerun may skip it and the actor all refuse it without opening it."""
    fifo = _WatchedFifo(tmp_path / "pipe.wav")
    try:
        (tmp_path / "a.flac").write_bytes((DATA / "en_hello_world.flac").read_bytes())
        (tmp_path / "list.txt").write_text(f"{fifo.path}\n")
        for args in ([str(fifo.path)], [str(tmp_path / "*.wav")], [f"@{tmp_path / 'list.txt'}"]):
            assert inputs.expand(args).files == [str(fifo.path)], args
        assert inputs.expand([str(tmp_path)]).files == [str(tmp_path / "a.flac")]  # a walk leaves it out
        with pytest.raises(inputs.NotAFile, match="a named pipe"):
            manifest.file_hash(str(fifo.path))
        row = {"path": str(fifo.path), "status": "failed", "error": {"code": "not_a_file", "message": "..."},
               "options": {"f": 1}, "size": 0, "mtime_ns": 1}
        assert not manifest.up_to_date(row, {"f": 1}, str(fifo.path), str(tmp_path))  # other mtime: no hash read
        t = _actor(monkeypatch)
        got = t.transcribe(str(fifo.path))  # type: ignore[attr-defined]
        assert got["status"] == "failed" and got["host"] and "hash" not in got
        code, message = _kind_of_row(got)
        assert code == "not_a_file" and str(fifo.path) in message and "a named pipe" in message
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(str(tmp_path / "s.wav"))
            for path, kind in (("/dev/zero", "a character device"), (str(tmp_path / "s.wav"), "a socket"),
                               (str(tmp_path), "a directory")):
                code, message = _kind_of_row(t.transcribe(path))  # type: ignore[attr-defined]
                assert code == "not_a_file" and kind in message and path in message
    finally:
        fifo.close()
    assert fifo.opened == 0


@pytest.fixture
def batch_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
               capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str]]:
    """``hasrctl batch ARGS`` in this process, its Ray replaced by the actor's class called in turn (the fake
    engine): returns the exit status and stderr. ``sent`` on the function: the paths given to "Ray"."""
    from hasrctl import cli
    from hasrctl.batch import run
    from hasrctl.batch.actor import Transcriber
    from hasrctl.common import settings

    for k in [k for k in os.environ if k.startswith("HASR_")]:
        monkeypatch.delenv(k)
    for name in ("cfg", "data", "run"):
        (tmp_path / "xdg" / name).mkdir(parents=True)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg" / "cfg"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg" / "data"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "xdg" / "run"))
    monkeypatch.setenv("HASR_ENGINE", "fake")
    settings.cache_clear()
    sent: list[str] = []

    def results(ray: object, job: run.Job, paths: list[str]) -> Iterator[dict[str, object]]:
        for k, v in run.actor_env(job).items():
            monkeypatch.setenv(k, v)
        actor = Transcriber()
        for path in paths:
            sent.append(path)
            yield json.loads(json.dumps(actor.transcribe(path)))  # as it comes through Ray

    monkeypatch.setattr(run, "import_ray", lambda: None)
    monkeypatch.setattr(run, "connect", lambda *args: None)
    monkeypatch.setattr(run, "native_output_to", lambda path: contextlib.nullcontext())
    monkeypatch.setattr(run, "cluster", lambda ray: (2, 0.0))
    monkeypatch.setattr(run, "results", results)
    monkeypatch.setattr(run, "shutdown", lambda ray: None)

    def batch(*args: str) -> tuple[int, str]:
        sent.clear()
        capsys.readouterr()
        with pytest.raises(SystemExit) as e:
            cli.main(["batch", *args, "--no-progress"])
        settings.cache_clear()
        return int(e.value.code or 0), capsys.readouterr().err

    batch.sent = sent  # type: ignore[attr-defined]
    return batch


def test_a_run_with_a_fifo_among_its_inputs_records_it_as_failed_and_goes_on(
        tmp_path: Path, batch_here: Callable[..., tuple[int, str]]) -> None:
    """Issue 31 #16, the whole command: the FIFO (named directly and in a list) is one failed row, never opened
    (the driver reads every input's declared length first), the audio beside it is transcribed, exit 1."""
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.flac").write_bytes((DATA / "en_hello_world.flac").read_bytes())
    fifo = _WatchedFifo(src / "pipe.wav")
    (tmp_path / "list.txt").write_text(f"{fifo.path}\n")
    out = tmp_path / "out"
    try:
        code, err = batch_here(str(src / "a.flac"), str(fifo.path), f"@{tmp_path / 'list.txt'}", "-o", str(out))
        assert code == 1, err
        rows = {Path(r["path"]).name: r for r in map(json.loads, (out / manifest.NAME).read_text().splitlines())}
        assert set(rows) == {"a.flac", "pipe.wav"}
        assert rows["a.flac"]["status"] == "ok" and (out / "a.txt").read_text().strip()
        bad = rows["pipe.wav"]
        assert bad["status"] == "failed" and bad["outputs"] == [] and bad["options"] == rows["a.flac"]["options"]
        assert bad["error"]["code"] == "not_a_file"
        assert bad["error"]["message"] == f"{fifo.path} is a named pipe (FIFO), not a file: it was never opened"
        assert "1 of 2 file(s) failed" in err and "pipe.wav: " in err and "(not_a_file)" in err
        assert "internal error" not in err
        code, err = batch_here(str(src / "a.flac"), str(fifo.path), "-o", str(out))  # a rerun: settled, no Ray
        assert code == 1 and batch_here.sent == [] and "1 failed for their content" in err  # type: ignore[attr-defined]
    finally:
        fifo.close()
    assert fifo.opened == 0


class _FullDisk:
    """OUTDIR's disk as it fills: once ``room`` is set, every write of a file under OUTDIR spends it, and the
    write that crosses the line writes what fits and fails with ENOSPC (or EDQUOT), as do all after it. Every
    way Python writes a file is watched: ``open``, ``os.fdopen`` (the outputs' temporary files) and
    ``os.write``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, outdir: Path, errno_: int = errno.ENOSPC) -> None:
        import builtins

        self.outdir, self.errno, self.room = str(outdir) + os.sep, errno_, -1  # -1: not filling yet
        real_write, real_open, real_fdopen = os.write, builtins.open, os.fdopen

        def ours(fd: int) -> bool:
            return os.readlink(f"/proc/self/fd/{fd}").startswith(self.outdir)

        def write(fd: int, data: bytes) -> int:
            if self.room < 0 or not ours(fd):
                return real_write(fd, data)
            n = real_write(fd, bytes(data[:self.room])) if self.room else self._full()
            self.room -= n
            return n

        def watched(f: Any, mode: str) -> Any:
            return _Filling(f, self) if set(mode) & set("wax+") and ours(f.fileno()) else f

        monkeypatch.setattr(os, "write", write)
        monkeypatch.setattr(builtins, "open", lambda file, mode="r", *a, **kw: watched(
            real_open(file, mode, *a, **kw), mode))
        monkeypatch.setattr(os, "fdopen", lambda fd, mode="r", *a, **kw: watched(real_fdopen(fd, mode, *a, **kw),
                                                                                  mode))

    def _full(self) -> int:
        raise OSError(self.errno, os.strerror(self.errno))


class _Filling:
    """A file object of OUTDIR on a _FullDisk."""

    def __init__(self, f: Any, disk: _FullDisk) -> None:
        self._f, self._disk = f, disk

    def write(self, data: str | bytes) -> int:
        disk = self._disk
        size = len(data.encode() if isinstance(data, str) else data)
        if disk.room < 0 or size <= disk.room:
            disk.room -= size if disk.room >= 0 else 0
            return int(self._f.write(data))
        self._f.write(data[:disk.room])
        self._f.flush()
        disk.room = 0
        return disk._full()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)

    def __enter__(self) -> _Filling:
        return self

    def __exit__(self, *exc: object) -> None:
        self._f.close()

    def __iter__(self) -> Iterator[Any]:
        return iter(self._f)


def test_a_full_disk_loses_no_recorded_row_and_leaves_no_temporary_file(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 31 #17, the manifest: a row whose journal line does not fit, and a rewrite that does not fit, are
    DiskFull; the manifest on disk stays the last whole one, no ``manifest.jsonl.*.tmp`` is left, and the next
    run (with room) has every row that was recorded, each once."""
    out = tmp_path / "out"
    disk = _FullDisk(monkeypatch, out)
    book = manifest.Manifest(str(out), every_s=3600).open()
    book.record({"path": "/a", "status": "ok"})
    book.rewrite()
    book.record({"path": "/b", "status": "ok", "text": "x" * 1000})
    disk.room = 100  # half of /c's line fits
    with pytest.raises(manifest.DiskFull) as e:
        book.record({"path": "/c", "status": "ok", "text": "y" * 1000})
    assert e.value.outdir == str(out) and e.value.recorded == 2
    with pytest.raises(manifest.DiskFull):
        book.close()  # the last rewrite does not fit either
    assert sorted(p.name for p in out.iterdir()) == [manifest.JOURNAL, manifest.LOCK, manifest.NAME]
    assert [json.loads(x)["path"] for x in (out / manifest.NAME).read_text().splitlines()] == ["/a"]
    disk.room = -1  # room again
    book = manifest.Manifest(str(out)).open()
    assert sorted(book.rows) == ["/a", "/b"]
    book.record({"path": "/d", "status": "ok"})  # after the half line /c left: a line of its own
    book.close()
    assert [json.loads(x)["path"] for x in (out / manifest.NAME).read_text().splitlines()] == ["/a", "/b", "/d"]


@pytest.mark.parametrize("fills_at, done", [("output", 2), ("journal", 2), ("manifest", 4)])
def test_a_full_output_disk_stops_the_run_says_so_and_a_rerun_goes_on(
        tmp_path: Path, batch_here: Callable[..., tuple[int, str]], monkeypatch: pytest.MonkeyPatch,
        fills_at: str, done: int) -> None:
    """Issue 31 #17, the whole command: the disk fills after two files (at the third one's transcript, at its
    manifest row, or only at the manifest's last rewrite): one line naming OUTDIR and how many files were done,
    exit 1, no temporary file; a rerun with room skips the files done and does the others."""
    src = tmp_path / "in"
    src.mkdir()
    names = ["a.flac", "b.flac", "c.flac", "d.flac"]
    for name in names:
        (src / name).write_bytes((DATA / "en_hello_world.flac").read_bytes())
    out = tmp_path / "out"
    disk = _FullDisk(monkeypatch, out, errno.EDQUOT if fills_at == "journal" else errno.ENOSPC)
    from hasrctl.batch import command

    finished = command._finished
    count = [0]

    def fill(b: command.Batch, bar: Progress, row: dict[str, object]) -> None:
        count[0] += 1
        if fills_at == "output" and count[0] == 3:
            disk.room = 0
        if fills_at == "journal" and count[0] == 3:
            record = b.book.record

            def full_then_record(row: dict[str, Any]) -> None:
                disk.room = 40  # the transcript fitted, its row only in part
                record(row)

            monkeypatch.setattr(b.book, "record", full_then_record)
        finished(b, bar, row)
        if fills_at == "manifest" and count[0] == 4:
            disk.room = 300

    monkeypatch.setattr(command, "_finished", fill)
    code, err = batch_here(str(src), "-o", str(out))
    assert code == 1, err
    assert "internal error" not in err
    assert f"{out} is full" in err and f"{done} of 4 file(s) done" in err and "run the same command" in err, err
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]
    if (out / manifest.NAME).exists():
        [json.loads(x) for x in (out / manifest.NAME).read_text().splitlines()]  # whole
    disk.room = -1
    code, err = batch_here(str(src), "-o", str(out))
    assert code == 0, err
    assert [Path(p).name for p in batch_here.sent] == names[done:]  # type: ignore[attr-defined]
    rows = [json.loads(x) for x in (out / manifest.NAME).read_text().splitlines()]
    assert [Path(r["path"]).name for r in rows] == names and all(r["status"] == "ok" for r in rows)
    assert sorted(p.name for p in out.iterdir()) == [manifest.LOCK, manifest.RESULTS,
                                                     *[n.replace(".flac", ".txt") for n in names], manifest.NAME]


def _manifest_rows(out: Path) -> dict[str, dict[str, Any]]:
    return {Path(r["path"]).name: r for r in map(json.loads, (out / manifest.NAME).read_text().splitlines())}


def _two_clips(tmp_path: Path) -> Path:
    src = tmp_path / "in"
    src.mkdir()
    for name in ("en_hello_world", "zh_nihao_shijie"):
        (src / f"{name}.flac").write_bytes((DATA / f"{name}.flac").read_bytes())
    return src


def test_a_format_asked_on_a_rerun_is_rendered_from_the_stored_results_without_transcribing(
        tmp_path: Path, batch_here: Callable[..., tuple[int, str]]) -> None:
    """Issue 32 #3: `-f txt` then `-f txt,srt,vtt`: nothing goes to the actors the second time, and each new file
    is byte for byte what a run that transcribes gives; the rows list every output with the new options."""
    src = _two_clips(tmp_path)
    out, fresh = tmp_path / "out", tmp_path / "fresh"
    code, err = batch_here(str(src), "-o", str(out), "-f", "txt")
    assert code == 0 and len(batch_here.sent) == 2, err  # type: ignore[attr-defined]
    code, err = batch_here(str(src), "-o", str(out), "-f", "txt,srt", "-f", "vtt")
    assert code == 0, err
    assert batch_here.sent == [], "a new format must not transcribe again"  # type: ignore[attr-defined]
    assert "2 file(s) rendered as txt, srt, vtt from their stored results" in err, err
    code, err = batch_here(str(src), "-o", str(fresh), "-f", "txt,srt,vtt")
    assert code == 0 and len(batch_here.sent) == 2, err  # type: ignore[attr-defined]
    for name in ("en_hello_world", "zh_nihao_shijie"):
        for ext in ("txt", "srt", "vtt"):
            assert (out / f"{name}.{ext}").read_bytes() == (fresh / f"{name}.{ext}").read_bytes(), (name, ext)
    rows = _manifest_rows(out)
    assert rows["en_hello_world.flac"]["outputs"] == ["en_hello_world.txt", "en_hello_world.srt", "en_hello_world.vtt"]
    assert rows["en_hello_world.flac"]["options"] == _manifest_rows(fresh)["en_hello_world.flac"]["options"]
    # then everything is up to date; other subtitle rules are only rendering too; another language is not
    code, err = batch_here(str(src), "-o", str(out), "-f", "txt,srt,vtt")
    assert code == 0 and batch_here.sent == [] and "2 of 2 input(s) are up to date" in err  # type: ignore[attr-defined]
    code, err = batch_here(str(src), "-o", str(out), "-f", "srt", "--max-line-width", "8")
    assert code == 0 and batch_here.sent == [], err  # type: ignore[attr-defined]
    code, err = batch_here(str(src), "-o", str(fresh), "-f", "srt", "--max-line-width", "8")
    assert (out / "zh_nihao_shijie.srt").read_bytes() == (fresh / "zh_nihao_shijie.srt").read_bytes()
    code, err = batch_here(str(src), "-o", str(out), "-f", "srt", "--language", "English")
    assert code == 0 and len(batch_here.sent) == 2, err  # type: ignore[attr-defined]


def test_rows_of_a_run_that_kept_no_results_are_rendered_from_their_verbose_json(
        tmp_path: Path, batch_here: Callable[..., tuple[int, str]]) -> None:
    """A manifest of a run before the results were kept: its verbose_json outputs hold the whole result (``hasr``),
    and serve a new format; a row with neither is transcribed again."""
    from hasrd.formats import lines
    from hasrd.transcript import from_json

    src = _two_clips(tmp_path)
    out = tmp_path / "out"
    assert batch_here(str(src), "-o", str(out), "-f", "verbose_json")[0] == 0
    import shutil

    shutil.rmtree(out / manifest.RESULTS)
    rows = [json.loads(line) for line in (out / manifest.NAME).read_text().splitlines()]
    for r in rows:
        r.pop("result")
    (out / "zh_nihao_shijie.json").unlink()  # this one has nothing left to render from
    (out / manifest.NAME).write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, err = batch_here(str(src), "-o", str(out), "-f", "txt")
    assert code == 0, err
    assert [Path(p).name for p in batch_here.sent] == ["zh_nihao_shijie.flac"]  # type: ignore[attr-defined]
    doc = json.loads((out / "en_hello_world.json").read_text())
    assert (out / "en_hello_world.txt").read_text() == lines(from_json(doc["hasr"]))


def test_a_file_named_like_audio_that_is_not_gets_a_skipped_row_with_the_reason(
        tmp_path: Path, batch_here: Callable[..., tuple[int, str]]) -> None:
    """Issue 32 #7: a text file named x.mp3 in an input directory is a `skipped` row (a damaged recording does not
    vanish from the manifest); a file named like text is still left out; a rerun writes nothing new."""
    src = _two_clips(tmp_path)
    (src / "x.mp3").write_text("not audio at all\n")
    (src / "notes.txt").write_text("not audio either\n")
    out = tmp_path / "out"
    code, err = batch_here(str(src), "-o", str(out))
    assert code == 1 and "1 of 3 file(s) failed:\n  x.mp3: x.mp3 is named like audio" in err, err  # issue 39 #8
    rows = _manifest_rows(out)
    assert set(rows) == {"en_hello_world.flac", "zh_nihao_shijie.flac", "x.mp3"}
    skipped = rows["x.mp3"]
    assert skipped["status"] == "skipped" and skipped["outputs"] == [] and skipped["error"]["code"] == "not_audio"
    assert "x.mp3 is named like audio or video but its first bytes are no audio" in skipped["error"]["message"]
    assert skipped["size"] == 17 and skipped["hash"].startswith("sha256:")
    assert str(src / "x.mp3") not in batch_here.sent  # type: ignore[attr-defined]
    assert "1 file(s) named like audio are not audio or video by their bytes: skipped" in err and "(x.mp3)" in err
    assert "1 file(s) in the input directories are not audio or video: left out" in err  # notes.txt
    before = (out / manifest.NAME).read_bytes()
    code, err = batch_here(str(src), "-o", str(out))
    assert code == 1 and batch_here.sent == [] and (out / manifest.NAME).read_bytes() == before  # type: ignore[attr-defined]
    (src / "x.mp3").write_bytes((DATA / "en_hello_world.flac").read_bytes())  # repaired: now it is transcribed
    code, err = batch_here(str(src), "-o", str(out))
    assert code == 0 and [Path(p).name for p in batch_here.sent] == ["x.mp3"], err  # type: ignore[attr-defined]
    assert _manifest_rows(out)["x.mp3"]["status"] == "ok"


def test_a_directory_of_only_mislabelled_files_records_them_without_starting_ray(
        tmp_path: Path, batch_here: Callable[..., tuple[int, str]]) -> None:
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.wav").write_text("text\n")
    out = tmp_path / "out"
    code, err = batch_here(str(src), "-o", str(out))
    assert code == 1 and batch_here.sent == [] and "1 of 1 file(s) failed:\n  a.wav" in err, err  # type: ignore[attr-defined]
    assert _manifest_rows(out)["a.wav"]["status"] == "skipped"


def test_formats_all_is_every_kept_format_and_json_with_verbose_json_is_refused() -> None:
    assert parse_formats(("all",)) == ["text", "srt", "vtt", "verbose_json"]
    assert parse_formats(("srt", "all")) == ["srt", "text", "vtt", "verbose_json"]
    with pytest.raises(UsageError, match="verbose_json and json both write NAME.json"):
        parse_formats(("all,json",))
    with pytest.raises(UsageError, match="or all"):
        parse_formats(("txt,docx",))


def test_an_io_error_on_the_journal_is_unwritable_and_keeps_no_half_line(tmp_path: Path, monkeypatch: Any) -> None:
    """Issue 31 #17's sibling: an error other than a full disk (EIO here; EROFS, EACCES alike) is an OutdirError
    too, not an OSError for the CLI to call an internal error; the line that could not be made durable goes."""
    book = manifest.Manifest(str(tmp_path)).open()
    try:
        book.record({"path": "/a", "status": "ok"})

        def fsync_eio(fd: int) -> None:
            raise OSError(errno.EIO, os.strerror(errno.EIO))

        monkeypatch.setattr(manifest.os, "fsync", fsync_eio)
        with pytest.raises(manifest.Unwritable) as e:
            book.record({"path": "/b", "status": "ok"})
        assert isinstance(e.value, manifest.OutdirError) and not isinstance(e.value, manifest.DiskFull)
        assert e.value.reason == "Input/output error" and e.value.recorded == 1
        assert [json.loads(x)["path"] for x in (tmp_path / manifest.JOURNAL).read_text().splitlines()] == ["/a"]
        monkeypatch.undo()
    finally:
        book.close()
    assert [json.loads(x)["path"] for x in (tmp_path / manifest.NAME).read_text().splitlines()] == ["/a"]


def test_a_fifo_where_an_output_goes_fails_that_row_at_once_instead_of_blocking_the_run(tmp_path: Path) -> None:
    """Issue 31 #16's other half: a FIFO left in OUTDIR at an output's path was opened for writing, and the run
    waited for a reader for ever. Now that row fails (write_failed, naming the FIFO), the FIFO stays, and the
    row is recorded."""
    from hasrctl.batch.store import store as _store

    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / "talk.txt")
    book = manifest.Manifest(str(out)).open()
    row = {"path": "/in/talk.flac", "status": "ok", "rendered": {"text": "hello\n"}, "result": {"final": "hello"}}
    done = threading.Event()

    def store() -> None:
        _store(book, str(out), {"/in/talk.flac": "talk"}, [Format.TEXT], {"f": 1}, row)
        done.set()

    threading.Thread(target=store, daemon=True).start()
    try:
        if not done.wait(30):
            with contextlib.suppress(OSError):  # a reader unblocks the writer, so the test process can end
                os.close(os.open(out / "talk.txt", os.O_RDONLY | os.O_NONBLOCK))
            pytest.fail("the output's write blocked on the FIFO")
    finally:
        book.close()
    assert row["status"] == "failed" and row["error"]["code"] == "write_failed", row
    assert "talk.txt is a FIFO, not a regular file" in row["error"]["message"]
    assert stat.S_ISFIFO(os.lstat(out / "talk.txt").st_mode)
    assert [json.loads(x)["status"] for x in (out / manifest.NAME).read_text().splitlines()] == ["failed"]


def test_a_read_only_outdir_is_one_line_that_says_so_not_an_internal_error(tmp_path: Path) -> None:
    """A real read-only file system (tmpfs mounted ro in a private mount namespace) as OUTDIR's parent: exit 1,
    one line naming the directory and the reason, no Ray started, no traceback."""
    need(shutil.which("unshare") is not None and os.geteuid() == 0, "needs root and unshare for a read-only mount")
    ro = tmp_path / "ro"
    ro.mkdir()
    env = cli_env(str(tmp_path / "e"))
    script = 'mount -t tmpfs -o ro,size=1m tmpfs "$1" && exec "$2" -m hasrctl batch "$3" -o "$1/out" --no-progress'
    res = subprocess.run(["unshare", "--mount", "--propagation", "private", "bash", "-c", script, "sh", str(ro),
                          sys.executable, str(DATA / "en_hello_world.flac")],
                         env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 1, (res.stdout, res.stderr)
    assert (f"cannot write to {ro}/out (Read-only file system): nothing was transcribed; run the same command "
            f"again once it can be written to, or choose another -o") in res.stderr, res.stderr
    assert "internal error" not in res.stderr and "Traceback" not in res.stderr and "Ray" not in res.stderr


def test_a_journal_torn_inside_a_character_loses_only_its_last_line(tmp_path: Path) -> None:
    """Rows are written as UTF-8 (ensure_ascii=False): a power cut inside a Chinese character left bytes that do not
    decode, and every later run failed on them (UnicodeDecodeError, an internal error). The torn line is skipped."""
    whole = json.dumps({"path": "/会议.wav", "status": "ok"}, ensure_ascii=False).encode() + b"\n"
    torn = json.dumps({"path": "/发布.wav", "status": "ok"}, ensure_ascii=False).encode()[:12]
    (tmp_path / manifest.JOURNAL).write_bytes(whole + torn)
    book = manifest.Manifest(str(tmp_path)).open()
    book.close()
    assert [json.loads(x)["path"] for x in (tmp_path / manifest.NAME).read_text().splitlines()] == ["/会议.wav"]


def test_a_fifo_where_a_stored_result_was_is_not_read(tmp_path: Path) -> None:
    """A rerun asking a new format reads the stored result: a FIFO put in its place is passed over at once (the
    file is transcribed again), never opened to wait for a writer."""
    src = tmp_path / "a.wav"
    src.write_bytes(b"RIFF....")
    os.mkfifo(tmp_path / "a.json")
    opts = {"model": "m", "engine": "e", "language": "", "options": {}, "formats": ["text"]}
    row = {"path": str(src), "status": "ok", "result": "a.json", "options": opts}
    assert manifest.same_transcription(row, opts)  # so the stored result is looked at
    got: list[Any] = []
    t = threading.Thread(target=lambda: got.append(manifest.stored_result(row, opts, str(src), str(tmp_path),
                                                                          hasher=lambda p: "h")), daemon=True)
    t.start()
    t.join(10)
    if t.is_alive():
        with contextlib.suppress(OSError):
            os.close(os.open(tmp_path / "a.json", os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("stored_result blocked on the FIFO")
    assert got == [None]

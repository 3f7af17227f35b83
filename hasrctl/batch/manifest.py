"""``OUTDIR/manifest.jsonl``: one row per input, never two, and nothing finished ever lost (docs/BATCH.md, "The
manifest": a row's fields, and what a full or unwritable OUTDIR does).

A finished file's row is appended to ``OUTDIR/.hasr-batch.journal`` at once (flushed and fsynced), and the
manifest itself is rewritten whole (a temporary file, fsync, rename) every few seconds and at the end, rows in
path order. Loading merges the two, the journal's rows last, so a driver killed at any instant leaves every
finished file on record, and the manifest a reader sees is always a complete file. A lock file keeps two runs
from writing one OUTDIR. A failed write is :class:`DiskFull` (ENOSPC, EDQUOT) or :class:`Unwritable`, raised
where met: a journal line that did not fit is cut off again, a rewrite that did not fit leaves the manifest as
it was and the journal holding every row since.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

from hasrctl.batch.inputs import open_regular
from hasrctl.client import UsageError

NAME = "manifest.jsonl"
JOURNAL = ".hasr-batch.journal"
LOCK = ".hasr-batch.lock"
FULL = frozenset({errno.ENOSPC, errno.EDQUOT})  # no room: the disk, or the user's quota


class OutdirError(Exception):
    """OUTDIR cannot take the run's writes: the run stops there, and what it recorded stays recorded."""

    def __init__(self, outdir: str, error: OSError, recorded: int) -> None:
        self.outdir, self.reason, self.recorded = outdir, error.strerror or str(error), recorded
        self.said = False  # its line is on stderr already (hasrctl.batch.command._run)
        super().__init__(f"{outdir}: {self.reason}")


class DiskFull(OutdirError):
    """No room left (ENOSPC, EDQUOT): the same command goes on once there is room."""


class Unwritable(OutdirError):
    """Any other failed write (EROFS, EACCES, EIO, ...): the manifest, journal or lock could not be written."""


def is_full(e: BaseException) -> bool:
    return isinstance(e, OSError) and e.errno in FULL


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def file_hash(path: str) -> str:
    """``sha256:<hex>`` of a file's bytes; inputs.NotAFile (an OSError) for a FIFO, a device, ...: never opened."""
    h = hashlib.sha256()
    with open_regular(path) as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return "sha256:" + h.hexdigest()


def _rows(path: str) -> Iterator[dict[str, Any]]:
    """The rows of a JSON-lines file; a line that does not parse (a write cut short, even inside a character:
    decoded with replacement, it then fails json) is skipped."""
    try:
        f = open(path, encoding="utf-8", errors="replace")  # noqa: SIM115 - the try guards only the open
    except FileNotFoundError:
        return
    with f:
        for line in f:
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict) and isinstance(row.get("path"), str):
                yield row


RESULTS = ".hasr-batch.results"  # each ok input's whole result (JSON), under its output name: formats asked later
# What makes a transcription (the rest of a row's options, formats and subtitle rules, is only its rendering)
TRANSCRIPTION = ("model", "engine", "language", "options")

# A failure of the file's own bytes: the same bytes fail the same way, so a rerun skips them (--retry-failed
# does not); every other failure (a crash, memory, a model that did not load, a write) is retried.
CONTENT_ERRORS = frozenset({"invalid_audio", "undecodable", "no_audio_stream", "no_audio_frames", "empty_file",
                            "not_a_file", "invalid_speakers", "too_many_speakers"})  # the last two: of a file's voices


def up_to_date(row: dict[str, Any] | None, options: dict[str, Any], path: str, outdir: str,
               hasher: Callable[[str], str] = file_hash, retry_failed: bool = False) -> bool:
    """Whether a rerun may skip ``path``: its row was made with the same options and the file's content is the
    same (same size and mtime, else the same hash: a file touched but not changed is still skipped), and the
    row is ok with its outputs all still there, or failed for its content (CONTENT_ERRORS; the transcription's
    options alone count there, not the formats) and ``retry_failed`` is off."""
    if not row:
        return False
    if row.get("status") == "failed":
        # a file that fails for its own bytes does so in every format: only the transcription's options count
        if (not same_transcription(row, options) or retry_failed
                or (row.get("error") or {}).get("code") not in CONTENT_ERRORS):
            return False
    elif (row.get("options") != options or row.get("status") != "ok"
          or not all(os.path.isfile(os.path.join(outdir, o)) for o in row.get("outputs") or [])):
        return False
    return same_bytes(row, path, hasher)


def same_bytes(row: dict[str, Any], path: str, hasher: Callable[[str], str] = file_hash) -> bool:
    """Whether ``path`` holds the bytes ``row`` was made from: same size and mtime, else the same hash."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    if st.st_size == row.get("size") and st.st_mtime_ns == row.get("mtime_ns"):
        return True
    try:
        return st.st_size == row.get("size") and hasher(path) == row.get("hash")
    except OSError:
        return False


def same_transcription(row: dict[str, Any], options: dict[str, Any]) -> bool:
    """Whether ``row`` was transcribed as ``options`` asks (model, engine, language, engine options): what it
    does not share with them (formats, subtitle rules) is only rendering."""
    old = row.get("options")
    return isinstance(old, dict) and all(old.get(k) == options.get(k) for k in TRANSCRIPTION)


def readable(result: dict[str, Any]) -> bool:
    """Whether a stored result is a result object (docs/API.md) that can be rendered; else it is made again."""
    from hasrd.transcript import from_json

    try:
        from_json(result)
    except ValueError:  # msgspec.ValidationError
        return False
    return True


def stored_result(row: dict[str, Any] | None, options: dict[str, Any], path: str, outdir: str,
                  hasher: Callable[[str], str] = file_hash) -> dict[str, Any] | None:
    """The whole result an ``ok`` row was made from, when only the rendering changed (other formats or
    subtitle rules, the same transcription of the same bytes): from ``RESULTS`` (``result`` in the row), or
    from a verbose_json output (its ``hasr``: rows of runs before the results were kept). None when it must be
    transcribed again."""
    if not row or row.get("status") != "ok" or not same_transcription(row, options):
        return None
    where = [row["result"]] if isinstance(row.get("result"), str) else []
    old = row.get("options") or {}
    if "verbose_json" in (old.get("formats") or []):
        where += [o for o in row.get("outputs") or [] if isinstance(o, str) and o.endswith(".json")]
    for rel in where:
        try:
            with open_regular(os.path.join(outdir, rel)) as f:  # a FIFO left there would block for ever
                doc = json.load(f)
        except (OSError, ValueError):
            continue
        result = doc.get("hasr") if rel != row.get("result") and isinstance(doc, dict) else doc
        if isinstance(result, dict) and readable(result) and same_bytes(row, path, hasher):
            return result
    return None


class Manifest:
    """The rows of one OUTDIR, held by one run at a time."""

    def __init__(self, outdir: str, clock: Callable[[], float] = time.monotonic, every_s: float = 5.0) -> None:
        self.outdir = outdir
        self.path = os.path.join(outdir, NAME)
        self.journal_path = os.path.join(outdir, JOURNAL)
        self.rows: dict[str, dict[str, Any]] = {}
        self.clock = clock
        self.every_s = every_s
        self.recorded = 0  # rows this run recorded (on disk)
        self._lock_fd: int | None = None
        self._journal: int | None = None  # the journal's fd, O_APPEND
        self._last_write = clock()
        self._dirty = False  # rows recorded since the last rewrite

    def _failed(self, e: OSError) -> OutdirError:
        return (DiskFull if is_full(e) else Unwritable)(self.outdir, e, self.recorded)

    def open(self) -> Manifest:
        """Take the lock, read what earlier runs left and fold their journal into the manifest."""
        try:
            os.makedirs(self.outdir, exist_ok=True)
            fd = os.open(os.path.join(self.outdir, LOCK), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as e:
            raise self._failed(e) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise UsageError(f"{self.outdir}: another hasrctl batch is writing there; wait for it or choose "
                             f"another -o") from None
        self._lock_fd = fd
        try:
            for src in (self.path, self.journal_path):
                for row in _rows(src):
                    self.rows[row["path"]] = row
        except OSError as e:  # unreadable (EACCES, EIO): one line, as an unwritable OUTDIR is
            raise self._failed(e) from None
        if os.path.exists(self.journal_path):
            self.rewrite()
        try:
            self._journal = os.open(self.journal_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
        except OSError as e:
            raise self._failed(e) from None
        return self

    def record(self, row: dict[str, Any]) -> None:
        """A finished input: on disk now (journal), in the manifest at the next rewrite. OutdirError when its line
        does not fit: then it is not recorded (what did fit is cut off, so the next line starts a line)."""
        assert self._journal is not None
        line = (json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8")
        end = os.fstat(self._journal).st_size
        try:
            _write_all(self._journal, line)
            os.fsync(self._journal)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.ftruncate(self._journal, end)  # shrinking needs no room
            raise self._failed(e) from None
        self.rows[row["path"]] = row
        self.recorded += 1
        self._dirty = True
        if self.clock() - self._last_write >= self.every_s:
            self.rewrite()

    def rewrite(self) -> None:
        """The whole manifest, atomically; then the journal it now holds is emptied. OutdirError when it does not
        fit: the temporary file goes, the manifest and the journal stay as they were."""
        tmp = f"{self.path}.{os.getpid()}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
            try:
                chunk: list[bytes] = []
                size = 0
                for path in sorted(self.rows):
                    chunk.append((json.dumps(self.rows[path], ensure_ascii=False) + "\n").encode("utf-8"))
                    size += len(chunk[-1])
                    if size >= 1 << 20:
                        _write_all(fd, b"".join(chunk))
                        chunk, size = [], 0
                _write_all(fd, b"".join(chunk))
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
        except BaseException as e:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            if isinstance(e, OSError):
                raise self._failed(e) from None
            raise
        try:
            if self._journal is not None:
                os.ftruncate(self._journal, 0)  # O_APPEND: the next row is its first line
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.journal_path)
        except OSError as e:  # the journal's rows are in the manifest now: only the next run merges them again
            raise self._failed(e) from None
        self._last_write = self.clock()
        self._dirty = False

    def close(self) -> None:
        """The final rewrite (when anything changed: a rerun with nothing to do leaves the file alone); the
        journal and the lock go. OutdirError when the rewrite fails: the journal stays, holding the rows."""
        try:
            if self._journal is not None:
                # a row whose journal line is on disk but which an interrupt (Ctrl-C, SIGTERM) kept out of
                # self.rows: fold the journal in, or deleting it below would lose a finished file
                try:
                    for row in _rows(self.journal_path):
                        if self.rows.get(row["path"]) != row:
                            self.rows[row["path"]] = row
                            self._dirty = True
                except OSError as e:
                    raise self._failed(e) from None
                if self._dirty:
                    self.rewrite()
                os.close(self._journal)
                self._journal = None
                try:
                    os.unlink(self.journal_path)
                except OSError as e:
                    raise self._failed(e) from None
        finally:
            if self._journal is not None:
                os.close(self._journal)
                self._journal = None
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None

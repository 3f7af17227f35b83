"""Downloading a faster-whisper model from the Hugging Face hub into the local cache, resumable and checked: the
job behind ``POST /api/pull`` (docs/API.md "Model management" says what is fetched, from where, and the errors;
hasrd/pull.py has the routes, hasrd/hub.py the hub's side: where it is, the cache's layout, its errors).

huggingface_hub, imported here only (the daemon starts without it), reads the repo's manifest (``model_info`` with
files_metadata: the commit, each file's size and the sha256 the hub lists for an LFS file), resolves each file
(``get_hf_file_metadata``: its ETag and where its bytes are, a CDN for LFS files) and transfers it (``http_get``:
its session, proxies, token, and its retries that resume a broken connection with a Range request), into the
cache's own layout (``blobs/<etag>``, ``snapshots/<commit>/<file> -> ../../blobs/<etag>``, ``refs/main``), so that
hasrd.modelspec finds the model by name with no other step.

Why not ``hf_hub_download``: since huggingface_hub 2 it downloads to a process-unique temporary file that it
removes when the call fails, so a pull cut off by a dead connection, a Ctrl-C or a stopped daemon would start
over. Here the partial file is ``blobs/<etag>.incomplete`` (the name huggingface_hub used before) and the next
pull continues it with a Range request.

Nothing is ever half-installed: a blob is checked against the hub's sha256 (LFS files) or git blob id (the
others) before it gets its final name, and the snapshot directory is built beside ``snapshots/`` and renamed
into it in one step (``refs/main`` last), so ``hasrd.models.hf_snapshot`` never sees a snapshot that lacks a file.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import hashlib
import logging
import os
import re
import shutil
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hasrd import errors, models
from hasrd.hub import (SIZES, ChecksumMismatch, DiskFull, DownloadFailed, import_hub, mapped, mb, origin, repo_dir,
                       repo_lock, usable_name)

log = logging.getLogger("hasrd.pull")

ALLOW_PATTERNS = models.FW_FILES
MANIFEST_TIMEOUT = 30.0  # seconds for the manifest and each file's HEAD
PROGRESS_SEC = 0.5  # a progress line at least this often while bytes arrive ...
PROGRESS_BYTES = 4 << 20  # ... and after at most this many bytes
CHUNK = 256 << 10  # huggingface_hub's read size (10 MiB by default: a minute between lines on a slow line)
_BLOCK = 1 << 20


class _Stop(Exception):
    """The client went away: the download stops at its next chunk (what arrived is kept)."""


@dataclass
class Item:
    """One file of the model: what the manifest says, and its blob's name (the ETag) in the cache."""

    name: str
    size: int
    sha256: str | None  # an LFS file: the sha256 the hub lists
    git_id: str | None  # a plain file: its git blob id
    etag: str = ""


@dataclass
class Pull:
    """One pull: :meth:`manifest` (before the response starts: its errors are the request's), then :meth:`run`
    in a thread, which reports through ``emit`` and returns the last line. A faster-whisper model's; a speaker
    model's is hasrd/speakerpull.py's subclass (one file, installed into the speakers directory)."""

    PLACE = "the Hugging Face cache"  # where ``cache`` is, in the sentences of a full disk
    ROOM = ", or point HF_HUB_CACHE (in hasrd's environment) at a larger disk"

    name: str
    cache: Path
    endpoint: str
    repo: str = ""
    commit: str = ""
    items: list[Item] = field(default_factory=list)
    emit: Callable[[dict[str, Any]], None] = lambda ev: None
    fetched: int = 0  # bytes this pull transferred
    cancelled: threading.Event = field(default_factory=threading.Event)
    error: errors.HasrError | None = None
    thread: threading.Thread | None = None
    shown: dict[str, int] = field(default_factory=dict)  # the last progress line of each file

    def __post_init__(self) -> None:
        self.repo = models.fw_repo(self.name)
        self.dir = repo_dir(self.cache, self.repo)
        self.blobs = self.dir / "blobs"

    # ---- the manifest ---------------------------------------------------------------------------------------

    def manifest(self) -> dict[str, Any]:
        """The repo's commit and the files to fetch; HasrError when there is nothing to pull (unknown repo, no
        model.bin, hub unreachable, not enough disk)."""
        hf, _fd, _u = import_hub(CHUNK)
        try:
            info = hf.HfApi(endpoint=self.endpoint).model_info(self.repo, revision="main", files_metadata=True,
                                                                timeout=MANIFEST_TIMEOUT)
        except Exception as e:
            raise self._mapped(e, "reading the manifest") from None
        self.commit = str(getattr(info, "sha", "") or "")
        if not re.fullmatch(r"[0-9a-f]{40}", self.commit):
            raise DownloadFailed(f"{self.endpoint} sent no commit for {self.repo}: is HF_ENDPOINT a Hugging Face hub "
                                 f"(or a mirror of one)?")
        for s in getattr(info, "siblings", None) or []:
            name = str(s.rfilename)
            if not self._wanted(name):
                continue
            lfs = getattr(s, "lfs", None)
            sha = None
            if lfs:  # an object with attributes (huggingface_hub >= 0.2x, a dict as well), or a plain dict
                sha = getattr(lfs, "sha256", None) or (lfs.get("sha256") if isinstance(lfs, dict) else None)
            size = int(s.size if s.size is not None else (lfs.get("size", 0) if isinstance(lfs, dict) else 0))
            git_id = None if sha else getattr(s, "blob_id", None)
            self.items.append(Item(name, size, sha, git_id, etag=str(sha or git_id or "")))
        self._check_items()
        self.items.sort(key=lambda i: (i.name == "model.bin", i.name))  # the big file last: the rest is quick
        self._check_space()
        return {"status": "pulling manifest", "model": self.name, "repo": self.repo, "revision": self.commit,
                "files": [{"file": i.name, "size": i.size} for i in self.items],
                "total": sum(i.size for i in self.items)}

    def _wanted(self, name: str) -> bool:
        """Whether the repo's file ``name`` is fetched: what faster-whisper loads."""
        return any(fnmatch.fnmatchcase(name, p) for p in ALLOW_PATTERNS)

    def _check_items(self) -> None:
        """HasrError when the files the manifest lists are no model of this kind."""
        if not any(i.name == "model.bin" for i in self.items):
            raise errors.Unsupported(f"{self.repo} is no faster-whisper model: it has no model.bin (a CTranslate2 "
                                     f"conversion of Whisper, such as Systran/faster-whisper-{{{SIZES}}})",
                                     param="model")

    def _check_space(self) -> None:
        need = 0
        for i in self.items:
            if i.etag and (self.blobs / i.etag).is_file():
                continue
            part = self.blobs / f"{i.etag}.incomplete"
            need += max(0, i.size - (part.stat().st_size if i.etag and part.is_file() else 0))
        where = self.cache
        while not where.exists() and where != where.parent:
            where = where.parent
        free = shutil.disk_usage(where).free
        if need > free:
            raise DiskFull(f"{self.repo} needs {mb(need)} more, but the disk of {self.PLACE} ({self.cache}) "
                           f"has {mb(free)} free: free some space{self.ROOM}")

    # ---- the download ---------------------------------------------------------------------------------------

    def start(self, done: Callable[[dict[str, Any]], None]) -> None:
        """Run the pull in a thread of its own (it may take hours); ``done`` gets the last line."""
        def target() -> None:
            try:
                final = self.run()
            except errors.HasrError as e:
                self.error = e
                final = e.to_json()
            except BaseException as e:  # the stream must end with an error line, never just stop
                log.exception("pull of %s failed", self.repo)
                self.error = DownloadFailed(f"pulling {self.repo} failed: {type(e).__name__}: {e}")
                final = self.error.to_json()
            done(final)

        self.thread = threading.Thread(target=target, name=f"pull {self.repo}", daemon=True)
        self.thread.start()

    def cancel(self) -> None:
        self.cancelled.set()

    def run(self) -> dict[str, Any]:
        lock = repo_lock(self.repo)
        if not lock.acquire(blocking=False):
            self.emit({"status": f"waiting for another pull of {self.repo}"})
            while not lock.acquire(timeout=0.5):
                if self.cancelled.is_set():
                    raise errors.Cancelled("the client went away")
        try:
            return self._run()
        finally:
            lock.release()

    def _run(self) -> dict[str, Any]:
        hf, fd, utils = import_hub(CHUNK)
        doing = "preparing the download"
        try:
            self.blobs.mkdir(parents=True, exist_ok=True)
            for item in self.items:
                doing = f"downloading {item.name}"
                self._fetch(hf, fd, utils, item)
            doing = "verifying the download"
            self.emit({"status": "verifying sha256"})
            for item in self.items:
                self._verify(item)
            doing = "installing"
            size = sum((self.blobs / i.etag).stat().st_size for i in self.items)
            snap = self._install()
        except _Stop:
            raise errors.Cancelled(f"the client went away: the pull of {self.repo} stopped; what arrived is kept "
                                   f"and the next pull continues it") from None
        except ChecksumMismatch:
            self._discard()
            raise
        except Exception as e:
            mapped = self._mapped(e, doing)
            if isinstance(mapped, DiskFull):
                self._discard()
            raise mapped from None
        return self._result(snap, size)

    def _result(self, snap: Path, size: int) -> dict[str, Any]:
        """The last line of a pull that installed ``size`` bytes at ``snap``."""
        return {"status": "success", "model": usable_name(self.name, self.repo), "repo": self.repo,
                "revision": self.commit, "path": str(snap), "size_mb": size // 2**20,
                "downloaded_mb": round(self.fetched / 2**20, 1)}

    def _fetch(self, hf: Any, fd: Any, utils: Any, item: Item) -> None:
        if self.cancelled.is_set():
            raise _Stop()
        url = hf.hf_hub_url(self.repo, item.name, revision=self.commit, endpoint=self.endpoint)
        meta = hf.get_hf_file_metadata(url, timeout=MANIFEST_TIMEOUT)  # HEAD: the ETag, the size, where the bytes are
        etag = str(meta.etag or "").strip('"')
        if not re.fullmatch(r"[0-9a-f]{40,64}", etag):
            raise DownloadFailed(f"{self.endpoint} sent no usable ETag for {item.name} ({etag!r})")
        if not item.size and meta.size:  # a manifest without sizes (a mirror that ignores files_metadata)
            item.size = int(meta.size)
        elif meta.size is not None and item.size and int(meta.size) != item.size:
            raise DownloadFailed(f"{self.endpoint} lists {item.name} with {item.size} bytes but serves "
                                 f"{meta.size}: the hub changed under the pull; pull again")
        item.etag = etag
        blob, part = self.blobs / etag, self.blobs / f"{etag}.incomplete"
        if blob.is_file():
            self._progress(item, item.size)
            return
        have = part.stat().st_size if part.is_file() else 0
        if have > item.size:
            part.unlink()
            have = 0
        self._progress(item, have)
        if have < item.size or item.size == 0:
            headers = dict(utils.build_hf_headers())  # the token (HF_TOKEN) and the user agent
            location = str(meta.location or url)
            if origin(location) != origin(url):  # a CDN: the token stays with the hub
                for k in [k for k in headers if k.lower() == "authorization"]:
                    del headers[k]
            with open(part, "ab") as f:
                sink = _Sink(f, self, item, have)
                fd.http_get(location, sink, resume_size=have, headers=headers, expected_size=item.size,
                            displayed_filename=item.name)
                f.flush()
                os.fsync(f.fileno())
        got = part.stat().st_size
        if got != item.size:
            part.unlink(missing_ok=True)
            raise DownloadFailed(f"{item.name} arrived with {got} bytes where the hub lists {item.size}: it was "
                                 f"removed; pull again")
        self._progress(item, item.size)

    def _progress(self, item: Item, done: int) -> None:
        if self.shown.get(item.name) == done:
            return
        self.shown[item.name] = done
        self.emit({"status": "downloading", "file": item.name, "completed": done, "total": item.size})

    def _verify(self, item: Item) -> None:
        blob, part = self.blobs / item.etag, self.blobs / f"{item.etag}.incomplete"
        path = blob if blob.is_file() else part
        if item.sha256:
            h, want, what = hashlib.sha256(), item.sha256, "sha256"
        elif item.git_id:
            h, want, what = hashlib.sha1(b"blob %d\0" % item.size), item.git_id, "git blob id"
        else:
            h, want, what = None, "", ""
        size = 0
        with open(path, "rb") as f:
            while block := f.read(_BLOCK):
                if self.cancelled.is_set():
                    raise _Stop()
                size += len(block)
                if h is not None:
                    h.update(block)
        if size != item.size or (h is not None and h.hexdigest() != want):
            path.unlink(missing_ok=True)  # whatever links it: a damaged blob is never kept
            differs = (f"it has {size} bytes, the hub lists {item.size}" if size != item.size else
                       f"its {what} is {h.hexdigest() if h else ''}, the hub lists {want}")
            raise ChecksumMismatch(
                f"{item.name} of {self.repo} does not match the hub's checksum ({differs}): the download was "
                f"damaged on its way; it was removed and nothing was installed. Pull again; if it happens again, "
                f"{self.endpoint} serves a damaged file")
        if path == part:
            os.replace(part, blob)

    def _install(self) -> Path:
        """snapshots/<commit>/ with a link per file, appearing whole; then refs/main."""
        snaps = self.dir / "snapshots"
        snaps.mkdir(parents=True, exist_ok=True)
        snap = snaps / self.commit
        if not snap.is_dir():
            tmp_root = self.dir / f".hasr-pull-{uuid.uuid4().hex[:8]}"
            tmp = tmp_root / self.commit  # the depth of snapshots/<commit>: the same relative links hold there
            tmp.mkdir(parents=True)
            try:
                for item in self.items:
                    _link(self.blobs / item.etag, tmp / item.name)
                try:
                    os.rename(tmp, snap)
                except OSError as e:
                    if e.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                        raise
            finally:
                shutil.rmtree(tmp_root, ignore_errors=True)
        for item in sorted(self.items, key=lambda i: i.name == "model.bin"):  # a snapshot that was there already
            link = snap / item.name
            if not (link.exists() and os.path.samefile(link, self.blobs / item.etag)):
                tmp_link = snap / f".{item.name}.hasr-{uuid.uuid4().hex[:8]}"
                _link(self.blobs / item.etag, tmp_link)
                os.replace(tmp_link, link)
        refs = self.dir / "refs"
        refs.mkdir(exist_ok=True)
        tmp_ref = refs / f".main.hasr-{uuid.uuid4().hex[:8]}"
        tmp_ref.write_text(self.commit)
        os.replace(tmp_ref, refs / "main")
        return snap

    def _discard(self) -> None:
        """Remove what was downloaded for this snapshot (blobs no other snapshot links, partial files); the repo's
        directory goes too when no snapshot is left in it."""
        snaps = self.dir / "snapshots"
        keep: set[str] = set()
        if snaps.is_dir():
            for s in snaps.iterdir():
                if s.is_dir():
                    keep.update(os.path.realpath(f) for f in s.iterdir())
        for item in self.items:
            if not item.etag:
                continue
            for p in (self.blobs / item.etag, self.blobs / f"{item.etag}.incomplete"):
                if os.path.realpath(p) not in keep:
                    with contextlib.suppress(OSError):
                        p.unlink()
        for tmp in self.dir.glob(".hasr-pull-*"):
            shutil.rmtree(tmp, ignore_errors=True)
        if not (snaps.is_dir() and any(snaps.iterdir())):
            shutil.rmtree(self.dir, ignore_errors=True)

    def _mapped(self, e: BaseException, doing: str) -> errors.HasrError:
        return mapped(e, doing, self.name, self.repo, self.endpoint, self.cache, self.PLACE, self.ROOM)


class _Sink:
    """The partial blob as http_get's file: counts what arrives (progress lines, at least every PROGRESS_SEC or
    PROGRESS_BYTES) and stops the transfer when the client has gone."""

    def __init__(self, f: Any, pull: Pull, item: Item, have: int) -> None:
        self.f, self.pull, self.item = f, pull, item
        self.done = self.shown = have
        self.last = time.monotonic()

    def write(self, data: bytes) -> int:
        if self.pull.cancelled.is_set():
            raise _Stop()
        n: int = self.f.write(data)
        self.done += len(data)
        self.pull.fetched += len(data)
        now = time.monotonic()
        if now - self.last >= PROGRESS_SEC or self.done - self.shown >= PROGRESS_BYTES:
            self.last, self.shown = now, self.done
            self.pull._progress(self.item, self.done)
        return n

    def truncate(self, size: int | None = None) -> int:
        """The server ignored the Range: huggingface_hub starts the file again."""
        n: int = self.f.truncate() if size is None else self.f.truncate(size)
        self.done = self.f.tell()
        return n

    def __getattr__(self, name: str) -> Any:
        return getattr(self.f, name)


def _link(blob: Path, dst: Path) -> None:
    """A relative symlink, as huggingface_hub makes them; a hard link (or a copy) where symlinks are refused."""
    try:
        os.symlink(os.path.relpath(blob, dst.parent), dst)
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise
        try:
            os.link(blob, dst)
        except OSError:
            shutil.copyfile(blob, dst)


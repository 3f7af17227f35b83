"""A local Hugging Face hub for tests: the file API the real ``huggingface_hub`` client uses, on 127.0.0.1.

Two HTTP servers in threads, as the hub has them: the hub (``HF_ENDPOINT``) and a CDN on another port (another
origin). The hub answers

- ``GET /api/models/{repo_id}`` and ``/api/models/{repo_id}/revision/{rev}`` (``?blobs=true``: files_metadata)
  with ``id``, ``sha`` and ``siblings`` (``rfilename``, ``size``, ``blobId`` and, for LFS files, ``lfs:
  {sha256, size, pointerSize}``), and ``/api/models/{repo_id}/tree/{rev}`` (what snapshot_download lists);
- ``HEAD`` / ``GET /{repo_id}/resolve/{rev}/{filename}``: a plain file is served there (``ETag`` = its git blob
  id, ``X-Repo-Commit``, ``Content-Length``, Range requests); an LFS file is a 302 to the CDN with
  ``X-Linked-Etag`` (its sha256), ``X-Linked-Size``, ``X-Repo-Commit``, ``ETag`` (the pointer's git id) and
  ``Location``, as huggingface.co answers;
- an unknown repo: 404 ``X-Error-Code: RepoNotFound``; an unknown revision or file: ``RevisionNotFound`` /
  ``EntryNotFound``.

The CDN serves LFS content by sha256 with Range support (206 + Content-Range). It misbehaves on request:
``break_at[(repo, file)] = offset`` ends every response of that file at ``offset`` by closing the connection
(until the test removes it), ``drop_once`` does so once, ``corrupt`` serves the file with one byte changed
(same size), ``throttle`` sleeps between chunks. ``served`` counts the content bytes sent per (repo, file) and
``ranges`` records every Range header asked for.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

CHUNK = 1 << 20
_HASHES: dict[tuple[str, int, float], tuple[str, str]] = {}


def _hashes(path: Path) -> tuple[str, str]:
    """(sha256, git blob id) of a file, computed once per file version."""
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime)
    if key not in _HASHES:
        sha256, git = hashlib.sha256(), hashlib.sha1(b"blob %d\0" % st.st_size)
        with open(path, "rb") as f:
            while block := f.read(CHUNK):
                sha256.update(block)
                git.update(block)
        _HASHES[key] = (sha256.hexdigest(), git.hexdigest())
    return _HASHES[key]


@dataclass
class HubFile:
    name: str
    path: Path
    lfs: bool
    size: int = 0
    sha256: str = ""
    git_id: str = ""
    pointer: bytes = b""

    def __post_init__(self) -> None:
        self.size = self.path.stat().st_size
        self.sha256, self.git_id = _hashes(self.path)
        if self.lfs:
            self.pointer = (f"version https://git-lfs.github.com/spec/v1\noid sha256:{self.sha256}\n"
                            f"size {self.size}\n").encode()

    @property
    def blob_id(self) -> str:
        """The git id the hub lists: of the content, or of the LFS pointer."""
        if not self.lfs:
            return self.git_id
        return hashlib.sha1(b"blob %d\0" % len(self.pointer) + self.pointer).hexdigest()


@dataclass
class HubRepo:
    repo_id: str
    files: dict[str, HubFile]
    sha: str = field(default_factory=lambda: hashlib.sha1(str(time.time_ns()).encode()).hexdigest())


class Hub:
    """The hub and its CDN, started at construction; ``endpoint`` is what HF_ENDPOINT names."""

    def __init__(self) -> None:
        self.repos: dict[str, HubRepo] = {}
        self.served: Counter[tuple[str, str]] = Counter()
        self.ranges: list[tuple[str, str, str]] = []  # (repo, file, Range header)
        self.break_at: dict[tuple[str, str], int] = {}
        self.drop_once: dict[tuple[str, str], int] = {}
        self.corrupt: set[tuple[str, str]] = set()
        self.throttle = 0.0  # seconds to sleep after each MiB of content
        self.lock = threading.Lock()
        self.hub = self._serve(_HubHandler)
        self.cdn = self._serve(_CdnHandler)

    def _serve(self, handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        server.hub = self  # type: ignore[attr-defined]
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return server

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.hub.server_address[1]}"

    @property
    def cdn_url(self) -> str:
        return f"http://127.0.0.1:{self.cdn.server_address[1]}"

    def add(self, repo_id: str, directory: str | Path, lfs: tuple[str, ...] = ("model.bin", "tokenizer.json"),
            extra: dict[str, bytes] | None = None, tmp: Path | None = None) -> HubRepo:
        """Serve every file of ``directory`` (not dot files) as ``repo_id``; ``extra`` adds small files (written
        under ``tmp``), such as a README the pull must leave out."""
        files: dict[str, HubFile] = {}
        for p in sorted(Path(directory).iterdir()):
            if p.is_file() and not p.name.startswith("."):
                files[p.name] = HubFile(p.name, p, p.name in lfs)
        for name, data in (extra or {}).items():
            assert tmp is not None
            p = tmp / f"{repo_id.replace('/', '--')}-{name.lstrip('.')}"
            p.write_bytes(data)
            files[name] = HubFile(name, p, False)
        repo = HubRepo(repo_id, files)
        self.repos[repo_id] = repo
        return repo

    def reset_counts(self) -> None:
        with self.lock:
            self.served.clear()
            self.ranges.clear()

    def close(self) -> None:
        for s in (self.hub, self.cdn):
            s.shutdown()
            s.server_close()


class _Handler(BaseHTTPRequestHandler):
    server: Any

    @property
    def hubs(self) -> Hub:
        return self.server.hub  # type: ignore[no-any-return]

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _error(self, status: int, code: str, message: str, commit: str | None = None) -> None:
        body = json.dumps({"error": message}).encode()
        self.send_response(status)
        self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        if commit:
            self.send_header("X-Repo-Commit", commit)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _content(self, repo: HubRepo, f: HubFile, headers: dict[str, str], cdn: bool) -> None:
        """Send ``f`` (or the asked range of it), misbehaving as the hub was told to."""
        size, start = f.size, 0
        rng = self.headers.get("Range")
        key = (repo.repo_id, f.name)
        if rng:
            with self.hubs.lock:
                self.hubs.ranges.append((repo.repo_id, f.name, rng))
            start = int(rng.split("=", 1)[1].split("-", 1)[0])
        self.send_response(206 if rng else 200)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(size - start))
        if rng:
            self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
        self.end_headers()
        if self.command == "HEAD":
            return
        stop = size
        with self.hubs.lock:
            if cdn and key in self.hubs.break_at:
                stop = max(start, min(size, self.hubs.break_at[key]))
            elif cdn and key in self.hubs.drop_once and self.hubs.drop_once[key] > start:
                stop = self.hubs.drop_once.pop(key)
        flip = f.size // 2 if cdn and key in self.hubs.corrupt else -1
        with open(f.path, "rb") as src:
            src.seek(start)
            pos = start
            while pos < stop:
                block = bytearray(src.read(min(CHUNK, stop - pos)))
                if pos <= flip < pos + len(block):
                    block[flip - pos] ^= 0xFF
                try:
                    self.wfile.write(block)
                except OSError:  # the client went away
                    return
                with self.hubs.lock:
                    self.hubs.served[key] += len(block)
                pos += len(block)
                if self.hubs.throttle:
                    time.sleep(self.hubs.throttle)
        if stop < size:  # cut off: the client sees the connection close before Content-Length was reached
            self.wfile.flush()
            self.close_connection = True


class _HubHandler(_Handler):
    def do_GET(self) -> None:
        path = unquote(urlsplit(self.path).path)
        if path.startswith("/api/models/"):
            return self._model_info(path[len("/api/models/"):])
        self._resolve(path)

    def do_HEAD(self) -> None:
        self._resolve(unquote(urlsplit(self.path).path))

    def _model_info(self, rest: str) -> None:
        if "/tree/" in rest:
            return self._tree(*rest.split("/tree/", 1))
        repo_id, _, rev = rest.partition("/revision/")
        repo = self.hubs.repos.get(repo_id.strip("/"))
        if repo is None:
            return self._error(404, "RepoNotFound", "Repository not found")
        if rev and rev not in ("main", repo.sha):
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
        blobs = parse_qs(urlsplit(self.path).query).get("blobs", [""])[0].lower() == "true"  # True from requests
        siblings: list[dict[str, Any]] = []
        for f in repo.files.values():
            s: dict[str, Any] = {"rfilename": f.name}
            if blobs:
                s.update(size=f.size, blobId=f.blob_id)
                if f.lfs:
                    s["lfs"] = {"sha256": f.sha256, "size": f.size, "pointerSize": len(f.pointer)}
            siblings.append(s)
        self._json({"_id": repo.sha[:24], "id": repo.repo_id, "modelId": repo.repo_id, "sha": repo.sha,
                    "private": False, "disabled": False, "gated": False, "downloads": 0, "likes": 0,
                    "tags": ["ctranslate2"], "library_name": "ctranslate2",
                    "lastModified": "2024-01-01T00:00:00.000Z", "siblings": siblings})

    def _tree(self, repo_id: str, rev: str) -> None:
        repo = self.hubs.repos.get(repo_id)
        if repo is None:
            return self._error(404, "RepoNotFound", "Repository not found")
        if rev.split("?")[0] not in ("main", repo.sha):
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
        self._json([{"type": "file", "oid": f.blob_id, "size": f.size, "path": f.name,
                     **({"lfs": {"oid": f.sha256, "size": f.size, "pointerSize": len(f.pointer)}} if f.lfs else {})}
                    for f in repo.files.values()])

    def _json(self, obj: Any) -> None:
        body = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _resolve(self, path: str) -> None:
        repo_id, sep, rest = path.lstrip("/").partition("/resolve/")
        repo = self.hubs.repos.get(repo_id)
        if not sep or repo is None:
            return self._error(404, "RepoNotFound", "Repository not found")
        rev, _, name = rest.partition("/")
        if rev not in ("main", repo.sha):
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
        f = repo.files.get(name)
        if f is None:
            return self._error(404, "EntryNotFound", f"{name} does not exist on \"{rev}\"", repo.sha)
        if not f.lfs:
            return self._content(repo, f, {"ETag": f'"{f.git_id}"', "X-Repo-Commit": repo.sha}, cdn=False)
        self.send_response(302)
        self.send_header("X-Repo-Commit", repo.sha)
        self.send_header("X-Linked-Etag", f'"{f.sha256}"')
        self.send_header("X-Linked-Size", str(f.size))
        self.send_header("ETag", f'"{f.blob_id}"')
        self.send_header("Location", f"{self.hubs.cdn_url}/{repo.repo_id}/{f.sha256}?name={name}")
        self.send_header("Content-Length", "0")
        self.end_headers()


class _CdnHandler(_Handler):
    def do_GET(self) -> None:
        self._serve()

    def do_HEAD(self) -> None:
        self._serve()

    def _serve(self) -> None:
        path = unquote(urlsplit(self.path).path).lstrip("/")
        repo_id, _, sha = path.rpartition("/")
        repo = self.hubs.repos.get(repo_id)
        f = next((x for x in (repo.files.values() if repo else ()) if x.lfs and x.sha256 == sha), None)
        if repo is None or f is None:
            return self._error(404, "NoSuchKey", "not found")
        self._content(repo, f, {"ETag": f'"{f.sha256}"'}, cdn=True)

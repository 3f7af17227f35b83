"""The request context every route needs (speaches' dependencies.py): the daemon's parts (:class:`Daemon`), who
is calling and what they may do, and the small helpers of a response. Routes (api.py, openai_api.py,
realtime.py, pull.py) and the job pipeline (jobs.py) import this; it imports none of them, so no route module
imports another.
"""

from __future__ import annotations

import asyncio
import grp
import importlib
import json
import os
import pwd
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse as _StarletteJSON

from hasrd import errors, modelspec
from hasrd.audiobudget import AudioBudget
from hasrd.config import Settings
from hasrd.events import Broadcaster
from hasrd.modelspec import ModelSpec
from hasrd.options import Options
from hasrd.scheduler import Pool
from hasrd.transcript import numbers

DECODES_AT_ONCE = 2

_IMPORTED: set[str] = set()


async def preload(*modules: str) -> None:
    """Import what a route needs the first time it runs, in a thread: the daemon starts without it (issue 32
    #10) and /health keeps answering while it loads (PyAV, for one, takes a tenth of a second). Concurrent
    first calls wait on Python's import lock; later calls return at once."""
    missing = [m for m in modules if m not in _IMPORTED]
    if missing:
        await asyncio.to_thread(lambda: [importlib.import_module(m) for m in missing])
        _IMPORTED.update(missing)


@dataclass
class Daemon:
    settings: Settings
    pool: Pool  # the worker pool (hasrd.scheduler): admission, the queue, a runner per worker
    events: Broadcaster
    request_stop: Callable[[bool], None] = lambda now: None  # now: fail what runs instead of finishing it
    uid: int = field(default_factory=os.getuid)
    group_socket: bool = False  # the socket is group-accessible
    shared_gid: int | None = None  # HASR_SHARED_GROUP's gid: its members may use a group-accessible socket
    decode_slots: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(DECODES_AT_ONCE))
    queued_audio: AudioBudget = field(default_factory=AudioBudget)  # what waiting requests hold, decoded


def error_response(e: errors.HasrError) -> JSONResponse:
    headers = {}
    if e.status == 503:
        headers["Retry-After"] = str(int(max(1, round(e.retry_after or 5))))
    if e.status == 413:  # refused before the body was read: close rather than read and discard the rest of it
        headers["Connection"] = "close"  # (a connection kept open would linger, then get an unsolicited 408)
    return JSONResponse(e.to_json(), status_code=e.status, headers=headers)


def caller_uid(request: HTTPConnection) -> int | None:
    """The peer's uid, put in scope["client"] by the daemon's protocol class (SO_PEERCRED)."""
    client = request.scope.get("client")
    if client and isinstance(client[0], str) and client[0].startswith("peer:"):
        return int(client[1])
    return None


def caller_gid(request: Request) -> int | None:
    client = request.scope.get("client")
    if client and isinstance(client[0], str) and client[0].startswith("peer:") and client[0].count(":") == 2:
        return int(client[0].rsplit(":", 1)[1])
    return None


def in_group(uid: int, gid: int | None, group: int) -> bool:
    """Whether a caller belongs to ``group``: its primary gid (from the socket), or the group's member list
    (the user database: /proc of other users is hidden under ProtectProc=invisible)."""
    if gid == group:
        return True
    try:
        name = pwd.getpwuid(uid).pw_name
        return name in grp.getgrgid(group).gr_mem or pwd.getpwuid(uid).pw_gid == group
    except KeyError:
        return False


def check_access(d: Daemon, request: Request, *, control: bool = False, names: bool = False) -> None:
    """Who may call. The daemon's owner and root: everything. Members of HASR_SHARED_GROUP on a
    group-accessible socket (the system-wide install): transcriptions and state, not ``control`` (load, unload,
    stop). A TCP caller cannot be identified: transcriptions of uploads only, nothing that ``names`` files or
    jobs (/api/ps, /api/events) and no control.
    """
    uid = caller_uid(request)
    if uid is None:
        check_tcp_origin(d, request)
        if control:
            raise errors.Forbidden("a caller over TCP cannot be identified, so it may not load, unload or stop "
                                   "the daemon; use the Unix socket")
        if names:
            raise errors.Forbidden(f"{request.url.path} is not served over TCP: it names the files being "
                                   f"transcribed; use the Unix socket")
        return
    if uid in (d.uid, 0):
        return
    member = d.group_socket and d.shared_gid is not None and in_group(uid, caller_gid(request), d.shared_gid)
    if member and not control:
        return
    if member:
        raise errors.Forbidden(f"uid {uid} may not load, unload or stop this daemon: only its owner (uid {d.uid}) "
                               f"and root may")
    raise errors.Forbidden(f"uid {uid} may not use this daemon (it belongs to uid {d.uid}"
                           + ("; members of HASR_SHARED_GROUP may" if d.shared_gid is not None else "") + ")")


LOOPBACK = ("127.0.0.1", "::1", "localhost")


def check_tcp_origin(d: Daemon, request: Request) -> None:
    """Over TCP, a web page must not be able to use the daemon (issue 21 #6): DNS rebinding sends the page's own
    host name as Host, so only the bound address (or localhost on a loopback socket) is accepted; a browser
    sends Origin with a cross-site request, refused unless HASR_ALLOWED_ORIGINS names it."""
    server = request.scope.get("server") or ("", 0)
    bound_host, bound_port = str(server[0] or ""), int(server[1] or 0)
    host = request.headers.get("host", "")
    name, _, port = host.rpartition(":") if not host.endswith("]") else (host, "", "")
    if not name or not port.isdigit():
        name, port = host, ""
    name = name.strip("[]").lower()
    if port and bound_port and int(port) != bound_port:
        name = ""
    hosts = {bound_host.lower()} | (set(LOOPBACK) if bound_host in LOOPBACK else set())
    if not name or name not in hosts:
        raise errors.Forbidden(f"over TCP the Host header must name the address the daemon listens on "
                               f"({bound_host}:{bound_port}), not {host!r}")
    origin = request.headers.get("origin")
    if origin is not None:
        allowed = {o.strip().rstrip("/") for o in d.settings.allowed_origins.split(",") if o.strip()}
        if origin.rstrip("/") not in allowed:
            raise errors.Forbidden(f"requests from web pages (Origin {origin}) are refused; name the origin in "
                                   f"HASR_ALLOWED_ORIGINS to allow it")


def names_files(d: Daemon, conn: HTTPConnection) -> bool:
    """Whether this caller may name files and directories: the daemon's own user, or root (SO_PEERCRED)."""
    uid = caller_uid(conn)
    return uid is not None and uid in (d.uid, 0)


def resolve_model(d: Daemon, conn: HTTPConnection, name: str) -> ModelSpec:
    """The model a request names (hasrd.modelspec), by name only for a caller who may not name files."""
    return modelspec.resolve(name, d.settings, trusted=names_files(d, conn))


def speakers_of(d: Daemon, conn: HTTPConnection, options: Options, diarized: bool = False) -> Options:
    """The request's speakers checked before any work: diarized_json asks for them (``auto``) by itself, names
    need speakers, and a diarization's model is resolved to its file (hasrd.speakermodels: by name only for a
    caller who may not name files; SpeakerModelMissing says how to get one)."""
    if diarized and options.speakers is None:
        options = msgspec.structs.replace(options, speakers="auto")
    if options.speakers is None:
        if options.speaker_names or options.speaker_model:
            raise errors.InvalidOption("speaker_names and speaker_model need speakers (auto, channels or a number)",
                                       param="speakers")
        return options
    if options.speakers == "channels":
        return options
    from hasrd import speakermodels

    path = speakermodels.resolve(options.speaker_model, trusted=names_files(d, conn))
    return msgspec.structs.replace(options, speaker_model=str(path))


def check_path_access(d: Daemon, request: Request) -> None:
    if names_files(d, request):
        return
    if caller_uid(request) is None:
        raise errors.Forbidden("a caller over TCP cannot be identified, so the daemon will not open files for it: "
                               "upload the audio instead of naming a path (the `file` field)")
    raise errors.Forbidden("this daemon runs as another user and would read the file with its rights: "
                           "upload the audio instead of naming a path (the `file` field)")


def dumps(obj: Any) -> bytes:
    """JSON as UTF-8 for every response and stream (a result Struct as its JSON). A file name that is not UTF-8
    arrives as surrogate escapes (in a path, or in an error message naming it): it must never turn an answer
    into a 500."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"),
                      default=_struct).encode("utf-8", "backslashreplace")


def _struct(obj: Any) -> Any:
    if isinstance(obj, msgspec.Struct):
        return msgspec.to_builtins(obj, enc_hook=numbers)
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


class JSONResponse(_StarletteJSON):
    def render(self, content: Any) -> bytes:
        return dumps(content)


def jsonl(obj: Any) -> bytes:
    return dumps(obj) + b"\n"


def shown(path: str) -> str:
    """A path as text that can always be encoded (bytes that are not UTF-8 become \\xNN)."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def check_language(language: str, param: str | None = None) -> str:
    """Refuse an unknown language before any audio is decoded or any worker is started (invariant 2)."""
    from hasrd.languages import UnknownLanguage, resolve

    try:
        resolve(language)
    except UnknownLanguage as e:
        raise errors.UnknownLanguage(str(e), param=param) from None
    return language

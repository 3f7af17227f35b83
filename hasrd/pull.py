"""Model management over the API (docs/API.md "Model management"): ``POST /api/pull`` downloads a faster-whisper
model into the local Hugging Face cache with streamed progress (as Ollama's /api/pull; the download itself is
hasrd/download.py), ``DELETE /api/delete`` removes an installed one. Imported when one of them first runs
(app.py), with download.py: a daemon that pulls nothing never imports either.

Delete. A name under ``$XDG_DATA_HOME/hasr/models/`` or a repo in the Hugging Face cache (resolved as a request's
``model`` is), or an absolute path inside one of those two places; the workers running it are unloaded first.
The default's ids, the embedded ``base`` and the default's own model are refused.

Speaker models (hasrd/speakermodels.py) share both routes: a KNOWN speaker model's name (or repo id) pulls it
(hasrd/speakerpull.py) into ``$XDG_DATA_HOME/hasr/speakers/``, and delete removes ``speakers/NAME.onnx`` by name
or path. They share no names with transcription models: a name both answer to is refused, and the path says which.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from hasrd import errors, models, modelspec, speakermodels
from hasrd.context import JSONResponse, check_access, jsonl
from hasrd.download import Pull
from hasrd.events import Broadcaster, Feed
from hasrd.hub import REPO_ID, SIZES, cache_dir, endpoint, offline, offline_route, repo_dir, repo_lock
from hasrd.intake import read_json
from hasrd.speakerpull import SpeakerPull

log = logging.getLogger("hasrd.pull")



def _name_of(body: Any, example: str) -> str:
    if not isinstance(body, dict):
        raise errors.BadRequest(f"the body must be a JSON object like {example}")
    name = body.get("model", body.get("name"))
    if not isinstance(name, str) or not name.strip():
        raise errors.BadRequest(f"model is required: a model's name, like {example}", param="model")
    if len(name) > 1024:
        raise errors.BadRequest("model is longer than any model's name (1024 characters)", param="model")
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise errors.BadRequest("model holds a control character (a NUL, a newline ...): no model is named so",
                                param="model")
    return name.strip()


def _pull_name(name: str) -> str:
    if name in modelspec.DEFAULT_IDS:
        raise errors.BadRequest(f"`{name}` names the configured default (HASR_ENGINE, HASR_FW_MODEL), not a model to "
                                f"download: pull a faster-whisper size ({SIZES}) or a repo id", param="model")
    if Path(name).is_absolute():
        raise errors.BadRequest("pull takes a model's name or a Hugging Face repo id, not a path: a model "
                                "directory needs no download (name it as the request's model, or import it into "
                                "the data directory with `hasrctl pull PATH`)", param="model")
    if not REPO_ID.fullmatch(name) or "--" in name or ".." in name:
        raise errors.BadRequest(f"`{name}` is no model name: a faster-whisper size ({SIZES}) or a Hugging Face repo "
                                f"id (owner/name)", param="model")
    return name


async def pull(request: Request) -> Response:
    d = request.app.state.daemon
    check_access(d, request, control=True)
    body = await read_json(request, '{"model": "large-v3"}')
    name = _pull_name(_name_of(body, '{"model": "large-v3"}'))
    stream = body.get("stream", True)
    if not isinstance(stream, bool):
        raise errors.BadRequest("stream must be true or false", param="stream")
    if offline():
        raise errors.Unsupported(f"downloads are off: HF_HUB_OFFLINE is set in hasrd's environment (unset it to "
                                 f"pull models). {offline_route(name)}", param="model")
    if d.events.closed:
        raise errors.ShuttingDown("hasrd is stopping: pull again once it is back")
    job = (SpeakerPull(name, speakermodels.speakers_dir(), endpoint()) if speakermodels.known(name)
           else Pull(name, cache_dir(), endpoint()))
    first = await asyncio.to_thread(job.manifest)
    if not stream:
        return await _pull_whole(request, job, d.events)
    return _PullStream(_lines(job, first, d.events), job, media_type="application/x-ndjson",
                       headers={"Cache-Control": "no-cache"})


async def _lines(job: Pull, first: dict[str, Any], events: Broadcaster) -> AsyncIterator[bytes]:
    """The pull's lines as the thread sends them; the daemon beginning to exit ends the stream at once with
    ``shutting_down`` (the thread stops at its next chunk, what arrived is kept)."""
    loop = asyncio.get_running_loop()
    q: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    def emit(ev: dict[str, Any]) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is gone (the daemon is exiting)
            loop.call_soon_threadsafe(q.put_nowait, ev)

    async def until_exit(sub: Feed) -> None:
        while await sub.get():  # state snapshots; an empty one: the daemon is exiting
            pass

    job.emit = emit
    sub = events.subscribe()
    exiting = asyncio.ensure_future(until_exit(sub))
    get: asyncio.Future[dict[str, Any]] | None = None
    try:
        yield jsonl(first)
        job.start(emit)
        while True:
            get = asyncio.ensure_future(q.get())
            await asyncio.wait([get, exiting], return_when=asyncio.FIRST_COMPLETED)
            if not get.done():
                job.cancel()
                yield jsonl(errors.ShuttingDown(f"hasrd is stopping: the pull of {job.repo} stopped; what arrived "
                                                f"is kept and the next pull continues it").to_json())
                return
            ev = get.result()
            yield jsonl(ev)
            if ev.get("status") == "success" or "error" in ev:
                return
    finally:
        exiting.cancel()
        if get is not None:
            get.cancel()
        events.unsubscribe(sub)


class _PullStream(StreamingResponse):
    """The pull's NDJSON lines; however the response ends (the client gone), the download stops with it."""

    def __init__(self, content: AsyncIterator[bytes], job: Pull, **kw: Any) -> None:
        super().__init__(content, **kw)
        self.job = job

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.job.cancel()


async def _pull_whole(request: Request, job: Pull, events: Broadcaster) -> Response:
    """``"stream": false``: one answer at the end, the error with its own status."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Any] = loop.create_future()

    def settle(final: dict[str, Any]) -> None:
        if not done.done():
            done.set_result(final)

    def finish(final: dict[str, Any]) -> None:
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle, final)

    async def gone() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    async def exiting(sub: Feed) -> None:
        while await sub.get():
            pass

    job.start(finish)
    sub = events.subscribe()
    watchers: list[asyncio.Future[Any]] = [asyncio.ensure_future(gone()), asyncio.ensure_future(exiting(sub))]
    try:
        await asyncio.wait([done, *watchers], return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in watchers:
            w.cancel()
        events.unsubscribe(sub)
        if not done.done():
            job.cancel()
    if not done.done():
        if watchers[1].done() and not watchers[1].cancelled():
            raise errors.ShuttingDown(f"hasrd is stopping: the pull of {job.repo} stopped; what arrived is kept")
        raise errors.Cancelled("the client went away: the pull stopped; what arrived is kept")
    if job.error is not None:
        raise job.error
    return JSONResponse(done.result())


# ---- delete -------------------------------------------------------------------------------------------------


@dataclass
class Target:
    """What a delete removes: a model directory (or a link to one), or a repo's directories in the HF caches."""

    kind: str  # "directory" | "hf-cache" | "speaker" (one file)
    paths: list[Path]
    repo: str = ""


def _default_fw(settings: Any) -> str:
    """The default's own faster-whisper model: HASR_FW_MODEL, or large-v3 under the GPU engines."""
    fw = str(getattr(settings, "fw_model", "") or "")
    if not fw and str(settings.engine) in modelspec.GPU_ENGINES:
        fw = models.GPU_DEFAULT
    return fw


def _where(fw: str) -> list[Path]:
    """Where a model name's files are, as the worker finds them (none for the embedded model)."""
    if not fw or fw == "embedded":
        return []
    p = Path(fw).expanduser()
    if p.is_absolute():
        return [Path(os.path.normpath(p))]
    if "/" not in fw and (models.data_dir() / fw / "model.bin").is_file():
        return [models.data_dir() / fw]
    repo = models.fw_repo(fw)
    return [repo_dir(c, repo) for c in models.hf_cache_dirs() if repo_dir(c, repo).is_dir()]


def _same(a: Path, b: Path) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def _within(inner: Path, outer: Path) -> bool:
    """``inner`` is ``outer`` or lies inside it (a snapshot directory inside its repo's)."""
    i, o = os.path.realpath(inner), os.path.realpath(outer)
    return i == o or i.startswith(o.rstrip(os.sep) + os.sep)


def locate(name: str, settings: Any) -> Target:
    """What ``name`` names among the installed models (as modelspec.resolve finds them) and the speaker models,
    or the error why it may not be removed."""
    speaker = speakermodels.installed_path(name)
    k = speakermodels.known(name) if speaker is not None else None
    found = Target("speaker", [speaker], k.repo if k else "") if speaker is not None else None
    if found is not None and name.startswith("/"):
        return found
    try:
        target = _locate_model(name, settings)
    except errors.ModelNotFound:
        if found is not None:
            return found
        raise
    if found is not None:
        raise errors.BadRequest(f"`{name}` names a transcription model ({', '.join(map(str, target.paths))}) and "
                                f"a speaker model ({found.paths[0]}): name the one to remove by its path",
                                param="model")
    return target


def _locate_model(name: str, settings: Any) -> Target:
    if name in modelspec.DEFAULT_IDS:
        raise errors.BadRequest(f"`{name}` names the configured default (HASR_ENGINE, HASR_FW_MODEL), not an "
                                f"installed model: there is nothing to remove", param="model")
    if name in (modelspec.EMBEDDED, "embedded"):
        raise errors.BadRequest("`base` is the embedded whisper base: it ships with hasr (its Python package) "
                                "and cannot be removed", param="model")
    data = models.data_dir()
    p = Path(name)
    target: Target | None = None
    if p.is_absolute():
        norm = Path(os.path.normpath(p))
        if norm.parent.exists() and _same(norm.parent, data) and (norm / "model.bin").exists():
            target = Target("directory", [norm])
        for cache in models.hf_cache_dirs():
            for a in [norm, *norm.parents]:
                if a.name.startswith("models--") and a.parent.exists() and cache.exists() and _same(a.parent, cache):
                    if a.is_dir():
                        target = Target("hf-cache", [a], a.name[len("models--"):].replace("--", "/"))
                    break
        if target is None:
            where = [str(data)] + [str(c) for c in models.hf_cache_dirs()]
            if norm.exists():
                raise errors.BadRequest(f"{name} is no model hasr manages: it removes only models under "
                                        f"{', '.join(where)}; remove that directory yourself", param="model")
            raise errors.ModelNotFound(f"{name} does not exist", param="model")
    elif "/" not in name and not name.startswith(".") and ((data / name / "model.bin").is_file()
                                                          or (data / name).is_symlink()):
        target = Target("directory", [data / name])
    else:
        repo = models.fw_repo(name)
        dirs = [repo_dir(c, repo) for c in models.hf_cache_dirs() if repo_dir(c, repo).is_dir()]
        if dirs:
            target = Target("hf-cache", dirs, repo)
    if target is None:
        raise errors.ModelNotFound(f"no model `{name}` is installed (installed: "
                                   f"{', '.join(modelspec.installed_names())}; `hasrctl models` lists them)",
                                   param="model")
    default = _default_fw(settings)
    if default and any(_within(a, b) for a in _where(default) for b in target.paths):
        raise errors.BadRequest(f"`{name}` is the default model (HASR_FW_MODEL={default}): set another default "
                                f"before removing it", param="model")
    return target


def _size(paths: list[Path]) -> int:
    total = 0
    for root in paths:
        if root.is_symlink():
            continue
        if root.is_file():
            total += root.stat().st_size
            continue
        for dirpath, _dirs, files in os.walk(root):
            for f in files:
                with contextlib.suppress(OSError):
                    st = os.lstat(os.path.join(dirpath, f))
                    if not os.path.islink(os.path.join(dirpath, f)):
                        total += st.st_size
    return total


def remove(target: Target) -> int:
    """Remove the target's directories (a link only loses the link); each leaves its place in one rename first,
    so nothing half-removed ever looks like a model. Returns the bytes freed."""
    size = _size(target.paths)
    for p in target.paths:
        if p.is_symlink() or target.kind == "speaker":  # one file: its unlink is whole or not at all
            p.unlink()
            continue
        trash = p.parent.parent / f".hasr-trash-{uuid.uuid4().hex[:8]}" if target.kind == "directory" else \
            p.parent / f".hasr-trash-{uuid.uuid4().hex[:8]}"
        os.rename(p, trash)
        shutil.rmtree(trash, ignore_errors=True)
        if target.kind == "hf-cache":
            shutil.rmtree(p.parent / ".locks" / p.name, ignore_errors=True)
    return size


async def delete(request: Request) -> Response:
    d = request.app.state.daemon
    check_access(d, request, control=True)
    body = await read_json(request, '{"model": "large-v3"}')
    name = _name_of(body, '{"model": "large-v3"}')
    try:
        target = await asyncio.to_thread(locate, name, d.settings)
    except OSError as e:  # a name the file system refuses (too long a part ...)
        raise errors.BadRequest(f"no model can be named `{name}`: {e.strerror or e}", param="model") from None
    lock = repo_lock(target.repo) if target.repo else None
    if lock is not None and not lock.acquire(blocking=False):
        raise errors.ModelBusy(f"{target.repo} is being pulled now: remove it when the pull has ended", param="model")
    try:
        if target.kind == "speaker":  # no worker runs it as its model: a worker that loaded it keeps its copy
            freed = await asyncio.to_thread(remove, target)
            log.info("removed speaker model %s: %s", name, target.paths[0])
            return JSONResponse({"status": "success", "model": name, "kind": target.kind,
                                 "removed": [str(target.paths[0])], "size_mb": freed // 2**20})
        specs: dict[str, modelspec.ModelSpec] = {}
        with contextlib.suppress(errors.HasrError):
            spec = modelspec.resolve(name, d.settings)
            specs[spec.key] = spec
        for ref in list(d.pool.refs.values()):  # the same files under another name
            if any(_within(a, b) for a in _where(ref.spec.fw_model) for b in target.paths):
                specs[ref.spec.key] = ref.spec
        # its requests get model_busy meanwhile (404 once it is gone); its workers stop and leave the pool first
        async with d.pool.withdrawn_while(list(specs.values()), f"the model {name} is being deleted"):
            freed = await asyncio.to_thread(remove, target)
    finally:
        if lock is not None:
            lock.release()
    log.info("removed model %s: %s", name, ", ".join(map(str, target.paths)))
    return JSONResponse({"status": "success", "model": name, "kind": target.kind,
                         "removed": [str(p) for p in target.paths], "size_mb": freed // 2**20})

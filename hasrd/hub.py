"""The Hugging Face hub as a pull meets it: where it is (HF_ENDPOINT, or off by HF_HUB_OFFLINE), the cache's
layout, huggingface_hub imported on the first pull only, and its exceptions read as the errors a client sees,
in sentences that say what to do (hasrd/download.py moves the bytes).

The exceptions of huggingface_hub, httpx and requests are told apart by their class names along the
exception's chain, so no version of either library needs to be imported to read them.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import shutil
import threading
from pathlib import Path
from typing import Any

from hasrd import errors, models, modelspec, speakermodels

log = logging.getLogger("hasrd.pull")

DEFAULT_ENDPOINT = "https://huggingface.co"
_REPO_PART = r"[A-Za-z0-9](?:[\w.-]{0,94}[\w])?"
REPO_ID = re.compile(rf"{_REPO_PART}(?:/{_REPO_PART})?", re.ASCII)
SIZES = "tiny, base, small, medium, large-v3, large-v3-turbo, distil-large-v3"


class HubUnreachable(errors.Unavailable):
    code = "hub_unreachable"


class DownloadFailed(errors.HasrError):
    code, status = "download_failed", 502


class ChecksumMismatch(errors.HasrError):
    code, status = "checksum_mismatch", 502


class DiskFull(errors.HasrError):
    code, status = "insufficient_storage", 507


def endpoint() -> str:
    """The hub: HF_ENDPOINT (a mirror) or huggingface.co, read when a pull starts."""
    return (os.environ.get("HF_ENDPOINT") or "").strip().rstrip("/") or DEFAULT_ENDPOINT


def offline() -> bool:
    """HF_HUB_OFFLINE, as huggingface_hub reads it: downloads are off by choice (not an unreachable hub)."""
    return (os.environ.get("HF_HUB_OFFLINE") or "").strip().upper() in ("1", "ON", "YES", "TRUE")


def _home_short(p: Path) -> str:
    """``p`` with the home directory as ``~`` (as a person types it)."""
    home = str(Path.home())
    return "~" + str(p)[len(home):] if str(p) == home or str(p).startswith(home.rstrip("/") + "/") else str(p)


def offline_route(name: str) -> str:
    """The sentence that ends every "the hub is out of reach" error: how a model gets here without it (a
    CTranslate2 directory carried over, imported by ``hasrctl pull PATH`` or copied into the data directory,
    where hasrd.modelspec finds it by name before the Hugging Face cache; a speaker model's one file, imported the
    same way)."""
    k = speakermodels.known(name)
    if k is not None:
        return (f"Without the hub: bring {k.repo}'s {k.file} (sha256 {k.sha256}) from a machine that has it and "
                f"run `hasrctl pull /path/to/{k.file} --name {k.name}`.")
    repo = models.fw_repo(name)
    local = name if "/" not in name else repo.rsplit("/", 1)[-1]
    src = repo.rsplit("/", 1)[-1]
    return (f"Without the hub: bring {repo}'s directory (model.bin, config.json, tokenizer.json, vocabulary.*) "
            f"from a machine that has it and run `hasrctl pull /path/to/{src} --name {local}`, or copy it into "
            f"{_home_short(models.data_dir() / local)}; then --model {local} uses it.")


def cache_dir() -> Path:
    """The Hugging Face cache huggingface_hub writes to (and hasrd.models looks in first)."""
    return models.hf_cache_dirs()[0]


def repo_dir(cache: Path, repo: str) -> Path:
    return cache / ("models--" + repo.replace("/", "--"))


_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


def repo_lock(repo: str) -> threading.Lock:
    """One pull (or delete) of a repo at a time in this daemon."""
    with _locks_guard:
        return _locks.setdefault(repo, threading.Lock())


def origin(url: str) -> tuple[str, str]:
    """A URL's scheme and host: a file served from elsewhere (a CDN) gets no token."""
    from urllib.parse import urlsplit

    u = urlsplit(url)
    return u.scheme, u.netloc


def usable_name(name: str, repo: str) -> str:
    """The name a request uses for a pulled model: the one pulled, unless something else answers to it (``base``
    is the embedded model, a directory under $XDG_DATA_HOME/hasr/models comes first): then the repo id."""
    if name in modelspec.DEFAULT_IDS or name in (modelspec.EMBEDDED, "embedded"):
        return repo
    if "/" not in name and (models.data_dir() / name / "model.bin").is_file():
        return repo
    return name


def import_hub(chunk: int) -> Any:
    """huggingface_hub, imported on the first pull only, writing at most ``chunk`` bytes between progress lines."""
    try:
        import huggingface_hub
        from huggingface_hub import file_download, utils
    except ImportError:
        raise errors.Unsupported("downloading models needs huggingface_hub in hasrd's Python environment: "
                                 "pip install huggingface_hub (hasr's cpu and gpu extras bring it with "
                                 "faster-whisper)") from None
    with contextlib.suppress(Exception):
        utils.disable_progress_bars()  # the daemon streams its own progress; no tqdm bars in its log
    for name in ("httpx", "httpx2"):  # not a log line per HTTP request
        logging.getLogger(name).setLevel(max(logging.WARNING, logging.getLogger(name).level))
    for mod in (huggingface_hub.constants, file_download):  # http_get writes (and we report) at least this often
        if isinstance(getattr(mod, "DOWNLOAD_CHUNK_SIZE", None), int):
            # getattr/setattr: not every huggingface_hub version has it in both modules, so mypy cannot see it
            setattr(mod, "DOWNLOAD_CHUNK_SIZE", min(getattr(mod, "DOWNLOAD_CHUNK_SIZE"), chunk))  # noqa: B009, B010
    return (huggingface_hub, file_download, utils)


def mb(n: float) -> str:
    return f"{n / 2**30:.1f} GB" if n >= 2**30 else f"{n / 2**20:.1f} MB"


def _chain(e: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    cur: BaseException | None = e
    while cur is not None and cur not in out:
        out.append(cur)
        cur = cur.__cause__ or cur.__context__
    return out


def _names(e: BaseException) -> set[str]:
    return {c.__name__ for x in _chain(e) for c in type(x).__mro__}


CONNECT_ERRORS = {"ConnectError", "ConnectTimeout", "ProxyError", "SSLError", "gaierror", "ConnectionRefusedError",
                  "NewConnectionError", "NameResolutionError", "MaxRetryError"}
BROKEN_ERRORS = {"RemoteProtocolError", "ReadTimeout", "ReadError", "ChunkedEncodingError", "ProtocolError",
                 "IncompleteRead", "ConnectionResetError", "TimeoutException", "NetworkError", "ConnectionError"}


def _disk_full(e: BaseException) -> bool:
    return any(isinstance(x, OSError) and x.errno in (errno.ENOSPC, errno.EDQUOT) for x in _chain(e))


def mapped(e: BaseException, doing: str, name: str, repo: str, url: str, cache: Path,
           place: str = "the Hugging Face cache",
           room: str = " (or point HF_HUB_CACHE in hasrd's environment at a larger disk)") -> errors.HasrError:
    """A foreign exception met while ``doing`` a pull of ``name`` (the hub's ``repo``) into ``cache`` (``place``
    in words; ``room``: where else it could go) as the error a client sees, in a sentence that says what to do;
    ``url`` is the hub's (HF_ENDPOINT)."""
    if isinstance(e, errors.HasrError):
        return e
    names = _names(e)
    kept = (" What arrived is kept: the next pull continues it." if doing.startswith("downloading") else "")
    if _disk_full(e):
        free = shutil.disk_usage(cache).free if cache.exists() else 0
        return DiskFull(f"the disk of {place} ({cache}) is full ({mb(free)} free) while "
                        f"{doing} of {repo}: what was downloaded was removed and nothing was installed; "
                        f"free some space{room} and pull again")
    if "HFValidationError" in names:
        return errors.BadRequest(f"`{name}` is no Hugging Face repo id: {str(e).splitlines()[0]}",
                                 param="model")
    if "GatedRepoError" in names:
        return errors.ModelNotFound(f"{repo} on {url} is gated: accept its terms on the hub and "
                                    f"give hasrd a token (HF_TOKEN in its environment)", param="model")
    if "RepositoryNotFoundError" in names or "RevisionNotFoundError" in names:
        return errors.ModelNotFound(
            f"there is no model {name!r} on {url} (looked for the repo {repo}): a "
            f"faster-whisper size ({SIZES}, ...) or a repo id of a CTranslate2 Whisper model; a private repo "
            f"needs HF_TOKEN in hasrd's environment", param="model")
    if "OfflineModeIsEnabled" in names:
        return errors.Unsupported(f"downloads are off: HF_HUB_OFFLINE is set in hasrd's environment (unset it "
                                  f"to pull {repo}). {offline_route(name)}", param="model")
    reason = str(_chain(e)[-1]) or type(e).__name__
    if names & CONNECT_ERRORS:
        return HubUnreachable(f"this machine cannot reach {url} ({reason}) while {doing} of "
                              f"{repo}: check the network (a proxy: HTTPS_PROXY in hasrd's environment), "
                              f"or set HF_ENDPOINT in hasrd's environment to a mirror of the Hugging Face "
                              f"hub.{kept} {offline_route(name)}")
    if "EntryNotFoundError" in names or "RemoteEntryNotFoundError" in names:
        return DownloadFailed(f"{url} lists a file of {repo} that it does not serve while {doing}; "
                              f"pull again later")
    if "HfHubHTTPError" in names:
        status = next((getattr(getattr(x, "response", None), "status_code", None) for x in _chain(e)
                       if getattr(x, "response", None) is not None), None)
        return DownloadFailed(f"{url} answered {status or 'an error'} while {doing} of {repo}: "
                              f"{str(e).splitlines()[0] if str(e) else type(e).__name__}.{kept}")
    if names & BROKEN_ERRORS:
        return DownloadFailed(f"the connection to {url} broke off while {doing} of {repo} "
                              f"({reason}).{kept}")
    log.warning("pull of %s: %s: %r", repo, doing, e)
    return DownloadFailed(f"{doing} of {repo} failed: {type(e).__name__}: {e}.{kept}")

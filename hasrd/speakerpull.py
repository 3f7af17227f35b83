"""``POST /api/pull`` of a speaker-embedding model (``hasrctl pull wespeaker-resnet34``): one file of a Hugging Face
repo, fetched as a faster-whisper model's files are (hasrd/download.py: resumable, progress, the hub's sha256
checked before the file gets its name), pinned besides to the sha256 hasr knows for it (hasrd/speakermodels.py
KNOWN), and installed as ``$XDG_DATA_HOME/hasr/speakers/NAME.onnx`` instead of into the Hugging Face cache.

Why not the cache: a speaker model is one file the worker opens by path, ``hasrctl models`` lists and ``hasrctl
rm`` removes; in the cache it would be a snapshot of links that ``/v1/models`` would have to learn to skip.
The partial file lives in a hidden directory beside the installed ones (``.hasr-pull-NAME/<sha256>.incomplete``),
so a cut-off pull continues where it stopped, and the verified file reaches its name in one rename.

Why pinned: a mirror (HF_ENDPOINT) or a changed repo could serve another file with a sha256 of its own, which
the hub's check alone would accept. A hub that lists another sha256 than KNOWN's is refused before a byte is
transferred (``checksum_mismatch``); a model from elsewhere comes in by ``hasrctl pull /path/to/model.onnx``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Any

from hasrd import speakermodels
from hasrd.download import Item, Pull
from hasrd.hub import ChecksumMismatch, DownloadFailed



class SpeakerPull(Pull):
    """The pull of a KNOWN speaker model, named by its name or its repo id; ``cache`` is the speakers directory."""

    PLACE = "the speakers directory"
    ROOM = ""

    def __post_init__(self) -> None:
        found = speakermodels.known(self.name)
        if found is None:  # pull.py asks speakermodels.known first
            raise ValueError(f"{self.name} is no known speaker model")
        self.known: speakermodels.Known = found
        self.repo = found.repo
        self.dest = self.cache / (found.name + speakermodels.SUFFIX)
        self.dir = self.cache / f".hasr-pull-{found.name}"  # hidden: never listed as a model
        self.blobs = self.dir

    def _wanted(self, name: str) -> bool:
        return name == self.known.file

    def _check_items(self) -> None:
        k = self.known
        if not self.items:
            raise DownloadFailed(f"{self.endpoint} lists no {k.file} in {k.repo}: the repo changed, or HF_ENDPOINT is "
                                 f"a mirror without it; a copy from elsewhere imports with `hasrctl pull "
                                 f"/path/to/{k.file} --name {k.name}`")
        listed = self.items[0].sha256
        if listed != k.sha256:
            raise ChecksumMismatch(
                f"{self.endpoint} lists {k.file} of {k.repo} with sha256 {listed or '(none: not an LFS file)'}, "
                f"but hasr knows it as {k.sha256} (docs/SPEAKERS.md): nothing was downloaded. The repo changed or "
                f"the mirror serves another file; a model you trust imports with `hasrctl pull /path/to/model.onnx`",
                param="model")

    def _fetch(self, hf: Any, fd: Any, utils: Any, item: Item) -> None:
        """An installed copy that matches the pin stands for the download: a second pull transfers nothing."""
        blob = self.blobs / str(item.sha256)
        if (item.sha256 and not blob.is_file() and self.dest.is_file()
                and speakermodels.file_sha256(self.dest) == item.sha256):
            try:
                os.link(self.dest, blob)
            except OSError:
                shutil.copyfile(self.dest, blob)
        super()._fetch(hf, fd, utils, item)

    def _install(self) -> Path:
        """The verified file takes its name in one rename (the staging directory is on the same disk)."""
        item = self.items[0]
        os.replace(self.blobs / item.etag, self.dest)
        shutil.rmtree(self.dir, ignore_errors=True)
        return self.dest

    def _discard(self) -> None:
        """A damaged download goes, and its staging directory with it; an installed model stays."""
        with contextlib.suppress(OSError):
            shutil.rmtree(self.dir)

    def _result(self, snap: Path, size: int) -> dict[str, Any]:
        return {**super()._result(snap, size), "model": self.known.name, "kind": "speaker",
                "license": self.known.license}

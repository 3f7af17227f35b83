"""A speaker-embedding model is a model like any other (issue 41): ``hasrctl pull NAME`` downloads a known one
through the daemon's /api/pull with the whisper models' checks and progress, into
``$XDG_DATA_HOME/hasr/speakers/NAME.onnx``; ``hasrctl models`` lists it (``/v1/models`` does not); ``hasrctl rm``
removes it. Against the local hub (tests/hubserver.py) and a real daemon; the file served is the tests' own ONNX
speaker model (tests/speakernet.py), since the real one cannot be fetched here.

The known models' table pins each file's sha256, and the test file's is not WeSpeaker's: the daemon of the tests
that download successfully is given one more known model (the tests' file, pinned to its own sha256) by a prelude
run in its process before the server starts. The real table entry is exercised as it is by the hub that serves
another file under WeSpeaker's repo and file names: refused before a byte moves."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from cliutil import REPO, hasrctl, show
from daemon import Hasrd
from hubserver import Hub
from speakernet import build

from hasrd import speakermodels

TEST_REPO, TEST_FILE, TEST_NAME = "Hasr/test-speakernet", "speakernet.onnx", "test-speakers"
WESPEAKER = speakermodels.KNOWN["wespeaker-resnet34"]
KiB = 1 << 10


def ballasted(path: Path) -> Path:
    """The tests' model with 1.2 MB of weights it never uses: a download long enough to be cut off midway at a
    boundary of huggingface_hub's reads (256 KiB), and still a model ONNX Runtime loads."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(build(path)))
    model.graph.initializer.append(numpy_helper.from_array(np.arange(300_000, dtype=np.float32), "ballast"))
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    """The tests' model as a known repo (with files a pull leaves out) and as WeSpeaker's file name."""
    h = Hub()
    ours = tmp_path_factory.mktemp("ours")
    ballasted(ours / TEST_FILE)
    (ours / "avg_model").write_bytes(os.urandom(50_000))  # the PyTorch checkpoint beside the export: not fetched
    (ours / "config.yaml").write_text("model: test\n")
    h.add(TEST_REPO, ours, lfs=(TEST_FILE, "avg_model"), extra={"README.md": b"# test\n"},
          tmp=tmp_path_factory.mktemp("extra"))
    theirs = tmp_path_factory.mktemp("theirs")
    build(theirs / WESPEAKER.file)
    h.add(WESPEAKER.repo, theirs, lfs=(WESPEAKER.file,))
    yield h
    h.close()


@pytest.fixture(autouse=True)
def healthy(hub: Hub) -> Iterator[None]:
    yield
    hub.corrupt.clear()
    hub.break_at.clear()
    hub.reset_counts()


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def start(tmp: str, hub: Hub) -> Hasrd:
    """A daemon (fake engine) with its own data directory and HF cache, HF_ENDPOINT at the local hub, and the
    tests' model among the known speaker models."""
    served = hub.repos[TEST_REPO].files[TEST_FILE]
    prelude = (f"from hasrd import speakermodels as s\n"
               f"s.KNOWN[{TEST_NAME!r}] = s.Known({TEST_NAME!r}, {TEST_REPO!r}, {TEST_FILE!r}, {served.sha256!r}, 0, "
               f"'the tests own', 'tests/speakernet.py')\n")
    env = {"HF_ENDPOINT": hub.endpoint, "HF_HUB_CACHE": os.path.join(tmp, "hub"), "HF_HUB_OFFLINE": "0",
           "XDG_DATA_HOME": os.path.join(tmp, "data"), "HF_HUB_DISABLE_TELEMETRY": "1",
           "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return Hasrd(os.path.join(tmp, "s"), env=env, prelude=prelude)


def cli(h: Hasrd, tmp: str, *args: str) -> subprocess.CompletedProcess[str]:
    """hasrctl with the daemon's socket and data directory (``models`` reads the speakers directory itself)."""
    env = {**os.environ, "HASR_SOCKET": h.sock, "XDG_DATA_HOME": os.path.join(tmp, "data"),
           "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return hasrctl(*args, env=env, timeout=120)


def speakers(tmp: str) -> Path:
    return Path(tmp) / "data" / "hasr" / "speakers"


def listing(tmp: str) -> list[str]:
    """Everything in the speakers directory, hidden work in progress included."""
    d = speakers(tmp)
    return sorted(p.name for p in d.iterdir()) if d.is_dir() else []


def test_a_known_speaker_model_is_pulled_checked_listed_beside_the_models_and_removed(short_tmp: str,
                                                                                     hub: Hub) -> None:
    h = start(short_tmp, hub)
    try:
        res = cli(h, short_tmp, "pull", TEST_NAME)
        assert res.returncode == 0, show(res)
        dest = speakers(short_tmp) / f"{TEST_NAME}.onnx"
        assert listing(short_tmp) == [dest.name]  # the one file, and no staging left behind
        assert sha256(dest) == hub.repos[TEST_REPO].files[TEST_FILE].sha256
        assert {f for (_r, f) in hub.served} == {TEST_FILE}  # not the checkpoint, the config or the README
        assert "verifying sha256" in res.stderr and f"downloading {TEST_FILE}" in res.stderr
        assert str(dest) in res.stdout and "the tests own" in res.stdout and "speaker" in res.stdout
        assert not (Path(short_tmp) / "hub").exists() or not any((Path(short_tmp) / "hub").iterdir())

        table = cli(h, short_tmp, "models")
        row = next(ln for ln in table.stdout.splitlines() if ln.startswith(TEST_NAME))
        assert row.split()[:2] == [TEST_NAME, "speaker"] and str(dest) in row, show(table)
        as_json = json.loads(cli(h, short_tmp, "models", "--json").stdout)
        mine = [m for m in as_json if m["kind"] == "speaker"]
        assert mine == [{"id": TEST_NAME, "object": "model", "kind": "speaker", "path": str(dest), "size_mb": 1,
                         "default": True}]
        assert TEST_NAME not in {m["id"] for m in h.get("/v1/models")["data"]}  # no transcription model
        with h.client() as c:
            assert c.get(f"/v1/models/{TEST_NAME}").status_code == 404

        hub.reset_counts()  # pulled again, by its repo id: checked against the pin, nothing transferred
        again = cli(h, short_tmp, "pull", TEST_REPO)
        assert again.returncode == 0 and f"use it as {TEST_NAME}" in again.stdout, show(again)
        assert sum(hub.served.values()) == 0 and listing(short_tmp) == [dest.name]

        gone = cli(h, short_tmp, "rm", TEST_NAME)
        assert gone.returncode == 0 and f"removed {TEST_NAME}" in gone.stdout and str(dest) in gone.stdout, show(gone)
        assert listing(short_tmp) == []
        again = cli(h, short_tmp, "rm", TEST_NAME)
        assert again.returncode == 2 and "model_not_found" in again.stderr, show(again)
    finally:
        h.stop()


def test_a_damaged_download_of_a_speaker_model_is_refused_and_leaves_nothing(short_tmp: str, hub: Hub) -> None:
    hub.corrupt.add((TEST_REPO, TEST_FILE))
    h = start(short_tmp, hub)
    try:
        res = cli(h, short_tmp, "pull", TEST_NAME)
        assert res.returncode == 1, show(res)
        line = res.stderr.strip().splitlines()[-1]
        assert "checksum_mismatch" in line and TEST_FILE in line and "nothing was installed" in line
        assert listing(short_tmp) == []  # neither the model nor its staging directory

        hub.corrupt.clear()  # the hub heals: the next pull installs it
        assert cli(h, short_tmp, "pull", TEST_NAME).returncode == 0
        assert listing(short_tmp) == [f"{TEST_NAME}.onnx"]
    finally:
        h.stop()


def test_a_hub_that_lists_another_file_than_the_pinned_one_is_refused_before_any_download(
        short_tmp: str, hub: Hub) -> None:
    """The real table entry: the hub serves another file under WeSpeaker's repo and file name, with a sha256 of
    its own that the hub's own check would accept."""
    h = start(short_tmp, hub)
    try:
        res = cli(h, short_tmp, "pull", "wespeaker-resnet34")
        assert res.returncode == 1, show(res)
        line = res.stderr.strip().splitlines()[-1]
        assert "checksum_mismatch" in line and WESPEAKER.sha256 in line and "nothing was downloaded" in line
        assert "hasrctl pull /path/to/model.onnx" in line
        assert sum(hub.served.values()) == 0 and listing(short_tmp) == []
    finally:
        h.stop()


def test_a_speaker_pull_cut_off_midway_keeps_what_arrived_and_the_next_pull_asks_for_the_rest(
        short_tmp: str, hub: Hub) -> None:
    key = (TEST_REPO, TEST_FILE)
    size = hub.repos[TEST_REPO].files[TEST_FILE].size
    cut = 512 * KiB
    assert size > cut + 256 * KiB
    hub.break_at[key] = cut
    h = start(short_tmp, hub)
    try:
        res = cli(h, short_tmp, "pull", TEST_NAME)
        assert res.returncode == 1 and "download_failed" in res.stderr, show(res)
        sha = hub.repos[TEST_REPO].files[TEST_FILE].sha256
        part = speakers(short_tmp) / f".hasr-pull-{TEST_NAME}" / f"{sha}.incomplete"
        assert part.stat().st_size == cut and listing(short_tmp) == [f".hasr-pull-{TEST_NAME}"]

        del hub.break_at[key]
        hub.reset_counts()
        res = cli(h, short_tmp, "pull", TEST_NAME)
        assert res.returncode == 0 and "resuming at 512.0 KB" in res.stderr, show(res)
        assert hub.served[key] == size - cut  # not one byte twice
        assert [r for (_repo, f, r) in hub.ranges if f == TEST_FILE] == [f"bytes={cut}-"]
        assert listing(short_tmp) == [f"{TEST_NAME}.onnx"]
    finally:
        h.stop()


def test_rm_refuses_a_name_that_a_transcription_model_and_a_speaker_model_share_until_given_the_path(
        short_tmp: str, hub: Hub) -> None:
    data = Path(short_tmp) / "data" / "hasr"
    (data / "models" / "twin").mkdir(parents=True)
    (data / "models" / "twin" / "model.bin").write_bytes(b"\0" * 1000)
    build(data / "speakers" / "twin.onnx")
    h = start(short_tmp, hub)
    try:
        res = cli(h, short_tmp, "rm", "twin")
        assert res.returncode == 2 and "bad_request" in res.stderr and "by its path" in res.stderr, show(res)
        assert (data / "models" / "twin" / "model.bin").is_file() and (data / "speakers" / "twin.onnx").is_file()
        res = cli(h, short_tmp, "rm", str(data / "speakers" / "twin.onnx"))
        assert res.returncode == 0 and not (data / "speakers" / "twin.onnx").exists(), show(res)
        res = cli(h, short_tmp, "rm", "twin")  # now only the transcription model answers to it
        assert res.returncode == 0 and not (data / "models" / "twin").exists(), show(res)
    finally:
        h.stop()

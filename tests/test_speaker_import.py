"""``hasrctl pull /path/to/model.onnx [--name NAME]``: a speaker-embedding model imported offline into
``$XDG_DATA_HOME/hasr/speakers/NAME.onnx`` after ONNX Runtime loaded it and its interface was checked; and which
installed speaker model a request gets (hasrd.speakermodels.resolve), or the one line that says how to get one.
hasrctl as a subprocess for its exit codes and one-line errors; the models are the tests' own (tests/speakernet.py).
"""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
from pathlib import Path

import pytest
from cliutil import cli_env, hasrctl, one_line, show
from speakernet import build

from hasrctl import speakerimport
from hasrctl.client import UsageError
from hasrctl.pullview import PullView
from hasrd import errors, speakermodels


def run(tmp: str, *args: str, cwd: str | None = None) -> subprocess.CompletedProcess[str]:
    return hasrctl(*args, env=cli_env(tmp), cwd=cwd)


def speakers(tmp: str) -> Path:
    return Path(tmp) / "data" / "hasr" / "speakers"


def listing(tmp: str) -> list[str]:
    d = speakers(tmp)
    return sorted(p.name for p in d.iterdir()) if d.is_dir() else []


def test_an_onnx_speaker_model_is_imported_under_its_name_and_that_name_is_refused_again(short_tmp: str) -> None:
    src = build(Path(short_tmp) / "src" / "my-voices.onnx")
    res = run(short_tmp, "pull", str(src))
    assert res.returncode == 0, show(res)
    dest = speakers(short_tmp) / "my-voices.onnx"
    assert dest.read_bytes() == src.read_bytes() and listing(short_tmp) == ["my-voices.onnx"]
    assert str(dest) in res.stdout and "40-number embeddings" in res.stdout
    assert "requests for speakers use it" in res.stdout
    assert "copying my-voices.onnx" in res.stderr  # a pull's progress lines (no terminal: plain)

    again = run(short_tmp, "pull", str(src))
    line = one_line(again.stderr)
    assert again.returncode == 2 and "exists" in line and "hasrctl rm my-voices" in line, show(again)

    # a bare file name here, with --name: a second model, and the first stays the default
    res = run(short_tmp, "pull", "my-voices.onnx", "--name", "other", cwd=str(src.parent))
    assert res.returncode == 0 and "speaker_model other (the default is my-voices)" in res.stdout, show(res)
    assert listing(short_tmp) == ["my-voices.onnx", "other.onnx"]


@pytest.mark.parametrize("case", ["text", "input_40", "per_frame", "missing", "directory", "hidden_name", "slash",
                                  "reserved", "known_name", "unnamed"])
def test_bad_input_is_one_line_exit_2_and_installs_nothing(short_tmp: str, case: str) -> None:
    tmp = Path(short_tmp)
    good = build(tmp / "good.onnx")
    args: list[str]
    if case == "text":  # a text file renamed .onnx
        (tmp / "notes.onnx").write_text("not a model\n")
        args, words = [str(tmp / "notes.onnx")], ("it is not an ONNX model",)
    elif case == "input_40":  # a valid ONNX model whose input is 40 bands, not 80
        args, words = [str(build(tmp / "forty.onnx", feat_dim=40))], ("40 features", "80")
    elif case == "per_frame":  # a vector per frame, not one per window
        args, words = [str(build(tmp / "frames.onnx", per_frame=True))], ("one vector", "per window")
    elif case == "missing":
        args, words = [str(tmp / "nowhere.onnx")], ("no such file",)
    elif case == "directory":
        (tmp / "dir.onnx").mkdir()
        args, words = [str(tmp / "dir.onnx")], ("not a file",)
    elif case == "hidden_name":
        args, words = [str(good), "--name", ".hidden"], ("not starting with '.'",)
    elif case == "slash":
        args, words = [str(good), "--name", "a/b"], ("no '/'",)
    elif case == "reserved":
        args, words = [str(good), "--name", "base"], ("transcription model", "--name")
    elif case == "known_name":  # a known model's name means that model's file, and this is another
        pinned = speakermodels.KNOWN["wespeaker-resnet34"].sha256[:12]
        args, words = [str(good), "--name", "wespeaker-resnet34"], (pinned, "another --name")
    else:  # ".onnx" alone has no name to give
        (tmp / ".onnx").write_bytes(good.read_bytes())
        args, words = [str(tmp / ".onnx")], ("give one with --name",)
    res = run(short_tmp, "pull", *args)
    line = one_line(res.stderr)
    assert res.returncode == 2 and all(w in line for w in words), (case, show(res))
    assert listing(short_tmp) == [], case  # nothing installed, no staging file either


def test_a_file_that_is_a_known_models_file_takes_that_models_name(short_tmp: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """voxceleb_resnet34_LM.onnx carried over from another machine is wespeaker-resnet34 (its sha256 says so);
    in-process, with the tests' file pinned in the table as the real one is."""
    src = build(Path(short_tmp) / "voxceleb_resnet34_LM.onnx")
    pinned = speakermodels.Known("wespeaker-resnet34", "Wespeaker/wespeaker-voxceleb-resnet34-LM",
                                 src.name, hashlib.sha256(src.read_bytes()).hexdigest(), 0, "CC BY 4.0", "test")
    monkeypatch.setitem(speakermodels.KNOWN, "wespeaker-resnet34", pinned)
    monkeypatch.setenv("XDG_DATA_HOME", str(Path(short_tmp) / "data"))
    done = speakerimport.import_file(str(src), None, PullView(io.StringIO(), False))
    assert done.dest == speakers(short_tmp) / "wespeaker-resnet34.onnx" and done.dim == 40
    assert speakermodels.resolve() == done.dest


def test_an_import_killed_outright_leaves_a_hidden_file_that_the_next_import_removes(short_tmp: str) -> None:
    d = speakers(short_tmp)
    d.mkdir(parents=True)
    (d / ".hasr-import-deadbeef.onnx.partial").write_bytes(b"\0" * 4096)
    res = run(short_tmp, "pull", str(build(Path(short_tmp) / "v.onnx")))
    assert res.returncode == 0 and ".hasr-import-deadbeef.onnx.partial" in res.stderr, show(res)
    assert listing(short_tmp) == ["v.onnx"]


def test_resolve_says_in_one_line_how_to_get_a_model_and_prefers_wespeaker(short_tmp: str,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(Path(short_tmp) / "data"))
    with pytest.raises(errors.SpeakerModelMissing) as e:
        speakermodels.resolve()
    err = e.value
    assert isinstance(err, errors.NotFound) and err.status == 404 and err.code == "speaker_model_missing"
    assert "\n" not in err.message and err.param == "speaker_model"
    assert "`hasrctl pull wespeaker-resnet34` fetches one (25 MB)" in err.message
    assert "`hasrctl pull /path/to/model.onnx` imports one" in err.message

    d = speakers(short_tmp)
    d.mkdir(parents=True)
    for name in ("alpha", "wespeaker-resnet34", "zeta"):
        build(d / f"{name}.onnx")
    (d / ".hasr-import-1234.onnx.partial").write_bytes(b"x")  # work in progress: never a model
    (d / "README.txt").write_text("not a model")
    assert [m.name for m in speakermodels.installed()] == ["alpha", "wespeaker-resnet34", "zeta"]
    assert speakermodels.resolve() == d / "wespeaker-resnet34.onnx"
    assert speakermodels.resolve("zeta") == d / "zeta.onnx"
    assert speakermodels.resolve(str(d / "alpha.onnx")) == d / "alpha.onnx"  # a trusted caller's file
    with pytest.raises(errors.Forbidden):
        speakermodels.resolve(str(d / "alpha.onnx"), trusted=False)
    with pytest.raises(errors.SpeakerModelMissing) as e:
        speakermodels.resolve("nosuch")
    assert "installed: alpha, wespeaker-resnet34, zeta" in e.value.message and "\n" not in e.value.message
    os.unlink(d / "wespeaker-resnet34.onnx")
    assert speakermodels.resolve() == d / "alpha.onnx"  # the first by name when wespeaker is not there
    with pytest.raises(errors.SpeakerModelMissing) as e:
        speakermodels.resolve("wespeaker-resnet34")
    assert "`hasrctl pull wespeaker-resnet34` fetches it" in e.value.message


def test_a_name_too_long_and_a_speakers_directory_that_cannot_be_made_are_usage_errors(
        short_tmp: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(Path(short_tmp) / "data"))
    src = build(Path(short_tmp) / "x.onnx")
    with pytest.raises(UsageError, match="at most 250 bytes"):
        speakerimport.import_file(str(src), "x" * 300, PullView(io.StringIO(), False))
    assert listing(short_tmp) == []
    (Path(short_tmp) / "data" / "hasr").mkdir(parents=True)
    (Path(short_tmp) / "data" / "hasr" / "speakers").write_text("a file where the directory goes")
    res = run(short_tmp, "pull", str(src))
    line = one_line(res.stderr)
    assert res.returncode == 2 and "cannot write the speakers directory" in line and "XDG_DATA_HOME" in line, show(res)

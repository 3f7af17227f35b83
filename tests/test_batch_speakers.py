"""``hasrctl batch --speakers`` on a real local Ray with real faster-whisper, espeak-ng voices and the tests' speaker
model (speakernet.py) installed where the daemon finds one: one run in channels mode (a stereo call named by
--speaker-names, and a mono file that fails alone), then a rerun in the same OUTDIR in auto mode (a two-voice mono
conversation, and the call again: other speakers are another transcription, never skipped as done)."""

from __future__ import annotations

import json
import os
import wave
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cliutil import cli_env, hasrctl, one_line, show
from conftest import wait_until
from speakernet import build
from test_batch import _env, _ray_log, _ray_processes, _rows
from voices import LINES, conversation, speak, stereo

pytest.importorskip("ray", reason="the batch extra: pip install '.[batch]'")

SR = 16000


def _wav(path: Path, pcm: np.ndarray) -> Path:
    """16-bit PCM WAV of float samples (mono, or [frames, channels])."""
    frames = pcm if pcm.ndim == 2 else pcm[:, None]
    with wave.open(str(path), "wb") as w:
        w.setnchannels(frames.shape[1])
        w.setsampwidth(2)
        w.setframerate(SR)
        w.writeframes((np.clip(frames, -1.0, 1.0) * 32000).astype("<i2").tobytes())
    return path


@pytest.fixture(scope="module")
def calls(module_tmp: str) -> Path:
    """conv.wav (mono: voices m, f, m, f), call.wav (stereo: m on channel 1, f on channel 2, 10 % bleed) and
    mono.wav (one voice)."""
    root = Path(module_tmp) / "calls"
    root.mkdir()
    mix, _ref, _texts = conversation([("m", LINES[0]), ("f", LINES[1]), ("m", LINES[2]), ("f", LINES[3])])
    _wav(root / "conv.wav", mix)
    call, _said = stereo([(0, LINES[0], 0.5), (1, LINES[2], 5.5)], bleed=0.1)
    _wav(root / "call.wav", call)
    _wav(root / "mono.wav", speak(LINES[4], "m"))
    return root


@pytest.fixture(scope="module")
def env(module_tmp: str) -> dict[str, str]:
    """The batch environment with the tests' speaker model installed ($XDG_DATA_HOME/hasr/speakers/test.onnx)."""
    e = _env(os.path.join(module_tmp, "e"))
    build(Path(e["XDG_DATA_HOME"]) / "hasr" / "speakers" / "test.onnx")
    return e


def _batch(calls: Path, out: Path, env: dict[str, str], files: list[str], *args: str) -> Any:
    res = hasrctl("batch", *[str(calls / f) for f in files], "-o", str(out), "-f", "txt,verbose_json",
                  "--workers", "1", "--no-progress", *args, env=env, timeout=600)
    assert wait_until(lambda: not _ray_processes(env), 30), "Ray's processes outlived the run"
    return res


@pytest.fixture(scope="module")
def channels_run(module_tmp: str, calls: Path, env: dict[str, str]) -> tuple[Any, Path]:
    out = Path(module_tmp) / "out"
    return _batch(calls, out, env, ["call.wav", "mono.wav"], "--speakers", "channels",
                  "--speaker-names", "Agent,Caller"), out


@pytest.fixture(scope="module")
def voices_run(channels_run: tuple[Any, Path], calls: Path, env: dict[str, str]) -> tuple[Any, Path]:
    _first, out = channels_run
    return _batch(calls, out, env, ["conv.wav", "call.wav"], "--speakers", "auto"), out


def _turns(out: Path, name: str) -> list[tuple[str, str]]:
    """(speaker, text) of each line of OUTDIR/NAME.txt."""
    lines = (out / f"{name}.txt").read_text().splitlines()
    assert lines and all(": " in ln for ln in lines), lines
    return [(who, text.lower()) for who, text in (ln.split(": ", 1) for ln in lines)]


def _by_name(out: Path) -> dict[str, dict[str, Any]]:
    return {Path(r["path"]).name: r for r in _rows(out)}


def test_channels_name_each_channels_words_and_a_mono_file_fails_alone_with_exit_1(
        channels_run: tuple[Any, Path]) -> None:
    res, out = channels_run
    assert res.returncode == 1, show(res) + _ray_log(out)
    rows = _by_name(out)
    mono = rows["mono.wav"]
    assert mono["status"] == "failed" and mono["error"]["code"] == "invalid_speakers", mono
    assert "mono.wav has one channel: --speakers channels needs a recording with one speaker per channel" in (
        mono["error"]["message"])
    assert "1 of 2 file(s) failed" in res.stderr and "mono.wav: " in res.stderr
    call = rows["call.wav"]
    assert call["status"] == "ok", call
    assert call["options"]["options"]["speakers"] == "channels"
    turns = _turns(out, "call")
    assert {who for who, _ in turns} == {"Agent", "Caller"}, turns
    agent = " ".join(t for who, t in turns if who == "Agent")
    caller = " ".join(t for who, t in turns if who == "Caller")
    assert "report" in agent and "report" not in caller, turns  # channel 1's words, never twice by the bleed
    assert "plants" in caller and "plants" not in agent, turns
    hasr = json.loads((out / "call.json").read_text())["hasr"]
    assert hasr["speakers"] == ["Agent", "Caller"] and hasr["speaker_mode"] == "channels"


def test_auto_tells_two_voices_apart_and_other_speakers_transcribe_the_call_again(
        voices_run: tuple[Any, Path], env: dict[str, str]) -> None:
    res, out = voices_run
    assert res.returncode == 0, show(res) + _ray_log(out)
    assert "up to date" not in res.stderr, res.stderr  # the call was done with channels: not this transcription
    rows = _by_name(out)
    conv = rows["conv.wav"]
    assert conv["status"] == "ok", conv
    model = Path(env["XDG_DATA_HOME"]) / "hasr" / "speakers" / "test.onnx"
    assert conv["options"]["options"]["speakers"] == "auto"
    assert conv["options"]["options"]["speaker_model"] == str(model)  # resolved once by the driver
    turns = _turns(out, "conv")
    assert [who for who, _ in turns][:1] == ["A"] and {who for who, _ in turns} == {"A", "B"}, turns
    said = {who: " ".join(t for w, t in turns if w == who) for who in ("A", "B")}
    assert "report" in said["A"] and "plants" in said["A"], turns  # the male voice's two turns
    assert "thursday" in said["B"] and "airport" in said["B"], turns
    assert json.loads((out / "conv.json").read_text())["hasr"]["speakers"] == ["A", "B"]
    call = rows["call.wav"]
    assert call["status"] == "ok" and call["options"]["options"]["speakers"] == "auto", call
    assert {who for who, _ in _turns(out, "call")} == {"A", "B"}
    assert rows["mono.wav"]["status"] == "failed"  # not an input of this run: its row stays as it was


def test_auto_without_a_speaker_model_is_one_line_and_exit_2_before_ray(short_tmp: str, calls: Path) -> None:
    out = Path(short_tmp) / "o"
    res = hasrctl("batch", str(calls / "conv.wav"), "-o", str(out), "--speakers", "auto",
                  env=cli_env(short_tmp, RAY_TMPDIR=os.path.join(short_tmp, "r")))
    assert res.returncode == 2, show(res)
    line = one_line(res.stderr)
    assert "--speakers auto: no speaker model is installed" in line and "hasrctl pull wespeaker-resnet34" in line
    assert not out.exists() and not os.path.exists(os.path.join(short_tmp, "r"))  # Ray never started

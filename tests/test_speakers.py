"""Who said what, end to end (issue 41): a real hasrd with real faster-whisper and the tests' speaker model
(speakernet.py) installed where `hasrctl pull` puts one, on espeak-ng conversations (voices.py): diarization of mixed
recordings, one speaker per channel, every surface (/transcribe and its stream, the OpenAI SDK's diarized_json,
text, SRT and WebVTT), and the bad input that must be a clear 4xx leaving no worker busy."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest
import speakernet
import voices

from speech import model_dir

from tests.daemon import Hasrd

L = voices.LINES


def write(path: Path, pcm: np.ndarray) -> str:
    """float PCM ([frames] or [frames, channels]) as a 16-bit WAV."""
    chans = 1 if pcm.ndim == 1 else pcm.shape[1]
    raw = path.with_suffix(".raw")
    (np.clip(pcm, -1, 1) * 32767).astype("<i2").tofile(raw)
    subprocess.run(["sox", "-t", "raw", "-r", "16000", "-e", "signed", "-b", "16", "-c", str(chans), str(raw),
                    str(path)], check=True)
    raw.unlink()
    return str(path)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("data")  # the broken models sort after testnet: the default is the first
    speakernet.build(home / "hasr" / "speakers" / "testnet.onnx")
    (home / "hasr" / "speakers" / "x-garbage.onnx").write_text("not a model\n")
    speakernet.build(home / "hasr" / "speakers" / "x-perframe.onnx", per_frame=True)
    return home


@pytest.fixture(scope="module")
def hasrd(data: Path, module_tmp: str) -> Iterator[Hasrd]:
    # pieces of at most 12 s (HASR_WHISPER_SEGMENT_SEC): a 35-second conversation is decoded in several, and its
    # speakers must keep their labels across them
    h = Hasrd(os.path.join(module_tmp, "s"), env={"HASR_ENGINE": "whisper", "HASR_FW_MODEL": model_dir(),
                                                   "HASR_FW_DEVICE": "cpu", "XDG_DATA_HOME": str(data),
                                                   "HASR_WHISPER_SEGMENT_SEC": "12"})
    yield h
    h.stop()


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[voices.Turn]]:
    pcm, ref, _ = voices.conversation([("m", L[0]), ("f", L[1]), ("m", L[2]), ("f", L[3]), ("m", L[4])])
    return write(tmp_path_factory.mktemp("two") / "two.wav", pcm), ref


def transcribe(h: Hasrd, path: str, **options: Any) -> httpx.Response:
    with h.client(300) as c:
        return c.post("/transcribe", json={"audio_path": path, "language": "en", "options": options})


def voice_of(start: float, end: float, ref: list[voices.Turn]) -> str:
    """The reference voice that overlaps [start, end) most."""
    return max(ref, key=lambda t: min(end, t[1]) - max(start, t[0]))[2]


def mapping(segments: list[dict[str, Any]], ref: list[voices.Turn]) -> dict[str, str]:
    """Label -> reference voice, asserting that each label is one voice and each voice one label."""
    seen: dict[str, str] = {}
    for s in segments:
        v = voice_of(s["start_s"], s["end_s"], ref)
        assert seen.setdefault(s["speaker"], v) == v, (s, seen)
    assert len(set(seen.values())) == len(seen), seen
    return seen


def test_a_two_voice_conversation_is_labelled_with_the_names_given_in_order_of_first_words(
        hasrd: Hasrd, two: tuple[str, list[voices.Turn]]) -> None:
    path, ref = two
    r = transcribe(hasrd, path, speakers="auto", speaker_names=["Ann", "Bob"], speaker_model="testnet")
    assert r.status_code == 200, r.text
    res = r.json()
    assert res["speakers"] == ["Ann", "Bob"] and res["speaker_mode"] == "diarized"
    assert mapping(res["per_sentence"], ref) == {"Ann": "m", "Bob": "f"}
    assert len(res["per_sentence"]) >= 5
    assert "words" not in res["per_sentence"][0]  # word times were needed, not asked for: not sent
    assert res["timings"]["diarize_s"] > 0


def test_three_voices_are_counted_and_each_sentence_split_where_the_voice_changes(
        hasrd: Hasrd, tmp_path: Path) -> None:
    # m and h speak back to back with only 0.15 s between them: whisper hears one sentence, hasr splits it
    pcm, ref, _ = voices.conversation([("h", L[6]), ("m", L[7]), ("f", L[8]), ("h", L[9]), ("f", L[10]),
                                       ("m", L[11])], gap=0.15)
    r = transcribe(hasrd, write(tmp_path / "three.wav", pcm), speakers="auto", word_timestamps=True)
    assert r.status_code == 200, r.text
    res = r.json()
    assert res["speakers"] == ["A", "B", "C"]
    assert mapping(res["per_sentence"], ref) == {"A": "h", "B": "m", "C": "f"}
    hyp = [(w["start"], w["end"], s["speaker"]) for s in res["per_sentence"] for w in s["words"]]
    assert voices.der(ref, hyp)["der"] <= 0.10


def test_a_number_of_speakers_asked_is_honoured_and_more_than_the_audio_holds_is_a_400(
        hasrd: Hasrd, two: tuple[str, list[voices.Turn]]) -> None:
    path, ref = two
    ok = transcribe(hasrd, path, speakers=2)
    assert ok.status_code == 200 and ok.json()["speakers"] == ["A", "B"]
    too = transcribe(hasrd, path, speakers=3)
    assert too.status_code == 400, too.text
    err = too.json()["error"]
    assert err["code"] == "too_many_speakers" and "2 voices" in err["message"], err
    assert not any(w["busy"] for w in hasrd.get("/api/ps")["workers"])  # nothing left running on its worker
    assert transcribe(hasrd, path, speakers="auto").status_code == 200  # the worker is free again


def test_a_stereo_call_gives_every_sentence_once_on_the_channel_that_carries_it(
        hasrd: Hasrd, tmp_path: Path) -> None:
    # channel 0 and 1 alternate, then talk over each other for a second; each leaks into the other at 10 %
    pcm, ref = voices.stereo([(0, L[0], 0.5), (1, L[1], 5.8), (0, L[2], 10.5), (1, L[3], 13.0)], bleed=0.1)
    r = transcribe(hasrd, write(tmp_path / "call.wav", pcm), speakers="channels",
                   speaker_names=["Agent", "Caller"])
    assert r.status_code == 200, r.text
    res = r.json()
    assert res["speakers"] == ["Agent", "Caller"] and res["speaker_mode"] == "channels"
    said = [(s["speaker"], s["text"].lower()) for s in res["per_sentence"]]
    for _start, _end, chan, text in ref:
        key = " ".join(text.lower().split()[1:4])  # three words of each line, on its own channel only
        owners = {who for who, t in said if key in t}
        assert owners == {["Agent", "Caller"][chan]}, (key, said)
    assert [s["start_s"] for s in res["per_sentence"]] == sorted(s["start_s"] for s in res["per_sentence"])
    assert len(said) == len(set(said))


def test_channels_of_a_mono_file_is_a_400_that_says_what_to_ask_instead(
        hasrd: Hasrd, two: tuple[str, list[voices.Turn]]) -> None:
    r = transcribe(hasrd, two[0], speakers="channels")
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["code"] == "invalid_speakers" and "one channel" in err["message"] and "auto" in err["message"]


@pytest.mark.parametrize(("model", "status", "code", "words"), [
    ("nosuch", 404, "speaker_model_missing", "hasrctl pull"),
    ("x-garbage", 400, "invalid_speaker_model", "not an ONNX model"),
    ("x-perframe", 400, "invalid_speaker_model", "one vector"),
])
def test_a_missing_or_broken_speaker_model_is_a_clear_4xx_and_the_worker_stays_usable(
        hasrd: Hasrd, two: tuple[str, list[voices.Turn]], model: str, status: int, code: str, words: str) -> None:
    r = transcribe(hasrd, two[0], speakers="auto", speaker_model=model)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["code"] == code and words in err["message"] and "\n" not in err["message"], err
    assert transcribe(hasrd, two[0], speakers="auto", speaker_model="testnet").status_code == 200


def test_the_ndjson_stream_carries_each_sentences_speaker(
        hasrd: Hasrd, two: tuple[str, list[voices.Turn]]) -> None:
    with hasrd.client(300) as c, c.stream("POST", "/transcribe", headers={"Accept": "application/x-ndjson"},
                                          json={"audio_path": two[0], "options": {"speakers": "auto"}}) as r:
        events = [json.loads(line) for line in r.iter_lines() if line]
    sentences = [e for e in events if e["event"] == "sentence"]
    assert sentences and all(e["speaker"] in ("A", "B") for e in sentences)
    done = events[-1]["result"]
    assert [e["speaker"] for e in sentences] == [s["speaker"] for s in done["per_sentence"]]
    assert any(e["event"] == "progress" and e["phase"] == "finding_speakers" for e in events)


def test_the_openai_sdk_reads_diarized_json_and_text_srt_vtt_name_the_speakers(
        hasrd: Hasrd, two: tuple[str, list[voices.Turn]]) -> None:
    http = httpx.Client(transport=httpx.HTTPTransport(uds=hasrd.sock), timeout=300)
    sdk = openai.OpenAI(api_key="unused", base_url="http://hasr/v1", http_client=http, max_retries=0)
    path, ref = two
    with open(path, "rb") as f:
        got = sdk.audio.transcriptions.create(model="hasr", file=f, response_format="diarized_json",
                                              known_speaker_names=["Ann", "Bob"])
    assert isinstance(got, openai.types.audio.TranscriptionDiarized)
    assert {s.speaker for s in got.segments} == {"Ann", "Bob"}
    assert all(s.type == "transcript.text.segment" for s in got.segments)
    assert voice_of(got.segments[0].start, got.segments[0].end, ref) == "m" and got.segments[0].speaker == "Ann"
    texts = {}
    for fmt in ("text", "srt", "vtt"):
        with open(path, "rb") as f:
            texts[fmt] = str(sdk.audio.transcriptions.create(model="hasr", file=f, response_format=fmt,  # type: ignore
                                                             extra_body={"speakers": "auto"}))
    lines = texts["text"].strip().splitlines()
    assert len(lines) == 5 and [ln[:3] for ln in lines] == ["A: ", "B: ", "A: ", "B: ", "A: "], lines
    assert "\nA: " in texts["srt"] and "\nB: " in texts["srt"]
    assert "<v A>" in texts["vtt"] and "<v B>" in texts["vtt"]


def test_hasrctl_transcribe_writes_speaker_turns_and_subtitles_and_refuses_bad_speakers_in_one_line(
        hasrd: Hasrd, two: tuple[str, list[voices.Turn]], tmp_path: Path) -> None:
    from cliutil import cli_env, hasrctl

    env = cli_env(str(tmp_path))
    sock = ["--socket", hasrd.sock]
    out = tmp_path / "out"
    done = hasrctl("transcribe", *sock, "--speakers", "auto", "--speaker-names", "Ann, Bob", "-f", "txt,srt,vtt",
                   "-o", str(out) + "/", two[0], env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    txt = (out / "two.txt").read_text().splitlines()
    assert [ln.split(": ")[0] for ln in txt] == ["Ann", "Bob", "Ann", "Bob", "Ann"], txt
    assert "\nAnn: " in (out / "two.srt").read_text() and "<v Bob>" in (out / "two.vtt").read_text()
    bad = hasrctl("transcribe", *sock, "--speakers", "0", two[0], env=env)
    assert bad.returncode == 2 and "a number of speakers from 1 to 16" in bad.stderr
    mono = hasrctl("transcribe", *sock, "--speakers", "channels", two[0], env=env, timeout=120)
    assert mono.returncode == 2 and "one channel" in mono.stderr and len(mono.stderr.strip().splitlines()) == 1, \
        mono.stderr

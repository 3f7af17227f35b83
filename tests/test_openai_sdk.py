"""The OpenAI surface through the official ``openai`` SDK over the daemon's Unix socket (issue 12): every field
and endpoint a client of OpenAI's transcription API relies on, with the fake engine and with real faster-whisper."""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from speech import DATA

from tests.daemon import Hasrd, whisper_hasrd, write_wav

ENGLISH = "Is it three o'clock already? Remember the meeting! See you at four?"  # v2c ends sentences at ?!;, not .


def sdk(h: Hasrd) -> openai.OpenAI:
    http = httpx.Client(transport=httpx.HTTPTransport(uds=h.sock), timeout=120)
    return openai.OpenAI(api_key="unused", base_url="http://hasr/v1", http_client=http, max_retries=0)


@pytest.fixture(scope="module")
def fake() -> Iterator[Hasrd]:
    d = tempfile.mkdtemp(prefix="h", dir="/tmp")
    h = Hasrd(os.path.join(d, "s"), env={"HASR_FAKE_SCRIPT": ENGLISH})
    yield h
    h.stop()


@pytest.fixture(scope="module")
def whisper(module_tmp: str) -> Iterator[Hasrd]:
    h = whisper_hasrd(os.path.join(module_tmp, "w"))
    yield h
    h.stop()


@pytest.fixture(scope="module")
def wav() -> str:
    return write_wav(os.path.join(tempfile.mkdtemp(prefix="h", dir="/tmp"), "a.wav"), 6.0)


def test_stream_deltas_concatenate_exactly_to_the_done_text(fake: Hasrd, wav: str) -> None:
    with open(wav, "rb") as f:
        events = list(sdk(fake).audio.transcriptions.create(model="hasr", file=f, stream=True))
    kinds = [e.type for e in events]
    assert set(kinds) == {"transcript.text.delta", "transcript.text.done"} and kinds[-1] == "transcript.text.done"
    deltas = [e.delta for e in events if e.type == "transcript.text.delta"]
    done = events[-1]
    # "...already? Remember", not "already?Remember"
    assert len(deltas) == 3 and "".join(deltas) == done.text == ENGLISH
    assert done.usage is not None and done.usage.type == "duration" and done.usage.seconds == 6


def test_whisper_sentences_stream_as_deltas_with_the_spaces_between_them(whisper: Hasrd) -> None:
    import wave

    import numpy as np
    from speech import load

    gap = np.zeros(16000 * 2, np.float32)
    pcm = np.concatenate([load("en_espeak_park"), gap, load("en_quick_brown_fox"), gap] * 4)  # > 30 s: 2+ clips
    path = os.path.join(tempfile.mkdtemp(prefix="h", dir="/tmp"), "two.wav")
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes((np.clip(pcm, -1, 1) * 32767).astype("<i2").tobytes())
    with open(path, "rb") as f:
        events = list(sdk(whisper).audio.transcriptions.create(model="whisper-1", file=f, stream=True, language="en"))
    deltas = [e.delta for e in events if e.type == "transcript.text.delta"]
    done = events[-1]
    assert len(deltas) >= 2 and "".join(deltas) == done.text  # faster-whisper's sentences come stripped
    assert all(d.startswith(" ") for d in deltas[1:]) and "  " not in done.text
    assert "park" in done.text.lower() and "fox" in done.text.lower()


def test_hasr_events_are_sent_to_clients_that_ask_for_them(fake: Hasrd, wav: str) -> None:
    with open(wav, "rb") as f:
        events = list(sdk(fake).audio.transcriptions.create(model="hasr", file=f, stream=True,
                                                            extra_body={"hasr_events": "true"}))
    # asked for, hasr's events are there (the SDK passes them on as it parses them); without, none are sent
    assert any(getattr(e, "type", "") == "hasr.progress" for e in events)


def test_json_and_verbose_json_carry_usage(fake: Hasrd, wav: str) -> None:
    client = sdk(fake)
    with open(wav, "rb") as f:
        tr = client.audio.transcriptions.create(model="whisper-1", file=f)
    assert tr.text == ENGLISH and tr.usage is not None and tr.usage.type == "duration" and tr.usage.seconds == 6
    with open(wav, "rb") as f:
        v = client.audio.transcriptions.create(model="whisper-1", file=f, response_format="verbose_json")
    assert v.usage is not None and v.usage.seconds == 6 and v.duration == 6.0


def test_verbose_json_segments_have_every_openai_field_from_faster_whisper(whisper: Hasrd) -> None:
    with open(DATA / "en_espeak_park.flac", "rb") as f:
        v = sdk(whisper).audio.transcriptions.create(model="whisper-1", file=f, response_format="verbose_json",
                                                     language="en", timestamp_granularities=["word", "segment"])
    assert v.language == "english" and v.task == "transcribe"  # OpenAI's spelling, not "English"
    assert v.segments and v.words
    for s in v.segments:
        assert isinstance(s.seek, int) and s.tokens and all(isinstance(t, int) for t in s.tokens)
        assert s.temperature == 0.0 and s.avg_logprob < 0 and s.compression_ratio > 0 and 0 <= s.no_speech_prob <= 1
        assert s.start <= s.end
    assert "weather" in " ".join(w.word.lower() for w in v.words)


def test_include_logprobs_gives_word_logprobs(whisper: Hasrd) -> None:
    with open(DATA / "en_quick_brown_fox.flac", "rb") as f:
        tr = sdk(whisper).audio.transcriptions.create(model="whisper-1", file=f, language="en",
                                                      include=["logprobs"])
    assert tr.logprobs and all(lp.logprob is not None and lp.logprob <= 0 for lp in tr.logprobs)
    assert "".join(lp.token or "" for lp in tr.logprobs).strip().lower().startswith("the quick")
    assert all(lp.bytes == list((lp.token or "").encode()) for lp in tr.logprobs)


def test_temperature_is_honoured_and_checked(whisper: Hasrd) -> None:
    client = sdk(whisper)
    with open(DATA / "en_hello_world.flac", "rb") as f:
        v = client.audio.transcriptions.create(model="whisper-1", file=f, language="en", temperature=0.4,
                                               response_format="verbose_json")
    assert v.segments and all(math.isclose(s.temperature, 0.4) for s in v.segments)
    with open(DATA / "en_hello_world.flac", "rb") as f, pytest.raises(openai.BadRequestError) as exc:
        client.audio.transcriptions.create(model="whisper-1", file=f, temperature=2.0)
    err: Any = exc.value.body
    assert err["param"] == "temperature" and err["type"] == "invalid_request_error"


def test_translations_give_english_with_the_whisper_engine(whisper: Hasrd) -> None:
    with open(DATA / "zh_nihao_shijie.flac", "rb") as f:
        v = sdk(whisper).audio.translations.create(model="whisper-1", file=f, response_format="verbose_json")
    assert v.task == "translate" and v.language == "english"  # type: ignore[union-attr]
    text = v.text.strip()  # type: ignore[union-attr]
    assert text and all(ord(ch) < 0x2E80 for ch in text), text  # English words, no Chinese characters
    with open(DATA / "zh_nihao_shijie.flac", "rb") as f:
        assert sdk(whisper).audio.translations.create(model="whisper-1", file=f).text.strip()


def test_an_engine_that_cannot_translate_says_so_with_a_400(fake: Hasrd, wav: str) -> None:
    with open(wav, "rb") as f, pytest.raises(openai.BadRequestError) as exc:
        sdk(fake).audio.translations.create(model="whisper-1", file=f)
    err: Any = exc.value.body
    assert err["code"] == "unsupported" and "--engine whisper" in err["message"]


def test_models_list_retrieve_and_unknown_ids(fake: Hasrd, wav: str) -> None:
    client = sdk(fake)
    listed = list(client.models.list())
    assert [m.id for m in listed][:2] == ["hasr", "whisper-1"] and all(m.created > 1_600_000_000 for m in listed)
    assert client.models.retrieve("whisper-1").id == "whisper-1"
    with pytest.raises(openai.NotFoundError) as exc:
        client.models.retrieve("davinci")
    err: Any = exc.value.body
    assert err["code"] == "model_not_found" and err["param"] == "model"
    with open(wav, "rb") as f, pytest.raises(openai.NotFoundError):
        client.audio.transcriptions.create(model="davinci", file=f)


def test_error_bodies_have_message_type_param_and_code(fake: Hasrd, wav: str) -> None:
    client = sdk(fake)
    with open(wav, "rb") as f, pytest.raises(openai.BadRequestError) as exc:
        client.audio.transcriptions.create(model="hasr", file=f, language="klingon")
    err: Any = exc.value.body
    assert err["code"] == "unknown_language" and err["param"] == "language"
    assert err["type"] == "invalid_request_error" and "klingon" in err["message"]
    assert exc.value.code == "unknown_language" and exc.value.param == "language"
    with open(wav, "rb") as f, pytest.raises(openai.BadRequestError) as exc:
        client.audio.transcriptions.create(model="hasr", file=f, response_format="docx")  # type: ignore[arg-type]
    assert exc.value.param == "response_format"

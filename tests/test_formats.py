"""hasrd.formats: every format renders the result object of docs/API.md, and subtitles parse back."""

from __future__ import annotations

import html
import io
import json
from datetime import timedelta

import pytest
import srt
import webvtt

from hasrd import formats
from hasrd.errors import BadRequest, UnknownFormat
from hasrd.transcript import from_json, to_json

RESULT = from_json({
    "engine": "fake",
    "audio_path": "/abs/会议.wav",
    "language": "Chinese",
    "draft": "今天天气很好。我们去公园散步|吧。",
    "final": "今天天气很好。我们去公园散步吧。",
    "per_sentence": [
        {"text": "今天天气很好。", "engine": "draft", "start_s": 0.0, "end_s": 1.5},
        {"text": "我们去公园散步吧。", "engine": "fw", "start_s": 3720.0, "end_s": 3723.0456},
    ],
    "duration_s": 3724.0,
})


def test_formats_are_the_openai_response_formats() -> None:
    assert formats.FORMATS == ("json", "text", "srt", "vtt", "verbose_json", "diarized_json")


def test_text_is_the_final_transcript_and_a_newline() -> None:
    assert formats.render(RESULT, "text") == "今天天气很好。我们去公园散步吧。\n"


def test_json_is_the_openai_text_object_with_unescaped_chinese() -> None:
    out = formats.render(RESULT, "json")
    assert json.loads(out) == {"text": RESULT.final, "usage": {"type": "duration", "seconds": 3724}}
    assert "今天" in out


def test_verbose_json_carries_segments_and_the_whole_result() -> None:
    doc = json.loads(formats.render(RESULT, "verbose_json"))
    assert doc["task"] == "transcribe"
    assert doc["language"] == "chinese"  # OpenAI's spelling: the lower-case English name
    assert doc["duration"] == 3724.0
    assert doc["text"] == RESULT.final
    assert [{k: seg[k] for k in ("id", "start", "end", "text")} for seg in doc["segments"]] == [
        {"id": 0, "start": 0.0, "end": 1.5, "text": "今天天气很好。"},
        {"id": 1, "start": 3720.0, "end": 3723.0456, "text": "我们去公园散步吧。"},
    ]
    assert doc["hasr"] == to_json(RESULT)
    assert "words" not in doc  # no sentence carries words: OpenAI omits the field


def test_verbose_json_has_top_level_words_when_sentences_carry_them() -> None:
    result = from_json({"final": "The quick brown. Fox", "per_sentence": [
        {"text": "The quick brown.", "start_s": 0.0, "end_s": 1.0,
         "words": [{"word": " The", "start": 0.0, "end": 0.2, "probability": 0.9},
                   {"word": " quick", "start": 0.2, "end": 0.5, "probability": 0.8},
                   {"word": " ", "start": 0.5, "end": 0.5, "probability": 0.1},
                   {"word": " brown.", "start": 0.5, "end": 0.4, "probability": 0.7}]},
        {"text": "Fox", "start_s": 1.0, "end_s": 2.0,
         "words": [{"word": " Fox", "start": -1, "end": 1.9, "probability": 0.9}]},
    ]})
    doc = json.loads(formats.render(result, "verbose_json"))
    assert doc["words"] == [{"word": "The", "start": 0.0, "end": 0.2}, {"word": "quick", "start": 0.2, "end": 0.5},
                            {"word": "brown.", "start": 0.5, "end": 0.5}, {"word": "Fox", "start": 0.0, "end": 1.9}]
    assert [s["text"] for s in doc["segments"]] == ["The quick brown.", "Fox"] and "words" not in doc["segments"][0]
    # asked for but nothing said: an empty list, not a missing field
    silent = from_json({"final": "", "per_sentence": [{"text": "", "start_s": 0, "end_s": 1, "words": []}]})
    assert formats.verbose(silent)["words"] == []


def test_srt_uses_comma_milliseconds_and_hours() -> None:
    out = formats.render(RESULT, "srt")
    assert "1\n00:00:00,000 --> 00:00:01,500\n今天天气很好。\n" in out
    assert "2\n01:02:00,000 --> 01:02:03,046\n我们去公园散步吧。\n" in out


def test_srt_parses_back_with_the_srt_library() -> None:
    subs = list(srt.parse(formats.render(RESULT, "srt")))
    assert [s.index for s in subs] == [1, 2]
    assert [s.content for s in subs] == ["今天天气很好。", "我们去公园散步吧。"]
    assert subs[0].end == timedelta(seconds=1.5)
    assert subs[1].end == timedelta(hours=1, minutes=2, seconds=3, milliseconds=46)


def test_vtt_has_the_header_and_dot_milliseconds() -> None:
    out = formats.render(RESULT, "vtt")
    assert out.startswith("WEBVTT\n\n")
    assert "01:02:00.000 --> 01:02:03.046\n我们去公园散步吧。\n" in out


def test_vtt_parses_back_with_webvtt_py() -> None:
    captions = webvtt.from_buffer(io.StringIO(formats.render(RESULT, "vtt"))).captions
    assert [(c.start, c.end, c.text) for c in captions] == [
        ("00:00:00.000", "00:00:01.500", "今天天气很好。"),
        ("01:02:00.000", "01:02:03.046", "我们去公园散步吧。"),
    ]


def test_vtt_escapes_markup_and_arrows_in_cue_text() -> None:
    result = from_json({"final": "a", "per_sentence": [{"text": "x --> y & <b>", "start_s": 0, "end_s": 1}]})
    out = formats.render(result, "vtt")
    assert "x --&gt; y &amp; &lt;b&gt;" in out
    captions = webvtt.from_buffer(io.StringIO(out)).captions
    assert [html.unescape(c.text) for c in captions] == ["x --> y & <b>"]


def test_blank_lines_inside_a_sentence_do_not_split_the_cue() -> None:
    result = from_json({"final": "a", "per_sentence": [{"text": "one\n\ntwo", "start_s": 0, "end_s": 1}]})
    subs = list(srt.parse(formats.render(result, "srt")))
    assert [s.content for s in subs] == ["one two"]


def test_times_never_go_backwards_or_negative() -> None:
    result = from_json({"per_sentence": [{"text": "x", "start_s": -2, "end_s": -1},
                                         {"text": "y", "start_s": 3, "end_s": 1}]})
    segs = formats.segments(result)
    assert [(s["start"], s["end"]) for s in segs] == [(0.0, 0.0), (3.0, 3.0)]


def test_timestamps_round_to_the_millisecond_and_carry() -> None:
    assert formats.timestamp(59.9996) == "00:01:00,000"
    assert formats.timestamp(3600 * 100 + 0.0004, ".") == "100:00:00.000"


def test_result_without_sentences_becomes_one_segment_over_the_audio() -> None:
    result = from_json({"final": "hello world", "duration_s": 2.25})
    subs = list(srt.parse(formats.render(result, "srt")))
    assert [(s.content, s.end) for s in subs] == [("hello world", timedelta(seconds=2.25))]


def test_silence_gives_empty_subtitles_that_still_parse() -> None:
    result = from_json({"final": "", "per_sentence": [], "duration_s": 1.0})
    assert list(srt.parse(formats.render(result, "srt"))) == []
    assert formats.render(result, "vtt") == "WEBVTT\n"
    assert webvtt.from_buffer(io.StringIO(formats.render(result, "vtt"))).captions == []
    assert formats.render(result, "text") == "\n"


def test_empty_sentences_are_dropped_and_ids_stay_dense() -> None:
    result = from_json({"per_sentence": [{"text": " ", "start_s": 0, "end_s": 1},
                                         {"text": "b", "start_s": 1, "end_s": 2}]})
    assert [{k: seg[k] for k in ("id", "start", "end", "text")} for seg in formats.segments(result)] == [
        {"id": 0, "start": 1.0, "end": 2.0, "text": "b"}]


@pytest.mark.parametrize(
    "fmt,ext,ctype",
    [
        ("json", "json", "application/json"),
        ("text", "txt", "text/plain; charset=utf-8"),
        ("srt", "srt", "application/x-subrip; charset=utf-8"),
        ("vtt", "vtt", "text/vtt; charset=utf-8"),
        ("verbose_json", "json", "application/json"),
    ],
)
def test_each_format_has_an_extension_and_a_content_type(fmt: str, ext: str, ctype: str) -> None:
    assert formats.check(fmt).extension == ext
    assert formats.check(fmt).content_type == ctype


def test_format_names_ignore_case_and_blanks() -> None:
    assert formats.check(" SRT ") is formats.Format.SRT
    assert formats.render(RESULT, formats.check("Text")) == formats.render(RESULT, formats.Format.TEXT)


@pytest.mark.parametrize("bad", ["txt", "mp3", "", "verbose-json"])
def test_unknown_format_is_a_400_naming_the_valid_ones(bad: str) -> None:
    with pytest.raises(UnknownFormat) as err:
        formats.check(bad, param="response_format")
    assert isinstance(err.value, BadRequest)
    assert err.value.code == "unknown_format" and err.value.status == 400 and err.value.param == "response_format"
    assert "json, text, srt, vtt, verbose_json" in err.value.message


def test_a_result_that_is_no_result_object_says_so_in_one_sentence() -> None:
    """What hasrctl and the tray read back from the daemon: a daemon of another version must not be a traceback."""
    with pytest.raises(ValueError, match="same version"):
        from_json({"final": "x", "per_sentence": "not a list"})
    assert from_json({"final": "x", "field_of_a_newer_daemon": 1}).final == "x"


@pytest.mark.parametrize(("texts", "code", "joined"), [
    (["今天天气很好", "我们去公园"], "zh", "今天天气很好 我们去公园"),  # no end mark: a space, not one run-on sentence
    (["今天天气很好。", "我们去公园"], "zh", "今天天气很好。我们去公园"),  # after 。 nothing, as the seed joins them
    (["「你好」", "再见"], "zh", "「你好」再见"),
    (["こんにちは", "元気です。"], "ja", "こんにちは 元気です。"),
    (["你好", "Hello"], "zh", "你好 Hello"),
    (["Hello.", " ", "World"], "en", "Hello. World"),
    (["OK.", "Yes", "好。"], "zh", "OK. Yes 好。"),  # spaced script on both sides: a space, mark or not
])
def test_sentences_without_an_end_mark_are_not_run_together_and_the_stream_adds_up_to_the_same_text(
        texts: list[str], code: str, joined: str) -> None:
    """issue 32 #8: Chinese sentences without 。 were joined with nothing between them in text and json; the
    streamed deltas (OpenAI's transcript.text.delta) must still concatenate to the done text."""
    from hasrd.languages import join_sentences

    assert join_sentences(texts, code) == joined
    joiner = formats.DeltaJoiner()
    assert "".join(joiner.add(t) for t in texts) == joined
    assert joiner.done(joined) == ("", joined)


SPOKEN = from_json({
    "engine": "whisper", "language": "English", "final": "Hello there. Hi. How are you?", "duration_s": 6.0,
    "speakers": ["Ann", "B<o>b"], "speaker_mode": "diarized",
    "per_sentence": [
        {"text": "Hello there.", "start_s": 0.0, "end_s": 1.0, "speaker": "Ann"},
        {"text": "Hi.", "start_s": 1.1, "end_s": 1.6, "speaker": "B<o>b"},
        {"text": "How are you?", "start_s": 1.6, "end_s": 2.8, "speaker": "B<o>b"},
    ],
})


def test_text_with_speakers_is_one_turn_a_line_and_a_turn_joins_its_sentences() -> None:
    assert formats.render(SPOKEN, formats.Format.TEXT) == "Ann: Hello there.\nB<o>b: Hi. How are you?\n"
    assert formats.lines(SPOKEN) == "Ann: Hello there.\nB<o>b: Hi. How are you?\n"
    assert formats.speaker_text(RESULT) is None  # no speakers: the plain text as before


def test_subtitles_name_each_cues_speaker_and_never_join_two_speakers_in_a_cue() -> None:
    cues = list(srt.parse(formats.render(SPOKEN, formats.Format.SRT)))
    assert [c.content.split(": ")[0] for c in cues] == ["Ann", "B<o>b", "B<o>b"]
    vtt = formats.render(SPOKEN, formats.Format.VTT)
    assert "<v Ann>Hello there." in vtt and "<v B&lt;o&gt;b>Hi." in vtt  # the name escaped as cue text is


def test_diarized_json_is_openais_shape_and_a_result_without_speakers_is_one_speaker() -> None:
    doc = json.loads(formats.render(SPOKEN, formats.Format.DIARIZED_JSON))
    assert doc["task"] == "transcribe" and doc["text"] == SPOKEN.final and doc["usage"]["type"] == "duration"
    assert [(s["type"], s["id"], s["speaker"]) for s in doc["segments"]] == [
        ("transcript.text.segment", "seg_0", "Ann"), ("transcript.text.segment", "seg_1", "B<o>b"),
        ("transcript.text.segment", "seg_2", "B<o>b")]
    assert {s["speaker"] for s in json.loads(formats.render(RESULT, "diarized_json"))["segments"]} == {"A"}
    assert json.loads(formats.render(SPOKEN, formats.Format.VERBOSE_JSON))["segments"][1]["speaker"] == "B<o>b"


def test_formats_that_write_the_same_json_file_are_refused_together_and_diarized_json_asks_for_speakers() -> None:
    from hasrctl.client import UsageError
    from hasrctl.common import parse_formats, speakers_for

    with pytest.raises(UsageError, match="verbose_json and diarized_json both write NAME.json"):
        parse_formats(["verbose_json,diarized_json"])
    fmts = parse_formats(["txt,diarized_json"])
    assert speakers_for(fmts, None) == "auto" and speakers_for(fmts, "channels") == "channels"
    assert speakers_for(parse_formats(["srt"]), None) is None

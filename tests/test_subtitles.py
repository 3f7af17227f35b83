"""hasrd.subtitles: cues that follow subtitle practice (plain values and properties; real speech in
test_transcripts.py)."""

from __future__ import annotations

import io
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest
import srt
import webvtt
from hypothesis import given, settings
from hypothesis import strategies as st

from hasrd import formats, subtitles, textwords
from hasrd.transcript import from_json
from hasrd.errors import InvalidOption
from hasrd.subtitles import CueRules, cues, rules_from

FIVE = ("The weather is nice today, so we are going for a walk in the park. I get up at seven every morning. "
        "This restaurant serves delicious food at a fair price. Could you tell me how to get to the station? "
        "She watched an interesting film last night.")


def test_one_long_segment_of_five_sentences_becomes_cues_that_fit() -> None:
    out = cues([{"start": 0.0, "end": 23.1, "text": FIVE}])
    assert len(out) >= 4
    for c in out:
        assert len(c.lines) <= 2 and all(len(line) <= 42 for line in c.lines)
        assert 0.83 <= c.end - c.start <= 7.0
    assert " ".join(" ".join(c.lines) for c in out) == FIVE


def test_cues_end_at_sentence_ends_when_a_sentence_boundary_is_near() -> None:
    out = cues([{"start": 0.0, "end": 23.1, "text": FIVE}])
    assert sum(c.text.rstrip().endswith((".", "?")) for c in out) >= 4


def test_chinese_lines_hold_at_most_sixteen_characters() -> None:
    text = "今天天气很好，我们去公园散步吧。我每天早上七点起床，然后去跑步。这家饭店的菜非常好吃，价格也不贵。"
    out = cues([{"start": 0.0, "end": 9.0, "text": text}])
    assert all(len(line) <= 16 for c in out for line in c.lines)
    assert "".join("".join(c.lines) for c in out) == text
    assert out[0].lines[0] == "今天天气很好，我们去公园散步吧。"  # broken after the clause, not mid-phrase


def test_times_follow_the_words_when_the_engine_timed_them() -> None:
    words = [{"word": w, "start": s, "end": e} for w, s, e in
             [(" Hello", 0.0, 0.4), (" there.", 0.5, 0.9), (" How", 3.0, 3.2), (" are", 3.2, 3.4), (" you?", 3.4, 4.0)]]
    seg = {"start": 0.0, "end": 4.0, "text": "Hello there. How are you?", "words": words}
    out = cues([seg], CueRules(max_line_width=12, max_line_count=1))
    assert [(c.text, c.start) for c in out] == [("Hello there.", 0.0), ("How are you?", 3.0)]
    assert out[0].end == pytest.approx(0.9)


def test_a_short_cue_is_held_for_the_minimum_time_without_running_into_the_next() -> None:
    out = cues([{"start": 1.0, "end": 1.2, "text": "Yes."}, {"start": 1.5, "end": 3.0, "text": "Go on then."},
                {"start": 10.0, "end": 10.1, "text": "Bye."}])
    # 0.83 s from its start would run into the next cue: it ends where that one starts and begins earlier
    assert out[0].end == pytest.approx(1.5) and out[0].start == pytest.approx(1.5 - 0.83)
    assert out[2].end - out[2].start == pytest.approx(0.83)


def test_overlapping_segments_give_cues_that_do_not_overlap() -> None:
    out = cues([{"start": 0.0, "end": 3.0, "text": "First one."}, {"start": 2.0, "end": 4.0, "text": "Second."}])
    assert out[0].end <= out[1].start


def test_limits_from_options_and_their_errors_name_the_allowed_values() -> None:
    r = rules_from({"max_line_width": "30", "max_line_count": 1, "max_cue_sec": "5.5"})
    assert (r.max_line_width, r.max_line_count, r.max_cue_sec) == (30, 1, 5.5)
    assert rules_from({"max_line_width": "", "max_cue_sec": None}) == CueRules()
    for name, bad in [("max_line_width", "7"), ("max_line_width", "wide"), ("max_line_count", "0"),
                      ("max_line_count", "2.5"), ("max_cue_sec", "0.5"), ("max_cue_sec", "nan"),
                      ("max_cue_sec", True)]:
        with pytest.raises(InvalidOption) as e:
            rules_from({name: bad})
        assert e.value.status == 400 and e.value.param == name and "from" in e.value.message, (name, bad)


def test_srt_and_vtt_render_the_cues_with_their_limits() -> None:
    result = from_json({"final": FIVE, "per_sentence": [{"text": FIVE, "start_s": 0.0, "end_s": 23.1}]})
    srt = formats.render(result, "srt", rules=CueRules(max_line_width=30, max_line_count=1, max_cue_sec=4))
    blocks = [b.splitlines() for b in srt.strip().split("\n\n")]
    assert all(len(b) == 3 and len(b[2]) <= 30 for b in blocks)
    vtt = formats.render(result, "vtt")
    assert vtt.startswith("WEBVTT\n\n") and vtt.count(" --> ") == len(cues(formats.segments(result)))


def test_text_lines_are_one_sentence_a_line() -> None:
    result = from_json({"final": "One. Two.", "per_sentence": [{"text": "One.", "start_s": 0, "end_s": 1},
                                                               {"text": "Two.", "start_s": 1, "end_s": 2}]})
    assert formats.lines(result) == "One.\nTwo.\n"
    assert formats.render(result, "text") == "One. Two.\n"  # OpenAI's text format stays one string
    assert formats.lines(from_json({"final": ""})) == "\n"


WORDS = st.lists(st.sampled_from(["a", "word", "longer", "sentence.", "clause,", "甲乙丙", "丁。", "x" * 50]),
                 min_size=1, max_size=40)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(WORDS, st.floats(0.0, 20.0)), min_size=1, max_size=6),
       st.sampled_from([0, 16, 42]), st.integers(1, 3), st.floats(1.0, 10.0))
def test_every_cue_keeps_the_rules_and_no_text_is_lost(sentences: list[tuple[list[str], float]], width: int,
                                                       count: int, max_sec: float) -> None:
    segs, t = [], 0.0
    for ws, dur in sentences:
        segs.append({"start": t, "end": t + dur, "text": " ".join(ws)})
        t += dur + 0.5
    rules = CueRules(max_line_width=width, max_line_count=count, max_cue_sec=max_sec)
    out = cues(segs, rules)
    for a, b in zip(out, out[1:], strict=False):
        assert a.end <= b.start + 1e-9 and a.start < a.end
    for c in out:
        assert c.end - c.start <= max_sec + 1e-9
        w = rules.width(c.text)
        # a line is over the width only when it is one unbreakable word
        assert all(len(line) <= w or " " not in line for line in c.lines)
        assert len(c.lines) <= count or any(len(line) > w for line in c.lines)
    squash = "".join("".join(s["text"].split()) for s in segs)
    assert "".join("".join(c.text.split()) for c in out) == squash


def test_configured_limits_come_from_the_settings() -> None:
    from hasrd.config import load

    s = load(env={"HASR_MAX_LINE_WIDTH": "30", "HASR_MAX_CUE_SEC": "5"}, toml_path=None)
    assert subtitles.configured(s) == CueRules(max_line_width=30, max_line_count=2, max_cue_sec=5.0)
    with pytest.raises(InvalidOption, match="HASR_MAX_LINE_COUNT"):
        subtitles.configured(load(env={"HASR_MAX_LINE_COUNT": "9"}, toml_path=None))


def test_no_cue_ends_after_the_audio() -> None:
    """Issue 31 #12: the last cue was stretched to the minimum length past the audio's end (7.017-7.847 s for a
    7.068 s file); it is stretched back into the silence before it instead."""
    result = from_json({"final": "Hi. Bye.", "duration_s": 7.068,
                        "per_sentence": [{"text": "Hi.", "start_s": 5.0, "end_s": 6.0},
                                         {"text": "Bye.", "start_s": 7.017, "end_s": 7.05}]})
    last = cues(formats.segments(result), until=7.068)[-1]
    assert last.end <= 7.068 and last.end - last.start >= 0.83 - 1e-9 and last.start >= 6.0
    assert formats.render(result, "srt").rstrip().splitlines()[-2].endswith("--> 00:00:07,068")
    assert formats.render(result, "vtt").rstrip().splitlines()[-2].endswith("--> 00:00:07.068")


# --- issue 32 #4: subtitles a viewer can read ---------------------------------------------------------------

TICKETS = "If you want to see the concert, you should go to the box office early and buy your tickets."
MEETING = "各位同事，我们将在下周的全体会议上向大家详细介绍新版本的发布计划。"


def _texts(out: list[subtitles.Cue]) -> list[str]:
    return [" ".join(c.lines) for c in out]


def test_a_sentence_too_long_for_one_cue_is_split_at_its_comma_not_with_tickets_left_alone() -> None:
    """Greedy filling gave 'If you want to see the concert, you should / go to the box office early and buy
    your' and then 'tickets.' alone for 0.83 s."""
    out = cues([{"start": 0.0, "end": 6.0, "text": TICKETS}])
    assert _texts(out) == ["If you want to see the concert,",
                           "you should go to the box office early and buy your tickets."]
    assert out[1].lines == ["you should go to the box office", "early and buy your tickets."]
    assert out[0].end == out[1].start and out[1].end == 6.0


def test_with_one_line_of_32_characters_no_cue_is_a_lone_planned_or_a_week() -> None:
    """Greedy filling of one 32-character line left 'planned.' and 'a week.' as cues of their own."""
    segs = [{"start": 0.0, "end": 2.6, "text": "Everything took much longer than planned."},
            {"start": 3.2, "end": 5.6, "text": "The new version will ship within a week."}]
    out = cues(segs, CueRules(max_line_width=32, max_line_count=1), until=6.5)
    assert _texts(out) == ["Everything took much", "longer than planned.", "The new version will",
                           "ship within a week."]


def test_chinese_is_cut_between_words_never_inside_one() -> None:
    """Greedy filling cut '发布计' / '划。' (and '全体会' / '议'); the cut is now at the comma and lines break
    between the words rjieba finds."""
    out = cues([{"start": 0.0, "end": 6.5, "text": MEETING}])
    assert ["".join(c.lines) for c in out] == ["各位同事，", "我们将在下周的全体会议上向大家详细介绍新版本的发布计划。"]
    assert out[1].lines == ["我们将在下周的全体会议上向", "大家详细介绍新版本的发布计划。"]
    assert all("发布计划" in line or "发布" not in line for c in out for line in c.lines)


def test_sixteen_chinese_characters_stay_long_enough_to_read_at_nine_a_second() -> None:
    """16 characters spoken in 0.5 s were shown for 0.83 s (19 a second): now 16 / 9 s, into the pause."""
    text = "我们会在下周公布新版的发布计划。"
    out = cues([{"start": 0.0, "end": 0.5, "text": text}, {"start": 3.0, "end": 4.0, "text": "好的。"}], until=4.5)
    assert len(text) == 16 and out[0].lines == [text]
    assert out[0].end - out[0].start == pytest.approx(16 / 9)
    assert subtitles.reading_chars(out[0].text) / (out[0].end - out[0].start) <= 9 + 1e-9


def test_reading_time_comes_from_the_pause_after_then_before_and_never_past_the_audio() -> None:
    text = "Please remember to bring your tickets."  # 38 characters: 38 / 17 = 2.24 s to read
    out = cues([{"start": 1.0, "end": 1.5, "text": text}, {"start": 2.5, "end": 3.5, "text": "Fine, thanks."}],
               until=3.6)
    assert out[0].end == pytest.approx(2.5)  # up to the next cue, not over it
    assert out[0].start == pytest.approx(2.5 - 38 / 17)  # the rest from the silence before it
    last = cues([{"start": 5.0, "end": 5.4, "text": text}], until=5.5)[0]
    assert last.end == pytest.approx(5.5) and last.end - last.start == pytest.approx(38 / 17)


def test_fast_speech_with_no_room_keeps_its_text_whole_and_its_time() -> None:
    """No pause around it: the cue cannot be held longer, so it is read faster than the cap, but nothing is
    cut from it and it does not move over its neighbours."""
    a, b = "Please remember to bring your tickets.", "And do not be late tomorrow morning."
    out = cues([{"start": 0.0, "end": 1.0, "text": a}, {"start": 1.0, "end": 2.0, "text": b}], until=2.0)
    assert _texts(out) == [a, b]
    assert (out[0].start, out[0].end, out[1].start, out[1].end) == (0.0, 1.0, 1.0, 2.0)


def test_the_two_lines_of_a_cue_are_even_the_lower_one_longer_and_never_one_word() -> None:
    out = cues([{"start": 0.0, "end": 5.0, "text": "This restaurant serves delicious food at a fair price."}])
    assert out[0].lines == ["This restaurant serves", "delicious food at a fair price."]
    units = [subtitles._Unit(w, 0.0, 1.0) for w in ["Yesterday", " we", " visited", " the", " extraordinarily",
                                                  " beautiful", " gardens."]]
    lines = subtitles.wrap(units, 42, 2)
    assert lines is not None and all(" " in line for line in lines)
    assert subtitles.wrap(units[:2], 10, 2) == ["Yesterday", "we"]  # two words on two lines: nothing else fits


def test_a_line_does_not_end_on_an_article_when_another_break_does_as_well() -> None:
    words = ["We", " bought", " a", " ticket", " for", " the", " last", " train", " home"]
    units = [subtitles._Unit(w, 0.0, 1.0) for w in words]
    lines = subtitles.wrap(units, 26, 2)
    assert lines is not None and not lines[0].endswith((" a", " the", " for"))


def test_japanese_is_cut_where_kana_turn_into_kanji_or_katakana() -> None:
    assert textwords._glue(textwords._ja_words("コンピューターを使って、データ分析をしています。")) == \
        ["コンピューターを", "使って、", "データ", "分析をしています。"]
    text = "明日は東京駅で友達と会って、一緒に新しいレストランに行く予定です。"
    out = cues([{"start": 0.0, "end": 5.0, "text": text}])
    assert ["".join(c.lines) for c in out] == ["明日は東京駅で友達と会って、", "一緒に新しいレストランに行く予定です。"]
    assert out[1].lines == ["一緒に新しいレストランに", "行く予定です。"]


def test_the_segmenter_is_loaded_only_when_a_chinese_sentence_must_be_cut_and_says_nothing() -> None:
    code = ("import sys\n"
            "from hasrd import subtitles\n"
            f"subtitles.cues([{{'start': 0, 'end': 5, 'text': {TICKETS!r}}},\n"
            "                {'start': 6, 'end': 7, 'text': '好的。'}])\n"
            "assert 'rjieba' not in sys.modules\n"
            f"subtitles.cues([{{'start': 0, 'end': 6, 'text': {MEETING!r}}}])\n"
            "assert 'rjieba' in sys.modules\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parents[1])
    assert res.returncode == 0, res.stderr
    assert res.stderr == "" and res.stdout == ""


def test_the_issue_examples_parse_as_srt_and_webvtt() -> None:
    sentences = [("If you want to see the concert, you should go to the box office early and buy your tickets.",
                  0.0, 6.0), ("各位同事，我们将在下周的全体会议上向大家详细介绍新版本的发布计划。", 6.5, 13.0)]
    result = from_json({"final": " ".join(t for t, _, _ in sentences), "duration_s": 13.2,
                        "per_sentence": [{"text": t, "start_s": a, "end_s": b} for t, a, b in sentences]})
    want = cues(formats.segments(result), until=13.2)
    subs = list(srt.parse(formats.render(result, "srt")))
    assert [(s.start.total_seconds(), s.end.total_seconds(), s.content) for s in subs] == \
        [(pytest.approx(c.start, abs=1e-3), pytest.approx(c.end, abs=1e-3), c.text) for c in want]
    vtt = webvtt.from_buffer(io.StringIO(formats.render(result, "vtt"))).captions
    assert [cap.text for cap in vtt] == [c.text for c in want]
    assert all(cap.end_in_seconds <= 13.2 for cap in vtt)


# --- properties ----------------------------------------------------------------------------------------------

EN_WORDS = ["a", "the", "we", "word", "longer", "sentence.", "clause,", "extraordinary", "went", "home;", "it",
            "is", "very", "well?"]
ZH_WORDS = ["我们", "发布", "计划", "新版本", "下周", "公布", "详细", "介绍", "，", "大家", "会议", "北京", "天气"]


def _fits(words: list[str], width: int, count: int) -> bool:
    """Greedy filling (the fewest lines): the words fit ``count`` lines of ``width``."""
    lines: list[str] = []
    for w in words:
        if lines and len(lines[-1]) + 1 + len(w) <= width:
            lines[-1] += " " + w
        else:
            lines.append(w)
    return len(lines) <= count and all(len(line) <= width for line in lines)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.sampled_from(EN_WORDS), min_size=1, max_size=40), min_size=1, max_size=5),
       st.sampled_from([0, 16, 24, 42]), st.integers(1, 3), st.floats(0.0, 2.0))
def test_english_cues_keep_words_whole_leave_no_lone_word_keep_to_their_lines_and_the_audio(
        sentences: list[list[str]], width: int, count: int, tail: float) -> None:
    segs, t = [], 0.0
    for ws in sentences:
        segs.append({"start": t, "end": t + 0.3 * len(ws), "text": " ".join(ws)})
        t += 0.3 * len(ws) + 0.4
    rules = CueRules(max_line_width=width, max_line_count=count, max_cue_sec=60.0)
    until = t - 0.4 + tail
    out = cues(segs, rules, until=until)
    for a, b in zip(out, out[1:], strict=False):
        assert a.end <= b.start + 1e-9
    assert all(c.start < c.end <= until + 1e-9 for c in out)
    # words are never cut: the cues' words, in order, are the sentences' words
    assert [w for c in out for line in c.lines for w in line.split(" ")] == [w for ws in sentences for w in ws]
    for seg in segs:  # one sentence at a time: its cues' neighbours are its own
        mine = cues([seg], rules)
        w = rules.width(seg["text"])
        for c in mine:
            assert len(c.lines) <= count and all(len(line) <= w or " " not in line for line in c.lines)
        for k, c in enumerate(mine):
            if len(c.text.split()) == 1 and len(mine) > 1:  # a lone word only where no neighbour can take it
                for n in (k - 1, k + 1):
                    if 0 <= n < len(mine):
                        pair = (mine[n].text.split() + c.text.split()) if n < k else \
                            (c.text.split() + mine[n].text.split())
                        assert not _fits(pair, w, count), (c.text, mine[n].text)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(ZH_WORDS), min_size=1, max_size=50), st.integers(1, 3), st.floats(2.0, 7.0))
def test_chinese_cues_break_only_between_the_words_rjieba_finds(words: list[str], count: int, max_sec: float) -> None:
    import rjieba

    text = "".join(words) + "。"
    out = cues([{"start": 0.0, "end": 0.25 * len(text), "text": text}],
               CueRules(max_line_count=count, max_cue_sec=max_sec))
    assert "".join(line for c in out for line in c.lines) == text
    bounds, pos = {0}, 0
    for w in rjieba.cut(text):
        pos += len(w)
        bounds.add(pos)
    pos = 0
    for c in out:
        assert len(c.lines) <= count and all(len(line) <= 16 for line in c.lines)
        assert c.end - c.start <= max_sec + 1e-9
        for line in c.lines:
            assert pos in bounds, (line, c.lines)
            if pos:  # no line starts with a mark
                assert not unicodedata.category(line[0]).startswith("P"), line
            pos += len(line)

"""hasrd.worker.resegment: sentence-sized segments from timed words (plain values; real speech in
test_transcripts.py)."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from hasrd.worker.resegment import LoopFilter, Piece, Resegmenter, Word, cut, ends_sentence


def words(spec: str, start: float = 0.0, step: float = 0.3, source: int = 0) -> list[Word]:
    """Words of ``spec`` (spaces between them), each ``step`` long, back to back from ``start``."""
    out = []
    t = start
    for i, w in enumerate(spec.split()):
        out.append(Word((" " if i or start else "") + w, round(t, 3), round(t + step, 3), 1.0, source))
        t += step
    return out


def texts(pieces: list[Piece]) -> list[str]:
    return [p.text for p in pieces]


def test_one_clip_of_five_sentences_becomes_five_segments() -> None:
    # the batched pipeline's shape: one decoder segment for a whole 30 s clip
    ws = words("The weather is nice today. I get up at seven. This food is good. Where is the station? "
               "She watched a film.")
    assert texts(cut(ws)) == ["The weather is nice today.", "I get up at seven.", "This food is good.",
                              "Where is the station?", "She watched a film."]


def test_a_pause_of_half_a_second_ends_a_segment_and_a_shorter_one_does_not() -> None:
    first, second = words("so we went"), words("to the park", start=0.9 + 0.5)
    assert texts(cut(first + second)) == ["so we went", "to the park"]
    close = words("to the park", start=0.9 + 0.49)
    assert texts(cut(first + close)) == ["so we went to the park"]


def test_a_silence_the_vad_found_ends_a_segment_even_when_whisper_stretched_the_words_over_it() -> None:
    a = [Word(" so", 0.0, 0.4), Word(" we", 0.4, 1.6)]  # whisper's last word ran into the silence
    b = [Word(" went", 1.7, 2.0)]
    assert texts(cut(a + b)) == ["so we went"]
    assert texts(cut(a + b, pauses=[(0.9, 1.6)])) == ["so we", "went"]


def test_abbreviations_initials_and_decimals_do_not_end_a_sentence() -> None:
    assert not ends_sentence(" Mr.") and not ends_sentence(" e.g.") and not ends_sentence(" J.")
    assert not ends_sentence(" 3.5") and ends_sentence(" done.") and ends_sentence(" 好。")
    assert ends_sentence(' "Really?"') and ends_sentence(" well…")
    assert texts(cut(words("Mr. Smith met Dr. Jones. Then they left."))) == [
        "Mr. Smith met Dr. Jones.", "Then they left."]


def test_whisper_phrases_of_one_sentence_are_joined_again() -> None:
    ws = words("I want to buy a computer,", source=0) + words("but it is too expensive.", start=1.8, source=1)
    assert texts(cut(ws)) == ["I want to buy a computer, but it is too expensive."]


def test_a_whisper_boundary_after_chinese_without_a_mark_is_kept() -> None:
    a = [Word("今天", 0.0, 0.4, source=0), Word("天气很好", 0.4, 1.2, source=0)]
    b = [Word("我们", 1.3, 1.6, source=1), Word("去公园", 1.6, 2.2, source=1)]
    assert texts(cut(a + b)) == ["今天天气很好", "我们去公园"]
    c = [Word("今天天气很好，", 0.0, 1.2, source=0)]
    assert texts(cut(c + b)) == ["今天天气很好，我们去公园"]


def test_a_whisper_boundary_inside_a_chinese_word_is_no_sentence_end() -> None:
    """Issue 39 #9: a 30 s window ended mid-word, whisper's segment with it (…正式范 | 围。): a one-character
    sentence "围。" and a 0.83 s cue of it. Character by character, as whisper times Chinese."""
    a = [Word(ch, 0.3 * i, 0.3 * i + 0.3, source=0) for i, ch in enumerate("我们进入了正式范")]
    b = [Word(ch, 2.4 + 0.3 * i, 2.7 + 0.3 * i, source=1) for i, ch in enumerate("围。")]
    assert texts(cut(a + b)) == ["我们进入了正式范围。"]
    streamed = Resegmenter()
    assert texts(streamed.add(a) + streamed.add(b) + streamed.flush()) == ["我们进入了正式范围。"]
    c = [Word(ch, 2.4 + 0.3 * i, 2.7 + 0.3 * i, source=1) for i, ch in enumerate("我们去")]  # a word starts there
    assert texts(cut(a[:-1] + [Word("范围", 2.1, 2.4, source=0)] + c)) == ["我们进入了正式范围", "我们去"]


def test_a_long_chinese_run_is_cut_between_words_not_inside_one() -> None:
    text = "我们今天在会议室里讨论了关于下一个季度的市场推广计划和预算安排的问题还有人员招聘的进度"
    ws = [Word(ch, 0.35 * i, 0.35 * i + 0.35, source=0) for i, ch in enumerate(text)]  # 15.4 s, no mark, no gap
    pieces = cut(ws)
    assert len(pieces) >= 2 and all(p.end - p.start <= 10.0 for p in pieces)
    import rjieba

    ends = set(itertools.accumulate(len(w) for w in rjieba.cut(text)))
    assert all(len("".join(t for t in texts(pieces[:i + 1]))) in ends for i in range(len(pieces) - 1))


def test_a_sentence_longer_than_ten_seconds_is_cut_at_a_clause_mark_near_its_middle() -> None:
    ws = words("one two three four five six seven eight, nine ten eleven twelve thirteen fourteen fifteen "
               "sixteen seventeen eighteen nineteen twenty, twenty-one twenty-two twenty-three twenty-four "
               "twenty-five twenty-six twenty-seven twenty-eight twenty-nine thirty thirty-one thirty-two "
               "thirty-three thirty-four thirty-five.", step=0.4)
    pieces = cut(ws)
    assert all(p.end - p.start <= 10.0 for p in pieces)
    assert texts(pieces)[0].endswith(",") and len(pieces) >= 2
    assert " ".join(texts(pieces)) == "".join(w.text for w in ws).strip()


def test_without_any_mark_or_gap_a_long_run_is_still_cut_to_ten_seconds() -> None:
    ws = words(" ".join(f"w{i}" for i in range(100)), step=0.3)  # 30 s of words, no mark, no pause
    pieces = cut(ws)
    assert all(p.end - p.start <= 10.0 for p in pieces) and len(pieces) >= 3
    assert sum(len(p.words) for p in pieces) == 100


def test_four_pieces_of_the_same_text_in_a_row_are_a_loop_said_once() -> None:
    f = LoopFilter()
    got = []
    pieces = [Piece([Word(t, i, i + 1)]) for i, t in enumerate(["你好", "傻子", "傻子", "傻子", "傻子", "再见"])]
    for p in pieces:
        got += [t for t, _ in f.add(p.text, p)]
    got += [t for t, _ in f.flush()]
    assert got == ["你好", "傻子", "再见"]
    f = LoopFilter()
    got = []
    for p in [Piece([Word(t, i, i + 1)]) for i, t in enumerate(["No.", "No.", "No.", "Fine."])]:
        got += [t for t, _ in f.add(p.text, p)]
    assert got + [t for t, _ in f.flush()] == ["No.", "No.", "No.", "Fine."]  # three is speech, not a loop
    f = LoopFilter()
    got = []
    for p in [Piece([Word("Again.", 10 * i, 10 * i + 2)]) for i in range(6)]:  # a refrain, with pauses
        got += [t for t, _ in f.add(p.text, p)]
    assert got + [t for t, _ in f.flush()] == ["Again."] * 6


SENTENCE_WORDS = st.lists(st.sampled_from(["alpha", "beta", "gamma.", "delta,", "eps?", "zeta"]), min_size=1,
                          max_size=60)


@settings(max_examples=150, deadline=None)
@given(SENTENCE_WORDS, st.lists(st.floats(0.0, 1.2), min_size=60, max_size=60),
       st.lists(st.integers(1, 12), min_size=1, max_size=8))
def test_streaming_gives_the_same_segments_as_cutting_the_whole_file(tokens: list[str], gaps: list[float],
                                                                     batches: list[int]) -> None:
    ws, t = [], 0.0
    for i, tok in enumerate(tokens):
        t += gaps[i]
        ws.append(Word(" " + tok, round(t, 3), round(t + 0.3, 3), 1.0, i // 7))
        t += 0.3
    whole = cut(ws)
    r = Resegmenter()
    streamed: list[Piece] = []
    i = k = 0
    while i < len(ws):
        n = batches[k % len(batches)]
        streamed += r.add(ws[i:i + n])
        i, k = i + n, k + 1
    streamed += r.flush()
    assert texts(streamed) == texts(whole)
    # nothing lost or doubled, no segment over a pause, none over 10 s unless it is one word
    assert [w for p in whole for w in p.words] == ws
    for p in whole:
        assert all(b.start - a.end < 0.5 for a, b in zip(p.words, p.words[1:], strict=False))
        assert p.end - p.start <= 10.0 or len(p.words) == 1

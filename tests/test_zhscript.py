"""Chinese script and punctuation (hasrd/zhscript.py) and language tags (hasrd/languages.py), as plain values.

OpenCC is the installed one (the official wheels or opencc-python-reimplemented: same import name and API); its
own tables are what "only simplified" / "only traditional" is checked against.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hasrd import zhscript as z
from hasrd.transcript import from_json, to_json
from hasrd.languages import Language, UnknownLanguage, join_sentences, parse, resolve

# ---- language tags -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tag,want", [
    ("zh", Language("Chinese", "zh")), ("Chinese", Language("Chinese", "zh")),
    ("Mandarin", Language("Chinese", "zh")), ("zh-CN", Language("Chinese", "zh", "", "CN")),
    ("zh_TW", Language("Chinese", "zh", "", "TW")), ("zh-Hans", Language("Chinese", "zh", "Hans")),
    ("zh-hant", Language("Chinese", "zh", "Hant")), ("ZH-HANT-tw", Language("Chinese", "zh", "Hant", "TW")),
    ("zh-SG", Language("Chinese", "zh", "", "SG")), ("zh-MO", Language("Cantonese", "yue", "", "MO")),
    ("zh-HK", Language("Cantonese", "yue", "", "HK")),  # Cantonese speech, as Azure / AWS / Apple read it
    ("cmn-Hant-HK", Language("Chinese", "zh", "Hant", "HK")),
    ("zh-cmn-Hans-CN", Language("Chinese", "zh", "Hans", "CN")),
    ("yue", Language("Cantonese", "yue")), ("Cantonese", Language("Cantonese", "yue")),
    ("zh-yue", Language("Cantonese", "yue")), ("yue-Hans-CN", Language("Cantonese", "yue", "Hans", "CN")),
    ("Traditional Chinese", Language("Chinese", "zh", "Hant")), ("zh-XX", Language("Chinese", "zh", "", "XX")),
    ("zh-Hant-TW-u-nu-hanidec", Language("Chinese", "zh", "Hant", "TW")),
    ("en-US", Language("English", "en", "", "US")), ("es-419", Language("Spanish", "es", "", "419")),
    ("sr-Latn", Language("Serbian", "sr", "Latn")), ("de-1996", Language("German", "de")),
    ("Haitian Creole", Language("Haitian Creole", "ht")), ("", Language("", "")), ("auto", Language("", "")),
])
def test_tags_names_and_codes_are_read(tag: str, want: Language) -> None:
    assert parse(tag) == want
    assert resolve(tag) == (want.name, want.code)


@pytest.mark.parametrize("tag,why", [
    ("zh-XX-foo", "'foo' is out of place"), ("zh-Latn", "Hans (simplified) or Hant"),
    ("zh-hakka", "variety or romanisation"), ("zh-min-nan", "'min' is not a language"),
    ("zh--TW", "empty subtag"), ("tlh-Latn", ""), ("Klingon", ""), ("chinese-tw", ""), ("en-US-x", "out of place"),
])
def test_unknown_or_ill_formed_tags_are_refused_naming_the_accepted_forms(tag: str, why: str) -> None:
    with pytest.raises(UnknownLanguage) as e:
        resolve(tag)
    msg = str(e.value)
    assert repr(tag) in msg and why in msg
    assert all(form in msg for form in ("'Chinese'", "'zh'", "'zh-TW'", "'zh-Hant'", "'en-US'"))


def test_the_daemon_reads_tags_and_scripts_without_importing_anything_heavy() -> None:
    code = ("import sys; from hasrd import zhscript; zhscript.target_for('zh-TW'); zhscript.punctuate('你好,世界'); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('numpy', 'msgspec', 'opencc', 'av', 'faster_whisper', 'ctranslate2', 'torch')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# ---- which script ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tag,setting,detected,want", [
    ("zh", "simplified", None, z.SIMPLIFIED), ("zh", "traditional", None, z.TRADITIONAL),
    ("zh", "as-is", None, z.AS_IS), ("Chinese", "traditional", None, z.TRADITIONAL),
    ("Mandarin", "as-is", None, z.AS_IS),
    ("zh-CN", "traditional", None, z.SIMPLIFIED), ("zh-Hans", "as-is", None, z.SIMPLIFIED),
    ("zh-SG", "traditional", None, z.SIMPLIFIED),
    ("zh-TW", "simplified", None, z.TAIWAN), ("zh-Hant-TW", "simplified", None, z.TAIWAN),
    ("zh-HK", "simplified", None, z.HONG_KONG), ("zh-MO", "simplified", None, z.HONG_KONG),
    ("cmn-Hant-HK", "simplified", None, z.HONG_KONG),
    ("zh-Hant", "simplified", None, z.TRADITIONAL), ("Traditional Chinese", "as-is", None, z.TRADITIONAL),
    ("yue", "simplified", None, z.HONG_KONG), ("yue-Hans", "traditional", None, z.SIMPLIFIED),
    ("zh-XX", "traditional", None, z.TRADITIONAL),
    ("", "simplified", "zh", z.SIMPLIFIED), ("", "traditional", "Chinese", z.TRADITIONAL),
    ("", "as-is", "zh", z.AS_IS), ("", "simplified", "yue", z.HONG_KONG),
    ("", "simplified", "ja", None), ("", "simplified", None, None), ("en", "simplified", "zh", None),
    ("ja", "simplified", None, None), ("Klingon", "simplified", None, None),
])
def test_the_target_follows_the_tag_then_the_setting(tag: str, setting: str, detected: str | None,
                                                      want: z.Target | None) -> None:
    assert z.target_for(tag, setting, detected) == want


def test_the_tables_are_openccs() -> None:
    assert (z.SIMPLIFIED.conversion, z.TRADITIONAL.conversion, z.TAIWAN.conversion, z.HONG_KONG.conversion,
            z.AS_IS.conversion) == ("t2s", "s2t", "s2twp", "s2hk", "")
    assert {t.script for t in (z.SIMPLIFIED, z.TRADITIONAL, z.TAIWAN, z.HONG_KONG, z.AS_IS)} == set(z.SETTINGS)


# ---- punctuation ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text,want", [
    ("你好,世界!我们去哪里?", "你好，世界！我们去哪里？"),
    ("今天 天气 很好.", "今天天气很好。"),
    ("我用 Python 写代码,很好.", "我用 Python 写代码，很好。"),  # English keeps its spaces and letters
    ("时间:10:30,地点:北京;人数:1,000.", "时间：10:30，地点：北京；人数：1,000。"),
    ("圆周率是3.14", "圆周率是3.14"), ("等一下...", "等一下..."), ("e.g.你", "e.g.你"),
    ("他说(测试)好", "他说（测试）好"), ("(注意)", "（注意）"), ("Python (3.11) 版本", "Python（3.11）版本"),
    ("你?!", "你？！"), ("好的, OK", "好的，OK"), ("我们 ,  走吧 .", "我们，走吧。"),
    ("你好. Hello world.", "你好。Hello world."), ("v2.0版本", "v2.0版本"),
    ("今天天气很好。", "今天天气很好。"), ("一二三|吧。", "一二三|吧。"),
    ("Hello, world! (really?) 3.5: yes; no.", "Hello, world! (really?) 3.5: yes; no."),
    (" 你好 ", " 你好 "), ("", ""),
])
def test_punctuation_next_to_chinese_is_full_width(text: str, want: str) -> None:
    assert z.punctuate(text) == want


_CHARS = st.sampled_from(list("你好世界们這個軟體") + list("abcXYZ019") + list(" ,.?!:;()") + list("，。？！（）“”\n"))
TEXTS = st.text(_CHARS, max_size=40)


@settings(max_examples=400, deadline=None)
@given(TEXTS)
def test_punctuate_is_idempotent(text: str) -> None:
    once = z.punctuate(text)
    assert z.punctuate(once) == once


@settings(max_examples=400, deadline=None)
@given(TEXTS)
def test_no_space_is_left_between_two_chinese_characters(text: str) -> None:
    out = z.punctuate(text)
    for i, c in enumerate(out):
        if c.isspace() and i > 0:
            j = i
            while j < len(out) and out[j].isspace():
                j += 1
            if j < len(out):
                assert not (z.is_han(out[i - 1]) and z.is_han(out[j])), (text, out)


@settings(max_examples=400, deadline=None)
@given(TEXTS)
def test_letters_digits_and_chinese_characters_are_kept_in_order(text: str) -> None:
    def kept(s: str) -> str:
        return "".join(c for c in s if c.isalnum())

    assert kept(z.punctuate(text)) == kept(text)


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(max_codepoint=0x2FFF), max_size=60))
def test_text_without_chinese_is_returned_unchanged(text: str) -> None:
    assert z.punctuate(text) == text
    assert z.convert(text, z.SIMPLIFIED) == text and z.convert(text, z.TAIWAN) == text


# ---- OpenCC conversion ---------------------------------------------------------------------------------------

MIXED = "這個軟件很好, 我们走吧.信息在哪里? 天地玄皇宇宙 紅皇日月營作陳蘇列長"


def test_simplified_has_no_character_that_t2s_would_change() -> None:
    out = z.convert(MIXED, z.SIMPLIFIED)
    assert out == "这个软件很好，我们走吧。信息在哪里？天地玄皇宇宙红皇日月营作陈苏列长"
    assert z.opencc("t2s")(out) == out and z.script_of(out)[0] == "simplified"


@pytest.mark.parametrize("target,sample", [
    (z.TAIWAN, "這個軟體很好，我們走吧。資訊在哪裡？"), (z.HONG_KONG, "這個軟件很好，我們走吧。信息在哪裏？"),
    (z.TRADITIONAL, "這個軟件很好，我們走吧。信息在哪裏？"),
])
def test_traditional_has_no_character_that_s2t_would_change(target: z.Target, sample: str) -> None:
    out = z.convert(MIXED, target)
    assert out.startswith(sample)
    assert z.opencc("s2t")(out) == z.opencc("s2t")(z.opencc(target.conversion)(out))  # nothing simplified left
    assert z.script_of(out) == ("traditional", z.script_of(out)[1], 0)
    assert z.convert(out, target) == out


def test_as_is_keeps_the_characters_and_fixes_the_punctuation() -> None:
    assert z.convert(MIXED, z.AS_IS) == "這個軟件很好，我们走吧。信息在哪里？天地玄皇宇宙紅皇日月營作陳蘇列長"


def test_script_of_counts_each_kind() -> None:
    assert z.script_of("這個軟體很好") == ("traditional", 4, 0)
    assert z.script_of("这个软件") == ("simplified", 0, 3)
    assert z.script_of("你好，皇后") == ("", 0, 0)  # characters both scripts share
    assert z.script_of("這个") == ("mixed", 1, 1) and z.script_of("hello") == ("", 0, 0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(_CHARS, min_size=1, max_size=6), min_size=1, max_size=8))
def test_split_like_cuts_a_converted_text_into_as_many_pieces_in_order(pieces: list[str]) -> None:
    converted = z.convert("".join(pieces), z.TAIWAN)
    out = z.split_like(pieces, converted)
    assert len(out) == len(pieces) and "".join(out) == converted


def test_split_like_keeps_a_phrase_conversion_across_words() -> None:
    assert z.split_like(["这个", "软", "件", "很好"], "這個軟體很好") == ["這個", "軟", "體", "很好"]


# ---- one request's result --------------------------------------------------------------------------------------


def result_of(scripter: z.Scripter, res: dict[str, Any]) -> dict[str, Any]:
    """``scripter.result`` over a result given as JSON, back as JSON."""
    return to_json(scripter.result(from_json(res)))


def whisper_like(texts: list[str], code: str = "zh") -> dict[str, Any]:
    """A whisper result; "|" in a text marks where its words are cut."""
    sentences: list[dict[str, Any]] = [
        {"text": t.replace("|", ""), "engine": "fw", "start_s": float(i), "end_s": i + 1.0,
         "words": [{"word": w, "start": float(i), "end": i + 0.5, "probability": 0.9} for w in t.split("|")]}
        for i, t in enumerate(texts)]
    return {"engine": "whisper", "language": "Chinese", "language_code": code, "draft": "",
            "final": join_sentences([s["text"] for s in sentences], code), "per_sentence": sentences,
            "sent_windows": [{"text": s["text"], "start_chunk": 0, "end_chunk": 1} for s in sentences]}


@pytest.mark.parametrize("tag,first", [("zh", "这个软件很好，"), ("zh-TW", "這個軟體很好，"),
                                       ("zh-HK", "這個軟件很好，")])
def test_a_result_is_converted_everywhere_and_its_sentences_still_join_to_final(tag: str, first: str) -> None:
    res = result_of(z.Scripter(tag, "simplified"), whisper_like(["這個|軟件|很好,", "我们|走吧."]))
    texts = [s["text"] for s in res["per_sentence"]]
    assert texts[0] == first and res["final"] == "".join(texts)
    assert [w["text"] for w in res["sent_windows"]] == texts
    for s in res["per_sentence"]:
        assert "".join(w["word"] for w in s["words"]) == s["text"]
    assert res["script"] == "simplified" if tag == "zh" else res["script"] == "traditional"
    assert res["script_conversion"] == {"zh": "t2s", "zh-TW": "s2twp", "zh-HK": "s2hk"}[tag]


def test_a_result_in_another_language_is_left_alone() -> None:
    res = whisper_like(["Hello,|world.", "Fine,|thanks."], "en")
    res["final"] = "Hello,world. Fine,thanks."
    before = to_json(from_json(res))
    out = result_of(z.Scripter("en", "simplified"), res)
    assert out["script"] is None and out["script_conversion"] is None
    del out["script"], out["script_conversion"]
    assert out == before


def test_detected_chinese_follows_the_setting_and_detected_japanese_is_left_alone() -> None:
    assert result_of(z.Scripter("", "traditional"), whisper_like(["这个软件很好"]))["final"] == "這個軟件很好"
    assert result_of(z.Scripter("", "simplified"), whisper_like(["這個軟件很好"]))["final"] == "这个软件很好"
    assert result_of(z.Scripter("", "as-is"), whisper_like(["這個软件很好,"]))["final"] == "這個软件很好，"
    ja = whisper_like(["東京大学,"], "ja")
    out = result_of(z.Scripter("", "simplified"), ja)
    assert out["final"] == "東京大学," and out["script"] is None


def test_streamed_texts_before_the_language_is_known_are_judged_by_their_characters() -> None:
    s = z.Scripter("", "simplified")
    assert s.text("這個很好,") == "这个很好，" and s.text("ですね,東京") == "ですね,東京"
    assert s.text("ok, fine") == "ok, fine"
    s.detected("ja")
    assert s.text("東京大学,") == "東京大学,"


def test_a_live_result_keeps_each_turn_equal_to_its_sentences() -> None:
    s = z.Scripter("zh-TW", "simplified")
    assert s.sentence("软件很好,", 0) == "軟體很好，" and s.sentence("我们走吧.", 0) == "我們走吧。"
    assert s.turn_text(0, "软件很好,我们走吧.") == "軟體很好，我們走吧。"
    res = {"final": "软件很好,我们走吧.", "live": True,
           "turns": [{"segment": 0, "start_s": 0.0, "text": "软件很好,我们走吧."}],
           "per_sentence": [{"text": "软件很好,", "segment": 0}, {"text": "我们走吧.", "segment": 0}]}
    out = result_of(s, res)
    assert out["final"] == out["turns"][0]["text"] == "軟體很好，我們走吧。" and out["script_conversion"] == "s2twp"


def test_without_opencc_the_characters_stay_the_punctuation_is_fixed_and_the_result_says_so(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(config: str) -> Any:
        raise z.NoOpenCC("Chinese script conversion needs OpenCC: pip install opencc")

    monkeypatch.setattr(z, "opencc", missing)
    res = result_of(z.Scripter("zh", "simplified"), whisper_like(["這個|軟件|很好,", "我们|走吧."]))
    assert res["final"] == "這個軟件很好，我们走吧。"
    assert res["script"] == "as-is" and res["script_conversion"] is None and "pip install opencc" in res["script_note"]

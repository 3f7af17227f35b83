"""hasrctl eval: normalisation, edit distance, and a manifest whose numbers were computed by hand."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from hasrctl import evaluate as ev
from tests.cliutil import cli_env, hasrctl, show
from tests.daemon import Hasrd, write_wav


@pytest.mark.parametrize("text,norm", [
    ("今天天氣很好。", "今天天氣很好"), ("今天天气很好。", "今天天气很好"),  # the script stays, punctuation goes
    ("ＡＢＣ，你好！", "abc 你好"),  # full width -> half width, lower case; punctuation splits words
    ("我有25个苹果", "我有二十五个苹果"), ("我有二十五个苹果", "我有二十五个苹果"),  # numbers one way: Chinese
    ("2024年", "二零二四年"), ("百分之五十的人", "百分之五十的人"), ("50%的人", "百分之五十的人"),
    ("三点五米", "三点五米"), ("3.5米", "三点五米"), ("电话13812345678", "电话一三八一二三四五六七八"),
    ("1,000 people", "1000 people"), ("three dogs", "3 dogs"),
    ("Don't stop—now!", "don't stop now"),
])
def test_normalisation(text: str, norm: str) -> None:
    assert ev.normalize(text) == norm


@pytest.mark.parametrize("word", ["万州", "唯一", "一起", "十分", "三心二意", "千万", "第一"])
def test_numeral_characters_inside_ordinary_words_stay_characters(word: str) -> None:
    assert ev.normalize(word) == word


def test_bare_digits_against_a_chinese_reference_are_scored_as_numbers() -> None:
    # whisper often writes a Chinese count as digits: no CJK in the hypothesis, still Chinese numbers
    assert ev.score("一二三四五六七八九十。", "1, 2, 3, 4, 5, 6, 7, 8, 9, 10。", "cer") == (0, 10)
    assert ev.score("我有二十五个", "我有25个", "cer") == (0, 6)


def test_cer_agrees_with_jiwer_on_the_same_normalised_texts() -> None:
    import jiwer

    pairs = [("万州唯一的火车站在哪里？", "万洲唯一的火车站在哪里"), ("今天天气很好。", "今天天气很号"),
             ("我们一起去公园散步吧。", "我们一起去公园散步"), ("二零二四年三月", "2024年3月"),
             ("他说了三遍。", "他说了3遍还不够")]
    for ref, hyp in pairs:
        err, n = ev.score(ref, hyp, "cer")
        r, h = ("".join(ev.normalize(x).split()) for x in (ref, hyp))
        assert err / n == pytest.approx(jiwer.cer(r, h)), (ref, hyp)


def test_edit_distance_counts_substitutions_deletions_insertions() -> None:
    assert ev.edits(list("abc"), list("acd")) == 2
    assert ev.edits(list("abc"), []) == 3
    assert ev.edits([], list("xy")) == 2
    assert ev.edits(list("kitten"), list("sitting")) == 3


def test_homophones_compare_pinyin() -> None:
    assert ev.score("我有三个苹果", "我有3个平果", "cer") == (1, 6)
    assert ev.score("我有三个苹果", "我有3个平果", "cer", homophones=True) == (0, 6)


def test_metric_follows_language_or_script() -> None:
    assert ev.metric_for("你好", None) == "cer" and ev.metric_for("hello", None) == "wer"
    assert ev.metric_for("hello", "Chinese") == "cer" and ev.metric_for("你好", "English") == "wer"
    assert ev.metric_for("hello", "zh-TW") == ev.metric_for("hello", "yue") == ev.metric_for("hello", "ja") == "cer"
    assert ev.metric_for("你好", "en-US") == "wer"


# Hand-computed (see the comments): CER final 2/38, draft (only the last entry has one) 1/8, WER 2/5.
MANIFEST: list[dict[str, Any]] = [
    # 今天天氣很好 vs 今天天气很好: 1 substitution / 6 (氣 is not 气: the script is scored as received; 0 with
    # pinyin), and a script mismatch: reference traditional, hypothesis simplified
    {"name": "a", "text": "今天天氣很好。", "hypothesis": "今天天气很好"},
    # 我有三个苹果 vs 我有三个平果: 1 substitution / 6 (0 with pinyin: ping = ping)
    {"name": "b", "text": "我有三个苹果", "hypothesis": "我有3个平果"},
    # abc你好 vs abc你好: 0 / 5
    {"name": "c", "text": "ＡＢＣ，你好！", "hypothesis": "abc你好"},
    # hello world it's 2 pm vs hello word its 2 pm: 2 substitutions / 5 words
    {"name": "d", "text": "Hello, world! It's 2 PM.", "hypothesis": "hello word its 2 pm"},
    # 二零二四年有百分之五十的人 both: 0 / 13
    {"name": "e", "text": "二〇二四年有百分之五十的人", "hypothesis": "2024年有50%的人"},
    # final 我们去公园散步吧: 0 / 8; draft cut at "|": 我们去公园散步: 1 deletion / 8
    {"name": "f", "text": "我们去公园散步吧", "result": {"final": "我们去公园散步吧。",
                                                      "sent_windows": [{"text": "我们去公园散步|吧。"}]}},
]


def _write_manifest(path: str, entries: list[dict[str, Any]]) -> str:
    Path(path).write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in entries), encoding="utf-8")
    return path


def test_eval_gives_the_hand_computed_numbers(short_tmp: str) -> None:
    manifest = _write_manifest(os.path.join(short_tmp, "m.jsonl"), MANIFEST)
    res = hasrctl("eval", "--json", "--homophones", manifest, env=cli_env(short_tmp))
    assert res.returncode == 0, show(res)
    doc = json.loads(res.stdout)
    per = {f["name"]: f for f in doc["files"]}
    assert [per[n]["metric"] for n in "abcdef"] == ["cer", "cer", "cer", "wer", "cer", "cer"]
    assert [(per[n]["final"]["errors"], per[n]["final"]["ref"]) for n in "abcdef"] == [
        (1, 6), (1, 6), (0, 5), (2, 5), (0, 13), (0, 8)]
    assert per["a"]["final~py"]["errors"] == per["b"]["final~py"]["errors"] == 0
    assert per["a"]["script"] == {"reference": "traditional", "hypothesis": "simplified", "mismatch": True,
                                  "traditional": 0, "simplified": 1}
    assert per["b"]["script"]["mismatch"] is False and per["b"]["script"]["hypothesis"] == "simplified"
    assert per["c"]["script"]["hypothesis"] == "" and per["d"]["script"] is None
    assert (per["f"]["draft"]["errors"], per["f"]["draft"]["ref"]) == (1, 8)
    total = doc["total"]
    assert total["cer"]["final"] == {"errors": 2, "ref": 38, "rate": pytest.approx(2 / 38)}
    assert total["cer"]["script_mismatches"] == 1 and total["wer"]["script_mismatches"] == 0
    assert total["cer"]["final~py"]["rate"] == 0.0
    assert total["cer"]["draft"]["rate"] == pytest.approx(1 / 8)
    assert total["wer"]["final"]["rate"] == pytest.approx(0.4)


def test_eval_table_shows_final_and_draft_side_by_side(short_tmp: str) -> None:
    manifest = _write_manifest(os.path.join(short_tmp, "m.jsonl"), MANIFEST)
    res = hasrctl("eval", manifest, env=cli_env(short_tmp))
    assert res.returncode == 0, show(res)
    lines = res.stdout.splitlines()
    assert lines[0].split() == ["file", "metric", "ref", "final", "draft", "script"]
    assert lines[1].split() == ["a", "cer", "6", "0.1667", "-", "simplified≠traditional"]
    assert lines[2].split() == ["b", "cer", "6", "0.1667", "-", "simplified"]
    assert lines[3].split() == ["c", "cer", "5", "0.0000", "-", "either"]
    assert lines[4].split() == ["d", "wer", "5", "0.4000", "-", "-"]
    assert lines[6].split() == ["f", "cer", "8", "0.0000", "0.1250", "simplified"]
    assert lines[7].split() == ["TOTAL", "(5", "files)", "cer", "38", "0.0526", "0.1250", "1", "mismatched"]
    assert lines[8].split() == ["TOTAL", "(1", "file)", "wer", "5", "0.4000", "-"]
    warnings = [line for line in res.stderr.splitlines() if "script mismatch" in line]
    assert len(warnings) == 1 and warnings[0].startswith("hasrctl: a: script mismatch: the hypothesis is simplified")


def test_eval_scores_the_script_the_user_receives_and_says_when_it_differs(short_tmp: str) -> None:
    # whisper writes some traditional characters and ASCII commas into Mandarin: each one is an error now
    entries: list[dict[str, Any]] = [
        {"name": "zh", "text": "红皇日月营作陈苏列长。", "language": "zh",
         "result": {"engine": "whisper", "draft": "", "final": "紅皇日月營作陳蘇列長",
                    "sent_windows": [{"text": "紅皇日月營作陳蘇列長", "start_chunk": 0, "end_chunk": 9}]}},
        {"name": "tw", "text": "這個軟體很好", "hypothesis": "這個軟體很好"}]
    manifest = _write_manifest(os.path.join(short_tmp, "w.jsonl"), entries)
    res = hasrctl("eval", "--json", manifest, env=cli_env(short_tmp))
    assert res.returncode == 0, show(res)
    per = {f["name"]: f for f in json.loads(res.stdout)["files"]}
    assert (per["zh"]["final"]["errors"], per["zh"]["final"]["ref"]) == (5, 10)  # 紅 營 陳 蘇 長
    assert per["zh"]["script"] == {"reference": "simplified", "hypothesis": "traditional", "mismatch": True,
                                   "traditional": 5, "simplified": 0}
    assert "draft" not in per["zh"]  # an engine without a draft has no draft score
    assert per["tw"]["final"]["errors"] == 0 and per["tw"]["script"]["mismatch"] is False
    assert "zh: script mismatch: the hypothesis is traditional (5 traditional characters), the reference " \
           "simplified" in res.stderr and "tw: script" not in res.stderr
    table = hasrctl("eval", manifest, env=cli_env(short_tmp)).stdout.splitlines()
    assert table[0].split() == ["file", "metric", "ref", "final", "script"]  # no draft column at all
    assert table[1].split() == ["zh", "cer", "10", "0.5000", "traditional≠simplified"]
    assert table[3].split() == ["TOTAL", "(2", "files)", "cer", "16", "0.3125", "1", "mismatched"]


def test_eval_reads_tsv_and_reports_bad_manifests_as_usage_errors(short_tmp: str) -> None:
    env = cli_env(short_tmp)
    bad = Path(short_tmp, "bad.jsonl")
    bad.write_text('{"audio": "x.wav"}\n')
    res = hasrctl("eval", str(bad), env=env)
    assert res.returncode == 2 and "bad.jsonl:1" in res.stderr and "reference" in res.stderr
    assert hasrctl("eval", os.path.join(short_tmp, "nope.jsonl"), env=env).returncode == 2


def test_eval_transcribes_through_the_daemon(short_tmp: str) -> None:
    clips = os.path.join(short_tmp, "clips")
    os.mkdir(clips)
    write_wav(os.path.join(clips, "a.wav"), 2.0)
    manifest = Path(short_tmp, "m.tsv")
    # The fake engine says 今天天气很好。我们去公园散步 (its truncated "吧。" is cut): 1 deletion of 14 chars.
    manifest.write_text("# audio<TAB>reference\nclips/a.wav\t今天天气很好。我们去公园散步吧。\nclips/gone.wav\t你好\n",
                        encoding="utf-8")
    d = Hasrd(os.path.join(short_tmp, "s.sock"))
    try:
        res = hasrctl("eval", "--json", str(manifest), env=cli_env(short_tmp, HASR_SOCKET=d.sock))
    finally:
        assert d.stop() == 0
    assert res.returncode == 1, show(res)  # one entry could not be transcribed
    doc = json.loads(res.stdout)
    a, gone = doc["files"]
    assert a["name"] == "clips/a.wav" and a["final"]["errors"] == 1 and a["final"]["ref"] == 14
    assert a["draft"]["errors"] == 1
    assert gone["error"] and "gone.wav" in res.stderr
    assert doc["total"]["cer"]["final"]["rate"] == pytest.approx(1 / 14)

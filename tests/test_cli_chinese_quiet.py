"""Chinese subtitles say nothing but the transcript and hasr's own lines (issue 39 #6): where /tmp/jieba.cache
belonged to another user, every Chinese srt/vtt run printed jieba's traceback and rebuilt its dictionary. The
segmenter is rjieba now (no cache file, a wheel: no build warning at install). A real daemon (fake engine) and
hasrctl as a user without the rights that pass file permissions or a sticky directory's protection."""

from __future__ import annotations

import os
from pathlib import Path

from tests.cliutil import NO_OVERRIDE, cli_env, hasrctl, show
from tests.daemon import Hasrd, write_wav

SPEECH = "我们今天在会议室里讨论了关于下一个季度的市场推广计划和预算安排的问题。"


def test_a_chinese_srt_run_where_another_users_jieba_cache_sits_in_tmp_prints_only_the_transcript(
        short_tmp: str) -> None:
    tmp = Path(short_tmp) / "tmp"  # what /tmp is: sticky, anybody's
    tmp.mkdir()
    tmp.chmod(0o1777)
    os.chown(tmp, 65534, 65534)  # not ours, as /tmp is not a user's
    cache = tmp / "jieba.cache"
    cache.write_bytes(b"another user's cache")
    os.chown(cache, 65534, 65534)
    wav = write_wav(os.path.join(short_tmp, "a.wav"), 8.0)
    d = Hasrd(os.path.join(short_tmp, "s.sock"), env={"HASR_FAKE_SCRIPT": SPEECH})
    try:
        env = cli_env(short_tmp, HASR_SOCKET=d.sock, TMPDIR=str(tmp))
        res = hasrctl("transcribe", "-f", "srt", "-l", "zh", wav, env=env,
                      wrap=(NO_OVERRIDE[0], NO_OVERRIDE[1] + ",-fowner"))
        assert res.returncode == 0, show(res)
        assert len(res.stderr.splitlines()) == 1, show(res)  # the summary line, nothing else
        assert res.stderr.startswith(f"hasrctl: {wav}: ok, 8.0 s of audio"), show(res)
        lines = [ln for ln in res.stdout.splitlines() if ln and "-->" not in ln and not ln.isdigit()]
        assert "".join(lines) == SPEECH and len(lines) > 1  # cut into lines and cues
        assert all(not ln.startswith(("划", "算", "题")) for ln in lines), lines  # never inside 计划, 预算, 问题
        assert cache.read_bytes() == b"another user's cache" and sorted(os.listdir(tmp)) == ["jieba.cache"]
    finally:
        d.stop()

"""The hybrid engine's final stage under the daemon's stall watchdog (issue 21, defect 7).

HASR_ENGINE=hybrid with a scripted draft and the real faster-whisper on the CPU: a 25 s file whose script has
no end mark is one truncated window, so faster-whisper transcribes all 25 s in one call, far longer than
HASR_STALL_SEC=1 on this CPU. Before the heartbeat the worker was silent for that whole call and the job
ended in 504 ``stalled``; now the job completes and the fw text is the speech.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
from daemon import Hasrd
from speech import SR, load, model_dir
from test_engine_daemon import encode


def test_one_long_faster_whisper_window_does_not_trip_the_stall_watchdog(tmp_path: Path) -> None:
    gap = np.zeros(SR // 2, np.float32)
    clip = np.concatenate([load("zh_jishu"), gap, load("zh_pangrama"), gap, load("zh_nihao_shijie"), gap])
    pcm = np.tile(clip, int(np.ceil(25 * SR / len(clip))))[:25 * SR]
    wav = tmp_path / "long.flac"
    encode(pcm, wav, "flac", "flac", SR, "mono", False)
    sock = tmp_path / "s" if len(str(tmp_path)) < 90 else Path("/tmp") / f"h{os.getpid()}.sock"
    h = Hasrd(str(sock), env={"HASR_ENGINE": "hybrid", "HASR_DRAFT": "scripted", "HASR_FAKE_SCRIPT": "嗯" * 40,
                              "HASR_FW_MODEL": model_dir(), "HASR_FW_DEVICE": "cpu", "HASR_STALL_SEC": "1"})
    try:
        with h.client(600) as c:
            r = c.post("/transcribe", json={"audio_path": str(wav), "language": "Chinese"},
                       headers={"Accept": "application/x-ndjson"})
        assert r.status_code == 200, r.text
        events = [json.loads(line) for line in r.text.splitlines() if line.strip()]
        assert events[-1]["event"] == "done", (events[-1], h.log()[-3000:])
        result = events[-1]["result"]
    finally:
        h.stop()
    assert result["fw_calls"] == 1 and [w["truncated_by"] for w in result["sent_windows"]] == ["no_end_mark"]
    (s,) = result["per_sentence"]
    assert s["engine"] == "fw" and "嗯" not in s["text"] and len(s["text"]) > 40  # 25 s of speech, whisper's
    assert s["end_s"] == 25.0
    # the progress the worker kept sending while that one call ran (beats re-send the same position)
    progress = [e for e in events if e["event"] == "progress"]
    assert sum(1 for e in progress if e["done_s"] == e["total_s"] == 25.0) >= 2

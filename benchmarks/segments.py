"""What sentence-sized segments cost: batched decoding with word timing against batched decoding without it,
side by side in one run, on the accuracy corpus (benchmarks/corpus.py), and the shape of what comes out.

The whisper engine's batched pipeline now asks faster-whisper for word timestamps on every clip (word alignment
over the decoded tokens: the text is the same, the times are new), and cuts the clips' text at sentence ends and
pauses (hasrd/worker/resegment.py). Printed per file:

- ``plain s`` / ``words s``: the batched pipeline over the same VAD clips without and with word timestamps
  (best of ``--repeat``), and their ratio; ``same text``: whether the two decodes wrote the same text;
- ``clips``: the segments the old engine handed back (one per VAD clip); ``sentences``: the engine's segments
  now, their longest (s), and the subtitle cues of its SRT with their longest (s) and widest line.

    python benchmarks/segments.py [--corpus DIR] [--repeat 2] [--groups long_en,long_zh]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import corpus  # noqa: E402
from hasrd import config, formats, subtitles  # noqa: E402
from hasrd.audio import decode_to_array  # noqa: E402
from hasrd.worker.engine import NullEmitter  # noqa: E402
from hasrd.worker.engines.whisper import BATCHED_KW, WhisperEngine  # noqa: E402
from hasrd.worker.vad import merge_clips, speech_spans  # noqa: E402
from hasrd.worker.engines import load  # noqa: E402


def batched(engine: WhisperEngine, pcm: Any, code: str, words: bool, repeat: int) -> tuple[float, str, int]:
    """Best wall time of the batched pipeline over the engine's own clips, its text and its segment count."""
    from faster_whisper import BatchedInferencePipeline

    pipe = BatchedInferencePipeline(engine.model)
    clips = merge_clips(speech_spans(pcm))
    best, text, n = float("inf"), "", 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        segs, _info = pipe.transcribe(pcm, clip_timestamps=[{"start": a, "end": b} for a, b in clips],
                                      batch_size=engine.batch, vad_filter=False, language=code,
                                      word_timestamps=words, **BATCHED_KW)
        segs = list(segs)
        best = min(best, time.perf_counter() - t0)
        text, n = "".join(s.text for s in segs), len(segs)
    return best, text, n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, default=corpus.default_dir())
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--groups", default="long_en,long_zh")
    args = ap.parse_args()
    manifest = corpus.build(args.corpus)
    rows = [json.loads(line) for line in manifest.read_text().splitlines()]
    groups = set(args.groups.split(","))
    engine = WhisperEngine(config.load(), "", "cpu", "int8")
    load(engine, lambda _p: None)  # and its decode loop, as the worker builds them
    print(f"batch {engine.batch}; {len(rows)} corpus files, groups {sorted(groups)}")
    print(f"{'file':16} {'dur s':>6} {'plain s':>8} {'words s':>8} {'ratio':>6} {'same text':>9} {'clips':>5} "
          f"{'sentences':>9} {'longest':>7} {'cues':>5} {'cue max':>7} {'width':>5}")
    tot_plain = tot_words = 0.0
    for row in rows:
        if row.get("group") not in groups:
            continue
        pcm = decode_to_array(row["audio"])[0]
        code = row["language"]
        plain_s, plain_text, clips = batched(engine, pcm, code, False, args.repeat)
        words_s, words_text, _ = batched(engine, pcm, code, True, args.repeat)
        result = engine.transcribe(pcm, code, {}, NullEmitter(), lambda: False)
        segs = formats.segments(result)
        cues = subtitles.cues(segs)
        tot_plain, tot_words = tot_plain + plain_s, tot_words + words_s
        print(f"{Path(row['audio']).stem:16} {len(pcm) / 16000:6.1f} {plain_s:8.2f} {words_s:8.2f} "
              f"{words_s / plain_s:6.2f} {str(plain_text == words_text):>9} {clips:5d} {len(segs):9d} "
              f"{max(s['end'] - s['start'] for s in segs):7.1f} {len(cues):5d} "
              f"{max(c.end - c.start for c in cues):7.1f} {max(len(x) for c in cues for x in c.lines):5d}")
    if tot_plain:
        print(f"TOTAL decode time with word timing / without: {tot_words / tot_plain:.2f}")


if __name__ == "__main__":
    main()

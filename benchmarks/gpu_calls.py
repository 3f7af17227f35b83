"""What one CTranslate2 whisper call costs by batch size: the ceiling of batching many jobs' windows (issue 30).

Real 30 s windows of speech (cut from a corpus file), the calls faster-whisper's BatchedInferencePipeline makes
(encode, generate at beam 5 without timestamps, align), timed at batch sizes 1 ... 64 on one device. If a
call of N windows costs about N times one window's, batching jobs together cannot raise throughput and the time is
in the model; if it costs about the same, throughput is in the batches' sizes.

    python benchmarks/gpu_calls.py --model DIR --audio FILE [--device cuda] [--sizes 1,4,16,32,64] [--lanes 1,2,3,4]

The second table runs L calls of B windows at once (CTranslate2 with inter_threads = L: replicas that share the
weights, each on its own CUDA stream), against the same windows in one call after another: what the decode loop's
lanes (HASR_WORKER_STREAMS) can gain.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

import numpy as np

SR = 16000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--audio", required=True, help="a speech file of a few minutes (any format PyAV reads)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--compute-type", default="")
    ap.add_argument("--sizes", default="1,2,4,8,16,32,64")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--lanes", default="1,2,3,4", help="concurrent calls for the second table")
    ap.add_argument("--lane-sizes", default="8,16,32", help="windows a call in the second table")
    args = ap.parse_args()
    import ctranslate2
    from faster_whisper import WhisperModel, decode_audio

    model = WhisperModel(args.model, device=args.device,
                         compute_type=args.compute_type or ("float16" if args.device == "cuda" else "int8"))
    pcm = decode_audio(args.audio)
    windows = [pcm[i:i + 30 * SR] for i in range(0, len(pcm) - 30 * SR + 1, 30 * SR)]
    feats = [model.feature_extractor(w)[:, :3000] for w in windows]
    tok = model.hf_tokenizer
    prompt = [tok.token_to_id(t) for t in ("<|startoftranscript|>", "<|en|>", "<|transcribe|>",
                                           "<|notimestamps|>")]
    print(f"{len(windows)} windows of 30 s from {args.audio}; device {args.device}", flush=True)

    def stack(n: int) -> np.ndarray:
        return np.ascontiguousarray(np.stack([feats[i % len(feats)] for i in range(n)]))

    first = model.model.encode(ctranslate2.StorageView.from_array(stack(1)), to_cpu=False)
    model.model.generate(first, [prompt], beam_size=5)  # warm-up
    print(f"{'windows':>7} | {'encode':>9} | {'generate':>9} | {'align':>9} | ms a window (all three) | "
          "tokens a window")
    for n in (int(x) for x in args.sizes.split(",")):
        enc, gen, ali, toks = [], [], [], 0
        for _ in range(args.repeat):
            x = ctranslate2.StorageView.from_array(stack(n))
            t0 = time.perf_counter()
            out = model.model.encode(x, to_cpu=False)
            t1 = time.perf_counter()
            res = model.model.generate(out, [prompt] * n, beam_size=5, patience=1, length_penalty=1,
                                       max_length=448, return_scores=True, return_no_speech_prob=True,
                                       suppress_blank=True, suppress_tokens=[-1])
            t2 = time.perf_counter()
            texts = [r.sequences_ids[0] for r in res]
            model.model.align(out, prompt[:3], texts, [3000] * n, median_filter_width=7)
            t3 = time.perf_counter()
            enc.append(t1 - t0)
            gen.append(t2 - t1)
            ali.append(t3 - t2)
            toks = sum(len(t) for t in texts) // n
        e, g, a = (statistics.median(v) * 1000 for v in (enc, gen, ali))
        print(f"{n:>7} | {e:7.1f}ms | {g:7.1f}ms | {a:7.1f}ms | {(e + g + a) / n:7.2f} | {toks}", flush=True)
    del model
    print(f"\n{'lanes':>5} | {'windows a call':>14} | {'together':>9} | {'one after another':>17} | windows/s together")
    for lanes in (int(x) for x in args.lanes.split(",")):
        m = WhisperModel(args.model, device=args.device, num_workers=lanes,
                         compute_type=args.compute_type or ("float16" if args.device == "cuda" else "int8"))

        def call(n: int, m: WhisperModel = m) -> None:
            out = m.model.encode(ctranslate2.StorageView.from_array(stack(n)), to_cpu=False)
            m.model.generate(out, [prompt] * n, beam_size=5, max_length=448, return_scores=True,
                             return_no_speech_prob=True, suppress_blank=True, suppress_tokens=[-1])

        call(1)
        for n in (int(x) for x in args.lane_sizes.split(",")):
            t0 = time.perf_counter()
            for _ in range(lanes):
                call(n)
            one = time.perf_counter() - t0
            threads = [threading.Thread(target=call, args=(n,)) for _ in range(lanes)]
            t0 = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            both = time.perf_counter() - t0
            print(f"{lanes:>5} | {n:>14} | {both * 1000:7.0f}ms | {one * 1000:15.0f}ms | {lanes * n / both:8.0f}",
                  flush=True)
        del m


if __name__ == "__main__":
    main()

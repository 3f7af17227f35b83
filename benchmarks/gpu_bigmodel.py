"""A whisper-large-v3-sized CTranslate2 model with random weights, for the GPU run (benchmarks/gpu_real.py).

No large model can be downloaded on the GPU machine, and a real one's text is not what is measured there: loading,
VRAM and the encoder's speed depend on the shapes alone. transformers builds WhisperForConditionalGeneration from
large-v3's dimensions (d_model 1280, 32 + 32 layers, 20 heads, 128 mel bins) with random float16 weights, on the
GPU when there is one (seconds instead of minutes of CPU initialisation); CTranslate2's own Whisper loader turns it
into a spec, which takes the small model's vocabulary, languages and suppressed tokens (its tokenizer has 51865
tokens, large-v3's 51866: one fewer, the same sizes otherwise). Its text is meaningless.

    python benchmarks/gpu_bigmodel.py OUT_DIR SMALL_MODEL_DIR [LAYERS]   (LAYERS: 32; fewer for a rehearsal)
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import sys
import time


def main() -> int:
    out, small = sys.argv[1], sys.argv[2]
    layers = int(sys.argv[3]) if len(sys.argv) > 3 else 32
    import torch
    from ctranslate2.converters.transformers import WhisperLoader
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    with open(os.path.join(small, "config.json")) as f:
        base = json.load(f)
    with open(os.path.join(small, "vocabulary.txt"), encoding="utf-8") as f:
        vocab = f.read().split("\n")
    if vocab and vocab[-1] == "":
        vocab.pop()  # the file's last newline (one token in the middle is the empty string: keep it)
    cfg = WhisperConfig(vocab_size=len(vocab), num_mel_bins=128, d_model=1280, encoder_layers=layers,
                        decoder_layers=layers, encoder_attention_heads=20, decoder_attention_heads=20,
                        encoder_ffn_dim=5120, decoder_ffn_dim=5120, max_source_positions=1500, max_target_positions=448)
    t0 = time.monotonic()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.device(device):
        model = WhisperForConditionalGeneration(cfg).to(torch.float16).eval()
    print(f"random model: {sum(p.numel() for p in model.parameters()) / 1e9:.2f} B parameters on {device} in "
          f"{time.monotonic() - t0:.1f} s", flush=True)
    model = model.to("cpu")
    spec = WhisperLoader().get_model_spec(model)
    spec.config.suppress_ids = base.get("suppress_ids", [])
    spec.config.suppress_ids_begin = base.get("suppress_ids_begin", [])
    spec.config.lang_ids = base.get("lang_ids", [])
    spec.config.alignment_heads = [list(x) for x in itertools.product(range(layers // 2, layers), range(20))][:20]
    spec.register_vocabulary(vocab)
    spec.validate()
    spec.optimize(quantization="float16")
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)
    spec.save(out)
    shutil.copy(os.path.join(small, "tokenizer.json"), out)
    with open(os.path.join(out, "preprocessor_config.json"), "w") as f:
        json.dump({"feature_size": 128, "sampling_rate": 16000, "hop_length": 160, "chunk_length": 30,
                   "n_fft": 400}, f)
    size = sum(os.path.getsize(os.path.join(out, x)) for x in os.listdir(out))
    print(f"saved {out}: {size / 2**20:.0f} MB in {time.monotonic() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

#!/usr/bin/env bash
# On the GPU machine, in the last call of benchmarks/gpu_carry.py's plan: what the earlier calls left in /tmp/stash
# plus this call's folder ($1) become /tmp/site (the wheels), /tmp/model (the embedded whisper base, sha256 checked)
# and /tmp/audio. /tmp/cu12 holds the two cuBLAS links that faster-whisper called directly by the benchmark needs on a
# CUDA 13-only image (../shared/notes/gpu.md); hasrd's own workers get theirs from HASR_CUBLAS_FROM_CUDA13.
set -euo pipefail
S=/tmp/stash
mkdir -p "$S" /tmp/model /tmp/audio /tmp/cu12
cp "$1"/* "$S"/
for first in "$S"/*.whl.part000; do  # a wheel carried in pieces (Ray's): joined before it is installed
  [ -e "$first" ] || continue
  whl=${first%.part000}
  cat $(ls "$whl".part* | sort) > "$whl"
done
if [ ! -f /tmp/site/.done ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$S"/*.whl
  touch /tmp/site/.done
fi
if [ ! -f /tmp/model/model.bin ] || ! (cd /tmp/model && echo "$(cat $S/model.sha256)  model.bin" | sha256sum -c --quiet); then
  cat $(ls "$S"/model.bin.* | sort) > /tmp/model/model.bin
  (cd /tmp/model && echo "$(cat $S/model.sha256)  model.bin" | sha256sum -c --quiet) || { echo "model.bin: sha256 differs" >&2; exit 3; }
fi
cp "$S"/config.json "$S"/tokenizer.json "$S"/vocabulary.txt /tmp/model/
cp "$S"/*.flac "$S"/*.txt /tmp/audio/
L=$(ls -d /usr/local/cuda-13*/targets/x86_64-linux/lib 2>/dev/null | head -1)
if [ -n "$L" ]; then
  ln -sf "$L/libcublas.so.13" /tmp/cu12/libcublas.so.12
  ln -sf "$L/libcublasLt.so.13" /tmp/cu12/libcublasLt.so.12
fi
echo "setup: $(ls /tmp/site | wc -l) entries in /tmp/site, model $(du -m /tmp/model/model.bin | cut -f1) MB, audio: $(ls /tmp/audio | tr '\n' ' ')"

"""Carry what benchmarks/gpu_real.py needs to the lent GPU machine, in pieces a call can take.

The GPU machine (one H200, Python 3.12, CUDA 13 only) reaches no network, and each call carries at most 64 MiB
with the working tree. It lacks ctranslate2, faster-whisper, PyAV, msgspec, the ASGI stack and the model
(../shared/notes/gpu.md). This fills ``.gpu/c1`` ... ``.gpu/cN`` (ignored by git), each under --mb megabytes:
cp312 wheels, the embedded model's files (model.bin in pieces) and the benchmark's audio (benchmarks/corpus.py
--long, as FLAC, with transcripts), then prints the calls to make back to back (a machine goes back 30 s after
a call and a fresh one starts bare; files under /tmp there outlive a call while it is warm).

    python benchmarks/gpu_carry.py [--mb 58] [--ray]

Then, for each folder K but the last: ``mkdir -p /tmp/stash && cp .gpu/cK/* /tmp/stash/``, carrying ``.gpu/cK``;
the last call carries ``.gpu/cN`` and runs ``bash benchmarks/gpu_setup.sh .gpu/cN && <the benchmark>`` (the
setup installs the wheels into /tmp/site, joins and checks the model into /tmp/model, and puts the audio into
/tmp/audio). The working tree itself travels with every call: the benchmark runs the project's own code.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WHEELS = ["ctranslate2==4.8.5", "faster-whisper==1.2.1", "av==14.2.0", "msgspec", "starlette", "uvicorn",
          "python-multipart", "websockets", "pysubs2", "opencc", "rjieba"]
RAY = ["ray[data]==2.60.0", "jsonschema", "jsonschema-specifications", "referencing", "rpds-py"]
AUDIO = ["en_long_5min", "en_long_1min", "zh_long_1min", "zh_long_3min", "zh_long_5min"]


def download(dest: Path, names: list[str]) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    plat = [x for p in ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
            for x in ("--platform", p)]
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--python-version", "3.12", "--implementation", "cp", *plat, "-d", str(dest), *names],
                   check=True)


def audio(dest: Path, corpus_dir: Path) -> None:
    """The long corpus files as FLAC (a third of the WAV's size) with their transcripts."""
    if not (corpus_dir / "en_long_5min.wav").exists():
        subprocess.run([sys.executable, str(REPO / "benchmarks" / "corpus.py"), "--long", "--dir", str(corpus_dir)],
                       check=True)
    dest.mkdir(parents=True, exist_ok=True)
    for name in AUDIO:
        subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-i", str(corpus_dir / f"{name}.wav"),
                        str(dest / f"{name}.flac")], check=True)
        shutil.copy(corpus_dir / f"{name}.txt", dest / f"{name}.txt")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=58.0, help="megabytes a folder at most (the tree travels too)")
    ap.add_argument("--ray", action="store_true", help="carry Ray too (about 80 MB more: two more calls)")
    ap.add_argument("--corpus", default=os.path.expanduser("~/.cache/hasr-bench/corpus"))
    a = ap.parse_args()
    from hasrd import embedded

    root = REPO / ".gpu"
    work = root / "work"
    for d in root.glob("c[0-9]*"):
        shutil.rmtree(d)
    download(work / "wheels", WHEELS + (RAY if a.ray else []))
    audio(work / "audio", Path(a.corpus))
    model = Path(embedded.ensure().path)
    cap = int(a.mb * 1_000_000)
    items: list[tuple[Path, int]] = sorted(((w, w.stat().st_size) for w in (work / "wheels").glob("*.whl")),
                                           key=lambda x: -x[1])
    small = [p for p in sorted(model.iterdir()) if p.is_file() and p.name not in ("model.bin", ".hasr-verified")]
    tail = small + sorted((work / "audio").iterdir())
    folders: list[list[tuple[str, Path | tuple[int, int] | tuple[Path, int, int]]]] = [[]]
    room = [cap]
    for w, size in items:
        k = next((i for i, r in enumerate(room) if r >= size), None)
        if k is None and size > cap:  # Ray's wheel: in pieces (w.part000, ...), joined by gpu_setup.sh
            for i, at in enumerate(range(0, size, cap)):
                folders.append([(f"{w.name}.part{i:03d}", (w, at, min(cap, size - at)))])
                room.append(cap - min(cap, size - at))
            continue
        if k is None:
            folders.append([])
            room.append(cap)
            k = len(room) - 1
        folders[k].append((w.name, w))
        room[k] -= size
    big = model / "model.bin"
    total, off, k = big.stat().st_size, 0, 0
    while off < total:
        if k == len(folders):
            folders.append([])
            room.append(cap)
        n = min(total - off, room[k])
        if n >= 1_000_000 or n == total - off:
            folders[k].append((f"model.bin.{off:012d}", (off, n)))
            room[k] -= n
            off += n
        k += 1
    need = sum(p.stat().st_size for p in tail)
    if room[-1] < need:
        folders.append([])
        room.append(cap)
    folders[-1] += [(p.name, p) for p in tail]
    with open(big, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    for i, items_ in enumerate(folders, 1):
        d = root / f"c{i}"
        d.mkdir(parents=True)
        for name, src in items_:
            if isinstance(src, tuple):
                path, at, length = (big, *src) if len(src) == 2 else src
                with open(path, "rb") as f_in, open(d / name, "wb") as f_out:
                    f_in.seek(at)
                    f_out.write(f_in.read(length))
            else:
                shutil.copy(src, d / name)
        (d / "model.sha256").write_text(digest + "\n")
        print(f".gpu/c{i}: {sum((d / n).stat().st_size for n, _ in items_) / 1e6:.1f} MB, {len(items_)} files")
    n = len(folders)
    print(f"\nCalls, back to back (carry .gpu/cK in call K):\n  1..{n - 1}: mkdir -p /tmp/stash && cp .gpu/cK/* "
          f"/tmp/stash/\n  {n}: bash benchmarks/gpu_setup.sh .gpu/c{n} && <run>, where <run> starts with\n"
          "      export PYTHONPATH=$PWD:/tmp/site LD_LIBRARY_PATH=/tmp/cu12:$LD_LIBRARY_PATH "
          "HASR_BENCH_LINKS=/tmp/cu12\n"
          "      python3 benchmarks/gpu_real.py --model /tmp/model --audio /tmp/audio --out $OUT")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

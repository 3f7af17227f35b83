"""GPU placement and VRAM accounting through the real daemon, on a GPU host (issue 2).

Starts `hasrd --engine fake` with HASR_FAKE_ALLOC_MB (the fake worker allocates that much with torch),
HASR_GPU given as the GPU's UUID and HASR_NEED_VRAM_MB, then: /api/load; checks the worker got
CUDA_VISIBLE_DEVICES=<index> with CUDA_DEVICE_ORDER=PCI_BUS_ID; reads /api/ps's vram_mb against NVML's used
memory; /api/unload; reads used memory again. Also: a HASR_NEED_VRAM_MB larger than the card gives a clear
load failure after HASR_VRAM_WAIT_SEC.

    python benchmarks/gpu_daemon.py [--mb 3072]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from hasrd.gpu import list_gpus  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _uds import http_json  # noqa: E402


def start(sock: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-m", "hasrd.server", "--socket", sock],
                            env={**os.environ, "HASR_ENGINE": "fake", **env})
    for _ in range(200):
        if os.path.exists(sock):
            return proc
        time.sleep(0.05)
    raise SystemExit("hasrd did not start")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=3072)
    args = ap.parse_args()
    gpus = list_gpus()
    if not gpus:
        raise SystemExit("no GPU")
    g = gpus[-1]
    base = tempfile.mkdtemp(prefix="hg", dir="/tmp")
    sock = os.path.join(base, "s.sock")
    used0 = g.total_mb - g.free_mb if g.total_mb and g.free_mb is not None else 0
    proc = start(sock, {"HASR_FAKE_ALLOC_MB": str(args.mb), "HASR_GPU": g.uuid, "HASR_NEED_VRAM_MB": "1000"})
    try:
        code, ps = http_json(sock, "POST", "/api/load")
        assert code == 200, ps
        with open(f"/proc/{ps['pid']}/environ", "rb") as f:
            env = dict(x.split(b"=", 1) for x in f.read().split(b"\0") if b"=" in x)
        code, ps = http_json(sock, "GET", "/api/ps")
        g1 = next(x for x in list_gpus() if x.index == g.index)
        used1 = g1.total_mb - g1.free_mb if g1.total_mb and g1.free_mb is not None else 0
        print(f"HASR_GPU={g.uuid} -> CUDA_VISIBLE_DEVICES={env.get(b'CUDA_VISIBLE_DEVICES', b'?').decode()} "
              f"CUDA_DEVICE_ORDER={env.get(b'CUDA_DEVICE_ORDER', b'?').decode()} (index {g.index}); "
              f"identity device {ps['identity'].get('device')}")
        print(f"loaded {args.mb} MB: /api/ps vram_mb={ps['vram_mb']}, NVML used {used0} -> {used1} MB "
              f"(+{used1 - used0})")
        http_json(sock, "POST", "/api/unload")
        time.sleep(1.0)
        g2 = next(x for x in list_gpus() if x.index == g.index)
        used2 = g2.total_mb - g2.free_mb if g2.total_mb and g2.free_mb is not None else 0
        print(f"after /api/unload: NVML used {used2} MB (residue {used2 - used0:+d} MB)")
    finally:
        proc.terminate()
        proc.wait(30)
    sock2 = os.path.join(base, "t.sock")
    proc = start(sock2, {"HASR_NEED_VRAM_MB": str(10 ** 7), "HASR_VRAM_WAIT_SEC": "2"})
    try:
        t0 = time.monotonic()
        code, err = http_json(sock2, "POST", "/api/load")
        print(f"HASR_NEED_VRAM_MB=10^7: {code} after {time.monotonic() - t0:.1f} s: {err['error']['message']}")
    finally:
        proc.terminate()
        proc.wait(30)


if __name__ == "__main__":
    main()

"""OpenCC for hasr's Chinese script conversion: the official ``opencc`` wheels (C++) against the pure-Python
``opencc-python-reimplemented`` (issue 18).

Both install the same import name ``opencc``, so they cannot live in one environment: each is measured in its
own fresh interpreter, the official one from a ``pip install --target DIR opencc`` folder (``--official DIR``),
the reimplementation from wherever it is importable (``--reimplemented DIR``, default: this interpreter's
site-packages; skipped when the installed ``opencc`` is the official one and no folder is given).

Per package, in a fresh process: the import (ms), building each converter hasr uses (t2s, s2t, s2twp, s2hk; ms),
the first conversion (tables are read lazily by the reimplementation), then the median of ``--runs``
conversions of a ``--chars``-character text (the accuracy corpus's Mandarin sentences, written in traditional
for t2s), as characters per second, and the process's RSS growth over the bare interpreter (MiB). Both outputs
of every conversion are compared: the table says how many characters differ between the two packages.

    pip install --target /tmp/opencc-official opencc
    python benchmarks/zh_script.py --official /tmp/opencc-official [--chars 5000] [--runs 20]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.corpus import ZH  # noqa: E402

CONFIGS = ("t2s", "s2t", "s2twp", "s2hk")

# The measurement, run by a fresh interpreter with the package under test first on sys.path.
PROBE = r"""
import json, os, statistics, sys, time

def rss_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0

args = json.loads(sys.argv[1])
rss0 = rss_mib()
t0 = time.perf_counter()
import opencc
t_import = time.perf_counter() - t0
out = {"file": opencc.__file__, "import_ms": t_import * 1e3, "configs": {}}
for name in args["configs"]:
    t0 = time.perf_counter()
    try:
        conv = opencc.OpenCC(name)
    except Exception:
        conv = opencc.OpenCC(name + ".json")
    t_build = time.perf_counter() - t0
    text = args["texts"][name]
    t0 = time.perf_counter()
    first = conv.convert(text)
    t_first = time.perf_counter() - t0
    times = []
    for _ in range(args["runs"]):
        t0 = time.perf_counter()
        conv.convert(text)
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    out["configs"][name] = {"build_ms": t_build * 1e3, "first_ms": t_first * 1e3, "median_ms": med * 1e3,
                            "chars_per_s": len(text) / med if med else float("inf"), "output": first}
out["rss_mib"] = rss_mib() - rss0
print(json.dumps(out, ensure_ascii=False))
"""


def texts(chars: int) -> dict[str, str]:
    """The same sentences per configuration, in the script that configuration converts from."""
    simplified = ""
    while len(simplified) < chars:
        simplified += "".join(ZH)
    simplified = simplified[:chars]
    import opencc  # whichever is installed: only to make the traditional input for t2s

    traditional = str(opencc.OpenCC("s2t").convert(simplified))
    return {name: traditional if name.startswith("t") else simplified for name in CONFIGS}


def measure(path: str | None, chars: int, runs: int) -> dict[str, Any]:
    env = dict(os.environ)
    if path:
        env["PYTHONPATH"] = os.pathsep.join([path, *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]])
    arg = json.dumps({"configs": CONFIGS, "texts": texts(chars), "runs": runs}, ensure_ascii=False)
    res = subprocess.run([sys.executable, "-c", PROBE, arg], env=env, capture_output=True, text=True, check=True)
    return json.loads(res.stdout)  # type: ignore[no-any-return]


def installed() -> str:
    """Which distribution provides the importable ``opencc`` here."""
    from importlib.metadata import PackageNotFoundError, version

    for dist in ("opencc-python-reimplemented", "OpenCC"):
        try:
            return f"{dist} {version(dist)}"
        except PackageNotFoundError:
            continue
    return "none"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--official", metavar="DIR", help="a `pip install --target DIR opencc` folder")
    ap.add_argument("--reimplemented", metavar="DIR", help="a folder holding opencc-python-reimplemented")
    ap.add_argument("--chars", type=int, default=5000)
    ap.add_argument("--runs", type=int, default=20)
    a = ap.parse_args()
    here = installed()
    results: dict[str, dict[str, Any]] = {}
    if a.reimplemented or here.startswith("opencc-python-reimplemented"):
        results["reimplemented"] = measure(a.reimplemented, a.chars, a.runs)
    if a.official or here.startswith("OpenCC"):
        results["official"] = measure(a.official if a.official else None, a.chars, a.runs)
    if not results:
        print("no opencc found: pip install opencc-python-reimplemented, or --official DIR", file=sys.stderr)
        return 2
    print(f"{a.chars} characters, median of {a.runs} conversions; installed here: {here}")
    for label, r in results.items():
        print(f"\n{label}: {r['file']}\n  import {r['import_ms']:.1f} ms, RSS +{r['rss_mib']:.1f} MiB "
              f"(import, 4 converters, conversions)")
        print(f"  {'config':<7} {'build ms':>9} {'first ms':>9} {'median ms':>10} {'chars/s':>12}")
        for name, c in r["configs"].items():
            print(f"  {name:<7} {c['build_ms']:>9.1f} {c['first_ms']:>9.1f} {c['median_ms']:>10.2f} "
                  f"{c['chars_per_s']:>12,.0f}")
    if len(results) == 2:
        print("\nofficial / reimplemented:")
        o, r = results["official"], results["reimplemented"]
        print(f"  import x{o['import_ms'] / r['import_ms']:.2f}, "
              f"RSS growth x{o['rss_mib'] / max(r['rss_mib'], 1e-9):.2f}")
        for name in CONFIGS:
            oc, rc = o["configs"][name], r["configs"][name]
            differ = (sum(x != y for x, y in zip(oc["output"], rc["output"], strict=False))
                      + abs(len(oc["output"]) - len(rc["output"])))
            print(f"  {name:<7} speed x{oc['chars_per_s'] / rc['chars_per_s']:.1f}, "
                  f"build+first x{(oc['build_ms'] + oc['first_ms']) / (rc['build_ms'] + rc['first_ms']):.2f}, "
                  f"{differ} of {len(rc['output'])} characters differ")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""docs/CONFIG.md, generated from hasrd/config.py's definitions (``python3 -m hasrd.configdoc --markdown``): a test
fails when the committed file differs, so the reference cannot drift from the code. Besides the tables it carries
the measured figures behind settings whose defaults were chosen by measurement. It imports config, never the
other way round."""

from __future__ import annotations

import sys

from hasrd.config import (CHOICES, DEPRECATED, NOT_SETTINGS, NOT_SETTINGS_DOC, RETIRED, TRAY_KEYS, Settings,
                          env_name, toml_value)

PARALLEL_ROWS = [
    ("2-core CPU, 1 worker", "a 5 s file sent 3 s after a 270 s file: answered after",
     "4.8 s (2.7 s in an earlier run), the long file's text unchanged", "24.1 s (load 2.4)"),
    ("2-core CPU, 1 worker", "4 files of 25 s together / one after another", "x0.81 wall (x0.95 earlier)",
     "x0.97 (load 2.8)"),
    ("2-core CPU, 1 worker", "a live session opened beside a 270 s file: its first utterance's first words after "
     "the onset", "2.7 / 2.9 / 3.0 s (three runs)", "25.4 s"),
    ("2-core CPU, 1 worker", "30 s of live clips beside a 270 s file: each clip's first words",
     "median 8.4-10.2 s (it falls behind: two cores cannot decode both in real time)", "median 20.0 s"),
    ("2-core CPU, 1 worker", "its memory with 1 / 4 jobs of 60 min, 4 jobs of 5 min (benchmarks/parallel_memory.py)",
     "heap 561 / 1252 / 1362 MB, PCM maps 217 / 865 / 264 MB: the heap grows about 230 MB a job whatever the "
     "audio's length; a job's PCM is 4 bytes a sample, so at most HASR_MAX_AUDIO_SEC's worth", ""),
    ("2-core CPU", "4 files of 40 s in one worker, alone then together",
     "texts, times and words identical; x1.07-1.24 throughput", ""),
    ("H200, 1 worker", "16 files of 300 s together / one after another",
     "throughput x2.17 (10.6 / 23.1 s; x1.88-2.08 in other runs, x2.02 with English-only files; x1.37 with one "
     "stream)", "x0.94 (20.9 / 19.7 s)"),
    ("H200, 1 worker", "a 5 s file sent 3 s after 16 files of 300 s",
     "0.47 s (0.34-0.98 s in other runs; 3.4 s with one stream)", "13.7 s"),
    ("H200, 1 worker", "16 live sessions beside those 16 files: first words / finals after the sentence",
     "median 0.53 / 0.48 s, p90 0.75 / 1.12 s (final code: 0.49 / 0.61 s, p90 0.86 / 0.97 s; with 16 jobs a "
     "worker the sessions queued behind the files: p90 "
     "3.4-4.5 s; one stream: p90 5.6 / 2.4 s)", "7 of 8 sessions waited 25 s"),
    ("H200, 1 worker", "16 files of 300 s, alone then together (float16, 3 streams)",
     "5 of 16 texts identical; the others differ in a few words where whisper hesitates", ""),
    ("H200", "CTranslate2 beam-5 calls of 32 windows, 1 / 2 / 3 / 4 at once (benchmarks/gpu_calls.py)",
     "65 / 107 / 148 / 179 windows a second", ""),
    ("H200, 1 worker", "worker_streams 2 / 3 / 4: 16 files together, throughput",
     "x1.53 / x1.93-2.17 / x2.08 (live p90 with 16 jobs a worker 7.4 / 4.5 / 3.5 s)", ""),
]

PARALLEL_NOTES = """\
- On the CPU batching gains little (two cores are busy either way); what parallel jobs buy is that a short
  file or a live session is served between a long file's steps instead of after it. Defaults: 4 jobs a CPU
  worker, 8 windows a step (4 jobs x the CPU's clip batch of 2). A live session that must keep up with real
  time beside a long file does better on a worker of its own: the pool starts a second worker (HASR_MAX_WORKERS,
  2 on a CPU-only machine) before it packs jobs into one.
- On the H200 one beam-5 call costs nearly the same for 1 window as for 16 (127 and 220 ms for windows of about
  70 tokens; 32 windows 324 ms), but a 5-minute file alone already sends its 10-11 windows in one call, so
  stacking jobs into bigger calls gained only x1.4. Several calls at once gain more: CTranslate2 runs
  `worker_streams` replicas that share the weights, each on its own CUDA stream (1 to 4 calls of 32 windows: 65
  to 179 windows a second). Defaults on a GPU: 3 streams (2 did worse; 4 gave the same throughput and costs a
  fourth replica's working memory), two for files and one kept for live sessions and short files, which then
  never wait for a file's call; 32 windows a step (a call of 64 took 3.6 times as long as one of 32); 32 jobs
  a worker, so that 16 live sessions are admitted beside 16 files instead of queueing behind them.
- Why x2.2 and not x3: the best the GPU's calls allow is about 5.6 ms a window (4 streams of 32) against 18 ms
  in a lone file's call, x3.2 for generate alone; each file also spends about a third of its time alone on the CPU
  (VAD, mel spectrograms, word timing in Python), and its steps wait on one another (encode, generate, align,
  then its next batch), so 16 files cannot keep the streams full. English-only files gave the same x2.0: the
  Mandarin read as English is not the cause.
- Float16 on a GPU: cuBLAS picks kernels by the batch's shape, so a window batched with other jobs' windows can
  decode differently where whisper is unsure (espeak-ng Mandarin heard as English), as faster-whisper's own batch
  size does. On the CPU (int8) the results are bit-identical."""


def parallel_figures() -> list[str]:
    out = ["## One worker, many jobs: the figures behind worker_parallel, worker_batch and worker_streams", "",
           "A worker holds up to `worker_parallel` jobs and decodes their windows in batches of up to `worker_batch`,",
           "up to `worker_streams` batches at once (docs/ARCHITECTURE.md \"One worker, many jobs\"). Measured with",
           "`benchmarks/parallel.py`, `benchmarks/batch_same_text.py`, `benchmarks/gpu_calls.py` and",
           "`benchmarks/pool.py` (2026-12-03, whisper base):", "",
           "| where | figure | parallel jobs | one job at a time |", "| --- | --- | --- | --- |"]
    out += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in PARALLEL_ROWS]
    return [*out, "", *PARALLEL_NOTES.splitlines()]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown() -> str:
    """docs/CONFIG.md, made from the definitions above (``python3 -m hasrd.configdoc --markdown``); a test fails
    when the committed file differs, so the reference cannot drift from the code."""
    out = [
        "# Configuration reference",
        "",
        "<!-- Generated by `python3 -m hasrd.configdoc --markdown > docs/CONFIG.md` from hasrd/config.py; "
        "do not edit by hand. -->",
        "",
        "Every setting of the daemon (`hasrd`), also read by `hasrctl` and `hasr-tray` where they need it, is",
        "",
        "- an environment variable `HASR_<NAME>` (the name upper-cased), or",
        "- a key `<name>` in `$XDG_CONFIG_HOME/hasr/config.toml` (`~/.config/hasr/config.toml` by default),",
        "",
        "and the environment wins over the file, the file over the default. An empty environment variable counts",
        "as unset. `hasrctl doctor` prints each setting's effective value, where it came from and what it means.",
        "",
        "```toml",
        "# ~/.config/hasr/config.toml",
        "engine = \"whisper\"",
        "idle_ttl_sec = 600",
        "fw_model = \"large-v3\"",
        "",
        "[tray]",
        "format = \"srt\"",
        "```",
        "",
        "Values are checked when the settings are loaded: a value of the wrong type, an unknown key in",
        "config.toml (with the closest name suggested) or a word outside a setting's choices stops `hasrd` with",
        "exit status 2 and a message naming the setting. Booleans take 1 / true / yes / on and 0 / false / no /",
        "off. An unknown `HASR_*` variable is not an error (the environment is shared with hasrctl and the",
        "tests): hasrd logs it and `hasrctl doctor` warns, with the closest name.",
        "",
        "Without `XDG_RUNTIME_DIR` (no systemd login session) the socket is `/tmp/hasr-$UID/hasr/hasrd.sock`;",
        "hasrd makes both directories private (0700) and refuses them when another user owns them.",
        "",
        "## Settings",
        "",
        "| config.toml key | environment variable | type | default | since | meaning |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for s in Settings.describe():
        out.append(f"| `{s.name}` | `{env_name(s.name)}` | {s.kind} | `{toml_value(s.default)}` | {s.since} | "
                   f"{_cell(s.help)} |")
    out += ["", "Settings that take one of a few words:", ""]
    out += [f"- `{name}`: {', '.join(f'`{v}`' for v in allowed)}" for name, allowed in CHOICES.items()]
    out += ["", "Retired settings (a config.toml key of these names is an error that names the replacement):", ""]
    out += [f"- `{old}` (`{env_name(old)}`): replaced by `{new}`" for old, new in RETIRED.items()]
    out += ["", "Deprecated names (still read, with a warning; the environment wins over the file as for any "
                "setting, and the new name over the old one in the same place):", ""]
    out += [f"- `{old}` (`{env_name(old)}`): read as `{new}` (`{env_name(new)}`)" for old, new in DEPRECATED.items()]
    out += ["", *parallel_figures()]
    out += [
        "",
        "## The [tray] table",
        "",
        "`hasr-tray` takes the daemon's socket and `language` from the settings above, and its own settings from",
        "`HASR_TRAY_<NAME>` variables, else the `[tray]` table of config.toml, else the default. A bad value",
        "falls back to the default.",
        "",
        "| [tray] key | environment variable | default | since | meaning |",
        "| --- | --- | --- | --- | --- |",
    ]
    for k in TRAY_KEYS:
        out.append(f"| `{k.name}` | `HASR_TRAY_{k.name.upper()}` | `{toml_value(k.default)}` | {k.since} | "
                   f"{_cell(k.help)} |")
    out += [
        "",
        "## HASR_* variables that are not settings",
        "",
        "These are the defaults of command-line options (click's `envvar`: the option on the command line",
        "wins) and test knobs; they are not read from config.toml, and hasrd does not warn about them.",
        "`hasrctl <command> --help` shows each option's variable.",
        "",
        "| variable (or prefix) | what it is |",
        "| --- | --- |",
    ]
    out += [f"| `{name}{'*' if name.endswith('_') else ''}` | {_cell(NOT_SETTINGS_DOC[name])} |"
            for name in NOT_SETTINGS]
    out += ["", "`HASR_SOCKET` and `HASR_LANGUAGE` are settings that hasrctl also takes as its `--socket` and",
            "`--language` defaults.", ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """``python3 -m hasrd.configdoc --markdown``: print docs/CONFIG.md."""
    args = sys.argv[1:] if argv is None else argv
    if args != ["--markdown"]:
        print("usage: python3 -m hasrd.configdoc --markdown > docs/CONFIG.md", file=sys.stderr)
        return 2
    sys.stdout.write(markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

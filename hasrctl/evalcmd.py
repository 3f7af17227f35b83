"""The ``eval`` command: read a manifest, transcribe what it names, print CER/WER per file and in total.

Manifest: JSON Lines (``{"audio": "a.wav", "text": "reference", "language": "Chinese"}``), a JSON array of the
same objects, or TSV lines ``audio<TAB>reference``; ``#`` starts a comment. Relative paths are relative to the
manifest. An entry may bring its own ``hypothesis`` (text) or ``result`` (a result object, or the path of a
saved ``-f json``/``verbose_json``/result file): such entries are scored without a daemon.

Chinese is scored in the script the user received (no traditional -> simplified conversion): a ``script``
column (and ``script`` in --json) says which script each hypothesis is in, and a hypothesis in another script
than its reference is reported on stderr as a script mismatch (``--homophones`` compares sounds, whatever the
script).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from typing import Any

import click

from hasrctl.client import EXIT_FAILED, EXIT_OK, CliError, Client, Unreachable, UsageError
from hasrctl.common import Daemon, daemon_options, say


@dataclass
class Entry:
    name: str
    audio: str | None
    reference: str
    language: str | None = None
    hypothesis: str | None = None
    result: dict[str, Any] | None = None
    scores: dict[str, tuple[int, int]] = field(default_factory=dict)
    metric: str = "cer"
    error: str | None = None
    script: dict[str, Any] | None = None


def _first(obj: dict[str, Any], *keys: str) -> Any:
    return next((obj[k] for k in keys if obj.get(k) is not None), None)


def _entry(obj: dict[str, Any], base: str, where: str) -> Entry:
    audio = _first(obj, "audio", "audio_path", "path", "file")
    ref = _first(obj, "text", "reference", "ref", "transcript")
    if ref is None:
        raise UsageError(f"{where}: no reference text (key 'text')")
    if audio is not None:
        audio = os.path.join(base, os.path.expanduser(str(audio)))
    result = obj.get("result")
    if isinstance(result, str):
        path = os.path.join(base, result)
        try:
            with open(path, encoding="utf-8") as f:
                result = json.load(f)
        except (OSError, ValueError) as e:
            raise UsageError(f"{where}: cannot read result {path}: {e}") from None
    if isinstance(result, dict) and isinstance(result.get("hasr"), dict):
        result = result["hasr"]  # a saved verbose_json
    if isinstance(result, dict) and "final" not in result and "text" in result:
        result = {"final": result["text"]}  # a saved -f json
    hyp = obj.get("hypothesis")
    if audio is None and hyp is None and result is None:
        raise UsageError(f"{where}: needs 'audio', 'hypothesis' or 'result'")
    name = str(obj.get("name") or (os.path.relpath(audio, base) if audio else where))
    return Entry(name, audio, str(ref), obj.get("language"), None if hyp is None else str(hyp), result)


def load_manifest(path: str) -> list[Entry]:
    base = os.path.dirname(os.path.abspath(path))
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{path}: cannot read the manifest: {e}") from None
    if text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except ValueError as e:
            raise UsageError(f"{path}: not valid JSON: {e}") from None
        return [_entry(o, base, f"{path}[{i}]") for i, o in enumerate(items)]
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        where = f"{path}:{n}"
        if line.lstrip().startswith("{"):
            try:
                out.append(_entry(json.loads(line), base, where))
            except ValueError as e:
                raise UsageError(f"{where}: not valid JSON: {e}") from None
        elif "\t" in line:
            audio, ref = line.split("\t", 1)
            out.append(_entry({"audio": audio.strip(), "text": ref.strip()}, base, where))
        else:
            raise UsageError(f"{where}: expected a JSON object or 'audio<TAB>reference'")
    if not out:
        raise UsageError(f"{path}: the manifest lists nothing")
    return out


def _score(e: Entry, metric_opt: str, language: str | None, homophones: bool) -> None:
    from hasrctl import evaluate as ev

    e.metric = metric_opt if metric_opt != "auto" else ev.metric_for(e.reference, e.language or language)
    final = e.hypothesis if e.hypothesis is not None else str((e.result or {}).get("final") or "")
    draft = ev.draft_only(e.result) if e.result else None
    pairs = [("final", final)] + ([("draft", draft)] if draft is not None else [])
    e.script = ev.script_check(e.reference, final)
    for key, hyp in pairs:
        e.scores[key] = ev.score(e.reference, hyp, e.metric)
        if homophones:
            e.scores[key + "~py"] = ev.score(e.reference, hyp, e.metric, homophones=True)


def files(n: int) -> str:
    return f"{n} file{'' if n == 1 else 's'}"


def script_cell(script: dict[str, Any] | None) -> str:
    """The hypothesis's script, and the reference's when they differ ("-": no Chinese, or no OpenCC)."""
    if script is None:
        return "-"
    hyp = script["hypothesis"] or "either"
    return f"{hyp}≠{script['reference']}" if script["mismatch"] else hyp


def mismatch_warning(e: Entry) -> str:
    s = e.script or {}
    counts = " and ".join(f"{s[k]} {k}" for k in ("traditional", "simplified") if s.get(k))
    return (f"{e.name}: script mismatch: the hypothesis is {s.get('hypothesis')} ({counts} characters), the "
            f"reference {s.get('reference')}; each such character counts as an error (--homophones compares sounds)")


def _table(entries: list[Entry], columns: list[str]) -> list[str]:
    from hasrctl.evaluate import fmt_rate, rate

    width = max([len(e.name) for e in entries] + [len(f"TOTAL ({files(len(entries))})")])
    scripts = any(e.script is not None for e in entries)
    head = f"{'file':<{width}}  metric  {'ref':>5}" + "".join(f"  {c:>9}" for c in columns)
    lines = [head + ("  script" if scripts else "")]
    for e in entries:
        if e.error:
            lines.append(f"{e.name:<{width}}  failed: {e.error}")
            continue
        n = next(iter(e.scores.values()))[1]
        cells = "".join(f"  {fmt_rate(rate(*e.scores[c])) if c in e.scores else '-':>9}" for c in columns)
        lines.append(f"{e.name:<{width}}  {e.metric:<6}  {n:>5}{cells}"
                     + (f"  {script_cell(e.script)}" if scripts else ""))
    for metric in ("cer", "wer"):
        done = [e for e in entries if not e.error and e.metric == metric]
        if not done:
            continue
        n = sum(next(iter(e.scores.values()))[1] for e in done)
        cells = ""
        for c in columns:
            have = [e.scores[c] for e in done if c in e.scores]
            cells += f"  {fmt_rate(rate(sum(x for x, _ in have), sum(y for _, y in have))) if have else '-':>9}"
        label = f"TOTAL ({files(len(done))})"
        bad = sum(1 for e in done if e.script and e.script["mismatch"])
        tail = f"  {bad} mismatched" if scripts and metric == "cer" else ""
        lines.append(f"{label:<{width}}  {metric:<6}  {n:>5}{cells}{tail}")
    return lines


def _as_json(entries: list[Entry], columns: list[str]) -> dict[str, Any]:
    from hasrctl.evaluate import rate

    per = [{"name": e.name, "metric": e.metric, "error": e.error, "script": e.script,
            **{c: {"errors": s[0], "ref": s[1], "rate": rate(*s)} for c, s in e.scores.items()}}
           for e in entries]
    total: dict[str, Any] = {}
    for metric in ("cer", "wer"):
        done = [e for e in entries if not e.error and e.metric == metric]
        if done:
            total[metric] = {"files": len(done),
                             "script_mismatches": sum(1 for e in done if e.script and e.script["mismatch"])}
            for c in columns:
                have = [e.scores[c] for e in done if c in e.scores]
                err, n = sum(x for x, _ in have), sum(y for _, y in have)
                total[metric][c] = {"errors": err, "ref": n, "rate": rate(err, n)}
    return {"files": per, "total": total}


@click.command("eval", epilog=__doc__.split("\n\n", 1)[1].replace("\n", " ").replace("``", ""))
@click.argument("manifest", type=click.Path(exists=True, dir_okay=False))
@click.option("--homophones", is_flag=True, envvar="HASR_EVAL_HOMOPHONES", show_envvar=True,
              help="Also score with Chinese characters replaced by toneless pinyin (needs pypinyin).")
@click.option("--metric", type=click.Choice(["auto", "cer", "wer"]), default="auto", show_default=True,
              envvar="HASR_EVAL_METRIC", show_envvar=True, help="auto: CER for Chinese/Japanese, else WER.")
@click.option("-l", "--language", metavar="NAME", envvar="HASR_LANGUAGE", show_envvar=True,
              help="Language for entries that name none (sent to the daemon, and picks the metric).")
@click.option("--json", "as_json", is_flag=True, envvar="HASR_EVAL_JSON", show_envvar=True,
              help="Print the scores as JSON.")
@click.option("-v", "--verbose", is_flag=True, envvar="HASR_EVAL_VERBOSE", show_envvar=True,
              help="Show each normalised reference and hypothesis on stderr.")
@daemon_options
def eval_command(manifest: str, homophones: bool, metric: str, language: str | None, as_json: bool,
                 verbose: bool, daemon: Daemon) -> int:
    """Score transcriptions against references: CER/WER per file and in total, final vs draft.

    \b
    Example manifest (JSON Lines):
      {"audio": "clips/a.wav", "text": "今天天气很好。", "language": "Chinese"}
      {"audio": "clips/b.wav", "text": "Hello world."}
    """
    from hasrctl import evaluate as ev
    from hasrctl import terminal, transcribe
    from hasrd.transcript import to_json

    entries = load_manifest(manifest)
    checked = False
    client: Client | None = None
    for e in entries:
        if e.hypothesis is None and e.result is None:
            try:
                client = client or daemon.client()
                assert e.audio is not None
                if not os.path.isfile(e.audio):
                    raise UsageError(f"{e.audio}: no such file")
                e.result = to_json(transcribe.by_path(client, e.audio, e.language or language, terminal.View()))
            except Unreachable:
                raise
            except CliError as err:
                e.error = err.message
                say(f"{e.name}: {err.message}")
                continue
        _score(e, metric, language, homophones)
        if e.script and e.script["mismatch"]:
            say(mismatch_warning(e))
        if not checked and e.script is None and any(ev.is_cjk(c) for c in e.reference):
            checked = True
            if not ev.have_opencc():
                say("note: OpenCC is not installed, so scripts are not compared (pip install 'hasr[eval]')")
        if verbose:
            final = e.hypothesis if e.hypothesis is not None else (e.result or {}).get("final", "")
            say(f"{e.name}: ref {ev.normalize(e.reference)!r}")
            say(f"{e.name}: hyp {ev.normalize(str(final))!r}")
    columns = ["final"] + (["draft"] if any("draft" in e.scores for e in entries) else [])
    if homophones:
        columns += [c + "~py" for c in columns]
    if as_json:
        click.echo(json.dumps(_as_json(entries, columns), ensure_ascii=False, indent=2))
    else:
        click.echo("\n".join(_table(entries, columns)))
    sys.stdout.flush()
    return EXIT_FAILED if any(e.error for e in entries) else EXIT_OK

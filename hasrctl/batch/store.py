"""What a finished input leaves in OUTDIR: its outputs and its kept result written atomically, then its row
recorded; and the formats asked later rendered from kept results without transcribing (``hasrctl batch``)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from hasrctl.client import CliError
from hasrd.formats import Format


def detail(row: dict[str, Any]) -> str:
    """A failed row's reason, as the run's summary lists it."""
    err = row.get("error") or {}
    return f"{err.get('message')} ({err.get('code')})"


def store(book: Any, out_root: str, names: dict[str, str], formats: list[Format], signature: dict[str, Any],
           row: dict[str, Any]) -> None:
    """A row's outputs (``rendered``) and its whole result (``result``, kept under RESULTS for the formats asked
    later) written atomically, then the row recorded; a write that fails fails the row (write_failed).
    manifest.DiskFull when OUTDIR has no room: nothing of this input is recorded."""
    from hasrctl import output
    from hasrctl.batch.manifest import RESULTS, DiskFull, is_full

    rendered = row.pop("rendered", None) or {}
    result = row.pop("result", None)
    row["options"] = signature
    row["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    outs = []
    try:
        for fmt in formats:
            if fmt in rendered:
                rel = f"{names[row['path']]}.{fmt.extension}"
                target = Path(out_root) / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                output.write(target, rendered[fmt], True, streams=False)
                outs.append(rel)
        if row["status"] == "ok" and isinstance(result, dict):
            rel = os.path.join(RESULTS, f"{names[row['path']]}.json")
            target = Path(out_root) / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            output.write(target, json.dumps(result, ensure_ascii=False) + "\n", True, streams=False)
            row["result"] = rel
    except (CliError, OSError) as e:
        if isinstance(e, OSError) and is_full(e):
            raise DiskFull(out_root, e, book.recorded) from None
        message = e.message if isinstance(e, CliError) else f"{e.strerror or e}"
        row.update(status="failed", error={"code": "write_failed", "message": f"cannot write the output: {message}"})
    row["outputs"] = outs
    book.record(row)


def rerender(book: Any, results: dict[str, dict[str, Any]], out_root: str, names: dict[str, str],
              shown: dict[str, str], formats: list[Format], rules: Any,
              signature: dict[str, Any]) -> list[tuple[str, str]]:
    """The inputs whose stored result serves the formats and subtitle rules asked now: rendered here, in this
    process, as the actors render (actor.render_all), without Ray and without transcribing; their failures."""
    from hasrctl.batch.actor import render_all
    from hasrd.transcript import from_json

    failures = []
    for path, result in results.items():
        row = {k: v for k, v in book.rows[path].items() if k not in ("outputs", "result")}
        row.update(rendered=render_all(from_json(result), formats, rules), result=result)
        store(book, out_root, names, formats, signature, row)
        if row["status"] != "ok":
            failures.append((shown[path], detail(row)))
    return failures

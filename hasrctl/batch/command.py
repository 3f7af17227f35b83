"""``hasrctl batch INPUT... -o OUTDIR``: the command, its checks before anything starts, and its exit status."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import click
import msgspec

from hasrctl.batch.checks import language as _language
from hasrctl.batch.checks import model as _model
from hasrctl.batch.checks import sizes as _sizes
from hasrctl.batch.checks import speaker_model
from hasrctl.batch.store import detail, rerender, store
from hasrctl.client import EXIT_FAILED, EXIT_OK, CliError, UsageError
from hasrctl.common import (NAMES_HELP, SPEAKERS_HELP, cue_rules, engine_options, model_argument, names_option,
                            parse_formats, say, speakers_for, speakers_option)
from hasrd.formats import Format

RAY_LOG = ".hasr-batch.ray.log"  # what Ray's own processes print, kept out of the terminal


def _refused_row(path: str, status: str, code: str, message: str, model: str, engine: str) -> dict[str, Any]:
    """The row of an input refused here, never sent to an actor, as an actor would make it; its size and mtime
    let a rerun skip it while it stays what it is."""
    from hasrd import __version__

    row: dict[str, Any] = {"path": path, "status": status, "error": {"code": code, "message": message},
                           "model": model, "engine": engine, "host": socket.gethostname(), "pid": os.getpid(),
                           "hasr_version": __version__}
    try:
        st = os.stat(path)
        row.update(size=st.st_size, mtime_ns=st.st_mtime_ns)
    except OSError:
        pass
    return row


def _skip(book: Any, paths: list[str], signature: dict[str, Any], model: str, engine: str) -> None:
    """A ``skipped`` row for each file of a directory named like audio whose bytes are not (inputs.named_like_media):
    recorded unless the manifest has it already for the same bytes (a rerun with nothing to do writes nothing)."""
    from hasrctl.batch import manifest as mf
    from hasrctl.batch.inputs import not_media_message

    for path in paths:
        old = book.rows.get(path)
        if old is not None and old.get("status") == "skipped" and mf.same_bytes(old, path):
            continue
        row = _refused_row(path, "skipped", "not_audio", not_media_message(path), model, engine)
        row.update(options=signature, outputs=[], finished_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
        with contextlib.suppress(OSError):
            row["hash"] = mf.file_hash(path)
        book.record(row)


def _not_a_file_row(path: str, kind: str, model: str, engine: str) -> dict[str, Any]:
    """The row of an input that is not a regular file (a FIFO, a device, a socket), as the actor would make it
    (inputs.refusal): made here, so that nothing opens it and no actor is sent it."""
    from hasrctl.batch.inputs import refusal

    return _refused_row(path, "failed", "not_a_file", refusal(path, kind), model, engine)


@click.command(epilog="Exit: 0 every input ok; 1 some failed (listed at the end with their reasons); 2 bad "
                      "usage, a missing input or an unknown model; 3 no Ray cluster answers at --address; "
                      "130 interrupted (the manifest keeps what finished: run the same command to go on).")
@click.argument("inputs", nargs=-1, required=True, metavar="INPUT...")
@click.option("-o", "--output", "outdir", required=True, metavar="OUTDIR",
              help="Where transcripts go (the inputs' tree mirrored) with manifest.jsonl: one row per input.")
@click.option("-f", "--format", "fmts", multiple=True, metavar="LIST",
              help="txt, srt, vtt, json, verbose_json, or all (txt, srt, vtt and verbose_json); several with "
                   "commas or -f again [default: txt]. A format added on a rerun is made from the stored results, "
                   "without transcribing again.")
@click.option("--model", metavar="ID", envvar="HASR_MODEL", show_envvar=True,
              help="A model of `hasrctl models` (the default model when left out); checked before Ray starts.")
@click.option("-l", "--language", metavar="NAME", envvar="HASR_LANGUAGE", show_envvar=True,
              help="Spoken language (a name or code); detected per file when left out.")
@click.option("--engine", type=click.Choice(["auto", "whisper", "hybrid", "r2t2"]), default=None,
              help="The worker engine [default: the model's, as the daemon picks it].")
@click.option("--workers", type=click.IntRange(1, 4096), metavar="N",
              help="Actors, each holding the model once [default: one per GPU; without GPUs one per 2 CPUs, "
                   "at least 2].")
@click.option("--gpus-per-worker", type=click.FloatRange(0, 64), metavar="N",
              help="GPUs each actor takes: 0.5 puts two on a GPU, 0 makes CPU actors [default: 1 where the "
                   "cluster has GPUs, else 0].")
@click.option("--address", metavar="ADDR", envvar="RAY_ADDRESS", show_envvar=True,
              help="A Ray cluster: auto (the one `ray start` made on this machine), HOST:6379 (its head, from "
                   "a machine of the cluster) or ray://HOST:10001 (its Ray Client server, from anywhere) "
                   "[default: a local Ray started for this run].")
@click.option("--prompt", metavar="TEXT", help="Text that guides faster-whisper (names, spelling, style).")
@click.option("--word-timestamps", is_flag=True, help="Time every word (json and verbose_json carry `words`).")
@click.option("--translate", is_flag=True, help="English text from any language.")
@click.option("--speakers", metavar="auto|channels|N", callback=speakers_option, help=SPEAKERS_HELP)
@click.option("--speaker-names", metavar="LIST", callback=names_option, help=NAMES_HELP)
@click.option("--speaker-model", "speaker_model_name", metavar="NAME|FILE",
              help="The speaker model of auto or N: one of `hasrctl models`, or an .onnx file at the same path on "
                   "every Ray node [default: the one installed]; checked before Ray starts.")
@click.option("--max-line-width", metavar="N", help="srt/vtt: characters a line at most, 8-200.")
@click.option("--max-line-count", metavar="N", help="srt/vtt: lines a cue at most, 1-4.")
@click.option("--max-cue-sec", metavar="SEC", help="srt/vtt: seconds a cue stays on screen at most, 1-60.")
@click.option("--retry-failed", is_flag=True,
              help="Also retry the files that failed for their content (undecodable, no audio) though their "
                   "bytes did not change; other failures are always retried.")
@click.option("--progress/--no-progress", default=None,
              help="A progress line on stderr [default: when stderr is a terminal; else a line per file].")
@click.option("-q", "--quiet", is_flag=True, help="Only failures and the summary on stderr.")
def batch(inputs: tuple[str, ...], outdir: str, fmts: tuple[str, ...], model: str | None, language: str | None,
          engine: str | None, workers: int | None, gpus_per_worker: float | None, address: str | None,
          prompt: str | None, word_timestamps: bool, translate: bool, speakers: str | None,
          speaker_names: str | None, speaker_model_name: str | None, max_line_width: str | None,
          max_line_count: str | None, max_cue_sec: str | None, retry_failed: bool, progress: bool | None,
          quiet: bool) -> int:
    """Transcribe many files on Ray: a local Ray, or a cluster with --address (docs/BATCH.md).

    \b
    INPUT: files, directories (recursive; audio and video found by content), globs, @list.txt (one input a
    line) or - (that list on stdin). Every file gets OUTDIR/<its path>.<ext> per format and a row in
    OUTDIR/manifest.jsonl; a rerun skips the files done with the same content and options, and retries the
    failed ones (a file that failed for its own bytes only with --retry-failed). The text is the same as
    `hasrctl transcribe` gives with the same model and options.
    Examples:
      hasrctl batch ~/interviews -o ~/transcripts -f txt,srt
      find /archive -name '*.m4a' > list.txt; hasrctl batch @list.txt -o out/ --language Chinese
      hasrctl batch /nfs/podcasts -o /nfs/out --address head:6379 --gpus-per-worker 0.5
      hasrctl batch calls/ -o out/ --speakers channels --speaker-names Agent,Caller
    """
    from hasrctl.batch import inputs as inp
    from hasrctl.batch import manifest as mf
    from hasrctl.batch import run as rn
    from hasrctl.batch.progress import Progress

    formats = parse_formats(fmts)
    speakers = speakers_for(formats, speakers)
    model = model_argument(model)
    lang = _language(language)
    spec, engine_name, model_env = _model(model, engine)
    rules = cue_rules(max_line_width, max_line_count, max_cue_sec)
    voices = speaker_model(speakers, speaker_names, speaker_model_name)  # its path: what every actor loads
    opts = msgspec.structs.replace(engine_options(prompt, word_timestamps, translate, model, speakers, speaker_names),
                                   speaker_model=voices)
    options = msgspec.to_builtins(opts)  # the manifest's JSON: other speakers are another transcription
    signature = json.loads(json.dumps({"model": spec.name, "engine": engine_name, "language": lang,
                                       "formats": formats, "options": options, "rules": dataclasses.asdict(rules)}))
    rn.import_ray()  # the extra is missing: say so before scanning a big tree
    out_root = os.path.abspath(os.path.expanduser(outdir))
    found = inp.expand(inputs, sys.stdin, exclude=out_root)
    root = inp.mirror_root(found)
    names = inp.output_names(found.files, root)
    if os.path.exists(out_root) and not os.path.isdir(out_root):
        raise UsageError(f"-o {outdir}: not a directory")
    book = mf.Manifest(out_root)
    todo: list[str] | None = None
    try:
        try:
            book.open()
            todo = [f for f in found.files
                    if not mf.up_to_date(book.rows.get(f), signature, f, out_root, retry_failed=retry_failed)]
            # only the formats or the subtitle rules changed: made from the stored result, not transcribed again
            stored = {f: r for f in todo if (r := mf.stored_result(book.rows.get(f), signature, f, out_root))}
            todo = [f for f in todo if f not in stored]
            shown = {f: os.path.relpath(f, root) for f in found.files}
            still = [(shown[f], detail(book.rows[f])) for f in found.files
                     if f not in todo and f not in stored and book.rows[f].get("status") == "failed"]
            done_before = len(found.files) - len(todo) - len(stored)
            if found.skipped and not quiet:
                say(f"{found.skipped} file(s) in the input directories are not audio or video: left out")
            _skip(book, found.suspects, signature, spec.name, engine_name)
            odd = [os.path.relpath(f, root) for f in found.suspects]
            if odd and not quiet:
                say(f"{len(odd)} file(s) named like audio are not audio or video by their bytes: skipped, each "
                    f"with its row in the manifest ({', '.join(odd[:3])}{', ...' if len(odd) > 3 else ''})")
            still += [(name, inp.not_media_message(f)) for name, f in zip(odd, found.suspects, strict=True)]
            total = len(found.files) + len(odd)  # they failed too: listed at the end, and the exit is 1
            if done_before and not quiet:
                say(f"{done_before} of {len(found.files)} input(s) are up to date"
                    + (f" ({len(still)} failed for their content; --retry-failed retries them)" if still else "")
                    + (f": transcribing the other {len(todo)}" if todo else ""))
            if stored:
                still += rerender(book, stored, out_root, names, shown, formats, rules, signature)
                if not quiet:
                    say(f"{len(stored)} file(s) rendered as {', '.join(_shown_formats(formats))} from their stored "
                        f"results, without transcribing them again")
            if not todo:
                return _report(still, total)
            # what is not a regular file (a FIFO, a device) is never opened, not even for its length: its row is
            # made here (not_a_file) and it goes to no actor
            not_files = {f: kind for f in todo if (kind := inp.not_a_file(f))}
            estimates = {f: inp.declared_seconds(f) for f in todo if f not in not_files}
            todo.sort(key=lambda f: -estimates.get(f, 0.0))  # the longest first: the last to finish is a short one
            job = rn.Job(engine=engine_name, env={**rn.driver_env(), **model_env}, language=lang, options=options,
                         formats=formats, rules=rules, model=spec.name, workers=0, gpus_per_worker=0.0)
            tty = sys.stderr.isatty() if progress is None else progress
            b = Batch(book, todo, names, shown, estimates, formats, signature, out_root, job, workers,
                      gpus_per_worker, address, tty, quiet, not_files)
            if len(not_files) < len(todo):
                code = _run(rn, b)
            else:  # nothing to transcribe: no Ray
                bar = Progress(sys.stderr, len(todo), estimates, tty, quiet)
                _not_files(b, bar)
                bar.finish()
                code = EXIT_OK
            if code != EXIT_OK:
                return code
            if not quiet and not b.failures:
                say(f"{len(todo)} file(s) done in {time.monotonic() - b.t0:.1f} s; manifest: "
                    f"{os.path.join(out_root, mf.NAME)}")
            return _report(b.failures + still, total)
        finally:
            book.close()
    except mf.OutdirError as e:
        if e.said:
            return EXIT_FAILED
        raise CliError(_outdir_message(e, todo, os.path.join(out_root, mf.JOURNAL)), EXIT_FAILED) from None


def _outdir_message(e: Any, todo: list[str] | None, journal: str) -> str:
    """OUTDIR full or unwritable (manifest.OutdirError): where, why, how much was done, and what to do."""
    from hasrctl.batch import manifest as mf

    if isinstance(e, mf.DiskFull):
        text, then = f"{e.outdir} is full ({e.reason})", "run the same command again once there is room"
    else:
        text = f"cannot write to {e.outdir} ({e.reason})"
        then = "run the same command again once it can be written to, or choose another -o"
    if todo is None:
        return f"{text}: nothing was transcribed; {then}"
    text += f": {e.recorded} of {len(todo)} file(s) done and recorded"
    if os.path.exists(journal) and os.path.getsize(journal):
        text += " (their rows wait in .hasr-batch.journal until the manifest can be rewritten)"
    left = len(todo) - e.recorded
    return f"{text}; {then}" + (f" (the other {left} are left to do)" if left else "")


@dataclass
class Batch:
    """One run, decided: what to transcribe, how, and where it goes."""

    book: Any  # manifest.Manifest
    todo: list[str]
    names: dict[str, str]  # input -> output path under OUTDIR, without extension
    shown: dict[str, str]  # input -> its name in messages (under the mirrored directory)
    estimates: dict[str, float]
    formats: list[Format]
    signature: dict[str, Any]  # what a rerun compares (manifest.up_to_date)
    out_root: str
    job: Any  # run.Job, less the sizes that need the cluster
    workers: int | None
    gpus_per_worker: float | None
    address: str | None
    tty: bool
    quiet: bool
    not_files: dict[str, str] = field(default_factory=dict)  # input -> what it is: a FIFO, a device (never opened)
    failures: list[tuple[str, str]] = field(default_factory=list)
    t0: float = field(default_factory=time.monotonic)


def _shown_formats(formats: list[Format]) -> list[str]:
    return ["txt" if f == Format.TEXT else f.value for f in formats]


def _report(failed: list[tuple[str, str]], total: int) -> int:
    """The failed inputs with their reasons, at the end where they are seen; exit 1 when there are any."""
    if not failed:
        return EXIT_OK
    say(f"{len(failed)} of {total} file(s) failed:")
    for name, why in failed:
        click.echo(f"  {name}: {why}", err=True)
    return EXIT_FAILED


def _run(rn: Any, b: Batch) -> int:
    """Ray up (its own lines to OUTDIR/.hasr-batch.ray.log), the files through it, Ray down."""
    from hasrctl.batch import manifest as mf

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt  # SIGTERM, SIGHUP: as Ctrl-C, so Ray's local processes are shut down too

    old = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        with rn.private_temp_dir(b.address) as tmp, rn.native_output_to(os.path.join(b.out_root, RAY_LOG)):
            ray = rn.connect(b.address, None, os.path.join(b.out_root, RAY_LOG), tmp)
            for sig in old:  # again: ray.init put its own SIGTERM handler (sys.exit) in place of ours
                signal.signal(sig, stop)
            try:
                return _on_ray(rn, ray, b)
            except mf.OutdirError as e:
                # said while Ray is up: a Ray Data thread that touches Ray after its shutdown ends this process
                # (Ray's core worker: "The process will exit"), and the line said after the shutdown was lost
                say(_outdir_message(e, b.todo, os.path.join(b.out_root, mf.JOURNAL)))
                e.said = True
                raise
            finally:
                rn.shutdown(ray)
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def _on_ray(rn: Any, ray: Any, b: Batch) -> int:
    from hasrctl.batch import manifest as mf
    from hasrctl.batch.progress import Progress

    cpus, gpus = rn.cluster(ray)
    job = b.job
    job.workers, job.gpus_per_worker, job.cpus_per_worker = _sizes(cpus, gpus, b.workers, b.gpus_per_worker)
    if job.gpus_per_worker == 0:
        job.env.update(HASR_FW_DEVICE="cpu", CUDA_VISIBLE_DEVICES="")
    bar = Progress(sys.stderr, len(b.todo), b.estimates, b.tty, b.quiet)
    files = [f for f in b.todo if f not in b.not_files]  # to Ray; the others are failed here, never opened
    if not b.quiet:
        where = f"the Ray cluster at {b.address}" if b.address else "a local Ray"
        kind = f"{job.gpus_per_worker:g} GPU each" if job.gpus_per_worker else f"{job.cpus_per_worker:g} CPU each"
        say(f"{len(files)} file(s) on {where}: {job.workers} actor(s) of {job.model} ({job.engine}), {kind}")
    bar.draw(force=True)  # "0/N files" while the actors load
    rows = rn.results(ray, job, files)
    try:
        _not_files(b, bar)
        seen = rn.each(rows, lambda row: _finished(b, bar, row))
    except KeyboardInterrupt:
        bar.finish()
        say(f"interrupted: {bar.done} of {len(b.todo)} file(s) finished and are in the manifest; run the same "
            f"command to go on")
        return 130
    except mf.OutdirError:
        bar.finish()  # the line of where it stopped; batch() says why
        raise
    finally:
        # Ray Data's iterator ends while Ray is up: left to the garbage collector (the exception's traceback
        # holds it), it ran after the shutdown, printed a traceback and started a new local Ray to do so
        rows.close()
    for path in files:
        if path not in seen:
            _finished(b, bar, {"path": path, "status": "failed", "model": job.model, "engine": job.engine,
                               "error": {"code": "worker_died", "message": f"the worker process died on this file "
                                         f"{rn.RETRIES + 1} times (a crash or out of memory)"}})
    if not b.quiet or b.failures:
        bar.finish()
    return EXIT_OK


def _not_files(b: Batch, bar: Any) -> None:
    """The inputs that are not regular files, failed (not_a_file) without being opened."""
    for path, kind in b.not_files.items():
        _finished(b, bar, _not_a_file_row(path, kind, b.job.model, b.job.engine))


def _finished(b: Batch, bar: Any, row: dict[str, Any]) -> None:
    """One input's row back from Ray: its outputs written (atomically), its row recorded, progress told.
    manifest.DiskFull when OUTDIR has no room for them: the run stops, this input is not recorded."""
    store(b.book, b.out_root, b.names, b.formats, b.signature, row)
    name = b.shown[row["path"]]
    if row["status"] == "ok":
        duration = float(row.get("duration_s") or 0)
        bar.file(row["path"], name, True, f"{duration:.1f} s of audio, {row.get('language') or '?'}", duration)
    else:
        why = detail(row)
        b.failures.append((name, why))
        bar.file(row["path"], name, False, why, 0.0)

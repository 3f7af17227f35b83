"""The Ray actor of ``hasrctl batch``: the daemon's own engine, loaded once, one file per call.

The worker's code is reused, not imitated: ``hasrd.worker.engines.create`` builds the engine the daemon's worker
would build for the same model and settings, and ``hasrd.worker.engines.load`` loads it and gives it its decode
loop as the worker's main does; the file is decoded here, in the actor's process, by the daemon's decoder
(``hasrd.audio``: PyAV to 16 kHz mono float32, the same limits; its channels kept for ``--speakers channels``);
a request for speakers goes through the worker's speakers stage (``hasrd.worker.speakers``); the text leaves
through the worker's own boundary, the request's ``Scripter`` (``ScriptEmitter``: no channel, nobody watches one
file's events); the result
gets the fields the daemon adds (``hasrd.formats.annotate``) and is rendered by the daemon's and the CLI's
renderers. So a file gives the same text here as through ``hasrctl transcribe``.

The actor never raises for a file: a file that cannot be read, decoded or transcribed becomes a ``failed``
row with the code and message the daemon would have answered. A model that cannot load fails every file
with its reason rather than making Ray restart the actor forever.
"""

from __future__ import annotations

import json
import os
import socket
import time
from typing import TYPE_CHECKING, Any

import msgspec

from hasrd import __version__
from hasrd.formats import Format
from hasrd.options import Options
from hasrd.subtitles import CueRules
from hasrd.transcript import Transcript, to_json

if TYPE_CHECKING:
    import numpy as np

    from hasrd.worker.engine import Engine
    from hasrd.worker.serve import ScriptEmitter


def render_all(result: Transcript, formats: list[Format], rules: CueRules) -> dict[str, str]:
    """Each format's text, as ``hasrctl transcribe -f FORMAT`` writes it (txt: one sentence a line)."""
    from hasrd.formats import lines, render

    return {fmt: lines(result) if fmt == Format.TEXT else render(result, fmt, rules=rules) for fmt in formats}


JOB_VAR = "HASR_BATCH_JOB"


class ActorJob(msgspec.Struct):
    """What every actor of a run is given in HASR_BATCH_JOB (run.actor_env writes it)."""

    engine: str
    language: str
    options: Options
    formats: list[Format]
    rules: CueRules
    model: str


class Transcriber:
    """Constructed once per actor (loads the model); called once per input row ``{"path": ...}``.

    Its settings come in its environment (Ray's ``runtime_env``): the driver's HASR_* variables, the model's
    own (HASR_FW_MODEL), and ``HASR_BATCH_JOB``, a JSON object of engine, language, options, formats, rules and
    model, so nothing of the job waits in the object store for an actor Ray restarts.
    """

    def __init__(self) -> None:
        from hasrd.worker.engine import EngineError
        from hasrd.worker.engines import create, load
        from hasrd.worker.serve import load_settings

        self.job = msgspec.json.decode(os.environ[JOB_VAR], type=ActorJob)
        self.settings = load_settings()
        self.host = socket.gethostname()
        self.load_error: tuple[str, str] | None = None
        self.engine: Engine | None = None
        self.engine_name = self.job.engine
        t0 = time.monotonic()
        try:
            loaded = create(self.job.engine)
            load(loaded, lambda phase: None)
            self.engine, self.engine_name = loaded, loaded.name  # "auto" made the engine it chose
        except EngineError as e:
            self.load_error = (e.code, f"the model could not load on {self.host}: {e.message}")
        except Exception as e:  # noqa: BLE001 - reported on every row, never a restart loop
            self.load_error = ("load_failed", f"the model could not load on {self.host}: {type(e).__name__}: {e}")
        self.load_s = round(time.monotonic() - t0, 3)

    def __call__(self, row: dict[str, Any]) -> dict[str, Any]:
        return {"path": row["path"], "row": json.dumps(self.transcribe(str(row["path"])), ensure_ascii=False)}

    def transcribe(self, path: str) -> dict[str, Any]:
        """One file to its manifest row (without ``outputs``), ``rendered`` (format -> text) and ``result`` (the
        whole result, which the driver keeps so that a format asked later is made from it)."""
        from hasrctl.batch.inputs import NotAFile, kind_of, refusal
        from hasrctl.batch.manifest import file_hash

        t0 = time.monotonic()
        out: dict[str, Any] = {"path": path, "status": "failed", "error": None, "model": self.job.model,
                               "engine": self.engine_name, "host": self.host, "pid": os.getpid(),
                               "hasr_version": __version__}
        try:
            st = os.stat(path)
            out.update(size=st.st_size, mtime_ns=st.st_mtime_ns)
            kind = kind_of(st)  # a FIFO would block the open for ever: never opened
            if kind:
                raise NotAFile(path, kind)
            out["hash"] = file_hash(path)
        except NotAFile as e:
            out["error"] = {"code": "not_a_file", "message": refusal(path, e.kind)}
            return out
        except OSError as e:
            out["error"] = {"code": "read_error", "message": f"cannot read it on {self.host}: {e.strerror or e}"}
            return out
        if self.engine is None:  # it did not load (load_error says why)
            code, message = self.load_error or ("load_failed", "the model did not load")
            out["error"] = {"code": code, "message": message}
            return out
        try:
            result, decode_s = self._run(self.engine, path)
        except Exception as e:  # noqa: BLE001 - one bad file never ends the run
            out["error"] = _error_of(e)
            if out["error"]["code"] == "speaker_model_missing":  # a cluster's node without the driver's file
                out["error"]["message"] += f" on {self.host}"
            return out
        total_s = time.monotonic() - t0
        out.update(status="ok", language=result.language, duration_s=result.duration_s, text=result.final,
                   timings={"decode_s": round(decode_s, 4),
                            "transcribe_s": round(float(result.timings.total_s or 0), 4),
                            "total_s": round(total_s, 4), "load_s": self.load_s},
                   rendered=render_all(result, self.job.formats, self.job.rules), result=to_json(result))
        return out

    def _run(self, engine: Engine, path: str) -> tuple[Transcript, float]:
        from hasrd import formats
        from hasrd.worker.serve import ScriptEmitter, scripter

        t0 = time.monotonic()
        pcm, duration_s = self._decode(path)
        decode_s = time.monotonic() - t0
        script = scripter(self.job.language, self.settings)
        t1 = time.monotonic()
        result = script.result(self._transcribe(engine, pcm, ScriptEmitter(script)))
        result.timings.total_s = round(time.monotonic() - t1, 4)
        formats.annotate(result, audio_path=path, language=self.job.language, duration_s=duration_s)
        return result, decode_s

    def _decode(self, path: str) -> tuple[np.ndarray, float]:
        """The file as 16 kHz float32: mono, or ``[frames, channels]`` for ``--speakers channels`` (a file of one
        channel refused: hasrd.audio.check_channels), as the daemon decodes it for the same request."""
        from hasrd import audio

        name = os.path.basename(path)
        per_channel = self.job.options.speakers == "channels"
        pcm, info = audio.decode_to_array(path, max_audio_sec=self.settings.max_audio_sec, name=name,
                                          keep_channels=per_channel)
        if per_channel:
            audio.check_channels(info, name, "--speakers channels")
        return pcm, info.duration_s

    def _transcribe(self, engine: Engine, pcm: np.ndarray, emit: ScriptEmitter) -> Transcript:
        """The engine's transcription, through the worker's speakers stage when speakers are asked (as
        ``hasrd.worker.serve`` runs it for the daemon)."""
        language, options = self.job.language, self.job.options
        if options.speakers is None:
            return engine.transcribe(pcm, language, options, emit, lambda: False)
        from hasrd.worker import speakers

        if options.speakers == "channels":
            return speakers.by_channel(engine, pcm, language, options, emit, lambda: False)
        return speakers.by_voice(engine, pcm, language, options, emit, lambda: False)


def _error_of(e: BaseException) -> dict[str, str]:
    """A file's failure as the daemon would answer it: its error code and sentence."""
    from hasrd.errors import HasrError
    from hasrd.worker.serve import fail_of

    if isinstance(e, HasrError):
        return {"code": e.code, "message": e.message}
    failed = fail_of(0, e)
    return {"code": failed.code, "message": failed.message}

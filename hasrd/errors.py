"""The errors hasr reports, each with a stable code, an HTTP status and a human sentence.

Foreign errors (OSError, av.error.*, msgspec errors, worker Failed messages) are mapped to these at one
boundary each: audio decoding in ``audio.py``, the worker channel in ``workerproc.py``. Everything a client
sees is ``{"error": {"code", "message", "type", "param"}}`` built from one of these (``type`` and ``param`` as
OpenAI's API has them: the SDK raises its typed errors from them); a job that failed after some of
its sentences were final adds ``"partial": {"text", "sentences", "done_s"}``.

    HasrError                       code            status
    ├── BadRequest                  bad_request     400
    │   ├── InvalidAudio            invalid_audio   400
    │   │   ├── AudioPathError      path_required, path_invalid, path_not_absolute, file_not_found,
    │   │   │                       symlink_loop, permission_denied, not_a_file, empty_file, read_error
    │   │   ├── AudioDecodeError    undecodable, no_audio_stream, no_audio_frames
    │   │   └── AudioTooLong        audio_too_long  (over HASR_MAX_AUDIO_SEC)
    │   ├── UnknownFormat           unknown_format  400
    │   ├── UnknownLanguage         unknown_language 400
    │   ├── InvalidOption           invalid_option  400  (a request option: wrong type, out of range, unknown)
    │   ├── InvalidSpeakers         invalid_speakers 400  (channels of a mono file; too_many_speakers: more
    │   │                                                  than the audio holds)
    │   ├── BadSpeakerModel         invalid_speaker_model 400  (not an ONNX speaker-embedding model)
    │   └── Unsupported             unsupported     400  (the engine cannot do it: translation by r2t2)
    ├── Forbidden                   forbidden       403
    ├── NotFound                    not_found       404
    │   ├── ModelNotFound           model_not_found 404  (an OpenAI ``model`` hasr does not serve)
    │   └── SpeakerModelMissing     speaker_model_missing 404  (speakers asked for, no speaker model installed)
    ├── ModelBusy                   model_busy      409  (being pulled or deleted)
    ├── TooLarge                    too_large       413
    ├── Unavailable                 unavailable     503  (+ Retry-After)
    │   ├── QueueFull               queue_full      503
    │   ├── LoadFailed              load_failed     503  (the worker could not load; reason kept)
    │   ├── ModelUnavailable        model_unavailable 503
    │   │   └── CudaLibrariesMissing cuda_libraries_missing 503  (CTranslate2's cuBLAS 12: hasrd/cudalibs.py)
    │   ├── Fatal                   fatal           503  (repeated load failures; `hasrctl load` clears)
    │   └── ShuttingDown            shutting_down   503
    ├── Timeout                     timeout         504  (over HASR_MAX_JOB_SEC, when set)
    │   └── Stalled                 stalled         504  (no progress for HASR_STALL_SEC)
    ├── Cancelled                   cancelled       499
    └── WorkerError                 runtime_failure 500
        ├── WorkerCrashed           worker_crashed  500
        ├── OutOfMemory             out_of_memory   500
        └── ProtocolMismatch        protocol_mismatch 500

    EngineError                     (any code)      the worker's failures, sent as Failed / LoadFailed and mapped
                                                    back by from_worker / from_worker_load: never a client's
"""

from __future__ import annotations

from typing import Any


class HasrError(Exception):
    code = "internal"
    status = 500

    def __init__(self, message: str, *, code: str | None = None, retry_after: float | None = None,
                 param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.retry_after = retry_after
        self.param = param  # the request field at fault, as OpenAI names it ("file", "language", "model")
        self.partial: dict[str, Any] | None = None  # what a failed job had made final

    @property
    def type(self) -> str:
        """OpenAI's error type for this status."""
        if self.status == 403:
            return "permission_error"
        if self.status == 404:
            return "invalid_request_error"
        return "invalid_request_error" if self.status < 500 else "server_error"

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code, "message": self.message, "type": self.type, "param": self.param}
        if self.partial:
            body["partial"] = self.partial
        return {"error": body}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code!r}, {self.message!r})"


class BadRequest(HasrError):
    code, status = "bad_request", 400


class InvalidAudio(BadRequest):
    code = "invalid_audio"


class AudioPathError(InvalidAudio):
    """A named audio file cannot be used; the code says why (AUDIO_PATH_CODES below)."""

    code = "file_not_found"


class AudioDecodeError(InvalidAudio):
    """The bytes are not audio FFmpeg can decode, or hold no audio (AUDIO_DECODE_CODES below)."""

    code = "undecodable"


class AudioTooLong(InvalidAudio):
    code = "audio_too_long"


class UnknownFormat(BadRequest):
    code = "unknown_format"


class UnknownLanguage(BadRequest):
    code = "unknown_language"


class InvalidOption(BadRequest):
    """A request option of the wrong type, out of range or unknown; the message names the allowed values."""

    code = "invalid_option"


class Unsupported(BadRequest):
    code = "unsupported"


class Forbidden(HasrError):
    code, status = "forbidden", 403


class NotFound(HasrError):
    code, status = "not_found", 404


class ModelNotFound(NotFound):
    code = "model_not_found"


class InvalidSpeakers(BadRequest):
    """The speakers asked for cannot be told in this audio: channels of a one-channel file, more speakers than it
    holds (code ``too_many_speakers``); the message says what to ask instead."""

    code = "invalid_speakers"


class BadSpeakerModel(BadRequest):
    """The speaker model is not an ONNX speaker-embedding model hasr can run (the message says what is wrong)."""

    code = "invalid_speaker_model"


class SpeakerModelMissing(NotFound):
    """Speakers were asked for, and no speaker-embedding model is installed (or not the one named): the message
    says in one line how to get one (hasrd/speakermodels.py)."""

    code = "speaker_model_missing"


class ModelBusy(HasrError):
    """The model is being pulled or deleted: try again once that has ended."""

    code, status = "model_busy", 409


class TooLarge(HasrError):
    code, status = "too_large", 413


class Unavailable(HasrError):
    code, status = "unavailable", 503


class QueueFull(Unavailable):
    code = "queue_full"


class LoadFailed(Unavailable):
    code = "load_failed"


class ModelUnavailable(Unavailable):
    code = "model_unavailable"


class CudaLibrariesMissing(ModelUnavailable):
    code = "cuda_libraries_missing"


class Fatal(Unavailable):
    code = "fatal"


class ShuttingDown(Unavailable):
    code = "shutting_down"


class Timeout(HasrError):
    code, status = "timeout", 504


class Stalled(Timeout):
    code = "stalled"


class Cancelled(HasrError):
    code, status = "cancelled", 499


class WorkerError(HasrError):
    code, status = "runtime_failure", 500


class WorkerCrashed(WorkerError):
    code = "worker_crashed"


class OutOfMemory(WorkerError):
    code = "out_of_memory"


class ProtocolMismatch(WorkerError):
    code = "protocol_mismatch"


# Codes a worker may put in Failed, mapped to the daemon-side class (the one table; LoadFailed's is below).
_WORKER_CODES: dict[str, type[HasrError]] = {
    "invalid_audio": InvalidAudio,
    "model_unavailable": ModelUnavailable,
    "out_of_memory": OutOfMemory,
    "runtime_failure": WorkerError,
    "cancelled": Cancelled,
    "timeout": Timeout,
    "stalled": Stalled,
    "unsupported": Unsupported,
    "invalid_speakers": InvalidSpeakers,
    "too_many_speakers": InvalidSpeakers,
    "invalid_speaker_model": BadSpeakerModel,
    "speaker_model_missing": SpeakerModelMissing,
}


# Codes of a LoadFailed: the models are missing (its own code) or the worker speaks another protocol; any other
# failure to load is load_failed (503, retried after a backoff).
_LOAD_CODES: dict[str, type[HasrError]] = {
    "model_unavailable": ModelUnavailable,
    "cuda_libraries_missing": CudaLibrariesMissing,
    "protocol_mismatch": ProtocolMismatch,
}


def from_worker(code: str, message: str) -> HasrError:
    """Map a worker's Failed{code, message} to the daemon's error class (unknown codes → runtime_failure)."""
    cls = _WORKER_CODES.get(code, WorkerError)
    return cls(message, code=code if code in _WORKER_CODES else "runtime_failure")


def from_worker_load(code: str, message: str) -> HasrError:
    """Map a worker's LoadFailed{code, message} to the daemon's error class (others → load_failed)."""
    return _LOAD_CODES.get(code, LoadFailed)(message)


# Codes of audio input errors (all 400), kept here so light clients need not import audio.py (it loads av).
AUDIO_PATH_CODES = ("path_required", "path_invalid", "path_not_absolute", "file_not_found", "symlink_loop",
                    "permission_denied", "not_a_file", "empty_file", "read_error")
AUDIO_DECODE_CODES = ("undecodable", "no_audio_stream", "no_audio_frames")
AUDIO_CODES = AUDIO_PATH_CODES + AUDIO_DECODE_CODES + ("audio_too_long",)


class EngineError(Exception):
    """A failure inside the worker (an engine, model resolution): ``code`` is an error code of docs/API.md.

    Not a HasrError: it never reaches a client as such. The worker sends it as a Failed / LoadFailed message,
    and the daemon maps that back with :func:`from_worker`.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

"""A request's engine options as one typed object, checked once in the daemon before any work (docs/API.md).

/transcribe's ``options``, the OpenAI form's fields and a Realtime session's settings all become an
:class:`Options`; it travels down to the worker as itself (the protocol's ``Transcribe`` and ``LiveStart`` carry it,
only what differs from the defaults on the wire) and the engines read its fields. A wrong type, a value out of
range or a key hasr does not know is 400 ``invalid_option`` naming it, and no worker is woken for it.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from hasrd import errors


class Fake(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The fake engine's knobs for one request (tests, benchmarks); None: its HASR_FAKE_* setting (engines/fake.py)."""

    script: str = ""  # the draft's text ("": HASR_FAKE_SCRIPT)
    script_s: float = 3.0  # live: the speech the script is revealed over
    rtf: float | None = None
    hang: bool | None = None
    crash: bool | None = None
    fail: str = ""  # fail the request with this error code


class Options(msgspec.Struct, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    model: str = ""  # hasrd.modelspec resolves it (the route does, before admission)
    task: Literal["transcribe", "translate"] = "transcribe"
    prompt: str = ""  # the OpenAI field: faster-whisper's initial prompt
    initial_prompt: str = ""  # faster-whisper's own name for it
    temperature: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] = 0.0  # 0: beam search, the same text each time
    word_timestamps: bool = False
    # srt / vtt cue limits: their ranges are subtitles.rules_from's (numbers, or strings of them as forms send)
    max_line_width: float | str | None = None
    max_line_count: float | str | None = None
    max_cue_sec: float | str | None = None
    silence_ms: Annotated[int, msgspec.Meta(ge=100, le=10000)] | None = None  # live: a pause that ends an utterance
    # who said what (docs/SPEAKERS.md): "channels" (one speaker per channel), "auto" (diarization, the number
    # estimated) or how many speakers a diarization finds; the names given to them in order of first words
    speakers: Annotated[int, msgspec.Meta(ge=1, le=16)] | Literal["auto", "channels"] | None = None
    speaker_names: list[Annotated[str, msgspec.Meta(min_length=1, max_length=64)]] = []
    speaker_model: str = ""  # the speaker-embedding model's file (the daemon resolves it; speakermodels.py)
    fake: Fake | None = None  # the fake engine's per-request knobs (tests, benchmarks)


WHAT = {"model": "a model's name (hasrctl models)", "task": "\"transcribe\" or \"translate\"",
        "prompt": "a string", "initial_prompt": "a string", "temperature": "a number from 0 to 1",
        "word_timestamps": "true or false", "silence_ms": "a whole number of milliseconds from 100 to 10000",
        "speakers": "\"auto\", \"channels\" or a number of speakers from 1 to 16",
        "speaker_names": "a list of names (1-64 characters each)", "speaker_model": "a model's name or .onnx file",
        "fake": "an object (the fake engine's knobs)"}


def parse(raw: object, where: str = "options") -> Options:
    """``raw`` (a JSON object; None = no options) as Options, or InvalidOption naming the key (``param``
    ``options.KEY``) and what it may be."""
    from hasrd import subtitles

    if raw is None:
        return Options()
    if not isinstance(raw, dict):
        raise errors.BadRequest(f"{where} must be an object", param=where)
    try:
        opts = msgspec.convert(raw, Options)
    except msgspec.ValidationError as e:
        text = str(e)
        key = text.rsplit("at `$.", 1)[1].rstrip("`").split(".")[0].split("[")[0] if "at `$." in text else ""
        if text.startswith("Object contains unknown field"):
            key = text.split("`")[1]
            known = ", ".join(Options.__struct_fields__)
            raise errors.InvalidOption(f"unknown option `{key}` in {where}: hasr knows {known}",
                                       param=f"{where}.{key}") from None
        if key in WHAT:
            message = f"{where}.{key} must be {WHAT[key]}, not {raw.get(key)!r}"
        else:
            message = f"{where}.{key}: {text.split(' - at ')[0]}" if key else f"{where}: {text}"
        raise errors.InvalidOption(message, param=f"{where}.{key}" if key else where) from None
    subtitles.rules_from(raw)  # the cue limits' ranges (the same check as the OpenAI form's)
    if len(set(opts.speaker_names)) != len(opts.speaker_names):  # two speakers under one name: who said what?
        raise errors.InvalidOption(f"{where}.speaker_names names a speaker twice: {opts.speaker_names}",
                                   param=f"{where}.speaker_names")
    return opts

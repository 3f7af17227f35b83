"""What ``hasrctl batch`` refuses, and in which words: its arguments before Ray starts (the model, the language, the
speaker model; once the cluster answers, the actors' sizes), each a UsageError (exit 2) in one line, so that
nothing waits for Ray to start only to be refused; and, in the actor, a file whose channels cannot be one speaker
each, a failure of that file alone (the run goes on, as the daemon answers 400 for that request alone).
"""

from __future__ import annotations

import os
from typing import Any

from hasrctl.client import UsageError
from hasrctl.common import model_hint, settings


def model(name: str | None, engine: str | None) -> tuple[Any, str, dict[str, str]]:
    """The model a run uses (ModelNotFound -> exit 2, before any actor starts), its engine and its variables."""
    from hasrd import errors, modelspec

    s = settings()
    try:
        spec = modelspec.resolve(name or "", s)
    except errors.ModelNotFound as e:
        raise UsageError(f"--model: {model_hint(name, e.message)}") from None
    return spec, engine or spec.engine, spec.worker_env()


def language(name: str | None) -> str:
    """The language asked (the settings' when none is), checked; "" detects it per file."""
    from hasrd.languages import UnknownLanguage, resolve

    name = name or settings().language or ""
    if name:
        try:
            resolve(name)
        except UnknownLanguage as e:
            raise UsageError(f"--language: {e}") from None
    return name


def speaker_model(speakers: str | None, names: str | None, model_name: str | None) -> str:
    """The speaker model's file for ``--speakers auto`` or N, resolved once here: every actor gets this path (on a
    cluster it must be there on every node), and a missing model is one line before Ray starts, not a failure
    of every file. "" for ``channels`` (no model) and without --speakers (where names or a model make no sense,
    as the daemon says of its ``speaker_names`` and ``speaker_model``)."""
    from hasrd import errors, speakermodels

    if not speakers:
        if names or model_name:
            raise UsageError("--speaker-names and --speaker-model need --speakers (auto, channels or a number)")
        return ""
    if speakers == "channels":
        return ""
    wanted = (model_name or "").strip()
    if "/" in wanted or wanted.endswith(speakermodels.SUFFIX):  # a file: the actors need its absolute path
        wanted = os.path.abspath(os.path.expanduser(wanted))
    try:
        return str(speakermodels.resolve(wanted, trusted=True))
    except errors.SpeakerModelMissing as e:
        raise UsageError(f"--speakers {speakers}: {e.message}") from None


def sizes(ray_cpus: int, ray_gpus: float, workers: int | None,
          gpus_per_worker: float | None) -> tuple[int, float, float]:
    """(actors, GPUs each, CPUs each): GPU actors where the cluster has GPUs, else CPU actors sharing the CPUs."""
    gpw = (1.0 if ray_gpus >= 1 else 0.0) if gpus_per_worker is None else gpus_per_worker
    if gpw > 0:
        if ray_gpus < gpw:
            raise UsageError(f"--gpus-per-worker {gpw:g}: the Ray cluster has {ray_gpus:g} GPU(s)")
        n = workers or max(1, int(ray_gpus // gpw))
        return n, gpw, 1.0
    n = workers or max(min(2, ray_cpus), ray_cpus // 2)  # 2 on 2 cores: 1.5x one actor (benchmarks/batch.py)
    return n, 0.0, max(1.0, float(ray_cpus // n)) if ray_cpus >= n else 1.0


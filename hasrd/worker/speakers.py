"""The worker's speakers stage: a request that asks who spoke (``Options.speakers``) is transcribed through here,
around whichever engine the worker runs.

- ``channels``: each channel, gated to the stretches it carries (channels.py), is transcribed on its own and its
  sentences labelled with it; the channels' sentences merge by time, an echo of one on another dropped.
- ``auto`` or N: the voices are found first (speech regions by Silero, windows, embeddings by the speaker model,
  clusters: diarize.py), so that a request for more speakers than the audio holds fails before the transcription
  is paid for; then the file is transcribed with word times and each word takes the voice of its moment, a
  sentence split where the voice changes.

Labels are given in order of first words: the request's names, then A, B, C… The engine's sentence events are
held while it works and sent labelled at the end (progress events flow as usual), so a stream never shows a
sentence whose speaker changes afterwards.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from typing import Protocol

import msgspec
import numpy as np

from hasrd.languages import join_sentences
from hasrd.options import Options
from hasrd.protocol import Phase
from hasrd.transcript import UNSET, TimedSentence, Transcript, Word
from hasrd.worker import channels, diarize
from hasrd.worker.engine import Emitter, Engine, EngineError
from hasrd.worker.speakermodel import SpeakerModel

SR = 16000


class LabelEmitter(Emitter, Protocol):
    def sentence(self, index: int, text: str, engine: str, start_s: float, end_s: float, segment: int = 0,
                 speaker: str = "") -> None: ...


class _Held:
    """The engine's emitter while speakers are unknown: progress passes (scaled to the whole job: a channel is
    ``1/parts`` of it), drafts and sentences wait for their labels."""

    def __init__(self, out: LabelEmitter, part: int = 0, parts: int = 1) -> None:
        self.out, self.part, self.parts = out, part, parts

    def progress(self, done_s: float, total_s: float, phase: Phase = "decoding") -> None:
        self.out.progress((self.part * total_s + done_s) / self.parts, total_s, phase)

    def draft(self, text: str, segment: int = 0) -> None:
        pass

    def sentence(self, index: int, text: str, engine: str, start_s: float, end_s: float, segment: int = 0) -> None:
        pass

    def language(self, code: str) -> None:
        tell = getattr(self.out, "language", None)
        if callable(tell):
            tell(code)


@functools.lru_cache(maxsize=2)
def _model(path: str, _mtime: float) -> SpeakerModel:
    return SpeakerModel(path)


def load_model(path: str) -> SpeakerModel:
    """The speaker model at ``path``, loaded once per worker (again when the file changes)."""
    if not path:
        raise EngineError("speaker_model_missing", "no speaker model was given for this request")
    try:
        mtime = os.stat(path).st_mtime
    except OSError as e:
        raise EngineError("speaker_model_missing", f"the speaker model {path} cannot be read: {e.strerror}") from None
    return _model(path, mtime)


def _tight(piece: np.ndarray) -> list[tuple[float, float]]:
    from faster_whisper.vad import VadOptions, get_speech_timestamps

    opts = VadOptions(min_silence_duration_ms=120, speech_pad_ms=30, max_speech_duration_s=30)
    return [(sp["start"] / SR, sp["end"] / SR) for sp in get_speech_timestamps(piece, opts)]


def regions(pcm: np.ndarray) -> list[tuple[float, float]]:
    """Silero's speech regions, tight (30 ms of padding, apart at pauses of 120 ms, at most 30 s each): the
    diarization's windows come from these, and fewer of them cross a turn change and hear two voices at once. The
    file is cut at quiet moments into pieces of a minute that threads VAD side by side (ONNX Runtime lets go of the
    GIL), as the whisper engine does (vad.py)."""
    from concurrent.futures import ThreadPoolExecutor

    from faster_whisper.vad import get_vad_model

    from hasrd.worker import segment, vad

    get_vad_model()  # one session for every thread, built before they start
    pieces = segment.quiet_pieces(pcm, 60.0)
    with ThreadPoolExecutor(max_workers=vad.default_workers(), thread_name_prefix="hasr-spk-vad") as pool:
        found = pool.map(lambda p: [(s + p[0] / SR, e + p[0] / SR) for s, e in _tight(pcm[p[0]:p[1]])], pieces)
        return [span for spans in found for span in spans]


def features(pcm: np.ndarray, spans: list[tuple[float, float]]) -> tuple[list[tuple[float, float]], list[np.ndarray]]:
    """The windows of ``spans`` and their features: each span's log-mels computed once, each window's frames sliced
    from them and centred on their own mean (as WeSpeaker's fbank of the window alone would be)."""
    from hasrd.worker.speakermodel import HOP, frames_of, logmel

    wins: list[tuple[float, float]] = []
    feats: list[np.ndarray] = []
    for s0, e0 in spans:
        lm = logmel(pcm[int(s0 * SR):int(e0 * SR)])
        for s, e in diarize.windows([(s0, e0)]):
            a = int(round((s - s0) * SR / HOP))
            f = lm[a:a + frames_of(e - s)]
            wins.append((s, e))
            feats.append((f - f.mean(axis=0, keepdims=True)).astype(np.float32) if len(f) else f)
    return wins, feats


def voices(pcm: np.ndarray, model: SpeakerModel, speakers: int | None) -> diarize.Timeline:
    """Who speaks when in ``pcm``: EngineError ``too_many_speakers`` when more are asked than it holds."""
    wins, feats = features(pcm, regions(pcm))
    emb = model.embed_feats(feats)
    try:
        labels = diarize.cluster(emb, speakers, np.array([(s + e) / 2 for s, e in wins]))
    except diarize.TooManySpeakers as e:
        raise EngineError("too_many_speakers", str(e)) from None
    return diarize.Timeline.of(wins, labels, len(pcm) / SR)


def word_voices(sentences: list[TimedSentence], tl: diarize.Timeline) -> list[list[int]]:
    """Each sentence's words' voices: the timeline's, each change then settled at a pause (diarize.settle), across
    sentence ends too (a turn often starts a sentence)."""
    words = [w for s in sentences for w in (s.words if isinstance(s.words, list) else [])]
    starts, ends = [float(w.start) for w in words], [float(w.end) for w in words]
    voices = diarize.settle(starts, ends, [tl.who(a, max(b, a + diarize.STEP)) for a, b in zip(starts, ends,
                                                                                                strict=True)])
    out, k = [], 0
    for s in sentences:
        n = len(s.words) if isinstance(s.words, list) else 0
        out.append(voices[k:k + n])
        k += n
    return out


def _split(item: TimedSentence, voices: list[int], tl: diarize.Timeline) -> list[TimedSentence]:
    """The sentence as runs of one voice each (its words' ``voices``; without words, its span's voice)."""
    words = item.words if isinstance(item.words, list) else []
    if not words:
        return [msgspec.structs.replace(item, speaker=str(tl.who(item.start_s, item.end_s)))]
    runs: list[tuple[int, list[Word]]] = []
    for w, who in zip(words, voices, strict=True):
        if runs and runs[-1][0] == who:
            runs[-1][1].append(w)
        else:
            runs.append((who, [w]))
    if len(runs) == 1:
        return [msgspec.structs.replace(item, speaker=str(runs[0][0]))]
    return [msgspec.structs.replace(item, text="".join(w.word for w in ws).strip(), start_s=float(ws[0].start),
                                    end_s=float(ws[-1].end), words=ws, speaker=str(who), tokens=UNSET)
            for who, ws in runs]


def _labelled(result: Transcript, items: list[TimedSentence], labels: dict[str, str], keep_words: bool,
              mode: str) -> Transcript:
    """``items`` (speaker = a raw label) renamed by ``labels``, and the result made of them."""
    out = [msgspec.structs.replace(it, speaker=labels[str(it.speaker)], words=it.words if keep_words else UNSET)
           for it in items]
    code = result.language_code if isinstance(result.language_code, str) else result.language
    result.per_sentence = out
    result.final = join_sentences([it.text for it in out], code)
    result.speakers = list(labels.values())
    result.speaker_mode = mode
    return result


def first_words(items: list[TimedSentence], given: list[str]) -> dict[str, str]:
    """Raw labels named in order of first words: the names given, then A, B, C…"""
    order: list[str] = []
    for it in items:
        if str(it.speaker) not in order:
            order.append(str(it.speaker))
    return dict(zip(order, diarize.names(len(order), given), strict=True))


def _send(emit: LabelEmitter, result: Transcript) -> None:
    for k, it in enumerate(result.per_sentence):
        emit.sentence(k, it.text, it.engine, it.start_s, it.end_s, speaker=str(it.speaker))


def by_voice(engine: Engine, pcm: np.ndarray, language: str, options: Options, emit: LabelEmitter,
             cancelled: Callable[[], bool]) -> Transcript:
    """Diarize, then transcribe with word times and give each word its voice."""
    model = load_model(options.speaker_model)
    emit.progress(0.0, len(pcm) / SR, "finding_speakers")
    t0 = time.perf_counter()
    asked = options.speakers if isinstance(options.speakers, int) else None
    tl = voices(pcm, model, asked)
    spent = time.perf_counter() - t0
    result = engine.transcribe(pcm, language, msgspec.structs.replace(options, word_timestamps=True), _Held(emit),
                               cancelled)
    t1 = time.perf_counter()
    voices_of = word_voices(result.per_sentence, tl)
    items = [part for it, vs in zip(result.per_sentence, voices_of, strict=True) for part in _split(it, vs, tl)]
    _labelled(result, items, first_words(items, options.speaker_names), options.word_timestamps, "diarized")
    result.timings.diarize_s = round(spent + time.perf_counter() - t1, 3)
    _send(emit, result)
    return result


def by_channel(engine: Engine, pcm: np.ndarray, language: str, options: Options, emit: LabelEmitter,
               cancelled: Callable[[], bool]) -> Transcript:
    """Each channel gated to what it carries, transcribed on its own; the sentences merged by time."""
    t0 = time.perf_counter()
    parts = channels.gated(pcm)
    spent = time.perf_counter() - t0
    results: list[Transcript] = []
    said: list[tuple[channels.Said, TimedSentence]] = []
    for c, mono in enumerate(parts):
        r = engine.transcribe(mono, language, options, _Held(emit, c, len(parts)), cancelled)
        results.append(r)
        said += [(channels.Said(c, it.start_s, it.end_s, it.text), msgspec.structs.replace(it, speaker=str(c)))
                 for it in r.per_sentence if it.text.strip()]
    t1 = time.perf_counter()
    kept = {id(s) for s in channels.drop_echoes([s for s, _ in said], pcm)}
    items = sorted((it for s, it in said if id(s) in kept), key=lambda it: (it.start_s, it.speaker))
    result = results[0]
    for r in results[1:]:  # the first channel that heard a language names it
        if not result.language and r.language:
            result.language, result.language_code = r.language, r.language_code
    result.fw_calls = sum(r.fw_calls for r in results)
    result.duration_s = len(pcm) / SR
    names = diarize.names(len(parts), options.speaker_names)  # channel 1, 2, … in order, whoever speaks first
    _labelled(result, items, {str(c): n for c, n in enumerate(names)}, options.word_timestamps, "channels")
    result.timings.diarize_s = round(spent + time.perf_counter() - t1, 3)
    _send(emit, result)
    return result

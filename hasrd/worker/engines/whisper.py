"""The whisper-only engine: faster-whisper alone on whole files (docs/ARCHITECTURE.md "Engines", the whisper
bullet; fwterms.py has a request in faster-whisper's terms and its segments in hasr's, fwload.py the model's load).

Two ways to decode, chosen by HASR_WHISPER_BATCH (benchmarks/accuracy.py measures both against faster-whisper's
defaults): batched (N > 0, the default) over VAD clips N at a time, a batch taking clips across pieces, with
whisper's no-speech rule applied to its segments, which the pipeline does not do itself; or sequential (0), clip
by clip with a token cap for short clips, so one hallucination cannot feed the next window. Either way beam 5 at
temperature 0, without conditioning on previous text, and ``Options.prompt`` as every piece's ``initial_prompt``.
Clips are packed only in languages written with spaces (clips.packs): packing pauses and a short first clip cost
Mandarin a sixth more errors (issue 38).

A clip whose decode loops or leaves a stretch of its speech without words (mending.symptom) is mended
(:meth:`WhisperEngine._mended`). On six 2-minute Mandarin files this took the pooled CER from 0.58 to 0.53 (most
of whisper base's Mandarin errors there were skipped speech); English files, whose clips rarely show either
symptom, decode as before.

Never a sampling temperature: faster-whisper's fallback samples, and CTranslate2's sampling generator lives in
its worker threads, where ``set_random_seed`` does not reach after the first call (measured: the second
transcription of a file in one worker differed from the first, a fresh worker repeated the first). So the same
PCM, settings and model give the same text, every time: mending cuts the window instead of sampling. A loop that
survives is said once (textrules.collapse_loops).

faster-whisper returns numpy.float64 times and probabilities once word timestamps are on (segment times
included); the worker channel (msgspec) cannot encode those, so every number is made a float where it is read
(and the channel's encoder turns any it meets anyway: ``hasrd.transcript.numbers``).
"""

from __future__ import annotations

import bisect
import itertools
import math
import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np

from hasrd.config import Settings
from hasrd.worker import resegment, segment, vad
from hasrd.worker.vad import silences
from hasrd.models import resolve_fw
from hasrd.worker.engines import mending
from hasrd.worker.engines.clips import Clip, Moved, Passed, packs, stream
from hasrd.worker.engines.fwload import batch_for, load_shared, warm_up
from hasrd import transcript
from hasrd.options import Options
from hasrd.protocol import Phase
from hasrd.transcript import TimedSentence, Timings, Transcript
from hasrd.worker import ct2batch
from hasrd.worker.batcher import Batcher
from hasrd.worker.engine import Emitter, EngineError, LiveEmitter, Loaded, heard
from hasrd.worker.textrules import RETRY_KW, clean_text, collapse_loops, looped, token_cap
from hasrd.languages import NAMES, join_sentences
from hasrd.worker.engines.fwterms import (is_no_speech, language_of, model_codes, prompt_of, sentence_entry,
                                          timed_words, whisper_code)

if TYPE_CHECKING:
    from faster_whisper import WhisperModel
    from faster_whisper.transcribe import Segment

    from hasrd.worker.live_whisper import WhisperLive

SR = 16000
FIRST_CLIP_SEC = 10.0  # issue 32 #2: ~25 tokens, not ~90, before the first words (1-1.5 s on a 2-core CPU)
SHORT_FIRST_AFTER = 60.0  # ... in files longer than this
TEMPERATURES = (0.0,)
WHOLE_KW: dict[str, Any] = {
    "beam_size": 5, "vad_filter": True, "vad_parameters": {"min_silence_duration_ms": 500},
    "temperature": TEMPERATURES, "compression_ratio_threshold": 2.4, "log_prob_threshold": -1.0,
    "no_speech_threshold": 0.6, "condition_on_previous_text": False,
}


BATCHED_KW: dict[str, Any] = {"beam_size": 5, "temperature": 0.0}


class Track:
    """A file job's progress, told through the engine's emitter: never backwards, and re-sent while a long step
    runs (the language vote, a batch, the VAD of a silent stretch), with what runs (protocol.Phase). A worker
    that sends nothing for HASR_STALL_SEC is killed as stuck: a long silence or a slow vote must not look so."""

    def __init__(self, emit: Emitter, total_s: float) -> None:
        self.emit, self.total_s, self.done_s = emit, total_s, 0.0

    def to(self, done_s: float) -> None:
        self.done_s = max(self.done_s, min(float(done_s), self.total_s))
        self.emit.progress(round(self.done_s, 3), self.total_s)

    def beat(self, phase: Phase = "decoding") -> None:
        self.emit.progress(round(self.done_s, 3), self.total_s, phase)


def _shifted(clip: Clip, base: float) -> Callable[[float, bool], float]:
    """Seconds into a batch's array (where ``clip`` starts at ``base``) -> seconds on the file's clock."""
    return lambda t, end: clip.to_file(t - base, end)


def quietest(pcm: np.ndarray, a: float, b: float, frame: int = SR // 10) -> float:
    """The middle of the quietest 100 ms of ``pcm`` between a and b (seconds): where a span is cut in two."""
    i, j = int(a * SR), int(b * SR)
    n = (j - i) // frame
    if n < 2:
        return (a + b) / 2
    energy = np.square(pcm[i:i + n * frame].astype(np.float32)).reshape(n, frame).sum(axis=1)
    return (i + int(np.argmin(energy)) * frame + frame // 2) / SR


class WhisperEngine:
    """faster-whisper alone: whole files with VAD, segments with timestamps. ``model`` is there from ``load`` (or
    given: the hybrid lends its own) until ``close``."""

    name = "whisper"
    model: WhisperModel

    def __init__(self, settings: Settings, fw_spec: str, device: str, compute_type: str,
                 identity: dict[str, Any] | None = None) -> None:
        self.settings = settings
        self.fw_spec = fw_spec  # HASR_FW_MODEL's syntax; '' = the embedded model
        self.device = device
        self.compute_type = compute_type
        self.extra = dict(identity or {})
        self.warm_up_s: float | None = None
        self.vad_workers = vad.default_workers()

    def load(self, phase: Callable[[str], None]) -> Loaded:
        self.model_ref = resolve_fw(self.fw_spec, phase)
        phase(f"loading faster-whisper {self.model_ref.name} on {self.device} ({self.compute_type})")
        # Silero's session is built beside the model's load (its first request would wait for it otherwise)
        primed = threading.Thread(target=vad.prime, name="hasr-vad-prime", daemon=True)
        primed.start()
        self.model, lanes, batch = load_shared(self.model_ref, self.device, self.compute_type, self.settings)
        if self.device == "cuda":
            phase("preparing the GPU's kernels (the first load on a machine compiles them: seconds, once)")
            self.warm_up_s = warm_up(self.model, self.model_ref.name)
        primed.join()
        ident = {"engine": "whisper", "models": {"final": self.model_ref.describe()}, "device": self.device,
                 "compute_type": self.compute_type, "batch": self.batch, "vad_workers": self.vad_workers,
                 "streams": lanes}
        if self.warm_up_s is not None:
            ident["warm_up_s"] = self.warm_up_s
        ident.update(self.extra)
        return Loaded(ident, lanes, batch)

    def attach(self, loop: Batcher) -> None:
        ct2batch.install(self.model, loop)

    def transcribe(self, pcm: np.ndarray, language: str, options: Options | Mapping[str, Any], emit: Emitter,
                   cancelled: Callable[[], bool]) -> Transcript:
        """``options`` may be a mapping of Options' fields too (benchmarks and tests drive this engine directly)."""
        options = options if isinstance(options, Options) else msgspec.convert(options, Options)
        name, code = language_of(language or self.settings.language)
        fw_code = whisper_code(self.model, code)
        probability: float | None = None
        n = len(pcm)
        total_s = round(n / SR, 3)
        t0 = time.monotonic()
        track = Track(emit, total_s)
        track.beat("finding_speech")
        per_sentence: list[TimedSentence] = []
        windows: list[transcript.Window] = []
        first_text_s: float | None = None
        calls = 0
        cuts = resegment.Resegmenter()
        sources: list[Any] = []  # the decoder's segments, by index: scores and tokens for the pieces

        loops = resegment.LoopFilter()

        def settle(pieces: list[resegment.Piece], end: bool = False) -> None:
            nonlocal first_text_s
            kept: list[tuple[str, resegment.Piece]] = []
            for piece in pieces:
                text = collapse_loops(clean_text(piece.text))
                if text:
                    kept.extend(loops.add(text, piece))
            if end:
                kept.extend(loops.flush())
            for text, piece in kept:
                entry = sentence_entry(piece, text, sources, self._tokens, options.word_timestamps)
                if first_text_s is None:
                    first_text_s = entry.end_s
                emit.sentence(len(per_sentence), text, "fw", entry.start_s, entry.end_s)
                per_sentence.append(entry)
                c0 = int(entry.start_s / 0.16)
                windows.append(transcript.Window(text=text, start_chunk=c0,
                                                 end_chunk=max(c0, math.ceil(entry.end_s / 0.16) - 1)))

        # Silero runs once per sample (the pieces side by side, ahead of the decoder: vad.piece_spans); the language
        # vote takes its speech from the first pieces (read ahead until they hold enough speech for it), which are
        # then decoded from that list.
        parts = self._parts(pcm)
        try:
            ahead: list[vad.Part] = []
            if fw_code is None and n:
                from hasrd.worker import language_id

                voted, probability, ahead = language_id.of_pieces(self.model, pcm, parts, set(model_codes(self.model)),
                                                                  cancelled, track.beat)
                fw_code = voted or None
                if fw_code:
                    name, code = NAMES.get(fw_code, fw_code), fw_code
                    heard(emit, code)

            last: tuple[float, float] | None = None  # the last span spoken, on the file's clock

            def spoken(timed: list[tuple[float, float]]) -> None:
                """A piece's speech: its silences told to the sentence cutter (with the one across the pieces'
                cut, where there is one: a cut may fall inside speech)."""
                nonlocal calls, last
                calls += 1
                across = [last] if last and timed[0][0] - last[1] >= vad.MIN_SILENCE else []
                cuts.add_pauses(silences(across + timed))
                last = timed[-1]

            def pieces() -> Iterator[vad.Part]:
                for part in itertools.chain(ahead, parts):
                    if cancelled():
                        raise EngineError("cancelled", "the request was cancelled")
                    yield part

            # on the CPU a long file's first clip is short (decoded alone: see _batched), so its first words show
            # within seconds, where that costs no text (clips.packs); a clip is otherwise up to a whole window (a
            # short file's whole answer is as quick, and cut in two its text changes and costs a second window)
            packed = packs(fw_code)
            short_first = packed and self.device == "cpu" and n > SHORT_FIRST_AFTER * SR
            clips = stream(pieces(), n, packed, FIRST_CLIP_SEC if short_first else math.inf, spoken)
            for s in self._decode(pcm, fw_code, options, clips, track):  # lazy: decoding while iterating
                if cancelled():
                    raise EngineError("cancelled", "the request was cancelled")
                track.to(float(s.end))
                sources.append(s)
                settle(cuts.add(timed_words(s, 0.0, len(sources) - 1)))
        finally:
            parts.close()
        settle(cuts.flush(), end=True)
        track.to(total_s)
        elapsed = time.monotonic() - t0
        return Transcript(
            engine="whisper", language=name, language_code=code,
            language_probability=None if probability is None else round(float(probability), 4),
            language_detected=probability is not None, draft="",
            final=join_sentences([p.text for p in per_sentence], code), sent_windows=windows, fw_calls=calls,
            first_text_s=first_text_s, per_sentence=per_sentence, duration_s=total_s,
            decoding="batched" if self.batch > 0 else "sequential", task=options.task,
            timings=Timings(draft_s=0.0, final_s=round(elapsed, 4), fw_s=round(elapsed, 4)))

    def live(self, language: str, options: Options, emit: LiveEmitter, cancelled: Callable[[], bool]) -> WhisperLive:
        """faster-whisper with local agreement over a growing buffer (live_whisper.py)."""
        from hasrd.worker.live_whisper import WhisperLive

        _name, code = language_of(language or self.settings.language)
        return WhisperLive(self.model, whisper_code(self.model, code), options.task, prompt_of(options), emit,
                           cancelled, options)

    def _parts(self, pcm: np.ndarray) -> Generator[vad.Part, None, None]:
        """The pieces, lazily, each with its VAD spans (seconds, from the piece's start; none: no speech)."""
        pieces = segment.quiet_pieces(pcm, self.settings.whisper_segment_sec)
        return vad.piece_spans(pcm, pieces, self.vad_workers)

    def _tokens(self, text: str) -> list[int]:
        """The model's text tokens for ``text`` (verbose_json's ``tokens``), as whisper would write it."""
        tok = getattr(self.model, "hf_tokenizer", None)
        if tok is None:
            return []
        return [int(t) for t in tok.encode(text, add_special_tokens=False).ids]

    @property
    def batch(self) -> int:
        return batch_for(self.device, int(self.settings.whisper_batch))

    def _decode(self, pcm: np.ndarray, fw_code: str | None, options: Options,
                clips: Iterator[Clip | Passed], track: Track) -> Iterable[Any]:
        """The file's segments with timed words on its clock, lazily, in time order (see the module docstring for
        the two ways); ``clips`` are its speech clips (seconds), pieces after pieces, each piece's end told as it
        passes (``track`` moves there once every clip before it is decoded, else hears a heartbeat)."""
        common: dict[str, Any] = dict(word_timestamps=True, initial_prompt=prompt_of(options), language=fw_code,
                                      task=options.task)
        if options.temperature:  # asked for: sampling, so no longer the same text every time
            common["temperature"] = options.temperature
        if self.batch <= 0:
            return self._by_clip(pcm, common, clips, track)
        return self._batched(pcm, common, clips, track)

    def _by_clip(self, pcm: np.ndarray, common: dict[str, Any], clips: Iterator[Clip | Passed],
                 track: Track) -> Iterable[Any]:
        """Sequential: each clip alone, beam 5 at temperature 0 (the token cap is per clip), mended as batches are."""

        def decode(parts: list[Clip], **extra: int) -> list[list[Any]]:
            return [[Moved(seg, c.to_file) for seg in self._sequential(c.audio(pcm), common, vad=False, **extra)]
                    for c in parts]

        for clip in clips:
            if isinstance(clip, Passed):
                track.to(clip.end_s)  # every clip before it is decoded
                continue
            yield from self._mended(pcm, clip, decode([clip])[0], decode)

    def _mended(self, pcm: np.ndarray, clip: Clip, moved: list[Any],
                decode: Callable[..., list[list[Any]]]) -> list[Any]:
        """A clip's decoded segments (on the file's clock), or, where they loop or skip speech (mending.symptom),
        its two halves decoded again and mended in turn; a part that still loops and cannot be cut gets one last
        decode that may not repeat four tokens, taken if it does not loop. Deterministic: same clips, same text."""
        text = "".join(str(m.text) for m in moved)
        words = [(float(w.start), float(w.end)) for m in moved for w in (m.words or [])]
        why = mending.symptom(text, clip.spans, words)
        if why is None:
            return moved
        cut = mending.halves(clip.spans, lambda a, b: quietest(pcm, a, b))
        if cut is None:
            if why != "loop":
                return moved
            again = decode([clip], **RETRY_KW)[0]
            return again if not looped("".join(str(m.text) for m in again)) else moved
        parts = [Clip.of(half, clip.packed) for half in cut]
        return [m for part, got in zip(parts, decode(parts), strict=True) for m in self._mended(pcm, part, got, decode)]

    def _sequential(self, audio: np.ndarray, common: dict[str, Any], vad: bool = True,
                    **extra: int) -> Iterable[Segment]:
        kw = {**WHOLE_KW, "vad_filter": vad, **extra, **common}  # a request's temperature replaces the default
        segments, _info = self.model.transcribe(audio, max_new_tokens=token_cap(len(audio) / SR), **kw)
        return segments

    def _batched(self, pcm: np.ndarray, common: dict[str, Any], clips: Iterator[Clip | Passed],
                 track: Track) -> Iterable[Any]:
        """VAD clips of up to 30 s decoded N at a time at temperature 0, a batch taking clips across pieces; a clip
        whose decode loops or skips speech is mended (:meth:`_mended`: its halves decoded again, together)."""
        from faster_whisper import BatchedInferencePipeline

        # one pipeline per job: it keeps the last word's time between its batches (last_speech_timestamp), and
        # the worker runs several jobs at once (their model calls meet in the decode loop, hasrd.worker.batcher)
        pipeline = BatchedInferencePipeline(self.model)

        def decode(batch: list[Clip], **extra: int) -> list[list[Any]]:
            """Each clip's segments that are speech (whisper's no-speech rule, which the pipeline does not apply),
            on the file's clock: the clips side by side in one array, each its own audio; a segment's seek is its
            clip's start there in 10 ms frames, computed by the pipeline from whole samples."""
            audio = np.concatenate([c.audio(pcm) for c in batch])
            bounds = list(itertools.accumulate([0] + [c.size for c in batch]))
            starts = [bounds[k] / SR for k in range(len(batch))]
            stamps = [{"start": starts[k], "end": bounds[k + 1] / SR} for k in range(len(batch))]
            seeks = [int(int(t * SR) / SR * 100) for t in starts]
            segments, _info = pipeline.transcribe(audio, clip_timestamps=stamps, batch_size=self.batch,
                                                  vad_filter=False, **{**BATCHED_KW, **common, **extra})
            out: list[list[Any]] = [[] for _ in batch]
            for seg in segments:
                k = max(0, bisect.bisect_right(seeks, int(seg.seek)) - 1)
                if not is_no_speech(seg):
                    out[k].append(Moved(seg, _shifted(batch[k], starts[k])))
            return out

        # One call per batch, so that each batch's clips are settled (and progress reported) as soon as it is
        # decoded. The first batch is short: on the CPU one clip, so that the progress line moves within seconds
        # of the start; on a GPU the first piece's clips, decoded while the other pieces' VAD runs (a lone clip
        # would cost a whole batch's time there). The batches are the same whatever the timing: same text.
        first = True
        while True:
            batch: list[Clip] = []
            for clip in clips:
                if isinstance(clip, Passed):
                    if not batch:
                        track.to(clip.end_s)  # every clip before it is decoded: a silent stretch moves the bar
                        continue
                    if first and self.device != "cpu":
                        break
                    track.beat()  # clips wait for a full batch: still alive
                    continue
                batch.append(clip)
                if len(batch) >= (1 if first and self.device == "cpu" else self.batch):
                    break
            if not batch:
                return
            first = False
            for clip, moved in zip(batch, decode(batch), strict=True):
                yield from self._mended(pcm, clip, moved, decode)

    def close(self) -> None:
        vars(self).pop("model", None)  # its memory goes with the last reference

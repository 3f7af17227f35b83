"""When a whisper clip's decode is not to be trusted, and how to cut the clip for a second try (pure: plain values).

Why: whisper decodes a 30 s window as one run of text, and on hard audio it either loops (a phrase said until the
token limit: "殿下殿下 殿下 ...") or skips (it starts writing 9 s into the window, or stops before its end), and the
clip comes back with stretches of speech that have no words at all. Deletions were most of issue 38's Mandarin
errors: on a 3-minute espeak-ng file in five containers 312-431 characters of 2,130 were missing with hasr's
batched clips, against 50-105 with faster-whisper's sequential decode. faster-whisper's own cure is a fallback at
higher temperatures (sampling), which hasr does not do (the same audio gives the same text); a shorter window is
deterministic, and whisper rarely loops or skips twice at the same place once the window is cut elsewhere.

The symptoms (:func:`symptom`): "loop", the text loops (textrules.looped: whisper's compression-ratio rule, a phrase
said over and over even with spaces or commas between, or Chinese of a dozen characters written again and again);
"gap", a VAD span of at least GAP_SEC that no decoded word overlaps by a fifth; also where the whole clip got no
word: whisper base's no-speech rule dropped whole 17 s clips of Mandarin that Silero VAD heard as speech (2 of 12
short files), and the halves still face that rule (what Silero does not take for speech, silence and the corpus's
music, never gets a clip). The cut (:func:`halves`): at the pause between spans that best balances the speech on
each side; a single span longer than 2 x MIN_PART_SEC at its quietest moment in its middle third (the caller's
``quietest``). whisper.py decodes the two halves as new clips and mends each again, down to parts it cannot cut.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

from hasrd.worker.textrules import looped

Span = tuple[float, float]
Symptom = Literal["loop", "gap"]

GAP_SEC = 1.0  # a span this long with no word is speech the decode skipped
MIN_PART_SEC = 2.0  # a single span is cut only when each half keeps this much


def uncovered(spans: Sequence[Span], words: Sequence[Span]) -> list[float]:
    """Seconds of each span that no word overlaps."""
    out = []
    for a, b in spans:
        covered = sum(max(0.0, min(b, e) - max(a, s)) for s, e in words)
        out.append(max(0.0, (b - a) - covered))
    return out


def symptom(text: str, spans: Sequence[Span], words: Sequence[Span]) -> Symptom | None:
    """Why a clip's decode (its ``text`` and ``words``' times, on the clock of its ``spans``) is not trusted."""
    if looped(text):
        return "loop"
    if any(b - a >= GAP_SEC and u >= 0.8 * (b - a) for u, (a, b) in zip(uncovered(spans, words), spans,
                                                                                    strict=True)):
        return "gap"
    return None


def halves(spans: Sequence[Span], quietest: Callable[[float, float], float]) -> tuple[list[Span], list[Span]] | None:
    """The clip's spans cut in two (module docstring), or None where it cannot be cut. ``quietest(a, b)``: the
    quietest moment between a and b on the spans' clock."""
    if len(spans) >= 2:
        speech = [b - a for a, b in spans]
        total = sum(speech)
        best = min(range(1, len(spans)), key=lambda k: (abs(2 * sum(speech[:k]) - total),
                                                        -(spans[k][0] - spans[k - 1][1])))
        return list(spans[:best]), list(spans[best:])
    if len(spans) == 1:
        a, b = spans[0]
        if b - a >= 2 * MIN_PART_SEC:
            t = min(max(quietest(a + (b - a) / 3, a + 2 * (b - a) / 3), a + MIN_PART_SEC), b - MIN_PART_SEC)
            return [(a, t)], [(t, b)]
    return None

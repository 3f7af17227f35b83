"""What a worker decodes next: the batching policy as one pure function over plain values (issue 30; docs/
ARCHITECTURE.md "One worker, many jobs" has the rules in short).

A worker holds many jobs; each job's thread asks for one model step at a time and waits. The decode loop
(:mod:`hasrd.worker.batcher`) asks :func:`next_batch` which of the waiting steps run together. Why the rules are
so, measured on the H200:

1. The lead: the oldest live step; else the oldest step of a short job (at most one 30 s window of audio: beside
   16 long files a 5 s file took 4.6-6.1 s without this); else a file step that has waited ``patience`` batches
   (the job served longest ago first); else a step of the key with the most items waiting, so that jobs fall into
   step and their calls are large (16 files shared 45 of 152 batches when the lead went round robin alone).
2. Steps join the lead only when they can share one model call: the same ``key``. Language and prompt text vary
   per item and are not in the key.
3. The batch fills live steps first, then short jobs', then files in round-robin order, while its items (30 s
   windows) stay within ``max_items``; the lead alone may exceed it (a job's own step is never split).
4. Lanes (:func:`may_start`): long files' calls take at most all lanes but one, so a live step or a short job's
   never waits for a long file's call to end (a batch of file windows where one window runs to the token limit
   takes over a second); live and short calls likewise leave files a lane while files wait. With lanes, a batch
   led by a live or short step takes no long file's step (``mix=False``): 31 file windows beside one live window
   would make the live call as slow as theirs.

Vocabulary: a *step* is one call one job waits on; its *items* are the windows the call carries.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

Allow = Literal["any", "urgent", "files", "none"]
"""Which waiting steps a free lane may take (:func:`may_start`)."""


@dataclass(frozen=True)
class Wait:
    """One job's step waiting for the model."""

    seq: int  # arrival order, over the whole worker
    job: int
    live: bool
    key: Hashable  # steps with equal keys can share one model call
    items: int = 1
    born: int = 0  # the number of batches run when it arrived
    short: bool = False  # its job holds at most one window of audio


PATIENCE = 2
"""Batches a file step may wait for larger batches of other keys before it leads."""


def order_jobs(waits: Sequence[Wait], served: Mapping[int, int]) -> list[int]:
    """File jobs in round-robin order: never served first, then the one served longest ago; ties by the
    oldest step waiting (so arrival order among new jobs)."""
    first_seq: dict[int, int] = {}
    for w in waits:
        if not w.live:
            first_seq[w.job] = min(first_seq.get(w.job, w.seq), w.seq)
    return sorted(first_seq, key=lambda j: (served.get(j, -1), first_seq[j]))


def urgent(w: Wait) -> bool:
    """A step someone is waiting on right now: a live session's, or a short job's."""
    return w.live or w.short


def may_start(lanes: int, running: int, running_files: int, urgent_waiting: bool, files_waiting: bool) -> Allow:
    """Which steps a free lane may take now: "any", "urgent" (live and short jobs' only), "files" (long files'
    only) or "none". ``running``: calls in flight; ``running_files``: those led by a long file's step.

    With several lanes each kind keeps at most all lanes but one while the other kind waits: long files never
    take the lane a dictation needs, and a steady stream of live steps never starves the files."""
    if running >= max(1, lanes):
        return "none"
    if lanes == 1:
        return "any"
    running_urgent = running - running_files
    files_ok = files_waiting and running_files < lanes - 1
    urgent_ok = urgent_waiting and (running_urgent < lanes - 1 or not files_waiting)
    if files_ok and urgent_ok:
        return "any"
    return "urgent" if urgent_ok else "files" if files_ok else "none"


def next_batch(waits: Sequence[Wait], served: Mapping[int, int], max_items: int, now: int = 0,
               patience: int = PATIENCE, allow: Allow = "any", mix: bool = True) -> list[Wait]:
    """The steps the next model call runs, lead first (empty when nothing waits). ``served``: job -> the
    number of the batch that last served it (absent: never); ``now``: the number of batches run so far;
    ``allow``: which steps may go (:func:`may_start`: "any", "urgent" or "files"); ``mix``: whether long
    files' steps may join a batch led by a live or short step."""
    if allow != "any":
        waits = [w for w in waits if urgent(w) == (allow == "urgent")]
    if not waits:
        return []
    live = sorted((w for w in waits if w.live), key=lambda w: w.seq)
    files = order_jobs(waits, served)
    by_job: dict[int, list[Wait]] = {}
    for w in sorted(waits, key=lambda w: w.seq):
        if not w.live:
            by_job.setdefault(w.job, []).append(w)
    in_turn = [w for j in files for w in by_job[j]]  # file steps, round-robin order
    short = sorted((w for w in in_turn if w.short), key=lambda w: w.seq)
    if live or short:
        lead = (live or short)[0]
    else:
        starved = [w for w in in_turn if now - w.born >= patience]
        if starved:
            lead = starved[0]
        else:
            items: dict[Hashable, int] = {}
            for w in in_turn:
                items[w.key] = items.get(w.key, 0) + w.items
            best = max(items.values(), key=lambda n: min(n, max_items))
            lead = next(w for w in in_turn if min(items[w.key], max_items) == min(best, max_items))
    batch = [lead]
    room = max_items - lead.items
    # live steps first, oldest first; then one step per file job per round, in round-robin order
    queue = list(live) + short
    rounds = [[w for w in by_job[j] if not w.short] for j in files]
    while any(rounds):
        for steps in rounds:
            if steps:
                queue.append(steps.pop(0))
    if not mix and urgent(lead):
        queue = [w for w in queue if urgent(w)]
    for w in queue:
        if w is not lead and w.key == lead.key and w.items <= room:
            batch.append(w)
            room -= w.items
    return batch

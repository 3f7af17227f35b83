"""The decoded audio that admitted requests hold while they wait for a worker, and its budget (issue 39 #2).

Every admitted request keeps its audio as 16 kHz float32 PCM (4 bytes a sample, in a memfd: not in the
daemon's RSS) from its decode until its job reaches a worker, where it runs. Without a bound, twenty files of
half an hour each held 2.3 GB. So a request counts here from its first decoded packet; one that would take the
total past ``HASR_MAX_QUEUED_AUDIO_MB`` is refused while it decodes (503 ``queue_full`` with Retry-After), its
audio let go at once. A request alone is always let in, so a file up to ``HASR_MAX_AUDIO_SEC`` is never refused
for its length. What is held shows in /api/ps (``queued_audio_mb``).
"""

from __future__ import annotations

import threading

from hasrd import errors

MB = 2**20


class AudioBudget:
    """What every waiting request holds (bytes by hold); ``grow`` is called from the decode threads."""

    def __init__(self) -> None:
        self._held: dict[Hold, int] = {}
        self._lock = threading.Lock()

    @property
    def held_mb(self) -> float:
        with self._lock:  # a decode thread may add or drop a hold meanwhile
            return round(sum(self._held.values()) / MB, 1)

    def hold(self, budget_mb: float) -> Hold:
        return Hold(self, int(budget_mb * MB))


class Hold:
    """One request's decoded audio while it waits: grows as it decodes, let go (idempotent) when its job
    reaches a worker or the request ends."""

    def __init__(self, budget: AudioBudget, limit: int) -> None:
        self.budget, self.limit = budget, limit
        self.dropped = False

    def grow(self, nbytes: int) -> None:
        """Now holding ``nbytes``; QueueFull when that takes the waiting total past the budget (unless alone).
        After :meth:`drop` (a decode still running for a client that left) it counts nothing any more."""
        with self.budget._lock:
            if self.dropped:
                return
            others = sum(n for h, n in self.budget._held.items() if h is not self)
            if others and others + nbytes > self.limit:
                raise errors.QueueFull(
                    f"requests waiting for a worker already hold {others / MB:.0f} MB of decoded audio, and this "
                    f"one's would pass the {self.limit / MB:.0f} MB they may hold (HASR_MAX_QUEUED_AUDIO_MB); try "
                    f"again once some have started", retry_after=10)
            self.budget._held[self] = nbytes

    def drop(self) -> None:
        with self.budget._lock:
            self.dropped = True
            self.budget._held.pop(self, None)

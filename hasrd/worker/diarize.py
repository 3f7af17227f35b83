"""Who spoke when, as pure functions over plain values: speech cut into windows, window embeddings clustered into
voices, and every word and sentence given its voice (the worker's speakers stage, speakers.py, runs the VAD and the
model around them).

Why these choices:
- Windows of 1.5 s every 0.75 s inside each stretch of speech (a stretch shorter than a window is one window):
  long enough for a voice's pitch and timbre, short enough that one window rarely holds two people.
- Average-linkage agglomerative clustering on cosine similarity: no number of speakers needed (merging stops
  below ``SAME_VOICE``), or exactly the number asked. Clusters of a handful of windows are absorbed into their
  nearest when the number is estimated: a cough or a laugh is not a speaker.
- Each 10 ms of speech takes the label of the window whose centre is nearest, so a change of speaker is placed to
  within half a hop; a word takes the label most of its frames have, and a sentence is split where its words'
  speaker changes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

WIN, HOP, MIN_WIN = 1.5, 0.75, 0.4  # seconds
SAME_VOICE = 0.45  # average linkage merges windows this alike on average (estimating the number)
SAME_CENTRE = 0.6  # then clusters whose centres are this alike are one voice (asked for N: N is too many)
MIN_SHARE = 0.05  # an estimated cluster with less of the windows than this (and under 3 windows) is absorbed
STEP = 0.01  # the timeline's resolution
NEAR = 1.6  # seconds either side of a window: its two neighbours each way


class TooManySpeakers(ValueError):
    """More speakers were asked for than the audio holds; the message says how many it seems to hold."""


def windows(regions: list[tuple[float, float]], win: float = WIN, hop: float = HOP,
            min_win: float = MIN_WIN) -> list[tuple[float, float]]:
    """Windows over the speech regions: every ``hop`` a ``win``-long window, the last one ending at the region's
    end; a region shorter than ``win`` (but at least ``min_win``) is one window."""
    out: list[tuple[float, float]] = []
    for s, e in regions:
        if e - s < min_win:
            continue
        if e - s <= win:
            out.append((s, e))
            continue
        t = s
        while t + win < e:
            out.append((round(t, 3), round(t + win, 3)))
            t += hop
        out.append((round(e - win, 3), e))
    return out


def _merge_until(sim: np.ndarray, stop: int, threshold: float | None) -> list[list[int]]:
    """Average linkage: merge the most similar pair until ``stop`` clusters remain or (``threshold``) no pair is
    that similar; ``sim`` is the windows' cosine similarities. Returns the clusters' window indices."""
    n = len(sim)
    members = [[i] for i in range(n)]
    alive = np.ones(n, dtype=bool)
    s = sim.astype(np.float64).copy()
    np.fill_diagonal(s, -np.inf)
    count = n
    while count > stop:  # a merged-away cluster's row and column are -inf: never the best pair again
        k = int(np.argmax(s))
        i, j = divmod(k, n)
        if threshold is not None and s[i, j] < threshold:
            break
        ni, nj = len(members[i]), len(members[j])
        merged = (s[i] * ni + s[j] * nj) / (ni + nj)
        s[i, :], s[:, i] = merged, merged
        s[i, i] = -np.inf
        alive[j] = False
        s[j, :], s[:, j] = -np.inf, -np.inf
        members[i] += members[j]
        members[j] = []
        count -= 1
    return [m for m, a in zip(members, alive, strict=True) if a]


def _centroids(emb: np.ndarray, clusters: list[list[int]]) -> np.ndarray:
    c = np.stack([emb[m].mean(axis=0) for m in clusters])
    return c / np.maximum(np.linalg.norm(c, axis=1, keepdims=True), 1e-9)


def _join_centres(emb: np.ndarray, clusters: list[list[int]]) -> list[list[int]]:
    """Clusters merged while two centres are SAME_CENTRE alike: a voice the linkage left in two parts (windows of
    one voice vary more than their centres do)."""
    clusters = [list(m) for m in clusters]
    while len(clusters) > 1:
        cents = _centroids(emb, clusters)
        cs = cents @ cents.T
        np.fill_diagonal(cs, -1.0)
        i, j = divmod(int(np.argmax(cs)), len(clusters))
        if cs[i, j] < SAME_CENTRE:
            break
        clusters[i] += clusters.pop(j)
    return clusters


def _heard_alone(clusters: list[list[int]], centres: np.ndarray) -> set[int]:
    """The clusters that somewhere hold the strict majority of the windows within NEAR s of a window's centre: a
    voice that speaks for a turn does; windows across turn changes (two voices at once, alike among themselves)
    never do, so they make no speaker of their own."""
    label = np.empty(len(centres), dtype=int)
    for k, members in enumerate(clusters):
        label[members] = k
    order = np.argsort(centres, kind="stable")
    t, lab = centres[order], label[order]
    out: set[int] = set()
    for i in range(len(t)):
        a, b = np.searchsorted(t, t[i] - NEAR), np.searchsorted(t, t[i] + NEAR, side="right")
        counts = np.bincount(lab[a:b], minlength=len(clusters))
        top = int(counts.argmax())
        if (counts == counts[top]).sum() == 1:
            out.add(top)
    return out


def cluster(emb: np.ndarray, speakers: int | None = None, centres: np.ndarray | None = None) -> np.ndarray:
    """A cluster label per window (unit embeddings), numbered in order of first window. ``speakers``: exactly that
    many; None: estimated (``centres``, the windows' times, let windows across turn changes be told from a voice:
    :func:`_heard_alone`). TooManySpeakers when asked for more than the windows hold, or for N where two of the N
    voices are clearly one."""
    n = len(emb)
    if n == 0:
        return np.zeros(0, dtype=int)
    if speakers is not None and speakers > n:
        raise TooManySpeakers(f"asked for {speakers} speakers, but the audio has speech enough for {n} at most")
    sim = emb @ emb.T
    clusters = _merge_until(sim, speakers or 1, None if speakers else SAME_VOICE)
    if speakers is None:
        clusters = _join_centres(emb, clusters)
        big = [m for m in clusters if len(m) >= 3 or len(m) >= MIN_SHARE * n]
        clusters = big or clusters
        if centres is not None and len(clusters) > 1:
            alone = _heard_alone(clusters, centres)
            clusters = [m for k, m in enumerate(clusters) if k in alone] or clusters
    cents = _centroids(emb, clusters)
    if speakers is not None and len(cents) > 1:
        cs = cents @ cents.T
        np.fill_diagonal(cs, -1.0)
        if cs.max() >= SAME_CENTRE:
            guess = min(len(_merge_until(sim, 1, SAME_VOICE)), speakers - 1)
            raise TooManySpeakers(f"asked for {speakers} speakers, but the audio seems to hold {guess} voices hasr "
                                  f"can tell apart: ask for fewer, or for speakers=auto")
    for _ in range(3):  # settle each window on its nearest voice (the linkage's early merges are greedy)
        labels = np.argmax(emb @ cents.T, axis=1)
        keep = [k for k in range(len(cents)) if np.any(labels == k)]
        cents = _centroids(emb, [list(np.flatnonzero(labels == k)) for k in keep])
    labels = np.argmax(emb @ cents.T, axis=1)
    order: dict[int, int] = {}
    for lab in labels:
        order.setdefault(int(lab), len(order))
    return np.array([order[int(lab)] for lab in labels], dtype=int)


@dataclass(frozen=True)
class Timeline:
    """Who speaks at each 10 ms of the audio (-1: nobody heard), from labelled windows."""

    labels: np.ndarray

    @classmethod
    def of(cls, wins: list[tuple[float, float]], labels: np.ndarray, duration: float) -> Timeline:
        steps = max(1, int(np.ceil(duration / STEP)))
        out = np.full(steps, -1, dtype=int)
        if not wins:
            return cls(out)
        t = (np.arange(steps) + 0.5) * STEP
        centres = np.array([(s + e) / 2 for s, e in wins])
        inside = np.zeros(steps, dtype=bool)
        for s, e in wins:
            inside[int(s / STEP):int(np.ceil(e / STEP))] = True
        order = np.argsort(centres, kind="stable")
        cs = centres[order]
        right = np.clip(np.searchsorted(cs, t), 0, len(cs) - 1)
        left = np.clip(right - 1, 0, len(cs) - 1)
        nearest = np.where(np.abs(t - cs[left]) <= np.abs(t - cs[right]), left, right)
        out[inside] = labels[order[nearest[inside]]]
        return cls(out)

    def who(self, start: float, end: float) -> int:
        """The label most of [start, end) has; the nearest one heard when nobody was heard there (-1: none at all)."""
        a = max(0, min(len(self.labels) - 1, int(start / STEP)))
        b = max(a + 1, min(len(self.labels), int(np.ceil(end / STEP))))
        part = self.labels[a:b]
        part = part[part >= 0]
        if len(part):
            return int(np.bincount(part).argmax())
        heard = np.flatnonzero(self.labels >= 0)
        if not len(heard):
            return -1
        return int(self.labels[heard[np.abs(heard - (a + b) / 2).argmin()]])


def settle(starts: list[float], ends: list[float], labels: list[int], reach: float = HOP) -> list[int]:
    """Words' voices with each change of voice moved to the widest pause between words within ``reach`` s of where
    the windows put it: people take turns at pauses, and the windows only place a change to within half a hop
    (the first word of a turn went to the speaker before). ``starts``/``ends``: the words' times, in order."""
    out = list(labels)
    for i in range(1, len(out)):
        if out[i] == out[i - 1]:
            continue
        lo = i
        while lo > 1 and out[lo - 2] == out[i - 1] and starts[i] - starts[lo - 1] <= reach:
            lo -= 1
        hi = i
        while hi + 1 < len(out) and out[hi + 1] == out[i] and starts[hi + 1] - starts[i] <= reach:
            hi += 1
        def pause(k: int) -> float:
            return round(starts[k] - ends[k - 1], 2)  # to 10 ms: float noise is no wider pause

        best = max(range(lo, hi + 1), key=lambda k: (pause(k), -abs(k - i)))
        if pause(best) <= pause(i):
            continue
        if best < i:
            out[best:i] = [out[i]] * (i - best)
        elif best > i:
            out[i:best] = [out[i - 1]] * (best - i)
    return out


def names(count: int, given: list[str]) -> list[str]:
    """Labels for ``count`` speakers in order of first words: the names given, then A, B, C… (OpenAI's)."""
    out = list(given[:count])
    letters = (chr(ord("A") + k) if k < 26 else f"S{k + 1}" for k in range(10_000))
    while len(out) < count:
        cand = next(letters)
        if cand not in out:
            out.append(cand)
    return out

"""Proactive propagation of image blocks (Supercloud, SoCC 2016, §4.1.3): which updated
block to push next, and to which site.

P = K f_r / f_w + f_r when f_r / f_w >= S, else -1 (never written, or written more than
read: pushing it would waste WAN traffic); K = 1000 and S = 1 in the paper's prototype.
Destinations are drawn from the image's transition probability table, so the site the VM
most likely moves to gets most of the pushed blocks.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping

import numpy as np

from geoslo.errors import InputError

__all__ = ["propagation_priority", "PropagationQueue", "TransitionTable", "K_DEFAULT", "S_DEFAULT"]

K_DEFAULT = 1000.0  # §4.1.3
S_DEFAULT = 1.0  # §4.1.3


def propagation_priority(
    reads: float, writes: float, k: float = K_DEFAULT, s: float = S_DEFAULT
) -> float:
    """§4.1.3's P for a block read ``reads`` and written ``writes`` times."""
    if writes <= 0 or reads / writes < s:
        return -1.0
    return k * reads / writes + reads


class PropagationQueue:
    """Updated blocks of one image by priority (a heap with stale entries skipped)."""

    def __init__(self, k: float = K_DEFAULT, s: float = S_DEFAULT) -> None:
        self.k, self.s = k, s
        self.reads: dict[int, int] = {}
        self.writes: dict[int, int] = {}
        self._priority: dict[int, float] = {}
        self._heap: list[tuple[float, int]] = []

    def _update(self, block: int) -> None:
        priority = propagation_priority(
            self.reads.get(block, 0), self.writes.get(block, 0), self.k, self.s
        )
        if block in self._priority or self.writes.get(block, 0):
            self._priority[block] = priority
            heapq.heappush(self._heap, (-priority, block))

    def record_read(self, block: int) -> None:
        self.reads[block] = self.reads.get(block, 0) + 1
        if block in self._priority:
            self._update(block)

    def record_write(self, block: int) -> None:
        """A write makes the block (again) a candidate for propagation."""
        self.writes[block] = self.writes.get(block, 0) + 1
        self._update(block)

    def pop(self) -> int | None:
        """The updated block with the highest priority >= 0, taken off the queue."""
        while self._heap:
            negative, block = self._heap[0]
            if self._priority.get(block) != -negative:
                heapq.heappop(self._heap)  # stale
                continue
            if -negative < 0:
                return None
            heapq.heappop(self._heap)
            del self._priority[block]
            return block
        return None

    def __len__(self) -> int:
        return len(self._priority)


class TransitionTable:
    """The probability that the VM moves from one site to another (§4.1.3): given by the
    user, or learnt from the migrations seen (counts, each row normalised)."""

    def __init__(self, probabilities: Mapping[str, Mapping[str, float]]) -> None:
        for src, row in probabilities.items():
            total = sum(row.values())
            if any(p < 0 for p in row.values()) or total <= 0:
                raise InputError(f"transitions.{src}", "must be non-negative with a positive sum")
        self.probabilities = {src: dict(row) for src, row in probabilities.items()}
        self._counts: dict[str, dict[str, int]] = {}

    def destination(self, site: str, rng: np.random.Generator) -> str | None:
        row = {dst: p for dst, p in self.probabilities.get(site, {}).items() if dst != site}
        if not row or sum(row.values()) <= 0:
            return None
        sites = sorted(row)
        weights = np.array([row[d] for d in sites]) / sum(row.values())
        return sites[int(rng.choice(len(sites), p=weights))]

    def learn(self, src: str, dst: str) -> None:
        """Count one migration and make the row the observed frequencies."""
        counts = self._counts.setdefault(src, {})
        counts[dst] = counts.get(dst, 0) + 1
        total = sum(counts.values())
        self.probabilities[src] = {d: n / total for d, n in counts.items()}

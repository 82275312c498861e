"""The hedge budget as a client enforces it: time-bucketed counts of primary and extra
storage requests over a sliding window (after Finagle's RetryBudget, whose deposits
expire after its ttl). Pure: the caller passes the clock, so tests need no sleeping; it
lives here, below both, so that the simulator (``geoslo.sim.costlo``) and the live
libraries (``geoslo.live.costlo._budget``) enforce the same class.

Memory is bounded: ``buckets`` counters per kind, whatever the request rate. The window
is counted to the granularity of one bucket: a request leaves it between ``window_s -
window_s / buckets`` and ``window_s`` after it was recorded.
"""

from __future__ import annotations

import math

from geoslo.control.costlo.types import HedgeBudget

__all__ = ["BudgetWindow", "DEFAULT_BUCKETS"]

DEFAULT_BUCKETS = 10  # the window in tenths: a tenth of it is the counting error


class BudgetWindow:
    """Primary and extra storage requests over the last ``budget.window_s`` seconds;
    :meth:`try_extra` admits a redundant set only if the window's extras stay within
    ``extra_fraction`` of its primaries plus ``min_extra_per_s`` x ``window_s``."""

    def __init__(self, budget: HedgeBudget, buckets: int = DEFAULT_BUCKETS) -> None:
        if buckets < 1:
            raise ValueError("buckets must be >= 1")
        self.budget = budget
        self.bucket_s = budget.window_s / buckets
        self._primary = [0] * buckets
        self._extra = [0] * buckets
        self._index = [None] * buckets  # which bucket of time each slot holds
        self.refused = 0  # redundant sets refused, in all
        self.refused_requests = 0  # their storage requests

    def _slot(self, now_s: float) -> int:
        """The slot of ``now_s``'s bucket, emptied if it held an expired bucket."""
        index = math.floor(now_s / self.bucket_s)
        slot = index % len(self._index)
        if self._index[slot] != index:
            self._index[slot], self._primary[slot], self._extra[slot] = index, 0, 0
        return slot

    def _live(self, now_s: float) -> list[int]:
        """Slots whose buckets lie within the window ending at ``now_s``."""
        current = math.floor(now_s / self.bucket_s)
        oldest = current - len(self._index) + 1
        return [s for s, i in enumerate(self._index) if i is not None and oldest <= i <= current]

    def counts(self, now_s: float) -> tuple[int, int]:
        """(primary, extra) storage requests in the window ending at ``now_s``."""
        live = self._live(now_s)
        return sum(self._primary[s] for s in live), sum(self._extra[s] for s in live)

    def record_primary(self, now_s: float, requests: int = 1) -> None:
        """An operation's first storage request(s), issued at ``now_s``."""
        self._primary[self._slot(now_s)] += requests

    def try_extra(self, now_s: float, requests: int) -> bool:
        """Ask to issue a redundant set of ``requests`` storage requests at ``now_s``:
        True (and counted) if the window allows them, else False (a refusal, counted)."""
        primary, extra = self.counts(now_s)
        if extra + requests <= self.budget.allowed_extra(primary):
            self._extra[self._slot(now_s)] += requests
            return True
        self.refused += 1
        self.refused_requests += requests
        return False

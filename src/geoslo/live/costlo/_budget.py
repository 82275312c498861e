"""The hedge budgets the live client and VM libraries enforce.

* :class:`LocalBudget`: this process's window, :class:`BudgetWindow`, the same pure class the
  simulator enforces. It is defined in the control layer (``geoslo.control.costlo._budget``)
  because the layers import downwards only and the simulator sits below ``geoslo.live``
  (docs/architecture.md).
* :class:`SharedBudget`: one window for a whole fleet of clients (issue 38, item 7), kept
  by the region's lock service (op ``hedge``): N clients together stay within one budget,
  where N local windows allow N reserves of ``min_extra_per_s``.

Both count primaries at once and answer ``try_extra`` as a coroutine.
"""

from __future__ import annotations

import asyncio

from geoslo.control.costlo._budget import DEFAULT_BUCKETS, BudgetWindow
from geoslo.control.costlo.types import HedgeBudget
from geoslo.errors import TestbedError

__all__ = ["BudgetWindow", "DEFAULT_BUCKETS", "LocalBudget", "SharedBudget"]

ASK_TIMEOUT_S = 0.1  # a shared budget's answer; later, the hedge is refused


class LocalBudget:
    """This process's own window."""

    def __init__(self, budget: HedgeBudget) -> None:
        self.window = BudgetWindow(budget)

    def record_primary(self, now_s: float, requests: int = 1) -> None:
        self.window.record_primary(now_s, requests)

    async def try_extra(self, now_s: float, requests: int) -> bool:
        return self.window.try_extra(now_s, requests)


class SharedBudget:
    """The fleet's window in the lock service (``pool`` names it; every client of a pool
    gives the same ``budget``). Primaries are counted here and deposited with the next
    request; a hedge waits for the service's answer (a local round trip, after the GET's
    timeout); a service that does not answer within ASK_TIMEOUT_S refuses it: a hedge is
    optional."""

    def __init__(self, locks, pool: str, budget: HedgeBudget) -> None:
        self.locks, self.pool, self.budget = locks, pool, budget
        self._pending = 0  # primaries not deposited yet
        self.unanswered = 0  # hedges refused because the service did not answer

    def record_primary(self, now_s: float, requests: int = 1) -> None:
        self._pending += requests

    async def try_extra(self, now_s: float, requests: int) -> bool:
        pending, self._pending = self._pending, 0
        try:
            ask = self.locks.hedge(self.pool, self.budget, pending, requests)
            return await asyncio.wait_for(ask, ASK_TIMEOUT_S)
        except (TestbedError, TimeoutError):
            self._pending += pending  # deposited with the next request
            self.unanswered += 1
            return False

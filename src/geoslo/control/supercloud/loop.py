"""The Supercloud scheduler's loop (SoCC 2016, §5.1): evaluate the placement every minute
from the last minute's workload report, never while a migration is still running."""

from __future__ import annotations

from dataclasses import replace

from geoslo.control.supercloud.decide import decide
from geoslo.control.supercloud.evaluation import score_placement
from geoslo.control.supercloud.types import FrontEnd, Placement, PlacementState, Plan

__all__ = ["PlacementLoop"]


class PlacementLoop:
    """``template`` holds sites, L, the evaluation function and its weights; T is
    ``threshold_fraction`` of the current placement's score, so that a move must cut the
    weighted latency by that fraction whatever the load."""

    def __init__(
        self, template: PlacementState, threshold_fraction: float = 0.1, interval_s: float = 60.0
    ) -> None:
        self.template = template
        self.threshold_fraction = threshold_fraction
        self.interval_s = interval_s
        self._next_s = 0.0

    def step(
        self, now_s: float, front_ends: tuple[FrontEnd, ...], current: Placement, busy: bool
    ) -> Plan | None:
        """A plan to carry out now, or None (not yet time, migrating, or nothing better)."""
        if now_s < self._next_s or busy:
            return None
        self._next_s = now_s + self.interval_s
        state = replace(self.template, front_ends=front_ends, current=current, threshold=0.0)
        threshold = self.threshold_fraction * abs(score_placement(state, current))
        plan = decide(replace(state, threshold=threshold))
        return plan if plan.migrations else None

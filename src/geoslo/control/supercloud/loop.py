"""The Supercloud scheduler's loop (SoCC 2016, §5.1): evaluate the placement every minute
from the last minute's workload report, never while a migration is still running."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from geoslo.control.supercloud.decide import decide
from geoslo.control.supercloud.evaluation import score_placement
from geoslo.control.supercloud.types import PlacementObservation, PlacementState, Plan
from geoslo.errors import InputError

__all__ = ["PlacementLoop", "INTERVAL_S", "THRESHOLD_FRACTION"]

INTERVAL_S = 60.0  # §5.1: the placement is evaluated every minute
THRESHOLD_FRACTION = 0.1  # T as a fraction of the current score (the paper leaves T open)


class PlacementLoop:
    """``template`` holds sites, L, the evaluation function and its weights; T is
    ``threshold_fraction`` of the current placement's score, so that a move must cut the
    weighted latency by that fraction whatever the load."""

    def __init__(
        self,
        template: PlacementState,
        threshold_fraction: float = THRESHOLD_FRACTION,
        interval_s: float = INTERVAL_S,
    ) -> None:
        self.template = template
        self.threshold_fraction = threshold_fraction
        self.interval_s = interval_s
        self._next_s = 0.0
        self.last_plan: Plan | None = None  # the last decision, moves or not

    def due(self, observation: PlacementObservation) -> bool:
        """Whether this observation is decided on: an interval has passed, none migrating."""
        return observation.now_s >= self._next_s and not observation.busy

    def step(self, observation: PlacementObservation) -> Plan | None:
        """A plan to carry out now, or None (not yet time, migrating, or nothing better)."""
        if not self.due(observation):
            return None
        self._next_s = observation.now_s + self.interval_s
        state = replace(
            self.template,
            front_ends=observation.front_ends,
            current=observation.current,
            threshold=0.0,
        )
        if observation.rtt_ms is not None:  # L as measured now (§5.1 observes it)
            rtt_ms = np.asarray(observation.rtt_ms, dtype=float)
            if rtt_ms.shape != self.template.rtt_ms.shape or not np.all(rtt_ms >= 0):
                raise InputError("rtt_ms", f"must be {self.template.rtt_ms.shape}, >= 0")
            state = replace(state, rtt_ms=rtt_ms)
        threshold = self.threshold_fraction * abs(score_placement(state, observation.current))
        plan = decide(replace(state, threshold=threshold))
        self.last_plan = plan
        return plan if plan.migrations else None

"""CosTLO's loop (NSDI 2015, §5.2): at the start of every epoch, re-measure, infer each
region's storage model from its agent's pairs (§5.3), re-select every prefix's
configuration, and hand the configurations to the clients and VM libraries.

``CostloLoop.step(observation)`` takes one epoch's measurements (an
:class:`EpochObservation`) and returns the :class:`EpochPlan` to put in force. A prefix
whose selection fails keeps the configuration it had (the plan in force stays for it);
the other prefixes move on.
"""

from __future__ import annotations

import time
from collections import Counter

from geoslo.control._contract import Outcome
from geoslo.control.costlo.decide import CostloProblem, RegionInput, decide
from geoslo.control.costlo.types import (
    EpochObservation,
    EpochPlan,
    PrefixObservation,
    SearchLimits,
    Selection,
    Slo,
    worst_status,
)
from geoslo.errors import InputError
from geoslo.models import StorageServiceModel, infer_storage_model

__all__ = ["CostloLoop", "prefix_problem"]


def prefix_problem(
    observation: EpochObservation, prefix: PrefixObservation, slo: Slo, limits: SearchLimits
) -> CostloProblem:
    """ConfSelector's input for one prefix: its serving region and, as candidates, every
    other region whose agent pinged the prefix (§5.2: the closest is the second region)."""

    def as_input(region) -> RegionInput:
        return RegionInput(
            region.name,
            region.prices,
            region.storage,
            region.ping_ms[prefix.name],
            region.relay_rps,
        )

    serving = observation.region(prefix.serving_region)
    if prefix.name not in serving.ping_ms:
        raise InputError(
            "ping_ms", f"the serving region {serving.name!r} has no pings to {prefix.name!r}"
        )
    others = tuple(
        as_input(r)
        for r in observation.regions
        if r.name != serving.name and prefix.name in r.ping_ms
    )
    return CostloProblem(prefix.workload, as_input(serving), others, slo, limits)


class CostloLoop:
    """ConfSelector once per epoch (§5.2), keeping the plan in force between epochs."""

    def __init__(self, slo: Slo | None = None, limits: SearchLimits | None = None) -> None:
        self.slo = slo if slo is not None else Slo()
        self.limits = limits if limits is not None else SearchLimits()
        self.epoch = 0
        self.plan: EpochPlan | None = None  # the last plan returned

    def step(self, observation: EpochObservation) -> EpochPlan | None:
        """Select every observed prefix's configuration for the next epoch; None when no
        prefix is observed (nothing to decide)."""
        if not observation.prefixes:
            return None
        started = time.perf_counter()
        self.epoch += 1
        models = self._storage_models(observation)
        previous = {} if self.plan is None else dict(self.plan.selections)
        selections: dict[str, Selection] = {}
        statuses: dict[str, str] = {}
        errors: dict[str, str] = {}
        held: list[str] = []
        for prefix in observation.prefixes:
            try:
                problem = prefix_problem(observation, prefix, self.slo, self.limits)
                selection = decide(problem, models)
            except Exception as error:  # one prefix's bad epoch must not stop the others
                statuses[prefix.name] = "failed"
                errors[prefix.name] = f"{type(error).__name__}: {error}"
                if prefix.name in previous:
                    selections[prefix.name] = previous[prefix.name]
                    held.append(prefix.name)
                continue
            selections[prefix.name] = selection
            statuses[prefix.name] = selection.outcome.status
        self.plan = EpochPlan(
            epoch=self.epoch,
            selections=selections,
            statuses=statuses,
            outcome=self._outcome(selections, statuses, started),
            held=tuple(held),
            errors=errors,
        )
        return self.plan

    @staticmethod
    def _storage_models(observation: EpochObservation) -> dict[str, StorageServiceModel]:
        """Each region's storage model, inferred once for all prefixes (§5.3); a region
        whose pairs cannot be read is left for ``decide`` to report per prefix."""
        models = {}
        for region in observation.regions:
            try:
                models[region.name] = infer_storage_model(region.storage)
            except Exception:  # noqa: BLE001 - decide() infers again and names the error
                continue
        return models

    @staticmethod
    def _outcome(
        selections: dict[str, Selection], statuses: dict[str, str], started: float
    ) -> Outcome:
        """The worst status over the prefixes selected afresh: a failed prefix holds its
        configuration, so the plan stays usable, and the plan is ``failed`` only when
        every prefix failed. The solver's word counts the statuses (``failed=1,
        feasible=119``); the objective is the plan's total cost (USD per month)."""
        counts = Counter(statuses.values())
        summary = ",".join(f"{status}={counts[status]}" for status in sorted(counts))
        fresh = [status for status in statuses.values() if status != "failed"]
        status = worst_status(fresh) if fresh else "failed"
        cost_usd = sum(s.cost.total_usd for s in selections.values())
        decide_ms = (time.perf_counter() - started) * 1e3
        return Outcome(status, summary, float(cost_usd), decide_ms)

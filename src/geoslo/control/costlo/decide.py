"""ConfSelector for one prefix from the agents' measurements (§5.2-§5.3): infer each
region's storage model, pick the second region (the closest other one), build the
estimators and the cost model, search. Pure: no clock, no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from geoslo.control.costlo.cost import CostModel
from geoslo.control.costlo.estimate import GetEstimator, PutEstimator, RegionView
from geoslo.control.costlo.search import PrefixContext, Reader, select_configuration
from geoslo.control.costlo.types import PrefixWorkload, SearchLimits, Selection, Slo
from geoslo.dist import LatencyDistribution
from geoslo.errors import InputError
from geoslo.models import StorageMeasurements, StorageServiceModel, infer_storage_model
from geoslo.models._storage_service import DEFAULT_STEP_MS
from geoslo.topology import StoragePrices

__all__ = ["RegionInput", "CostloProblem", "decide", "region_view", "prefix_context"]


@dataclass(frozen=True, eq=False)
class RegionInput:
    """A candidate region: prices, its agent's storage pairs, its RTTs to the prefix and
    the rate one relay VM sustains (§5.2)."""

    name: str
    prices: StoragePrices
    storage: StorageMeasurements
    ping_ms: np.ndarray
    relay_rps: float


@dataclass(frozen=True, eq=False)
class CostloProblem:
    """One prefix: its workload, the serving region, the other candidate regions, the
    SLO and the search's limits. The second region is the candidate with the lowest
    median RTT to the prefix (§5.2), unless ``second_region`` names one."""

    workload: PrefixWorkload
    serving: RegionInput
    candidates: tuple[RegionInput, ...] = ()
    slo: Slo = field(default_factory=Slo)
    limits: SearchLimits = field(default_factory=SearchLimits)
    second_region: str | None = None

    def second(self) -> RegionInput | None:
        others = [r for r in self.candidates if r.name != self.serving.name]
        if self.second_region is not None:
            named = [r for r in others if r.name == self.second_region]
            if not named:
                raise InputError(
                    "second_region", f"{self.second_region!r} is not a candidate region"
                )
            return named[0]
        return min(others, key=lambda r: float(np.median(r.ping_ms)), default=None)


def region_view(region: RegionInput, storage: StorageServiceModel | None = None) -> RegionView:
    """The estimator's view of a region (infers the storage model unless given)."""
    model = storage if storage is not None else infer_storage_model(region.storage)
    ping = LatencyDistribution.from_samples(region.ping_ms, DEFAULT_STEP_MS)
    return RegionView(region.name, model, ping, region.prices, region.relay_rps)


def prefix_context(
    workload: PrefixWorkload,
    serving: RegionView,
    second: RegionView | None,
    slo: Slo,
    limits: SearchLimits,
) -> PrefixContext:
    """Estimators and cost model of one prefix, ready for the search."""
    cost = CostModel(
        workload,
        serving.prices,
        None if second is None else second.prices,
        serving.relay_rps,
        1.0 if second is None else second.relay_rps,
    )
    reader = Reader(GetEstimator(serving, second), cost)
    return PrefixContext([reader], PutEstimator(serving), slo, limits)


def decide(
    problem: CostloProblem, storage: Mapping[str, StorageServiceModel] | None = None
) -> Selection:
    """The cheapest configuration found that meets the SLO (or the best found, ``met``
    false) for one prefix; its ``outcome`` says which. ``storage`` holds the regions'
    inferred storage models by name when the caller has them (the loop infers each
    region's once per epoch for all prefixes); the others are inferred here."""
    known = storage or {}
    second = problem.second()
    context = prefix_context(
        problem.workload,
        region_view(problem.serving, known.get(problem.serving.name)),
        None if second is None else region_view(second, known.get(second.name)),
        problem.slo,
        problem.limits,
    )
    return select_configuration(context)

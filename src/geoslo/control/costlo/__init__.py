"""CosTLO (NSDI 2015): cost-effective redundant GET/PUT requests that bound tail latency.

``types`` (configuration space, workload, prices, SLO, answer).
"""

from geoslo.control.costlo.types import (
    APPLICATIONS,
    Configuration,
    CostBreakdown,
    Estimate,
    GetTuple,
    PrefixWorkload,
    PutTuple,
    RegionPrices,
    SearchLimits,
    Selection,
    Slo,
)

__all__ = [
    "APPLICATIONS",
    "Configuration",
    "CostBreakdown",
    "Estimate",
    "GetTuple",
    "PrefixWorkload",
    "PutTuple",
    "RegionPrices",
    "SearchLimits",
    "Selection",
    "Slo",
]

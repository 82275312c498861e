"""CosTLO (NSDI 2015): cost-effective redundant GET/PUT requests that bound tail latency.

``types`` (configuration space, workload, prices, SLO, answer); ``decide`` (ConfSelector
for one prefix, §5.2); ``validation`` (the problem.json/config.json contract).
"""

from geoslo.control.costlo.decide import CostloProblem, RegionInput, decide
from geoslo.control.costlo.types import (
    APPLICATIONS,
    Configuration,
    CostBreakdown,
    Estimate,
    GetTuple,
    PrefixWorkload,
    PutTuple,
    SearchLimits,
    Selection,
    Slo,
    configuration_from_dict,
    configuration_to_dict,
)
from geoslo.control.costlo.validation import parse_problem, problem_to_dict, selection_to_dict
from geoslo.topology import StoragePrices  # a region's prices (§5.2)

__all__ = [
    "APPLICATIONS",
    "Configuration",
    "CostBreakdown",
    "CostloProblem",
    "Estimate",
    "GetTuple",
    "PrefixWorkload",
    "PutTuple",
    "RegionInput",
    "StoragePrices",
    "SearchLimits",
    "Selection",
    "Slo",
    "configuration_from_dict",
    "configuration_to_dict",
    "decide",
    "parse_problem",
    "problem_to_dict",
    "selection_to_dict",
]

"""CosTLO (NSDI 2015): cost-effective redundant GET/PUT requests that bound tail latency.

``types`` (configuration space, workload, prices, SLO, answer, an epoch's observation and
plan); ``decide`` (ConfSelector for one prefix, §5.2); ``loop`` (re-select every prefix
each epoch, §5.2); ``validation`` (the problem.json/config.json contract); ``example`` (an
illustrative prefix).
"""

from geoslo.control.costlo._schema import HedgeBudgetInput
from geoslo.control.costlo.decide import CostloProblem, RegionInput, decide
from geoslo.control.costlo.example import example_dict, example_problem
from geoslo.control.costlo.loop import CostloLoop, prefix_problem
from geoslo.control.costlo.types import (
    APPLICATIONS,
    Configuration,
    CostBreakdown,
    EpochObservation,
    EpochPlan,
    Estimate,
    GetTuple,
    HedgeBudget,
    PrefixObservation,
    PrefixWorkload,
    PutTuple,
    RegionObservation,
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
    "CostloLoop",
    "CostloProblem",
    "EpochObservation",
    "EpochPlan",
    "Estimate",
    "GetTuple",
    "HedgeBudget",
    "HedgeBudgetInput",
    "PrefixObservation",
    "PrefixWorkload",
    "PutTuple",
    "RegionInput",
    "RegionObservation",
    "StoragePrices",
    "SearchLimits",
    "Selection",
    "Slo",
    "configuration_from_dict",
    "configuration_to_dict",
    "decide",
    "example_dict",
    "example_problem",
    "parse_problem",
    "prefix_problem",
    "problem_to_dict",
    "selection_to_dict",
]

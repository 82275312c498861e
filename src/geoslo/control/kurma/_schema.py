"""The problem.json and plan.json contract of ``geoslo kurma decide`` as pydantic models: the
one source of the structure, types and ranges that ``parse_problem`` checks and
``geoslo kurma schema`` publishes (docs/kurma.md)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from geoslo._schema import Contract, Flag, Fraction, List, Number, Text
from geoslo.control._schema import OutcomeFields

__all__ = [
    "ProblemInput",
    "PlanOutput",
    "INPUT",
    "OUTPUT",
    "MAX_SITES",
    "MAX_LOAD_POINTS",
    "MAX_RATE_RPS",
    "MIN_CAPACITY_RPS",
]

# Ranges (docs/kurma.md). The paper has 3-5 sites; 20 is twice the largest problem of the
# report's scaling table. A profiled grid has tens of loads; 1,000 leaves room to spare.
MAX_SITES = 20
MAX_LOAD_POINTS = 1_000
# A rate of 1e9 req/s is more than any one datacenter serves (the paper's sites: 55k).
MAX_RATE_RPS = 1e9
MIN_CAPACITY_RPS = 1.0  # a site serving under 1 req/s is no datacenter


def _per_site(item):
    """One entry per site."""
    return List(item, 1, MAX_SITES)


class Curves(Contract):
    """The SLO-violation surfaces (§5.1): a load grid and, for every (origin, serving) pair
    of sites, the violation fraction at each load."""

    load_rps: Annotated[
        list[Number(0.0, MAX_RATE_RPS)], Field(min_length=2, max_length=MAX_LOAD_POINTS)
    ]
    violation: _per_site(_per_site(List(Fraction, 2, MAX_LOAD_POINTS)))


class ProblemInput(Contract):
    """problem.json: the sites, their demand and capacity, the SLO target, the solver's
    quantum, the curves and, optionally, which sites are up and the redirect bounds."""

    sites: List(Text, 1, MAX_SITES)
    demand_rps: _per_site(Number(0.0, MAX_RATE_RPS))
    capacity_rps: _per_site(Number(MIN_CAPACITY_RPS, MAX_RATE_RPS))
    slo_violation_target: Number(above=0.0, below=1.0) = 0.05  # rho (§7)
    quantum_fraction: Number(above=0.0, high=1.0) = 0.01  # §5.2's 1% quantum
    curves: Curves
    available: _per_site(Flag) | None = None  # null: every site is up
    max_redirect_fraction: _per_site(_per_site(Fraction)) | None = None  # null: no bound


# ---------------------------------------------------------------------------- output


class PlanOutput(OutcomeFields):
    """plan.json: how the decision ended (objective: the formulation's, expected
    violations for perf), the rates from every site to every site and what they predict."""

    formulation: Literal["perf", "cost"]
    rates_rps: list[list[float]]
    expected_violations_rps: float
    site_violation_fraction: list[float]
    redirected_rps: float
    optimal: bool
    gap: float
    feasible: bool
    infeasible_sites: list[str]
    work_limit: int = 0  # work units the search was allowed (a limit counts work, not time)


INPUT, OUTPUT = ProblemInput, PlanOutput

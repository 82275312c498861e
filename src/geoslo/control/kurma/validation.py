"""The problem.json contract of Kurma's solver: parse, check, and write back (§5, §9).

Every bad input raises :class:`~geoslo.errors.InputError` naming the field (a JSON path such
as ``curves.violation[0][1][3]``) and what is wrong with it. Every number has a range and
every list a length bound (the constants below, also in docs/kurma.md's table), so that
whatever is accepted is solved within the time limit in bounded memory.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from geoslo._json import as_list, check_keys, fraction, number, numbers
from geoslo.control.kurma.problem import KurmaProblem
from geoslo.errors import InputError

__all__ = [
    "parse_problem",
    "problem_to_dict",
    "MAX_SITES",
    "MAX_LOAD_POINTS",
    "MAX_RATE_RPS",
    "MAX_QUANTA_PER_SITE",
]

# Ranges (docs/kurma.md). The paper has 3-5 sites; 20 is twice the largest problem of the
# report's scaling table. A profiled grid has tens of loads; 1,000 leaves room to spare.
MAX_SITES = 20
MAX_LOAD_POINTS = 1_000
# A rate of 1e9 req/s is more than any one datacenter serves (the paper's sites: 55k).
MAX_RATE_RPS = 1e9
MIN_CAPACITY_RPS = 1.0  # a site serving under 1 req/s is no datacenter
# The solver works in quanta: a site sends at most demand / (quantum_fraction * capacity)
# of them, and its tables grow with that count. 10,000 is 100x capacity at the paper's 1%
# quantum (or 10x at 0.1%); past that a site is hopelessly overloaded anyway.
MAX_QUANTA_PER_SITE = 10_000

_TOP_KEYS = {
    "sites",
    "demand_rps",
    "capacity_rps",
    "slo_violation_target",
    "quantum_fraction",
    "curves",
    "available",
    "max_redirect_fraction",
}
_CURVE_KEYS = {"load_rps", "violation"}


def _sites(value: Any) -> tuple[str, ...]:
    items = as_list(value, "sites")
    if not 1 <= len(items) <= MAX_SITES:
        raise InputError("sites", f"must name 1 to {MAX_SITES} sites, not {len(items)}")
    for k, name in enumerate(items):
        if not isinstance(name, str) or not name:
            raise InputError(f"sites[{k}]", "must be a non-empty string")
    if len(set(items)) != len(items):
        raise InputError("sites", "names must be unique")
    return tuple(items)


def _rates(value: Any, name: str, n: int) -> np.ndarray:
    return numbers(value, name, n, "site", low=0.0, high=MAX_RATE_RPS)


def _capacity(value: Any, n: int) -> np.ndarray:
    """Capacities of at least 1 req/s: a site's quantum is a fraction of its capacity, and
    a site with none must not receive (``available`` marks a site that is down)."""
    return numbers(value, "capacity_rps", n, "site", low=MIN_CAPACITY_RPS, high=MAX_RATE_RPS)


def _fraction_open(value: Any, name: str, closed_above: bool) -> float:
    """A number in (0, 1), or in (0, 1] when ``closed_above``."""
    x = number(value, name, 0.0, 1.0)
    if x == 0.0 or (x == 1.0 and not closed_above):
        raise InputError(name, f"must be in (0, {'1]' if closed_above else '1)'}, not {x:g}")
    return x


def _check_quanta(demand: np.ndarray, capacity: np.ndarray, quantum_fraction: float) -> None:
    """Each site's demand is at most MAX_QUANTA_PER_SITE of its quanta (§5.2)."""
    for k, (d, c) in enumerate(zip(demand.tolist(), capacity.tolist(), strict=True)):
        count = d / (quantum_fraction * c)  # Python floats: inf, never a warning
        if count > MAX_QUANTA_PER_SITE:
            raise InputError(
                f"demand_rps[{k}]",
                f"is {count:.3g} quanta of quantum_fraction x capacity_rps[{k}]; at most "
                f"{MAX_QUANTA_PER_SITE} (raise quantum_fraction or capacity_rps[{k}])",
            )


def _grid(value: Any) -> np.ndarray:
    grid = numbers(value, "curves.load_rps", low=0.0, high=MAX_RATE_RPS)
    if not 2 <= grid.size <= MAX_LOAD_POINTS:
        raise InputError(
            "curves.load_rps", f"must have 2 to {MAX_LOAD_POINTS} loads, not {grid.size}"
        )
    if np.any(np.diff(grid) <= 0):
        raise InputError("curves.load_rps", "must be strictly increasing")
    return grid


def _violation(value: Any, n: int, k: int) -> np.ndarray:
    out = np.empty((n, n, k))
    for i, row in enumerate(as_list(value, "curves.violation", n, "site")):
        for j, curve in enumerate(as_list(row, f"curves.violation[{i}]", n, "site")):
            name = f"curves.violation[{i}][{j}]"
            items = as_list(curve, name)
            if len(items) != k:
                raise InputError(name, f"must have {k} values (one per curves.load_rps)")
            out[i, j] = [fraction(x, f"{name}[{m}]") for m, x in enumerate(items)]
    return out


def _available(value: Any, n: int) -> np.ndarray:
    items = as_list(value, "available", n, "site")
    for k, x in enumerate(items):
        if not isinstance(x, bool):
            raise InputError(f"available[{k}]", "must be true or false")
    return np.array(items, dtype=bool)


def _max_redirect(value: Any, n: int) -> np.ndarray:
    out = np.empty((n, n))
    for i, row in enumerate(as_list(value, "max_redirect_fraction", n, "site")):
        items = as_list(row, f"max_redirect_fraction[{i}]", n, "site")
        out[i] = [fraction(x, f"max_redirect_fraction[{i}][{j}]") for j, x in enumerate(items)]
    return out


def parse_problem(data: dict) -> KurmaProblem:
    """A checked :class:`KurmaProblem` from the problem.json contract."""
    check_keys(data, _TOP_KEYS, {"sites", "demand_rps", "capacity_rps", "curves"}, "")
    sites = _sites(data["sites"])
    n = len(sites)
    demand = _rates(data["demand_rps"], "demand_rps", n)
    capacity = _capacity(data["capacity_rps"], n)
    rho = _fraction_open(data.get("slo_violation_target", 0.05), "slo_violation_target", False)
    quantum = _fraction_open(data.get("quantum_fraction", 0.01), "quantum_fraction", True)
    _check_quanta(demand, capacity, quantum)
    curves = data["curves"]
    check_keys(curves, _CURVE_KEYS, _CURVE_KEYS, "curves")
    grid = _grid(curves["load_rps"])
    violation = _violation(curves["violation"], n, grid.size)
    available = data.get("available")
    bounds = data.get("max_redirect_fraction")
    return KurmaProblem(
        sites=sites,
        demand_rps=demand,
        capacity_rps=capacity,
        load_grid_rps=grid,
        violation=violation,
        slo_violation_target=rho,
        quantum_fraction=quantum,
        available=None if available is None else _available(available, n),
        max_redirect_fraction=None if bounds is None else _max_redirect(bounds, n),
    )


def problem_to_dict(problem: KurmaProblem) -> dict:
    """The problem.json form of ``problem`` (``parse_problem`` reads it back unchanged)."""
    out: dict[str, Any] = {
        "sites": list(problem.sites),
        "demand_rps": np.asarray(problem.demand_rps, dtype=float).tolist(),
        "capacity_rps": np.asarray(problem.capacity_rps, dtype=float).tolist(),
        "slo_violation_target": float(problem.slo_violation_target),
        "quantum_fraction": float(problem.quantum_fraction),
        "curves": {
            "load_rps": np.asarray(problem.load_grid_rps, dtype=float).tolist(),
            "violation": np.asarray(problem.violation, dtype=float).tolist(),
        },
    }
    if problem.available is not None:
        out["available"] = [bool(x) for x in problem.available]
    if problem.max_redirect_fraction is not None:
        out["max_redirect_fraction"] = np.asarray(
            problem.max_redirect_fraction, dtype=float
        ).tolist()
    return out

"""The problem.json contract of Kurma's solver: parse, check, and write back (§5, §9).

Every bad input raises :class:`~geoslo.errors.InputError` naming the field (a JSON path such
as ``curves.violation[0][1][3]``) and what is wrong with it. The structure, types and
ranges are the pydantic models of ``_schema.py`` (every number has a range and every list a
length bound, also in docs/kurma.md's table, so that whatever is accepted is solved within
the time limit in bounded memory); the checks across fields are here. Schema:
``geoslo kurma schema``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from geoslo._schema import validate
from geoslo.control.kurma import _schema as schema
from geoslo.control.kurma._schema import (
    MAX_LOAD_POINTS,
    MAX_RATE_RPS,
    MAX_SITES,
    MIN_CAPACITY_RPS,
)
from geoslo.control.kurma.problem import KurmaProblem
from geoslo.errors import InputError

__all__ = [
    "parse_problem",
    "problem_to_dict",
    "MAX_SITES",
    "MAX_LOAD_POINTS",
    "MAX_RATE_RPS",
    "MIN_CAPACITY_RPS",
    "MAX_QUANTA_PER_SITE",
]

# The solver works in quanta: a site sends at most demand / (quantum_fraction * capacity)
# of them, and its tables grow with that count. 10,000 is 100x capacity at the paper's 1%
# quantum (or 10x at 0.1%); past that a site is hopelessly overloaded anyway.
MAX_QUANTA_PER_SITE = 10_000


def _sites(names: list[str]) -> tuple[str, ...]:
    if len(set(names)) != len(names):
        raise InputError("sites", "names must be unique")
    return tuple(names)


def _per_site(values: list, name: str, n: int) -> list:
    """``values``, which must have one entry per site."""
    if len(values) != n:
        raise InputError(name, f"must have {n} entries (one per site), has {len(values)}")
    return values


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


def _grid(values: list[float]) -> np.ndarray:
    grid = np.array(values, dtype=float)
    if np.any(np.diff(grid) <= 0):
        raise InputError("curves.load_rps", "must be strictly increasing")
    return grid


def _violation(value: list, n: int, k: int) -> np.ndarray:
    """An n x n x k array: one curve per (origin, serving) pair, one value per load."""
    _per_site(value, "curves.violation", n)
    for i, row in enumerate(value):
        _per_site(row, f"curves.violation[{i}]", n)
        for j, curve in enumerate(row):
            if len(curve) != k:
                name = f"curves.violation[{i}][{j}]"
                raise InputError(name, f"must have {k} values (one per curves.load_rps)")
    return np.array(value, dtype=float).reshape(n, n, k)


def _max_redirect(value: list, n: int) -> np.ndarray:
    _per_site(value, "max_redirect_fraction", n)
    for i, row in enumerate(value):
        _per_site(row, f"max_redirect_fraction[{i}]", n)
    return np.array(value, dtype=float).reshape(n, n)


def parse_problem(data: dict) -> KurmaProblem:
    """A checked :class:`KurmaProblem` from the problem.json contract: the model's checks
    (``_schema.ProblemInput``), then the shapes, the unique names, the grid's order and the
    quanta per site."""
    problem = validate(schema.ProblemInput, data)
    sites = _sites(problem.sites)
    n = len(sites)
    demand = np.array(_per_site(problem.demand_rps, "demand_rps", n), dtype=float)
    capacity = np.array(_per_site(problem.capacity_rps, "capacity_rps", n), dtype=float)
    _check_quanta(demand, capacity, problem.quantum_fraction)
    grid = _grid(problem.curves.load_rps)
    violation = _violation(problem.curves.violation, n, grid.size)
    available = problem.available
    bounds = problem.max_redirect_fraction
    return KurmaProblem(
        sites=sites,
        demand_rps=demand,
        capacity_rps=capacity,
        load_grid_rps=grid,
        violation=violation,
        slo_violation_target=problem.slo_violation_target,
        quantum_fraction=problem.quantum_fraction,
        available=None
        if available is None
        else np.array(_per_site(available, "available", n), dtype=bool),
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

"""The problem.json contract of Kurma's solver: parse, check, and write back (§5, §9).

Every bad input raises :class:`~geoslo.errors.InputError` naming the field (a JSON path such
as ``curves.violation[0][1][3]``) and what is wrong with it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from geoslo._json import as_list, check_keys, fraction, number, numbers
from geoslo.control.kurma.problem import KurmaProblem
from geoslo.errors import InputError

__all__ = ["parse_problem", "problem_to_dict"]

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
    if not items:
        raise InputError("sites", "must name at least one site")
    for k, name in enumerate(items):
        if not isinstance(name, str) or not name:
            raise InputError(f"sites[{k}]", "must be a non-empty string")
    if len(set(items)) != len(items):
        raise InputError("sites", "names must be unique")
    return tuple(items)


def _nonnegative(value: Any, name: str, n: int) -> np.ndarray:
    out = numbers(value, name, n, "site")
    for k, x in enumerate(out):
        if x < 0:
            raise InputError(f"{name}[{k}]", f"must be >= 0, not {x}")
    return out


def _grid(value: Any) -> np.ndarray:
    grid = numbers(value, "curves.load_rps")
    if grid.size < 1:
        raise InputError("curves.load_rps", "must have at least one load")
    if np.any(grid < 0):
        raise InputError("curves.load_rps", "loads must be >= 0")
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
    demand = _nonnegative(data["demand_rps"], "demand_rps", n)
    capacity = _nonnegative(data["capacity_rps"], "capacity_rps", n)
    rho = number(data.get("slo_violation_target", 0.05), "slo_violation_target")
    if not 0.0 <= rho <= 1.0:
        raise InputError("slo_violation_target", f"must be in [0, 1], not {rho}")
    quantum = number(data.get("quantum_fraction", 0.01), "quantum_fraction")
    if not 0.0 < quantum <= 1.0:
        raise InputError("quantum_fraction", f"must be in (0, 1], not {quantum}")
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

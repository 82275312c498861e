"""Brute force for Kurma's quantised problem: every plan, for checking the solver (§5, §9).

Only for small problems (a few sites, coarse quanta): it enumerates, for every available
site, every vector of quanta sent to the others within the pair bounds and its demand, keeps
the combinations where no site both sends and receives, and scores each in plain Python.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from geoslo.control.kurma.problem import KurmaProblem

__all__ = ["brute_force", "plan_score"]


def _vectors(problem: KurmaProblem, i: int) -> list[tuple[int, ...]]:
    """Every quanta vector site i may send (one entry per site, 0 at i)."""
    n = len(problem.sites)
    avail = problem.available_mask
    q = problem.quantum_rps[i]
    demand = float(problem.demand_rps[i])
    if not avail[i] or q <= 0:
        return [(0,) * n]
    most = int(math.floor(demand / q * (1 + 1e-12) + 1e-9))
    caps = []
    for j in range(n):
        if j == i or not avail[j]:
            caps.append(0)
        else:
            pair = problem.max_redirect_matrix[i, j] * demand / q
            caps.append(min(most, int(math.floor(pair * (1 + 1e-12) + 1e-9))))
    return [v for v in itertools.product(*(range(c + 1) for c in caps)) if sum(v) <= most]


def plan_score(problem: KurmaProblem, units: np.ndarray, objective: str) -> tuple[float, float]:
    """(objective, redirected req/s): perf = total violations, cost = total excess over rho."""
    n = len(problem.sites)
    q = problem.quantum_rps
    demand = [float(d) for d in problem.demand_rps]
    rates = [[0.0] * n for _ in range(n)]
    for i in range(n):
        sent = 0.0
        for j in range(n):
            if j != i:
                rates[i][j] = units[i][j] * q[i]
                sent += rates[i][j]
        rates[i][i] = demand[i] - sent
    loads = [sum(rates[i][j] for i in range(n)) for j in range(n)]
    per_origin = [
        sum(rates[i][j] * problem.omega(i, j, loads[j]) for j in range(n) if rates[i][j] > 0)
        for i in range(n)
    ]
    redirected = sum(rates[i][j] for i in range(n) for j in range(n) if i != j)
    if objective == "perf":
        return sum(per_origin), redirected
    rho = problem.slo_violation_target
    avail = problem.available_mask
    excess = sum(max(per_origin[i] - rho * demand[i], 0.0) for i in range(n) if avail[i])
    return excess, redirected


def brute_force(problem: KurmaProblem, objective: str, tol: float = 1e-9):
    """(best units matrix, (objective, redirected)) over every quantised plan."""
    n = len(problem.sites)
    best_units, best = None, (math.inf, math.inf)
    for rows in itertools.product(*(_vectors(problem, i) for i in range(n))):
        sends = [any(rows[i][j] for j in range(n)) for i in range(n)]
        receives = [any(rows[i][j] for i in range(n)) for j in range(n)]
        if any(s and r for s, r in zip(sends, receives, strict=True)):
            continue
        units = np.array(rows)
        score = plan_score(problem, units, objective)
        if score[0] < best[0] - tol or (score[0] <= best[0] + tol and score[1] < best[1] - tol):
            best_units, best = units, score
    return best_units, best

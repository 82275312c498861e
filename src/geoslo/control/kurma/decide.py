"""Kurma's pure decision: from the exchanged state and the curves to the rates (§5, §6).

Every instance holds the same observation after the synchronised exchange and solves the
same problem deterministically, so each can enforce its own row of the one global plan.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from geoslo.control.kurma.problem import KurmaPlan, KurmaProblem
from geoslo.control.kurma.solver import solve
from geoslo.control.kurma.types import KurmaConfig, KurmaModel, KurmaObservation

__all__ = ["build_problem", "decide", "dissemination_offset_s", "propagated_writes_rps"]


def propagated_writes_rps(observation: KurmaObservation) -> np.ndarray:
    """Write load each site receives from the others: every write reaches every replica (§7.1.2)."""
    writes = np.asarray(observation.demand_rps) * np.asarray(observation.write_fraction)
    return writes.sum() - writes


def build_problem(
    observation: KurmaObservation, model: KurmaModel, config: KurmaConfig
) -> KurmaProblem:
    """The quantised problem of §5 for this observation.

    Omega_ij is the curve of destination j for origin i (the pair's own, when the model has
    per-pair curves) at the measured base RTT from i (0 for i = j) and j's write fraction.
    Writes propagated from other sites load j too: its curve is read at Lambda_j plus that
    load, done here by shifting each destination's load grid.
    """
    n = len(model.sites)
    extra_rps = propagated_writes_rps(observation)
    writes_in = np.asarray(observation.demand_rps) * np.asarray(observation.write_fraction)
    mix = (writes_in + extra_rps) / np.maximum(np.asarray(observation.demand_rps) + extra_rps, 1e-9)
    grids = [model.surface(i, j).load_rps for i in range(n) for j in range(n)]
    load_grid = np.unique(np.concatenate(grids + [[0.0]]))
    violation = np.empty((n, n, load_grid.size))
    for j in range(n):
        for i in range(n):
            base = 0 if i == j else observation.base_rtt_ms[i][j]
            curve = model.surface(i, j).curve(base, float(mix[j]))
            violation[i, j] = curve(load_grid + extra_rps[j])
    return KurmaProblem(
        sites=tuple(model.sites),
        demand_rps=np.asarray(observation.demand_rps, dtype=float),
        capacity_rps=np.asarray(model.capacity_rps, dtype=float),
        load_grid_rps=load_grid,
        violation=violation,
        slo_violation_target=config.slo_violation_target,
        quantum_fraction=config.quantum_fraction,
        available=None if observation.available is None else np.asarray(observation.available),
    )


def decide(observation: KurmaObservation, model: KurmaModel, config: KurmaConfig) -> KurmaPlan:
    """Solve KurmaPerf or KurmaCost (``config.objective``) for the exchanged state; the
    outcome's ``decide_ms`` covers building the problem from the curves and the solve."""
    started = time.perf_counter()
    problem = build_problem(observation, model, config)
    plan = solve(
        problem,
        config.objective,
        time_limit_s=config.solve_time_limit_s,
        work_limit=config.solve_work_limit,
    )
    decide_ms = (time.perf_counter() - started) * 1e3
    return replace(plan, outcome=replace(plan.outcome, decide_ms=decide_ms))


def dissemination_offset_s(one_way_delay_ms: np.ndarray, margin_ms: float = 20.0) -> float:
    """Delta t before each recomputation at which all instances broadcast their state (§6).

    The largest one-way delay between any two sites plus a margin for clock error and
    processing, so that every message arrives before the next synchronised solve.
    """
    return (float(np.max(one_way_delay_ms)) + margin_ms) / 1e3

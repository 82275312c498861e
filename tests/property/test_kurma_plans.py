"""Invariants of Kurma plans (§5, §9) on random problems, for both objectives."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from geoslo.control.kurma.problem import KurmaProblem
from geoslo.control.kurma.solver import solve


@st.composite
def problems(draw) -> KurmaProblem:
    n = draw(st.integers(2, 5))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    capacity = rng.uniform(50, 200, n)
    grid = np.unique(rng.uniform(0, 300, draw(st.integers(1, 6))))
    violation = rng.random((n, n, grid.size))
    if draw(st.booleans()):
        violation = np.sort(violation, axis=2)
    available = rng.random(n) < 0.8 if draw(st.booleans()) else None
    bounds = rng.uniform(0, 1, (n, n)) if draw(st.booleans()) else None
    demand = rng.uniform(0, 1.3, n) * capacity
    demand[rng.random(n) < 0.15] = 0.0
    return KurmaProblem(
        sites=tuple(f"s{i}" for i in range(n)),
        demand_rps=demand,
        capacity_rps=capacity,
        load_grid_rps=grid,
        violation=violation,
        slo_violation_target=float(rng.uniform(0.01, 0.3)),
        quantum_fraction=float(draw(st.sampled_from([0.1, 0.2, 0.25, 0.5]))),
        available=available,
        max_redirect_fraction=bounds,
    )


@settings(max_examples=60, deadline=None)
@given(problem=problems(), objective=st.sampled_from(["perf", "cost"]))
def test_plan_invariants(problem: KurmaProblem, objective: str) -> None:
    plan = solve(problem, objective)
    rates = plan.rates_rps
    demand = np.asarray(problem.demand_rps)
    n = problem.n_sites
    off = rates - np.diag(np.diag(rates))
    np.testing.assert_allclose(rates.sum(axis=1), demand, atol=1e-9 * (1 + demand.sum()))
    assert np.all(rates >= -1e-9)
    quanta = off / problem.quantum_rps[:, None]
    np.testing.assert_allclose(quanta, np.rint(quanta), atol=1e-9)
    sends = off.sum(axis=1) > 0
    receives = off.sum(axis=0) > 0
    assert not np.any(sends & receives)
    unavailable = ~problem.available_mask
    assert np.all(off[unavailable] == 0) and np.all(off[:, unavailable] == 0)
    bound = problem.max_redirect_matrix * demand[:, None]
    assert np.all(off <= bound + 1e-9 * (1 + demand.sum()))
    if objective == "cost" and plan.feasible:
        ok = plan.site_violation_fraction <= problem.slo_violation_target + 1e-9
        assert np.all(ok | unavailable)
    assert plan.optimal and plan.gap == 0
    assert len(rates) == n and plan.redirected_rps >= 0

"""Kurma's exact solver (§5, §9): optimality against brute force, infeasibility, speed."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest

from geoslo.control.kurma import _solver_kernels as kern
from geoslo.control.kurma._solver_reference import brute_force, plan_score
from geoslo.control.kurma.problem import KurmaProblem
from geoslo.control.kurma.solver import evaluate, solve
from geoslo.errors import InputError


def knee_curve(grid_rps: np.ndarray, knee_rps: float, full_rps: float) -> np.ndarray:
    """0 until the knee, then rising to 1 at ``full_rps`` (the shape of §4's curves)."""
    return np.clip((grid_rps - knee_rps) / (full_rps - knee_rps), 0.0, 1.0) ** 1.5


def knee_problem(demand_rps, capacity_rps=1000.0, quantum_fraction=0.05, shift_fraction=0.1,
                 **extra) -> KurmaProblem:  # fmt: skip
    """Equal sites; remote curves' knees ``shift_fraction`` of capacity to the left."""
    n = len(demand_rps)
    grid = np.linspace(0.0, 1.2 * capacity_rps, 25)
    violation = np.empty((n, n, grid.size))
    for i in range(n):
        for j in range(n):
            knee = capacity_rps * (0.8 - (0.0 if i == j else shift_fraction))
            violation[i, j] = knee_curve(grid, knee, 1.1 * capacity_rps)
    return KurmaProblem(
        sites=tuple(f"s{i}" for i in range(n)),
        demand_rps=np.asarray(demand_rps, dtype=float),
        capacity_rps=np.full(n, capacity_rps),
        load_grid_rps=grid,
        violation=violation,
        quantum_fraction=quantum_fraction,
        **extra,
    )


def logistic_problem(
    n_sites: int, quantum_fraction: float, seed: int, overloaded: int | None = None
) -> KurmaProblem:
    """Issue 17's family: equal sites, demand 20-95% of capacity, RTT 8-28 ms, logistic
    curves with the knee at (82% - 0.8% x RTT) and floor 0.2% + 0.15% x RTT, 1% grid;
    ``overloaded``: that many sites at 85-95% of capacity, the rest at 20-60%."""
    rng = np.random.default_rng(seed)
    capacity = 1000.0
    grid = np.arange(151) * 0.01 * capacity
    rtt_ms = np.triu(rng.uniform(8, 28, (n_sites, n_sites)), 1)
    rtt_ms = rtt_ms + rtt_ms.T
    knee = (0.82 - 0.008 * rtt_ms[..., None]) * capacity
    floor = 0.002 + 0.0015 * rtt_ms[..., None]
    violation = floor + (1 - floor) / (1 + np.exp(-(grid - knee) / (0.03 * capacity)))
    demand = rng.uniform(0.2, 0.95, n_sites) * capacity
    if overloaded is not None:
        demand = rng.uniform(0.2, 0.6, n_sites) * capacity
        hot = rng.choice(n_sites, size=overloaded, replace=False)
        demand[hot] = rng.uniform(0.85, 0.95, overloaded) * capacity
    return KurmaProblem(
        sites=tuple(f"s{i}" for i in range(n_sites)),
        demand_rps=demand,
        capacity_rps=np.full(n_sites, capacity),
        load_grid_rps=grid,
        violation=violation,
        quantum_fraction=quantum_fraction,
    )


def random_problem(seed: int, n_sites: int = 3) -> KurmaProblem:
    """Small random problem: curves monotone or not (non-convex), optional §9 bounds."""
    rng = np.random.default_rng(seed)
    capacity = rng.uniform(50, 150, n_sites)
    grid = np.unique(rng.uniform(0, 250, 6))
    violation = rng.random((n_sites, n_sites, grid.size))
    if rng.random() < 0.5:
        violation = np.sort(violation, axis=2)
    if rng.random() < 0.5:
        violation = violation**3
    available = None if rng.random() < 0.6 else rng.random(n_sites) < 0.8
    bounds = None if rng.random() < 0.6 else rng.uniform(0, 1, (n_sites, n_sites))
    return KurmaProblem(
        sites=tuple(f"s{i}" for i in range(n_sites)),
        demand_rps=rng.uniform(0, 1.2, n_sites) * capacity,
        capacity_rps=capacity,
        load_grid_rps=grid,
        violation=violation,
        slo_violation_target=float(rng.uniform(0.02, 0.4)),
        quantum_fraction=float(rng.choice([0.1, 0.2, 0.25, 0.34])),
        available=available,
        max_redirect_fraction=bounds,
    )


def units_of(problem: KurmaProblem, rates_rps: np.ndarray) -> np.ndarray:
    off = np.asarray(rates_rps, dtype=float).copy()
    np.fill_diagonal(off, 0.0)
    return np.rint(off / problem.quantum_rps[:, None]).astype(int)


@pytest.mark.parametrize("objective", ["perf", "cost"])
def test_matches_brute_force_on_random_problems(objective: str) -> None:
    tol = 1e-6
    for seed in range(120):
        problem = random_problem(seed)
        load_fraction = np.max(problem.demand_rps / problem.capacity_rps)
        if problem.quantum_fraction < 0.2 and load_fraction > 0.8:
            continue  # keeps the brute force fast
        plan = solve(problem, objective)
        _, (best, best_rps) = brute_force(problem, objective)
        value, redirected = plan_score(problem, units_of(problem, plan.rates_rps), objective)
        assert plan.optimal, seed
        assert value == pytest.approx(best, abs=tol), seed
        if abs(value - best) < 1e-9:
            assert redirected == pytest.approx(best_rps, abs=tol), seed


@pytest.mark.parametrize("objective", ["perf", "cost"])
def test_matches_brute_force_with_four_sites(objective: str) -> None:
    for seed in range(1000, 1012):
        problem = random_problem(seed, n_sites=4)
        if problem.quantum_fraction < 0.25:
            continue
        plan = solve(problem, objective)
        _, (best, _) = brute_force(problem, objective)
        value, _ = plan_score(problem, units_of(problem, plan.rates_rps), objective)
        assert value == pytest.approx(best, abs=1e-6), seed


@pytest.mark.parametrize("objective", ["perf", "cost"])
def test_matches_brute_force_with_equal_quanta(objective: str) -> None:
    """Equal capacities (equal quanta) take the one-receiver intake enumeration."""
    for seed in range(2000, 2060):
        problem = random_problem(seed)
        problem = KurmaProblem(
            sites=problem.sites, demand_rps=problem.demand_rps * 100 / problem.capacity_rps,
            capacity_rps=np.full(3, 100.0), load_grid_rps=problem.load_grid_rps,
            violation=problem.violation, slo_violation_target=problem.slo_violation_target,
            quantum_fraction=max(problem.quantum_fraction, 0.2), available=problem.available,
            max_redirect_fraction=problem.max_redirect_fraction,
        )  # fmt: skip
        plan = solve(problem, objective)
        _, (best, best_rps) = brute_force(problem, objective)
        value, redirected = plan_score(problem, units_of(problem, plan.rates_rps), objective)
        assert plan.optimal, seed
        assert value == pytest.approx(best, abs=1e-6), seed
        if abs(value - best) < 1e-9:
            assert redirected == pytest.approx(best_rps, abs=1e-6), seed


@pytest.mark.parametrize("objective", ["perf", "cost"])
def test_matches_brute_force_with_two_receivers_and_equal_quanta(objective: str) -> None:
    """4 sites, equal quanta: 2 senders / 2 receivers take the intake-pair screening."""
    checked = 0
    for seed in range(3000, 3040):
        problem = random_problem(seed, n_sites=4)
        problem = KurmaProblem(
            sites=problem.sites, demand_rps=problem.demand_rps * 100 / problem.capacity_rps,
            capacity_rps=np.full(4, 100.0), load_grid_rps=problem.load_grid_rps,
            violation=problem.violation, slo_violation_target=problem.slo_violation_target,
            quantum_fraction=max(problem.quantum_fraction, 0.25), available=problem.available,
            max_redirect_fraction=problem.max_redirect_fraction,
        )  # fmt: skip
        plan = solve(problem, objective)
        _, (best, best_rps) = brute_force(problem, objective)
        value, redirected = plan_score(problem, units_of(problem, plan.rates_rps), objective)
        assert plan.optimal, seed
        assert value == pytest.approx(best, abs=1e-6), seed
        if abs(value - best) < 1e-9:
            assert redirected == pytest.approx(best_rps, abs=1e-6), seed
        checked += 1
    assert checked == 40


def test_perf_moves_load_off_an_overloaded_site() -> None:
    problem = knee_problem([1000.0, 300.0, 300.0])
    plan = solve(problem, "perf")
    alone, _ = evaluate(problem, np.diag(problem.demand_rps))
    assert plan.optimal and plan.status == "optimal"
    assert plan.outcome.objective == pytest.approx(plan.expected_violations_rps)
    assert plan.outcome.decide_ms > 0
    assert plan.expected_violations_rps < 0.5 * alone
    assert plan.rates_rps[0, 1:].sum() > 0
    assert plan.rates_rps[1:, 0].sum() == 0


def test_cost_redirects_less_than_perf_and_meets_every_bound() -> None:
    problem = knee_problem([1000.0, 300.0, 300.0])
    perf = solve(problem, "perf")
    cost = solve(problem, "cost")
    assert cost.feasible and cost.infeasible_sites == ()
    assert cost.redirected_rps <= perf.redirected_rps
    assert np.all(cost.site_violation_fraction <= problem.slo_violation_target + 1e-9)


def test_no_redirect_when_nobody_violates() -> None:
    for objective in ("perf", "cost"):
        plan = solve(knee_problem([300.0, 400.0, 500.0]), objective)
        assert plan.redirected_rps == 0 and plan.optimal


def test_infeasible_cost_names_the_sites_and_minimises_excess() -> None:
    problem = knee_problem([1080.0, 700.0, 1000.0], quantum_fraction=0.1)
    plan = solve(problem, "cost")
    assert not plan.feasible and plan.status == "infeasible" and plan.optimal
    assert plan.outcome.solver_status == "infeasible" and plan.outcome.applicable
    rho = problem.slo_violation_target
    over = {problem.sites[i] for i in range(3) if plan.site_violation_fraction[i] > rho + 1e-9}
    assert set(plan.infeasible_sites) == over and over
    _, (best, _) = brute_force(problem, "cost")
    value, _ = plan_score(problem, units_of(problem, plan.rates_rps), "cost")
    assert value == pytest.approx(best, abs=1e-6)


def test_unavailable_sites_and_pair_bounds_are_respected() -> None:
    available = np.array([True, False, True, True])
    bounds = np.full((4, 4), 1.0)
    bounds[0, 2] = 0.0
    problem = knee_problem([1000.0, 200.0, 200.0, 300.0], available=available,
                           max_redirect_fraction=bounds)  # fmt: skip
    for objective in ("perf", "cost"):
        plan = solve(problem, objective)
        assert plan.rates_rps[1, 1] == 200.0 and plan.rates_rps[:, 1].sum() == 200.0
        assert plan.rates_rps[0, 2] == 0.0
        assert plan.rates_rps[0, 3] > 0


def test_same_problem_same_plan() -> None:
    problem = random_problem(7, n_sites=4)
    first, second = solve(problem, "perf"), solve(problem, "perf")
    np.testing.assert_array_equal(first.rates_rps, second.rates_rps)


def test_evaluate_matches_definition() -> None:
    problem = knee_problem([900.0, 300.0])
    rates = np.array([[700.0, 200.0], [0.0, 300.0]])
    total, fraction = evaluate(problem, rates)
    expected = [700 * problem.omega(0, 0, 700.0) + 200 * problem.omega(0, 1, 500.0),
                300 * problem.omega(1, 1, 500.0)]  # fmt: skip
    assert total == pytest.approx(sum(expected))
    np.testing.assert_allclose(fraction, np.array(expected) / [900.0, 300.0])


def test_omega_kernel_matches_numpy_reference() -> None:
    problem = random_problem(3)
    grid, vio = problem.load_grid_rps, problem.violation
    for load in np.linspace(-10, 300, 97):
        assert kern.omega(grid, vio, 1, 2, load) == pytest.approx(problem.omega(1, 2, load))
    assert problem.omega(0, 0, grid[-1] + 1e-6) == 1.0


def test_plan_to_dict_is_the_contract() -> None:
    plan = solve(knee_problem([1000.0, 300.0, 300.0]), "cost").to_dict()
    assert set(plan) == {
        "rates_rps", "expected_violations_rps", "site_violation_fraction", "redirected_rps",
        "optimal", "gap", "feasible", "infeasible_sites", "formulation",
        "status", "solver_status", "objective", "decide_ms", "work_limit",
    }  # fmt: skip
    assert plan["formulation"] == "cost" and isinstance(plan["rates_rps"][0], list)
    assert plan["status"] == "optimal" and plan["objective"] == plan["redirected_rps"]


def test_bad_arguments() -> None:
    problem = knee_problem([100.0, 100.0])
    with pytest.raises(InputError, match="objective"):
        solve(problem, "speed")
    with pytest.raises(InputError, match="time_limit_s"):
        solve(problem, "perf", time_limit_s=0)


def test_time_limit_returns_best_plan_with_gap() -> None:
    problem = knee_problem([1050.0, 1000.0, 950.0, 300.0, 200.0], quantum_fraction=0.01,
                           shift_fraction=0.25)  # fmt: skip
    plan = solve(problem, "perf", time_limit_s=1e-4)
    assert plan.status in ("time_limit", "optimal")
    assert plan.outcome.solver_status == {"time_limit": "limit"}.get(plan.status, plan.status)
    assert plan.gap >= 0
    assert np.allclose(plan.rates_rps.sum(axis=1), problem.demand_rps)
    if plan.optimal:
        assert plan.gap == 0


@pytest.mark.parametrize("objective", ["perf", "cost"])
def test_five_sites_one_percent_is_solved_optimally(objective: str) -> None:
    problem = knee_problem([1050.0, 950.0, 400.0, 350.0, 500.0], quantum_fraction=0.01)
    solve(problem, objective)  # compiled kernels loaded
    start = time.perf_counter()
    plan = solve(problem, objective)
    elapsed_ms = (time.perf_counter() - start) * 1e3
    print(f"5 sites, 1% quantum, {objective}: {elapsed_ms:.1f} ms, {plan.status}")
    assert plan.optimal


def test_time_limit_is_kept_on_a_large_problem() -> None:
    """10 sites at 1%: the search stops near its limit with a valid (finite) gap."""
    problem = knee_problem([1100.0, 1080.0, 1050.0, 1020.0, 990.0, 800.0, 700.0, 760.0, 820.0,
                            780.0], quantum_fraction=0.01, shift_fraction=0.1)  # fmt: skip
    solve(problem, "perf", time_limit_s=1e-3)  # compiled kernels loaded
    start = time.perf_counter()
    plan = solve(problem, "perf", time_limit_s=0.5)
    elapsed_s = time.perf_counter() - start
    print(f"10 sites, 1% quantum, limit 0.5 s: {elapsed_s:.2f} s, {plan.status}, gap {plan.gap}")
    assert elapsed_s < 5.0  # a work limit: generous margin for a busy machine
    assert plan.work_units <= plan.work_limit * 1.5
    assert np.isfinite(plan.gap) and plan.gap >= 0
    assert plan.optimal == (plan.status == "optimal")
    if not plan.optimal:
        assert plan.status == "time_limit" and plan.gap > 0
        assert plan.outcome.solver_status == "limit"
    assert np.allclose(plan.rates_rps.sum(axis=1), problem.demand_rps)


def test_work_limited_solve_is_deterministic_on_a_busy_machine() -> None:
    """A limit counts work, not time: a solve the limit stops gives the same plan and spends
    the same work whether the machine is quiet or two CPU hogs compete with it (issue 17)."""
    problem = logistic_problem(10, 0.01, seed=3, overloaded=6)  # a search of many nodes
    limit = solve(problem, "perf", work_limit=10**12).work_units // 3
    quiet = solve(problem, "perf", work_limit=limit)
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        time.sleep(0.2)
        busy = solve(problem, "perf", work_limit=limit)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert quiet.status == "time_limit" and quiet.gap > 0  # the limit did stop it
    assert quiet.work_units == busy.work_units and quiet.work_limit == limit
    assert np.array_equal(quiet.rates_rps, busy.rates_rps)
    assert quiet.gap == busy.gap and quiet.to_dict()["work_limit"] == limit


def test_time_limit_is_a_fixed_work_limit() -> None:
    """--time-limit-s stands for work at a fixed rate: the same plan at any machine load."""
    problem = logistic_problem(8, 0.01, seed=0)
    first = solve(problem, "perf", time_limit_s=0.2)
    second = solve(problem, "perf", time_limit_s=0.2)
    assert first.work_limit == second.work_limit > 0
    assert first.work_units == second.work_units
    assert np.array_equal(first.rates_rps, second.rates_rps)
    with pytest.raises(InputError, match="work_limit"):
        solve(problem, "perf", work_limit=0)


def test_many_senders_do_not_overflow_the_state_count() -> None:
    """Ten senders of 100 quanta: 101^10 DP states overflow int64. The count is a Python
    int, so the partition is left to the bound instead of crashing (issue 15's fuzz)."""
    n_send, n_recv = 10, 3
    n = n_send + n_recv
    problem = KurmaProblem(
        sites=tuple(f"s{k}" for k in range(n)),
        demand_rps=np.array([1000.0] * n_send + [0.0] * n_recv),
        capacity_rps=np.full(n, 1000.0),
        load_grid_rps=np.array([0.0, 500.0, 1000.0, 1200.0]),
        violation=np.tile(np.array([0.0, 0.01, 0.5, 1.0]), (n, n, 1)),
        quantum_fraction=0.01,
    )
    plan = solve(problem, "perf", time_limit_s=5.0)
    assert np.isfinite(plan.gap) and plan.gap >= 0
    assert np.allclose(plan.rates_rps.sum(axis=1), problem.demand_rps)


def equal_quanta_problem(seed: int, n_sites: int, quantum_fraction: float) -> KurmaProblem:
    """random_problem's curves, bounds and availability on equal capacities (equal quanta)."""
    problem = random_problem(seed, n_sites=n_sites)
    return KurmaProblem(
        sites=problem.sites, demand_rps=problem.demand_rps * 100 / problem.capacity_rps,
        capacity_rps=np.full(n_sites, 100.0), load_grid_rps=problem.load_grid_rps,
        violation=problem.violation, slo_violation_target=problem.slo_violation_target,
        quantum_fraction=quantum_fraction, available=problem.available,
        max_redirect_fraction=problem.max_redirect_fraction,
    )  # fmt: skip


def test_lagrangian_search_matches_the_partition_search(monkeypatch) -> None:
    """KurmaPerf with equal quanta takes the Lagrangian branch and bound (_aggregate.py);
    the partition search (checked against brute force above) must find the same optimum on
    problems too large for brute force: 5-6 sites, 5-10% quanta, curves that may fall."""
    from geoslo.control.kurma import _aggregate

    seeds = range(4000, 4060)
    problems = [equal_quanta_problem(s, 5 + s % 2, (0.05, 0.1)[s % 2]) for s in seeds]
    lagrangian = [solve(p, "perf", work_limit=10**12) for p in problems]
    monkeypatch.setattr(_aggregate, "applies", lambda prep: False)
    for seed, problem, plan in zip(seeds, problems, lagrangian, strict=True):
        partition = solve(problem, "perf", work_limit=10**12)
        assert plan.optimal and partition.optimal, seed
        value, redirected = plan_score(problem, units_of(problem, plan.rates_rps), "perf")
        best, best_rps = plan_score(problem, units_of(problem, partition.rates_rps), "perf")
        assert value == pytest.approx(best, abs=1e-6), seed
        if abs(value - best) < 1e-9:
            assert redirected == pytest.approx(best_rps, abs=1e-6), seed


def test_ties_on_flat_curves_redirect_least() -> None:
    """Curves with flat stretches of zero make many plans tie on violations; the solver must
    return the one that redirects least (§5's tie rule), as brute force does. A search that
    closes a node on a balanced relaxation, or prunes ties, fails here."""
    wrong = []
    for seed in range(120):
        rng = np.random.default_rng(seed)
        grid = np.unique(rng.uniform(0, 250, 6))
        violation = rng.random((3, 3, grid.size))
        violation = np.where(rng.random(violation.shape) < 0.6, 0.0, violation)
        problem = KurmaProblem(
            sites=("a", "b", "c"), demand_rps=rng.uniform(0, 1.2, 3) * 100,
            capacity_rps=np.full(3, 100.0), load_grid_rps=grid, violation=violation,
            quantum_fraction=float(rng.choice([0.1, 0.2, 0.25])),
        )  # fmt: skip
        plan = solve(problem, "perf")
        _, (best, best_rps) = brute_force(problem, "perf")
        assert plan.optimal and plan.expected_violations_rps == pytest.approx(best, abs=1e-6)
        if abs(plan.redirected_rps - best_rps) > 1e-6:
            wrong.append(seed)
    assert not wrong

"""Kurma's exact solver against the paper's toolchain (MiniZinc + Gecode) on the same problems.

Run: ``python benchmarks/bench_kurma_solver.py [--quick] [--mzn-timeout-s 20]``.

Problems are seeded and shaped like §4's SLO curves: 0 until a knee, then rising to 1, with
remote curves' knees shifted left with distance; equal sites, 1-3 of them overloaded and
the others at 30-60% of capacity. Each row prints our median solve time, MiniZinc's median
(time-limited runs count at the limit), the ratio, and whether the objectives agree (the
MiniZinc plan is scored with our own evaluator; curves are tabulated in integer milli-req/s
for Gecode, so agreement allows that rounding).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from geoslo.control.kurma.problem import KurmaProblem
from geoslo.control.kurma.solver import evaluate, solve

MODEL = Path(__file__).with_name("kurma.mzn")
SCALE = 1000.0  # milli-requests per second: Gecode works in integers
CELLS = [(3, 0.08), (3, 0.04), (5, 0.08), (5, 0.04), (5, 0.02), (5, 0.01), (8, 0.04),
         (8, 0.02), (10, 0.04), (10, 0.02)]  # fmt: skip
QUICK_CELLS = [(3, 0.08), (5, 0.04), (5, 0.01)]


def knee_problem(n_sites: int, quantum_fraction: float, seed: int) -> KurmaProblem:
    """Equal sites 5-40 ms apart; 1-3 overloaded (85-105% of capacity), others 30-60%."""
    rng = np.random.default_rng(seed)
    capacity_rps = 10_000.0
    grid = np.linspace(0.0, 1.2 * capacity_rps, 49)
    rtt_ms = rng.uniform(5, 40, (n_sites, n_sites))
    rtt_ms = (rtt_ms + rtt_ms.T) / 2
    violation = np.empty((n_sites, n_sites, grid.size))
    for i in range(n_sites):
        for j in range(n_sites):
            knee = capacity_rps * (0.8 - (0.0 if i == j else 0.006 * rtt_ms[i, j]))
            rise = np.clip((grid - knee) / (1.1 * capacity_rps - knee), 0.0, 1.0)
            violation[i, j] = rise**1.5
    demand = capacity_rps * rng.uniform(0.3, 0.6, n_sites)
    hot = rng.choice(n_sites, size=min(n_sites - 1, int(rng.integers(1, 4))), replace=False)
    demand[hot] = capacity_rps * rng.uniform(0.85, 1.05, hot.size)
    return KurmaProblem(
        sites=tuple(f"s{i}" for i in range(n_sites)),
        demand_rps=demand,
        capacity_rps=np.full(n_sites, capacity_rps),
        load_grid_rps=grid,
        violation=violation,
        quantum_fraction=quantum_fraction,
    )


def mzn_data(problem: KurmaProblem, objective: str) -> dict:
    """The tabulated instance of kurma.mzn (equal quanta)."""
    n = problem.n_sites
    q = float(problem.quantum_rps[0])
    demand = np.asarray(problem.demand_rps, dtype=float)
    max_units = np.floor(demand / q + 1e-9).astype(int)
    cap = np.array([[0 if i == j else int(max_units[i]) for j in range(n)] for i in range(n)])
    net_lo = -int(max_units.max())
    nets = np.arange(net_lo, int(max_units.sum()) + 1)
    unit_cost = np.zeros((n, n, nets.size), dtype=int)
    diag_cost = np.zeros((n, nets.size), dtype=int)
    for j in range(n):
        load = np.maximum(demand[j] + q * nets, 0.0)
        kept = np.maximum(demand[j] + q * np.minimum(nets, 0), 0.0)
        for i in range(n):
            unit_cost[i, j] = np.rint(SCALE * q * problem.omega(i, j, load))
        diag_cost[j] = np.rint(SCALE * kept * problem.omega(j, j, load))
    bound = np.floor(SCALE * problem.slo_violation_target * demand).astype(int)
    return {
        "N": n,
        "NET_LO": net_lo,
        "NL": int(nets.size),
        "max_units": max_units.tolist(),
        "cap": cap.tolist(),
        "unit_cost": unit_cost.tolist(),
        "diag_cost": diag_cost.tolist(),
        "bound": bound.tolist(),
        "objective": 1 if objective == "perf" else 2,
    }


def run_minizinc(problem: KurmaProblem, objective: str, timeout_s: float):
    """(ms, rates or None, proven): Gecode's best plan within the time limit."""
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data.json"
        data.write_text(json.dumps(mzn_data(problem, objective)))
        start = time.perf_counter()
        done = subprocess.run(
            ["minizinc", "--solver", "gecode", "--time-limit", str(int(timeout_s * 1000)),
             "-a", str(MODEL), str(data)],
            capture_output=True, text=True, timeout=timeout_s + 30,
        )  # fmt: skip
        elapsed_ms = (time.perf_counter() - start) * 1e3
    lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
    proven = "==========" in done.stdout
    if "=====UNSATISFIABLE=====" in done.stdout:
        return elapsed_ms, None, True
    if not lines:
        return elapsed_ms, None, False
    n = problem.n_sites
    units = np.array(json.loads(lines[-1])["n"], dtype=float).reshape(n, n)
    rates = units * problem.quantum_rps[:, None]
    np.fill_diagonal(rates, 0.0)
    np.fill_diagonal(rates, np.asarray(problem.demand_rps) - rates.sum(axis=1))
    return elapsed_ms, rates, proven


def objective_of(problem: KurmaProblem, rates: np.ndarray, objective: str) -> float:
    violations, _ = evaluate(problem, rates)
    if objective == "perf":
        return violations
    return float(rates.sum() - np.trace(rates))


def agree(problem, plan, rates, proven, objective) -> str:
    if rates is None:
        if objective == "cost" and not plan.feasible and proven:
            return "yes (infeasible)"
        return "no plan" if not proven else "no"
    ours = objective_of(problem, plan.rates_rps, objective)
    theirs = objective_of(problem, rates, objective)
    slack = 1e-6 * float(np.sum(problem.demand_rps)) + problem.n_sites**2 * 0.5 / SCALE
    if objective == "cost" and not plan.feasible:
        return "no (ours infeasible)"
    if ours > theirs + slack:
        return f"NO: ours {ours:.3f} > {theirs:.3f}"
    if theirs > ours + slack:
        return "yes (mzn worse)" if not proven else f"NO: mzn {theirs:.3f} < proven?"
    return "yes"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="three cells, two problems each")
    parser.add_argument("--problems", type=int, default=3, help="problems per cell")
    parser.add_argument("--mzn-timeout-s", type=float, default=10.0)
    parser.add_argument("--objective", choices=["perf", "cost"], default="perf")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    cells = QUICK_CELLS if args.quick else CELLS
    problems = 2 if args.quick else args.problems
    have_mzn = shutil.which("minizinc") is not None
    if not have_mzn:
        print("minizinc not found (apt-get install -y minizinc): timing our solver only")
    solve(knee_problem(3, 0.08, 0), args.objective)  # load compiled kernels once
    print(f"objective={args.objective}, MiniZinc+Gecode limit {args.mzn_timeout_s:.0f} s")
    header = f"{'sites':>5} {'quantum':>7} {'ours ms':>9} {'mzn ms':>9} {'ratio':>8} agree"
    print(header)
    for n_sites, quantum in cells:
        ours_ms, mzn_ms, verdicts, proven_all = [], [], [], True
        for k in range(problems):
            problem = knee_problem(n_sites, quantum, args.seed * 10_000 + n_sites * 100 + k)
            plan = solve(problem, args.objective)
            ours_ms.append(plan.solve_ms)
            proven_all &= plan.optimal
            if have_mzn:
                ms, rates, proven = run_minizinc(problem, args.objective, args.mzn_timeout_s)
                mzn_ms.append(ms if proven else max(ms, args.mzn_timeout_s * 1e3))
                verdicts.append(agree(problem, plan, rates, proven, args.objective))
        ours = statistics.median(ours_ms)
        if have_mzn:
            theirs = statistics.median(mzn_ms)
            ratio = f"{theirs / ours:8.0f}x"
            verdict = ", ".join(sorted(set(verdicts)))
            timed_out = sum(m >= args.mzn_timeout_s * 1e3 for m in mzn_ms)
            if timed_out:
                verdict += f" ({timed_out}/{problems} mzn hit the limit: ratio is a lower bound)"
            print(f"{n_sites:>5} {quantum:>7.2f} {ours:>9.2f} {theirs:>9.0f} {ratio} {verdict}")
        else:
            print(f"{n_sites:>5} {quantum:>7.2f} {ours:>9.2f} {'-':>9} {'-':>8} -")
        if not proven_all:
            print("      (some of our solves stopped at the time limit)")
        sys.stdout.flush()


if __name__ == "__main__":
    main()

"""§7.1.5: how the solver's time grows with sites and quantum, on realistic problems."""

from __future__ import annotations

import time

import numpy as np

from geoslo.control.kurma import KurmaProblem, solve
from geoslo.models import SloSurface

__all__ = ["scaling_problem", "solver_scaling"]


def scaling_problem(
    surface: SloSurface, n_sites: int, quantum_fraction: float, seed: int
) -> KurmaProblem:
    """A seeded problem: ``n_sites`` equal sites 5-25 ms apart, one to three of them overloaded.

    Curves come from a profiled site's surface at each pair's base RTT, so their shapes are
    the real ones (a knee, remote curves shifted left with distance).
    """
    rng = np.random.default_rng(seed)
    capacity = float(surface.load_rps[-1])
    rtt = rng.integers(5, 26, size=(n_sites, n_sites))
    rtt = np.triu(rtt, 1) + np.triu(rtt, 1).T
    grid = surface.load_rps
    violation = np.empty((n_sites, n_sites, grid.size))
    for i in range(n_sites):
        for j in range(n_sites):
            violation[i, j] = surface.curve(0 if i == j else rtt[i, j])(grid)
    demand = capacity * rng.uniform(0.3, 0.65, n_sites)
    hot = rng.choice(n_sites, size=min(n_sites - 1, int(rng.integers(1, 4))), replace=False)
    demand[hot] = capacity * rng.uniform(0.8, 0.95, hot.size)
    return KurmaProblem(
        sites=tuple(f"s{i}" for i in range(n_sites)),
        demand_rps=demand,
        capacity_rps=np.full(n_sites, capacity),
        load_grid_rps=grid,
        violation=violation,
        quantum_fraction=quantum_fraction,
    )


def solver_scaling(
    surface: SloSurface,
    site_counts=(3, 4, 5, 6, 8, 10),
    quanta=(0.01, 0.02, 0.04, 0.08),
    problems_per_cell: int = 5,
    time_limit_s: float = 10.0,
    seed: int = 0,
    on_cell=None,
) -> list[dict]:
    """Median and max solve time per (sites, quantum), and how many were proven optimal."""
    rows = []
    cells = [(n, q) for n in site_counts for q in quanta]
    for index, (n, q) in enumerate(cells):
        times_ms, optimal = [], 0
        for k in range(problems_per_cell):
            problem = scaling_problem(surface, n, q, seed=seed * 1000 + n * 100 + k)
            start = time.perf_counter()
            plan = solve(problem, "perf", time_limit_s=time_limit_s)
            times_ms.append((time.perf_counter() - start) * 1e3)
            optimal += bool(plan.optimal)
        rows.append(
            {
                "sites": n,
                "quantum_pct": q * 100,
                "median_ms": float(np.median(times_ms)),
                "max_ms": float(np.max(times_ms)),
                "optimal": f"{optimal}/{problems_per_cell}",
            }
        )
        if on_cell is not None:
            on_cell(index + 1, len(cells))
    return rows


def section(report, scenario, paper: dict) -> dict:
    """The solver's time per (sites, quantum) against the paper's MiniZinc + Gecode figures."""
    from geoslo.report import paper_row, progress

    settings = scenario.settings
    cells = len(settings.scaling_sites) * len(settings.scaling_quanta)
    with progress(total=cells, label="Solver scaling") as bar:
        rows = solver_scaling(
            scenario.surface,
            settings.scaling_sites,
            settings.scaling_quanta,
            settings.scaling_problems,
            time_limit_s=settings.scaling_time_limit_s,
            seed=scenario.seed,
            on_cell=lambda done, total: bar.update(),
        )

    def cell(n, q):
        return next(
            (r["median_ms"] for r in rows if r["sites"] == n and r["quantum_pct"] == q),
            float("nan"),
        )

    report.section("Solver scaling (§7.1.5)")
    report.text(
        "KurmaPerf on seeded problems whose curves come from the profiled surface at base RTTs "
        "of 5-25 ms, one to three sites overloaded. Exact: every plan is the proven optimum of "
        "the quantised problem unless the table says otherwise. `./dev bench` also solves the same "
        "kind of problems with MiniZinc + Gecode on this machine and prints the speed ratio."
    )
    report.table("solver_scaling", rows, caption="Solve time (ms) per cell.")
    report.comparison(
        "solver_vs_paper",
        [
            paper_row(
                paper, "solver_5sites_1pct_median_ms", cell(5, 1.0), "5 sites, 1% quantum, median"
            ),
            paper_row(paper, "solver_8sites_8pct_ms", cell(8, 8.0), "8 sites, 8% quantum, median"),
        ],
    )
    return {"rows": rows}

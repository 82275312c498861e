"""Fig. 8 over three backend tails: which ranking survives which tail (issue 37).

Our calibrated backend's tail comes from rare stalls of one server at a time, which a server
choice inside the site can dodge. Two more backends reach the same Fig. 4 anchors with other
tails: pauses of every server of a site at once (GC-like pauses of a shared runtime), which
no server choice can dodge, and no stalls but heavy-tailed service on a multi-threaded read
stage. Each is profiled and modelled by the same pipeline; a reduced grid runs on both
traces, scaled to each backend's own capacity. The prose is generated from the run's numbers.
"""

from __future__ import annotations

from dataclasses import replace

from geoslo.experiments._parallel import run_jobs
from geoslo.experiments.kurma._grid import GEOSLO_BALANCER
from geoslo.experiments.kurma._runs import cell_name, run_cell
from geoslo.experiments.kurma._scenario import Scenario, build_scenario, with_choice_surfaces
from geoslo.experiments.kurma._traces import trace_pair
from geoslo.report import Report
from geoslo.sim.kurma import BackendParams

__all__ = ["TAIL_CELLS", "section", "tail_backends"]

# the reduced grid: the paper's Kurma, geoslo's balancer, C3, and the strongest peers of the
# full grid (GlobalRR and keeping reads local, with geoslo's server choice)
TAIL_CELLS = (
    ("KurmaPerf", None),
    GEOSLO_BALANCER,
    ("C3", None),
    ("AllLocal", GEOSLO_BALANCER[1]),
    ("GlobalRR", GEOSLO_BALANCER[1]),
    ("AllLocal", None),
)


def tail_backends() -> dict[str, BackendParams]:
    """The tails besides ours, each calibrated to Fig. 4's anchors (``sim.kurma._params``)."""
    return {
        "site stalls": BackendParams.site_stalls(),
        "heavy-tailed threads": BackendParams.heavy_tail_threads(),
    }


def _tail_scenario(scenario: Scenario, backend: BackendParams, seed: int) -> Scenario:
    settings = replace(scenario.settings, write_fractions=(0.0,))  # reads only, as Fig. 8
    base = build_scenario(settings, seed, backend=backend)
    return with_choice_surfaces(base, [GEOSLO_BALANCER[1]])


def section(report: Report, scenario: Scenario, seed: int, ours: dict[str, dict]) -> dict:
    """The reduced grid on each other tail, both traces, beside ``ours`` (Fig. 8's rows by
    trace and cell, on our tail); the rows and each ranking."""
    settings = scenario.settings
    rows = [
        _row("server stalls", trace, cell, ours[trace][cell], scenario.saturation_rps)
        for trace in ours
        for cell in (cell_name(*c) for c in TAIL_CELLS)
    ]
    scenarios = {
        name: _tail_scenario(scenario, backend, seed) for name, backend in tail_backends().items()
    }
    jobs, keys = [], []
    for name, sc in scenarios.items():
        pair = trace_pair(sc.local_5pct_rps, settings.trace_minutes, capacity_rps=sc.saturation_rps)
        for trace in pair:
            for policy, choice in TAIL_CELLS:
                jobs.append((sc, policy, choice, trace.rates_rps, 0.0, seed))
                keys.append((name, trace.name, cell_name(policy, choice)))
    runs = run_jobs(run_cell, jobs, settings.workers, "Fig. 8 on other tails")
    for (tail, trace, cell), run in zip(keys, runs, strict=True):
        row = {
            "global_violations_pct": 100 * run.global_violation_fraction,
            "redirected_pct": 100 * run.redirected_requests() / max(run.requests.sum(), 1),
        }
        rows.append(_row(tail, trace, cell, row, scenarios[tail].saturation_rps))
    report.section(
        "Fig. 8 on three backend tails: which ranking survives which tail (beyond the paper)",
        "Each backend reaches the same Fig. 4 anchors (saturation, the local and the 22 ms "
        "5% points) with another tail: rare stalls of one server (ours, the grid above), "
        "pauses of every server of a site at once, or heavy-tailed service on a read stage "
        "of several threads (docs/kurma.md). Each is profiled by the same pipeline and runs a "
        "reduced grid on both traces, scaled to its own capacity.",
    )
    report.text(ranking_text(rows))
    report.table("fig8_tails", rows, formats={"global_violations_pct": ".3f"})
    return {"rows": rows}


def _row(tail: str, trace: str, cell: str, measured: dict, saturation_rps: float) -> dict:
    return {
        "tail": tail,
        "trace": trace,
        "cell": cell,
        "global_violations_pct": measured["global_violations_pct"],
        "redirected_pct": measured["redirected_pct"],
        "saturation_rps": saturation_rps,
    }


def ranking_text(rows: list[dict]) -> str:
    """Per tail and trace: the cells best first, and where geoslo's balancer and C3 stand."""
    best = cell_name(*GEOSLO_BALANCER)
    lines = []
    for tail in dict.fromkeys(r["tail"] for r in rows):
        for trace in dict.fromkeys(r["trace"] for r in rows if r["tail"] == tail):
            cells = sorted(
                (r for r in rows if r["tail"] == tail and r["trace"] == trace),
                key=lambda r: r["global_violations_pct"],
            )
            by = {r["cell"]: r["global_violations_pct"] for r in cells}
            ratio = by["C3"] / max(by[best], 1e-9)
            lines.append(
                f"* **{tail}, {trace}**: "
                + ", ".join(f"{r['cell']} {r['global_violations_pct']:.3f}%" for r in cells)
                + f". {best} {'beats' if by[best] < by['C3'] else 'does not beat'} C3 "
                f"({ratio:.2f}x C3's violations over ours); the server choice cuts KurmaPerf's "
                f"violations {by['KurmaPerf'] / max(by[best], 1e-9):.1f}x."
            )
    return "\n".join(lines) + "\n" if lines else ""


def ranking(rows: list[dict], tail: str, trace: str) -> list[str]:
    """The cells of one tail and trace, fewest violations first."""
    cells = [r for r in rows if r["tail"] == tail and r["trace"] == trace]
    return [r["cell"] for r in sorted(cells, key=lambda r: r["global_violations_pct"])]

"""Fig. 12 section of the report: cost of a month with elastic controllers (§7.2)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from geoslo.experiments._parallel import run_jobs
from geoslo.experiments.kurma._cost import daily_cost_usd, simulate_elastic
from geoslo.experiments.kurma._scenario import Scenario
from geoslo.report import Report, paper_row
from geoslo.topology import Prices
from geoslo.workload import load_trace_minutes

STRATEGIES = ("AllLocal", "AllShared", "KurmaPerf", "KurmaCost")
SHIFT_MINUTES = (0, 60, 240)  # Table 2's time shifts, +0, +1 and +4 hours


def month_demand(scenario: Scenario, days: int) -> tuple[np.ndarray, str]:
    """Per-minute demand [minute, site]: one trace shifted per site, peak = 5 VMs at one site."""
    minutes = load_trace_minutes("nasa")[: days * 1440]
    demand = np.stack([np.roll(minutes, s) for s in SHIFT_MINUTES], axis=1)
    per_vm_rps = scenario.local_5pct_rps / scenario.backend_servers
    demand = demand * (5 * per_vm_rps / demand.max())
    source = (
        f"NASA Kennedy HTTP per-minute means, days 1-{days}, shifted +0/+1/+4 h, "
        "peak scaled to 5 VMs"
    )
    return demand, source


def section(report: Report, scenario: Scenario, days: int, paper: dict) -> dict:
    demand, source = month_demand(scenario, days)
    per_vm = scenario.per_vm_curves(static=True)
    prices = Prices()
    jobs = [(s, demand, per_vm, scenario.sites, scenario.per_vm_capacity_rps) for s in STRATEGIES]
    runs = run_jobs(
        simulate_elastic, jobs, scenario.settings.workers, f"Fig. 12, {days} days x 4 strategies"
    )
    results = dict(zip(STRATEGIES, runs, strict=True))
    rows, costs = [], {}
    for billing in (1, 60):
        base = daily_cost_usd(results["AllLocal"], billing, prices)["total_usd"]
        for strategy in STRATEGIES:
            cost = daily_cost_usd(results[strategy], billing, prices)
            costs[(billing, strategy)] = cost
            rows.append(
                {
                    "billing_min": billing,
                    "strategy": strategy,
                    "vm_usd_per_day": cost["vm_usd"],
                    "wan_usd_per_day": cost["wan_usd"],
                    "total_usd_per_day": cost["total_usd"],
                    "savings_vs_alllocal_pct": 100 * (1 - cost["total_usd"] / base),
                    "minutes_over_target": results[strategy].over_target_minutes,
                }
            )
    report.section("Fig. 12: cost with elastic controllers (§7.2)")
    report.text(
        f"Workload: {source}. Each minute a threshold controller per site adds a VM when the "
        "site would miss 5% violations and removes one when the target holds without it; Kurma "
        "redistributes first. VM $0.133/h, WAN $0.01/GB, 375 bytes per request; static WAN RTTs."
    )
    report.table("fig12_costs", rows, caption="Average cost per day.")
    report.figure("fig12_costs", _plot(rows), "Cost per day by strategy, 1- and 60-minute billing.")

    def savings(billing, strategy):
        return next(
            r["savings_vs_alllocal_pct"]
            for r in rows
            if r["billing_min"] == billing and r["strategy"] == strategy
        )

    report.comparison(
        "fig12_vs_paper",
        [
            paper_row(
                paper,
                "fig12_kurmacost_gap_to_allshared_1min_pct",
                savings(1, "AllShared") - savings(1, "KurmaCost"),
                "KurmaCost's savings short of AllShared's, 1-min billing (pp)",
            ),
            paper_row(
                paper,
                "fig12_kurmaperf_savings_60min_pct",
                savings(60, "KurmaPerf"),
                "KurmaPerf savings vs AllLocal, 60-min billing",
            ),
            paper_row(
                paper,
                "fig12_kurmacost_savings_60min_pct",
                savings(60, "KurmaCost"),
                "KurmaCost savings vs AllLocal, 60-min billing",
            ),
            paper_row(
                paper,
                "fig12_kurmacost_gap_to_allshared_60min_pct",
                savings(60, "AllShared") - savings(60, "KurmaCost"),
                "KurmaCost's savings short of AllShared's, 60-min billing (pp)",
            ),
        ],
    )
    report.data("fig12_vms", {k: v.vms.sum(axis=1) for k, v in results.items()})
    return {"rows": rows}


def _plot(rows):
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4), sharey=True)
    for ax, billing in zip(axes, (1, 60), strict=True):
        sel = [r for r in rows if r["billing_min"] == billing]
        names = [r["strategy"] for r in sel]
        vm = [r["vm_usd_per_day"] for r in sel]
        wan = [r["wan_usd_per_day"] for r in sel]
        ax.bar(names, vm, label="VMs")
        ax.bar(names, wan, bottom=vm, label="WAN")
        ax.set_title(f"billing period {billing} min")
        ax.tick_params(axis="x", rotation=20)
    axes[0].set_ylabel("USD per day")
    axes[0].legend()
    fig.tight_layout()
    return fig

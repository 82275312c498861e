"""The reproduction's overprovisioning sweep (FAST 2011, §5.5, §6.3, §7; issue 23): the
elastic policy over the diurnal day at several overprovisioning factors. §6.3 runs 0.1 and
0.3 and says more headroom costs more server units and absorbs more small spikes."""

from __future__ import annotations

import matplotlib.pyplot as plt

from geoslo.report import Report, paper_row

__all__ = [
    "OVERPROVISIONING_SWEEP",
    "OVERPROVISIONING_SWEEP_QUICK",
    "overprovisioning_section",
    "sweep_rows",
    "sweep_text",
    "check_sweep",
]

OVERPROVISIONING_SWEEP = (0.0, 0.1, 0.2, 0.3, 0.5)  # §5.7's 0.1 and 0.3, bracketed
OVERPROVISIONING_SWEEP_QUICK = (0.0, 0.1, 0.3)
UNITS_DROP_MAX_FRACTION = 0.01  # run-to-run noise allowed before "fewer units" counts
PERIODS_OVER_MARGIN_FRACTION = 0.01  # likewise for the share of 20-s periods over the SLO
PAPER_KEYS = {  # (factor, quantity) -> paper.json key; the text gives numbers for 0.1 only
    (0.1, "units"): "diurnal_elastic_01_units",
    (0.1, "serving_over_ideal"): "diurnal_serving_over_ideal_pct",
}


def overprovisioning_section(report: Report, paper: dict, sweep: list[dict]) -> list[dict]:
    """Write the section. ``sweep``: per factor, ascending, a ``run_summary`` of its day
    with the factor under ``overprovisioning``. Returns ``sweep`` for summary.json."""
    factors = ", ".join(f"{entry['overprovisioning']:g}" for entry in sweep)
    report.section(
        "Overprovisioning sweep (§5.5, §6.3)",
        "Overprovisioning multiplies the smoothed workload the controller sees by 1 + the "
        "factor (§5.5), a safety buffer that buys time to move data; §6.3 runs 0.1 and 0.3 "
        "and says more headroom absorbs small spikes better, less saves more. The same "
        f"diurnal day as above, elastic policy with 2 replicas, at factors {factors}. The "
        "paper's text gives numbers for 0.1 only.",
    )
    report.comparison("overprovisioning", sweep_rows(paper, sweep))
    report.text(sweep_text(sweep))
    report.figure(
        "overprovisioning",
        _sweep_figure(sweep),
        "Top: server units over the day against the factor. Bottom: the day's 20-s periods "
        "with p99 over 100 ms, and its gets over 100 ms.",
    )
    return sweep


def sweep_rows(paper: dict, sweep: list[dict]) -> list[dict]:
    """The comparison rows, per factor: units, serving units over the ideal, periods and
    gets over the SLO, and the highest percentile every 20-s window met (Fig. 10)."""
    rows = []
    for entry in sweep:
        factor = entry["overprovisioning"]
        label = f"overprovisioning {factor:g}"
        quantities = (
            ("units", f"{label}: server units", entry["units"], "server units"),
            (
                "serving_over_ideal",
                f"{label}: serving units over the ideal",
                round(100 * (entry["serving_over_ideal"] - 1), 1),
                "%",
            ),
            (
                "periods_over",
                f"{label}: 20-s periods with p99 over 100 ms",
                round(100 * entry["periods_over_fraction"], 1),
                "%",
            ),
            ("late", f"{label}: gets over 100 ms", round(100 * entry["late_fraction"], 3), "%"),
            (
                "percentile_20s",
                f"{label}: highest percentile met, 20-s windows",
                entry["percentiles"]["20"],
                "percentile",
            ),
        )
        for name, quantity, ours, unit in quantities:
            key = PAPER_KEYS.get((factor, name))
            if key is None:
                rows.append({"quantity": quantity, "ours": ours, "paper": None, "unit": unit})
            else:
                rows.append(paper_row(paper, key, ours, quantity))
    return rows


def sweep_text(sweep: list[dict]) -> str:
    """What the sweep shows, every number from the run: the least against the most
    overprovisioned day, and whether units rose at every step."""
    low, high = sweep[0], sweep[-1]
    units = [entry["units"] for entry in sweep]
    rising = all(b >= a for a, b in zip(units, units[1:], strict=False))
    return (
        f"**Cost against headroom.** From overprovisioning {low['overprovisioning']:g} to "
        f"{high['overprovisioning']:g} the day cost {low['units']} then {high['units']} "
        f"server units ({100 * (high['units'] / low['units'] - 1):+.0f}%; serving units "
        f"{100 * (low['serving_over_ideal'] - 1):.0f}% then "
        f"{100 * (high['serving_over_ideal'] - 1):.0f}% over the ideal); units "
        f"{'rose at every step' if rising else 'did not rise at every step'} of the sweep "
        f"({', '.join(str(u) for u in units)}). The share of 20-s periods with a p99 over "
        f"100 ms went from {100 * low['periods_over_fraction']:.1f}% to "
        f"{100 * high['periods_over_fraction']:.1f}%, the gets over 100 ms from "
        f"{100 * low['late_fraction']:.3f}% to {100 * high['late_fraction']:.3f}%, and the "
        "highest percentile every 20-s window met from "
        f"{low['percentiles']['20']} to {high['percentiles']['20']}."
    )


def check_sweep(sweep: list[dict]) -> dict[str, bool]:
    """§6.3's trade-off as checks, each with a margin for run-to-run noise: a larger factor
    never costs fewer units (beyond 1%), and the largest has no more 20-s periods over the
    SLO than the smallest (beyond 1 point). Names hold no number of the run."""
    units = [entry["units"] for entry in sweep]
    cost = all(
        b >= (1 - UNITS_DROP_MAX_FRACTION) * a for a, b in zip(units, units[1:], strict=False)
    )
    over_low, over_high = (sweep[i]["periods_over_fraction"] for i in (0, -1))
    return {
        "overprovisioning: more never uses fewer server units (beyond 1%)": cost,
        "overprovisioning: the most has no more 20-s periods over the SLO than the least "
        "(beyond 1 point)": over_high <= over_low + PERIODS_OVER_MARGIN_FRACTION,
    }


def _sweep_figure(sweep: list[dict]):
    """Units (top) and lateness (bottom) against the factor, §6.3's trade-off."""
    factors = [entry["overprovisioning"] for entry in sweep]
    fig, axes = plt.subplots(2, 1, figsize=(6, 5.5), sharex=True)
    axes[0].plot(factors, [e["units"] for e in sweep], "o-", label="server units")
    serving = [e["units"] - e["standby_units"] for e in sweep]
    axes[0].plot(factors, serving, "s--", label="serving units")
    axes[0].axhline(sweep[0]["ideal_units"], color="grey", linestyle=":", label="ideal")
    axes[0].set_ylabel("server units")
    axes[0].legend(loc="upper left")
    periods = [100 * e["periods_over_fraction"] for e in sweep]
    axes[1].plot(factors, periods, "o-", label="20-s periods with p99 > 100 ms (left)")
    axes[1].set_ylabel("20-s periods over the SLO (%)")
    axes[1].set_xlabel("overprovisioning factor")
    gets = axes[1].twinx()  # far fewer gets than periods are late: a scale of their own
    late = [100 * e["late_fraction"] for e in sweep]
    gets.plot(factors, late, "s--", color="C1", label="gets > 100 ms (right)")
    gets.set_ylabel("gets over 100 ms (%)")
    for axis in (axes[1], gets):
        axis.set_ylim(bottom=0)
    axes[1].legend(handles=axes[1].get_lines() + gets.get_lines(), loc="upper right")
    fig.tight_layout()
    return fig

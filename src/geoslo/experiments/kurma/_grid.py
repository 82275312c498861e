"""Fig. 8 as a grid: every site choice with server choices inside the site, and geoslo's
balancer (Kurma's rates + a load-aware server choice) against every cell, C3 included.

The paper's Fig. 8 compares policies that choose a site (AllLocal, GlobalRR, the driver's and
Cassandra's snitches, Mmc, Kurma) with one that also chooses the server (C3). Like with like
means every site choice gets the same in-site choices C3 has; C3 chooses both levels at once,
so it is one cell compared with every pair. The prose below is generated from the run.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from geoslo.control.kurma import SERVER_CHOICES
from geoslo.experiments.kurma._runs import cell_name

__all__ = [
    "SITE_CHOICES",
    "GEOSLO_BALANCER",
    "grid_cells",
    "grid_checks",
    "grid_text",
    "plot_grid",
]

SITE_CHOICES = (
    "AllLocal",
    "GlobalRR",
    "LatencyAware",
    "DynamicSnitch",
    "DynamicSnitch-3.11",
    "Mmc",
    "KurmaPerf",
    "KurmaCost",
)
RATE_CHOICES = ("AllLocal", "Mmc", "KurmaPerf", "KurmaCost")  # their own server: a random one
# geoslo's recommendation: Kurma's rates with least outstanding requests inside the site
# (Envoy's LEAST_REQUEST over every replica, HAProxy's leastconn): it needs nothing from the
# servers, unlike C3's psi, and matched it in our runs (docs/kurma.md)
GEOSLO_BALANCER = ("KurmaPerf", "least_outstanding")


def grid_cells(row_choices: tuple[str, ...]) -> list[tuple[str, str | None]]:
    """(site choice, server choice) cells: every site choice with its own server choice and
    with each of ``row_choices``, C3, and Kurma's rates with every server choice."""
    cells: list[tuple[str, str | None]] = [(p, None) for p in SITE_CHOICES] + [("C3", None)]
    for choice in row_choices:
        cells += [(p, choice) for p in SITE_CHOICES]
    cells += [("KurmaPerf", c) for c in SERVER_CHOICES]
    seen, out = set(), []
    for policy, choice in cells:
        if policy in RATE_CHOICES and choice == "random":
            choice = None  # the same run as the policy's own choice
        if (policy, choice) not in seen:
            seen.add((policy, choice))
            out.append((policy, choice))
    return out


def _violations(rows: dict, name: str) -> float:
    return rows[name]["global_violations_pct"]


def _others(rows: dict) -> list[str]:
    """Every cell but Kurma's own row (same site choice, other server choices)."""
    site, _ = GEOSLO_BALANCER
    return [name for name, row in rows.items() if row["site_choice"] != site]


def grid_checks(traces: dict[str, dict]) -> dict[str, bool]:
    """geoslo's balancer against the other cells, like with like, on every trace."""
    best = cell_name(*GEOSLO_BALANCER)
    checks = {}
    for trace, rows in traces.items():
        ours = _violations(rows, best)
        checks[f"{trace}: {best} has fewer violations than C3 and than every other site "
               "choice with the same server choice"] = ours < _violations(rows, "C3") and all(
            ours < _violations(rows, cell_name(p, GEOSLO_BALANCER[1]))
            for p in SITE_CHOICES
            if p != GEOSLO_BALANCER[0]
        )  # fmt: skip
        checks[f"{trace}: {best} sends less over the WAN than C3 and GlobalRR"] = all(
            rows[best]["wan_gb"] < rows[other]["wan_gb"] for other in ("C3", "GlobalRR")
        )
        checks[f"{trace}: a load-aware server choice cuts KurmaPerf's violations"] = ours < (
            _violations(rows, "KurmaPerf")
        )
    return checks


def grid_text(traces: dict[str, dict]) -> str:
    """Where geoslo's balancer stands against the best other cell, from the numbers."""
    best = cell_name(*GEOSLO_BALANCER)
    lines = []
    for trace, rows in traces.items():
        ours = rows[best]
        others = _others(rows)
        winner = min(others, key=lambda n: _violations(rows, n))
        w = rows[winner]
        kurma_row = sorted(
            (n for n in rows if rows[n]["site_choice"] == GEOSLO_BALANCER[0]),
            key=lambda n: _violations(rows, n),
        )
        ours_pct, their_pct = ours["global_violations_pct"], w["global_violations_pct"]
        ratio = their_pct / max(ours_pct, 1e-9)
        verdict = (
            f"beats the best other cell, {winner} ({their_pct:.3f}%, {w['wan_gb']:.2f} GB), "
            f"by {ratio:.2f}x"
            if ours_pct < their_pct
            else f"loses to {winner} ({their_pct:.3f}%, {w['wan_gb']:.2f} GB) by "
            f"{ours_pct - their_pct:.3f} points ({1 / max(ratio, 1e-9):.2f}x)"
        )
        lines.append(
            f"* **{trace}**: {best} has {ours['global_violations_pct']:.3f}% violations and "
            f"sends {ours['wan_gb']:.2f} GB over the WAN ({ours['redirected_pct']:.1f}% of the "
            f"reads); it {verdict}. C3: {_violations(rows, 'C3'):.3f}%, "
            f"{rows['C3']['wan_gb']:.2f} GB. Kurma's row, best first: "
            + ", ".join(f"{n} {_violations(rows, n):.3f}%" for n in kurma_row)
            + "."
        )
    return "\n".join(lines) + "\n"


def plot_grid(traces: dict[str, dict]):
    """One heat map per trace: site choice x server choice, global violations (%)."""
    columns = ["own", *SERVER_CHOICES]
    fig, axes = plt.subplots(1, len(traces), figsize=(6.2 * len(traces), 4.2), squeeze=False)
    for ax, (trace, rows) in zip(axes[0], traces.items(), strict=True):
        grid = np.full((len(SITE_CHOICES) + 1, len(columns)), np.nan)
        for row in rows.values():
            site = row["site_choice"]
            r = SITE_CHOICES.index(site) if site in SITE_CHOICES else len(SITE_CHOICES)
            choice = row["server_choice"] or "own"
            grid[r, columns.index(choice)] = row["global_violations_pct"]
            if site in RATE_CHOICES and choice == "own":
                grid[r, columns.index("random")] = row["global_violations_pct"]
        shown = np.log10(np.maximum(grid, 1e-3))
        image = ax.imshow(shown, cmap="viridis_r", aspect="auto")
        for (r, c), value in np.ndenumerate(grid):
            if np.isfinite(value):
                ax.text(c, r, f"{value:.2f}", ha="center", va="center", fontsize=7, color="w")
        ax.set_xticks(range(len(columns)), columns, rotation=30, fontsize=8)
        ax.set_yticks(range(len(SITE_CHOICES) + 1), [*SITE_CHOICES, "C3"], fontsize=8)
        ax.set_title(f"{trace}: global violations (%)")
        fig.colorbar(image, ax=ax, label="log10 %")
    fig.tight_layout()
    return fig

"""Fig. 11: Kurma adapts to interference by substituting a better-fitting curve (§7.1.4).

Constant load at every site; at minute 2, two of Frankfurt's five servers slow down (CPU
hogs); at minute 3 an interference signal arrives (as from DeepDive) and at the next
recomputation Kurma picks, by least squares over recent (load, violation) points, the
best-fitting curve of a family profiled beforehand with 0-3 servers slowed.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from geoslo.experiments.kurma._runs import INTERVAL_S, run_policy
from geoslo.experiments.kurma._scenario import BASE_RTT_RANGE_MS, SLO_MS, Scenario
from geoslo.models import build_slo_surface, profile_backend, profile_loads
from geoslo.report import Report, paper_row, progress
from geoslo.sim.kurma import profile_site

LONDON, FRANKFURT = 0, 2
LOAD_OF_SATURATION = 10.0 / 55.0  # 10k req/s per site on a 55k req/s cluster, §7.1.4
# Service-time factor of a server sharing its CPU with hogs (our choice: it lifts Frankfurt's
# violations above 2%, as in the paper).
SLOWDOWN = 3.0
SLOWED_SERVERS = 2  # "2 out of 5 VMs in Frankfurt"
INTERFERENCE_AT_S, SIGNAL_AT_S = 120.0, 180.0


def _factors(servers: int, slowed: int) -> np.ndarray:
    factors = np.ones(servers)
    factors[:slowed] = SLOWDOWN
    return factors


def curve_family(scenario: Scenario, on_point=None) -> list:
    """Frankfurt's surfaces with 0..3 servers slowed, profiled like the healthy one."""
    backend, settings, seed = scenario.backend, scenario.settings, scenario.seed
    loads = profile_loads(scenario.saturation_rps, max(12, settings.profile_points // 2))
    family = []
    for slowed in range(4):
        factors = _factors(backend.servers, slowed)

        def measure(load, write_fraction, factors=factors):
            return profile_site(
                backend, load, write_fraction, settings.profile_seconds, seed, slowdown=factors
            )

        profile = profile_backend(measure, loads, (0.0,), on_point=on_point)
        family.append(
            build_slo_surface(profile, SLO_MS, scenario.residual_estimate, BASE_RTT_RANGE_MS)
        )
    return family


def section(report: Report, scenario: Scenario, paper: dict, seed: int) -> dict:
    family = curve_family(scenario)
    seconds = int(scenario.settings.interference_minutes * 60)
    rates = [np.full(seconds, LOAD_OF_SATURATION * scenario.saturation_rps)] * 3
    slowdown = _factors(scenario.backend.servers, SLOWED_SERVERS)
    events = [
        (INTERFERENCE_AT_S, lambda sim, ctl: sim.set_server_slowdown(FRANKFURT, slowdown)),
        (SIGNAL_AT_S, lambda sim, ctl: ctl.signal_interference(FRANKFURT)),
    ]
    with progress(total=int(seconds / INTERVAL_S), label="Fig. 11 interference") as bar:
        run = run_policy(
            scenario,
            "KurmaPerf",
            rates,
            seed=seed,
            events=events,
            curve_families={FRANKFURT: family},
            on_interval=lambda done, total: bar.update(),
        )
    per = int(round(60 / INTERVAL_S))
    minutes = run.requests.shape[0] // per

    def per_minute(src, dst):
        v = run.violations[: minutes * per, src, dst].reshape(minutes, per).sum(1)
        r = run.requests[: minutes * per, src, dst].reshape(minutes, per).sum(1)
        return np.where(r > 0, v / np.maximum(r, 1), np.nan)

    series = {
        "Frankfurt local": per_minute(FRANKFURT, FRANKFURT),
        "Frankfurt -> London": per_minute(FRANKFURT, LONDON),
        "London local": per_minute(LONDON, LONDON),
    }
    frankfurt_total = run.violations[:, FRANKFURT].sum(1)[: minutes * per].reshape(
        minutes, per
    ).sum(1) / np.maximum(
        run.requests[:, FRANKFURT].sum(1)[: minutes * per].reshape(minutes, per).sum(1), 1
    )
    rows = [
        {
            "minute": m + 1,
            **{k: 100 * v[m] for k, v in series.items()},
            "Frankfurt all": 100 * frankfurt_total[m],
        }
        for m in range(minutes)
    ]
    at4 = min(3, minutes - 1)
    report.section("Fig. 11: adapting to interference (§7.1.4)")
    report.text(
        f"{LOAD_OF_SATURATION * scenario.saturation_rps:.0f} req/s per site; from minute 2, "
        f"{SLOWED_SERVERS} of {scenario.backend.servers} Frankfurt servers run {SLOWDOWN}x slower; "
        "at minute 3 the interference signal arrives. Family: Frankfurt profiled with 0-3 servers "
        f"slowed; the least-squares fit after the signal chose the curve with "
        f"**{run.chosen_curve.get(FRANKFURT, 0)}** slowed servers."
    )
    report.table("fig11_minutes", rows, caption="Violations (%) per minute.")
    report.figure("fig11_interference", _plot(series, frankfurt_total), "Violations per minute.")
    report.comparison(
        "fig11_vs_paper",
        [
            paper_row(
                paper,
                "fig11_frankfurt_after_interference_pct",
                100 * frankfurt_total[2] if minutes > 2 else float("nan"),
                "Frankfurt, minute 3 (interference, old curve) (%)",
            ),
            paper_row(
                paper,
                "fig11_redirected_fra_lon_pct",
                100 * series["Frankfurt -> London"][at4],
                "Frankfurt -> London at minute 4 (%)",
            ),
            paper_row(
                paper,
                "fig11_london_local_pct",
                100 * series["London local"][at4],
                "London local at minute 4 (%)",
            ),
        ],
    )
    return {"rows": rows}


def _plot(series, frankfurt_total):
    fig, ax = plt.subplots(figsize=(6, 3.4))
    minutes = np.arange(1, len(frankfurt_total) + 1)
    ax.plot(minutes, 100 * frankfurt_total, "k-", marker="o", label="Frankfurt (all its requests)")
    for name, values in series.items():
        ax.plot(minutes, 100 * values, marker=".", ls="--", label=name)
    ax.axvline(INTERFERENCE_AT_S / 60 + 1, color="red", lw=0.8)
    ax.axvline(SIGNAL_AT_S / 60 + 1, color="green", lw=0.8)
    ax.set_xlabel("minute")
    ax.set_ylabel("SLO violations (%)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig

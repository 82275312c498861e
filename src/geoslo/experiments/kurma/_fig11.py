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
from geoslo.experiments.kurma._scenario import (
    BASE_RTT_RANGE_MS,
    SLO_MS,
    Scenario,
    measure_saturation,
    profile_simulated,
)
from geoslo.models import build_slo_surface, profile_loads
from geoslo.report import Report, paper_row, progress

LONDON, FRANKFURT = 0, 2
LOAD_OF_SATURATION = 10.0 / 55.0  # 10k req/s per site on a 55k req/s cluster, §7.1.4
# Service-time factor of a server sharing its CPU with hogs: our choice, the paper gives none.
# It was meant to lift Frankfurt's violations above 2% as in §7.1.4; at 10k req/s they reach
# about 1.5% (the report compares minute 3 with the paper), and we do not tune it to match.
SLOWDOWN = 3.0
SLOWED_SERVERS = 2  # "2 out of 5 VMs in Frankfurt"
FAMILY_SLOWED_MAX = 3  # the family: Frankfurt profiled with 0..3 servers slowed
STEADY_SHARE_PP = 5.0  # a redirected share moving less than this counts as unchanged
INTERFERENCE_AT_S, SIGNAL_AT_S = 120.0, 180.0


def _factors(servers: int, slowed: int) -> np.ndarray:
    factors = np.ones(servers)
    factors[:slowed] = SLOWDOWN
    return factors


def family_loads(scenario: Scenario) -> np.ndarray:
    """One load grid for the whole family: the healthy site's (§4.1) joined with one as dense
    below the saturation point of the most slowed member, where the slowed curves bend.

    One grid and one seed for every member: a slower server only lengthens the same
    requests' service, so the members' curves are ordered, as the fit needs."""
    points = max(12, scenario.settings.profile_points // 2)
    most_slowed = _factors(scenario.backend.servers, FAMILY_SLOWED_MAX)
    low_rps = measure_saturation(scenario.backend, scenario.seed, slowdown=most_slowed)
    healthy = profile_loads(scenario.saturation_rps, points)
    return np.union1d(healthy, profile_loads(low_rps, points))


def curve_family(scenario: Scenario) -> list:
    """Frankfurt's surfaces with 0..FAMILY_SLOWED_MAX servers slowed, profiled like the
    healthy one on :func:`family_loads`."""
    loads = family_loads(scenario)
    family = []
    for slowed in range(FAMILY_SLOWED_MAX + 1):
        profile = profile_simulated(
            scenario.backend,
            scenario.settings,
            scenario.seed,
            loads,
            slowdown=_factors(scenario.backend.servers, slowed),
            label=f"Fig. 11 family, {slowed} slowed",
        )
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
    sent = run.requests[: minutes * per, FRANKFURT].reshape(minutes, per, -1).sum(1)
    redirected_share = 1 - sent[:, FRANKFURT] / np.maximum(sent.sum(1), 1)
    rows = [
        {
            "minute": m + 1,
            **{k: 100 * v[m] for k, v in series.items()},
            "Frankfurt all": 100 * frankfurt_total[m],
            "Frankfurt redirected share": 100 * redirected_share[m],
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
    fit = _fit_summary(run, family)
    report.text(_fit_text(fit, run) + _fading_text(rows))
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
            {
                "quantity": "slowed servers in the curve the fit chose",
                "ours": run.chosen_curve.get(FRANKFURT, 0),
                "paper": None,
                "unit": "servers",
                "note": f"{SLOWED_SERVERS} were slowed",
            },
        ],
    )
    return {"rows": rows, "chosen_slowed": run.chosen_curve.get(FRANKFURT, 0), "fit": fit}


def _fit_summary(run, family) -> dict:
    """What the least-squares fit (§7.1.4) saw, and each member's value at that load."""
    fit = run.curve_fits.get(FRANKFURT)
    if fit is None:
        return {}
    load_rps = float(np.mean(fit.load_rps))
    return {
        "points": int(fit.load_rps.size),
        "load_rps": load_rps,
        "load_spread_rps": float(np.ptp(fit.load_rps)),
        "observed_pct": 100 * float(np.mean(fit.violation_fraction)),
        "predicted_pct": [100 * float(s.curve(0, 0.0)(load_rps)) for s in family],
    }


def _fit_text(fit: dict, run) -> str:
    """The fit's choice explained from its numbers, and how noisy a minute's average is."""
    if not fit:
        return "The interference signal came before any point was recorded: no fit."
    predicted = ", ".join(f"{k} slowed {v:.2f}%" for k, v in enumerate(fit["predicted_pct"]))
    after = slice(int(INTERFERENCE_AT_S / INTERVAL_S), None)
    requests = run.requests[after, FRANKFURT].sum(1)
    fraction = run.violations[after, FRANKFURT].sum(1) / np.maximum(requests, 1)
    sd_pp = 100 * float(np.std(fraction))
    return (
        f"The fit saw {fit['points']} interval points within {fit['load_spread_rps']:.0f} req/s "
        f"of {fit['load_rps']:.0f} req/s: with a constant load, least squares compares the "
        f"mean, here {fit['observed_pct']:.2f}% observed against the family's {predicted} at "
        f"that load (profiled with the same servers {SLOWDOWN}x slower), so it chose "
        f"{run.chosen_curve.get(FRANKFURT, 0)}. The violations come in bursts (one stall of a "
        "slowed server holds every request queued behind it): after the interference, "
        f"Frankfurt's violations per {INTERVAL_S} s interval range from "
        f"{100 * float(np.min(fraction)):.2f}% to {100 * float(np.max(fraction)):.2f}% "
        f"(standard deviation {sd_pp:.2f} pp), and the fit's mean is one minute of them."
    )


def _fading_text(rows: list[dict]) -> str:
    """Whether Frankfurt's changes after the fit come from Kurma's routing or not."""
    after = [r for r in rows if r["minute"] > SIGNAL_AT_S / 60]  # the minutes after the fit
    if len(after) < 2:
        return ""
    shares = [r["Frankfurt redirected share"] for r in after]
    totals = [r["Frankfurt all"] for r in after]
    return (
        f" From minute {after[0]['minute']} on Kurma redirects {min(shares):.1f}-"
        f"{max(shares):.1f}% of Frankfurt's requests every minute while Frankfurt's violations "
        f"move between {min(totals):.2f}% and {max(totals):.2f}%: "
        + (
            "those changes come from the bursts, not from the routing, which stays put."
            if max(shares) - min(shares) < STEADY_SHARE_PP
            else "the routing itself changed between those minutes."
        )
    )


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


def checks(result: dict) -> dict[str, bool]:
    """§7.1.4's claims on this run: the fit finds the interference and relieves Frankfurt."""
    signal_minute = int(SIGNAL_AT_S / 60)  # the last minute on the old curve (1-based)
    totals = [r["Frankfurt all"] for r in result["rows"]]
    after = totals[signal_minute:]
    return {
        "Fig. 11: the fit after the signal picks a curve with slowed servers": (
            result["chosen_slowed"] > 0
        ),
        "Fig. 11: Frankfurt's violations after the fit average below the minute before it": (
            len(after) > 0 and float(np.mean(after)) < totals[signal_minute - 1]
        ),
    }

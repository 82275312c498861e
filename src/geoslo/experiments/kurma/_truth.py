"""Kurma on a WAN ground truth its model does not assume (issue 23).

Everywhere else in the reproduction the simulator draws each remote response as service +
base RTT + an independent residual from one pool: Kurma's own model (§4.2), so its
accuracy there is self-consistency. Here the residual is per pair, correlated in time,
heavy tailed when a link is congested and growing with the link's load
(`geoslo.sim.kurma.WanTruthParams`). Kurma is unchanged: it probes this WAN as §6 says
(base = minimum of 10 s blocks, residuals pooled over links), builds its curves from the
same service profile, and controls with them.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from geoslo.dist import LatencyDistribution
from geoslo.experiments._parallel import run_jobs
from geoslo.experiments.kurma._fig4_5 import FIG4_RTT_MS, FRANKFURT, IRELAND, accuracy_points
from geoslo.experiments.kurma._runs import PolicyRun, run_policy
from geoslo.experiments.kurma._scenario import (
    BASE_RTT_RANGE_MS,
    PROBE_INTERVAL_S,
    PROBE_MINUTES,
    PROBES_PER_SITE,
    SLO_MS,
    Scenario,
)
from geoslo.models import build_slo_surface, residual_from_probes
from geoslo.report import Report
from geoslo.sim.kurma import WanResidualTruth, WanTruthParams
from geoslo.topology import kurma_topology

__all__ = ["truth_params", "truth_scenario", "section", "checks"]
TARGETS = (0.02, 0.05, 0.08)  # estimated violation fractions at which we measure
ERROR_BOUND_PP = 2.0  # our bound on the model's error on this truth (4x the pooled target)
POLICIES = ("AllLocal", "KurmaPerf")


def truth_params(scenario: Scenario) -> WanTruthParams:
    """The truth WAN of this scenario: default knobs, features drawn from its seed."""
    return WanTruthParams(wan_seed=scenario.seed)


def probed_residual(scenario: Scenario, truth: WanTruthParams) -> LatencyDistribution:
    """What Kurma's probes (§6) measure of the truth WAN before it redirects anything:
    3 probes every 200 ms on every link for 5 minutes, base = minimum of each 10 s block,
    residuals pooled over links (as for the pooled truth, `_scenario.estimate_residual`)."""
    n = len(scenario.sites)
    wan = WanResidualTruth(n, scenario.residual_pool_ms, truth, scenario.seed + 7)
    topology = kurma_topology(
        scenario.saturation_rps, routing_mean_interval_s=60.0, duration_s=600.0, seed=scenario.seed
    )
    rng = np.random.default_rng(scenario.seed)
    times = np.arange(0.0, PROBE_MINUTES * 60, PROBE_INTERVAL_S)
    residuals = np.empty((times.size, n, n, PROBES_PER_SITE))
    for k in range(times.size):
        wan.advance(PROBE_INTERVAL_S, np.zeros((n, n)))
        residuals[k] = wan.probe_residuals_ms(rng, PROBES_PER_SITE)
    base = topology.base_rtt_matrix_ms(np.repeat(times, PROBES_PER_SITE))
    per_block = int(10 / PROBE_INTERVAL_S) * PROBES_PER_SITE
    rtts = [
        base[:, i, j] + residuals[:, i, j].ravel() for i in range(n) for j in range(n) if i != j
    ]
    return residual_from_probes(rtts, per_block)


def truth_scenario(scenario: Scenario, truth: WanTruthParams) -> Scenario:
    """The scenario as Kurma knows it over the truth WAN: same profile, probed residual."""
    residual = probed_residual(scenario, truth)
    surface = build_slo_surface(scenario.profile, SLO_MS, residual, BASE_RTT_RANGE_MS)
    return dataclasses.replace(scenario, residual_estimate=residual, surface=surface)


def _redirected_violation_pct(run: PolicyRun) -> float:
    total = run.requests.sum(axis=0)
    violations = run.violations.sum(axis=0)
    off = ~np.eye(total.shape[0], dtype=bool)
    return 100 * float(violations[off].sum() / max(total[off].sum(), 1))


def _policy_runs(truth_scen, truth, trace, seed) -> dict[str, PolicyRun]:
    jobs = [
        (truth_scen, p, trace.rates_rps, 0.0, seed, (), None, None, None, truth) for p in POLICIES
    ]
    runs = run_jobs(run_policy, jobs, truth_scen.settings.workers, "WAN truth policies")
    return {run.policy: run for run in runs}


def section(report: Report, scenario: Scenario, trace1, pooled: dict, seed: int) -> dict:
    """Model error and controller result on the truth WAN, beside the pooled truth's
    (``pooled``: the results of the sections before, "fig4_5" and "fig8_10", if run)."""
    truth = truth_params(scenario)
    truth_scen = truth_scenario(scenario, truth)
    rows = accuracy_points(
        truth_scen, scenario.settings.accuracy_seconds, seed + 300, TARGETS, truth
    )
    errors = np.array([r["error_pp"] for r in rows])
    runs = _policy_runs(truth_scen, truth, trace1, seed)
    kurma, local = runs["KurmaPerf"], runs["AllLocal"]
    pooled_rows = {r["policy"]: r for r in pooled.get("fig8_10", {}).get("fig8a", [])}
    pooled_error = pooled.get("fig4_5", {}).get("max_error_pp")
    wan = WanResidualTruth(len(scenario.sites), scenario.residual_pool_ms, truth, seed)
    link_scale = float(wan.pair_scale[IRELAND, FRANKFURT])
    calm_mean_ms = float(np.mean(scenario.residual_pool_ms))
    c = truth.congested_fraction
    result = {
        "accuracy": rows,
        "max_error_pp": float(np.max(np.abs(errors))),
        "mean_error_pp": float(np.mean(errors)),
        "kurma_violations_pct": 100 * kurma.global_violation_fraction,
        "alllocal_violations_pct": 100 * local.global_violation_fraction,
        "kurma_redirected_violations_pct": _redirected_violation_pct(kurma),
        "kurma_redirected_share_pct": 100
        * kurma.redirected_requests()
        / max(float(kurma.requests.sum()), 1),
        "pooled_kurma_violations_pct": pooled_rows.get("KurmaPerf", {}).get(
            "global_violations_pct"
        ),
        "pooled_alllocal_violations_pct": pooled_rows.get("AllLocal", {}).get(
            "global_violations_pct"
        ),
        "pooled_max_error_pp": pooled_error,
        "probed_residual_mean_ms": truth_scen.residual_estimate.mean_ms(),
        "probed_residual_p99_ms": float(truth_scen.residual_estimate.quantile_ms(0.99)),
        "pooled_residual_p99_ms": float(scenario.residual_estimate.quantile_ms(0.99)),
        "link_pair_scale": link_scale,
        "link_residual_mean_ms": link_scale
        * ((1 - c) * calm_mean_ms + c * truth.congested_mean_ms),
    }
    report.section("Kurma on a WAN ground truth its model does not assume (issue 23)")
    report.text(_intro_text(truth))
    report.table(
        "truth_accuracy_redirected",
        rows,
        caption=f"Ireland -> Frankfurt over the truth WAN ({FIG4_RTT_MS:.0f} ms base RTT), "
        "Kurma's estimate from its probed residual.",
    )
    report.comparison(
        "truth_vs_pooled",
        [
            _row("largest |estimate - measured|, redirected, truth WAN", result["max_error_pp"]),
            _row("mean (estimate - measured), redirected, truth WAN", result["mean_error_pp"]),
            _row("largest |estimate - measured|, redirected, pooled truth", pooled_error),
            _row(f"{trace1.name}: KurmaPerf violations, truth WAN", result["kurma_violations_pct"]),
            _row(
                f"{trace1.name}: AllLocal violations, truth WAN", result["alllocal_violations_pct"]
            ),
            _row(
                f"{trace1.name}: KurmaPerf violations of redirected requests, truth WAN",
                result["kurma_redirected_violations_pct"],
            ),
            _row(
                f"{trace1.name}: KurmaPerf violations, pooled truth",
                result["pooled_kurma_violations_pct"],
            ),
            _row(
                f"{trace1.name}: AllLocal violations, pooled truth",
                result["pooled_alllocal_violations_pct"],
            ),
        ],
        caption="The paper has no such experiment. Violation fractions in %, errors in "
        "percentage points.",
    )
    report.text(_findings_text(result, truth, scenario.sites))
    return result


def _row(quantity: str, ours) -> dict:
    unit = "pp" if "estimate" in quantity else "%"
    return {"quantity": quantity, "ours": ours, "paper": None, "unit": unit, "note": ""}


def _intro_text(t: WanTruthParams) -> str:
    return (
        "Everywhere else the simulator draws each remote response as service + base RTT + "
        "an independent residual from one pool, which is Kurma's own model (§4.2): the "
        "accuracy measured there shows self-consistency, not that the model holds. Here the "
        "residual is drawn from a truth the model does not assume: each directed link scales "
        f"it by its own factor (lognormal, log-sd {t.pair_spread_sigma}); each link is "
        f"congested {100 * t.congested_fraction:.0f}% of the time in periods of "
        f"{t.congested_mean_s:.0f} s on average (calm: {t.calm_mean_s:.0f} s), when every "
        f"request on it draws a Pareto residual (mean {t.congested_mean_ms} ms, tail index "
        f"{t.congested_tail_index}); and the residual grows as 1/(1-u) with u the link's "
        f"request rate over {t.link_capacity_rps:.0f} req/s. These knobs are our choices, not "
        "the paper's. Kurma is unchanged: it probes this WAN for 5 minutes (§6), pools the "
        "links' residuals, and builds its curves from the same service profile."
    )


def _findings_text(result: dict, truth: WanTruthParams, sites) -> str:
    rows, pooled = result["accuracy"], result["pooled_max_error_pp"]
    worst = max(rows, key=lambda r: abs(r["error_pp"]))
    side = "over" if worst["error_pp"] > 0 else "under"
    lightest = worst["frankfurt_load_rps"] == min(r["frankfurt_load_rps"] for r in rows)
    where = (
        "at the lightest load, where the WAN residual's tail rather than the service time "
        "decides a violation"
        if lightest
        else "near the load where queueing at the destination takes over"
    )
    holds = result["max_error_pp"] <= ERROR_BOUND_PP
    link = f"{sites[IRELAND]} -> {sites[FRANKFURT]}"
    lines = [
        f"* **Model error.** Kurma's estimate for redirected requests is off by up to "
        f"{result['max_error_pp']:.2f} pp on the truth WAN"
        + (f" (pooled truth: {pooled:.2f} pp)" if pooled is not None else "")
        + f"; the worst point {side}estimates ({worst['estimated_pct']:.2f}% against "
        f"{worst['measured_pct']:.2f}% measured at {worst['frankfurt_load_rps']:.0f} req/s), "
        f"{where}. Kurma's probes saw a residual of mean {result['probed_residual_mean_ms']:.2f} "
        f"ms and 99th percentile {result['probed_residual_p99_ms']:.2f} ms, pooled over all "
        f"links; the {link} link's own residual averages "
        f"{result['link_residual_mean_ms']:.2f} ms when idle (its pair scale "
        f"{result['link_pair_scale']:.2f}x, congested {100 * truth.congested_fraction:.0f}% of "
        "the time). The probes' 10 s block minimum also counts part of a congested period's "
        "delay as base RTT. "
        + (
            f"Within {ERROR_BOUND_PP:.0f} pp the model still holds here"
            if holds
            else f"The model breaks here (over {ERROR_BOUND_PP:.0f} pp): one independent, pooled "
            "residual cannot stand for a link's own, time-correlated one"
        )
        + _against_pooled(result["max_error_pp"], pooled)
    ]
    kurma, local = result["kurma_violations_pct"], result["alllocal_violations_pct"]
    lines.append(
        f"* **Controller.** KurmaPerf {'still beats' if kurma < local else 'no longer beats'} "
        f"AllLocal on the truth WAN ({kurma:.2f}% against {local:.2f}% global violations); "
        f"{result['kurma_redirected_share_pct']:.1f}% of its requests are redirected and "
        f"{result['kurma_redirected_violations_pct']:.2f}% of those miss the SLO."
    )
    if result["pooled_kurma_violations_pct"] is not None:
        lines[-1] += (
            f" On the pooled truth: {result['pooled_kurma_violations_pct']:.2f}% and "
            f"{result['pooled_alllocal_violations_pct']:.2f}%."
        )
    lines.append(
        "* The paper itself assumes that redirecting does not congest the network (§3) and that "
        "congestion is infrequent (§4.2); this truth breaks both on purpose."
    )
    return "\n".join(lines) + "\n"


def _against_pooled(error_pp: float, pooled_pp: float | None) -> str:
    if pooled_pp is None:
        return "."
    if error_pp > pooled_pp:
        return (
            f"; its error is {error_pp - pooled_pp:.2f} pp larger than on the pooled truth, "
            "where agreement was partly self-consistency."
        )
    return (
        "; its error is no larger than on the pooled truth in this run, where the profile's "
        "own noise (stall bursts) dominates both."
    )


def checks(result: dict) -> dict[str, bool]:
    """Acceptance checks on the truth WAN (our bounds; the paper has no such experiment)."""
    return {
        "Truth WAN: KurmaPerf's global violations under 1/1.5 of AllLocal's": (
            result["alllocal_violations_pct"] > 1.5 * result["kurma_violations_pct"]
        ),
        f"Truth WAN: Kurma's estimate for redirected requests within {ERROR_BOUND_PP:.0f} pp "
        "of the measurement at every load": result["max_error_pp"] <= ERROR_BOUND_PP,
    }

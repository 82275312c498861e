"""The reproduction's section on a ground truth the steady-state model does not assume
(issue 23): the model's error on it, effect by effect, and the controller run on it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import matplotlib.pyplot as plt
import numpy as np

from geoslo.experiments.director._model_error import (
    STUDY_PERIODS,
    STUDY_RATE_SPAN,
    STUDY_SERVERS,
    model_error,
    violation_at_fill,
)
from geoslo.experiments.director._simulated import Models, percentiles_met
from geoslo.models import PAPER_MIXES_READ_FRACTION
from geoslo.report import Report
from geoslo.sim.director import ServerPerformance, SimResult
from geoslo.sim.director._benchmarks import BENCHMARK_PERIODS, BENCHMARK_SERVERS

__all__ = [
    "CONTENDED_TRUTH",
    "truth_variants",
    "study_truths",
    "truth_section",
    "check_truth",
    "run_summary",
    "periods_over_fraction",
    "breaks_text",
]

CONTENDED_TRUTH = ServerPerformance.contended()
THRESHOLD_MS = 100.0
LINEAR_EXACT_MAX_PCT = 2.0  # the control: on the linear truth the model is exact
PERIODS_OVER_MAX_FRACTION = 0.10  # the controller on the contended truth (see check_truth)


def truth_variants() -> dict[str, ServerPerformance]:
    """The linear truth, each effect of the contended one alone, and all of them."""
    linear = ServerPerformance()
    c = CONTENDED_TRUTH
    return {
        "linear": linear,
        "write contention": replace(linear, contention_put_rps=c.contention_put_rps),
        "heterogeneous servers": replace(linear, server_capacity_sigma=c.server_capacity_sigma),
        "slowdowns": replace(
            linear,
            slowdown_probability=c.slowdown_probability,
            slowdown_mean_s=c.slowdown_mean_s,
            slowdown_capacity_fraction=c.slowdown_capacity_fraction,
        ),
        "contended (all three)": c,
    }


def study_truths(
    train: Callable[[ServerPerformance, int], Models],
    read_fraction: float,
    overprovisioning: float,
    seed: int,
) -> list[dict]:
    """Per truth variant: the model §5.4 fits on it (``train(perf, seed)``) and its error
    there (``model_error``), and the truth's violation share at the controller's fullest
    fill, ``1 / (1 + overprovisioning)`` of the model's boundary at the workload's mix."""
    rows = []
    for name, perf in truth_variants().items():
        models = train(perf, seed)
        error = model_error(perf, models.steady, seed=seed)
        boundary = np.array([models.steady.capacity_rps(f) for f in error.read_fractions])
        error_pct = 100.0 * (boundary / error.crossings_rps() - 1.0)
        benchmarked = np.isin(error.read_fractions, PAPER_MIXES_READ_FRACTION)
        fill = 1.0 / (1.0 + overprovisioning)
        rows.append(
            {
                "name": name,
                "models": models,
                "error": error,
                "boundary_error_pct": error_pct,
                "benchmarked": benchmarked,
                "late_at_fill": violation_at_fill(perf, models.steady, read_fraction, fill, seed),
                "late_at_boundary": violation_at_fill(
                    perf, models.steady, read_fraction, 1.0, seed
                ),
            }
        )
    return rows


def _row_by_mix(study: list[dict], names: tuple[str, ...]) -> list[dict]:
    first = study[0]["error"]
    rows = []
    for k, fraction in enumerate(first.read_fractions):
        row = {
            "read/write mix": f"{round(fraction * 100)}/{round((1 - fraction) * 100)}",
            "benchmarked (§5.4)": "yes" if study[0]["benchmarked"][k] else "no",
        }
        for entry in (e for e in study if e["name"] in names):
            label = entry["name"].split(" ")[0]
            row[f"{label}: truth's crossing (req/s)"] = round(
                float(entry["error"].crossings_rps()[k])
            )
            row[f"{label}: model's boundary error (%)"] = round(
                float(entry["boundary_error_pct"][k]), 1
            )
        rows.append(row)
    return rows


def _row_by_truth(entry: dict) -> dict:
    error, pct, bench = entry["error"], entry["boundary_error_pct"], entry["benchmarked"]
    return {
        "truth": entry["name"],
        "largest |boundary error|, benchmarked mixes (%)": round(
            float(np.max(np.abs(pct[bench]))), 1
        ),
        "largest |boundary error|, other mixes (%)": round(float(np.max(np.abs(pct[~bench]))), 1),
        "cells called safe, truth violates (%)": round(
            100 * error.unsafe_called_safe_fraction(), 1
        ),
        "cells called unsafe, truth meets (%)": round(100 * error.safe_called_unsafe_fraction(), 1),
        "mean |P_model - P_truth|": round(error.mean_abs_error(), 3),
        "server-periods late at the controller's fullest fill (%)": round(
            100 * entry["late_at_fill"], 1
        ),
    }


def periods_over_fraction(result: SimResult) -> float:
    """Share of the run's 20-s periods whose p99 (over all gets) passed the threshold."""
    p99 = np.asarray(result.p99_ms)
    p99 = p99[np.isfinite(p99)]
    return float(np.mean(p99 > THRESHOLD_MS)) if p99.size else float("nan")


def run_summary(result: SimResult, units: int, ideal_units: int, standby_units: int) -> dict:
    """The controller's SLO and cost on one run."""
    met = percentiles_met(result)
    return {
        "units": units,
        "serving_over_ideal": (units - standby_units) / ideal_units if ideal_units else None,
        "periods_over_fraction": periods_over_fraction(result),
        "late_fraction": float((result.late_fraction * result.gets).sum() / result.gets.sum()),
        "percentiles": {str(w): v["percentile"] for w, v in met.items()},
    }


def truth_section(
    report: Report,
    study: list[dict],
    runs: dict[str, dict],
    read_fraction: float,
    overprovisioning: float,
) -> dict:
    """Write the section; returns the numbers the checks and summary.json read.
    ``runs``: per key (``diurnal-linear``, ``diurnal-contended``, ``hotspot-linear``,
    ``hotspot-contended``) the ``run_summary`` of that run."""
    c = CONTENDED_TRUTH
    report.section(
        "A truth the model does not assume (issue 23)",
        "On the default simulated servers the work is linear in get + "
        f"{c.put_cost:g} put, the very form of the logistic model (§5.4): the model is exact "
        "there by construction, and the runs above say nothing about its error. Here the "
        "servers' truth has three effects the model does not have. **Write contention:** a "
        f"put costs {c.put_cost:g} gets times (1 + puts/s / {c.contention_put_rps:,.0f}), so "
        "the work is quadratic in the puts. **Heterogeneous servers:** each server's "
        f"capacity is scaled for its life by a log-normal factor (σ = "
        f"{c.server_capacity_sigma:g}). **Slowdowns lasting minutes:** a server drops to "
        f"{100 * c.slowdown_capacity_fraction:.0f}% of its capacity with probability "
        f"{c.slowdown_probability:g} per {c.noise_period_s:g}-s period and stays slow "
        f"{c.slowdown_mean_s / 60:g} minutes on average ({100 * c.slow_fraction:.0f}% of "
        "servers slow at any time). The controller and its model fitting are unchanged: "
        f"benchmarks on the truth (a fleet of {BENCHMARK_SERVERS} servers, "
        f"{BENCHMARK_PERIODS // BENCHMARK_SERVERS} periods per load) give each "
        "mix's crossing, and the logistic regression is fitted to them, so the model is "
        "fitted to this truth with its own linear form. The truth's probability of a "
        f"violation at a load is the share of {STUDY_SERVERS * STUDY_PERIODS:,} "
        f"server-periods ({STUDY_SERVERS} servers, {STUDY_PERIODS} periods) "
        "whose p99 passes 100 ms; its crossing is the lowest load where that share reaches "
        "one half (the benchmark's own label).",
    )
    by_name = {e["name"]: e for e in study}
    linear, contended = by_name["linear"], by_name["contended (all three)"]
    report.table(
        "model_error_by_mix",
        _row_by_mix(study, ("linear", "contended (all three)")),
        caption="The model's boundary against the truth's crossing, per mix (positive: the "
        "model allows more load than the truth carries)",
    )
    report.table(
        "model_error_by_truth",
        [_row_by_truth(e) for e in study],
        caption="The model's error on each truth, each effect alone and all three; cells "
        f"span {STUDY_RATE_SPAN[0]:g}-{STUDY_RATE_SPAN[1]:g} of each mix's noiseless "
        "capacity; fullest fill: "
        f"1/{1 + overprovisioning:g} of the boundary at the workload's "
        f"{round(read_fraction * 100)}/{round((1 - read_fraction) * 100)} mix",
    )
    report.figure(
        "model_error",
        _figure(linear, contended),
        "The model's boundary (lines) and the truth's crossings (points) in the (get, put) plane.",
    )
    numbers = _numbers(linear, contended, read_fraction, runs)
    numbers["effects"] = {
        e["name"]: {
            "max_error_pct": float(np.max(np.abs(e["boundary_error_pct"]))),
            "late_at_fill": e["late_at_fill"],
        }
        for e in study
        if e["name"] not in ("linear", "contended (all three)")
    }
    report.comparison("truth", _comparison_rows(numbers))
    report.text(breaks_text(numbers, overprovisioning))
    return numbers


def _numbers(linear: dict, contended: dict, read_fraction: float, runs: dict) -> dict:
    fractions = contended["error"].read_fractions
    at_mix = int(np.argmin(np.abs(fractions - read_fraction)))
    other = ~contended["benchmarked"]
    worst_other = int(
        np.flatnonzero(other)[np.argmax(np.abs(contended["boundary_error_pct"][other]))]
    )
    return {
        "linear_max_error_pct": float(np.max(np.abs(linear["boundary_error_pct"]))),
        "contended_error_at_mix_pct": float(contended["boundary_error_pct"][at_mix]),
        "contended_worst_other_mix": float(fractions[worst_other]),
        "contended_worst_other_error_pct": float(contended["boundary_error_pct"][worst_other]),
        "contended_benchmarked_max_error_pct": float(
            np.max(np.abs(contended["boundary_error_pct"][contended["benchmarked"]]))
        ),
        "linear_unsafe_called_safe": linear["error"].unsafe_called_safe_fraction(),
        "contended_unsafe_called_safe": contended["error"].unsafe_called_safe_fraction(),
        "linear_late_at_fill": linear["late_at_fill"],
        "contended_late_at_fill": contended["late_at_fill"],
        "linear_late_at_boundary": linear["late_at_boundary"],
        "contended_late_at_boundary": contended["late_at_boundary"],
        "runs": runs,
    }


def _row(quantity: str, ours, unit: str, note: str = "") -> dict:
    return {"quantity": quantity, "ours": ours, "paper": None, "unit": unit, "note": note}


def _comparison_rows(n: dict) -> list[dict]:
    runs = n["runs"]
    rows = [
        _row(
            "model's largest boundary error, linear truth",
            round(n["linear_max_error_pct"], 1),
            "%",
            "exact by construction",
        ),
        _row(
            "model's boundary error at the workload's mix, contended truth",
            round(n["contended_error_at_mix_pct"], 1),
            "%",
        ),
        _row(
            "model's largest boundary error at a mix not benchmarked, contended truth",
            round(n["contended_worst_other_error_pct"], 1),
            "%",
            f"at {round(100 * n['contended_worst_other_mix'])}% reads",
        ),
        _row(
            "cells the model calls safe that the truth violates, linear truth",
            round(100 * n["linear_unsafe_called_safe"], 1),
            "%",
        ),
        _row(
            "cells the model calls safe that the truth violates, contended truth",
            round(100 * n["contended_unsafe_called_safe"], 1),
            "%",
        ),
        _row(
            "server-periods late at the controller's fullest fill, linear truth",
            round(100 * n["linear_late_at_fill"], 1),
            "%",
        ),
        _row(
            "server-periods late at the controller's fullest fill, contended truth",
            round(100 * n["contended_late_at_fill"], 1),
            "%",
        ),
    ]
    for key, label in (("diurnal", "diurnal day, elastic 0.1"), ("hotspot", "hotspot, 2 replicas")):
        for truth in ("linear", "contended"):
            run = runs[f"{key}-{truth}"]
            rows.append(
                _row(
                    f"{label}, {truth} truth: 20-s periods with p99 over 100 ms",
                    round(100 * run["periods_over_fraction"], 1),
                    "%",
                )
            )
            rows.append(
                _row(
                    f"{label}, {truth} truth: highest percentile met, 5-min windows",
                    run["percentiles"]["300"],
                    "percentile",
                )
            )
        if key == "diurnal":
            for truth in ("linear", "contended"):
                run = runs[f"diurnal-{truth}"]
                rows.append(
                    _row(f"{label}, {truth} truth: server units", run["units"], "server units")
                )
                rows.append(
                    _row(
                        f"{label}, {truth} truth: serving units over its ideal",
                        round(100 * (run["serving_over_ideal"] - 1), 1),
                        "%",
                        "ideal packed under that truth's model",
                    )
                )
    return rows


def breaks_text(n: dict, overprovisioning: float) -> str:
    """Where the model breaks, from the run's numbers."""
    runs = n["runs"]
    dl, dc = runs["diurnal-linear"], runs["diurnal-contended"]
    hl, hc = runs["hotspot-linear"], runs["hotspot-contended"]
    worse = n["contended_late_at_fill"] > n["linear_late_at_fill"]
    effects = n["effects"]
    moves = max(effects, key=lambda k: effects[k]["max_error_pct"])
    spreads = max(effects, key=lambda k: effects[k]["late_at_fill"])
    at_mix = n["contended_error_at_mix_pct"]
    return (
        "**Where the model breaks.** On the linear truth the model's boundary is within "
        f"{n['linear_max_error_pct']:.1f}% of the truth's crossing at every mix, as it must "
        "be (that truth has the model's form; it proves only that the study measures "
        "what it should). On the contended truth the boundary is a line through four "
        "points of a curve: it is off by "
        f"{n['contended_benchmarked_max_error_pct']:.1f}% at most at the four benchmarked "
        f"mixes and by {n['contended_worst_other_error_pct']:+.1f}% at "
        f"{round(100 * n['contended_worst_other_mix'])}% reads, a mix it was not benchmarked "
        "at (read-only load, such as a hot bin's dedicated servers get, is extrapolated). "
        f"At the workload's own mix the boundary is off by {at_mix:+.1f}%"
        f"{' (it allows more load than the truth carries)' if at_mix > 0 else ''}. A "
        "boundary cannot say more: the model is a median classifier (the benchmark labels "
        "a load by most server-periods), blind to the spread across servers and minutes. "
        f"At 1/{1 + overprovisioning:g} of the boundary, the fullest the controller fills a "
        f"server, {100 * n['contended_late_at_fill']:.1f}% of the contended truth's "
        f"server-periods pass 100 ms, against {100 * n['linear_late_at_fill']:.1f}% on the "
        f"linear truth ({'more' if worse else 'not more'}); at the boundary itself "
        f"{100 * n['contended_late_at_boundary']:.0f}% against "
        f"{100 * n['linear_late_at_boundary']:.0f}%. Effect by effect (the table above), "
        f"the boundary moves most with {moves} ({effects[moves]['max_error_pct']:.1f}% at "
        f"its worst mix) and filled servers are late most often with {spreads} "
        f"({100 * effects[spreads]['late_at_fill']:.1f}%). The controller, unchanged: "
        f"over the diurnal day {100 * dc['periods_over_fraction']:.1f}% of 20-s periods had "
        f"a p99 over 100 ms (linear truth: {100 * dl['periods_over_fraction']:.1f}%), the "
        f"highest percentile met in every 5-min window went from {dl['percentiles']['300']} "
        f"to {dc['percentiles']['300']}, for {dc['units']} server units against "
        f"{dl['units']}; in the hotspot, {100 * hc['periods_over_fraction']:.1f}% of periods "
        f"over (linear: {100 * hl['periods_over_fraction']:.1f}%), 5-min percentile "
        f"{hc['percentiles']['300']} (linear: {hl['percentiles']['300']}).\n"
    )


def check_truth(numbers: dict) -> dict[str, bool]:
    """The checks on the truth study. The first is the study's control (the model is
    exact on the truth of its own form); the second says the controller degrades on the
    contended truth but does not collapse: at most 10% of the day's 20-s periods over
    100 ms (a bar of ours; the paper reports no such figure, its servers were EC2's)."""
    over = numbers["runs"]["diurnal-contended"]["periods_over_fraction"]
    return {  # names without the run's numbers (truth.csv has them): stable across seeds
        f"linear truth: the model's boundary within {LINEAR_EXACT_MAX_PCT:g}% of the truth's "
        "crossing at every mix": numbers["linear_max_error_pct"] <= LINEAR_EXACT_MAX_PCT,
        f"contended truth: elastic 0.1's day has at most {100 * PERIODS_OVER_MAX_FRACTION:g}% "
        "of 20-s periods with p99 over 100 ms": over <= PERIODS_OVER_MAX_FRACTION,
    }


def _figure(linear: dict, contended: dict):
    fig, axes = plt.subplots(1, 2, figsize=(9, 4), sharey=False)
    for ax, entry, title in (
        (axes[0], linear, "linear truth"),
        (axes[1], contended, "contended truth"),
    ):
        error, model = entry["error"], entry["models"].steady
        crossing = error.crossings_rps()
        ax.scatter(
            crossing * error.read_fractions,
            crossing * (1 - error.read_fractions),
            label="truth's crossing",
            color="black",
            zorder=3,
        )
        gets = np.linspace(0, float(np.nanmax(crossing)) * 1.1, 50)
        boundary = np.log(model.threshold / (1 - model.threshold)) - model.intercept
        ax.plot(
            gets,
            (boundary - model.get_coefficient * gets) / model.put_coefficient,
            label="model's boundary",
        )
        ax.set_ylim(bottom=0)
        ax.set_xlabel("gets/s")
        ax.set_ylabel("puts/s")
        ax.set_title(title)
        ax.legend()
    fig.tight_layout()
    return fig

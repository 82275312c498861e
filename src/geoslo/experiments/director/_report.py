"""The SCADS Director's reproduction report (FAST 2011, §5.4, §6.2, §6.3) on the simulated
store: the models, the hotspot spike, the diurnal day against ideal and fixed allocations."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from geoslo.control.director import DirectorConfig, decide
from geoslo.control.director.example import example_state
from geoslo.experiments._parallel import run_jobs
from geoslo.experiments.director._allocations import Allocations
from geoslo.experiments.director._metrics import stabilised_s
from geoslo.experiments.director._overprovisioning import (
    OVERPROVISIONING_SWEEP,
    OVERPROVISIONING_SWEEP_QUICK,
    check_sweep,
    overprovisioning_section,
)
from geoslo.experiments.director._simulated import (
    LINEAR_TRUTH,
    DecisionMoves,
    Models,
    Scale,
    clock_units,
    decision_moves,
    diurnal_allocations,
    hot_bin,
    percentiles_met,
    run_diurnal,
    run_hotspot,
    server_units,
    train_models,
    view_ideal_servers,
)
from geoslo.experiments.director._truth_report import (
    CONTENDED_TRUTH,
    check_truth,
    run_summary,
    study_truths,
    truth_section,
)
from geoslo.experiments.director._workloads import DIURNAL_SOURCE
from geoslo.report import Report, load_paper_values, paper_row
from geoslo.sim.director import ServerPerformance, SimResult
from geoslo.sim.director._benchmarks import BENCHMARK_PERIODS, BENCHMARK_SERVERS

__all__ = [
    "reproduce",
    "check_done",
    "models_section",
    "unit_savings",
    "unit_gap",
    "gap_text",
    "diurnal_rows",
    "PAPER_VALUES",
]

PAPER_VALUES = Path(__file__).parent / "data" / "paper.json"
THRESHOLD_MS = 100.0
SERVING_OVER_IDEAL_MAX = 1.2  # the bar for elastic 0.1 against the ideal
STANDBYS = DirectorConfig().standbys  # §5.7: the runs keep the paper's two standbys

INTRO = (
    "The SCADS Director (Trushkowsky et al., FAST 2011) keeps a binned key-value store under "
    "a 99th-percentile latency SLO while leasing as few servers as it can: every 20 s it "
    "predicts, from the per-bin workload and a steady-state model, which servers are "
    "overloaded or underloaded, then moves, replicates and coalesces bins and adds and "
    "removes servers. Everything below runs on geoslo's simulated store (servers with a "
    "log-normal latency inflated by their load, environmental noise, copies that load their "
    "target); the director sees only the sampled histograms (2% of gets, 40% of puts). The "
    "'paper' column quotes the paper; ours is computed."
)

DIFFERENCES = """\
* **The servers are simulated**, calibrated to the paper's description (§2.1: p99 of a few
  tens of ms at moderate load, a crossing of 100 ms at a few thousand req/s per server), not
  to EC2's measured behaviour; noise is independent per server (capacity jitter and rare
  hiccups that make 5% of a server's requests slow for a period), and the work is linear in
  get + 3 put, the model's own form; the section on a truth the model does not assume adds
  write contention, lasting differences between servers and slowdowns lasting minutes.
* **The diurnal day is NASA's, not Ebates'.** The paper replays an Ebates.com trace we do
  not have; we take a weekday of the NASA Kennedy Space Center trace,
  whose day-night swing is deeper (night at 14% of the peak); its per-minute rates are
  smoothed over an hour, since a 60k req/s site does not show the relative noise of a
  1 req/s one (the trace's own) — its shape, not its noise, is what we replay.
* **Gets go to 2 of a bin's replicas** (all of them while it has 2, as in §6.1); this is how
  extra replicas of a hot bin can share its load. The hotspot's extra requests are reads.
* **Servers are released at the end of the hour they are paid for.** An emptied server stays
  as an extra empty server until then (the paper scales a "server release time"), so the
  controller can reuse it instead of leasing another. A lease is charged in whole hours
  from its start, as EC2 bills an instance; a lease that straddles a clock hour's edge is
  one unit, not two.
* **Choices the paper leaves open:** a server is underloaded below 0.9 of the model's
  boundary and coalescing fills targets up to that; an overloaded server sheds the smallest
  bin that relieves it (else its hottest); boot delay 120 s; bins of 40 MB.
"""


def _job(
    run,
    scale: Scale,
    models: Models,
    overprovisioning: float,
    replicas: int,
    perf: ServerPerformance = LINEAR_TRUTH,
):
    """One simulated run (``run_diurnal`` or ``run_hotspot``, on the truth ``perf``) on a
    worker process: its result, the data each decision moved and, for the diurnal day,
    per charge interval the ideal packing of what the controller saw (with its
    overprovisioning)."""
    result, loop = run(scale, models, overprovisioning, replicas, perf)
    seen = None
    if run is run_diurnal:
        seen = int(view_ideal_servers(loop, models, scale, overprovisioning).sum())
    return result, decision_moves(loop), seen


def reproduce(out_dir: Path, quick: bool = False, seed: int = 0, workers: int = 2) -> Path:
    """Run every experiment and write the report; the path of index.md."""
    started = time.monotonic()
    scale = Scale.quick() if quick else Scale()
    scale = replace(scale, seed=seed)
    paper = load_paper_values(PAPER_VALUES)
    models = train_models(LINEAR_TRUTH, seed)
    study = study_truths(train_models, scale.read_fraction, 0.1, seed)
    contended = next(e["models"] for e in study if e["name"] == "contended (all three)")
    sweep = OVERPROVISIONING_SWEEP_QUICK if quick else OVERPROVISIONING_SWEEP
    jobs = _jobs(scale, models, contended, sweep)
    done = dict(
        zip(jobs, run_jobs(_job, list(jobs.values()), workers, "director runs"), strict=True)
    )
    runs = {name: result for name, (result, _, _) in done.items()}
    moves = {name: moved for name, (_, moved, _) in done.items()}
    seen = {name: ideal for name, (_, _, ideal) in done.items()}
    report = Report("SCADS Director: elastic scaling under a p99 SLO", INTRO)
    models_section(
        report,
        models,
        f"Benchmarks of a fleet of simulated servers ({BENCHMARK_SERVERS} servers, "
        f"{BENCHMARK_PERIODS // BENCHMARK_SERVERS} noise periods per load) "
        "at the four read/write mixes give the load at which most server-periods' p99 "
        "crosses 100 ms; a logistic regression on (get rate, put rate) "
        "separates the loads below from those above. Copies at several rates into servers at "
        "several loads give the copy-rate factor; a linear regression with quadratic terms "
        "fits it.",
    )
    moved = _hotspot_section(report, paper, scale, runs, moves["hotspot"])
    allocation = diurnal_allocations(scale, models)
    summary = _diurnal_section(report, paper, scale, allocation, runs)
    summary["overprovisioning"] = overprovisioning_section(
        report, paper, [_day_summary(runs[_diurnal(f)], scale, allocation, f) for f in sweep]
    )
    summary["gap"] = unit_gap(scale, models, runs["diurnal-0.1"], summary, seen["diurnal-0.1"])
    summary["hotspot_data_moved"] = moved
    summary["truth"] = truth_section(
        report, study, _truth_runs(scale, models, contended, runs), scale.read_fraction, 0.1
    )
    summary["decide_ms_1000_servers"] = _decide_timing(report, paper)
    checks = check_done(summary) | check_truth(summary["truth"])
    checks |= check_sweep(summary["overprovisioning"])
    report.checks(checks)
    report.section("What differs from the paper, and why", DIFFERENCES + gap_text(summary["gap"]))
    report.text(
        f"Seed {seed}; {'quick' if quick else 'full'} scale; "
        f"{time.monotonic() - started:.0f} s on this machine."
    )
    report.data("summary", summary)
    return report.write(out_dir)


def _diurnal(overprovisioning: float) -> str:
    """The name of the linear truth's 2-replica diurnal run at ``overprovisioning``."""
    return f"diurnal-{overprovisioning:g}"


def _jobs(
    scale: Scale, models: Models, contended: Models, sweep: tuple[float, ...]
) -> dict[str, tuple]:
    """Every simulated run of the report, by name: the sweep's days (§6.3) join the fixed
    runs, a factor the fixed runs already have (0.1, 0.3) running once."""
    jobs = {
        _diurnal(0.1): (run_diurnal, scale, models, 0.1, 2),
        _diurnal(0.3): (run_diurnal, scale, models, 0.3, 2),
        "diurnal-0.1-contended": (run_diurnal, scale, contended, 0.1, 2, CONTENDED_TRUTH),
        "diurnal-0.1-single": (run_diurnal, scale, models, 0.1, 1),
        "hotspot": (run_hotspot, scale, models, 0.1, 2),
        "hotspot-single": (run_hotspot, scale, models, 0.1, 1),
        "hotspot-contended": (run_hotspot, scale, contended, 0.1, 2, CONTENDED_TRUTH),
    }
    for factor in sweep:
        jobs.setdefault(_diurnal(factor), (run_diurnal, scale, models, factor, 2))
    return jobs


def _day_summary(
    result: SimResult, scale: Scale, allocation: Allocations, overprovisioning: float | None = None
) -> dict:
    """``run_summary`` of a diurnal day against the ideal ``allocation``, with the units
    the report's figures need (and the factor, for the sweep)."""
    intervals = allocation.intervals
    summary = run_summary(
        result,
        server_units(result, scale.charge_interval_s),
        allocation.units()["ideal"],
        STANDBYS * intervals,
    )
    summary |= {"ideal_units": allocation.units()["ideal"], "standby_units": STANDBYS * intervals}
    return (
        summary if overprovisioning is None else {"overprovisioning": overprovisioning, **summary}
    )


def _truth_runs(scale: Scale, linear: Models, contended: Models, runs: dict) -> dict:
    """SLO and cost of elastic 0.1 and the hotspot on the linear and the contended truth,
    each diurnal day against the ideal packed under its own truth's model."""
    interval_s = scale.charge_interval_s
    out = {}
    for truth, models, suffix in (("linear", linear, ""), ("contended", contended, "-contended")):
        allocation = diurnal_allocations(scale, models)
        out[f"diurnal-{truth}"] = _day_summary(runs[f"diurnal-0.1{suffix}"], scale, allocation)
        spike = runs["hotspot" + suffix]
        out[f"hotspot-{truth}"] = run_summary(spike, server_units(spike, interval_s), 0, 0)
    return out


def models_section(report: Report, models: Models, how: str) -> None:
    """§5.4's models: measured crossings beside the fitted boundary, and the copy factor."""
    report.section("Models (§5.4)", how)
    steady = models.steady
    busy = 0.6 * float(np.min(models.crossings_rps))
    rows = [
        {
            "read/write mix": f"{round(f * 100)}/{round((1 - f) * 100)}",
            "measured crossing (req/s)": round(float(c)),
            "model's boundary (req/s)": round(steady.capacity_rps(f)),
        }
        for f, c in zip(models.mixes, models.crossings_rps, strict=True)
    ]
    report.table("steady_state", rows, caption="Steady-state model (Fig. 6)")
    report.text(
        f"Logistic model: intercept {steady.intercept:.3g}, get {steady.get_coefficient:.3g} "
        f"per req/s, put {steady.put_coefficient:.3g} per req/s (a put costs "
        f"{steady.put_coefficient / steady.get_coefficient:.1f} gets). Copy-rate factor at "
        f"4 MB/s into an idle server {models.copy.factor(4e6, 0, 0):.2f}, into one at "
        f"{busy:,.0f} gets/s (60% of the lowest crossing) "
        f"{models.copy.factor(4e6, busy, busy * 0.05):.2f}."
    )


def _hotspot_section(
    report: Report, paper: dict, scale: Scale, runs: dict, moves: list[DecisionMoves]
) -> dict:
    result = runs["hotspot"]
    single = runs["hotspot-single"]
    shape = scale.hotspot
    report.section(
        "Hotspot spike (§6.2, Figs. 7-8)",
        f"A flat {scale.hotspot_flat_rps:,.0f} req/s; from minute {shape.flat_s // 60} the "
        f"aggregate doubles linearly over {shape.ramp_s // 60} minutes, every extra request "
        "reading one key. The director replicates its bin on dedicated servers, standbys "
        "first.",
    )
    extra = int(result.replicas_of_hot_bin.max()) - int(result.replicas_of_hot_bin[0])
    stable_min = stabilised_s(result.p99_ms, shape.flat_s, 20, THRESHOLD_MS) / 60
    met = percentiles_met(result)
    met_single = percentiles_met(single)
    rows = [
        paper_row(paper, "hotspot_extra_replicas", extra, "extra replicas of the hot bin"),
        paper_row(
            paper,
            "hotspot_stabilise_min",
            round(stable_min, 1),
            "minutes from the spike's start until the p99 stays under 100 ms",
        ),
    ]
    for window, key in ((20, "20s"), (60, "1min"), (300, "5min")):
        rows.append(
            paper_row(
                paper,
                f"hotspot_percentile_{key}",
                met[window]["percentile"],
                f"highest percentile met, {key} windows, 2 replicas",
            )
        )
    for window, key in ((20, "20s"), (60, "1min"), (300, "5min")):
        rows.append(
            paper_row(
                paper,
                f"hotspot_percentile_{key}_single",
                met_single[window]["percentile"],
                f"highest percentile met, {key} windows, 1 replica",
            )
        )
    report.comparison("hotspot", rows)
    report.figure(
        "hotspot",
        _hotspot_figure(result, scale),
        "Top: request rates. Middle: p99 per 20 s. Bottom: servers and hot-bin replicas.",
    )
    return _hotspot_moves(report, scale, moves)


def _hotspot_moves(report: Report, scale: Scale, moves: list[DecisionMoves]) -> dict:
    """The data each decision moved from the spike's start, and the hot bin's part of it
    (Algorithm 1 puts a hot bin's replicas on dedicated servers, §5.3)."""
    hot, start_s = hot_bin(scale), scale.hotspot.flat_s
    rows = [
        {
            "minute": round(m.time_s / 60, 2),
            "bins copied or moved": len(m.bins),
            "data moved (MB)": round(m.moved_bytes / 1e6, 1),
            "of it the hot bin (MB)": round(m.bins.count(hot) * scale.bin_bytes / 1e6, 1),
        }
        for m in moves
        if m.time_s >= start_s and m.bins
    ]
    moved = {
        "decisions": len(rows),
        "total_mb": sum(r["data moved (MB)"] for r in rows),
        "hot_bin_mb": sum(r["of it the hot bin (MB)"] for r in rows),
        "hot_bin_copies": sum(m.bins.count(hot) for m in moves if m.time_s >= start_s),
        "largest_decision_mb": max((r["data moved (MB)"] for r in rows), default=0.0),
    }
    report.text(
        f"**Data moved per decision.** From the spike's start, {moved['decisions']} "
        f"decisions moved {moved['total_mb']:.1f} MB, {moved['hot_bin_mb']:.1f} MB of it "
        f"the hot bin's ({moved['hot_bin_copies']} copies of a "
        f"{scale.bin_bytes / 1e6:.1f} MB bin); the largest single decision moved "
        f"{moved['largest_decision_mb']:.1f} MB. A replica of the hot bin that overloads the "
        "server it shares moves to a dedicated server (Algorithm 1, line 5) instead of that "
        "server's other bins moving away; the other bins were moved by best-fit rebalancing "
        "and coalescing (Algorithm 1, lines 6-19) as the bin's load grew and its replicas "
        "moved."
    )
    report.table("hotspot_moves", rows, caption="Decisions that moved data, from the spike on")
    return moved


def _hotspot_figure(result: SimResult, scale: Scale):
    fig, axes = plt.subplots(3, 1, figsize=(8, 7), sharex=True)
    minutes = np.arange(len(result.gets)) / 60
    axes[0].plot(minutes, result.gets, label="gets/s")
    axes[0].set_ylabel("req/s")
    periods = (np.arange(len(result.p99_ms)) + 1) * 20 / 60
    axes[1].semilogy(periods, result.p99_ms, label="p99")
    axes[1].axhline(THRESHOLD_MS, color="red", linestyle="--", label="threshold")
    axes[1].set_ylabel("ms")
    axes[1].legend()
    axes[2].plot(minutes, result.servers_leased, label="servers leased")
    axes[2].plot(minutes, result.replicas_of_hot_bin, label="hot-bin replicas")
    axes[2].set_xlabel("minutes")
    axes[2].legend()
    fig.tight_layout()
    return fig


def _diurnal_section(report, paper, scale: Scale, allocation: Allocations, runs: dict) -> dict:
    units = allocation.units()
    intervals = allocation.intervals
    name, day = DIURNAL_SOURCE
    report.section(
        "Diurnal workload (§6.3, Figs. 9-10)",
        f"{scale.diurnal_s / 3600:g} hours of the {name} trace (day {day}) scaled to a peak of "
        f"{scale.diurnal_peak_rps:,.0f} req/s; charge interval {scale.charge_interval_s / 60:g} "
        "min. Ideal: for every interval, the fewest servers that hold its peak (moving data "
        "free and instant). Fixed-100%: the ideal's maximum all day. Fixed-70%: servers "
        "filled to 70% of the model's capacity at the peak. Units are charge intervals "
        "paid, each lease in whole intervals from its start. Serving units are units "
        "minus the two standbys per interval, as the paper counts; 'held data' counts each "
        "server in each interval in which it held data.",
    )
    rows = []
    summary = {"ideal_units": units["ideal"], "intervals": intervals, "standbys": STANDBYS}
    for label in ("ideal", "fixed-100%", "fixed-70%"):
        rows.append(
            {
                "policy": label,
                "units": units[label],
                "serving units": units[label],
                "held data": units[label],
            }
        )
    for key, label in (
        ("diurnal-0.1", "elastic 0.1"),
        ("diurnal-0.3", "elastic 0.3"),
        ("diurnal-0.1-single", "elastic 0.1, 1 replica"),
    ):
        result = runs[key]
        total = server_units(result, scale.charge_interval_s)
        serving = total - STANDBYS * intervals
        rows.append(
            {
                "policy": label,
                "units": total,
                "serving units": serving,
                "held data": result.serving_units,
            }
        )
        summary[key] = {
            "units": total,
            "serving": serving,
            "held": result.serving_units,
            "percentiles": {str(w): v for w, v in percentiles_met(result).items()},
        }
    report.table("units", rows, caption="Server units over the day")
    elastic = summary["diurnal-0.1"]
    summary |= unit_savings(elastic["units"], elastic["serving"], units)
    summary["held_over_ideal"] = elastic["held"] / units["ideal"]
    report.comparison(
        "diurnal",
        [
            paper_row(paper, "diurnal_ideal_units", units["ideal"], "ideal allocation"),
            paper_row(paper, "diurnal_elastic_01_units", elastic["units"], "elastic 0.1, total"),
            paper_row(
                paper,
                "diurnal_elastic_01_serving_units",
                elastic["serving"],
                "elastic 0.1, serving",
            ),
            *diurnal_rows(
                paper,
                summary,
                f"servers that held data: {100 * (summary['held_over_ideal'] - 1):.1f}% over",
            ),
        ],
    )
    percentile_rows = [
        {
            "policy": label,
            **{f"{w} s": summary[key]["percentiles"][str(w)]["percentile"] for w in (20, 60, 300)},
        }
        for key, label in (
            ("diurnal-0.1", "elastic 0.1"),
            ("diurnal-0.3", "elastic 0.3"),
            ("diurnal-0.1-single", "elastic 0.1, 1 replica"),
        )
    ]
    report.table(
        "percentiles",
        percentile_rows,
        caption="Highest percentile with no window over 100 ms (Fig. 10)",
    )
    report.figure(
        "diurnal",
        _diurnal_figure(runs, allocation, scale),
        "Top: workload. Bottom: servers per charge interval (Fig. 9).",
    )
    return summary


def unit_savings(total: int, serving: int, units: dict[str, int]) -> dict[str, float]:
    """§6.3's comparison: serving units against the ideal, total units against the fixed
    allocations."""
    return {
        "serving_over_ideal": serving / units["ideal"],
        "saving_vs_fixed100": 1 - total / units["fixed-100%"],
        "saving_vs_fixed70": 1 - total / units["fixed-70%"],
    }


def unit_gap(
    scale: Scale,
    models: Models,
    result: SimResult,
    summary: dict,
    seen: int,
    overprovisioning: float = 0.1,
) -> dict:
    """Where elastic 0.1's serving units above the ideal come from, in units that add up:
    overprovisioning (the ideal of 1.1 x the load), the controller's view (the ideal of the
    smoothed, sampled histograms it decided on, §5.5), its packing (servers that held data
    against that), servers that held no data beyond the standbys (booting, or emptied and
    kept to the end of their paid interval); and, for comparison, the leases counted by
    the clock intervals they touch."""
    interval_s, intervals = scale.charge_interval_s, summary["intervals"]
    standby_units = summary["standbys"] * intervals
    load_factor = 1.0 + overprovisioning
    overprovisioned = diurnal_allocations(scale, models, load_factor=load_factor)
    overprovisioned = overprovisioned.units()["ideal"]
    clock = clock_units(result, interval_s, scale.diurnal_s)
    held = summary["diurnal-0.1"]["held"]
    idle = np.asarray(result.servers_leased) - np.asarray(result.servers_serving)
    return {
        "load_factor": load_factor,
        "ideal": summary["ideal_units"],
        "overprovisioning": overprovisioned - summary["ideal_units"],
        "controller_view": seen - overprovisioned,
        "packing": held - seen,
        "no_data_beyond_standbys": summary["diurnal-0.1"]["units"] - held - standby_units,
        "clock_units": clock,
        "serving": summary["diurnal-0.1"]["serving"],
        "standby_units": standby_units,
        "idle_units_beyond_standbys": float(idle.sum()) / interval_s - standby_units,
        "copied_gb": result.copied_bytes / 1e9,
        "moves": int(result.actions.get("move", 0)),
    }


def gap_text(gap: dict) -> str:
    """The report's account of ``unit_gap``, every number from the run."""
    extra = gap["serving"] - gap["ideal"]
    return (
        f"* **Where elastic 0.1's {extra} serving units above the ideal's {gap['ideal']} come "
        f"from** (this run; the terms add up): overprovisioning {gap['overprovisioning']:+d} "
        f"(the ideal packing of {gap['load_factor']:g} x the load: §5.5's safety buffer, by "
        "design); the "
        f"controller's view {gap['controller_view']:+d} (the ideal packing, per charge "
        "interval, of the smoothed histograms the controller decided on, against that of the "
        "true load: 2% of gets sampled, and smoothing that rises with α_up = 0.9 and falls "
        "with α_down = 0.1 follows the sampling noise up more than down, §5.5); packing "
        f"{gap['packing']:+d} (servers that held data against that ideal of the view: what "
        "best fit, coalescing only whole servers and under 0.9 of the boundary, distinct "
        "replicas and churn cost); paid units in which a server held no data, less the "
        f"standbys' {gap['standby_units']}: {gap['no_data_beyond_standbys']:+d} (booting "
        "servers and servers emptied and kept to the end of the interval they paid for add "
        "to it; a standby that took data within an interval counts there as holding data, "
        f"which takes from it; in time, {gap['idle_units_beyond_standbys']:.1f} "
        "server-intervals idle beyond the "
        "standbys over the day). Units are paid intervals, each lease's from its start; "
        f"counted by clock intervals touched, the same leases make {gap['clock_units']} "
        "units. The standbys are outside the serving count, as in §6.3. Data moved "
        f"over the day: {gap['copied_gb']:.1f} GB in {gap['moves']} bin moves.\n"
    )


def diurnal_rows(paper: dict, summary: dict, note: str = "") -> list[dict]:
    """The paper-beside-ours rows of ``unit_savings``."""
    return [
        paper_row(
            paper,
            "diurnal_serving_over_ideal_pct",
            round(100 * (summary["serving_over_ideal"] - 1), 1),
            "serving units over the ideal",
            note,
        ),
        paper_row(
            paper,
            "diurnal_saving_vs_fixed100_pct",
            round(100 * summary["saving_vs_fixed100"], 1),
            "saving vs fixed-100%",
        ),
        paper_row(
            paper,
            "diurnal_saving_vs_fixed70_pct",
            round(100 * summary["saving_vs_fixed70"], 1),
            "saving vs fixed-70%",
        ),
    ]


def _diurnal_figure(runs, allocation, scale: Scale):
    fig, axes = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    result = runs["diurnal-0.1"]
    hours = np.arange(len(result.gets)) / 3600
    axes[0].plot(hours, result.gets)
    axes[0].set_ylabel("gets/s")
    edges = np.arange(allocation.intervals + 1) * scale.charge_interval_s / 3600
    axes[1].stairs(allocation.ideal_servers, edges, label="ideal")
    axes[1].axhline(allocation.fixed_100_servers, linestyle="--", label="fixed-100%")
    axes[1].axhline(allocation.fixed_70_servers, linestyle=":", label="fixed-70%")
    for key, label in (("diurnal-0.1", "elastic 0.1"), ("diurnal-0.3", "elastic 0.3")):
        run = runs[key]
        axes[1].plot(hours, run.servers_leased, label=label, linewidth=0.8)
    axes[1].set_xlabel("hours")
    axes[1].set_ylabel("servers")
    axes[1].legend()
    fig.tight_layout()
    return fig


def _decide_timing(report: Report, paper: dict) -> float:
    """One decision for 1,000 servers and 10,000 bins (the benchmark prints more)."""
    state, model, _, config = example_state(1000, 10_000, 0)
    times = []
    for _ in range(5):
        started = time.perf_counter()
        decide(state, model, config)
        times.append((time.perf_counter() - started) * 1e3)
    median = float(np.median(times))
    report.section("Decision time (§5.3)")
    report.comparison(
        "decide",
        [
            paper_row(
                paper,
                "controller_servers_inspected",
                "1,000 servers, 10,000 bins",
                "cluster inspected per decision",
                f"median {median:.0f} ms (a few s in the paper for 40 servers)",
            )
        ],
    )
    return median


def check_done(summary: dict) -> dict[str, bool]:
    """The issue's measurable checks on a reproduction's summary. Serving units are counted
    as §6.3 counts them, every leased server minus the standbys (the report's tables give
    the ratio, and that of the servers that held data, which is lower: a server booting or
    emptied for release holds none). A check's name holds no number of the run, so that
    it is the same check on every seed."""
    units = (
        "elastic 0.1 serving units (paid minus standbys, as §6.3 counts) <= "
        f"{SERVING_OVER_IDEAL_MAX:g} x ideal"
    )
    return {
        units: summary["serving_over_ideal"] <= SERVING_OVER_IDEAL_MAX,
        "elastic 0.1 saves against fixed-100%": summary["saving_vs_fixed100"] > 0,
        "elastic 0.1 saves against fixed-70%": summary["saving_vs_fixed70"] > 0,
    }  # the decision time is reported, not checked: it measures the machine's load too

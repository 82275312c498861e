"""The report of the SCADS Director on the live cluster (FAST 2011 §5.4, §6.2, §6.3):
models trained on real Redis, the spike with the director and, for contrast, without, and
the diurnal day replayed compressed against the ideal and fixed allocations."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from geoslo.control.director import replica_loads
from geoslo.experiments.director._allocations import Allocations, allocations
from geoslo.experiments.director._live import (
    LiveRun,
    LiveSettings,
    run_live_diurnal,
    run_live_hotspot,
    train_live_models,
)
from geoslo.experiments.director._report import (
    PAPER_VALUES,
    diurnal_rows,
    models_section,
    unit_savings,
)
from geoslo.experiments.director._workloads import DIURNAL_SOURCE
from geoslo.live.director import initial_placement
from geoslo.report import Report, load_paper_values, paper_row

__all__ = ["live_report", "check_live", "initial_layout_headroom", "live_allocations"]

INTRO = (
    "The SCADS Director against real processes on this machine: Redis servers started by "
    "geoslo, each request carrying an exponential service time, bins copied between them "
    "at a throttled rate while puts keep arriving (docs/director-live.md). The models are "
    "trained by benchmarks of these servers; the director sees only the sampled per-bin "
    "histograms and ticks every second. No simulator is involved: every latency below was "
    "measured. The 'paper' column quotes the paper; ours is measured."
)

DIFFERENCES = """\
* **Scaled to 2 cores.** A request costs 5 ms of a server (about 200 req/s), so the spike
  is a few hundred gets per second, which the client's process issues on time (its
  lateness is reported). The paper's servers were EC2 instances at thousands of req/s.
* **20 bins, 10,000 keys, 4 data servers and 2 standbys at start.** The paper's cluster
  was larger; bins per server (5-10) are the paper's.
* **2 of 10 gets are sampled** (20%, not the paper's 2%): at our rates, 2% would leave
  each bin a sample or two per period.
* **The spike's extra gets go to one key of a cold bin; the director replicates while the
  ramp grows**, so the p99 may never cross the threshold. The run without the director
  shows what the spike does to the same cluster left alone.
* **Servers boot in 5 s.** In the hotspot they are released when emptied (no charge
  interval); in the diurnal replay at the end of the (scaled) interval they paid for.
* **The diurnal day is NASA's, replayed 60x faster** (the paper: Ebates', 12x), so the
  charge interval is a minute and the period 5 s; each interval is 12 periods, where the
  paper's 5-minute interval at 20 s periods was 15. Overprovisioning 0.3 runs only in
  simulation (`geoslo reproduce director`).
"""


def live_report(settings: LiveSettings, out_dir: Path, progress=print) -> Path:
    """Train, run the spike with and without the director and the diurnal day, write the
    report; the path of index.md."""
    started = time.monotonic()
    out_dir = Path(out_dir)
    run_dir = out_dir / "run"
    models = train_live_models(settings, run_dir, progress)
    directed = run_live_hotspot(settings, run_dir / "director", models, progress)
    fixed = run_live_hotspot(settings, run_dir / "fixed", models, progress, director=False)
    diurnal = run_live_diurnal(settings, run_dir / "diurnal", models, progress)
    paper = load_paper_values(PAPER_VALUES)
    report = Report("SCADS Director on real Redis: hotspot and diurnal day", INTRO)
    models_section(
        report,
        models,
        "Benchmarks of one live server (all bins, one replica) at each read/write mix give "
        "the total rate at which its get p99 crosses 100 ms; a logistic regression on (get "
        "rate, put rate) separates the loads below from those above. Copies at 1-8 MB/s into "
        "an idle and a busy server give the copy-rate factor.",
    )
    summary = _hotspot_section(report, paper, directed, fixed)
    summary["diurnal"] = _diurnal_section(report, paper, diurnal)
    checks = check_live(directed)
    report.checks(checks)
    report.section("What differs from the paper, and why", DIFFERENCES)
    report.text(
        f"Seed {settings.seed}; periods of {settings.period_s:g} s; "
        f"{time.monotonic() - started:.0f} s on this machine."
    )
    report.data("summary", summary)
    return report.write(out_dir)


def _hotspot_section(report: Report, paper: dict, directed: LiveRun, fixed: LiveRun):
    settings = directed.settings
    shape = settings.shape
    windows = sorted(directed.percentiles_met())
    labels = [f"{w} s" for w in windows]
    report.section(
        "Hotspot spike (§6.2, Figs. 7-8)",
        f"{settings.flat_gets_rps:g} gets/s over Zipf keys ({settings.read_fraction:.0%} of "
        f"requests are gets); from {shape.flat_s} s, over {shape.ramp_s} s, as many extra "
        f"gets again onto one key of bin {directed.hot_bin}; {shape.duration_s} s in all. "
        f"Percentile windows scale with the period ({', '.join(labels)} stand for the "
        "paper's 20 s, 1 min and 5 min).",
    )
    met = directed.percentiles_met()
    paper_keys = ("20s", "1min", "5min")
    rows = [
        paper_row(paper, "hotspot_extra_replicas", directed.extra_replicas, "extra replicas"),
        paper_row(
            paper,
            "hotspot_stabilise_min",
            round(directed.stabilised_s / 60, 2),
            "minutes from the spike's start until the p99 stays under 100 ms",
            f"{directed.stabilised_s / settings.period_s:.0f} periods",
        ),
    ]
    for window, key in zip(windows, paper_keys, strict=True):
        rows.append(
            paper_row(
                paper,
                f"hotspot_percentile_{key}",
                met[window]["percentile"],
                f"highest percentile met, {window} s windows",
            )
        )
    report.comparison("hotspot", rows)
    runs = {"director": directed, "no director": fixed}
    report.table(
        "runs",
        [_run_row(name, run) for name, run in runs.items()],
        caption="Both runs on the same load; p99 per period of every get, since the spike",
    )
    report.text(
        "Headroom of the busiest server of the initial layout at the hold's measured rates, "
        f"by the trained model: {initial_layout_headroom(directed):.2f} (below 1: the layout "
        "cannot hold the spike)."
    )
    report.figure(
        "hotspot-live",
        _figure(directed, fixed),
        "Top: gets per second. Middle: p99 per period. Bottom: servers in use and hot-bin "
        "replicas, with the director.",
    )
    return {
        "crossings_rps": directed.models.crossings_rps.tolist(),
        "runs": {name: _run_row(name, run) for name, run in runs.items()},
        "percentiles": {str(w): v for w, v in met.items()},
        "initial_layout_headroom": initial_layout_headroom(directed),
    }


def _diurnal_section(report: Report, paper: dict, run: LiveRun) -> dict:
    settings = run.settings
    interval_s = settings.diurnal_charge_interval_s
    name, day = DIURNAL_SOURCE
    report.section(
        "Diurnal day, scaled replay (§6.3, Figs. 9-10)",
        f"The {name} trace's day {day} replayed in {run.duration_s / 60:g} minutes "
        f"({86_400 / run.duration_s:g}x faster; the paper replayed its day 12x faster), peak "
        f"{settings.diurnal_peak_gets_rps:g} gets/s, periods of {run.period_s:g} s, a charge "
        f"interval of {interval_s} s standing for the hour. Ideal, fixed-100% and fixed-70% "
        "are computed from the per-bin rates the load generator issued, at each interval's "
        "busiest period, with the trained model. Serving units are units minus the 2 "
        "standbys per interval, as the paper counts.",
    )
    allocation = live_allocations(run, interval_s)
    units = allocation.units()
    total = run.units(interval_s)
    serving = total - 2 * allocation.intervals
    report.table(
        "diurnal_units",
        [{"policy": k, "units": v} for k, v in units.items()]
        + [
            {"policy": "elastic 0.1 (live)", "units": total},
            {"policy": "elastic 0.1 (live), serving", "units": serving},
        ],
        caption="Server units over the replayed day",
    )
    summary = {
        "units": units | {"elastic": total, "elastic serving": serving},
        **unit_savings(total, serving, units),
        "percentiles": {str(w): v for w, v in run.percentiles_met().items()},
        "row": _run_row("diurnal", run),
    }
    report.comparison("diurnal_live", diurnal_rows(paper, summary))
    report.table("diurnal_run", [summary["row"]], caption="The replay's latency and actions")
    report.figure(
        "diurnal-live",
        _diurnal_figure(run, allocation, interval_s),
        "Top: gets per second. Bottom: servers in use against the ideal and fixed allocations.",
    )
    return summary


def live_allocations(run: LiveRun, interval_s: float) -> Allocations:
    """Ideal and fixed allocations (§6.3) from the measured per-bin rates: per charge
    interval, its busiest period's."""
    gets, puts = run.measured_rates()
    per_interval = max(1, round(interval_s / run.period_s))
    count = -(-len(gets) // per_interval)
    peak_get, peak_put = [], []
    for k in range(count):
        rows = slice(k * per_interval, (k + 1) * per_interval)
        busiest = int(np.argmax(gets[rows].sum(1) + puts[rows].sum(1)))
        peak_get.append(gets[rows][busiest])
        peak_put.append(puts[rows][busiest])
    config = replace(run.settings.director_config(run.period_s), overprovisioning=0.0)
    return allocations(np.asarray(peak_get), np.asarray(peak_put), run.models.steady, config)


def _diurnal_figure(run: LiveRun, allocation: Allocations, interval_s: float):
    fig, axes = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    load = run.load
    axes[0].plot(np.bincount(np.floor(load.issue_s[~load.is_put]).astype(int)))
    axes[0].set_ylabel("gets/s")
    edges = np.arange(allocation.intervals + 1) * interval_s
    axes[1].stairs(allocation.ideal_servers, edges, label="ideal")
    axes[1].axhline(allocation.fixed_100_servers, linestyle="--", label="fixed-100%")
    axes[1].axhline(allocation.fixed_70_servers, linestyle=":", label="fixed-70%")
    axes[1].step(run.tick_s, run.server_counts, where="post", label="elastic 0.1 (live)")
    axes[1].set_xlabel("seconds")
    axes[1].set_ylabel("servers")
    axes[1].legend()
    fig.tight_layout()
    return fig


def _run_row(name: str, run: LiveRun) -> dict:
    threshold = run.settings.threshold_ms
    since = run.period_end_s > (run.settings.shape.flat_s if run.hot_bin is not None else 0)
    met = run.percentiles_met()
    hot = {"hot-bin replicas (max)": int(run.hot_replicas.max())} if run.hot_bin is not None else {}
    return {
        "run": name,
        **hot,
        "servers (max)": int(run.server_counts.max()),
        "periods over 100 ms": int(np.sum(run.p99_ms[since] > threshold)),
        "highest p99 (ms)": round(float(np.nanmax(run.p99_ms[since])), 1),
        **{f"percentile met, {w} s": met[w]["percentile"] or "< 50" for w in sorted(met)},
        "actions": sum(run.actions.values()),
        "failed actions": run.failed_actions,
        "load generator late p99 (ms)": round(run.load.late_p99_ms, 1),
    }


def initial_layout_headroom(run: LiveRun) -> float:
    """By the trained model, how far the busiest server of the starting layout is from its
    boundary at the hold's measured per-bin rates (below 1: overloaded)."""
    settings, load = run.settings, run.load
    config = settings.cluster_config()
    hold = load.issue_s >= settings.shape.flat_s + settings.shape.ramp_s
    seconds = settings.shape.hold_s
    get = np.bincount(load.bin[hold & ~load.is_put], minlength=config.bins) / seconds
    put = np.bincount(load.bin[hold & load.is_put], minlength=config.bins) / seconds
    get, put = replica_loads(get, put, np.full(config.bins, config.replicas), config.read_fanout)
    held = [[] for _ in range(config.servers)]
    for b, holders in enumerate(initial_placement(config.bins, config.servers, config.replicas)):
        for server in holders:
            held[server].append(b)
    model = run.models.steady
    return min(model.headroom(get[bins].sum(), put[bins].sum()) for bins in held)


def check_live(run: LiveRun) -> dict[str, bool]:
    """The issue's checks on a live hotspot run (the director's)."""
    settings = run.settings
    threshold = settings.threshold_ms
    last = run.period_end_s > settings.shape.duration_s - settings.shape.hold_s / 2
    return {
        "the starting layout cannot hold the spike (model headroom < 1)": (
            initial_layout_headroom(run) < 1.0
        ),
        "the hot bin gets extra replicas": run.extra_replicas >= 1,
        "the p99 stays under 100 ms from 15 periods after the spike began (5 min at 20 s)": (
            run.stabilised_s <= 15 * settings.period_s
        ),
        "the p99 is under 100 ms in every period of the hold's second half": bool(
            np.all(run.p99_ms[last] <= threshold)
        ),
        "no action failed": run.failed_actions == 0,
    }


def _figure(directed: LiveRun, fixed: LiveRun):
    fig, axes = plt.subplots(3, 1, figsize=(8, 7), sharex=True)
    load = directed.load
    seconds = np.floor(load.issue_s[~load.is_put]).astype(int)
    axes[0].plot(np.bincount(seconds), label="gets/s")
    axes[0].set_ylabel("gets/s")
    for name, run in (("director", directed), ("no director", fixed)):
        axes[1].semilogy(run.period_end_s, run.p99_ms, marker=".", label=name)
    threshold = directed.settings.threshold_ms
    axes[1].axhline(threshold, color="red", linestyle="--", label="threshold")
    axes[1].set_ylabel("p99 (ms)")
    axes[1].legend()
    axes[2].step(directed.tick_s, directed.server_counts, where="post", label="servers in use")
    axes[2].step(directed.tick_s, directed.hot_replicas, where="post", label="hot-bin replicas")
    axes[2].set_xlabel("seconds")
    axes[2].legend()
    for ax in axes:
        ax.axvline(directed.settings.shape.flat_s, color="grey", linewidth=0.6)
    fig.tight_layout()
    return fig

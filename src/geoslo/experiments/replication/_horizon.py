"""The MPC's prediction horizon swept (issue 23): the paper sets H_p = 30 intervals (5
minutes at 10 s) in both experiments (§IV, (7); §V-C, §V-D) and reports no other. We run
the MPC at several horizons and compare what the report already measures, with the cost
(7) the run incurred, on the traffic of Experiments 1 and 2."""

from __future__ import annotations

import dataclasses

import matplotlib.pyplot as plt
import numpy as np

from geoslo.experiments.replication._workloads import Experiment
from geoslo.sim.replication import LinkMetrics, LinkRun, link_metrics, realized_cost

__all__ = [
    "HORIZONS",
    "QUICK_HORIZONS",
    "COST_MARGIN_FRACTION",
    "AGE_MARGIN_FRACTION",
    "GAIN_TOLERANCE_FRACTION",
    "check_horizon_sweep",
    "gain_stops_at",
    "horizon_section",
    "with_horizon",
]

HORIZONS = (1, 5, 10, 30, 60)  # intervals of 10 s; 30 is the paper's (§V-C)
QUICK_HORIZONS = (5, 30)
COST_MARGIN_FRACTION = 0.10  # a shorter horizon must beat H_p's cost by more to fail
AGE_MARGIN_FRACTION = 0.25  # how much older Experiment 1's images must be below H_p
GAIN_TOLERANCE_FRACTION = 0.05  # "the gain stops": within 5% of the sweep's best cost
SWEEP_ROWS = ("app_p95_mb", "rep_p95_mb", "image_age_mean_s", "transfer_mean_s")  # Table I/II


@dataclasses.dataclass(frozen=True)
class HorizonPoint:
    """One MPC run at one horizon: the report's metrics, the cost (7) per interval it
    incurred, the data waiting in all three streams and its median step time."""

    horizon: int
    metrics: LinkMetrics
    cost: float
    total_mean_mb: float
    step_median_ms: float


def with_horizon(experiment: Experiment, horizon: int) -> Experiment:
    """The experiment with the MPC's horizon H_p set to ``horizon`` intervals."""
    return dataclasses.replace(
        experiment, config=dataclasses.replace(experiment.config, horizon=horizon)
    )


def gain_stops_at(horizons: list[int], costs: list[float], tolerance_fraction: float) -> int:
    """The shortest horizon whose cost is within ``tolerance_fraction`` of the lowest."""
    best = min(costs)
    return min(
        h for h, c in zip(horizons, costs, strict=True) if c <= best * (1 + tolerance_fraction)
    )


def sweep_points(experiment: Experiment, runs: dict[int, LinkRun]) -> list[HorizonPoint]:
    """Each horizon's run summarised, shortest horizon first."""
    points = []
    for horizon in sorted(runs):
        run = runs[horizon]
        config = with_horizon(experiment, horizon).config
        points.append(
            HorizonPoint(
                horizon,
                link_metrics(run),
                realized_cost(run, config),
                float(run.buffers_mb.sum(axis=1).mean()),
                float(np.median(run.decide_ms)),
            )
        )
    return points


def check_horizon_sweep(points: dict[int, list[HorizonPoint]], paper_horizon: int) -> dict:
    """What the paper's choice of H_p implies (§IV, §V): no shorter horizon incurs a
    materially lower cost (7) in either experiment; and in Experiment 1, whose images wait
    through long overloads, shorter horizons leave older images at the backup: the integral
    state pushes images through only when the horizon sees its cost grow (§IV)."""
    checks = {}
    for n, sweep in points.items():
        paper = next(p for p in sweep if p.horizon == paper_horizon)
        shorter = [p for p in sweep if p.horizon < paper_horizon]
        checks[
            f"Exp. {n}: no horizon shorter than H = {paper_horizon} lowers the cost (7) by "
            f"more than {COST_MARGIN_FRACTION:.0%}"
        ] = all(p.cost >= paper.cost * (1 - COST_MARGIN_FRACTION) for p in shorter)
    paper_1 = next(p for p in points[1] if p.horizon == paper_horizon)
    checks[
        f"Exp. 1: horizons shorter than H = {paper_horizon} keep the images at the backup "
        f"{AGE_MARGIN_FRACTION:.0%} older or more (vm-sigma-mu)"
    ] = all(
        p.metrics.image_age_mean_s >= paper_1.metrics.image_age_mean_s * (1 + AGE_MARGIN_FRACTION)
        for p in points[1]
        if p.horizon < paper_horizon
    )
    return checks


def horizon_section(
    report,
    experiments: dict[int, Experiment],
    runs: dict[int, dict[int, LinkRun]],
    paper: dict,
    labels: dict[str, str],
) -> dict:
    """The sweep's section: prose from the numbers, the table (the paper's MPC column on
    the H_p rows only), the figure and the checks; returns the summary and the checks."""
    points = {n: sweep_points(experiments[n], runs[n]) for n in experiments}
    paper_horizon = experiments[1].config.horizon
    report.section(
        "The prediction horizon (§IV, §V-C, §V-D)",
        f"The paper sets H_p = {paper_horizon} intervals (5 minutes) in both experiments. "
        f"Here the MPC runs at H = {', '.join(str(p.horizon) for p in points[1])} on the "
        "same traffic and seed; 'cost (7)' is the cost the run incurred per interval with "
        "the experiment's weights (buffers, share moves and the image integral, in units of "
        "C), what the MPC minimises over its horizon.",
    )
    report.text("\n\n".join(_prose(n, points[n], paper_horizon) for n in points))
    rows = [_row(n, p, paper, labels, paper_horizon) for n in points for p in points[n]]
    report.table(
        "horizon_sweep",
        rows,
        caption="The MPC at each horizon; the paper's values are its MPC at H_p = 30",
        formats={"cost (7) per interval": ".4g", "MPC step, median [ms]": ".2f"},
    )
    report.figure(
        "horizon_sweep",
        _figure(points, paper_horizon),
        "Against the horizon (intervals of 10 s, log scale): each stream's 95th percentile "
        "buffer, the images' age at the backup, the cost (7) relative to H_p's, and the "
        "MPC's median step (timed while other runs shared the machine).",
    )
    summary = {
        f"experiment_{n}": {
            str(p.horizon): {
                **p.metrics.to_dict(),
                "cost": p.cost,
                "total_mean_mb": p.total_mean_mb,
                "step_median_ms": p.step_median_ms,
            }
            for p in sweep
        }
        for n, sweep in points.items()
    }
    return {"summary": summary, "checks": check_horizon_sweep(points, paper_horizon)}


def _row(n: int, point: HorizonPoint, paper: dict, labels: dict[str, str], paper_h: int):
    """One horizon's row; every number has a '(paper)' column, filled on H_p's row only,
    so that the seeds' summary (``_seeds``) reads each as a comparison."""
    m = point.metrics
    row: dict = {"case": f"Exp. {n}, H = {point.horizon}"}
    for key in SWEEP_ROWS:
        row[labels[key]] = round(getattr(m, key), 1)
        quoted = paper[f"exp{n}_mpc_{key}"]["value"] if point.horizon == paper_h else None
        row[f"{labels[key]} (paper)"] = quoted
    extras = {
        "app waiting, p95 [s]": round(m.app_wait_p95_s, 1),
        "total waiting, mean [MB]": round(point.total_mean_mb),
        "cost (7) per interval": point.cost,
        "MPC step, median [ms]": point.step_median_ms,
    }
    for label, value in extras.items():
        row[label], row[f"{label} (paper)"] = value, None
    row["images finished"] = f"{m.images_done}/{m.images_started}"
    return row


def _prose(n: int, sweep: list[HorizonPoint], paper_h: int) -> str:
    horizons = [p.horizon for p in sweep]
    costs = [p.cost for p in sweep]
    best = sweep[int(np.argmin(costs))]
    stops = gain_stops_at(horizons, costs, GAIN_TOLERANCE_FRACTION)
    short, paper = sweep[0], next(p for p in sweep if p.horizon == paper_h)
    tolerance = f"{GAIN_TOLERANCE_FRACTION:.0%}"
    if stops == horizons[-1] and len(sweep) > 1:
        stopping = f"no shorter horizon comes within {tolerance} of it: the cost still falls"
    else:
        stopping = (
            f"the shortest horizon within {tolerance} of it is H = {stops}: there the gain "
            "from a longer horizon stops"
        )
    verdict = (
        f"H = {paper_h} is the sweep's best"
        if best is paper
        else f"H = {paper_h} costs {paper.cost / best.cost - 1:+.0%} against it"
    )
    longer = "".join(
        f" H = {p.horizon} costs {p.cost / paper.cost - 1:+.0%} against H = {paper_h}."
        for p in sweep
        if p.horizon > paper_h and p is not best
    )
    return (
        f"**Experiment {n}.** The cost (7) is lowest at H = {best.horizon} "
        f"({best.cost:.4g} per interval); {stopping}. "
        f"{verdict}.{longer} From H = {short.horizon} to "
        f"H = {paper_h} the images' mean age at the backup goes from "
        f"{short.metrics.image_age_mean_s:.0f} s to {paper.metrics.image_age_mean_s:.0f} s "
        f"({short.metrics.images_done}/{short.metrics.images_started} images finished, then "
        f"{paper.metrics.images_done}/{paper.metrics.images_started}), the application's p95 "
        f"buffer from {short.metrics.app_p95_mb:.0f} MB to {paper.metrics.app_p95_mb:.0f} MB "
        f"and the replication's from {short.metrics.rep_p95_mb:.0f} MB to "
        f"{paper.metrics.rep_p95_mb:.0f} MB; the median step from "
        f"{short.step_median_ms:.2f} ms to {paper.step_median_ms:.2f} ms."
    )


def _figure(points: dict[int, list[HorizonPoint]], paper_h: int):
    """Four panels against the horizon; colour: the stream, line style: the experiment."""
    fig, axes = plt.subplots(2, 2, figsize=(9, 6), sharex=True)
    panels = (
        (axes[0, 0], "p95 buffer (MB)", {"app": "app_p95_mb", "rep": "rep_p95_mb"}),
        (axes[0, 1], "image age, mean (s)", {"images": "image_age_mean_s"}),
    )
    colours = {"app": "tab:blue", "rep": "tab:orange", "images": "tab:green"}
    for n, sweep in points.items():
        h = [p.horizon for p in sweep]
        style = {"marker": "o", "linestyle": "-" if n == 1 else "--"}
        for ax, _, streams in panels:
            for stream, key in streams.items():
                values = [getattr(p.metrics, key) for p in sweep]
                ax.plot(h, values, color=colours[stream], label=f"Exp. {n} {stream}", **style)
        paper_cost = next(p.cost for p in sweep if p.horizon == paper_h)
        relative = [p.cost / paper_cost for p in sweep]
        axes[1, 0].plot(h, relative, color="tab:red", label=f"Exp. {n}", **style)
        steps_ms = [p.step_median_ms for p in sweep]
        axes[1, 1].plot(h, steps_ms, color="tab:purple", label=f"Exp. {n}", **style)
    for ax, label, _ in panels:
        ax.set_ylabel(label)
    axes[1, 0].set_ylabel(f"cost (7) / cost at H = {paper_h}")
    axes[1, 1].set_ylabel("MPC step, median (ms)")
    axes[0, 0].set_yscale("log")
    axes[1, 0].set_yscale("log")
    horizons = sorted({p.horizon for sweep in points.values() for p in sweep})
    for ax in axes.flat:
        ax.set_xscale("log")
        ax.set_xticks(horizons, [str(h) for h in horizons])
        ax.minorticks_off()
        ax.axvline(paper_h, color="grey", linestyle=":", linewidth=0.8)
        ax.legend(fontsize=7)
    for ax in axes[1]:
        ax.set_xlabel("horizon (intervals of 10 s; dotted: the paper's)")
    fig.tight_layout()
    return fig

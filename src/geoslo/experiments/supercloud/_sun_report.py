"""The follow-the-sun part of the Supercloud report (SoCC 2016, §5.1, Figs. 4-5): latency
CDFs and throughput of the US, Global and Dynamic ensembles, and how often the scheduler
moved the whole ensemble."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from geoslo.experiments.supercloud._follow_the_sun import ENSEMBLES, SunRun, SunSettings
from geoslo.report import paper_row

__all__ = ["sun_metrics", "check_sun", "sun_section", "FAST_MS"]

FAST_MS = 15.0  # §5.1 reads the CDFs at 15 ms
REGIONS = ("US", "Asia")


def _weighted_fraction_under(run: SunRun, mask: np.ndarray, limit_ms: float) -> float:
    weight = run.sample_weight[mask]
    return float(np.sum(weight * (run.sample_ms[mask] < limit_ms)) / np.sum(weight))


def _weighted_quantile(values: np.ndarray, weight: np.ndarray, q: float) -> float:
    order = np.argsort(values)
    cumulative = np.cumsum(weight[order]) / weight.sum()
    return float(values[order][np.searchsorted(cumulative, q)])


def whole_moves_h(run: SunRun) -> list[float]:
    """Hours at which the scheduler moved the whole ensemble to one region."""
    times = sorted({t for t, *_ in run.migrations})
    return [t / 3600 for t in times if len({m[3] for m in run.migrations if m[0] == t}) == 1]


def sun_metrics(run: SunRun) -> dict:
    out: dict = {"served_fraction": float(run.served_rps.sum() / run.offered_rps.sum())}
    for kind, is_write in (("reads", False), ("writes", True)):
        every = run.sample_is_write == is_write
        out[f"{kind}_under_15ms"] = _weighted_fraction_under(run, every, FAST_MS)
        for k, region in enumerate(REGIONS):
            mask = every & (run.sample_site == k)
            out[f"{region}_{kind}_under_15ms"] = _weighted_fraction_under(run, mask, FAST_MS)
            out[f"{region}_{kind}_median_ms"] = _weighted_quantile(
                run.sample_ms[mask], run.sample_weight[mask], 0.5
            )
    moves = whole_moves_h(run)
    out["whole_moves"] = len(moves)
    out["migrations"] = len(run.migrations)
    out["move_interval_median_h"] = float(np.median(np.diff(moves))) if len(moves) > 2 else None
    return out


def check_sun(metrics: dict[str, dict]) -> dict[str, bool]:
    """§5.1's pattern: the scheduler moves the whole ensemble about every 12 h and beats
    both fixed ensembles on fast operations and on throughput."""
    dynamic = metrics["Dynamic"]
    interval = dynamic["move_interval_median_h"]
    fixed = [metrics[name] for name in ("US", "Global")]
    fast = [m["reads_under_15ms"] + m["writes_under_15ms"] for m in fixed]
    return {
        "Dynamic moves the whole ensemble every 10-14 h": interval is not None
        and 10 <= interval <= 14,
        "Dynamic: most reads and writes under 15 ms, more than US and Global": (
            dynamic["reads_under_15ms"] + dynamic["writes_under_15ms"] > max(fast)
            and min(dynamic["reads_under_15ms"], dynamic["writes_under_15ms"]) > 0.5
        ),
        "Dynamic serves more of the offered load than US and Global": dynamic["served_fraction"]
        > max(m["served_fraction"] for m in fixed),
        "US ensemble: US clients fast, Asia's slow": metrics["US"]["US_reads_under_15ms"] > 0.8
        and metrics["US"]["Asia_reads_under_15ms"] < 0.1,
    }


def _throughput_figure(runs: dict[str, SunRun]):
    fig, axes = plt.subplots(3, 1, figsize=(10, 8), sharex=True, sharey=True)
    for ax, name in zip(axes, ENSEMBLES, strict=True):
        run = runs[name]
        hours = run.times_s / 3600
        ax.stackplot(
            hours,
            run.served_rps[:, 0],
            run.served_rps[:, 1],
            labels=("Observed US", "Observed Asia"),
            alpha=0.8,
        )
        ax.plot(hours, run.offered_rps.sum(1), "k--", lw=0.8, label="Expected aggregate")
        for t in whole_moves_h(run):
            ax.axvline(t, color="grey", lw=0.4, ls=":")
        ax.set_title(f"{name} ensemble")
        ax.set_ylabel("ops/s")
    axes[0].legend(loc="upper right", fontsize=8)
    axes[-1].set_xlabel("hours")
    fig.tight_layout()
    return fig


def _cdf_figure(runs: dict[str, SunRun]):
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6), sharey=True)
    for ax, name in zip(axes, ENSEMBLES, strict=True):
        run = runs[name]
        for k, region in enumerate(REGIONS):
            for kind, is_write, style in (("read", False, "-"), ("write", True, "--")):
                mask = (run.sample_site == k) & (run.sample_is_write == is_write)
                order = np.argsort(run.sample_ms[mask])
                weight = run.sample_weight[mask][order]
                ax.plot(
                    run.sample_ms[mask][order],
                    np.cumsum(weight) / weight.sum(),
                    style,
                    label=f"{region} {kind}",
                )
        ax.axvline(FAST_MS, color="grey", lw=0.5)
        ax.set_xscale("log")
        ax.set_title(f"{name} ensemble")
        ax.set_xlabel("latency (ms)")
    axes[0].set_ylabel("CDF")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def sun_section(report, runs: dict[str, SunRun], settings: SunSettings, paper) -> dict:
    metrics = {name: sun_metrics(run) for name, run in runs.items()}
    report.section(
        "Follow the sun (§5.1, Figs. 4-5)",
        f"{settings.days} days of the Wikipedia trace (hourly, smooth like the paper's MSN "
        f"connection counts) in Washington DC and, shifted by {settings.shift_h:g} h, in Tokyo; "
        f"peak {settings.peak_rps:g} requests/s per region, reads:writes 9:1, clients "
        f"thinking {settings.ensemble.think_ms:g} ms between blocking requests. Three nodes: "
        "US (all in Washington), Global (two in Washington with the leader, one in Tokyo), "
        f"Dynamic (the scheduler every {settings.interval_s:g} s, T = "
        f"{settings.threshold_fraction:.0%} of the current score, nodes moved in parallel by "
        "live migration, waiting while one runs).",
    )
    rows = []
    for name in ENSEMBLES:
        m = metrics[name]
        rows.append(
            {
                "ensemble": name,
                "reads < 15 ms": m["reads_under_15ms"],
                "writes < 15 ms": m["writes_under_15ms"],
                "US reads < 15 ms": m["US_reads_under_15ms"],
                "Asia reads < 15 ms": m["Asia_reads_under_15ms"],
                "Asia writes, median ms": m["Asia_writes_median_ms"],
                "served / offered": m["served_fraction"],
                "whole-ensemble moves": m["whole_moves"],
            }
        )
    percent = "{:.0%}"
    report.table(
        "follow_the_sun",
        rows,
        caption="Latency and throughput of the three ensembles (ours)",
        formats={c: percent for c in rows[0] if "<" in c or "served" in c},
    )
    dynamic, us, glob = metrics["Dynamic"], metrics["US"], metrics["Global"]
    report.comparison(
        "follow_the_sun_paper",
        [
            paper_row(
                paper,
                "dynamic_reads_under_15ms",
                dynamic["reads_under_15ms"],
                "Dynamic: reads under 15 ms",
            ),
            paper_row(
                paper,
                "dynamic_writes_under_15ms",
                dynamic["writes_under_15ms"],
                "Dynamic: writes under 15 ms",
            ),
            paper_row(
                paper,
                "us_ensemble_us_under_15ms",
                us["US_reads_under_15ms"],
                "US ensemble: US reads under 15 ms",
            ),
            paper_row(
                paper,
                "global_asia_reads_under_15ms",
                glob["Asia_reads_under_15ms"],
                "Global: Asia's reads under 15 ms",
            ),
            paper_row(
                paper,
                "dynamic_move_period_h",
                dynamic["move_interval_median_h"],
                "Dynamic: median hours between whole moves",
            ),
        ],
        caption="Beside the paper",
    )
    report.figure(
        "fig4_throughput",
        _throughput_figure(runs),
        "Fig. 4: observed throughput (US below Asia, stacked) and the expected aggregate; "
        "dotted lines: whole-ensemble moves.",
    )
    report.figure(
        "fig5_latency_cdf",
        _cdf_figure(runs),
        "Fig. 5: latency CDFs of reads and writes per region, in the paper's order "
        "(US, Global, Dynamic).",
    )
    return metrics

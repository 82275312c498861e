"""The report of Experiment 1 on the real link (``_live.py``): Table I's columns measured
from the real systems beside the simulator's run of the same schedule and the paper's,
the buffer dynamics checked on the measurements, the application's waiting time as its
clients saw it, and the acceptance checks."""

from __future__ import annotations

import time
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from geoslo.experiments.replication._live import (
    LivePolicyRun,
    LiveSettings,
    live_schedule,
    run_live_policies,
    simulate_schedule,
)
from geoslo.experiments.replication._report import PAPER_VALUES, TABLE_ROWS, check_pattern
from geoslo.experiments.replication._workloads import Experiment
from geoslo.live.replication import STREAM_MATCHES, full_link_goodput_mbps
from geoslo.report import Report, load_paper_values
from geoslo.sim.replication import LinkRun, link_metrics

__all__ = ["live_report", "dynamics_errors_mb", "check_live", "DYNAMICS_TOLERANCE"]

STREAMS = ("application", "replication", "VM images")
# eq. (3) on measurements: |x(k) - x(k-1) - arrived + sent| within this many MB plus this
# fraction of what moved in the interval (the counters are read one after another, not at
# one instant: a value or two can land between two reads)
DYNAMICS_TOLERANCE = (0.15, 0.05)
DYNAMICS_SHARE = 0.95  # of a run's intervals and streams within the tolerance

INTRO = (
    "Dürango et al.'s Experiment 1 (CDC 2016, §V-C) on a real egress link: two network "
    "namespaces joined by a veth whose sending end HTB shapes; across it, the application's "
    "clients read values from a Redis server, a Redis replica follows its master, "
    "which the application writes to, and rsync copies VM images to a daemon at the backup "
    "site. Each stream's backlog is read from the system that holds it (the server's reply "
    "buffers and sockets, the master's replication offset against its replica's, the "
    "images not yet acknowledged) and what it sent from the kernel's acknowledged bytes. "
    "Each policy gets a testbed of its own (two more namespaces and a link), all run at "
    "once: the links carry a few Mbit/s each and share nothing but this machine's CPU, "
    "which the report's lateness figures watch (the setting below says how big the values "
    "are and how often the controller runs). Beside each "
    "measured column is the simulator's run of the same schedule; the paper's columns are "
    "at its scale (100 Mbit/s, 3 h), for the pattern only."
)


def live_report(settings: LiveSettings, out_dir: Path, progress=print) -> Path:
    """Run every policy on the link and in the simulator; write the report."""
    started = time.monotonic()
    out_dir = Path(out_dir)
    schedule = live_schedule(settings)
    progress(
        f"replication live: {', '.join(settings.policies)} at once, each on its own link, "
        f"for {schedule.duration_s} s"
    )
    runs = run_live_policies(schedule, settings, out_dir / "run", progress)
    simulated = {name: simulate_schedule(name, schedule, settings) for name in settings.policies}
    live_metrics = {name: link_metrics(r.run) for name, r in runs.items()}
    sim_metrics = {name: link_metrics(run) for name, run in simulated.items()}
    results = _results(settings, schedule, runs, live_metrics, sim_metrics)
    report = Report("Geo-replication MPC on a real link: Experiment 1, compressed", INTRO)
    _setup_section(report, settings, schedule)
    _table_section(report, settings, live_metrics, sim_metrics, runs)
    _dynamics_section(report, runs, results)
    _differences_section(report, results)
    report.figure("live_buffers", _figure(schedule, runs, simulated), _FIGURE_CAPTION)
    checks = check_live(results)
    report.checks(checks)
    if set(settings.policies) == set(live_metrics) and len(live_metrics) == 4:
        pattern = check_pattern(live_metrics)
        report.table(
            "paper_pattern",
            [{"the paper's pattern (§V-C)": k, "holds live": v} for k, v in pattern.items()],
            caption="The pattern the paper reports, on the live runs (not an acceptance check: "
            "the compressed schedule may shift it; see the simulator's report for the full one)",
        )
        results["paper_pattern"] = pattern
    results["checks"] = checks
    report.text(f"{time.monotonic() - started:.0f} s on this machine.")
    report.data("results", results)
    report.data("runs", {name: _raw(run) for name, run in runs.items()})
    return report.write(out_dir)


def _raw(run: LivePolicyRun) -> dict:
    """One policy's measurements as measured, so the tables can be derived again."""
    r = run.run
    return {
        "time_s": r.time_s, "buffers_mb": r.buffers_mb, "sent_mb": run.interval_sent_mb,
        "arrived_mb": run.interval_arrived_mb, "shares": r.shares,
        "image_created_s": r.image_created_s, "image_done_s": r.image_done_s,
        "request_waits_s": run.request_waits_s, "observe_late_s": run.late_s,
    }  # fmt: skip


def dynamics_errors_mb(run: LivePolicyRun) -> np.ndarray:
    """Per interval after the first and stream: x(k) - (x(k-1) + arrived(k) - sent(k))."""
    x = run.run.buffers_mb
    return x[1:] - (x[:-1] + run.interval_arrived_mb[1:] - run.interval_sent_mb[1:])


def _within(run: LivePolicyRun) -> np.ndarray:
    """Per interval after the first, the application's and the replication's: whether eq.
    (3) holds within the tolerance (the images' holds by construction: left out)."""
    absolute, relative = DYNAMICS_TOLERANCE
    moved = run.interval_arrived_mb[1:, :2] + run.interval_sent_mb[1:, :2]
    return np.abs(dynamics_errors_mb(run)[:, :2]) <= absolute + relative * moved


def _full_link_goodput_mbps(run: LivePolicyRun, capacity_mbps: float) -> np.ndarray:
    r = run.run
    total_sent = run.interval_sent_mb.sum(axis=1)
    return full_link_goodput_mbps(r.time_s, r.buffers_mb.sum(axis=1), total_sent, capacity_mbps)


def images_due(run: LinkRun, settle_s: float) -> tuple[int, int]:
    """(images taken at least ``settle_s`` before the run's end, how many of them finished)."""
    due = run.image_created_s <= run.time_s[-1] - settle_s
    return int(due.sum()), int(np.isfinite(run.image_done_s[due]).sum())


def _results(settings, schedule, runs, live_metrics, sim_metrics) -> dict:
    settle_s = schedule.config.horizon * schedule.config.interval_s
    out: dict = {
        "settings": {k: getattr(settings, k) for k in settings.__dataclass_fields__},
        "duration_s": schedule.duration_s,
        "image_mb": schedule.config.image_mb,
        "image_period_s": schedule.config.image_period_s,
        "policies": {},
    }
    for name, run in runs.items():
        within = _within(run)
        errors = dynamics_errors_mb(run)
        full = _full_link_goodput_mbps(run, settings.capacity_mbps)
        due, due_done = images_due(run.run, settle_s)
        out["policies"][name] = {
            "live": live_metrics[name].to_dict(),
            "simulated": sim_metrics[name].to_dict(),
            # the worse of the application's and the replication's
            "dynamics_within_fraction": float(within.mean(axis=0).min()) if within.size else 0.0,
            "dynamics_max_error_mb": np.abs(errors).max(axis=0).tolist() if errors.size else [],
            "full_link_intervals": int(full.size),
            "images_due": due,  # taken at least the MPC's horizon before the end
            "images_due_done": due_done,
            "full_link_goodput_fraction": _stat(full, np.median) / settings.capacity_mbps,
            "request_wait_mean_s": _stat(run.request_waits_s, np.mean),
            "request_wait_p95_s": _stat(run.request_waits_s, lambda w: np.percentile(w, 95)),
            "requests": int(run.request_waits_s.size),
            "unanswered": run.unanswered,
            "htb_class_bytes": run.class_bytes,
            "observe_late_p95_s": float(np.percentile(run.late_s, 95)) if run.late_s.size else 0.0,
        }  # fmt: skip
    return out


def _stat(values: np.ndarray, of) -> float:
    return float(of(values)) if values.size else float("nan")


def check_live(results: dict) -> dict[str, bool]:
    """The issue's bar: the measured backlogs obey eq. (3) within the tolerance; the link
    carries about C when it is full (measured); the MPC keeps the application's backlog
    below STATIC's and FIFO's while it finishes every image taken at least its horizon (30
    intervals) before the end (later ones may still be in flight)."""
    policies = results["policies"]
    checks = {}
    for name, p in policies.items():
        checks[
            f"{name}: backlogs obey eq. (3) in >= {DYNAMICS_SHARE:.0%} of intervals, each stream"
        ] = p["dynamics_within_fraction"] >= DYNAMICS_SHARE
    measured = [p["full_link_goodput_fraction"] for p in policies.values()]
    checks["a full link carries 85-102% of C (median goodput, every policy)"] = all(
        0.85 <= fraction <= 1.02 for fraction in measured
    )
    if {"MPC", "STATIC", "FIFO"} <= set(policies):
        app = {name: policies[name]["live"]["app_mean_mb"] for name in ("MPC", "STATIC", "FIFO")}
        checks["MPC buffers less application data than STATIC"] = app["MPC"] < app["STATIC"]
        checks["MPC buffers less application data than FIFO"] = app["MPC"] < app["FIFO"]
    if "MPC" in policies:
        mpc = policies["MPC"]
        checks["MPC finishes every image taken a horizon or more before the end"] = (
            mpc["images_due_done"] == mpc["images_due"] > 0
        )
    return checks


def _setup_section(report: Report, settings: LiveSettings, schedule: Experiment) -> None:
    config = schedule.config
    report.section(
        "Setting",
        f"{schedule.duration_s} s on the link: {settings.fraction:g} of Experiment 1's 3 h "
        f"run {settings.compression}x faster. C = {settings.capacity_mbps:g} Mbit/s (HTB); "
        f"the application's reads average {schedule.application_mbps.mean():.1f} Mbit/s "
        f"(peak {schedule.application_mbps.max():.1f}), the replication's writes "
        f"{schedule.replication_mbps.mean():.1f} Mbit/s (peak "
        f"{schedule.replication_mbps.max():.1f}); a {config.image_mb:.2f} MB image every "
        f"{config.image_period_s:g} s. Values of {settings.value_bytes} bytes. The MPC: "
        f"interval {config.interval_s:g} s, H = {config.horizon}, q = {config.weights.buffer}, "
        f"r = {tuple(round(r, 1) for r in config.weights.moves)} (the paper's: the MPC counts "
        f"buffers in intervals of the link), Kalman noise "
        f"{config.arrival_model.process_noise_mb:.2f} and "
        f"{config.arrival_model.measurement_noise_mb:.2f} MB per interval. STATIC "
        f"{tuple(round(s, 3) for s in schedule.static.shares)} (DRBD's 30%). HTB classes by "
        f"port: {_matches_text()}.",
    )  # fmt: skip


def _matches_text() -> str:
    pairs = zip(STREAMS, STREAM_MATCHES, strict=True)
    return ", ".join(f"{stream} {m.direction} {m.port}" for stream, m in pairs)


def _table_section(report, settings, live_metrics, sim_metrics, runs) -> None:
    paper = load_paper_values(PAPER_VALUES)["values"]
    rows = []
    names = list(live_metrics)
    for key, label in TABLE_ROWS:
        row = {"metric": label}
        for name in names:
            row[f"{name} live"] = round(getattr(live_metrics[name], key), 2)
            row[f"{name} sim"] = round(getattr(sim_metrics[name], key), 2)
            row[f"{name} (paper)"] = paper[f"exp1_{name.lower()}_{key}"]["value"]
        rows.append(row)
    for label, value in (
        ("images finished", lambda m: f"{m.images_done}/{m.images_started}"),
        ("app waiting, mean [s] (link model)", lambda m: round(m.app_wait_mean_s, 2)),
        ("DRO, mean [MB]", lambda m: round(m.dro_mean_mb, 1)),
        ("data loss, max [MB]", lambda m: round(m.data_loss_max_mb, 1)),
    ):
        row = {"metric": label}
        for name in names:
            row[f"{name} live"] = value(live_metrics[name])
            row[f"{name} sim"] = value(sim_metrics[name])
            row[f"{name} (paper)"] = None
        rows.append(row)
    row = {"metric": "app request wait, mean / p95 [s] (clients)"}
    for name in names:
        waits = runs[name].request_waits_s
        row[f"{name} live"] = (
            f"{waits.mean():.2f} / {np.percentile(waits, 95):.2f}" if waits.size else "none"
        )
        row[f"{name} sim"] = row[f"{name} (paper)"] = None
    rows.append(row)
    report.section(
        "Table I, measured",
        "Buffered data (MB) and image ages and transfer times (s) on the link's time scale, "
        "from the measurements every interval; 'sim' is the simulator on the same schedule "
        "(Poisson messages of one value). The last row is what the application's clients "
        "measured per request, from sending it to its whole reply.",
    )
    report.table("table_1_live", rows, caption="Experiment 1 on the real link (Table I)")


def _dynamics_section(report, runs: dict[str, LivePolicyRun], results: dict) -> None:
    absolute, relative = DYNAMICS_TOLERANCE
    rows = []
    for name, p in results["policies"].items():
        errors = p["dynamics_max_error_mb"]
        rows.append({
            "policy": name,
            "intervals within": f"{p['dynamics_within_fraction']:.1%}",
            **{f"max |error| {s} [MB]": round(e, 3) for s, e in zip(STREAMS, errors, strict=False)},
            "full link's goodput / C (intervals)": (
                f"{p['full_link_goodput_fraction']:.3f} ({p['full_link_intervals']})"
            ),
            "HTB bytes (app/rep/img) [MB]": "/".join(
                f"{p['htb_class_bytes'].get(c, 0) / 1e6:.0f}" for c in ("1:10", "1:20", "1:30")
            ),
            "unanswered reads": p["unanswered"],
        })  # fmt: skip
    report.section(
        "Buffer dynamics, measured",
        f"Eq. (3), x(k) = x(k-1) + arrived(k) - sent(k), on the measurements: the backlog from "
        f"the system holding it, arrivals from the producer's counters (Redis's bytes written "
        f"and buffered, the master's offset, the images' sizes), sent from the kernel's "
        f"acknowledged bytes. Tolerance {absolute:g} MB + {relative:.0%} of what moved in the "
        "interval. For the images, sent and the backlog both come from the copier's "
        "acknowledged bytes, so their identity holds by construction; the application's and "
        "the replication's are independent counters.",
    )
    report.table("dynamics", rows, caption="Eq. (3) on the measured backlogs, and the link")


def _differences_section(report: Report, results: dict) -> None:
    """What separates the measured columns from the simulator's, from this run's numbers."""
    policies = results["policies"]
    goodput = np.nanmedian([p["full_link_goodput_fraction"] for p in policies.values()])
    ratios = {
        name: p["live"]["app_mean_mb"] / p["simulated"]["app_mean_mb"]
        for name, p in policies.items()
        if p["simulated"]["app_mean_mb"] > 0
    }
    ages = [
        abs(p["live"]["image_age_mean_s"] / p["simulated"]["image_age_mean_s"] - 1)
        for p in policies.values()
        if p["simulated"]["image_age_mean_s"] > 0
    ]
    faster = "faster" if np.median(list(ratios.values()) or [1.0]) > 1 else "no faster"
    report.section(
        "Live against the simulator",
        f"When full, the link delivered {goodput:.1%} of C as goodput (TCP/IP headers take "
        "the rest; HTB counts them), while the simulated link sends all of C; under overload "
        f"the live backlogs grew {faster} than the simulated ones: the live application "
        "backlog was "
        + ", ".join(f"{r:.1f}x the simulator's under {n}" for n, r in ratios.items())
        + f"; the images' mean age at the backup differed from the simulator's by at most "
        f"{max(ages, default=float('nan')):.0%}. The simulator's arrivals are Poisson messages "
        "of one value; the live ones are the clients' requests as they fell due.",
    )


_FIGURE_CAPTION = (
    "Per policy: the application's and the replication's backlogs measured on the link "
    "(solid) and in the simulator on the same schedule (dotted), the images' backlog "
    "measured (grey), and the application's rate scaled to the link (top)."
)


def _figure(schedule: Experiment, runs: dict[str, LivePolicyRun], simulated: dict[str, LinkRun]):
    fig, axes = plt.subplots(len(runs) + 1, 1, figsize=(8, 2.0 * (len(runs) + 1)), sharex=True)
    t = np.arange(schedule.duration_s)
    axes[0].plot(t, schedule.application_mbps, label="application")
    axes[0].plot(t, schedule.replication_mbps, label="replication")
    axes[0].axhline(schedule.config.capacity_mbps, color="red", linestyle="--", linewidth=0.8)
    axes[0].set_ylabel("Mbit/s")
    axes[0].legend(fontsize=7, loc="upper right")
    for ax, (name, run) in zip(axes[1:], runs.items(), strict=True):
        live, sim = run.run, simulated[name]
        ax.plot(live.time_s, live.buffers_mb[:, 0], color="C0", label="application")
        ax.plot(live.time_s, live.buffers_mb[:, 1], color="C1", label="replication")
        ax.plot(live.time_s, live.buffers_mb[:, 2], color="grey", label="images")
        ax.plot(sim.time_s, sim.buffers_mb[:, 0], color="C0", linestyle=":", linewidth=0.8)
        ax.plot(sim.time_s, sim.buffers_mb[:, 1], color="C1", linestyle=":", linewidth=0.8)
        ax.set_ylabel(f"{name} MB")
    axes[1].legend(fontsize=7, loc="upper right")
    axes[-1].set_xlabel("seconds on the link")
    fig.tight_layout()
    return fig

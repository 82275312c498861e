"""Fig. 4 (load vs violations, local and remote), Fig. 5 (remote response-time estimate) and
the accuracy of Kurma's estimate for redirected requests (§4, §4.2)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from geoslo.dist import LatencyDistribution, mixture
from geoslo.experiments.kurma._scenario import RHO, SLO_MS, Scenario
from geoslo.report import Report, paper_row, progress
from geoslo.sim.kurma import RequestLevelSim

IRELAND, FRANKFURT = 1, 2
FIG4_RTT_MS = 22.0  # Ireland-Frankfurt at the time of the paper's Fig. 4 measurement, §4
REDIRECTED_RPS = 4000.0  # what Ireland sends to Frankfurt while we measure
REPEATS = 3  # independent runs per load point (stalls make single runs noisy)
WARMUP_S = 5  # queues start empty; measure after they fill


def _static_rtt(ireland_frankfurt_ms: float) -> np.ndarray:
    """London, Ireland, Frankfurt base RTTs (Table 2) with a chosen Ireland-Frankfurt RTT."""
    r = ireland_frankfurt_ms
    return np.array([[0.0, 10.0, 12.0], [10.0, 0.0, r], [12.0, r, 0.0]])


def measure_redirected(scenario: Scenario, frankfurt_load_rps: float, seconds: float, seed: int):
    """Ireland sends REDIRECTED_RPS to Frankfurt, which also serves its own requests.

    Returns (load served at Frankfurt, measured violation fraction of the redirected
    requests, Kurma's estimate for them at that load and the measured base RTT).
    """
    local = frankfurt_load_rps - REDIRECTED_RPS
    length = int(np.ceil(seconds)) + WARMUP_S + 1
    traces = [np.zeros(length), np.full(length, REDIRECTED_RPS), np.full(length, local)]
    fractions = np.eye(3)
    fractions[IRELAND] = [0.0, 0.0, 1.0]
    sim = RequestLevelSim(
        site_names=scenario.sites,
        backend=scenario.backend,
        rate_traces=traces,
        base_rtt_ms=_static_rtt(FIG4_RTT_MS),
        residual_rtt_samples_ms=scenario.residual_pool_ms,
        slo_ms=SLO_MS,
        seed=seed,
    )
    sim.run(WARMUP_S, fractions)
    stats = sim.run(seconds, fractions)
    served = float(stats.served_rps[FRANKFURT])
    measured = float(
        stats.violations[IRELAND, FRANKFURT] / max(stats.requests[IRELAND, FRANKFURT], 1)
    )
    finite = stats.min_response_ms[IRELAND, FRANKFURT]
    base_ms = round(float(finite[np.isfinite(finite)].min()) - scenario.profile.min_service_ms)
    estimated = float(scenario.surface.curve(base_ms)(served))
    return served, measured, estimated, base_ms


def accuracy_points(scenario: Scenario, seconds: float, seed: int) -> list[dict]:
    """Measured vs estimated violations of redirected requests across ~1-10% (§4.2)."""
    curve = scenario.surface.curve(FIG4_RTT_MS)
    targets = np.array([0.01, 0.02, 0.03, 0.05, 0.07, 0.10])
    loads = [curve.load_at(t) for t in targets]
    rows = []
    for k, load in enumerate(progress(loads, label="Redirected-request accuracy")):
        runs = [
            measure_redirected(scenario, load, seconds, seed + 10 * k + r) for r in range(REPEATS)
        ]
        served, measured, estimated = (
            float(np.mean(column)) for column in list(zip(*runs, strict=True))[:3]
        )
        base = runs[-1][3]
        rows.append(
            {
                "frankfurt_load_rps": served,
                "measured_base_rtt_ms": base,
                "measured_pct": 100 * measured,
                "estimated_pct": 100 * estimated,
                "error_pp": 100 * (estimated - measured),
            }
        )
    return rows


def fig5_distributions(scenario: Scenario, seconds: float, seed: int):
    """Remote response times Frankfurt -> Ireland under routing changes (22-27 ms), Fig. 5.

    Measured: the simulator's responses. Kurma's estimate: profiled service time at the
    served load + residual WAN latency, shifted in each 2.5 s interval by the base RTT last
    measured before it (what Kurma's curve selection uses, §6). The naive
    estimate joins the service time with the raw WAN RTTs of a 5-minute probe window (base
    not separated, so that window's routing changes blur it), as in §4.2.
    """
    load = 0.7 * scenario.saturation_rps
    duration = int(max(seconds, 30))
    traces = [np.zeros(duration), np.full(duration, load * 0.8), np.full(duration, load * 0.2)]
    fractions = np.eye(3)
    fractions[FRANKFURT] = [0.0, 1.0, 0.0]
    topology = scenario.topology(duration, routing_changes=True)
    sim = RequestLevelSim(
        site_names=scenario.sites,
        backend=scenario.backend,
        rate_traces=traces,
        base_rtt_ms=topology.base_rtt_matrix_ms,
        residual_rtt_samples_ms=scenario.residual_pool_ms,
        slo_ms=SLO_MS,
        seed=seed,
    )
    samples, bases = [], []
    last_base = FIG4_RTT_MS
    for _ in range(int(duration // 2.5)):
        stats = sim.run(2.5, fractions)
        pick = (stats.sample_src == FRANKFURT) & (stats.sample_dst == IRELAND)
        samples.append(stats.sample_response_ms[pick])
        bases.append(last_base)  # the curve Kurma used during this interval
        mins = stats.min_response_ms[FRANKFURT, IRELAND]
        if np.isfinite(mins).any():
            last_base = round(float(mins[np.isfinite(mins)][-1]) - scenario.profile.min_service_ms)
    measured = np.concatenate(samples)
    service = scenario.profile.distribution_at(float(load))
    remote = service + scenario.residual_estimate
    weights = np.array([len(x) for x in samples], dtype=float)
    kurma = mixture([remote + float(b) for b in bases], weights / weights.sum())
    naive = service + _raw_probe_rtt(scenario, seed)
    return measured, kurma, naive, last_base


def _raw_probe_rtt(scenario: Scenario, seed: int) -> LatencyDistribution:
    """Frankfurt-Ireland probe RTTs over a 5-minute window (§6), base not removed."""
    rng = np.random.default_rng(seed)
    history = scenario.topology(600.0, routing_changes=True).link("Ireland", "Frankfurt").base_rtt
    times = np.repeat(np.arange(300.0, 600.0, 0.2), 3)  # 3 probes every 200 ms, §6
    rtt = history.at(times) + rng.choice(scenario.residual_pool_ms, size=times.size)
    return LatencyDistribution.from_samples(rtt, step_ms=0.1)


def _ks(samples: np.ndarray, dist: LatencyDistribution) -> float:
    xs = np.sort(samples)
    empirical = np.arange(1, xs.size + 1) / xs.size
    return float(np.max(np.abs(empirical - dist.cdf(xs))))


def section(report: Report, scenario: Scenario, paper: dict, seed: int) -> dict:
    settings = scenario.settings
    rows = accuracy_points(scenario, settings.accuracy_seconds, seed)
    local_5 = scenario.local_5pct_rps
    remote_5 = scenario.remote_5pct_rps(FIG4_RTT_MS)
    report.section("Fig. 4: load vs SLO violations, local and remote (§4)")
    report.text(
        f"One site of the simulated backend ({scenario.backend.servers} FCFS servers, calibrated "
        "ground truth), profiled open-loop at exponentially spaced loads denser near saturation; "
        "the remote curve adds the residual WAN latency measured by probes and a "
        f"{FIG4_RTT_MS:.0f} ms "
        "base RTT. Points: violations of requests actually redirected from 22 ms away "
        "in the simulator."
    )
    report.comparison(
        "fig4_vs_paper",
        [
            paper_row(
                paper,
                "fig4_saturation_rps",
                scenario.saturation_rps,
                "saturation (median past the SLO)",
            ),
            paper_row(paper, "fig4_local_5pct_rps", local_5, "load at 5% violations, local"),
            paper_row(paper, "fig4_remote_5pct_rps", remote_5, "load at 5% violations, 22 ms away"),
        ],
    )
    report.figure(
        "fig4_curves", _plot_fig4(scenario, rows), "Violations vs load at the destination."
    )
    errors = np.array([r["error_pp"] for r in rows])
    report.section("Accuracy of the estimate for redirected requests (§4.2)")
    report.text(
        "Largest |estimated - measured| over 1-10% violations: "
        f"**{np.max(np.abs(errors)):.2f} pp** "
        "(target: within 0.5 pp)."
    )
    report.table("accuracy_redirected", rows, caption="Ireland -> Frankfurt, 22 ms base RTT.")

    measured, kurma, naive, base = fig5_distributions(
        scenario, settings.accuracy_seconds, seed + 100
    )
    ks_rows = [
        {
            "estimate": "measured",
            "over_slo_pct": 100 * float(np.mean(measured > SLO_MS)),
            "ks_distance": 0.0,
            "p95_ms": float(np.quantile(measured, 0.95)),
            "p99_ms": float(np.quantile(measured, 0.99)),
        },
    ]
    for name, dist in (
        ("Kurma (base and residual separated)", kurma),
        ("raw WAN RTTs (not separated)", naive),
    ):
        ks_rows.append(
            {
                "estimate": name,
                "over_slo_pct": 100 * float(dist.tail_probability(SLO_MS)),
                "ks_distance": _ks(measured, dist),
                "p95_ms": float(dist.quantile_ms(0.95)),
                "p99_ms": float(dist.quantile_ms(0.99)),
            }
        )
    report.section("Fig. 5: remote response-time estimate (§4.2)")
    report.text(
        "Frankfurt -> Ireland while the base RTT changes within 22-27 ms. The paper shows the "
        "estimate well aligned with the measured distribution and the non-separated one off "
        f"substantially (no numbers given). Last measured base RTT: {base} ms."
    )
    report.table(
        "fig5_estimates",
        ks_rows,
        caption="Share over the 30 ms SLO and KS distance to the measured "
        "distribution. Base RTTs are not whole ms in the simulator; Kurma rounds them (§6), so "
        "a narrow distribution can be off by up to 0.5 ms.",
    )
    report.figure("fig5_cdf", _plot_fig5(measured, kurma, naive), "CDF of remote response time.")
    return {"accuracy": rows, "max_error_pp": float(np.max(np.abs(errors))), "fig5": ks_rows}


def _plot_fig4(scenario: Scenario, rows):
    fig, ax = plt.subplots(figsize=(6, 3.6))
    grid = np.linspace(0, scenario.saturation_rps, 300)
    ax.plot(grid, 100 * scenario.surface.curve(0)(grid), label="local (profiled)")
    ax.plot(
        grid, 100 * scenario.surface.curve(FIG4_RTT_MS)(grid), label="remote, 22 ms (estimated)"
    )
    ax.plot(
        [r["frankfurt_load_rps"] for r in rows],
        [r["measured_pct"] for r in rows],
        "k.",
        label="remote, 22 ms (measured)",
    )
    ax.axhline(100 * RHO, color="grey", lw=0.8, ls="--")
    ax.set_xlabel("load at the destination (req/s)")
    ax.set_ylabel("SLO violations (%)")
    ax.set_ylim(0, 30)
    ax.legend()
    fig.tight_layout()
    return fig


def _plot_fig5(measured, kurma, naive):
    fig, ax = plt.subplots(figsize=(6, 3.6))
    xs = np.sort(measured)
    ax.plot(xs, np.arange(1, xs.size + 1) / xs.size, "k", label="measured")
    for dist, label in ((kurma, "Kurma estimate"), (naive, "raw WAN (not separated)")):
        grid = np.linspace(xs[0], xs[-1], 400)
        ax.plot(grid, dist.cdf(grid), label=label)
    ax.set_xlabel("remote response time (ms)")
    ax.set_ylabel("CDF")
    ax.legend()
    fig.tight_layout()
    return fig

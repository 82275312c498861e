"""Fig. 4 (load vs violations, local and remote), Fig. 5 (remote response-time estimate) and
the accuracy of Kurma's estimate for redirected requests (§4, §4.2)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from geoslo.dist import LatencyDistribution, mixture
from geoslo.experiments.kurma._scenario import RHO, SLO_MS, Scenario
from geoslo.report import Report, paper_row, progress
from geoslo.sim.kurma import RequestLevelSim, WanTruthParams

IRELAND, FRANKFURT = 1, 2
FIG4_RTT_MS = 22.0  # Ireland-Frankfurt at the time of the paper's Fig. 4 measurement, §4
REDIRECTED_RPS = 4000.0  # what Ireland sends to Frankfurt while we measure
REPEATS = 3  # independent runs per load point (stalls make single runs noisy)
WARMUP_S = 5  # queues start empty; measure after they fill


def _static_rtt(ireland_frankfurt_ms: float) -> np.ndarray:
    """London, Ireland, Frankfurt base RTTs (Table 2) with a chosen Ireland-Frankfurt RTT."""
    r = ireland_frankfurt_ms
    return np.array([[0.0, 10.0, 12.0], [10.0, 0.0, r], [12.0, r, 0.0]])


def measure_redirected(
    scenario: Scenario,
    frankfurt_load_rps: float,
    seconds: float,
    seed: int,
    wan_truth: WanTruthParams | None = None,
):
    """Ireland sends REDIRECTED_RPS to Frankfurt, which also serves its own requests
    (over the WAN truth ``wan_truth`` if given, else the pooled residuals).

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
        wan_truth=wan_truth,
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


def accuracy_points(
    scenario: Scenario,
    seconds: float,
    seed: int,
    targets=(0.01, 0.02, 0.03, 0.05, 0.07, 0.10),
    wan_truth: WanTruthParams | None = None,
) -> list[dict]:
    """Measured vs estimated violations of redirected requests across ~1-10% (§4.2), at the
    loads where the estimate crosses ``targets``."""
    curve = scenario.surface.curve(FIG4_RTT_MS)
    loads = [curve.load_at(t) for t in targets]
    rows = []
    for k, load in enumerate(progress(loads, label="Redirected-request accuracy")):
        runs = [
            measure_redirected(scenario, load, seconds, seed + 10 * k + r, wan_truth)
            for r in range(REPEATS)
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


PROBE_WINDOW_S = 300.0  # the naive estimate's raw probe window, 5 minutes (§6)


def fig5_distributions(scenario: Scenario, seconds: float, seed: int):
    """Remote response times Frankfurt -> Ireland under routing changes (22-27 ms), Fig. 5.

    Measured: the simulator's responses. Kurma's estimate: profiled service time at the
    served load + residual WAN latency, shifted in each 2.5 s interval by the base RTT last
    measured before it (what Kurma's curve selection uses, §6). The naive estimate joins the
    service time with the raw WAN RTTs of the 5-minute probe window just before the
    measurement, on the same WAN timeline (base not separated, so that window's routing
    changes blur it), as in §4.2. Also returned: the true base RTT of each interval, to
    tell base tracking from the rest of the model's error.
    """
    load = 0.7 * scenario.saturation_rps
    duration = int(max(seconds, 30))
    traces = [np.zeros(duration), np.full(duration, load * 0.8), np.full(duration, load * 0.2)]
    fractions = np.eye(3)
    fractions[FRANKFURT] = [0.0, 1.0, 0.0]
    topology = scenario.topology(PROBE_WINDOW_S + duration, routing_changes=True)
    sim = RequestLevelSim(
        site_names=scenario.sites,
        backend=scenario.backend,
        rate_traces=traces,
        base_rtt_ms=lambda t_s: topology.base_rtt_matrix_ms(PROBE_WINDOW_S + t_s),
        residual_rtt_samples_ms=scenario.residual_pool_ms,
        slo_ms=SLO_MS,
        seed=seed,
    )
    samples, bases, true_bases = [], [], []
    last_base = FIG4_RTT_MS
    for _ in range(int(duration // 2.5)):
        stats = sim.run(2.5, fractions)
        pick = (stats.sample_src == FRANKFURT) & (stats.sample_dst == IRELAND)
        samples.append(stats.sample_response_ms[pick])
        bases.append(last_base)  # the curve Kurma used during this interval
        middle_s = PROBE_WINDOW_S + stats.start_s + stats.duration_s / 2
        true_bases.append(float(topology.base_rtt_matrix_ms(middle_s)[FRANKFURT, IRELAND]))
        mins = stats.min_response_ms[FRANKFURT, IRELAND]
        if np.isfinite(mins).any():
            last_base = round(float(mins[np.isfinite(mins)][-1]) - scenario.profile.min_service_ms)
    measured = np.concatenate(samples)
    service = scenario.profile.distribution_at(float(load))
    remote = service + scenario.residual_estimate
    weights = np.array([len(x) for x in samples], dtype=float)
    weights /= weights.sum()
    kurma = mixture([remote + float(b) for b in bases], weights)
    true_base = mixture([remote + b for b in true_bases], weights)
    link = topology.link("Frankfurt", "Ireland").base_rtt
    naive = service + _raw_probe_rtt(scenario, link, seed)
    window = link.at(np.arange(0.0, PROBE_WINDOW_S, 0.2))
    diagnostics = {
        "mean_true_base_ms": float(np.dot(weights, true_bases)),
        "mean_kurma_base_ms": float(np.dot(weights, bases)),
        "mean_window_base_ms": float(np.mean(window)),
        "true_base_over_slo_pct": 100 * float(true_base.tail_probability(SLO_MS)),
        "over_slo_pp_per_ms": 100
        * float(
            mixture([remote + (b + 0.5) for b in true_bases], weights).tail_probability(SLO_MS)
            - mixture([remote + (b - 0.5) for b in true_bases], weights).tail_probability(SLO_MS)
        ),
    }
    return measured, kurma, naive, last_base, diagnostics


def _raw_probe_rtt(scenario: Scenario, base_rtt, seed: int) -> LatencyDistribution:
    """Frankfurt-Ireland probe RTTs over the 5-minute window before the measurement (§6),
    base not removed: 3 probes every 200 ms on the link's ``base_rtt`` schedule."""
    rng = np.random.default_rng(seed)
    times = np.repeat(np.arange(0.0, PROBE_WINDOW_S, 0.2), 3)  # 3 probes every 200 ms, §6
    rtt = base_rtt.at(times) + rng.choice(scenario.residual_pool_ms, size=times.size)
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
        "in the simulator. The backend's three stall parameters were fitted to the paper's "
        "three anchors below (`calibrate_backend`, `docs/kurma.md`), so these matches hold by "
        "construction: they check the calibration, not Kurma."
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

    measured, kurma, naive, base, diagnostics = fig5_distributions(
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
    report.text(_fig5_text(ks_rows, diagnostics))
    report.table(
        "fig5_estimates",
        ks_rows,
        caption="Share over the 30 ms SLO and KS distance to the measured "
        "distribution. Base RTTs are not whole ms in the simulator; Kurma rounds them (§6), so "
        "a narrow distribution can be off by up to 0.5 ms.",
    )
    report.figure("fig5_cdf", _plot_fig5(measured, kurma, naive), "CDF of remote response time.")
    report.comparison(
        "fig5_vs_paper",
        [
            {
                "quantity": f"{row['estimate']}: share over the SLO",
                "ours": row["over_slo_pct"],
                "paper": None,
                "unit": "%",
                "note": "",
            }
            for row in ks_rows
        ]
        + [
            {
                "quantity": f"{row['estimate']}: KS distance to measured",
                "ours": row["ks_distance"],
                "paper": None,
                "unit": "",
                "note": "",
            }
            for row in ks_rows[1:]
        ],
        caption="The paper gives no numbers for Fig. 5.",
    )
    return {
        "accuracy": rows,
        "max_error_pp": float(np.max(np.abs(errors))),
        "fig5": ks_rows,
        "fig5_diagnostics": diagnostics,
    }


def _fig5_text(ks_rows: list[dict], d: dict) -> str:
    """Which estimate is closer to the measurement, on each measure, and why (issue 23)."""
    measured, kurma, naive = ks_rows
    gap_kurma = kurma["over_slo_pct"] - measured["over_slo_pct"]
    gap_naive = naive["over_slo_pct"] - measured["over_slo_pct"]
    slo_winner = "Kurma's" if abs(gap_kurma) <= abs(gap_naive) else "the non-separated"
    ks_winner = (
        "Kurma's" if kurma["ks_distance"] <= naive["ks_distance"] else "the non-separated one"
    )
    true_gap = d["true_base_over_slo_pct"] - measured["over_slo_pct"]
    return (
        f"On the share over the SLO, **{slo_winner} estimate is closer** to the measurement "
        f"({measured['over_slo_pct']:.2f}%): Kurma's is off by {gap_kurma:+.2f} pp, the "
        f"non-separated one by {gap_naive:+.2f} pp. On the whole distribution (KS distance) "
        f"{ks_winner} is closer ({kurma['ks_distance']:.3f} against "
        f"{naive['ks_distance']:.3f}). Why: both estimates share the profiled service time and "
        "differ only in the base RTT they carry. The share over the SLO is one point of the "
        f"distribution, which 1 ms of base RTT moves by {d['over_slo_pp_per_ms']:.2f} pp here; "
        "the KS distance is set by the narrow body, where a fraction of a ms counts. The base "
        f"RTT averaged {d['mean_true_base_ms']:.2f} ms during the measurement; Kurma's curves "
        f"used {d['mean_kurma_base_ms']:.2f} ms on average (the last value measured before "
        "each interval, rounded to the whole ms of its precomputed curves, §4.2 and §6), and "
        "the non-separated estimate carries the probe window's "
        f"{d['mean_window_base_ms']:.2f} ms. With the true base of every interval Kurma's "
        f"model gives {d['true_base_over_slo_pct']:.2f}% ({true_gap:+.2f} pp): what is left is "
        "the profiled service time's tail, whose stalls come in bursts, so one run's share "
        "over the SLO is itself noisy." + _window_note(slo_winner, true_gap, d)
    )


def _window_note(slo_winner: str, true_gap_pp: float, d: dict) -> str:
    if slo_winner == "Kurma's":
        return ""
    shift = d["mean_window_base_ms"] - d["mean_true_base_ms"]
    offsets = (shift < 0) == (true_gap_pp > 0)
    return (
        f" The probe window's base is {abs(shift):.2f} ms {'below' if shift < 0 else 'above'} "
        "the measurement's, which "
        + ("offsets" if offsets else "adds to")
        + f" the model's own {true_gap_pp:+.2f} pp: the non-separated estimate is nearer on "
        "this one number by the luck of its window, not because mixing the bases is right."
    )


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

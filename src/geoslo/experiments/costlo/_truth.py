"""CosTLO's estimator and ConfSelector on a ground truth they do not assume (issue 23).

The other sections' simulated clouds have the estimator's own structure: a redundant
request is independent of the first, relays cost nothing, size adds nothing, PUTs cross
GETs' network. Here the same world (same seed, same draws) also does what the model does
not assume (``geoslo.sim.costlo.GroundTruth``): slow episodes that a request re-sent to
the same copy over the same path meets again, relay overhead, a transfer rate that
varies, PUTs' own network. The estimator (§5.3) and ConfSelector (§5.2) are unchanged:
they are the model under test, and see only the agents' samples of the world they run on.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from geoslo.control.costlo import Configuration, GetTuple, PutTuple, Slo
from geoslo.control.costlo.search import PrefixContext
from geoslo.dist import LatencyDistribution
from geoslo.experiments.costlo._study import Study, build_study, inflation_ms
from geoslo.report import Report, paper_row, progress
from geoslo.sim.costlo import GroundTruth, get_operations, vm_fastest_ms

__all__ = ["ground_truth", "truth_text", "TRUTHS"]

LARGE_OBJECT_BYTES = 64.0 * 1024.0  # §7: one 64 KB block, the service latency of 1 KB
LARGE_PROBE = f"GET baseline, {LARGE_OBJECT_BYTES / 1024:.0f} KB object"
CIRCULAR, DEPARTING = "circular", "departing"
# The worlds, each from the same draws: the estimator's own structure, every departure,
# and (full run) each departure alone; "episodes only" relays at no cost at all.
TRUTHS = {
    CIRCULAR: None,
    DEPARTING: GroundTruth(),
    "episodes only": GroundTruth(
        relay_overhead=None,
        relay_mbps=None,
        throughput_sigma=0.0,
        put_network_body_factor=1.0,
        put_network_spike_factor=1.0,
    ),
    "all but episodes": GroundTruth(persistent_fraction=0.0),
}


@dataclass(frozen=True)
class Probe:
    """A configuration whose estimate is compared with what the world gives."""

    name: str
    operation: str  # "get" or "put"
    configuration: Configuration
    object_bytes: float = 1024.0


def probes(context: PrefixContext) -> list[Probe]:
    """The configurations that isolate each assumption, re-sent at the estimated p90 of
    the first request (a timeout ConfSelector would consider)."""
    get_t_ms = float(context.readers[0].get.first.quantile_ms(0.9))
    put_t_ms = float(context.put.first.quantile_ms(0.9))
    return [
        Probe("GET baseline", "get", Configuration()),
        Probe(
            "GET re-sent to the same copy",
            "get",
            Configuration(serving=GetTuple(1, 2), get_timeout_ms=get_t_ms),
        ),
        Probe(
            "GET relayed to 2 copies",
            "get",
            Configuration(serving=GetTuple(2, 1, True), get_timeout_ms=get_t_ms),
        ),
        Probe(
            "GET re-sent to the second region",
            "get",
            Configuration(second=GetTuple(1, 1), get_timeout_ms=get_t_ms),
        ),
        Probe(LARGE_PROBE, "get", Configuration(), LARGE_OBJECT_BYTES),
        Probe("PUT baseline", "put", Configuration()),
        Probe(
            "PUT re-sent to the same copy",
            "put",
            Configuration(put=PutTuple(1, 2), put_timeout_ms=put_t_ms),
        ),
    ]


def _measured_ms(study: Study, prefix: int, probe: Probe, seed: int) -> np.ndarray:
    if probe.operation == "put":
        return study.measure_put(prefix, probe.configuration, seed)
    serving, second = study.regions(prefix)
    n = study.settings.measured_operations
    sample = get_operations(
        study.world, prefix, serving, second, probe.configuration, n, seed, probe.object_bytes
    )
    return sample.latency_ms


def _estimated(context: PrefixContext, probe: Probe) -> LatencyDistribution:
    if probe.operation == "put":
        return context.put.distribution(probe.configuration)
    return context.readers[0].get.distribution(probe.configuration)


def estimate_rows(study: Study, truth: str, prefixes: list[int]) -> list[dict]:
    """Per probe, the estimate's relative error at the median and the p99 over prefixes
    (estimated / measured - 1: negative is an under-estimate)."""
    errors: dict[str, list[tuple[float, float]]] = {}
    for i in prefixes:
        context = study.context(i, Slo())
        for k, probe in enumerate(probes(context)):
            measured = _measured_ms(study, i, probe, study.seed + 53 * i + k)
            estimate = _estimated(context, probe)
            p50_ms, p99_ms = np.percentile(measured, [50, 99])
            errors.setdefault(probe.name, []).append(
                (
                    float(estimate.quantile_ms(0.5)) / p50_ms - 1.0,
                    float(estimate.quantile_ms(0.99)) / p99_ms - 1.0,
                )
            )
    rows = []
    for name, pairs in errors.items():
        p50, p99 = np.array(pairs).T
        rows.append(
            {
                "truth": truth,
                "probe": name,
                "median_p50_error_pct": 100.0 * float(np.median(p50)),
                "median_p99_error_pct": 100.0 * float(np.median(p99)),
                "median_abs_p99_error_pct": 100.0 * float(np.median(np.abs(p99))),
            }
        )
    return rows


def vm_rows(study: Study, truth: str, prefixes: list[int], draws: int = 100_000) -> list[dict]:
    """Fig. 15's validation on this world: 8 concurrent GETs to one object from a VM in
    each serving region, the estimate's p99 against 100K draws."""
    rows = []
    for j in sorted({study.regions(i)[0] for i in prefixes}):
        rng = np.random.default_rng(study.seed + 401 * j)
        truth_ms = vm_fastest_ms(study.world.behaviours[j], "get", (8,), draws, rng)
        measured_ms = float(np.percentile(truth_ms, 99))
        estimated_ms = float(study.model(j).concurrent_counts("get", (8,)).quantile_ms(0.99))
        rows.append(
            {
                "truth": truth,
                "region": study.world.regions[j].name,
                "measured_p99_ms": measured_ms,
                "estimated_p99_ms": estimated_ms,
                "error_pct": 100.0 * (estimated_ms / measured_ms - 1.0),
            }
        )
    return rows


def selection_rows(study: Study, truth: str, prefixes: list[int]) -> list[dict]:
    """ConfSelector on this world's agents, its choices measured on this world (Fig. 13);
    ``serving_resend_fraction``: choices that send more than one request over the serving
    path (where episodes are shared)."""
    rows = []
    for slo_ms in study.settings.truth_slos_ms:
        measured, estimated, cost, base, same_path = [], [], 0.0, 0.0, []
        for i in prefixes:
            selection = study.select(i, Slo(get_ms=slo_ms))
            same_path.append(selection.configuration.serving.requests > 1)
            latencies = study.measure(i, selection.configuration, study.seed + 61 * i + 1)
            measured.append(inflation_ms(latencies, study.baseline(i)))
            estimated.append(selection.get.inflation_ms)
            cost += selection.cost.total_usd
            base += selection.baseline_cost.total_usd
        measured = np.array(measured)
        rows.append(
            {
                "truth": truth,
                "slo_ms": slo_ms,
                "met_fraction": float(np.mean(measured <= slo_ms)),
                "within_5ms_fraction": float(np.mean(measured <= slo_ms + 5.0)),
                "median_measured_ms": float(np.median(measured)),
                "median_measured_minus_estimated_ms": float(np.median(measured - estimated)),
                "total_overhead_pct": 100.0 * (cost / base - 1.0),
                "serving_resend_fraction": float(np.mean(same_path)),
            }
        )
    return rows


def ground_truth(study: Study, report: Report, paper: dict) -> dict:
    """The section: the estimator validated, and the selection run, on each world."""
    settings = study.settings
    prefixes = list(study.prefixes)[: settings.truth_prefixes]
    names = list(TRUTHS) if settings.truth_ablations else [CIRCULAR, DEPARTING]
    estimates, vm, selections = [], [], []
    for name in progress(names, label="ground truth the model does not assume"):
        world = study if TRUTHS[name] is None else build_study(settings, study.seed, TRUTHS[name])
        estimates += estimate_rows(world, name, prefixes)
        vm += vm_rows(world, name, prefixes)
        selections += selection_rows(world, name, prefixes)
    departing = TRUTHS[DEPARTING]
    results = {
        "prefixes": len(prefixes),
        "persistent_fraction": departing.persistent_fraction,
        "mean_episode_ms": departing.mean_episode_ms,
        "estimate_rows": estimates,
        "vm_rows": vm,
        "selection_rows": selections,
    }
    results |= summary(results)
    report.section("A ground truth the model does not assume (issue 23)", truth_text(results))
    report.table("truth_estimates", estimates, caption="Estimate / measured - 1, over prefixes")
    report.table("truth_vm", vm, caption="8 concurrent GETs to one object from a VM (Fig. 15)")
    report.table("truth_selection", selections, caption="ConfSelector's choices, measured")
    report.comparison("truth_vs_paper", _comparison_rows(results, paper))
    return results


def _row(rows: list[dict], **match) -> dict:
    return next(r for r in rows if all(r[k] == v for k, v in match.items()))


def summary(results: dict) -> dict:
    """The numbers the checks and the text read, per truth."""
    out: dict = {"per_truth": {}}
    slo_ms = results["selection_rows"][0]["slo_ms"]
    truths = list(dict.fromkeys(r["truth"] for r in results["estimate_rows"]))
    for t in truths:
        rows = [r for r in results["estimate_rows"] if r["truth"] == t]
        vm = [r["error_pct"] for r in results["vm_rows"] if r["truth"] == t]
        chosen = _row(results["selection_rows"], truth=t, slo_ms=slo_ms)
        out["per_truth"][t] = {
            "median_abs_p99_error_pct": float(
                np.median([r["median_abs_p99_error_pct"] for r in rows])
            ),
            "median_abs_p50_error_pct": float(
                np.median([abs(r["median_p50_error_pct"]) for r in rows])
            ),
            "resent_p99_error_pct": _row(rows, probe="GET re-sent to the same copy")[
                "median_p99_error_pct"
            ],
            "vm_median_abs_p99_error_pct": float(np.median(np.abs(vm))),
            "slo_ms": slo_ms,
            "met_fraction": chosen["met_fraction"],
            "within_5ms_fraction": chosen["within_5ms_fraction"],
            "median_measured_ms": chosen["median_measured_ms"],
            "measured_minus_estimated_ms": chosen["median_measured_minus_estimated_ms"],
            "total_overhead_pct": chosen["total_overhead_pct"],
        }
    return out


def _comparison_rows(results: dict, paper: dict) -> list[dict]:
    rows = []
    for t, s in results["per_truth"].items():
        if t not in (CIRCULAR, DEPARTING):
            continue
        rows += [
            paper_row(
                paper,
                "fig15_median_region_p99_error_pct",
                s["vm_median_abs_p99_error_pct"],
                f"{t} truth: median serving region, |p99 error| of 8 GETs to one object (%)",
            ),
            _ours(f"{t} truth: median |p99 error| over probes (%)", s["median_abs_p99_error_pct"]),
            _ours(f"{t} truth: median |p50 error| over probes (%)", s["median_abs_p50_error_pct"]),
            _ours(
                f"{t} truth: p99 error, GET re-sent to the same copy (%)", s["resent_p99_error_pct"]
            ),
            _ours(
                f"{t} truth: SLO {s['slo_ms']:.0f} ms met, measured (fraction)", s["met_fraction"]
            ),
            _ours(
                f"{t} truth: SLO {s['slo_ms']:.0f} ms, measured - estimated inflation (ms)",
                s["measured_minus_estimated_ms"],
            ),
            _ours(
                f"{t} truth: SLO {s['slo_ms']:.0f} ms, cost overhead (%)",
                s["total_overhead_pct"],
            ),
        ]
    return rows


def _ours(quantity: str, value: float) -> dict:
    return {"quantity": quantity, "ours": value, "paper": None, "note": "issue 23; ours"}


WHY = {
    "GET baseline": "one request, nothing re-sent: the marginals the agents measured",
    "GET re-sent to the same copy": (
        "the re-sent request crosses the same path to the same copy and meets the slow "
        "episode that delayed the first; the estimator draws it afresh"
    ),
    "GET relayed to 2 copies": (
        "the relay VM's processing, its CPU stalls and store-and-forward are in no agent "
        "measurement, and the estimator adds nothing for them (§4.2 'some overhead')"
    ),
    "GET re-sent to the second region": (
        "another path to other servers: independent, as the estimator assumes"
    ),
    LARGE_PROBE: (
        "the object's transfer is in neither a ping nor the agents' 1 KB GETs; both worlds "
        "add it (the departing one with a rate that varies), the estimator has no size term "
        "(§7 only sketches one)"
    ),
    "PUT baseline": "the PUT's own data-centre network, which the estimator takes from GETs",
    "PUT re-sent to the same copy": (
        "the re-sent PUT meets the copy's slow episode that delayed the first"
    ),
}


def _off_pct(row: dict) -> float:
    """How far a probe's estimate is off: the larger of its median and p99 errors."""
    return max(abs(row["median_p50_error_pct"]), row["median_abs_p99_error_pct"])


def truth_text(results: dict, tolerance_pct: float = 5.0) -> str:
    """Where the model holds and where it breaks, every number from ``results``: a probe
    breaks when its estimate is off by more than ``tolerance_pct`` (§6.2's accuracy) at
    the median or the p99 on the departing truth."""
    c, d = results["per_truth"][CIRCULAR], results["per_truth"][DEPARTING]
    by = {(r["truth"], r["probe"]): r for r in results["estimate_rows"]}
    lines = []
    for (truth, name), row in by.items():
        if truth != DEPARTING:
            continue
        circ = by[(CIRCULAR, name)]
        verdict = "holds"
        if _off_pct(row) > tolerance_pct:
            also = _off_pct(circ) > tolerance_pct
            verdict = "**breaks**" + (" (on the circular truth too)" if also else "")
        lines.append(
            f"* {name}: {verdict}; p99 {row['median_p99_error_pct']:+.1f}% (circular "
            f"{circ['median_p99_error_pct']:+.1f}%), median {row['median_p50_error_pct']:+.1f}% "
            f"(circular {circ['median_p50_error_pct']:+.1f}%): {WHY.get(name, '')}."
        )
    ablations = [
        f"{t}: median |p99 error| {s['median_abs_p99_error_pct']:.1f}%, 8 GETs "
        f"{s['vm_median_abs_p99_error_pct']:.1f}%, SLO met on {s['met_fraction']:.0%}"
        for t, s in results["per_truth"].items()
        if t not in (CIRCULAR, DEPARTING)
    ]
    met = {(r["truth"], r["slo_ms"]): r["met_fraction"] for r in results["selection_rows"]}
    per_slo = [
        f"{r['slo_ms']:.0f} ms: met on {r['met_fraction']:.0%} "
        f"(circular {met[(CIRCULAR, r['slo_ms'])]:.0%}), "
        f"{r['serving_resend_fraction']:.0%} of the choices re-send over the serving path"
        for r in results["selection_rows"]
        if r["truth"] == DEPARTING
    ]
    ablation_text = (
        f" Each departure alone: {'; '.join(ablations)}."
        if ablations
        else " (The full run also runs each departure alone.)"
    )
    return f"""\
The other sections run on simulated clouds built with the estimator's own structure, so their
agreement (a median |p99 error| of {c["median_abs_p99_error_pct"]:.1f}% over the probes below,
{c["vm_median_abs_p99_error_pct"]:.1f}% for Fig. 15's 8 GETs against the paper's 5%) shows
self-consistency only. The *departing* truth is the same world (same seed and draws) doing
what the model does not assume: {results["persistent_fraction"]:.0%} of the paths' and storage
servers' isolated spikes become slow episodes of {results["mean_episode_ms"] / 1e3:g} s on
average (same rate and size), so a request re-sent after a timeout
to the same copy over the same path meets the episode that delayed the first, and one
object's replicas meet it together; a relayed message pays the VM's processing (with stalls)
and stores and forwards the object; a path's transfer rate varies per operation; PUTs have
their own data-centre network. The estimator and ConfSelector are the paper's, unchanged,
fed by the agents' samples of that world. Estimate / measured - 1 at each probe, median over
{results["prefixes"]} prefixes (negative: the estimate is too low); a probe breaks when its
estimate is off by more than {tolerance_pct:g}% (§6.2's accuracy) at the median or the p99:

{chr(10).join(lines)}

Fig. 15's validation (8 concurrent GETs to one object from a VM) errs by
{d["vm_median_abs_p99_error_pct"]:.1f}% in the median serving region on the departing truth
(circular {c["vm_median_abs_p99_error_pct"]:.1f}%): the model gives each replica its own
service draw, and episodes are shared by the replicas.

**The controller's result.** At an SLO of {d["slo_ms"]:.0f} ms, ConfSelector's choices meet it
on {c["met_fraction"]:.0%} of the prefixes on the circular truth and {d["met_fraction"]:.0%} on
the departing one (within 5 ms: {c["within_5ms_fraction"]:.0%} and
{d["within_5ms_fraction"]:.0%}); the measured inflation exceeds the estimate by
{c["measured_minus_estimated_ms"]:+.1f} ms and {d["measured_minus_estimated_ms"]:+.1f} ms at the
median prefix, at {c["total_overhead_pct"]:.1f}% and {d["total_overhead_pct"]:.1f}% extra cost:
the selector cannot pay for what its model does not see. Per SLO on the departing truth:
{"; ".join(per_slo)}; a choice that hedges in the second region (another path, other
servers) is what the estimator predicts well.{ablation_text}

The departing truth is ours as well: its rates, durations and sizes are not measured, and §2
found S3's and Azure's spikes isolated in time in 2014, which is the assumption the estimator
rests on. It shows where the model is fragile, not how today's clouds behave.
"""

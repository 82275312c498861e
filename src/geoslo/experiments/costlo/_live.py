"""CosTLO's loop on real components: observe, model, decide and act against real Redis
servers on loopback (§5.2-§5.3, §4.3).

1. A two-region `CostloCluster`: each region has N Redis servers; each object has one copy
   per server of the serving region.
2. Storage stalls: every serving-region server is held by ``DEBUG SLEEP`` at Poisson times,
   for lognormal durations. These are isolated latency spikes inside the storage service
   (§2). The real servers' queues turn them into the tail.
3. The agent: pairs of concurrent GETs from this process, to one object and to two
   objects. Loopback has no network to speak of and Redis has no request log, so a
   request's whole latency counts as service latency. The storage model is inferred from
   these pairs only (§5.3).
4. ConfSelector, with the SLO at half the measured baseline inflation, over the copies
   and requests per copy of the serving region.
5. The client library (`CostloClient`) replays an open-loop Poisson GET load under the
   baseline, under the selection, and under two requests to one copy. The last is what
   §4.3 predicts to be useless when an object has one replica.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from geoslo.control.costlo import (
    Configuration,
    GetTuple,
    PrefixWorkload,
    SearchLimits,
    Slo,
)
from geoslo.control.costlo.decide import prefix_context
from geoslo.control.costlo.estimate import RegionView
from geoslo.control.costlo.search import select_configuration
from geoslo.dist import LatencyDistribution
from geoslo.live._cgroup import cpu_priority
from geoslo.live.costlo import (
    SERVING,
    CostloClient,
    CostloCluster,
    StallSettings,
    agent_pairs,
    fill_objects,
    stall_server,
)
from geoslo.models import infer_storage_model
from geoslo.models._storage_service import DEFAULT_STEP_MS
from geoslo.report import Report
from geoslo.topology import cloud_regions

__all__ = ["LiveSettings", "run_live", "live_report"]


@dataclass(frozen=True)
class LiveSettings:
    """Sizes of the live run; ``quick()`` for CI."""

    servers_per_region: int = 3
    objects: int = 300
    stall_rate_per_s: float = 2.0  # per server: about 4% of its time stalled
    stall_median_ms: float = 20.0
    agent_pairs: int = 2_000  # of each kind
    pairs_per_s: float = 200.0
    rate_rps: float = 150.0  # GETs per second during a replay
    replay_s: float = 30.0

    @classmethod
    def quick(cls) -> LiveSettings:
        return cls(agent_pairs=800, replay_s=12.0)


def run_live(settings: LiveSettings, state_dir: Path, seed: int = 1, progress=print) -> dict:
    """Start the cluster, run the loop, stop every process it started; the results. The
    cluster and the client run in a CPU cgroup weighted above the machine's other work
    (`geoslo.live._cgroup`), so that a busy machine does not add to the measured tail."""
    with cpu_priority("costlo-live") as cpu_note:
        cluster = CostloCluster.up(Path(state_dir), servers_per_region=settings.servers_per_region)
        try:
            results = asyncio.run(_run(cluster, settings, seed, progress))
        finally:
            cluster.down()
    return {**results, "cpu": cpu_note}


async def _run(cluster: CostloCluster, settings: LiveSettings, seed: int, progress) -> dict:
    ports = tuple(cluster.servers[SERVING])
    keys = [f"object-{k}" for k in range(settings.objects)]
    await fill_objects(cluster.direct_regions().serving, keys)
    stop = asyncio.Event()
    spikes = StallSettings(settings.stall_rate_per_s, settings.stall_median_ms)
    stalls = asyncio.gather(
        *(stall_server(port, spikes, seed + k, stop) for k, port in enumerate(ports))
    )
    try:
        progress("costlo live: agent pairs")
        measured = await agent_pairs(
            cluster.direct_regions().serving, keys, settings.agent_pairs, settings.pairs_per_s, seed
        )
        model = infer_storage_model(measured)
        runs = {}
        progress("costlo live: baseline replay")
        runs["baseline"] = await _replay(cluster, Configuration(), keys, settings, seed + 1)
        baseline_ms = runs["baseline"]["latency_ms"]
        base_inflation = _inflation_ms(baseline_ms, baseline_ms)
        slo_ms = base_inflation / 2.0
        selection = _select(model, slo_ms, settings)
        progress("costlo live: CosTLO replay")
        runs["costlo"] = await _replay(cluster, selection.configuration, keys, settings, seed + 2)
        progress("costlo live: two requests to one copy")
        same_copy = Configuration(serving=GetTuple(1, 2))
        runs["same_copy"] = await _replay(cluster, same_copy, keys, settings, seed + 3)
    finally:
        stop.set()
        await stalls
    return {
        "inferred": {
            "get_replicas": model.get_replicas,
            "shared_network": model.shared_network,
        },
        "baseline_inflation_ms": base_inflation,
        "slo_ms": slo_ms,
        "selection": selection,
        "rows": [_row(name, run, baseline_ms) for name, run in runs.items()],
        "estimated_inflation_ms": selection.get.inflation_ms,
    }


def _select(model, slo_ms: float, settings: LiveSettings):
    """ConfSelector for the local client: no Internet between it and the region."""
    prices = cloud_regions()[0].prices  # an S3-like region's, for the costs
    view = RegionView(
        "serving", model, LatencyDistribution.point(0.0, DEFAULT_STEP_MS), prices, 1000.0
    )
    workload = PrefixWorkload(gets_per_month=settings.rate_rps * 730 * 3600)
    limits = SearchLimits(max_copies=settings.servers_per_region, allow_second_region=False)
    return select_configuration(prefix_context(workload, view, None, Slo(get_ms=slo_ms), limits))


async def _replay(
    cluster: CostloCluster, configuration: Configuration, keys, settings: LiveSettings, seed: int
) -> dict:
    """Open-loop Poisson GETs for ``replay_s`` under ``configuration``."""
    rng = np.random.default_rng(seed)
    async with CostloClient(configuration, cluster.regions(), seed=seed) as client:
        loop = asyncio.get_running_loop()
        start = loop.time()
        tasks, at = [], 0.0
        while at < settings.replay_s:
            at += rng.exponential(1.0 / settings.rate_rps)
            await asyncio.sleep(max(0.0, start + at - loop.time()))
            key = keys[int(rng.integers(len(keys)))]
            tasks.append(asyncio.ensure_future(client.get(key)))
        found = await asyncio.gather(*tasks)
    records = client.records
    return {
        "latency_ms": np.array([r.latency_ms for r in records]),
        "storage_requests": np.array([r.storage_requests for r in records]),
        "redundant": np.array([r.redundant for r in records]),
        "missing": sum(f is None for f in found),
    }


def _inflation_ms(latencies_ms: np.ndarray, baseline_ms: np.ndarray) -> float:
    return float(np.percentile(latencies_ms, 99) - np.median(baseline_ms))


def _row(name: str, run: dict, baseline_ms: np.ndarray) -> dict:
    return {
        "configuration": name,
        "gets": int(run["latency_ms"].size),
        "p50_ms": float(np.median(run["latency_ms"])),
        "p99_ms": float(np.percentile(run["latency_ms"], 99)),
        "inflation_ms": _inflation_ms(run["latency_ms"], baseline_ms),
        "redundant_fraction": float(np.mean(run["redundant"])),
        "storage_requests_per_get": float(np.mean(run["storage_requests"])),
        "not_found": int(run["missing"]),
    }


def live_report(settings: LiveSettings, out_dir: Path, seed: int = 1, progress=print) -> Path:
    """Run the live loop in ``out_dir/run`` and write its report; the path of index.md."""
    out_dir = Path(out_dir)
    results = run_live(settings, out_dir / "run", seed, progress)
    selection = results["selection"]
    c = selection.configuration
    report = Report("CosTLO on real components", LIVE_INTRO)
    report.section(
        "Observe, model, decide, act on real Redis servers",
        f"Inferred from {settings.agent_pairs} open-loop pairs of each kind: GETs to one object "
        f"spread over {results['inferred']['get_replicas']} replica(s). Measured baseline "
        f"inflation (p99 minus median) {results['baseline_inflation_ms']:.1f} ms; SLO set to "
        f"half of it, {results['slo_ms']:.1f} ms. ConfSelector chose {c.serving.copies} "
        f"copies x {c.serving.requests_per_copy} request(s), timeout {c.get_timeout_ms:.0f} ms, "
        f"probability {c.get_probability:.0%}; its estimate of the inflation: "
        f"{results['estimated_inflation_ms']:.1f} ms.",
    )
    report.table("live", results["rows"], caption="Open-loop GET replays on the live cluster")
    report.text(
        f"{settings.servers_per_region} Redis servers per region, each stalled by DEBUG SLEEP "
        f"at {settings.stall_rate_per_s:g}/s for about {settings.stall_median_ms:g} ms "
        f"(lognormal); {settings.rate_rps:g} GETs/s for {settings.replay_s:g} s per replay; "
        f"seed {seed}; the cluster and the client ran {results['cpu']}."
    )
    report.checks(check_live(results), "The live loop's results, measured on this run.")
    report.data("live_results", {k: v for k, v in results.items() if k != "selection"})
    return report.write(out_dir)


def check_live(results: dict) -> dict[str, bool]:
    """The live loop's acceptance checks: the stalls make a tail, CosTLO's choice cuts the
    measured inflation for few extra requests, two requests to one copy do not (§2.2)."""
    rows = {r["configuration"]: r for r in results["rows"]}
    baseline, costlo, same = rows["baseline"], rows["costlo"], rows["same_copy"]
    return {
        "the injected stalls make a tail (baseline inflation over 5 ms)": (
            baseline["inflation_ms"] > 5.0
        ),
        "CosTLO's configuration cuts the measured inflation to 0.6 of the baseline or less": (
            costlo["inflation_ms"] <= 0.6 * baseline["inflation_ms"]
        ),
        "... for under 1.5 storage requests per GET": costlo["storage_requests_per_get"] < 1.5,
        "two requests to one copy keep at least half the baseline's inflation": (
            same["inflation_ms"] >= 0.5 * baseline["inflation_ms"]
        ),
        "every GET found its object": costlo["not_found"] == 0 and baseline["not_found"] == 0,
    }


LIVE_INTRO = (
    "CosTLO's whole loop against real processes on this machine. Real Redis servers form a "
    "region; stalls injected with DEBUG SLEEP are the storage service's isolated latency "
    "spikes. An agent measures pairs of concurrent GETs, the storage model is inferred from "
    "them, and ConfSelector picks a configuration. The client library (geoslo.live.costlo) "
    "then replays an open-loop load under it. No simulator is involved: every latency below "
    "was measured."
)

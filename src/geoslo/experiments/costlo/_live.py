"""CosTLO's loop on real components: observe, model, decide and act against real storage
servers (§5.2-§5.3, §4.3): Redis servers on loopback (``engine="redis"``), or S3 gateways
(versitygw) in several regions behind the toxiproxy delay injector, each region in its own
network namespace as root (``engine="s3"``).

1. A `CostloCluster`: each region has N servers; each object has one copy per server of
   each region. On Redis one region is measured; on S3 every one of ``regions`` (IBM Cloud
   regions, the RTTs of its matrix), and the closest other by the measured pings serves
   as the second region (§5.2).
2. Storage stalls: the servers are stalled at Poisson times for lognormal durations (DEBUG
   SLEEP on Redis; the process stopped on S3), at a rate of each region's own. These are
   isolated latency spikes inside the storage service (§2); the real servers' queues turn
   them into the tail.
3. The agent: pairs of concurrent GETs from this process, to one object and to two
   objects, timed at the namespace boundary (the region's own address, not through the
   injector), so a request's whole latency counts as service latency; the storage model
   is inferred from these pairs only (§5.3). On S3 the agent also sends each of a series
   of GETs both through the injector and at the boundary at once: the difference is the
   region's ping.
4. ConfSelector over the copies and requests per copy of the serving region (and, on S3,
   the second region), at each SLO of a sweep: fractions of the measured baseline
   inflation, half of it the headline (Fig. 16 sweeps the SLO the same way).
5. The client library (`CostloClient`) replays an open-loop Poisson GET load under the
   baseline, under each distinct selection, and under two requests to one copy. The
   last is what §4.3 predicts to be useless when an object has one replica.
6. On S3, the serving region then gets ``slowdown_factor`` x slower at the injector during
   each of three replays: the baseline, the selection, and the selection with the hedge
   budget (its extra requests, and its p99 against the baseline's); then every region
   does (a store-wide slowdown, where a redundant request meets the same slowness) during
   a replay of the baseline and one of the budgeted selection (issue 38, item 7).
"""

from __future__ import annotations

import asyncio
import functools
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from geoslo.control.costlo import (
    Configuration,
    GetTuple,
    HedgeBudget,
    PrefixWorkload,
    SearchLimits,
    Slo,
)
from geoslo.control.costlo._budget import DEFAULT_BUCKETS
from geoslo.control.costlo.decide import prefix_context
from geoslo.control.costlo.estimate import RegionView
from geoslo.control.costlo.search import expected_get_requests, select_configuration
from geoslo.dist import LatencyDistribution
from geoslo.live._cgroup import cpu_priority
from geoslo.live.costlo import (
    CostloClient,
    CostloCluster,
    Regions,
    StallSettings,
    StoreUnavailable,
    agent_pairs,
    agent_pings,
    fill_objects,
    region_rtts,
    stall_region,
)
from geoslo.models import infer_storage_model
from geoslo.models._storage_service import DEFAULT_STEP_MS
from geoslo.report import Report
from geoslo.topology import cloud_regions

__all__ = ["LiveSettings", "run_live", "live_report", "budget_excess"]


HEADLINE_SLO_FRACTION = 0.5  # the SLO at half the baseline's inflation (§1: "halve")


@dataclass(frozen=True)
class LiveSettings:
    """Sizes of the live run; ``quick()`` for CI."""

    engine: str = "redis"  # or "s3"
    servers_per_region: int = 3
    objects: int = 300
    stall_rate_per_s: float = 2.0  # per server: about 4% of its time stalled
    stall_median_ms: float = 20.0
    agent_pairs: int = 2_000  # of each kind
    pairs_per_s: float = 200.0
    rate_rps: float = 150.0  # GETs per second during a replay
    replay_s: float = 30.0
    # engine "s3": the regions, the serving one first (IBM Cloud regions: the clients sit
    # serving_rtt_ms from the first, and the others are its RTT to them away), each with
    # its servers' stall rate; the slowdown and the budget
    regions: tuple[tuple[str, float], ...] = (
        ("toronto", 2.0),
        ("montreal", 0.5),
        ("washington-dc", 1.0),
    )
    serving_rtt_ms: float = 2.0
    slowdown_factor: float = 10.0
    slowdown_replay_s: float = 30.0  # each replay during a slowdown (its p99 is compared)
    budget: HedgeBudget = field(default_factory=HedgeBudget)  # Finagle's defaults
    # the SLOs, as fractions of the measured baseline inflation; the first is the headline
    slo_fractions: tuple[float, ...] = (HEADLINE_SLO_FRACTION, 0.4, 0.6, 0.75)

    @classmethod
    def of(cls, engine: str = "redis", quick: bool = False) -> LiveSettings:
        """The settings of ``engine``'s run (``quick``: for CI). On S3 the client's GETs
        and the agent's pairs are fewer: the gateways, toxiproxy and a botocore client per
        request share this machine. 150 GETs/s with a selection of 5 requests each
        saturated two cores (the median doubled, the p99 went past 100 ms), and pairs at
        200/s of each kind (800 GETs/s) measured a single GET's median at 9.6 ms against
        2.8 ms for GETs alone at 40/s, and 2 replicas where there is one; at 20/s, 6.4 ms
        and one replica."""
        quick_sweep = (HEADLINE_SLO_FRACTION, 0.75)
        settings = (
            cls(
                engine=engine,
                agent_pairs=800,
                replay_s=12.0,
                slo_fractions=quick_sweep,
                slowdown_replay_s=24.0,
            )  # fmt: skip
            if quick
            else cls(engine)
        )
        if engine != "s3":
            return settings
        pairs = 400 if quick else settings.agent_pairs
        return replace(settings, rate_rps=S3_RATE_RPS, agent_pairs=pairs, pairs_per_s=40.0)

    @classmethod
    def quick(cls, engine: str = "redis") -> LiveSettings:
        return cls.of(engine, quick=True)


S3_RATE_RPS = 40.0


def run_live(settings: LiveSettings, state_dir: Path, seed: int = 1, progress=print) -> dict:
    """Start the cluster, run the loop, stop every process it started; the results. The
    cluster and the client run in a CPU cgroup weighted above the machine's other work
    (`geoslo.live._cgroup`), so that a busy machine does not add to the measured tail."""
    regions = None
    if settings.engine == "s3":
        names = ",".join(name for name, _ in settings.regions)
        regions = region_rtts(names, settings.serving_rtt_ms)
    with cpu_priority("costlo-live") as cpu_note:
        cluster = CostloCluster.up(
            Path(state_dir),
            servers_per_region=settings.servers_per_region,
            regions=regions,
            engine=settings.engine,
        )
        try:
            results = asyncio.run(_run(cluster, settings, seed, progress))
        finally:
            cluster.down()
    return {**results, "cpu": cpu_note}


async def _run(cluster: CostloCluster, settings: LiveSettings, seed: int, progress) -> dict:
    keys = [f"object-{k}" for k in range(settings.objects)]
    s3 = settings.engine == "s3"
    stall_rates = dict(settings.regions) if s3 else {cluster.serving: settings.stall_rate_per_s}
    for region in stall_rates:
        await fill_objects(cluster.direct(region), keys)
    stop = asyncio.Event()
    stalls = []
    for k, (region, rate_per_s) in enumerate(stall_rates.items()):
        spikes = StallSettings(rate_per_s, settings.stall_median_ms)
        stalls += stall_region(cluster, region, spikes, seed + 100 * k, stop)
    stalling = asyncio.gather(*stalls)
    try:
        views = await _observe(cluster, list(stall_rates), keys, settings, seed, progress)
        # §5.2: the second region is the closest other one, by the pings measured
        others = [r for r in views if r != cluster.serving]
        second = min(others, key=lambda r: float(np.median(views[r][1])), default=None)
        regions = cluster.regions(second)
        progress("costlo live: baseline replay")
        runs = {"baseline": await _replay(regions, Configuration(), keys, settings, seed + 1)}
        baseline_ms = runs["baseline"]["latency_ms"]
        cap = client_request_cap(runs["baseline"]["client_cpu_ms_per_request"], settings.rate_rps)
        choose = functools.partial(
            _select, views, cluster.serving, second, settings=settings, max_requests_per_get=cap
        )
        sweep = await _sweep(choose, regions, runs, keys, settings, seed + 10, progress)
        selection = sweep[0]["selection"]
        progress("costlo live: two requests to one copy")
        same_copy = Configuration(serving=GetTuple(1, 2))
        runs["same_copy"] = await _replay(regions, same_copy, keys, settings, seed + 3)
        if s3:
            progress(f"costlo live: a {settings.slowdown_factor:g}x slowdown of the serving region")
            selected = selection.configuration
            runs |= await _slowdown(cluster, regions, selected, keys, settings, seed + 4)
    finally:
        stop.set()
        await stalling
    model = views[cluster.serving][0]
    return {
        "inferred": {
            "get_replicas": model.get_replicas,
            "shared_network": model.shared_network,
        },
        "pings_ms": {r: float(np.median(ping)) for r, (_, ping) in views.items()},
        "rtts_ms": cluster.rtts_ms,
        "second_region": second,
        "client_cpu_ms_per_request": runs["baseline"]["client_cpu_ms_per_request"],
        "max_requests_per_get": cap,
        "baseline_inflation_ms": _inflation_ms(baseline_ms, baseline_ms),
        "slo_ms": sweep[0]["slo_ms"],
        "selection": selection,
        "rows": [_row(name, run, baseline_ms, settings) for name, run in runs.items()],
        "estimated_inflation_ms": selection.get.inflation_ms,
        "sweep": [_sweep_row(point, runs[point["run"]], baseline_ms) for point in sweep],
    } | _budget_p99_interval(runs, seed)


P99_FACTOR, P99_SLACK_MS = 1.2, 2.0  # "no worse": at most 20% + 2 ms over the baseline's p99
RESAMPLES = 2_000


def p99_excess_interval_ms(
    candidate_ms: np.ndarray, reference_ms: np.ndarray, seed: int, resamples: int = RESAMPLES
) -> tuple[float, float]:
    """95% bootstrap interval of p99(candidate) - (P99_FACTOR p99(reference) + P99_SLACK_MS),
    each replay's GETs resampled: a p99 of ~1,000 GETs rests on its ten slowest, and one
    replay's p99 moved by 15% between runs on the same code."""
    rng = np.random.default_rng(seed)
    candidate, reference = np.asarray(candidate_ms), np.asarray(reference_ms)

    def p99s(values: np.ndarray) -> np.ndarray:
        draws = rng.integers(0, values.size, size=(resamples, values.size))
        return np.percentile(values[draws], 99, axis=1)

    excess = p99s(candidate) - (P99_FACTOR * p99s(reference) + P99_SLACK_MS)
    low, high = np.percentile(excess, [2.5, 97.5])
    return float(low), float(high)


def _budget_p99_interval(runs: dict, seed: int) -> dict:
    """Each budgeted slowed replay's p99 over the allowance, as an interval (S3 only)."""
    found = {}
    for key, (candidate, reference) in {
        "budget_p99_excess_interval_ms": ("costlo_budget_slowed", "baseline_slowed"),
        "store_budget_p99_excess_interval_ms": (
            "costlo_budget_store_slowed", "baseline_store_slowed",
        ),
    }.items():  # fmt: skip
        if candidate in runs:
            interval = p99_excess_interval_ms(
                runs[candidate]["latency_ms"], runs[reference]["latency_ms"], seed
            )
            found[key] = list(interval)
    return found


async def _observe(
    cluster: CostloCluster, regions: list[str], keys, settings: LiveSettings, seed: int, progress
) -> dict[str, tuple]:
    """The agents (§5.2): each region's storage model, inferred from pairs timed at its
    boundary, and (S3) the clients' pings to it; ``{region: (model, pings_ms)}``."""
    views = {}
    for region in regions:
        progress(f"costlo live: agent pairs ({region})")
        pairs = await agent_pairs(
            cluster.direct(region), keys, settings.agent_pairs, settings.pairs_per_s, seed
        )
        s3 = settings.engine == "s3"
        through, direct = cluster.reach(region), cluster.direct(region)
        ping = await agent_pings(through, direct, keys, 200) if s3 else np.zeros(1)
        views[region] = (infer_storage_model(pairs), ping)
    return views


async def _sweep(
    choose, regions: Regions, runs: dict, keys, settings: LiveSettings, seed: int, progress
) -> list[dict]:
    """ConfSelector at each SLO of ``settings.slo_fractions`` (of the baseline's measured
    inflation), and a replay of each distinct selection (added to ``runs``)."""
    baseline_ms = runs["baseline"]["latency_ms"]
    sweep: list[dict] = []
    for k, fraction in enumerate(settings.slo_fractions):
        slo_ms = fraction * _inflation_ms(baseline_ms, baseline_ms)
        selection, estimated_requests = choose(slo_ms)
        name = "costlo" if k == 0 else f"costlo_slo_{fraction:g}"
        same = [p for p in sweep if p["selection"].configuration == selection.configuration]
        if same:  # the same configuration at another SLO: its replay serves both
            name = same[0]["run"]
        else:
            progress(f"costlo live: CosTLO replay (SLO {fraction:g} x the baseline's)")
            configuration = selection.configuration
            runs[name] = await _replay(regions, configuration, keys, settings, seed + k)
        sweep.append(
            {
                "slo_fraction": fraction,
                "slo_ms": slo_ms,
                "selection": selection,
                "estimated_requests_per_get": estimated_requests,
                "run": name,
            }
        )
    return sweep


# The slowdowns of the S3 run: which regions each slows ("serving": the serving region;
# "store": every region) and the replays run during it, by name
SLOWDOWNS = {
    "serving": ("baseline_slowed", "costlo_slowed", "costlo_budget_slowed"),
    "store": ("baseline_store_slowed", "costlo_budget_store_slowed"),
}


async def _slowdown(
    cluster: CostloCluster,
    regions: Regions,
    selected: Configuration,
    keys,
    settings: LiveSettings,
    seed: int,
) -> dict:
    """One replay each (`SLOWDOWNS`), every one during its own slowdown at the injector:
    the baseline, the selection, and the selection under the hedge budget."""
    calm = await _replay(regions, Configuration(), keys, replace(settings, replay_s=2.0), seed)
    extra_ms = (settings.slowdown_factor - 1) * float(np.median(calm["latency_ms"]))
    configurations = {
        "baseline": Configuration(),
        "costlo": selected,
        "costlo_budget": replace(selected, hedge_budget=settings.budget),
    }
    runs = {}
    # the slowed replays' p99s are compared with each other: about 1,000 GETs each in
    # the quick run (480 in 12 s left the p99 to the 5th-slowest GET, a noise of 20%)
    slowed = replace(settings, replay_s=settings.slowdown_replay_s)
    for where, names in SLOWDOWNS.items():
        slowed_regions = [cluster.serving] if where == "serving" else list(cluster.rtts_ms)
        for name in names:
            configuration = configurations[name.removesuffix("_slowed").removesuffix("_store")]
            timers = [
                await asyncio.to_thread(cluster.slow_region, region, extra_ms, slowed.replay_s)
                for region in slowed_regions
            ]
            try:
                runs[name] = await _replay(regions, configuration, keys, slowed, seed + len(runs))
            finally:
                for timer in timers:
                    await asyncio.to_thread(timer.join)
    return runs


# The share of a core the client's own requests may take (ours): the client is one asyncio
# thread that shares the machine, and its own queue adds to every GET. On a busy machine
# (6.0 ms of CPU a request) 2 requests a GET, 48% of a core, doubled the measured
# inflation (58 ms against the baseline's 29)
CLIENT_CPU_SHARE = 0.25
# Below this cap (less than one redundant request per two GETs) redundancy cannot be
# judged: the choice's checks are inconclusive
JUDGED_FROM_REQUESTS = 1.5


def client_request_cap(cpu_ms_per_request: float, rate_rps: float) -> float:
    """The storage requests per GET the client can afford at ``rate_rps`` GETs a second,
    each taking ``cpu_ms_per_request`` of its CPU (measured on the baseline replay), at
    least 1 (issue 41, item 3: under CPU contention ConfSelector had chosen 4 requests
    per GET, whose p99 was 2.6-5.7x the baseline's)."""
    if not cpu_ms_per_request > 0:
        return float("inf")  # not measured
    return max(1.0, CLIENT_CPU_SHARE * 1e3 / (rate_rps * cpu_ms_per_request))


def _select(
    views: dict,
    serving: str,
    second: str | None,
    slo_ms: float,
    settings: LiveSettings,
    max_requests_per_get: float | None = None,
):
    """ConfSelector for this machine's client: the serving region (and the second one,
    on S3), with the storage models and pings the agent measured, within what the
    client's CPU affords; the selection and its estimate of the storage requests per GET."""
    prices = cloud_regions()[0].prices  # an S3-like region's, for the costs

    def view(region: str) -> RegionView:
        model, ping = views[region]
        latency = LatencyDistribution.from_samples(ping, DEFAULT_STEP_MS)
        return RegionView(region, model, latency, prices, 1000.0)

    second_view = None if second is None else view(second)
    workload = PrefixWorkload(gets_per_month=settings.rate_rps * 730 * 3600)
    cap = None if max_requests_per_get in (None, float("inf")) else max_requests_per_get
    limits = SearchLimits(
        max_copies=settings.servers_per_region,
        allow_second_region=second is not None,
        max_requests_per_get=cap,
    )
    slo = Slo(get_ms=slo_ms)
    context = prefix_context(workload, view(serving), second_view, slo, limits)
    selection = select_configuration(context)
    return selection, expected_get_requests(context, selection.configuration)


async def _replay(
    regions: Regions, configuration: Configuration, keys, settings: LiveSettings, seed: int
) -> dict:
    """Open-loop Poisson GETs for ``replay_s`` under ``configuration``."""
    rng = np.random.default_rng(seed)
    started: list[tuple[float, object]] = []
    cpu_s = time.process_time()
    async with CostloClient(configuration, regions, seed=seed) as client:
        loop = asyncio.get_running_loop()
        start = loop.time()

        async def one(key: str):
            at_s = loop.time() - start
            try:
                found = await client.get(key)
            except StoreUnavailable:  # recorded, with its errors, like any other GET
                found = None
            started.append((at_s, client.records[-1]))  # get() appended it just now
            return found

        tasks, at = [], 0.0
        while at < settings.replay_s:
            at += rng.exponential(1.0 / settings.rate_rps)
            await asyncio.sleep(max(0.0, start + at - loop.time()))
            tasks.append(asyncio.ensure_future(one(keys[int(rng.integers(len(keys)))])))
        found = await asyncio.gather(*tasks)
    cpu_s = time.process_time() - cpu_s
    records = [r for _, r in started]
    requests = sum(r.storage_requests for r in records)
    return {
        "client_cpu_ms_per_request": 1e3 * cpu_s / max(requests, 1),
        "started_s": np.array([t for t, _ in started]),
        "latency_ms": np.array([r.latency_ms for r in records]),
        "storage_requests": np.array([r.storage_requests for r in records]),
        "redundant": np.array([r.redundant for r in records]),
        "budget_refused": np.array([r.budget_refused for r in records]),
        "missing": sum(f is None for f in found),
    }


def budget_excess(started_s, storage_requests, budget: HedgeBudget, end_s: float) -> float:
    """How far a client went past its hedge budget, checked from outside: the most, over
    every moment ``t`` (a quarter second apart), by which the extra storage requests of the
    GETs started in the last ``window_s - window_s / DEFAULT_BUCKETS`` seconds exceed what
    the budget allows for the primaries of the last ``window_s``. The client counts its
    window in tenths, so its window at ``t`` holds at least the first span and at most
    the second: a client that kept its budget scores 0 or less, without any margin."""
    started_s, extra = np.asarray(started_s), np.asarray(storage_requests) - 1
    sure_s = budget.window_s * (1 - 1 / DEFAULT_BUCKETS)
    worst = -np.inf
    for right in np.arange(budget.window_s, max(end_s, budget.window_s) + 1e-9, 0.25):
        recent = (started_s > right - sure_s) & (started_s <= right)
        window = (started_s > right - budget.window_s) & (started_s <= right)
        worst = max(worst, float(extra[recent].sum() - budget.allowed_extra(window.sum())))
    return float(worst)


def _inflation_ms(latencies_ms: np.ndarray, baseline_ms: np.ndarray) -> float:
    return float(np.percentile(latencies_ms, 99) - np.median(baseline_ms))


def _sweep_row(point: dict, run: dict, baseline_ms: np.ndarray) -> dict:
    """One SLO of the sweep: what ConfSelector chose and estimated, and what was measured."""
    selection = point["selection"]
    return {
        "slo_fraction": point["slo_fraction"],
        "slo_ms": point["slo_ms"],
        "configuration": describe(selection.configuration),
        "estimated_inflation_ms": selection.get.inflation_ms,
        "measured_inflation_ms": _inflation_ms(run["latency_ms"], baseline_ms),
        "estimated_requests_per_get": point["estimated_requests_per_get"],
        "measured_requests_per_get": float(np.mean(run["storage_requests"])),
        "estimated_cost_increase": selection.cost_increase_fraction,
        "replay": point["run"],
    }


def describe(c: Configuration) -> str:
    """A configuration in a few words: copies x requests per copy, where, timeout and
    probability."""
    parts = [f"{c.serving.copies}x{c.serving.requests_per_copy} serving"]
    if c.second.copies:
        relayed = " relayed" if c.second.relay_vm else ""
        parts.append(f"{c.second.copies}x{c.second.requests_per_copy} second{relayed}")
    gate = f"timeout {c.get_timeout_ms:.0f} ms, p {c.get_probability:.0%}"
    return " + ".join(parts) + (f", {gate}" if c.get_redundant else "")


def _row(name: str, run: dict, baseline_ms: np.ndarray, settings: LiveSettings) -> dict:
    prices = cloud_regions()[0].prices
    requests = float(np.mean(run["storage_requests"]))
    return {
        "configuration": name,
        "gets": int(run["latency_ms"].size),
        "p50_ms": float(np.median(run["latency_ms"])),
        "p99_ms": float(np.percentile(run["latency_ms"], 99)),
        "inflation_ms": _inflation_ms(run["latency_ms"], baseline_ms),
        "redundant_fraction": float(np.mean(run["redundant"])),
        "budget_refused_fraction": float(np.mean(run["budget_refused"])),
        "storage_requests_per_get": requests,
        "usd_per_million_gets": requests * prices.get_usd_per_10k * 100.0,
        "budget_excess_requests": budget_excess(
            run["started_s"],
            run["storage_requests"],
            settings.budget,
            max(settings.replay_s, float(np.max(run["started_s"], initial=0.0))),
        ),  # fmt: skip
        "not_found": int(run["missing"]),
    }


def live_report(settings: LiveSettings, out_dir: Path, seed: int = 1, progress=print) -> Path:
    """Run the live loop in ``out_dir/run`` and write its report; the path of index.md."""
    out_dir = Path(out_dir)
    results = run_live(settings, out_dir / "run", seed, progress)
    selection = results["selection"]
    c = selection.configuration
    s3 = settings.engine == "s3"
    report = Report("CosTLO on real components", LIVE_INTRO[settings.engine])
    pings = ", ".join(f"{r} {ms:.1f} ms" for r, ms in results["pings_ms"].items())
    report.section(
        f"Observe, model, decide, act on real {'S3 gateways' if s3 else 'Redis servers'}",
        f"Inferred from {settings.agent_pairs} open-loop pairs of each kind: GETs to one object "
        f"spread over {results['inferred']['get_replicas']} replica(s)"
        + (f"; median pings through the injector: {pings}" if s3 else "")
        + f". Measured baseline inflation (p99 minus median) "
        f"{results['baseline_inflation_ms']:.1f} ms; the headline SLO is "
        f"{HEADLINE_SLO_FRACTION:g} of it, {results['slo_ms']:.1f} ms. ConfSelector chose "
        f"{describe(c)}; its estimate of the inflation: "
        f"{results['estimated_inflation_ms']:.1f} ms, measured "
        f"{_by_name(results)['costlo']['inflation_ms']:.1f} ms. " + _client_text(results, settings),
    )
    _sweep_section(report, results["sweep"])
    report.table("live", results["rows"], caption="Open-loop GET replays on the live cluster")
    stalled_by = "stopping the gateway process" if s3 else "DEBUG SLEEP"
    report.text(
        f"{settings.servers_per_region} {'versitygw gateways' if s3 else 'Redis servers'} per "
        f"region, each stalled by {stalled_by} for about {settings.stall_median_ms:g} ms "
        f"(lognormal) at {_stall_text(results, settings)}; {settings.rate_rps:g} GETs/s "
        f"for {settings.replay_s:g} s per replay; seed {seed}; the cluster and the client ran "
        f"{results['cpu']}." + (_slowdown_text(results, settings) if s3 else "")
    )
    report.checks(check_live(results, settings), "The live loop's results, measured on this run.")
    report.data("live_results", {k: v for k, v in results.items() if k != "selection"})
    return report.write(out_dir)


def _client_text(results: dict, settings: LiveSettings) -> str:
    """What the client's own CPU allowed ConfSelector (its cap on requests per GET)."""
    cap = results["max_requests_per_get"]
    return (
        f"The client took {results['client_cpu_ms_per_request']:.2f} ms of CPU per storage "
        f"request on the baseline replay: at {settings.rate_rps:g} GETs/s, "
        f"{CLIENT_CPU_SHARE:.0%} of a core affords "
        + (f"{cap:.2f} requests per GET, ConfSelector's cap." if cap < 1e3 else "any number.")
        + (
            f" Below {JUDGED_FROM_REQUESTS:g} the machine is too busy for the client to afford "
            "redundancy: the choice's checks are inconclusive."
            if cap < JUDGED_FROM_REQUESTS
            else ""
        )
    )


def _sweep_section(report: Report, sweep: list[dict]) -> None:
    """The SLO sweep: ConfSelector's estimates beside the measurements, as a table and a
    figure (the live counterpart of Fig. 16)."""
    points = sorted(sweep, key=lambda p: p["slo_ms"])
    tight, loose = points[0], points[-1]
    report.section(
        "The SLO sweep",
        f"From the tightest SLO ({tight['slo_ms']:.1f} ms) to the loosest "
        f"({loose['slo_ms']:.1f} ms), ConfSelector's choice went from {tight['configuration']} "
        f"to {loose['configuration']}: {tight['measured_requests_per_get']:.2f} storage "
        f"requests per GET measured (estimated {tight['estimated_requests_per_get']:.2f}) to "
        f"{loose['measured_requests_per_get']:.2f} (estimated "
        f"{loose['estimated_requests_per_get']:.2f}). Its monthly cost, by the cost model, "
        f"{tight['estimated_cost_increase']:+.0%} and {loose['estimated_cost_increase']:+.0%} "
        "against the baseline's.",
    )
    report.table("slo_sweep", points, caption="Each SLO: the selection, estimated and measured")
    import matplotlib.pyplot as plt  # only for a report: `costlo decide` imports this module

    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4))
    slo = [p["slo_ms"] for p in points]
    left.plot(slo, slo, ":", color="grey", label="SLO")
    left.plot(slo, [p["estimated_inflation_ms"] for p in points], "o--", label="estimated")
    left.plot(slo, [p["measured_inflation_ms"] for p in points], "s-", label="measured")
    left.set(xlabel="SLO (ms)", ylabel="GET p99 - baseline median (ms)")
    right.plot(slo, [p["estimated_requests_per_get"] for p in points], "o--", label="estimated")
    right.plot(slo, [p["measured_requests_per_get"] for p in points], "s-", label="measured")
    right.set(xlabel="SLO (ms)", ylabel="storage requests per GET")
    for axis in (left, right):
        axis.legend()
        axis.grid(alpha=0.3)
    report.figure("slo_sweep", fig, "Inflation and storage requests per GET against the SLO")


def _by_name(results: dict) -> dict[str, dict]:
    return {r["configuration"]: r for r in results["rows"]}


def _stall_text(results: dict, settings: LiveSettings) -> str:
    """Each region's stall rate and RTT, and which one served as the second (S3)."""
    if settings.engine != "s3":
        return f"{settings.stall_rate_per_s:g}/s"
    rtts, pings = results["rtts_ms"], results["pings_ms"]
    regions = "; ".join(
        f"{name} {rate:g}/s ({rtts[name]:g} ms away, ping measured {pings[name]:.1f} ms)"
        for name, rate in settings.regions
    )
    return (
        f"{regions}. {settings.regions[0][0]} serves; the closest other region by the "
        f"measured pings, {results['second_region']}, is the second (§5.2)"
    )


def _slowdown_text(results: dict, settings: LiveSettings) -> str:
    rows = _by_name(results)
    plain, bounded = rows["costlo_slowed"], rows["costlo_budget_slowed"]
    b = settings.budget
    text = (
        f" During a {settings.slowdown_factor:g}x slowdown of the serving region (at the "
        f"injector, {settings.slowdown_replay_s:g} s each replay): without a budget the selection "
        f"issued {plain['storage_requests_per_get']:.2f} storage requests per GET; "
        f"with the budget ({b.extra_fraction:.0%} of the primaries plus "
        f"{b.min_extra_per_s:g}/s over {b.window_s:g} s) "
        f"{bounded['storage_requests_per_get']:.2f}, {bounded['budget_refused_fraction']:.0%} "
        f"of its redundant sets refused, p99 {bounded['p99_ms']:.1f} ms against the "
        f"baseline's {rows['baseline_slowed']['p99_ms']:.1f} ms."
    )
    if "costlo_budget_store_slowed" in rows:
        store = rows["costlo_budget_store_slowed"]
        text += (
            " With every region slowed as much (a redundant request meets the same slowness), "
            f"the budgeted selection issued {store['storage_requests_per_get']:.2f} requests "
            f"per GET, {store['budget_refused_fraction']:.0%} of its redundant sets refused, "
            f"p99 {store['p99_ms']:.1f} ms against the baseline's "
            f"{rows['baseline_store_slowed']['p99_ms']:.1f} ms."
        )
    return text


def check_live(results: dict, settings: LiveSettings) -> dict[str, bool | None]:
    """The live loop's acceptance checks: the stalls make a tail, CosTLO's choice cuts the
    measured inflation for few extra requests, two requests to one copy do not (§2.2);
    on S3, the budget holds the extra load during a slowdown without a worse tail. The
    choice's checks are inconclusive (None) when the client's CPU affords less than
    ``JUDGED_FROM_REQUESTS`` requests per GET: the machine too busy to judge redundancy."""
    rows = _by_name(results)
    baseline, costlo, same = rows["baseline"], rows["costlo"], rows["same_copy"]
    choice = {
        "CosTLO's configuration cuts the measured inflation to 0.6 of the baseline or less": (
            costlo["inflation_ms"] <= 0.6 * baseline["inflation_ms"]
        ),
    } | _sweep_checks(results["sweep"])
    if results.get("max_requests_per_get", float("inf")) < JUDGED_FROM_REQUESTS:
        choice = dict.fromkeys(choice)
    checks = {
        "the injected stalls make a tail (baseline inflation over 5 ms)": (
            baseline["inflation_ms"] > 5.0
        ),
        "two requests to one copy keep at least half the baseline's inflation": (
            same["inflation_ms"] >= 0.5 * baseline["inflation_ms"]
        ),
        "every GET found its object": costlo["not_found"] == 0 and baseline["not_found"] == 0,
    } | choice
    if settings.engine == "s3":
        checks |= _slowdown_checks(results, settings)
    return checks


def _slowdown_checks(results: dict, settings: LiveSettings) -> dict[str, bool]:
    """On S3, for each slowdown that ran (the serving region's; every region's): it slowed
    the baseline, the budget held the extra requests, and the budgeted p99 is not
    confidently worse than the baseline's."""
    rows = _by_name(results)
    # a GET's redundant set is counted at the GET's start but issued up to the timeout
    # later: the GETs started within a timeout of a moment may count on either side
    c = results["selection"].configuration
    in_flight = 1 + np.ceil(settings.rate_rps * c.get_timeout_ms / 1e3)
    margin = (c.get_requests - 1) * in_flight
    calm_p50_ms = rows["baseline"]["p50_ms"]
    checks = {}
    for where, (baseline, bounded, key) in {
        "serving region": ("baseline_slowed", "costlo_budget_slowed", ""),
        "whole store": ("baseline_store_slowed", "costlo_budget_store_slowed", "store_"),
    }.items():
        if bounded not in rows:
            continue
        checks |= {
            f"a slowdown of the {where} slowed the baseline (p99 over 3x its calm median)": (
                rows[baseline]["p99_ms"] > 3 * calm_p50_ms
            ),
            f"{where} slowed: with the budget, extra requests stay within it at every moment": (
                rows[bounded]["budget_excess_requests"] <= margin
            ),
            # not confidently worse: the interval of its p99 over the allowance reaches 0
            f"{where} slowed: ... and its p99 is no worse than the baseline's "
            "(20% + 2 ms, 95% interval)": (
                results[f"{key}budget_p99_excess_interval_ms"][0] <= 0.0
            ),
        }
    return checks


def _sweep_checks(sweep: list[dict]) -> dict[str, bool]:
    """What the SLO sweep must show: the estimates hold on real servers, and a looser SLO
    is bought with fewer requests (Fig. 16's trade-off). The margins are ours: a p99 of
    one replay has a sampling error of its own."""
    points = sorted(sweep, key=lambda p: p["slo_ms"])
    return {
        "at every SLO, the measured inflation is within 25% + 1 ms of the SLO": all(
            p["measured_inflation_ms"] <= 1.25 * p["slo_ms"] + 1.0 for p in points
        ),
        "at every SLO, the storage requests per GET are within 15% of the estimate": all(
            abs(p["measured_requests_per_get"] - p["estimated_requests_per_get"])
            <= 0.15 * p["estimated_requests_per_get"]
            for p in points
        ),
        "the loosest SLO costs fewer storage requests per GET than the tightest": (
            points[-1]["measured_requests_per_get"] < points[0]["measured_requests_per_get"]
        ),
    }


LIVE_INTRO = {
    "redis": (
        "CosTLO's whole loop against real processes on this machine. Real Redis servers form "
        "a region; stalls injected with DEBUG SLEEP are the storage service's isolated latency "
        "spikes. An agent measures pairs of concurrent GETs, the storage model is inferred "
        "from them, and ConfSelector picks a configuration. The client library "
        "(geoslo.live.costlo) then replays an open-loop load under it. No simulator is "
        "involved: every latency below was measured."
    ),
    "s3": (
        "CosTLO's whole loop against real S3 gateways (versitygw) in several regions, each in its "
        "own network namespace, reached through the toxiproxy delay injector. Stopping a "
        "gateway's process at Poisson times makes the storage service's isolated latency "
        "spikes. An agent measures pairs of concurrent GETs at each region's boundary, and "
        "the same GETs through the injector and at the boundary at once; the storage models "
        "and pings are inferred from them, and ConfSelector picks a configuration. The client "
        "library then replays an open-loop load under it, and again during slowdowns of the "
        "serving region with and without the hedge budget. No simulator is involved: every "
        "latency below was measured."
    ),
}

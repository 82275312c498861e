"""The SCADS Director's hotspot (FAST 2011 §6.2) on the live cluster: real Redis servers,
real copies, the director loop ticking every second.

1. Models (§5.4) trained on the cluster itself: ``steady_state_benchmark`` per read/write
   mix gives the 100 ms crossings for the logistic model; ``copy_benchmark`` gives the
   copy-rate factors for the copy-duration model.
2. A fresh cluster; an open-loop load of ``flat_gets_rps`` over Zipf keys; from
   ``shape.flat_s`` a linear ramp of as many extra gets again, all on one key of a cold
   bin (the aggregate doubles over ``shape.ramp_s``).
3. Every second ``DirectorCluster.step_director`` feeds the ended statistics periods to
   ``DirectorLoop`` and starts what it schedules: the hot bin is replicated on dedicated
   servers, standbys first.

Scaled to 2 cores: a request's service time is 5 ms (about 200 req/s a server), so the
spike is a few hundred gets per second, which the client's own process can issue on time.
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from geoslo.control.director import DirectorConfig, DirectorLoop
from geoslo.errors import TestbedError
from geoslo.experiments.director._metrics import percentiles_met_per_second, stabilised_s
from geoslo.experiments.director._simulated import Models
from geoslo.experiments.director._workloads import HotspotShape, hotspot_rates
from geoslo.live.director import (
    ClusterConfig,
    DirectorCluster,
    LoadResult,
    LoadSpec,
    copy_benchmark,
    replay_load,
    steady_state_benchmark,
)
from geoslo.models import (
    PAPER_MIXES_READ_FRACTION,
    fit_copy_duration,
    fit_steady_state,
    mix_crossing_samples,
)
from geoslo.workload import RateTrace

__all__ = ["LiveSettings", "LiveHotspot", "train_live_models", "run_live_hotspot"]

_TICK_S = 1.0  # how often the loop ticks (its copies are scheduled at this resolution)


@dataclass(frozen=True)
class LiveSettings:
    """The live hotspot's sizes (the paper's timing; ``quick()`` compresses it for CI)."""

    servers: int = 4  # holding data at start, plus 2 standbys (§5.7 Table)
    bins: int = 20  # 5-10 bins per server (§5.1)
    service_mean_ms: float = 5.0  # per request: ~200 req/s a server on 2 cores
    flat_gets_rps: float = 150.0  # about 60% of the 4 servers' capacity (2 gets a get)
    read_fraction: float = 0.95
    shape: HotspotShape = HotspotShape(flat_s=180, ramp_s=300, hold_s=300)  # §6.2: 5-min ramp
    period_s: float = 20.0  # §5.7 Table
    get_sample_fraction: float = 0.2  # 2% of ~10x our rate in the paper: as many samples
    boot_delay_s: float = 5.0
    overprovisioning: float = 0.1
    mixes: tuple[float, ...] = PAPER_MIXES_READ_FRACTION
    training_rates_rps: tuple[float, ...] = tuple(range(60, 420, 20))
    training_load_s: float = 3.0
    seed: int = 0

    @classmethod
    def quick(cls) -> LiveSettings:
        """About two minutes: periods of 5 s, a 30 s ramp, two mixes."""
        return cls(
            shape=HotspotShape(flat_s=30, ramp_s=30, hold_s=60),
            period_s=5.0,
            mixes=(0.5, 0.95),
            training_load_s=2.0,
        )

    def cluster_config(self) -> ClusterConfig:
        return ClusterConfig(
            bins=self.bins,
            servers=self.servers,
            get_service_mean_ms=self.service_mean_ms,
            put_service_mean_ms=self.service_mean_ms,
            period_s=self.period_s,
            get_sample_fraction=self.get_sample_fraction,
            boot_delay_s=self.boot_delay_s,
            seed=self.seed,
        )

    def director_config(self) -> DirectorConfig:
        """§5.7's controller; no charge interval: servers are released when emptied."""
        return DirectorConfig(
            period_s=self.period_s,
            overprovisioning=self.overprovisioning,
            charge_interval_s=None,
        )


@dataclass(frozen=True)
class LiveHotspot:
    """What the live run measured, per period and per tick."""

    settings: LiveSettings
    models: Models
    hot_bin: int
    period_end_s: np.ndarray  # since the load began
    p99_ms: np.ndarray  # per period, every get
    gets_per_period: np.ndarray
    tick_s: np.ndarray
    servers: np.ndarray  # per tick: servers in use (standbys and booting ones included)
    hot_replicas: np.ndarray  # per tick
    load: LoadResult
    decisions: int
    actions: dict[str, int]  # completed, per kind
    failed_actions: int
    cancelled_actions: int

    @property
    def extra_replicas(self) -> int:
        return int(self.hot_replicas.max() - self.hot_replicas[0])

    @property
    def stabilised_s(self) -> float:
        """From the spike's start until the p99 stays under the threshold for good."""
        threshold = self.settings.cluster_config().latency_threshold_ms
        start = self.settings.shape.flat_s
        return stabilised_s(self.p99_ms, start, self.settings.period_s, threshold)

    def percentiles_met(self) -> dict[int, dict]:
        """§6.2's table, windows scaled with the period (20 s, 1 min, 5 min at 20 s)."""
        windows = [round(self.settings.period_s * k) for k in (1, 3, 15)]
        gets = ~self.load.is_put
        seconds = np.floor(self.load.issue_s[gets]).astype(int)
        late = ~self.load.ok[gets] | (self.load.latency_ms[gets] > _threshold(self.settings))
        duration = self.settings.shape.duration_s
        per_second = np.bincount(seconds, minlength=duration)[:duration]
        late_per_second = np.bincount(seconds, weights=late, minlength=duration)[:duration]
        return percentiles_met_per_second(per_second, late_per_second, windows)


def _threshold(settings: LiveSettings) -> float:
    return settings.cluster_config().latency_threshold_ms


def train_live_models(settings: LiveSettings, state_dir: Path, progress=print) -> Models:
    """§5.4 on real Redis: the crossing of each mix, then copies into idle and busy
    servers at several rates."""
    config = settings.cluster_config()
    crossings = []
    for k, fraction in enumerate(settings.mixes):
        progress(f"director live: benchmark of the {fraction:.0%} read mix")
        bench = steady_state_benchmark(
            Path(state_dir) / f"steady-{k}",
            fraction,
            settings.training_rates_rps,
            duration_s=settings.training_load_s,
            config=config,
            seed=settings.seed + k,
        )
        if not np.isfinite(bench.crossing_rps):
            raise TestbedError(
                f"the {fraction:.0%} read mix never crossed {config.latency_threshold_ms:g} ms "
                f"up to {max(settings.training_rates_rps):g} req/s; raise training_rates_rps"
            )
        crossings.append(bench.crossing_rps)
    crossing = np.asarray(crossings)
    steady = fit_steady_state(*mix_crossing_samples(settings.mixes, crossing))
    progress("director live: copy benchmark")
    rates = np.tile([1e6, 2e6, 4e6, 8e6], 2)
    gets = np.repeat([0.0, 0.6 * float(crossing.min())], 4)
    copies = copy_benchmark(Path(state_dir) / "copy", rates, gets, gets * 0.05, config=config)
    copy = fit_copy_duration(rates, gets, gets * 0.05, copies.factor)
    return Models(steady, copy, crossing, tuple(settings.mixes))


def run_live_hotspot(
    settings: LiveSettings, state_dir: Path, models: Models, progress=print, director=True
) -> LiveHotspot:
    """Start a cluster, replay the spike while the director runs (or, for contrast, with
    the layout left as it started), stop every process."""
    return asyncio.run(_hotspot(settings, Path(state_dir), models, progress, director))


async def _hotspot(settings, state_dir: Path, models: Models, progress, with_director: bool):
    config = settings.cluster_config()
    hot_bin = config.bins - 1  # the coldest bin of range-partitioned Zipf keys
    base, hot = hotspot_rates(settings.flat_gets_rps / settings.read_fraction, settings.shape)
    spec = LoadSpec(
        RateTrace(base),
        settings.read_fraction,
        hot_trace=RateTrace(hot * settings.read_fraction),
        max_duration_s=float(settings.shape.duration_s),
        seed=settings.seed,
    )
    async with await DirectorCluster.up(state_dir / "cluster", config) as cluster:
        spec = dataclasses.replace(spec, hot_key=cluster.layout.start(hot_bin))
        director = None
        if with_director:
            director = DirectorLoop(
                models.steady, models.copy, settings.director_config(), cluster.bin_bytes()
            )
        return await _drive(cluster, director, spec, settings, models, hot_bin, progress)


async def _drive(cluster, director, spec, settings, models, hot_bin, progress) -> LiveHotspot:
    started_s = cluster.client.now_s()
    cluster.stats.restart(started_s)
    load = asyncio.create_task(replay_load(cluster.client, spec))
    periods, ticks, servers, replicas, finished = [], [], [], [], []
    next_tick = started_s
    while not load.done():
        now = cluster.client.now_s()
        for period in await _step(cluster, director, now):
            periods.append(period)
            _report_period(period, started_s, cluster, director, hot_bin, progress)
        finished += cluster.finished()
        ticks.append(now - started_s)
        in_use = cluster.servers()
        servers.append(len(in_use))
        replicas.append(sum(hot_bin in s.bins for s in in_use))
        next_tick += _TICK_S
        await asyncio.sleep(max(0.0, next_tick - cluster.client.now_s()))
    result = await load
    duration_s = settings.shape.duration_s
    periods = [p for p in periods if p.end_s - started_s <= duration_s + 1e-6]  # not the drain
    kinds: dict[str, int] = {}
    for done in finished:
        kinds[done.action.kind] = kinds.get(done.action.kind, 0) + done.ok
    return LiveHotspot(
        settings=settings,
        models=models,
        hot_bin=hot_bin,
        period_end_s=np.asarray([p.end_s - started_s for p in periods]),
        p99_ms=np.asarray([p.get_p99_ms for p in periods]),
        gets_per_period=np.asarray([p.gets for p in periods]),
        tick_s=np.asarray(ticks),
        servers=np.asarray(servers),
        hot_replicas=np.asarray(replicas),
        load=result,
        decisions=len(director.decisions) if director else 0,
        actions=kinds,
        failed_actions=sum(not done.ok for done in finished),
        cancelled_actions=len(director.cancelled) if director else 0,
    )


async def _step(cluster: DirectorCluster, director: DirectorLoop | None, now_s: float):
    """One tick: the director's, or only the statistics when it is off."""
    if director is None:
        return cluster.collect_stats()
    return await cluster.step_director(director, now_s)


def _report_period(period, started_s: float, cluster, director, hot_bin: int, progress) -> None:
    replicas = sum(hot_bin in s.bins for s in cluster.servers())
    label = "director live" if director else "director live (no director)"
    progress(
        f"{label}: t={period.end_s - started_s:4.0f} s  gets {period.gets:6d}  "
        f"p99 {period.get_p99_ms:6.1f} ms  servers {len(cluster.servers())}  "
        f"hot-bin replicas {replicas}"
    )

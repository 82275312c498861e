"""The SCADS Director's experiments (FAST 2011 §6) on the live cluster: real Redis
servers, real copies, the director loop ticking every second.

1. Models (§5.4) trained on the cluster itself: ``steady_state_benchmark`` per read/write
   mix gives the 100 ms crossings for the logistic model; ``copy_benchmark`` gives the
   copy-rate factors for the copy-duration model.
2. The hotspot (§6.2): an open-loop load of ``flat_gets_rps`` over Zipf keys; from
   ``shape.flat_s`` a linear ramp of as many extra gets again, all on one key (the
   aggregate doubles over ``shape.ramp_s``); with the director, and without it for
   contrast.
3. The diurnal day (§6.3) replayed compressed, with periods and the charge interval
   scaled alike (the paper replayed 24 h in 2 h).

Every second ``DirectorCluster.step_director`` feeds the ended statistics periods to
``DirectorLoop`` and starts what it schedules. Scaled to 2 cores: a request's service
time is 5 ms (about 200 req/s a server), so the loads are a few hundred gets per second,
which the client's own process issues on time (its lateness is reported).
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from geoslo.control.director import DirectorConfig, DirectorLoop
from geoslo.errors import TestbedError
from geoslo.experiments.director._allocations import minimum_servers
from geoslo.experiments.director._metrics import percentiles_met_per_second, stabilised_s
from geoslo.experiments.director._simulated import Models
from geoslo.experiments.director._workloads import HotspotShape, diurnal_rates, hotspot_rates
from geoslo.live.director import (
    BinLayout,
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

__all__ = [
    "LiveSettings",
    "LiveRun",
    "train_live_models",
    "run_live_hotspot",
    "run_live_diurnal",
]

_TICK_S = 1.0  # how often the loop ticks (its copies are scheduled at this resolution)


@dataclass(frozen=True)
class LiveSettings:
    """Sizes of the live experiments (``quick()`` compresses them for a short run)."""

    servers: int = 4  # holding data at the hotspot's start, plus 2 standbys (§5.7 Table)
    bins: int = 20  # 5-10 bins per server (§5.1)
    service_mean_ms: float = 5.0  # per request: ~200 req/s a server on 2 cores
    read_fraction: float = 0.95
    get_sample_fraction: float = 0.2  # 2% of ~10x our rate in the paper: as many samples
    boot_delay_s: float = 5.0
    overprovisioning: float = 0.1
    # the hotspot (§6.2), at the paper's time scale
    flat_gets_rps: float = 150.0  # about 60% of the 4 servers' capacity (2 gets a get)
    shape: HotspotShape = HotspotShape(flat_s=120, ramp_s=300, hold_s=180)  # 5-min ramp
    period_s: float = 20.0  # §5.7 Table
    # the diurnal day (§6.3), compressed: 24 charge intervals of 12 periods
    diurnal_peak_gets_rps: float = 300.0
    diurnal_s: int = 1440  # 60x faster than the day
    diurnal_period_s: float = 5.0
    diurnal_charge_interval_s: int = 60  # the hour, 60x faster
    # training (§5.4)
    mixes: tuple[float, ...] = PAPER_MIXES_READ_FRACTION
    training_rates_rps: tuple[float, ...] = tuple(range(80, 420, 20))
    training_load_s: float = 10.0  # long enough for the queue to settle (3 s: +-25% noise)
    seed: int = 0

    @classmethod
    def quick(cls) -> LiveSettings:
        """Minutes: periods of 5 s, a 30 s ramp, two mixes, the day in 6 minutes."""
        return cls(
            shape=HotspotShape(flat_s=25, ramp_s=30, hold_s=45),
            period_s=5.0,
            diurnal_s=360,
            diurnal_period_s=3.0,
            diurnal_charge_interval_s=15,
            mixes=(0.5, 0.95),
            training_load_s=5.0,
        )

    def cluster_config(self, period_s: float | None = None, servers: int | None = None):
        return ClusterConfig(
            bins=self.bins,
            servers=servers or self.servers,
            get_service_mean_ms=self.service_mean_ms,
            put_service_mean_ms=self.service_mean_ms,
            period_s=period_s or self.period_s,
            get_sample_fraction=self.get_sample_fraction,
            boot_delay_s=self.boot_delay_s,
            seed=self.seed,
        )

    def director_config(self, period_s: float | None = None, charge_interval_s=None):
        """§5.7's controller; without a charge interval servers go as soon as emptied."""
        return DirectorConfig(
            period_s=period_s or self.period_s,
            overprovisioning=self.overprovisioning,
            charge_interval_s=charge_interval_s,
        )

    @property
    def threshold_ms(self) -> float:
        return self.cluster_config().latency_threshold_ms


@dataclass(frozen=True)
class LiveRun:
    """What one live run measured, per period and per tick (times since the load began)."""

    settings: LiveSettings
    models: Models
    duration_s: int
    period_s: float
    hot_bin: int | None
    period_end_s: np.ndarray
    p99_ms: np.ndarray  # per period, every get (a failed one counts as the timeout)
    tick_s: np.ndarray
    servers: tuple[tuple[str, ...], ...]  # per tick: in use (standbys, booting included)
    hot_replicas: np.ndarray  # per tick (zeros without a hot bin)
    load: LoadResult
    decisions: int
    actions: dict[str, int]  # completed, per kind
    failed_actions: int
    cancelled_actions: int

    @property
    def server_counts(self) -> np.ndarray:
        return np.asarray([len(names) for names in self.servers])

    @property
    def extra_replicas(self) -> int:
        return int(self.hot_replicas.max() - self.hot_replicas[0])

    @property
    def stabilised_s(self) -> float:
        """From the spike's start until the p99 stays under the threshold for good."""
        start = self.settings.shape.flat_s
        return stabilised_s(self.p99_ms, start, self.period_s, self.settings.threshold_ms)

    def percentiles_met(self) -> dict[int, dict]:
        """§6.2's table, windows scaled with the period (20 s, 1 min, 5 min at 20 s)."""
        windows = [round(self.period_s * k) for k in (1, 3, 15)]
        gets = ~self.load.is_put
        seconds = np.floor(self.load.issue_s[gets]).astype(int)
        late = ~self.load.ok[gets] | (self.load.latency_ms[gets] > self.settings.threshold_ms)
        per_second = np.bincount(seconds, minlength=self.duration_s)[: self.duration_s]
        late_per_second = np.bincount(seconds, weights=late, minlength=self.duration_s)
        return percentiles_met_per_second(per_second, late_per_second[: self.duration_s], windows)

    def units(self, interval_s: float) -> int:
        """Servers charged: each counts once per interval in which it was in use."""
        per_interval: dict[int, set[str]] = {}
        for t, names in zip(self.tick_s, self.servers, strict=True):
            per_interval.setdefault(int(t // interval_s), set()).update(names)
        return sum(len(names) for names in per_interval.values())

    def measured_rates(self) -> tuple[np.ndarray, np.ndarray]:
        """Per period (rows) and bin, the gets and puts per second the load issued."""
        period = np.floor(self.load.issue_s / self.period_s).astype(int)
        shape = (int(math.ceil(self.duration_s / self.period_s)), self.settings.bins)
        rates = []
        for kind in (~self.load.is_put, self.load.is_put):
            counts = np.zeros(shape)
            np.add.at(counts, (period[kind], self.load.bin[kind]), 1.0)
            rates.append(counts / self.period_s)
        return rates[0], rates[1]


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
) -> LiveRun:
    """The spike (§6.2) with the director or, for contrast, with the layout left as it
    started; the cluster is started for the run and stopped after it."""
    base, hot = hotspot_rates(settings.flat_gets_rps / settings.read_fraction, settings.shape)
    config = settings.cluster_config()
    hot_bin = config.bins - 1  # any bin: keys are scrambled
    spec = LoadSpec(
        RateTrace(base),
        settings.read_fraction,
        hot_trace=RateTrace(hot * settings.read_fraction),
        hot_key=BinLayout(config.keys, config.bins).start(hot_bin),
        max_duration_s=float(settings.shape.duration_s),
        seed=settings.seed,
    )
    loop = settings.director_config() if director else None
    run = _Run(settings, models, config, loop, spec, hot_bin, "hotspot", progress)
    return asyncio.run(run.replay(Path(state_dir)))


def run_live_diurnal(
    settings: LiveSettings, state_dir: Path, models: Models, progress=print
) -> LiveRun:
    """The diurnal day (§6.3) replayed in ``diurnal_s``; the cluster starts with the
    servers the first period needs."""
    total = diurnal_rates(settings.diurnal_peak_gets_rps, settings.diurnal_s)
    total = total / settings.read_fraction
    loop = settings.director_config(settings.diurnal_period_s, settings.diurnal_charge_interval_s)
    first = np.full(settings.bins, total[0] / settings.bins)
    servers = minimum_servers(
        first * settings.read_fraction * (1 + settings.overprovisioning),
        first * (1 - settings.read_fraction) * (1 + settings.overprovisioning),
        models.steady,
        loop,
    )
    config = settings.cluster_config(settings.diurnal_period_s, max(servers, 2))
    spec = LoadSpec(
        RateTrace(total),
        settings.read_fraction,
        max_duration_s=float(settings.diurnal_s),
        seed=settings.seed + 1,
    )
    run = _Run(settings, models, config, loop, spec, None, "diurnal", progress)
    return asyncio.run(run.replay(Path(state_dir)))


@dataclass
class _Run:
    """One replay on a fresh cluster, the director ticking every second (if any)."""

    settings: LiveSettings
    models: Models
    config: ClusterConfig
    director_config: DirectorConfig | None
    spec: LoadSpec
    hot_bin: int | None
    label: str
    progress: object

    async def replay(self, state_dir: Path) -> LiveRun:
        async with await DirectorCluster.up(state_dir / "cluster", self.config) as cluster:
            director = None
            if self.director_config is not None:
                director = DirectorLoop(
                    self.models.steady,
                    self.models.copy,
                    self.director_config,
                    cluster.bin_bytes(),
                )
            return await self._drive(cluster, director)

    async def _drive(self, cluster: DirectorCluster, director: DirectorLoop | None) -> LiveRun:
        started_s = cluster.client.now_s()
        cluster.stats.restart(started_s)
        load = asyncio.create_task(replay_load(cluster.client, self.spec))
        periods, ticks, servers, replicas, finished = [], [], [], [], []
        next_tick = started_s
        while not load.done():
            now = cluster.client.now_s()
            for period in await _step(cluster, director, now):
                periods.append(period)
                self._report(period, started_s, cluster, director)
            finished += cluster.finished()
            ticks.append(now - started_s)
            in_use = cluster.servers()
            servers.append(tuple(s.name for s in in_use))
            replicas.append(sum(self.hot_bin in s.bins for s in in_use))
            next_tick += _TICK_S
            await asyncio.sleep(max(0.0, next_tick - cluster.client.now_s()))
        result = await load
        duration_s = int(self.spec.max_duration_s)
        periods = [p for p in periods if p.end_s - started_s <= duration_s + 1e-6]  # no drain
        kinds: dict[str, int] = {}
        for done in finished:
            kinds[done.action.kind] = kinds.get(done.action.kind, 0) + done.ok
        return LiveRun(
            settings=self.settings,
            models=self.models,
            duration_s=duration_s,
            period_s=self.config.period_s,
            hot_bin=self.hot_bin,
            period_end_s=np.asarray([p.end_s - started_s for p in periods]),
            p99_ms=np.asarray([p.get_p99_ms for p in periods]),
            tick_s=np.asarray(ticks),
            servers=tuple(servers),
            hot_replicas=np.asarray(replicas),
            load=result,
            decisions=director.decision_count if director else 0,
            actions=kinds,
            failed_actions=sum(not done.ok for done in finished),
            cancelled_actions=director.cancel_count if director else 0,
        )

    def _report(self, period, started_s: float, cluster, director) -> None:
        label = f"director live {self.label}" + ("" if director else " (no director)")
        hot = ""
        if self.hot_bin is not None:
            replicas = sum(self.hot_bin in s.bins for s in cluster.servers())
            hot = f"  hot-bin replicas {replicas}"
        self.progress(
            f"{label}: t={period.end_s - started_s:5.0f} s  gets {period.gets:6d}  "
            f"p99 {period.get_p99_ms:7.1f} ms  servers {len(cluster.servers())}{hot}"
        )


async def _step(cluster: DirectorCluster, director: DirectorLoop | None, now_s: float):
    """One tick: the director's, or only the statistics when it is off."""
    if director is None:
        return cluster.collect_stats()
    return await cluster.step_director(director, now_s)

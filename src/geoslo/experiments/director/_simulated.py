"""The SCADS Director's experiments (§6) on the simulated store: models trained by
benchmarks (§5.4), then the director loop under the hotspot and the diurnal workload."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from geoslo.control.director import DirectorConfig, DirectorLoop, Histogram, ServerState
from geoslo.experiments.director._allocations import Allocations, allocations, minimum_servers
from geoslo.experiments.director._metrics import percentiles_met_per_second
from geoslo.experiments.director._workloads import (
    HotspotShape,
    bin_popularity,
    diurnal_rates,
    hotspot_rates,
)
from geoslo.models import (
    PAPER_MIXES_READ_FRACTION,
    CopyDurationModel,
    SteadyStateModel,
)
from geoslo.sim.director import (
    ServerPerformance,
    SimResult,
    SimSettings,
    Workload,
    round_robin_layout,
    simulate,
    trained_models,
)

__all__ = [
    "Scale",
    "Models",
    "train_models",
    "initial_layout",
    "run_diurnal",
    "run_hotspot",
    "diurnal_allocations",
    "percentiles_met",
    "server_units",
    "clock_units",
    "ViewRecorder",
    "view_ideal_servers",
    "hot_bin",
    "DecisionMoves",
    "decision_moves",
]


LINEAR_TRUTH = ServerPerformance()  # the default servers: work linear in get + 3 put


@dataclass(frozen=True)
class Scale:
    """Sizes of a simulated experiment (full length unless ``quick``)."""

    bins: int = 100  # §5.1: five to ten per server at the peak
    keys: int = 100_000
    bin_bytes: float = 40e6  # §5.1: 10-100 MB per bin
    diurnal_peak_rps: float = 60_000.0  # about 20 servers at the peak
    diurnal_s: int = 86_400
    hotspot_flat_rps: float = 25_000.0
    hotspot: HotspotShape = HotspotShape()
    charge_interval_s: int = 3600  # EC2's hour (§6.3)
    boot_delay_s: int = 120  # a few minutes to boot a 2010 EC2 instance
    read_fraction: float = 0.95
    seed: int = 0

    @classmethod
    def quick(cls) -> Scale:
        """The day compressed 12x, as the paper replayed it (§6.1): 2 h, data and charge
        interval scaled alike."""
        return cls(diurnal_s=7200, bin_bytes=40e6 / 12, charge_interval_s=300, boot_delay_s=10)


@dataclass(frozen=True)
class Models:
    steady: SteadyStateModel
    copy: CopyDurationModel
    crossings_rps: np.ndarray  # per mix
    mixes: tuple[float, ...] = PAPER_MIXES_READ_FRACTION  # read fractions benchmarked


def train_models(perf: ServerPerformance, seed: int = 0) -> Models:
    """§5.4 on the simulated servers (``geoslo.sim.director.trained_models``)."""
    steady, copy, crossings = trained_models(perf, seed)
    return Models(steady, copy, crossings)


def initial_layout(bins: int, servers: int, replicas: int, standbys: int) -> list[ServerState]:
    """Bins dealt round robin, replica k of bin b on server ``(b + k) mod servers``."""
    return round_robin_layout(bins, servers, replicas, standbys)


class ViewRecorder(DirectorLoop):
    """A director loop that keeps, for every period, the smoothed per-bin workload it sees
    (§5.5): what its decisions are based on, for the report's account of its units."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.views: list[tuple[np.ndarray, np.ndarray]] = []  # (get_rps, put_rps) per period

    def _observe(self, histogram: Histogram) -> None:
        super()._observe(histogram)
        assert self.smoother.get_rps is not None and self.smoother.put_rps is not None
        self.views.append((self.smoother.get_rps.copy(), self.smoother.put_rps.copy()))


def _run(workload, scale: Scale, models: Models, config: DirectorConfig, perf, start_servers):
    settings = SimSettings(
        read_fanout=config.read_fanout,
        performance=perf,
        seed=scale.seed,
        boot_delay_s=scale.boot_delay_s,
        charge_interval_s=scale.charge_interval_s,
    )
    bin_bytes = np.full(scale.bins, scale.bin_bytes)
    loop = ViewRecorder(models.steady, models.copy, config, bin_bytes)
    layout = initial_layout(scale.bins, start_servers, config.replicas, config.standbys)
    result = simulate(workload, layout, bin_bytes, loop, settings, config.copy_rate_bytes_per_s)
    return result, loop


def _config(scale: Scale, overprovisioning: float, replicas: int) -> DirectorConfig:
    return DirectorConfig(
        overprovisioning=overprovisioning,
        replicas=replicas,
        read_fanout=min(2, replicas),
        charge_interval_s=scale.charge_interval_s,
    )


def run_diurnal(
    scale: Scale,
    models: Models,
    overprovisioning: float,
    replicas: int = 2,
    perf: ServerPerformance = LINEAR_TRUTH,
):
    """The elastic policy over the diurnal day (§6.3), on servers whose truth is ``perf``
    (``models`` trained on it)."""
    popularity, _ = bin_popularity(scale.keys, scale.bins, scale.seed)
    workload = Workload(
        diurnal_rates(scale.diurnal_peak_rps, scale.diurnal_s), popularity, scale.read_fraction
    )
    config = _config(scale, overprovisioning, replicas)
    start = _start_servers(workload, models, config)
    return _run(workload, scale, models, config, perf, start)


def hot_bin(scale: Scale) -> int:
    """The hotspot's bin: a cold one, so that only the spike makes it hot (§6.2)."""
    popularity, _ = bin_popularity(scale.keys, scale.bins, scale.seed)
    return int(np.argmin(popularity))


def run_hotspot(
    scale: Scale,
    models: Models,
    overprovisioning: float,
    replicas: int = 2,
    perf: ServerPerformance = LINEAR_TRUTH,
):
    """Flat load, then a linear doubling onto one key (§6.2), on servers whose truth is
    ``perf`` (``models`` trained on it)."""
    popularity, _ = bin_popularity(scale.keys, scale.bins, scale.seed)
    base, hot = hotspot_rates(scale.hotspot_flat_rps, scale.hotspot)
    workload = Workload(base, popularity, scale.read_fraction, hot, hot_bin(scale))
    config = _config(scale, overprovisioning, replicas)
    start = _start_servers(workload, models, config)
    return _run(workload, scale, models, config, perf, start)


def _start_servers(workload: Workload, models: Models, config: DirectorConfig) -> int:
    """Enough servers for the first second's load, as a warmed-up controller would have."""
    get, put = workload.rates(0)
    scale = 1.0 + config.overprovisioning
    return max(minimum_servers(get * scale, put * scale, models.steady, config), 2)


def _peaks_per_interval(total_rps: np.ndarray, interval_s: int, period_s: int = 20):
    """Per charge interval, the highest mean rate of a period inside it."""
    periods = total_rps[: len(total_rps) // period_s * period_s].reshape(-1, period_s).mean(1)
    per_interval = interval_s // period_s
    count = -(-len(periods) // per_interval)
    padded = np.concatenate([periods, np.zeros(count * per_interval - len(periods))])
    return padded.reshape(count, per_interval).max(axis=1)


def diurnal_allocations(
    scale: Scale, models: Models, replicas: int = 2, load_factor: float = 1.0
) -> Allocations:
    """Ideal, fixed-100% and fixed-70% for the diurnal day (§6.3); ``load_factor`` scales
    the workload (``1 + overprovisioning``: the ideal of what an overprovisioned
    controller provisions for)."""
    popularity, _ = bin_popularity(scale.keys, scale.bins, scale.seed)
    peaks = load_factor * _peaks_per_interval(
        diurnal_rates(scale.diurnal_peak_rps, scale.diurnal_s), scale.charge_interval_s
    )
    gets = peaks[:, None] * popularity[None, :] * scale.read_fraction
    puts = peaks[:, None] * popularity[None, :] * (1.0 - scale.read_fraction)
    return allocations(gets, puts, models.steady, _config(scale, 0.0, replicas))


def server_units(result: SimResult, interval_s: int) -> int:
    """Server units paid (§6.3: one server for one charge interval): a lease is charged
    from its start in whole intervals, as EC2 bills an instance, and as the loop assumes
    when it releases a server at the end of an interval it has paid for."""
    return sum(int(np.ceil((end - start) / interval_s)) for _, start, end in result.leases)


def clock_units(result: SimResult, interval_s: int, duration_s: int) -> int:
    """(server, clock interval) pairs in which the server was leased: a lease that
    straddles a clock interval's edge counts in both, although it paid for one."""
    intervals = -(-duration_s // interval_s)
    units = 0
    for _, start, end in result.leases:
        first = int(start // interval_s)
        last = min(int(np.ceil(end / interval_s)) - 1, intervals - 1)
        units += max(last - first + 1, 1 if end > start else 0)
    return units


def view_ideal_servers(
    loop: ViewRecorder, models: Models, scale: Scale, overprovisioning: float
) -> np.ndarray:
    """Per charge interval, the most servers an ideal packing of the loop's own smoothed
    view (times ``1 + overprovisioning``) needed in any period: the ideal of what the
    controller saw, rather than of the workload."""
    config = _config(scale, 0.0, loop.config.replicas)
    per_interval = max(scale.charge_interval_s // int(loop.config.period_s), 1)
    count = -(-len(loop.views) // per_interval)
    servers = np.zeros(count, dtype=np.int64)
    factor = 1.0 + overprovisioning
    for period, (get, put) in enumerate(loop.views):
        needed = minimum_servers(get * factor, put * factor, models.steady, config)
        servers[period // per_interval] = max(servers[period // per_interval], needed)
    return servers


@dataclass(frozen=True)
class DecisionMoves:
    """The data one decision's plan copies and moves: the bins (once per copy) and bytes."""

    time_s: float
    bins: tuple[int, ...]
    moved_bytes: float


def decision_moves(loop: DirectorLoop) -> list[DecisionMoves]:
    """Per decision of a run, the data its plan moves (copies and moves)."""
    return [
        DecisionMoves(
            d.time_s,
            tuple(b for a in d.plan.actions if a.copies_data for b in a.bins),
            d.plan.moved_bytes,
        )
        for d in loop.decisions
    ]


def percentiles_met(result: SimResult, windows_s=(20, 60, 300)) -> dict[int, dict]:
    """§6.2's table for a simulated run (``percentiles_met_per_second``)."""
    late = result.late_fraction * result.gets
    return percentiles_met_per_second(result.gets, late, windows_s)

"""The simulated ensemble as an environment handle (``geoslo run``'s simulator for the
Supercloud scheduler, SoCC 2016 §5.1): each ``observe()`` serves one interval of a
follow-the-sun workload and reports every site's reads and writes, the placement and
whether a migration is still running; ``apply(plan)`` starts the plan's live migrations."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from geoslo.control.supercloud import FrontEnd, Node, Placement, PlacementObservation, Plan
from geoslo.errors import ConfigError, InputError
from geoslo.sim.supercloud._ensemble import EnsembleSettings, SimulatedEnsemble, StepResult
from geoslo.topology import load_ibm_latency
from geoslo.workload import load_trace_minutes

__all__ = ["FollowTheSun", "SupercloudSimEnvironment", "site_rtt_ms", "follow_the_sun_rps"]

_DAY_S = 86_400.0
_KEPT_MIGRATIONS = 100  # the log's most recent entries


@dataclass(frozen=True)
class FollowTheSun:
    """§5.1's workload: one diurnal trace (the real Wikipedia trace, minute by minute,
    repeated), each site's copy shifted by a day / sites (two sites: 12 h, §5.1) and
    scaled so that its peak is ``peak_rps``; reads to writes 9:1 (§5.1)."""

    peak_rps: float = 1000.0
    read_fraction: float = 0.9  # §5.1
    trace: str = "wikipedia"

    def __post_init__(self) -> None:
        if not self.peak_rps >= 0:
            raise ConfigError("peak_rps", f"must be >= 0, got {self.peak_rps!r}")
        if not 0.0 <= self.read_fraction <= 1.0:
            raise ConfigError("read_fraction", f"must be in 0..1, got {self.read_fraction!r}")


@lru_cache(maxsize=4)
def unit_trace(name: str) -> np.ndarray:
    """A load trace by the minute (``load_trace_minutes``), scaled so that its peak is 1."""
    minutes = load_trace_minutes(name)
    return minutes / minutes.max()


def follow_the_sun_rps(
    workload: FollowTheSun, start_s: float, duration_s: float, sites: int
) -> np.ndarray:
    """Mean offered requests/s of each site over [start_s, start_s + duration_s)."""
    scaled = unit_trace(workload.trace) * workload.peak_rps
    first = int(start_s // 60)
    span = max(1, int(round(duration_s / 60)))
    shift = [int(round(k * _DAY_S / sites / 60)) for k in range(sites)]
    index = (first + np.arange(span)[:, None] + np.array(shift)[None, :]) % len(scaled)
    return scaled[index].mean(axis=0)


def site_rtt_ms(sites: tuple[str, ...]) -> np.ndarray:
    """The measured IBM Cloud RTTs between ``sites`` (names of that matrix)."""
    names, rtt_ms = load_ibm_latency()
    unknown = [s for s in sites if s not in names]
    if unknown:
        raise ConfigError("sites", f"unknown site(s) {unknown}; the measured sites are {names}")
    index = [names.index(s) for s in sites]
    return np.asarray(rtt_ms, dtype=float)[np.ix_(index, index)]


class SupercloudSimEnvironment:
    """A :class:`SimulatedEnsemble` driven from outside, ``interval_s`` per ``observe()``.

    ``start_sites`` places the nodes ``zk1``, ``zk2``, ... (the first leads). The report is
    what each site's users asked for over the interval (as the §5.1 reproduction reports
    it), not what a distant ensemble managed to serve."""

    simulated = True

    def __init__(
        self,
        sites: tuple[str, ...],
        start_sites: tuple[str, ...],
        interval_s: float,
        workload: FollowTheSun | None = None,
        ensemble: EnsembleSettings | None = None,
        seed: int = 0,
    ) -> None:
        if not interval_s > 0:
            raise ConfigError("interval_s", f"must be > 0, got {interval_s!r}")
        for k, site in enumerate(start_sites):
            if site not in sites:
                raise ConfigError(f"start_sites[{k}]", f"unknown site {site!r}; sites: {sites}")
        if not start_sites:
            raise ConfigError("start_sites", "must place at least one node")
        self.sites = tuple(sites)
        self.rtt_ms = site_rtt_ms(self.sites)
        self.interval_s = float(interval_s)
        self.workload = workload or FollowTheSun()
        nodes = tuple(Node(f"zk{k + 1}", s) for k, s in enumerate(start_sites))
        self.ensemble = SimulatedEnsemble(
            self.sites, self.rtt_ms, Placement(nodes, "zk1"), ensemble or EnsembleSettings(), seed
        )
        self.start_placement = self.ensemble.placement
        self.now_s = 0.0
        self.last_step: StepResult | None = None
        self.migrations = 0

    async def start(self) -> None:
        """Nothing to start: the ensemble is simulated."""

    async def observe(self) -> PlacementObservation:
        """Serve one interval from ``now_s``; its report, at the interval's end."""
        offered_rps = follow_the_sun_rps(
            self.workload, self.now_s, self.interval_s, len(self.sites)
        )
        self.last_step = self.ensemble.step(
            self.now_s, self.interval_s, offered_rps, self.workload.read_fraction
        )
        self.now_s += self.interval_s
        self.ensemble.forget_finished(self.now_s)  # a long run keeps bounded state
        del self.ensemble.migration_log[:-_KEPT_MIGRATIONS]
        requests = offered_rps * self.interval_s
        read = self.workload.read_fraction
        front_ends = tuple(
            FrontEnd(site, float(read * n), float((1 - read) * n))
            for site, n in zip(self.sites, requests, strict=True)
        )
        busy = self.ensemble.busy(self.now_s)
        return PlacementObservation(self.now_s, front_ends, self.ensemble.placement, busy)

    async def apply(self, plan: Plan) -> None:
        """Start the plan's migrations, in parallel (§5.1)."""
        if self.ensemble.busy(self.now_s):
            raise InputError("plan", "a migration is still running; the scheduler must wait")
        self.ensemble.migrate(plan.migrations, self.now_s)
        self.migrations += len(plan.migrations)

    async def close(self) -> None:
        """Nothing to stop."""

    def mean_latency_ms(self) -> float | None:
        """The last interval's request-weighted mean latency (None before any)."""
        step = self.last_step
        if step is None or step.sample_weight.sum() <= 0:
            return None
        return float(np.average(step.sample_ms, weights=step.sample_weight))

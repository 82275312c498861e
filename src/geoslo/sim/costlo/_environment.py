"""CosTLO's loop on the simulated clouds: an environment handle (``geoslo.control``'s
``Environment``) for ``CostloLoop`` (§5.2).

Each ``observe()`` is one epoch: every region's agent measures its storage service and
pings the prefixes it may serve (a bounded number of samples each, §6.5), and each
prefix's clients play a bounded number of GETs under the configuration in force, whose
measured inflation (the SLO's percentile minus the baseline median, §3) is reported
beside the workload. ``apply(plan)`` puts the plan's configurations in force; a
configuration's hedge budget is enforced over the GETs arriving evenly at the prefix's
peak rate (or its monthly mean, without one).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import numpy as np

from geoslo.control.costlo import (
    Configuration,
    EpochObservation,
    EpochPlan,
    PrefixObservation,
    PrefixWorkload,
    RegionObservation,
)
from geoslo.errors import InputError
from geoslo.sim.costlo._agents import measure_storage, ping_ms
from geoslo.sim.costlo._requests import get_operations
from geoslo.sim.costlo._world import CloudWorld, build_world

__all__ = ["CostloSimEnvironment"]

_SECONDS_PER_MONTH = 730.0 * 3600.0


def _seed(*parts: int) -> int:
    """A seed for one (run, epoch, component): independent streams, reproducible."""
    return int(np.random.SeedSequence(list(parts)).generate_state(1)[0])


@dataclass
class CostloSimEnvironment:
    """The world of ``world_seed``; the prefixes ``prefixes`` (indices of its client
    sites), each served by its closest S3-like region with ``extra_candidates`` regions
    beyond the second one (§5.2) measured by their agents."""

    workload: PrefixWorkload
    world_seed: int = 0
    prefixes: tuple[int, ...] = (0,)
    extra_candidates: int = 2
    samples: int = 2_000  # agent pairs of each kind and pings per region and epoch
    operations: int = 20_000  # GETs per prefix and epoch, to measure the inflation
    percentile: float = 99.0  # the SLO's (§3)
    seed: int = 0
    simulated: bool = True
    epoch: int = 0
    in_force: dict[str, Configuration] = field(default_factory=dict)
    world: CloudWorld | None = None
    _regions: dict[int, tuple[int, ...]] = field(default_factory=dict)  # prefix -> regions
    _second: dict[str, int] = field(default_factory=dict)  # prefix -> the plan's second

    async def start(self) -> None:
        self.world = await asyncio.to_thread(build_world, self.world_seed)
        for p in self.prefixes:
            if not 0 <= p < len(self.world.prefixes):
                last = len(self.world.prefixes) - 1
                raise InputError("environment.prefixes", f"must be in [0, {last}], not {p}")
            serving, second = self.world.serving_and_second(p)
            order = np.argsort(self.world.base_rtt_ms[p], kind="stable")
            extra = [int(j) for j in order if j not in (serving, second)]
            self._regions[p] = (serving, second, *extra[: self.extra_candidates])

    async def observe(self) -> EpochObservation:
        """One epoch of measurements (runs off the event loop)."""
        return await asyncio.to_thread(self._observe)

    async def apply(self, plan: EpochPlan) -> None:
        """Every prefix's clients use the plan's configuration from now on."""
        names = {self.world.prefixes[p].name for p in self.prefixes}
        unknown = set(plan.configurations) - names
        if unknown:
            raise InputError("plan", f"configurations for unknown prefixes {sorted(unknown)}")
        self.in_force = dict(plan.configurations)
        self._second = {
            name: self.world.region_index(s.second_region)
            for name, s in plan.selections.items()
            if s.second_region
        }

    async def close(self) -> None:
        """Nothing runs between calls."""

    # ------------------------------------------------------------------------------------

    def _observe(self) -> EpochObservation:
        self.epoch += 1
        world = self.world
        used = sorted({j for regions in self._regions.values() for j in regions})
        pings: dict[int, dict[str, np.ndarray]] = {j: {} for j in used}
        for p, regions in self._regions.items():
            for j in regions:
                seed = _seed(self.seed, self.epoch, 1, p, j)
                pings[j][world.prefixes[p].name] = ping_ms(world, p, j, self.samples, seed)
        regions = tuple(
            RegionObservation(
                world.regions[j].name,
                world.regions[j].prices,
                measure_storage(world, j, self.samples, seed=_seed(self.seed, self.epoch, 0, j)),
                pings[j],
                world.behaviours[j].relay_rps,
            )
            for j in used
        )
        prefixes = tuple(
            PrefixObservation(
                world.prefixes[p].name,
                world.regions[self._regions[p][0]].name,
                self.workload,
                self._measured_inflation_ms(p),
            )
            for p in self.prefixes
        )
        return EpochObservation(regions, prefixes)

    def _rate_rps(self) -> float:
        """The GETs' rate of arrival: the peak's, or the month's mean (at least 1/s)."""
        w = self.workload
        return max(w.peak_get_rps or w.gets_per_month / _SECONDS_PER_MONTH, 1.0)

    def _measured_inflation_ms(self, p: int) -> float:
        """The SLO's percentile of this epoch's GETs under the configuration in force
        minus the median of GETs without CosTLO (§3), both measured on fresh operations."""
        world, name = self.world, self.world.prefixes[p].name
        serving, second = self._regions[p][0], self._second.get(name)
        configuration = self.in_force.get(name, Configuration())
        n, size = self.operations, self.workload.object_bytes
        baseline = get_operations(
            world, p, serving, None, Configuration(), n, _seed(self.seed, self.epoch, 2, p), size
        )
        chosen = get_operations(
            world,
            p,
            serving,
            second,
            configuration,
            n,
            _seed(self.seed, self.epoch, 3, p),
            size,
            arrival_s=np.arange(n) / self._rate_rps(),
        )
        tail_ms = float(np.percentile(chosen.latency_ms, self.percentile))
        return tail_ms - float(np.median(baseline.latency_ms))

"""Kurma's evaluation setting in simulation: three EC2 sites, a calibrated backend, its profile.

Everything Kurma *knows* here is measured the way §4 and §6 describe: the service-time
distributions by profiling the simulated backend open-loop, the residual WAN latency from
probes with the base delay removed, the saturation point by raising the load until the
median response passes the SLO. The simulator's hidden parameters are never read by the
model (only by the simulator itself).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import numpy as np

from geoslo.control.kurma.model_file import BASE_RTT_MS
from geoslo.dist import LatencyDistribution
from geoslo.experiments._parallel import run_jobs
from geoslo.experiments.kurma._settings import Settings
from geoslo.models import (
    ServiceProfile,
    SloCurve,
    SloSurface,
    build_slo_surface,
    mmc_violation_surface,
    profile_backend,
    profile_loads,
    residual_from_probes,
)
from geoslo.sim.kurma import BackendParams, profile_site, residual_wan_samples_ms
from geoslo.topology import Topology, kurma_topology

__all__ = [
    "Scenario",
    "build_scenario",
    "with_choice_surfaces",
    "profile_simulated",
    "measure_saturation",
    "SLO_MS",
    "MMC_SERVERS",
]

SLO_MS = 30.0  # 30 ms at the 95th percentile, §7
RHO = 0.05
MMC_SERVERS = 10  # c = 10, §7.1.1
BASE_RTT_RANGE_MS = BASE_RTT_MS  # curve family per whole ms of base RTT, §6 (the model file's)
PROBES_PER_SITE, PROBE_INTERVAL_S, PROBE_MINUTES = 3, 0.2, 5.0  # WAN measurement, §6


@dataclass(frozen=True)
class Scenario:
    settings: Settings
    seed: int
    backend: BackendParams
    residual_pool_ms: np.ndarray  # the simulator's true residual WAN RTT samples
    residual_estimate: LatencyDistribution  # what Kurma measured with its probes
    saturation_rps: float
    profile: ServiceProfile
    surface: SloSurface  # every site has the same backend, so one surface serves all
    mmc_surface: SloSurface
    wan: Topology | None = None  # another WAN and its sites (the live testbed's), if any
    # reads-only surfaces profiled with each site serving under a server choice (None: random)
    choice_surfaces: dict[str, SloSurface] = dataclasses.field(default_factory=dict)

    def surface_for(self, server_choice: str | None) -> SloSurface:
        """The SLO surface of sites that serve with ``server_choice`` (profiled with it)."""
        if server_choice in (None, "random"):
            return self.surface
        return self.choice_surfaces[server_choice]

    @property
    def sites(self) -> tuple[str, ...]:
        return self.wan.names if self.wan is not None else ("London", "Ireland", "Frankfurt")

    @property
    def backend_servers(self) -> int:
        return self.backend.servers

    @property
    def local_5pct_rps(self) -> float:
        return self.surface.curve(0).load_at(RHO)

    def remote_5pct_rps(self, base_rtt_ms: float) -> float:
        return self.surface.curve(base_rtt_ms).load_at(RHO)

    @property
    def per_vm_capacity_rps(self) -> float:
        return self.saturation_rps / self.backend.servers

    def topology(self, duration_s: float, routing_changes: bool = True) -> Topology:
        """Table 2's sites; base RTTs change within the observed ranges every ~2 minutes
        (or the scenario's own ``wan``)."""
        if self.wan is not None:
            return self.wan
        return kurma_topology(
            self.saturation_rps,
            servers=self.backend.servers,
            routing_mean_interval_s=120.0 if routing_changes else None,
            duration_s=max(duration_s, 1.0),
            seed=self.seed,
        )

    def per_vm_curves(self, static: bool = True) -> list[list[SloCurve]]:
        """Curves of ONE VM (the 5-server profile's load axis divided by 5, §4.1)."""
        rtt = self.topology(1.0, routing_changes=not static).base_rtt_matrix_ms(0.0)
        n, scale = len(self.sites), 1.0 / self.backend.servers
        curves = []
        for i in range(n):
            row = []
            for j in range(n):
                curve = self.surface.curve(0 if i == j else rtt[i][j])
                row.append(SloCurve(curve.load_rps * scale, curve.violation_fraction))
            curves.append(row)
        return curves


def _median_passes_slo(backend, load_rps, seconds, seed, slowdown=None) -> bool:
    response_ms = profile_site(backend, load_rps, 0.0, seconds, seed, slowdown=slowdown)
    return float(np.median(response_ms)) > SLO_MS


def measure_saturation(
    backend: BackendParams, seed: int, seconds: float = 5.0, slowdown: np.ndarray | None = None
) -> float:
    """Raise the load until queues grow without bound (median response past the SLO), §4;
    ``slowdown``: per-server service-time factors (interference, §7.1.4)."""
    start = min(1000.0, backend.read_capacity_rps / 4)
    low, high = start, 2 * start
    while not _median_passes_slo(backend, high, seconds, seed, slowdown):
        low, high = high, high * 2
    for _ in range(10):
        mid = (low + high) / 2
        if _median_passes_slo(backend, mid, seconds, seed, slowdown):
            high = mid
        else:
            low = mid
    return low


def estimate_residual(topology: Topology, pool_ms: np.ndarray, seed: int) -> LatencyDistribution:
    """Residual WAN latency from probe RTTs with the base delay removed (§6).

    Three probes per site every 200 ms for 5 minutes; each probe's RTT is the base RTT of
    the moment plus a residual. The base is estimated as the minimum over 10 s blocks.
    """
    rng = np.random.default_rng(seed)
    per_block = int(10 / PROBE_INTERVAL_S) * PROBES_PER_SITE
    times = np.repeat(np.arange(0, PROBE_MINUTES * 60, PROBE_INTERVAL_S), PROBES_PER_SITE)
    rtts = [
        link.base_rtt.at(times) + rng.choice(pool_ms, size=times.size) for link in topology.links
    ]
    return residual_from_probes(rtts, per_block)


def profile_simulated(
    backend: BackendParams,
    settings: Settings,
    seed: int,
    loads: np.ndarray,
    write_fractions=(0.0,),
    slowdown: np.ndarray | None = None,
    label: str = "Profiling",
    server_choice: str | None = None,
) -> ServiceProfile:
    """Profile the simulated backend (§4.1), its points run as :func:`run_jobs` jobs (on
    ``settings.workers`` processes, or Ray tasks in a Ray session), its sites serving with
    ``server_choice`` (None: a uniform server)."""
    measure = functools.partial(
        profile_site,
        backend,
        duration_s=settings.profile_seconds,
        seed=seed,
        slowdown=slowdown,
        server_choice=server_choice,
    )
    return profile_backend(
        measure,
        loads,
        write_fractions,
        map_points=lambda point, jobs: run_jobs(point, jobs, settings.workers, label),
    )


def build_scenario(settings: Settings, seed: int, backend: BackendParams | None = None) -> Scenario:
    """Calibrated backend (or ``backend``), measured saturation, profile and curve families."""
    backend = backend or BackendParams()
    pool = residual_wan_samples_ms(200_000, seed)
    saturation = measure_saturation(backend, seed)
    loads = profile_loads(saturation, settings.profile_points)
    profile = profile_simulated(backend, settings, seed, loads, settings.write_fractions)
    residual = estimate_residual(
        kurma_topology(saturation, routing_mean_interval_s=60.0, duration_s=600.0, seed=seed),
        pool,
        seed,
    )
    surface = build_slo_surface(profile, SLO_MS, residual, BASE_RTT_RANGE_MS)
    mmc = mmc_violation_surface(
        MMC_SERVERS, saturation / MMC_SERVERS, loads, SLO_MS, BASE_RTT_RANGE_MS, residual
    )
    mmc_surface = SloSurface(BASE_RTT_RANGE_MS, np.array([0.0]), loads, mmc[:, None, :])
    return Scenario(
        settings, seed, backend, pool, residual, saturation, profile, surface, mmc_surface
    )


def with_choice_surfaces(scenario: Scenario, server_choices) -> Scenario:
    """``scenario`` with a reads-only SLO surface profiled under each server choice (§4.1 on
    the site as it will serve: curves profiled with random choice and served with another
    choice would misstate the site), on the same loads, seed and residual WAN estimate."""
    surfaces = dict(scenario.choice_surfaces)
    for choice in server_choices:
        if choice in surfaces or choice == "random":
            continue
        profile = profile_simulated(
            scenario.backend,
            scenario.settings,
            scenario.seed,
            scenario.profile.load_rps,
            label=f"Profiling under {choice}",
            server_choice=choice,
        )
        surfaces[choice] = build_slo_surface(
            profile, SLO_MS, scenario.residual_estimate, BASE_RTT_RANGE_MS
        )
    return dataclasses.replace(scenario, choice_surfaces=surfaces)

"""Kurma's configuration, observation and model types (defaults cite the paper's sections)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from geoslo.errors import ConfigError
from geoslo.models import SloSurface

if TYPE_CHECKING:
    from geoslo.control import Outcome
    from geoslo.control.kurma.problem import KurmaPlan

__all__ = [
    "KurmaConfig",
    "KurmaObservation",
    "KurmaModel",
    "IntervalMeasurements",
    "Routing",
    "SERVER_CHOICES",
    "check_server_choice",
]

# Server choice inside the chosen site (the second level of a balancer; Envoy's endpoint
# load-balancing policy, where the site choice is its locality weights). Kurma leaves it to
# the datacenter (§3). The candidates are the key's replicas in the site: ``rf`` consecutive
# servers from the key's start (Kurma §7: RF 3 per datacenter; every server when rf >= n).
# * "random": the key's start replica (a uniform server: a token-aware driver).
# * "round_robin": a cursor per (client, site) walks the site's servers in ring order; the
#   request goes to the first of the key's replicas at or after it, the cursor moves past.
# * "least_outstanding": the replica with the fewest of this client's requests in flight
#   (ties: the first in ring order from the key's start).
# * "p2c": two distinct replicas drawn uniformly, the one with fewer of this client's
#   requests in flight (ties: the first drawn); Envoy's LEAST_REQUEST, Prequal's probes.
# * "c3": the lowest psi = R - 1/mu + q_hat^3/mu, q_hat = 1 + os * n + q (C3 §4.1) from this
#   client's EWMAs, without C3's rate limiter and backpressure (C3's own two-level policy).
SERVER_CHOICES = ("random", "round_robin", "least_outstanding", "p2c", "c3")


def check_server_choice(name: str, field: str = "server_choice") -> str:
    """``name`` if it is one of :data:`SERVER_CHOICES`, else a ConfigError naming ``field``."""
    if name not in SERVER_CHOICES:
        raise ConfigError(field, f"must be one of {', '.join(SERVER_CHOICES)}; got {name!r}")
    return name


@dataclass(frozen=True)
class KurmaConfig:
    """How a Kurma instance measures, solves and enforces."""

    objective: str = "perf"  # "perf" = KurmaPerf (1), "cost" = KurmaCost (2), §5
    interval_s: float = 2.5  # model recomputation interval, §6
    rate_window_s: float = 5.0  # arrival rate averaged over 5 s, §7.1
    base_rtt_window_s: float = 1.0  # base RTT = min response over 1 s - min service time, §6
    slo_ms: float = 30.0  # 30 ms at the 95th percentile, §7
    slo_violation_target: float = 0.05  # rho, §5 and §7
    quantum_fraction: float = 0.01  # load balancing quantum, 1% of capacity, §5.2 and §7.1
    dissemination_margin_ms: float = 20.0  # NTP error and processing margin, §6
    max_fraction_change_per_s: float | None = None  # None = Kurma; 0.013 = the DNS baseline, §7.1.2
    solve_time_limit_s: float = 2.0  # nominal: converted to work units at a fixed rate
    solve_work_limit: int | None = None  # work units per solve (None: from the time limit)
    interference_window_s: float = 60.0  # recent (load, violation) points for curve fitting, §7.1.4
    recompute_every_s: float | None = None  # None = every interval; 600 = the EWMA baseline, §7.1.2
    demand_ewma_alpha: float | None = None  # weight of the newest demand mean (EWMA baseline: 0.8)

    def __post_init__(self) -> None:
        if self.objective not in ("perf", "cost"):
            raise ConfigError("objective", f"must be 'perf' or 'cost', not {self.objective!r}")
        for name in ("interval_s", "rate_window_s", "base_rtt_window_s", "slo_ms"):
            if not getattr(self, name) > 0:
                raise ConfigError(name, "must be > 0")
        if not 0 < self.slo_violation_target < 1:
            raise ConfigError("slo_violation_target", "must be in (0, 1)")
        if not 0 < self.quantum_fraction <= 1:
            raise ConfigError("quantum_fraction", "must be in (0, 1]")
        if self.solve_work_limit is not None and not self.solve_work_limit >= 1:
            raise ConfigError("solve_work_limit", "must be >= 1 work unit")


@dataclass(frozen=True)
class KurmaObservation:
    """The global state every instance holds after the exchange (§6)."""

    demand_rps: np.ndarray  # D_i, client requests arriving at each site
    write_fraction: np.ndarray  # share of writes in each site's client requests
    base_rtt_ms: np.ndarray  # [i, j] measured base RTT, whole ms, 0 on the diagonal
    available: np.ndarray | None = None  # sites that answered the last exchange


@dataclass(frozen=True)
class KurmaModel:
    """Per destination site, its family of SLO curves (over base RTT and write fraction).

    ``pair_surfaces[i][j]`` (optional; None on the diagonal) is the family for requests
    from i served at j, built with the i -> j path's own residual WAN latency: the paper's
    curves are per site pair (§4.2). Without it, ``surfaces[j]`` serves every origin."""

    sites: tuple[str, ...]
    capacity_rps: np.ndarray
    surfaces: tuple[SloSurface, ...]
    min_service_ms: float = 0.0  # subtracted from the min response to get the base RTT, §6
    pair_surfaces: tuple[tuple[SloSurface | None, ...], ...] | None = None

    def surface(self, src: int, dst: int) -> SloSurface:
        """The family for requests from ``src`` served at ``dst``."""
        if src != dst and self.pair_surfaces is not None:
            pair = self.pair_surfaces[src][dst]
            if pair is not None:
                return pair
        return self.surfaces[dst]

    def with_site_surface(self, site: int, surface: SloSurface) -> KurmaModel:
        """``site``'s family replaced (an interference refit, §7.1.4): it then serves
        every origin, its per-pair families dropped."""
        surfaces = list(self.surfaces)
        surfaces[site] = surface
        pairs = self.pair_surfaces
        if pairs is not None:
            pairs = tuple(
                tuple(None if j == site else s for j, s in enumerate(row)) for row in pairs
            )
        return replace(self, surfaces=tuple(surfaces), pair_surfaces=pairs)

    def with_capacity_share(self, share: np.ndarray) -> KurmaModel:
        """Each site with only ``share[j]`` of its servers up (§9: a failed server): a
        request goes to a random server that is up, so the site at load L behaves as the
        whole site at L / share; its curves' load axes and its capacity scale by share."""
        share = np.clip(np.asarray(share, float), 0.0, 1.0)
        if np.all(share >= 1.0):
            return self

        def scaled(surface: SloSurface | None, j: int) -> SloSurface | None:
            if surface is None or share[j] >= 1.0:
                return surface
            return replace(surface, load_rps=surface.load_rps * max(share[j], 1e-9))

        surfaces = tuple(scaled(s, j) for j, s in enumerate(self.surfaces))
        pairs = self.pair_surfaces
        if pairs is not None:
            pairs = tuple(tuple(scaled(s, j) for j, s in enumerate(row)) for row in pairs)
        capacity = np.asarray(self.capacity_rps, float) * share
        return replace(self, capacity_rps=capacity, surfaces=surfaces, pair_surfaces=pairs)


@dataclass(frozen=True)
class IntervalMeasurements:
    """What an environment (simulation or live testbed) reports after each interval."""

    duration_s: float
    arrivals: np.ndarray  # [i] client requests that arrived at site i
    writes: np.ndarray  # [i] of which writes
    requests: np.ndarray  # [i, j] requests from i served at j
    violations: np.ndarray  # [i, j] of which missed the SLO (seen at i)
    min_response_ms: np.ndarray  # [i, j] min response in the last base-RTT window (inf: none)
    probe_rtt_ms: np.ndarray | None = None  # [i, j] min WAN probe RTT in that window (§6 probes)
    available: np.ndarray | None = None  # [i] sites heard from in the last exchange (§9)
    capacity_share: np.ndarray | None = None  # [i] share of site i's servers up (None: all)


@dataclass(frozen=True)
class Routing:
    """What the loop hands an environment each interval (§6, enforcement).

    ``fractions[i, j]``: share of site i's client requests to send to site j (rows sum to 1);
    with the DNS baseline's rate limit these trail the plan's. ``plan``: the solve they come
    from, with its outcome (status, solver status, objective, decision time)."""

    fractions: np.ndarray
    plan: KurmaPlan

    @property
    def outcome(self) -> Outcome:
        """The plan's outcome: how the decision behind this routing ended."""
        return self.plan.outcome

"""A problem.json for ``geoslo kurma decide``, built from the paper's setting (Kurma §7).

Three sites (London, Ireland, Frankfurt) with Table 2's base RTTs (the middle of each range),
each an M/M/c backend of five servers (§7: five nodes per datacenter), a 30 ms SLO at the 95th
percentile (rho = 5%) and a 1% quantum (§5.2, §7.1). Curves come from the library's M/M/c
model with an exponential residual WAN latency (:func:`geoslo.models.mmc_violation_surface`);
the demand is Trace-1-like (§7, Table 2): one site past its 5% point, the others below it.
More sites than three get seeded base RTTs within Table 2's span.
"""

from __future__ import annotations

import numpy as np

from geoslo.control.kurma.problem import KurmaProblem
from geoslo.control.kurma.validation import MAX_SITES
from geoslo.dist import LatencyDistribution
from geoslo.errors import InputError
from geoslo.models import SloCurve, mmc_violation_surface
from geoslo.topology import KURMA_RTT_RANGES_MS

__all__ = ["example_problem", "mmc_curves", "EXAMPLE_SITES"]

EXAMPLE_SITES = ("London", "Ireland", "Frankfurt")  # §7, Table 2
SERVERS_PER_SITE = 5  # §7: five nodes per datacenter
SERVER_RATE_PER_S = 200.0  # one server's mean service rate: a site serves 1,000 req/s
SLO_MS = 30.0  # §7: 30 ms at the 95th percentile
RHO = 0.05  # §5, §7
QUANTUM_FRACTION = 0.01  # §5.2, §7.1
RESIDUAL_WAN_MEAN_MS = 1.0  # residual WAN latency over the base RTT (exponential)
LOAD_POINTS = 40


def example_rtt_ms(n_sites: int, seed: int) -> np.ndarray:
    """[i, j] base RTT: Table 2's range middles for the first three sites, seeded draws
    within Table 2's span (9-27 ms) for the others."""
    rng = np.random.default_rng(seed)
    low = min(lo for lo, _ in KURMA_RTT_RANGES_MS.values())
    high = max(hi for _, hi in KURMA_RTT_RANGES_MS.values())
    rtt = np.triu(rng.integers(int(low), int(high) + 1, size=(n_sites, n_sites)), 1)
    rtt = (rtt + rtt.T).astype(float)
    index = {name: k for k, name in enumerate(EXAMPLE_SITES)}
    for (a, b), (lo, hi) in KURMA_RTT_RANGES_MS.items():
        i, j = index[a], index[b]
        if i < n_sites and j < n_sites:
            rtt[i, j] = rtt[j, i] = (lo + hi) / 2
    return rtt


def mmc_curves(
    rtt_ms: np.ndarray,
    servers: int = SERVERS_PER_SITE,
    server_rate_per_s: float = SERVER_RATE_PER_S,
    slo_ms: float = SLO_MS,
    residual_mean_ms: float = RESIDUAL_WAN_MEAN_MS,
    points: int = LOAD_POINTS,
) -> tuple[np.ndarray, np.ndarray]:
    """(load grid, violation[i, j, k]): every site an M/M/c backend; Omega_ij at j's load
    for a request from i (its base RTT plus the residual WAN latency), §4 with M/M/c."""
    n = rtt_ms.shape[0]
    capacity = servers * server_rate_per_s
    grid = np.linspace(0.0, 0.98 * capacity, points)
    bases = np.unique(np.concatenate([[0.0], rtt_ms[~np.eye(n, dtype=bool)]]))
    residual = LatencyDistribution.exponential(residual_mean_ms)
    surface = mmc_violation_surface(servers, server_rate_per_s, grid, slo_ms, bases, residual)
    violation = np.empty((n, n, grid.size))
    for i in range(n):
        for j in range(n):
            violation[i, j] = surface[int(np.searchsorted(bases, 0 if i == j else rtt_ms[i, j]))]
    return grid, np.clip(violation, 0.0, 1.0)


def example_problem(n_sites: int = 3, seed: int = 0) -> KurmaProblem:
    """The example: ``n_sites`` sites (2 to MAX_SITES), the busiest past its 5% point."""
    if not 2 <= n_sites <= MAX_SITES:
        raise InputError("sites", f"must be from 2 to {MAX_SITES}, not {n_sites}")
    names = EXAMPLE_SITES[:n_sites] + tuple(f"site{k}" for k in range(3, n_sites))
    rtt = example_rtt_ms(n_sites, seed)
    grid, violation = mmc_curves(rtt)
    local_5pct_rps = SloCurve(grid, violation[0, 0]).load_at(RHO)
    rng = np.random.default_rng(seed + 1)
    demand = local_5pct_rps * rng.uniform(0.3, 0.7, n_sites)
    demand[int(rng.integers(n_sites))] = local_5pct_rps * rng.uniform(1.05, 1.2)
    return KurmaProblem(
        sites=names,
        demand_rps=np.round(demand, 1),
        capacity_rps=np.full(n_sites, SERVERS_PER_SITE * SERVER_RATE_PER_S),
        load_grid_rps=grid,
        violation=violation,
        slo_violation_target=RHO,
        quantum_fraction=QUANTUM_FRACTION,
    )

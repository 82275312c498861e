"""The WAN as measured rather than as the scheduler assumes (Supercloud, SoCC 2016, §3:
the scheduler scores placements from one RTT matrix L): each pair of sites follows its own
weekly IBM Cloud history over time, so the ground truth drifts away from the matrix the
scheduler measured when the run began."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from geoslo.errors import ConfigError
from geoslo.topology import BaseRttSchedule, ibm_routing_changes

__all__ = ["DriftingRtt", "ibm_drifting_rtt"]


@dataclass(frozen=True)
class DriftingRtt:
    """One RTT schedule per unordered pair of sites (``schedules[(i, j)]``, i < j, serving
    both directions); the diagonal is 0 (the ensemble sets its same-site RTT)."""

    sites: tuple[str, ...]
    schedules: dict[tuple[int, int], BaseRttSchedule]

    def __post_init__(self) -> None:
        n = len(self.sites)
        wanted = {(i, j) for i in range(n) for j in range(i + 1, n)}
        if set(self.schedules) != wanted:
            raise ConfigError("schedules", f"need one schedule per pair i < j of {n} sites")

    def matrices_ms(self, times_s: np.ndarray) -> np.ndarray:
        """The RTT matrix at each time: (len(times_s), N, N), ms."""
        times_s = np.asarray(times_s, dtype=float)
        n = len(self.sites)
        out = np.zeros((times_s.size, n, n))
        for (i, j), schedule in self.schedules.items():
            out[:, i, j] = out[:, j, i] = schedule.at(times_s)
        return out

    def at_ms(self, t_s: float) -> np.ndarray:
        """The RTT matrix at one time: (N, N), ms."""
        return self.matrices_ms(np.array([t_s]))[0]


def ibm_drifting_rtt(
    sites: tuple[str, ...], mean_interval_s: float, duration_s: float, seed: int
) -> DriftingRtt:
    """Each pair's measured weekly RTT averages in publication order, from a seeded week on,
    one route change per ``mean_interval_s`` on average (Poisson; ``ibm_routing_changes``):
    weeks of drift compressed into the run, every pair on its own history and times."""
    schedules = {}
    for i in range(len(sites)):
        for j in range(i + 1, len(sites)):
            pair_seed = seed * 1_000 + i * len(sites) + j
            schedules[(i, j)] = ibm_routing_changes(
                sites[i], sites[j], mean_interval_s, duration_s, pair_seed
            )
    return DriftingRtt(tuple(sites), schedules)

"""The allocations the elastic policy is compared with (FAST 2011, §6.3).

* ideal: for every charge interval, the fewest servers that hold its peak workload
  (moving data is free and instant), by best-fit decreasing packing of the replicas
  under the steady-state model's boundary;
* fixed-100%: the ideal's maximum, all the time;
* fixed-70%: servers filled to 70% of their capacity at the peak, all the time.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

import numpy as np

from geoslo.control.director import DirectorConfig, replica_loads, work_capacity
from geoslo.control.director.decide import replicas_needed
from geoslo.models import SteadyStateModel

__all__ = ["Allocations", "minimum_servers", "allocations"]


def minimum_servers(
    get_rps: np.ndarray,
    put_rps: np.ndarray,
    model: SteadyStateModel,
    config: DirectorConfig,
    fill_fraction: float = 1.0,
) -> int:
    """Servers needed to hold every bin's replicas with no server past ``fill_fraction``
    of the model's boundary; replicas of one bin on distinct servers; a hot bin gets the
    replicas its gets need (§5.3)."""
    capacity = fill_fraction * work_capacity(model)
    get_rps, put_rps = np.asarray(get_rps, float), np.asarray(put_rps, float)
    replicas = replicas_needed(get_rps, put_rps, model, config, capacity)
    get, put = replica_loads(get_rps, put_rps, replicas, config.read_fanout)
    work = model.get_coefficient * get + model.put_coefficient * put
    items = sorted(
        ((float(work[b]), b) for b in range(len(work)) for _ in range(replicas[b])),
        reverse=True,
    )
    loads: list[tuple[float, int]] = []  # (work, server), sorted
    holds: list[set[int]] = []
    for item_work, b in items:
        at = bisect.bisect_left(loads, (capacity - item_work, -1)) - 1
        while at >= 0 and b in holds[loads[at][1]]:
            at -= 1
        if at >= 0:
            server_work, server = loads.pop(at)
        else:
            server_work, server = 0.0, len(holds)
            holds.append(set())
        holds[server].add(b)
        bisect.insort(loads, (server_work + item_work, server))
    return len(holds)


@dataclass(frozen=True)
class Allocations:
    """Servers per charge interval for the ideal policy, and the two fixed ones."""

    ideal_servers: np.ndarray
    fixed_100_servers: int
    fixed_70_servers: int

    @property
    def intervals(self) -> int:
        return len(self.ideal_servers)

    def units(self) -> dict[str, int]:
        return {
            "ideal": int(self.ideal_servers.sum()),
            "fixed-100%": self.fixed_100_servers * self.intervals,
            "fixed-70%": self.fixed_70_servers * self.intervals,
        }


def allocations(
    peak_get_rps: np.ndarray,
    peak_put_rps: np.ndarray,
    model: SteadyStateModel,
    config: DirectorConfig,
) -> Allocations:
    """``peak_*_rps``: per charge interval (rows) and bin (columns), the interval's peak."""
    ideal = np.array(
        [
            minimum_servers(g, p, model, config)
            for g, p in zip(peak_get_rps, peak_put_rps, strict=True)
        ]
    )
    peak = int(np.argmax(np.asarray(peak_get_rps).sum(axis=1) + np.asarray(peak_put_rps).sum(1)))
    fixed_70 = minimum_servers(peak_get_rps[peak], peak_put_rps[peak], model, config, 0.7)
    return Allocations(ideal, int(ideal.max()), max(fixed_70, int(math.ceil(ideal.max()))))

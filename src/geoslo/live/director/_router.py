"""The router: which servers hold each bin, for reads and for writes (FAST 2011 §5.1, §6.1).

* The **read set** of a bin is its replicas. A get goes to ``read_fanout`` of them: all of
  them while the bin has exactly that many, a random subset when it has more, so the
  extra replicas of a hot bin share its gets (§6.2).
* The **write set** is the read set plus the targets of copies in progress: from the
  moment a copy starts, puts to its bins also go to its target (docs/director-live.md).
* Puts in flight are tracked per bin, so that a copy or a delete can wait for the puts
  issued before it changed the sets.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

__all__ = ["Router"]


class Router:
    """Bin -> replica set (server names), copy targets and puts in flight."""

    def __init__(self, bins: int, read_fanout: int) -> None:
        self.bins = bins
        self.read_fanout = read_fanout
        self._replicas: list[list[str]] = [[] for _ in range(bins)]
        self._copy_targets: list[set[str]] = [set() for _ in range(bins)]
        self._puts: list[set] = [set() for _ in range(bins)]

    # --- sets -------------------------------------------------------------------------------
    def replicas(self, b: int) -> tuple[str, ...]:
        return tuple(self._replicas[b])

    def copy_targets(self, b: int) -> tuple[str, ...]:
        return tuple(sorted(self._copy_targets[b]))

    def write_set(self, b: int) -> tuple[str, ...]:
        return tuple(self._replicas[b]) + self.copy_targets(b)

    def read_choice(self, b: int, rng: np.random.Generator) -> list[str]:
        """``read_fanout`` replicas of ``b``: all while it has that many or fewer, else a
        uniformly random subset."""
        replicas = self._replicas[b]
        if len(replicas) <= self.read_fanout:
            return list(replicas)
        picked = rng.choice(len(replicas), size=self.read_fanout, replace=False)
        return [replicas[int(i)] for i in picked]

    def read_share(self, b: int) -> float:
        """Fraction of bin ``b``'s gets each replica serves (``replica_loads`` in
        ``geoslo.control.director``)."""
        count = len(self._replicas[b])
        return 0.0 if count == 0 else min(self.read_fanout, count) / count

    def bins_of(self, server: str) -> tuple[int, ...]:
        """Bins ``server`` holds as a replica (copy targets not included)."""
        return tuple(b for b in range(self.bins) if server in self._replicas[b])

    def holds_anything(self, server: str) -> bool:
        return any(server in r for r in self._replicas) or any(
            server in t for t in self._copy_targets
        )

    def add_replica(self, b: int, server: str) -> None:
        self._copy_targets[b].discard(server)
        if server not in self._replicas[b]:
            self._replicas[b].append(server)

    def drop_replica(self, b: int, server: str) -> None:
        if server in self._replicas[b]:
            self._replicas[b].remove(server)

    def add_copy_target(self, b: int, server: str) -> None:
        self._copy_targets[b].add(server)

    def drop_copy_target(self, b: int, server: str) -> None:
        self._copy_targets[b].discard(server)

    def drop_server(self, server: str) -> list[int]:
        """Remove ``server`` from every set (it died); the bins it was a replica of."""
        held = list(self.bins_of(server))
        for b in range(self.bins):
            self.drop_replica(b, server)
            self.drop_copy_target(b, server)
        return held

    # --- puts in flight ---------------------------------------------------------------------
    def begin_put(self, b: int, token) -> None:
        self._puts[b].add(token)

    def end_put(self, b: int, token) -> None:
        self._puts[b].discard(token)

    def puts_in_flight(self, bins: Iterable[int]) -> list:
        """Tokens of the puts to ``bins`` in flight now (a snapshot)."""
        return [token for b in bins for token in self._puts[b]]

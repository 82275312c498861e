"""The simulated store as the Director's environment handle (``geoslo.control.Environment``).

``observe()`` advances the store ``advance_s`` simulated seconds (one tick, 1 s, or one
period) and returns the loop's observation at the last of them, with the histograms of
the periods that ended meanwhile (§5.5); ``apply(step)`` starts and cancels the step's
actions there, as ``simulate`` does. The clock is the simulation's: ``simulated = True``.

``flash_crowd`` builds a workload for it: a flat load over Zipf-popular bins and, after
``flat_s``, a linear ramp of extra gets on one bin up to the flat load again (§6.2's
hotspot); the workload repeats when it ends.
"""

from __future__ import annotations

import numpy as np

from geoslo.control.director import Histogram, Observation, ServerState, Step
from geoslo.sim.director._engine import SimResult, SimSettings, StoreSimulation, Workload
from geoslo.workload import ZipfKeys

__all__ = ["DirectorSimEnvironment", "flash_crowd", "round_robin_layout"]


class DirectorSimEnvironment:
    """One simulated store; ``start()`` builds it afresh, ``close()`` ends the run."""

    simulated = True

    def __init__(
        self,
        workload: Workload,
        layout: list[ServerState],
        bin_bytes: np.ndarray,
        settings: SimSettings,
        copy_rate_bytes_per_s: float,
        advance_s: int = 1,
    ) -> None:
        if isinstance(advance_s, bool) or not isinstance(advance_s, int) or advance_s < 1:
            raise ValueError(f"advance_s must be an integer >= 1, got {advance_s!r}")
        self.workload = workload
        self.layout = list(layout)
        self.bin_bytes = np.asarray(bin_bytes, dtype=float)
        self.settings = settings
        self.copy_rate_bytes_per_s = copy_rate_bytes_per_s
        self.advance_s = advance_s
        self.store: StoreSimulation | None = None
        self._begun = False  # observe() began a second that apply/the next observe ends

    async def start(self) -> None:
        self.store = StoreSimulation(
            self.workload,
            self.layout,
            self.bin_bytes,
            self.settings,
            self.copy_rate_bytes_per_s,
        )
        self._begun = False

    async def observe(self) -> Observation:
        """Finish the second the last observation began, then advance ``advance_s``."""
        store = self._store()
        if self._begun:
            store.finish()
        histograms: list[Histogram] = []
        for k in range(self.advance_s):
            observation = store.observe()
            histograms += observation.histograms
            if k < self.advance_s - 1:
                store.finish()  # seconds in which the controller does not act
        self._begun = True
        return Observation(
            observation.now_s,
            observation.servers,
            observation.running,
            tuple(histograms),
            observation.measurements,
        )

    async def apply(self, step: Step) -> None:
        """Start and cancel the step's actions at the second last observed."""
        if step.start or step.cancel:
            self._store().apply(step)

    async def close(self) -> None:
        """Nothing runs outside this process; the run's figures stay in ``result()``."""

    def result(self) -> SimResult:
        """The figures over the workload's first pass (``simulate``'s result)."""
        return self._store().result()

    def _store(self) -> StoreSimulation:
        if self.store is None:
            raise RuntimeError("start() the simulated store before observing it")
        return self.store


def flash_crowd(
    bins: int,
    flat_rps: float,
    flat_s: int,
    ramp_s: int,
    hold_s: int,
    read_fraction: float,
    seed: int = 0,
    exponent: float = 0.99,
) -> Workload:
    """Flat load over bins of Zipf popularity (a seeded ranking), then extra gets on the
    least popular bin ramping linearly to ``flat_rps`` over ``ramp_s`` and held (§6.2)."""
    rng = np.random.default_rng(seed)
    popularity = ZipfKeys(bins, exponent).probabilities()[rng.permutation(bins)]
    duration_s = flat_s + ramp_s + hold_s
    ramp = flat_rps * (np.arange(ramp_s) + 0.5) / max(ramp_s, 1)
    hot = np.concatenate([np.zeros(flat_s), ramp, np.full(hold_s, float(flat_rps))])
    return Workload(
        np.full(duration_s, float(flat_rps)),
        popularity / popularity.sum(),
        read_fraction,
        hot,
        int(np.argmin(popularity)),
    )


def round_robin_layout(bins: int, servers: int, replicas: int, standbys: int) -> list[ServerState]:
    """Replica k of bin b on data server ``(b + k) mod servers``, then empty standbys."""
    held: list[list[int]] = [[] for _ in range(servers)]
    for b in range(bins):
        for k in range(replicas):
            held[(b + k) % servers].append(b)
    layout = [ServerState(f"server-{i}", tuple(sorted(held[i]))) for i in range(servers)]
    return layout + [ServerState(f"server-{servers + i}") for i in range(standbys)]

"""Kurma's simulator environment for ``geoslo run`` (Kurma §6, §7.1): one interval of the
request-level simulator per ``observe()``, the routing in force set by ``apply()``.

``observe()`` simulates the next ``interval_s`` with the fractions in force and reports what
Kurma's instances measure and exchange after an interval (§6): arrivals, writes, requests and
SLO violations per (origin, destination), the minimum response of the last second, and the
minimum of 15 WAN probes a second (3 every 200 ms) per link.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import numpy as np

from geoslo.control.kurma import IntervalMeasurements, Routing
from geoslo.errors import InputError
from geoslo.sim.kurma._env import IntervalStats, RequestLevelSim
from geoslo.sim.kurma._params import BackendParams
from geoslo.sim.kurma._wan_truth import WanResidualTruth

__all__ = ["KurmaSimEnvironment", "interval_measurements", "PROBES_PER_SECOND"]

PROBES_PER_SECOND = 15  # 3 probes every 200 ms, §6


def interval_measurements(
    stats: IntervalStats,
    base_rtt_ms: np.ndarray,
    pool_ms: np.ndarray,
    rng: np.random.Generator,
    wan_truth: WanResidualTruth | None = None,
) -> IntervalMeasurements:
    """What Kurma's instances measure and exchange after an interval (§6); the probes'
    residuals come from ``pool_ms``, or from the link's state in ``wan_truth``."""
    if wan_truth is None:
        residuals = rng.choice(pool_ms, size=base_rtt_ms.shape + (PROBES_PER_SECOND,))
    else:
        residuals = wan_truth.probe_residuals_ms(rng, PROBES_PER_SECOND)
    probes = residuals.min(axis=-1)
    return IntervalMeasurements(
        duration_s=stats.duration_s,
        arrivals=stats.arrivals,
        writes=stats.writes,
        requests=stats.requests,
        violations=stats.violations,
        min_response_ms=stats.min_response_ms[..., -1],
        probe_rtt_ms=base_rtt_ms + probes,
    )


class KurmaSimEnvironment:
    """The simulated sites as an environment (``geoslo.control.Environment``).

    ``rate_traces[i]`` is site i's client load per second (req/s), repeated when it ends;
    ``base_rtt_ms(t_s)`` the base RTT matrix at simulated time t (or a fixed matrix);
    ``residual_rtt_samples_ms`` the WAN jitter on top of it."""

    simulated = True

    def __init__(
        self,
        *,
        site_names: Sequence[str],
        backend: BackendParams,
        rate_traces: Sequence[np.ndarray],
        base_rtt_ms: Callable[[float], np.ndarray] | np.ndarray,
        residual_rtt_samples_ms: np.ndarray,
        interval_s: float,
        write_fraction: float = 0.0,
        slo_ms: float = 30.0,
        seed: int = 0,
        server_choice: str | None = None,
    ) -> None:
        if not (np.isfinite(interval_s) and interval_s > 0):
            raise InputError("interval_s", f"must be > 0, not {interval_s}")
        self.site_names = tuple(site_names)
        self.interval_s = float(interval_s)
        self._rtt = base_rtt_ms if callable(base_rtt_ms) else (lambda _t: base_rtt_ms)
        self._pool_ms = np.asarray(residual_rtt_samples_ms, dtype=float)
        self._rng = np.random.default_rng(seed + 1)
        self.sim = RequestLevelSim(
            site_names=self.site_names,
            backend=backend,
            rate_traces=list(rate_traces),
            write_fraction=write_fraction,
            base_rtt_ms=base_rtt_ms,
            residual_rtt_samples_ms=self._pool_ms,
            slo_ms=slo_ms,
            seed=seed,
            repeat_traces=True,
            server_choice=server_choice,
        )
        self.fractions = np.eye(len(self.site_names))
        self.last_stats: IntervalStats | None = None

    async def start(self) -> None:
        """Nothing to bring up: the simulator is built in the constructor."""

    async def observe(self) -> IntervalMeasurements:
        """Simulate the next interval with the routing in force; its measurements."""
        stats = await asyncio.to_thread(self.sim.run, self.interval_s, self.fractions)
        self.last_stats = stats
        base = np.asarray(self._rtt(self.sim.now_s), dtype=float)
        return interval_measurements(stats, base, self._pool_ms, self._rng)

    async def apply(self, routing: Routing) -> None:
        """Put the routing's fractions in force from the next interval on (§6)."""
        fractions = np.asarray(routing.fractions, dtype=float)
        n = len(self.site_names)
        if fractions.shape != (n, n):
            raise InputError("fractions", f"must be {n}x{n}, not {fractions.shape}")
        self.fractions = fractions.copy()

    async def close(self) -> None:
        """Nothing runs outside this process."""

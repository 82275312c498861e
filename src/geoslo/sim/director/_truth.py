"""Ground truth of one storage server of the binned key-value store (FAST 2011, §2, §5.4).

A server has a capacity of ``service_rps`` gets per second (a put costs ``put_cost`` gets).
A get's latency is ``base_ms`` plus a log-normal delay (median ``median_ms``, shape
``sigma``: the network, the runtime, the host) inflated by the queue, ``1 / (1 - rho)``
at utilisation ``rho``, so that the tail at a threshold grows smoothly with the load:
``P(T > x) = 1 - Phi((ln((x - base) (1 - rho)) - ln(median)) / sigma)``; at ``rho >= 1``
every request is late. Environmental noise (§2.1, §3.3), independent across servers,
redrawn every noise period:

* the capacity is scaled by a log-normal factor (neighbours on the same host);
* with probability ``hiccup_probability`` the server hiccups for the period: a fraction
  ``hiccup_fraction`` of its requests are slower than any threshold (pauses, noisy I/O).

What the steady-state model (§5.4: logistic, linear in the get and put rates) does not
assume, each off by default and switched on by :meth:`ServerPerformance.contended` (issue
23: a truth the model is not exact on by construction):

* **write contention**: a put's cost grows with the put rate, ``put_cost * (1 + put_rps /
  contention_put_rps)`` (writers queue on locks and the log), so the work is quadratic in
  the puts and the boundary in (get, put) is curved, not a line;
* **heterogeneous servers**: each server's capacity is scaled for its whole life by a
  log-normal factor (``server_capacity_sigma``: different hosts, §2.1 "between different
  servers");
* **slowdowns lasting minutes**: each noise period a server becomes slow (capacity times
  ``slowdown_capacity_fraction``) with probability ``slowdown_probability`` and stays slow
  for ``slowdown_mean_s`` on average (a two-state Markov chain: a noisy neighbour).

The fastest of several replicas counts, and their delays are independent, so replication
shortens the tail and steadies the p99 (§3.3, Fig. 3-4). A copy into a server costs it
work in proportion to the copy rate (Fig. 2: the target suffers, the source hardly). The
actual copy rate is the specified one times a factor that falls with the target's
utilisation and with the specified rate (§5.4).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr, ndtri

__all__ = ["ServerPerformance"]


@dataclass(frozen=True)
class ServerPerformance:
    """One server's behaviour. Calibrated so that a 95/5 mix crosses a p99 of 100 ms at a
    few thousand req/s and a lightly loaded server's p99 is a few tens of ms (§2.1: mean
    11 ms, p99 82 ms under their steady load); any scale would do, ours is not fitted."""

    service_rps: float = 10_000.0
    put_cost: float = 3.0  # a put is this many gets of work
    base_ms: float = 1.0
    median_ms: float = 5.0
    sigma: float = 0.77  # p99 about 30 ms on an idle server
    capacity_sigma: float = 0.05  # log-normal spread of the capacity per noise period
    hiccup_probability: float = 0.05  # per server and noise period
    hiccup_fraction: float = 0.05  # of the requests in a hiccup, all past the threshold
    noise_period_s: float = 20.0
    copy_work_bytes_per_s: float = 40e6  # a copy at this rate takes the target's whole capacity
    copy_source_share: float = 0.2  # the source's cost relative to the target's
    contention_put_rps: float = np.inf  # puts/s at which a put costs twice put_cost
    server_capacity_sigma: float = 0.0  # log-normal spread of a server's lasting capacity
    slowdown_probability: float = 0.0  # per server and noise period, of starting a slowdown
    slowdown_mean_s: float = 300.0  # mean length of a slowdown
    slowdown_capacity_fraction: float = 0.6  # a slow server's capacity, of its own

    @classmethod
    def contended(cls) -> ServerPerformance:
        """The truth of issue 23 (ours, not the paper's): write contention that doubles a
        put's cost at 1,000 puts/s, servers whose lasting capacity spreads by 10%, and
        slowdowns to 60% of capacity that start in 0.5% of noise periods and last 5 minutes
        on average (about 7% of servers slow at any time). Everything else as the default."""
        return cls(
            contention_put_rps=1000.0,
            server_capacity_sigma=0.1,
            slowdown_probability=0.005,
            slowdown_mean_s=300.0,
        )

    @property
    def is_linear(self) -> bool:
        """Whether the work is linear in the rates and servers have no lasting state: the
        truth the logistic model's linear boundary is exact on."""
        return (
            np.isinf(self.contention_put_rps)
            and self.server_capacity_sigma == 0.0
            and self.slowdown_probability == 0.0
        )

    def utilisation(self, get_rps, put_rps, capacity_factor=1.0, copy_in_bytes_per_s=0.0):
        """Fraction of the server's capacity in use (may exceed 1: overload)."""
        rho = self.work(get_rps, put_rps) / (self.service_rps * np.asarray(capacity_factor, float))
        return rho + self.copy_utilisation(copy_in_bytes_per_s)

    def work(self, get_rps, put_rps):
        """Gets of work per second: a put costs ``put_cost`` gets, more under contention."""
        put = np.asarray(put_rps, float)
        return np.asarray(get_rps, float) + self.put_cost * put * (
            1.0 + put / self.contention_put_rps
        )

    def copy_utilisation(self, copy_in_bytes_per_s):
        """The share of the capacity that copying in at this rate takes (Fig. 2)."""
        return np.asarray(copy_in_bytes_per_s, float) / self.copy_work_bytes_per_s

    def tail(self, threshold_ms, rho, hiccup=0.0):
        """``P(latency > threshold)`` at utilisation ``rho`` (arrays broadcast)."""
        rho = np.asarray(rho, float)
        slack = np.clip(1.0 - rho, 1e-12, None)
        delay_ms = np.maximum(np.asarray(threshold_ms, float) - self.base_ms, 1e-12)
        z = (np.log(delay_ms * slack) - np.log(self.median_ms)) / self.sigma
        queue = np.where(rho < 1.0, 1.0 - ndtr(z), 1.0)
        return hiccup + (1.0 - hiccup) * queue

    def draw_noise(self, servers: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """(capacity factor, hiccup fraction) of each server for one noise period."""
        factor = np.exp(self.capacity_sigma * rng.standard_normal(servers))
        hiccup = np.where(rng.random(servers) < self.hiccup_probability, self.hiccup_fraction, 0.0)
        return factor, hiccup

    def draw_server_factor(self, servers: int, rng: np.random.Generator) -> np.ndarray:
        """Each new server's lasting capacity factor (1 and no draw when homogeneous)."""
        if self.server_capacity_sigma == 0.0:
            return np.ones(servers)
        return np.exp(self.server_capacity_sigma * rng.standard_normal(servers))

    @property
    def slowdown_end_probability(self) -> float:
        """Per noise period, the chance that a slowdown ends (mean length ``slowdown_mean_s``)."""
        return min(self.noise_period_s / self.slowdown_mean_s, 1.0)

    @property
    def slow_fraction(self) -> float:
        """The stationary share of servers that are slow."""
        start, end = self.slowdown_probability, self.slowdown_end_probability
        return start / (start + end) if start > 0 else 0.0

    def draw_slow(self, servers: int, rng: np.random.Generator) -> np.ndarray:
        """Whether each new server is slow, from the chain's stationary share."""
        if self.slowdown_probability == 0.0:
            return np.zeros(servers, bool)
        return rng.random(servers) < self.slow_fraction

    def step_slow(self, slow: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One noise period of the slowdown chain: slowdowns start and end."""
        if self.slowdown_probability == 0.0:
            return np.zeros_like(slow, dtype=bool)
        u = rng.random(len(slow))
        return np.where(slow, u >= self.slowdown_end_probability, u < self.slowdown_probability)

    def lasting_factor(self, server_factor, slow):
        """Capacity factor from the server itself and its slowdown (multiplies the noise)."""
        return np.asarray(server_factor, float) * np.where(
            slow, self.slowdown_capacity_fraction, 1.0
        )

    def fleet_noise(
        self, servers: int, periods: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """(capacity factor, hiccup fraction) of ``servers`` x ``periods`` server-periods
        of a fleet (flattened, server-major): what benchmarks on tens of servers see
        (§5.4). The linear truth draws exactly what ``draw_noise`` does."""
        factor, hiccup = self.draw_noise(servers * periods, rng)
        if self.is_linear:
            return factor, hiccup
        lasting = np.empty((servers, periods))
        server_factor, slow = self.draw_server_factor(servers, rng), self.draw_slow(servers, rng)
        for k in range(periods):
            lasting[:, k] = self.lasting_factor(server_factor, slow)
            slow = self.step_slow(slow, rng)
        return factor * lasting.ravel(), hiccup

    def copy_factor(self, specified_bytes_per_s, target_rho):
        """Actual over specified copy rate: a busy target and a fast copy both slow it."""
        speed = np.asarray(specified_bytes_per_s, float) / self.copy_work_bytes_per_s
        busy = np.clip(np.asarray(target_rho, float), 0.0, 1.0)
        return np.clip(1.0 - 0.6 * busy**2 - 0.8 * speed, 0.1, 1.0)

    def capacity_rps(self, read_fraction: float, threshold_ms: float, percentile: float) -> float:
        """Total req/s at which a noiseless server (factor 1, not slow) reaches a tail of
        ``1 - percentile/100`` at the threshold: the ideal steady-state boundary. With
        contention the work ``a r + b r^2`` is quadratic in the rate r."""
        z = ndtri(percentile / 100.0)
        slack = self.median_ms * np.exp(self.sigma * z) / (threshold_ms - self.base_ms)
        work = max(1.0 - slack, 0.0) * self.service_rps
        put = 1.0 - read_fraction
        linear = read_fraction + self.put_cost * put
        quadratic = self.put_cost * put * put / self.contention_put_rps
        if quadratic == 0.0:
            return float(work / linear)
        return float((np.sqrt(linear * linear + 4.0 * quadratic * work) - linear) / (2 * quadratic))

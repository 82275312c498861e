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

    def utilisation(self, get_rps, put_rps, capacity_factor=1.0, copy_in_bytes_per_s=0.0):
        """Fraction of the server's capacity in use (may exceed 1: overload)."""
        work = np.asarray(get_rps, float) + self.put_cost * np.asarray(put_rps, float)
        rho = work / (self.service_rps * np.asarray(capacity_factor, float))
        return rho + self.copy_utilisation(copy_in_bytes_per_s)

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

    def copy_factor(self, specified_bytes_per_s, target_rho):
        """Actual over specified copy rate: a busy target and a fast copy both slow it."""
        speed = np.asarray(specified_bytes_per_s, float) / self.copy_work_bytes_per_s
        busy = np.clip(np.asarray(target_rho, float), 0.0, 1.0)
        return np.clip(1.0 - 0.6 * busy**2 - 0.8 * speed, 0.1, 1.0)

    def capacity_rps(self, read_fraction: float, threshold_ms: float, percentile: float) -> float:
        """Total req/s at which a noiseless server's tail at the threshold reaches
        ``1 - percentile/100``: the ideal steady-state boundary."""
        z = ndtri(percentile / 100.0)
        slack = self.median_ms * np.exp(self.sigma * z) / (threshold_ms - self.base_ms)
        per_request = read_fraction + self.put_cost * (1.0 - read_fraction)
        return float(max(1.0 - slack, 0.0) * self.service_rps / per_request)

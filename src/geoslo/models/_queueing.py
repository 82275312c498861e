"""Queueing formulas: the M/M/c sojourn-time distribution, Kurma's "Mmc" alternative (§7.1.1).

Kurma shows that SLO curves built from an M/M/c model (the paper's c = 10 servers at the
measured total capacity) overestimate capacity and so fail to redirect. We compute the exact
sojourn tail: T = W + S with S ~ Exp(mu), W = 0 with probability 1 - C and Exp(c mu - lambda)
otherwise, C being Erlang's C formula.
"""

from __future__ import annotations

import numpy as np

from geoslo.dist import LatencyDistribution
from geoslo.errors import InputError

__all__ = ["erlang_c", "mmc_sojourn_tail", "mmc_violation_surface"]


def erlang_c(servers: int, offered_load_erlangs: float) -> float:
    """Probability that an arrival waits in an M/M/c queue (Erlang C), by the stable B recursion."""
    if servers < 1:
        raise InputError("servers", "must be >= 1")
    a = float(offered_load_erlangs)
    if a >= servers:
        return 1.0
    erlang_b = 1.0
    for n in range(1, servers + 1):
        erlang_b = a * erlang_b / (n + a * erlang_b)
    rho = a / servers
    return erlang_b / (1.0 - rho + rho * erlang_b)


def mmc_sojourn_tail(
    servers: int, service_rate_per_s: float, arrival_rps: float, threshold_ms: np.ndarray | float
) -> np.ndarray:
    """P(T > t) for the M/M/c sojourn time T (exact; 1 at or beyond saturation)."""
    t_s = np.maximum(np.asarray(threshold_ms, dtype=float) / 1e3, 0.0)
    mu = float(service_rate_per_s)
    theta = servers * mu - float(arrival_rps)
    if theta <= 0:
        return np.ones_like(t_s)
    c = erlang_c(servers, arrival_rps / mu)
    if abs(theta - mu) < 1e-9 * mu:
        both = (1.0 + mu * t_s) * np.exp(-mu * t_s)
    else:
        both = (theta * np.exp(-mu * t_s) - mu * np.exp(-theta * t_s)) / (theta - mu)
    return np.clip((1.0 - c) * np.exp(-mu * t_s) + c * both, 0.0, 1.0)


def mmc_violation_surface(
    servers: int,
    service_rate_per_s: float,
    load_rps: np.ndarray,
    slo_ms: float,
    base_rtt_ms: np.ndarray,
    residual_rtt: LatencyDistribution | None = None,
) -> np.ndarray:
    """Violation fractions ``[base, load]`` of an M/M/c site for local (base 0) and remote requests.

    Remote: P(T + R > slo - b) = sum over residual atoms r of P(R = r) P(T > slo - b - r).
    """
    bases = np.asarray(base_rtt_ms, dtype=float)
    out = np.empty((len(bases), len(load_rps)))
    for k, load in enumerate(load_rps):
        for b, base in enumerate(bases):
            if base == 0 or residual_rtt is None:
                out[b, k] = mmc_sojourn_tail(servers, service_rate_per_s, load, slo_ms - base)
            else:
                tails = mmc_sojourn_tail(
                    servers, service_rate_per_s, load, slo_ms - base - residual_rtt.support_ms
                )
                out[b, k] = float(np.dot(residual_rtt.pmf, tails))
    return out

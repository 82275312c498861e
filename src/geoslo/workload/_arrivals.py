"""Request-level workload: arrival times, read/write mix and key popularity.

Kurma §7 fits a Poisson distribution to each second of a trace to obtain sub-second
arrivals, draws keys from a Zipf distribution (as YCSB does) and runs a 4% write
ratio in §7.1.2.
"""

from __future__ import annotations

import numpy as np

from geoslo.errors import InputError
from geoslo.workload._trace import RateTrace, _as_int

__all__ = ["poisson_arrivals", "operation_mix", "ZipfKeys"]


def poisson_arrivals(trace: RateTrace, seed: int, start_s: float = 0.0) -> np.ndarray:
    """Sorted arrival times in seconds: during second ``i`` of ``trace`` a Poisson
    number of requests with mean ``rate_rps[i]``, each uniform within that second
    (Kurma §7). Times start at ``start_s``.
    """
    try:
        offset = float(start_s)
    except (TypeError, ValueError):
        raise InputError("start_s", f"must be a number, got {start_s!r}") from None
    if not np.isfinite(offset):
        raise InputError("start_s", "must be finite")
    rng = np.random.default_rng(seed)
    counts = rng.poisson(trace.rate_rps)
    second_of_arrival = np.repeat(np.arange(trace.duration_s, dtype=np.float64), counts)
    times_s = second_of_arrival + rng.random(second_of_arrival.size)
    # Seconds are already in order: sorting only reorders within each second.
    times_s.sort(kind="stable")
    return times_s + offset if offset else times_s


def operation_mix(n: int, write_fraction: float, seed: int) -> np.ndarray:
    """``n`` independent operations, True for a write with probability
    ``write_fraction`` (Kurma §7.1.2 uses 0.04)."""
    count = _as_int(n, "n", minimum=0)
    try:
        fraction = float(write_fraction)
    except (TypeError, ValueError):
        raise InputError("write_fraction", f"must be a number, got {write_fraction!r}") from None
    if not 0.0 <= fraction <= 1.0:
        raise InputError("write_fraction", f"must be in [0, 1], got {write_fraction!r}")
    return np.random.default_rng(seed).random(count) < fraction


class ZipfKeys:
    """Keys ``0 .. n_keys-1`` with ``P(key k) ∝ 1 / (k + 1) ** exponent``; key 0 is the
    most popular. YCSB's default constant is 0.99 (Kurma §7 follows YCSB [31]).

    Sampling inverts a precomputed CDF table (``n_keys`` floats) by binary search.
    """

    __slots__ = ("n_keys", "exponent", "_cdf")

    def __init__(self, n_keys: int, exponent: float = 0.99) -> None:
        self.n_keys = _as_int(n_keys, "n_keys", minimum=1)
        try:
            self.exponent = float(exponent)
        except (TypeError, ValueError):
            raise InputError("exponent", f"must be a number, got {exponent!r}") from None
        if not np.isfinite(self.exponent) or self.exponent < 0:
            raise InputError("exponent", f"must be finite and >= 0, got {exponent!r}")
        weights = np.arange(1, self.n_keys + 1, dtype=np.float64) ** -self.exponent
        cdf = np.cumsum(weights)
        cdf /= cdf[-1]
        cdf[-1] = 1.0
        cdf.setflags(write=False)
        self._cdf = cdf

    def __repr__(self) -> str:
        return f"ZipfKeys(n_keys={self.n_keys}, exponent={self.exponent:g})"

    def probabilities(self) -> np.ndarray:
        """Probability of each key, in key order."""
        return np.diff(self._cdf, prepend=0.0)

    def sample(self, n: int, seed: int) -> np.ndarray:
        """``n`` keys (int64) drawn independently."""
        count = _as_int(n, "n", minimum=0)
        u = np.random.default_rng(seed).random(count)
        return np.searchsorted(self._cdf, u, side="right").astype(np.int64)

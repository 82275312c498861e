"""WAN links between sites: a piecewise-constant base RTT plus a residual.

Kurma (§7, Table 2) observes the base propagation RTT between its datacenters move in
steps within a small range (London-Ireland 9-10 ms, London-Frankfurt 11-14 ms,
Ireland-Frankfurt 22-27 ms) as routes change; the residual above the base (queueing,
congestion) is a latency distribution from :mod:`geoslo.dist`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from geoslo._checks import non_negative
from geoslo.errors import InputError
from geoslo.topology._sites import _check_name

__all__ = ["BaseRttSchedule", "poisson_change_times", "routing_changes", "WanLink"]


def _read_only(values: object, field: str) -> np.ndarray:
    try:
        array = np.array(values, dtype=np.float64, ndmin=1)
    except (TypeError, ValueError):
        raise InputError(field, "must be numbers") from None
    if array.ndim != 1 or array.size == 0:
        raise InputError(field, f"must be a non-empty 1-D array, got shape {array.shape}")
    if not np.all(np.isfinite(array)):
        raise InputError(field, "must be finite (found NaN or inf)")
    array.setflags(write=False)
    return array


@dataclass(frozen=True, eq=False)
class BaseRttSchedule:
    """Base RTT over time: ``rtt_ms[i]`` holds from ``change_times_s[i]`` until the next
    change (the first value also holds before the first change time)."""

    change_times_s: np.ndarray
    rtt_ms: np.ndarray

    def __post_init__(self) -> None:
        times = _read_only(self.change_times_s, "change_times_s")
        rtts = _read_only(self.rtt_ms, "rtt_ms")
        if times.size != rtts.size:
            raise InputError(
                "rtt_ms", f"need one RTT per change time ({times.size}), got {rtts.size}"
            )
        if np.any(np.diff(times) <= 0):
            raise InputError("change_times_s", "must be strictly increasing")
        if np.any(rtts < 0):
            raise InputError("rtt_ms", f"must be >= 0, found {rtts.min():g}")
        object.__setattr__(self, "change_times_s", times)
        object.__setattr__(self, "rtt_ms", rtts)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BaseRttSchedule):
            return NotImplemented
        return np.array_equal(self.change_times_s, other.change_times_s) and np.array_equal(
            self.rtt_ms, other.rtt_ms
        )

    __hash__ = None  # type: ignore[assignment]

    @classmethod
    def constant(cls, rtt_ms: float) -> BaseRttSchedule:
        """A base RTT that never changes (Kurma §7.2: static WAN latencies)."""
        return cls(np.array([0.0]), np.array([non_negative(rtt_ms, "rtt_ms")]))

    def at(self, t_s: float | np.ndarray) -> float | np.ndarray:
        """Base RTT in ms at time(s) ``t_s``; a float for a scalar, an array otherwise."""
        times = np.asarray(t_s, dtype=np.float64)
        index = np.searchsorted(self.change_times_s, times, side="right") - 1
        values = self.rtt_ms[np.clip(index, 0, None)]
        return float(values) if times.ndim == 0 else values

    @property
    def min_ms(self) -> float:
        return float(self.rtt_ms.min())

    @property
    def max_ms(self) -> float:
        return float(self.rtt_ms.max())


def routing_changes(
    low_ms: float, high_ms: float, mean_interval_s: float, duration_s: float, seed: int
) -> BaseRttSchedule:
    """Route changes as step changes of the base RTT: change times form a Poisson
    process with mean gap ``mean_interval_s`` over ``[0, duration_s)``, and each new
    base RTT is uniform in ``[low_ms, high_ms]`` (the observed range, Kurma Table 2)."""
    low = non_negative(low_ms, "low_ms")
    high = non_negative(high_ms, "high_ms")
    if high < low:
        raise InputError("high_ms", f"must be >= low_ms ({low:g}), got {high:g}")
    interval = non_negative(mean_interval_s, "mean_interval_s")
    if interval == 0:
        raise InputError("mean_interval_s", "must be > 0")
    duration = non_negative(duration_s, "duration_s")
    if duration == 0:
        raise InputError("duration_s", "must be > 0")
    rng = np.random.default_rng(seed)
    times = poisson_change_times(interval, duration, rng)
    rtts = rng.uniform(low, high, times.size)
    return BaseRttSchedule(times, rtts)


def poisson_change_times(
    mean_interval_s: float, duration_s: float, rng: np.random.Generator
) -> np.ndarray:
    """0 and then the times of a Poisson process of mean gap ``mean_interval_s`` within
    ``[0, duration_s)``: when routes change."""
    if not (mean_interval_s > 0 and duration_s > 0):
        raise InputError("mean_interval_s", "the mean gap and the duration must be > 0")
    # Enough gaps to pass the end with overwhelming probability, then top up if not.
    n_guess = int(duration_s / mean_interval_s * 1.5) + 16
    gaps = rng.exponential(mean_interval_s, n_guess)
    while gaps.sum() < duration_s:
        gaps = np.append(gaps, rng.exponential(mean_interval_s, n_guess))
    times = np.cumsum(gaps)
    return np.concatenate([[0.0], times[times < duration_s]])


@dataclass(frozen=True)
class WanLink:
    """A directed WAN path ``src -> dst``: total RTT = base (schedule) + residual
    (a :class:`geoslo.dist.LatencyDistribution`, or None for no residual).

    A number for ``base_rtt`` means a constant base RTT in ms.
    """

    src: str
    dst: str
    base_rtt: BaseRttSchedule
    residual_rtt_ms: object = None

    def __post_init__(self) -> None:
        _check_name(self.src, "src")
        _check_name(self.dst, "dst")
        if self.src == self.dst:
            raise InputError("dst", f"a link needs two different sites, got {self.src!r} twice")
        if not isinstance(self.base_rtt, BaseRttSchedule):
            if isinstance(self.base_rtt, bool | str) or np.ndim(self.base_rtt) != 0:
                raise InputError("base_rtt", "must be a BaseRttSchedule or a number of ms")
            object.__setattr__(self, "base_rtt", BaseRttSchedule.constant(self.base_rtt))
        if self.residual_rtt_ms is not None and not hasattr(self.residual_rtt_ms, "sample"):
            raise InputError(
                "residual_rtt_ms",
                f"must be a latency distribution (with .sample), got {type(self.residual_rtt_ms)}",
            )

    def reversed(self) -> WanLink:
        """The same path seen from ``dst`` (links are symmetric unless both given)."""
        return WanLink(self.dst, self.src, self.base_rtt, self.residual_rtt_ms)

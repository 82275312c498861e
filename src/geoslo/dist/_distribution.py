"""Latency distributions on a lattice and their algebra (Kurma §4.2, CosTLO §5.3).

A :class:`LatencyDistribution` puts probability ``pmf[k]`` on the time
``offset_ms + k * step_ms``. On such a lattice the operations the controllers need
are exact: the sum of independent parts with the same step (Kurma §4.2: service
time + residual WAN latency + base delay) is a lattice variable whose offsets add
and whose pmfs convolve; a shift moves the offset; the minimum of independent
copies (CosTLO §5.3: k concurrent requests, or the faster of two data centers)
keeps the lattice. Where lattices differ (different step, or offsets not a whole
number of steps apart), :func:`mixture` and :func:`minimum` re-grid onto the first
component's lattice by splitting each atom's mass linearly between its two
neighbours, which keeps the mean exact.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from geoslo.dist import _lattice
from geoslo.errors import InputError

SeedLike = int | np.random.SeedSequence | np.random.Generator


def _stats() -> Any:
    """``scipy.stats``, imported on first use: it takes ~0.5 s, and a controller's
    decision on already-tabulated curves never needs it (issue 17, start-up)."""
    import scipy.stats

    return scipy.stats


@dataclass(frozen=True, eq=False)
class LatencyDistribution:
    """Distribution of a latency in ms: mass ``pmf[k]`` at ``offset_ms + k * step_ms``.

    Immutable: ``pmf`` is a read-only float64 array summing to 1. The constructor
    validates, normalises and drops exact-zero masses at both ends (moving the
    offset), so ``pmf[0]`` and ``pmf[-1]`` are always positive.
    """

    offset_ms: float
    step_ms: float
    pmf: np.ndarray

    def __post_init__(self) -> None:
        offset_ms = _lattice.as_finite_float(self.offset_ms, "offset_ms")
        step_ms = _lattice.check_step(self.step_ms)
        pmf = _validated_pmf(self.pmf)
        offset_ms, pmf = _lattice.strip_zeros(offset_ms, step_ms, pmf / pmf.sum())
        object.__setattr__(self, "offset_ms", offset_ms)
        object.__setattr__(self, "step_ms", step_ms)
        object.__setattr__(self, "pmf", _read_only(pmf))

    @classmethod
    def _trusted(
        cls, offset_ms: float, step_ms: float, pmf: np.ndarray, normalise: bool = True
    ) -> LatencyDistribution:
        """Build from arrays the algebra produced: non-negative, positive sum, sized."""
        offset_ms, pmf = _lattice.strip_zeros(offset_ms, step_ms, pmf)
        dist = object.__new__(cls)
        object.__setattr__(dist, "offset_ms", float(offset_ms))
        object.__setattr__(dist, "step_ms", float(step_ms))
        object.__setattr__(dist, "pmf", _read_only(pmf / pmf.sum() if normalise else pmf))
        return dist

    # ------------------------------------------------------------------ constructors

    @classmethod
    def from_samples(cls, samples_ms: Any, step_ms: float = 0.1) -> LatencyDistribution:
        """Empirical distribution: each sample rounds to the nearest point ``k * step_ms``."""
        step_ms = _lattice.check_step(step_ms)
        samples = _validated_samples(samples_ms)
        k = np.rint(samples / step_ms)
        k_min = k.min()
        _lattice.check_lattice_size(int(k.max() - k_min) + 1)
        counts = np.bincount((k - k_min).astype(np.int64)).astype(np.float64)
        return cls._trusted(float(k_min) * step_ms, step_ms, counts)

    @classmethod
    def from_pmf(cls, offset_ms: float, step_ms: float, pmf: Any) -> LatencyDistribution:
        """Distribution with mass proportional to ``pmf[k]`` at ``offset_ms + k * step_ms``."""
        return cls(offset_ms, step_ms, pmf)

    @classmethod
    def point(cls, value_ms: float, step_ms: float = 0.1) -> LatencyDistribution:
        """All mass at ``value_ms`` (a constant delay, e.g. Kurma's base propagation delay)."""
        return cls(value_ms, step_ms, np.ones(1))

    @classmethod
    def exponential(
        cls, mean_ms: float, step_ms: float = 0.1, shift_ms: float = 0.0
    ) -> LatencyDistribution:
        """Exponential with mean ``mean_ms``, shifted by ``shift_ms``."""
        mean_ms = _positive(mean_ms, "mean_ms")
        return cls.from_scipy(_stats().expon(scale=mean_ms), step_ms).shift(shift_ms)

    @classmethod
    def lognormal(
        cls, median_ms: float, sigma: float, step_ms: float = 0.1, shift_ms: float = 0.0
    ) -> LatencyDistribution:
        """Log-normal with median ``median_ms`` and log-scale ``sigma``, shifted by ``shift_ms``."""
        median_ms = _positive(median_ms, "median_ms")
        sigma = _positive(sigma, "sigma")
        rv = _stats().lognorm(s=sigma, scale=median_ms)
        return cls.from_scipy(rv, step_ms).shift(shift_ms)

    @classmethod
    def gamma(
        cls, shape: float, scale_ms: float, step_ms: float = 0.1, shift_ms: float = 0.0
    ) -> LatencyDistribution:
        """Gamma with ``shape`` and ``scale_ms`` (mean ``shape * scale_ms``), shifted."""
        shape = _positive(shape, "shape")
        scale_ms = _positive(scale_ms, "scale_ms")
        rv = _stats().gamma(a=shape, scale=scale_ms)
        return cls.from_scipy(rv, step_ms).shift(shift_ms)

    @classmethod
    def uniform(cls, low_ms: float, high_ms: float, step_ms: float = 0.1) -> LatencyDistribution:
        """Uniform on ``[low_ms, high_ms]``; a point mass if they are equal."""
        low_ms = _lattice.as_finite_float(low_ms, "low_ms")
        high_ms = _lattice.as_finite_float(high_ms, "high_ms")
        if high_ms < low_ms:
            raise InputError("high_ms", f"must be >= low_ms ({low_ms}), got {high_ms}")
        if high_ms == low_ms:
            return cls.point(low_ms, step_ms)
        return cls.from_scipy(_stats().uniform(loc=low_ms, scale=high_ms - low_ms), step_ms)

    @classmethod
    def from_scipy(
        cls, frozen_rv: Any, step_ms: float = 0.1, tail_mass: float = 1e-9
    ) -> LatencyDistribution:
        """Discretise a frozen scipy distribution onto the points ``k * step_ms``.

        Point ``x`` gets the probability of ``(x - step/2, x + step/2]``, as if each
        value were rounded to the nearest point, so ``tail_probability(x)`` equals
        the continuous tail at ``x + step/2``. The range is cut where less than
        ``tail_mass / 2`` lies beyond either end; that mass joins the end points.
        """
        step_ms = _lattice.check_step(step_ms)
        tail_mass = _lattice.as_finite_float(tail_mass, "tail_mass")
        if not 0.0 <= tail_mass < 1.0:
            raise InputError("tail_mass", f"must be in [0, 1), got {tail_mass}")
        for method in ("cdf", "sf", "ppf", "isf"):
            if not callable(getattr(frozen_rv, method, None)):
                raise InputError(
                    "frozen_rv", f"must be a frozen scipy.stats distribution (no {method} method)"
                )
        low_ms = float(frozen_rv.ppf(tail_mass / 2.0))
        high_ms = float(frozen_rv.isf(tail_mass / 2.0))
        if not (math.isfinite(low_ms) and math.isfinite(high_ms)):
            raise InputError(
                "tail_mass",
                "the range is not finite; an unbounded distribution needs tail_mass > 0",
            )
        k_min = round(low_ms / step_ms)
        n_points = round(high_ms / step_ms) - k_min + 1
        _lattice.check_lattice_size(n_points)
        pmf = _binned_masses(frozen_rv, (k_min + np.arange(1, n_points) - 0.5) * step_ms)
        return cls._trusted(k_min * step_ms, step_ms, np.clip(pmf, 0.0, None))

    # ----------------------------------------------------------------------- queries

    @property
    def support_ms(self) -> np.ndarray:
        """The lattice points ``offset_ms + k * step_ms``, k = 0..n-1."""
        return self.offset_ms + self.step_ms * np.arange(self.pmf.size)

    def mean_ms(self) -> float:
        """Expected latency."""
        return self.offset_ms + self.step_ms * self._mean_index

    def std_ms(self) -> float:
        """Standard deviation of the latency."""
        k = np.arange(self.pmf.size) - self._mean_index
        return self.step_ms * math.sqrt(max(float(np.dot(self.pmf, k * k)), 0.0))

    def cdf(self, x_ms: float | np.ndarray) -> float | np.ndarray:
        """``P(X <= x)``; vectorised over ``x_ms``."""
        return self._lookup(self._cdf_table, x_ms, "x_ms")

    def tail_probability(self, threshold_ms: float | np.ndarray) -> float | np.ndarray:
        """``P(X > t)``, exact on the lattice (e.g. the SLO violation rate, Kurma §4.2).

        Summed from the top, so small tails keep their relative precision.
        """
        return self._lookup(self._tail_table, threshold_ms, "threshold_ms")

    def quantile_ms(self, fraction: float | np.ndarray) -> float | np.ndarray:
        """Smallest lattice point ``x`` with ``P(X <= x) >= fraction`` (up to 1e-12)."""
        fractions = np.asarray(fraction, dtype=np.float64)
        if np.any(np.isnan(fractions)) or np.any((fractions < 0.0) | (fractions > 1.0)):
            raise InputError("fraction", f"must be in [0, 1], got {fraction!r}")
        cdf = self._cdf_table[1:]
        index = np.minimum(np.searchsorted(cdf, fractions - 1e-12, side="left"), cdf.size - 1)
        values = self.offset_ms + self.step_ms * index
        return float(values) if values.ndim == 0 else values

    # ----------------------------------------------------------------------- algebra

    def shift(self, delta_ms: float) -> LatencyDistribution:
        """The distribution of ``X + delta_ms`` (delta may be negative)."""
        delta_ms = _lattice.as_finite_float(delta_ms, "delta_ms")
        return self._trusted(self.offset_ms + delta_ms, self.step_ms, self.pmf, normalise=False)

    def convolve(self, other: LatencyDistribution) -> LatencyDistribution:
        """Distribution of ``X + Y`` for independent X, Y with the same step (exact)."""
        if not isinstance(other, LatencyDistribution):
            raise InputError("other", f"must be a LatencyDistribution, got {type(other).__name__}")
        if not _lattice.same_step(self.step_ms, other.step_ms):
            raise InputError(
                "other.step_ms",
                f"{other.step_ms} differs from step_ms {self.step_ms}; build both on the "
                "same step or use add_monte_carlo",
            )
        pmf = _lattice.convolve_pmfs(self.pmf, other.pmf)
        return self._trusted(self.offset_ms + other.offset_ms, self.step_ms, pmf)

    def __add__(self, other: LatencyDistribution | float) -> LatencyDistribution:
        """Independent sum with a distribution, or a shift by a number of ms."""
        if isinstance(other, LatencyDistribution):
            return self.convolve(other)
        if isinstance(other, int | float | np.integer | np.floating):
            return self.shift(float(other))
        return NotImplemented

    def __radd__(self, other: float) -> LatencyDistribution:
        if isinstance(other, int | float | np.integer | np.floating):
            return self.shift(float(other))
        return NotImplemented

    def add_monte_carlo(
        self,
        other: LatencyDistribution,
        n_samples: int,
        seed: SeedLike,
        step_ms: float | None = None,
    ) -> LatencyDistribution:
        """Estimate the distribution of ``X + Y`` from ``n_samples`` joint draws (Kurma §4.2).

        With ``step_ms=None`` and equal steps the sums stay on the exact lattice;
        otherwise they are rounded to the points ``k * step_ms`` (default: this step).
        """
        if not isinstance(other, LatencyDistribution):
            raise InputError("other", f"must be a LatencyDistribution, got {type(other).__name__}")
        n_samples = _positive_int(n_samples, "n_samples")
        rng = np.random.default_rng(seed)
        index_a = self._sample_indices(n_samples, rng)
        index_b = other._sample_indices(n_samples, rng)
        if step_ms is None and _lattice.same_step(self.step_ms, other.step_ms):
            counts = np.bincount(index_a + index_b).astype(np.float64)
            return self._trusted(self.offset_ms + other.offset_ms, self.step_ms, counts)
        sums_ms = (
            self.offset_ms + self.step_ms * index_a + (other.offset_ms + other.step_ms * index_b)
        )
        return self.from_samples(sums_ms, self.step_ms if step_ms is None else step_ms)

    def minimum_of(self, k: int) -> LatencyDistribution:
        """Minimum of ``k`` independent copies: ``P(min > t) = P(X > t)**k`` (CosTLO §5.3)."""
        k = _positive_int(k, "k")
        if k == 1:
            return self
        tail_k = self._tail_table[1:] ** k
        pmf = np.concatenate(([1.0], tail_k[:-1])) - tail_k
        return self._trusted(self.offset_ms, self.step_ms, np.clip(pmf, 0.0, None))

    def sample(self, n: int, seed: SeedLike) -> np.ndarray:
        """``n`` independent lattice values drawn with ``numpy.random.default_rng(seed)``."""
        n = _non_negative_int(n, "n")
        index = self._sample_indices(n, np.random.default_rng(seed))
        return self.offset_ms + self.step_ms * index

    def trimmed(self, tail_mass: float = 1e-12) -> LatencyDistribution:
        """Drop the longest leading and trailing runs each holding at most ``tail_mass``.

        The rest is renormalised; this keeps lattices short after repeated algebra.
        """
        tail_mass = _lattice.as_finite_float(tail_mass, "tail_mass")
        if not 0.0 <= tail_mass < 0.5:
            raise InputError("tail_mass", f"must be in [0, 0.5), got {tail_mass}")
        first = int(np.searchsorted(self._cdf_table[1:], tail_mass, side="right"))
        reversed_cum = np.cumsum(self.pmf[::-1])
        last = self.pmf.size - 1 - int(np.searchsorted(reversed_cum, tail_mass, side="right"))
        if first == 0 and last == self.pmf.size - 1:
            return self
        return self._trusted(
            self.offset_ms + first * self.step_ms, self.step_ms, self.pmf[first : last + 1]
        )

    # ---------------------------------------------------------------------- plumbing

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LatencyDistribution):
            return NotImplemented
        return (
            self.offset_ms == other.offset_ms
            and self.step_ms == other.step_ms
            and np.array_equal(self.pmf, other.pmf)
        )

    def __hash__(self) -> int:
        return hash((self.offset_ms, self.step_ms, self.pmf.tobytes()))

    def __repr__(self) -> str:
        return (
            f"LatencyDistribution(offset_ms={self.offset_ms:g}, step_ms={self.step_ms:g}, "
            f"n_points={self.pmf.size}, mean_ms={self.mean_ms():.6g})"
        )

    @cached_property
    def _mean_index(self) -> float:
        return float(np.dot(self.pmf, np.arange(self.pmf.size)))

    @cached_property
    def _cdf_table(self) -> np.ndarray:
        """``[0, P(X <= x_0), ..., P(X <= x_{n-1})]``; index 0 is "below the lattice"."""
        table = np.concatenate(([0.0], np.minimum(np.cumsum(self.pmf), 1.0)))
        table[-1] = 1.0
        return _read_only(table)

    @cached_property
    def _tail_table(self) -> np.ndarray:
        """``[1, P(X > x_0), ..., P(X > x_{n-1}) = 0]``, summed from the top."""
        from_top = np.cumsum(self.pmf[::-1])[::-1]
        table = np.concatenate(([1.0], np.minimum(from_top[1:], 1.0), [0.0]))
        return _read_only(table)

    def _lookup(self, table: np.ndarray, x_ms: float | np.ndarray, field: str) -> Any:
        """``table[1 + k]`` for the largest lattice index ``k`` with ``x_k <= x`` (0 below)."""
        last = self.pmf.size - 1
        if isinstance(x_ms, int | float) and not isinstance(x_ms, bool):
            if math.isnan(x_ms):
                raise InputError(field, "must not be NaN")
            u = (x_ms - self.offset_ms) / self.step_ms + _lattice.SNAP_STEPS
            position = -1 if u < 0.0 else min(math.floor(u), last) if u < last + 1 else last
            return float(table[position + 1])
        x = np.asarray(x_ms, dtype=np.float64)
        if np.any(np.isnan(x)):
            raise InputError(field, "must not contain NaN")
        u = np.floor((x - self.offset_ms) / self.step_ms + _lattice.SNAP_STEPS)
        position = np.clip(u, -1.0, float(last)).astype(np.int64)
        values = table[position + 1]
        return float(values) if values.ndim == 0 else values

    def _sample_indices(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Lattice indices of ``n`` draws by inverse transform."""
        index = np.searchsorted(self._cdf_table[1:], rng.random(n), side="right")
        return np.minimum(index, self.pmf.size - 1)


# ------------------------------------------------------------------ free functions


def mixture(
    components: Sequence[LatencyDistribution], weights: Sequence[float] | np.ndarray
) -> LatencyDistribution:
    """Distribution that is ``components[i]`` with probability ``weights[i]`` (normalised).

    Components off the first one's lattice are re-gridded onto it by splitting each
    atom's mass linearly between its two neighbours: the mean stays exact (an atom
    within ``SNAP_STEPS`` of a lattice point is moved onto it instead).
    """
    comps = _checked_components(components)
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or w.size != len(comps):
        raise InputError("weights", f"needs one weight per component ({len(comps)})")
    if not np.all(np.isfinite(w)) or np.any(w < 0.0) or w.sum() <= 0.0:
        raise InputError("weights", "must be finite, non-negative and not all zero")
    w = w / w.sum()
    first = comps[0]
    values_ms = np.concatenate([c.support_ms for c in comps])
    masses = np.concatenate([wi * c.pmf for wi, c in zip(w, comps, strict=True)])
    offset_ms, pmf = _lattice.regrid(values_ms, masses, first.offset_ms, first.step_ms)
    return LatencyDistribution._trusted(offset_ms, first.step_ms, pmf)


def minimum(components: Sequence[LatencyDistribution]) -> LatencyDistribution:
    """Minimum of independent, possibly different, latencies (CosTLO §5.3).

    ``P(min > t)`` is the product of the components' tails. On a common lattice
    (same step, offsets a whole number of steps apart) this is exact; otherwise the
    exact minimum over the union of all atoms is re-gridded onto the first
    component's lattice by linear mass splitting (mean exact, as in :func:`mixture`).
    """
    comps = _checked_components(components)
    first = comps[0]
    step_ms = first.step_ms
    on_common_lattice = all(
        _lattice.same_step(step_ms, c.step_ms)
        and _lattice.congruent(first.offset_ms, c.offset_ms, step_ms)
        for c in comps[1:]
    )
    upper_ms = min(c.offset_ms + c.step_ms * (c.pmf.size - 1) for c in comps)
    if on_common_lattice:
        lower_ms = min(c.offset_ms for c in comps)
        n_points = round((upper_ms - lower_ms) / step_ms) + 1
        _lattice.check_lattice_size(n_points)
        grid_ms = lower_ms + step_ms * np.arange(n_points)
    else:
        grid_ms = np.unique(np.concatenate([c.support_ms for c in comps]))
        grid_ms = grid_ms[grid_ms <= upper_ms]
    tail = np.ones(grid_ms.size)
    for c in comps:
        tail *= c.tail_probability(grid_ms)
    pmf = np.clip(np.concatenate(([1.0], tail[:-1])) - tail, 0.0, None)
    if on_common_lattice:
        return LatencyDistribution._trusted(float(grid_ms[0]), step_ms, pmf)
    offset_ms, pmf = _lattice.regrid(grid_ms, pmf, first.offset_ms, step_ms)
    return LatencyDistribution._trusted(offset_ms, step_ms, pmf)


def order_statistic(components: Sequence[LatencyDistribution], k: int) -> LatencyDistribution:
    """The k-th smallest of independent latencies (k = 1 is :func:`minimum`): when a
    quorum of k replies is in (CosTLO §7, quorumPUTsDone).

    ``P(X_(k) <= t)`` is the chance that at least k components are done by t, summed
    over how many are (a Poisson-binomial count, built one component at a time).
    """
    comps = _checked_components(components)
    k = _positive_int(k, "k")
    if k > len(comps):
        raise InputError("k", f"must be at most the number of components ({len(comps)})")
    first = comps[0]
    step_ms = first.step_ms
    lower_ms = min(c.offset_ms for c in comps)
    upper_ms = max(c.offset_ms + c.step_ms * (c.pmf.size - 1) for c in comps)
    n_points = round((upper_ms - lower_ms) / step_ms) + 1
    _lattice.check_lattice_size(n_points)
    grid_ms = lower_ms + step_ms * np.arange(n_points)
    done = np.zeros((len(comps) + 1, grid_ms.size))  # done[j, t] = P(exactly j done by t)
    done[0] = 1.0
    for c in comps:
        cdf = np.asarray(c.cdf(grid_ms), dtype=float)
        done[1:] = done[1:] * (1.0 - cdf) + done[:-1] * cdf
        done[0] = done[0] * (1.0 - cdf)
    at_least_k = done[k:].sum(axis=0)
    pmf = np.clip(np.diff(np.concatenate(([0.0], at_least_k))), 0.0, None)
    offset_ms, pmf = _lattice.regrid(grid_ms, pmf, first.offset_ms, step_ms)
    return LatencyDistribution._trusted(offset_ms, step_ms, pmf)


# ------------------------------------------------------------------------- helpers


def _binned_masses(frozen_rv: Any, inner_edges_ms: np.ndarray) -> np.ndarray:
    """Masses between consecutive edges, with -inf and +inf added at the ends.

    Differences of the cdf below the median and of the sf above it, so that
    small tail masses are not lost to cancellation.
    """
    cdf = np.concatenate(([0.0], np.asarray(frozen_rv.cdf(inner_edges_ms), float), [1.0]))
    sf = np.concatenate(([1.0], np.asarray(frozen_rv.sf(inner_edges_ms), float), [0.0]))
    return np.where(cdf[1:] <= 0.5, np.diff(cdf), -np.diff(sf))


def _validated_pmf(pmf: Any) -> np.ndarray:
    try:
        array = np.array(pmf, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError("pmf", "must be a 1-D array of numbers") from None
    if array.ndim != 1 or array.size == 0:
        raise InputError("pmf", f"must be a non-empty 1-D array, got shape {array.shape}")
    _lattice.check_lattice_size(array.size, "pmf")
    if not np.all(np.isfinite(array)):
        raise InputError("pmf", "must not contain NaN or inf")
    if np.any(array < 0.0):
        raise InputError("pmf", f"must be non-negative (min {array.min():g})")
    if array.sum() <= 0.0:
        raise InputError("pmf", "must have a positive sum")
    return array


def _validated_samples(samples_ms: Any) -> np.ndarray:
    try:
        samples = np.asarray(samples_ms, dtype=np.float64).ravel()
    except (TypeError, ValueError):
        raise InputError("samples_ms", "must be an array of numbers") from None
    if samples.size == 0:
        raise InputError("samples_ms", "is empty; give at least one latency sample")
    bad = np.flatnonzero(~np.isfinite(samples))
    if bad.size:
        raise InputError(
            "samples_ms", f"contains {bad.size} NaN or inf value(s), first at index {bad[0]}"
        )
    return samples


def _checked_components(components: Sequence[LatencyDistribution]) -> list[LatencyDistribution]:
    comps = list(components)
    if not comps:
        raise InputError("components", "needs at least one distribution")
    for i, c in enumerate(comps):
        if not isinstance(c, LatencyDistribution):
            raise InputError(
                f"components[{i}]", f"must be a LatencyDistribution, got {type(c).__name__}"
            )
    return comps


def _positive(value: float, field: str) -> float:
    number = _lattice.as_finite_float(value, field)
    if number <= 0.0:
        raise InputError(field, f"must be positive, got {number}")
    return number


def _non_negative_int(value: int, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise InputError(field, f"must be an integer, got {value!r}")
    if value < 0:
        raise InputError(field, f"must be >= 0, got {value}")
    return int(value)


def _positive_int(value: int, field: str) -> int:
    number = _non_negative_int(value, field)
    if number == 0:
        raise InputError(field, "must be >= 1")
    return number


def _read_only(array: np.ndarray) -> np.ndarray:
    """Freeze an array the caller no longer writes to (views of read-only data stay safe)."""
    array = np.asarray(array, dtype=np.float64)
    array.flags.writeable = False
    return array

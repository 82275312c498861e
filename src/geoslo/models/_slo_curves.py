"""SLO curves: the fraction of requests that miss the SLO as a function of load (Kurma §4).

A *profile* keeps the whole response-time distribution measured at each profiled load and
read/write mix (§4.1). From it, an :class:`SloSurface` gives the violation fraction at any
load, write fraction and base round-trip time: local requests use the profiled distribution
alone; requests redirected from a site ``base_rtt_ms`` away add the residual WAN latency
(convolution) and the base delay (a shift), §4.2. Surfaces are precomputed for every whole
millisecond of base delay so that a routing change only selects another curve (§6).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from geoslo.dist import LatencyDistribution, mixture
from geoslo.errors import InputError

__all__ = [
    "SloCurve",
    "ServiceProfile",
    "SloSurface",
    "profile_loads",
    "profile_backend",
    "saturation_rps",
    "build_slo_surface",
]


@dataclass(frozen=True)
class SloCurve:
    """Violation fraction at a destination as a piecewise-linear function of its load.

    Linear between grid points, the first value below the grid and 1.0 above it (a load
    beyond the last profiled point is treated as saturation), as in the solver's contract.
    """

    load_rps: np.ndarray
    violation_fraction: np.ndarray

    def __post_init__(self) -> None:
        load = np.asarray(self.load_rps, dtype=float)
        violation = np.asarray(self.violation_fraction, dtype=float)
        if load.ndim != 1 or load.shape != violation.shape or load.size < 2:
            raise InputError("load_rps", "needs at least two points, the same length as violation")
        if np.any(np.diff(load) <= 0):
            raise InputError("load_rps", "must be strictly increasing")
        object.__setattr__(self, "load_rps", load)
        object.__setattr__(self, "violation_fraction", np.clip(violation, 0.0, 1.0))

    def __call__(self, load_rps: float | np.ndarray) -> float | np.ndarray:
        return np.interp(load_rps, self.load_rps, self.violation_fraction, right=1.0)

    def load_at(self, violation_fraction: float) -> float:
        """Smallest load at which the curve reaches ``violation_fraction`` (linear in a step)."""
        above = np.nonzero(self.violation_fraction >= violation_fraction)[0]
        if above.size == 0:
            return float(self.load_rps[-1])
        k = int(above[0])
        if k == 0:
            return float(self.load_rps[0])
        v0, v1 = self.violation_fraction[k - 1], self.violation_fraction[k]
        x0, x1 = self.load_rps[k - 1], self.load_rps[k]
        return float(x0 + (violation_fraction - v0) / (v1 - v0) * (x1 - x0))


@dataclass(frozen=True)
class ServiceProfile:
    """Response-time distributions of one site measured at each (write fraction, load), §4.1."""

    write_fractions: np.ndarray  # increasing, e.g. [0, 0.05, 0.1, 0.2]
    load_rps: np.ndarray  # increasing, shared by every mix
    distributions: tuple[tuple[LatencyDistribution, ...], ...]  # [write fraction][load]
    min_service_ms: float  # the smallest response seen while profiling (base-RTT estimation, §6)

    def distribution_at(self, load_rps: float, write_fraction: float = 0.0) -> LatencyDistribution:
        """The response-time distribution at any load and mix: a mixture of the neighbouring
        profiled points weighted like bilinear interpolation (its tail is the interpolated tail)."""
        weights: dict[tuple[int, int], float] = {}
        for w, w_weight in _neighbours(self.write_fractions, write_fraction):
            for k, k_weight in _neighbours(self.load_rps, load_rps):
                weights[(w, k)] = weights.get((w, k), 0.0) + w_weight * k_weight
        parts = [(self.distributions[w][k], p) for (w, k), p in weights.items() if p > 0]
        return mixture([d for d, _ in parts], [p for _, p in parts])

    def scaled(self, capacity_factor: float) -> ServiceProfile:
        """The profile of a site ``capacity_factor`` times as large (near-linear scaling, §4.1)."""
        return ServiceProfile(
            self.write_fractions,
            self.load_rps * capacity_factor,
            self.distributions,
            self.min_service_ms,
        )


def _neighbours(grid: np.ndarray, x: float) -> list[tuple[int, float]]:
    """The two grid points around ``x`` (clamped to the ends) with linear weights."""
    if len(grid) == 1 or x <= grid[0]:
        return [(0, 1.0)]
    if x >= grid[-1]:
        return [(len(grid) - 1, 1.0)]
    hi = int(np.searchsorted(grid, x))
    t = (x - grid[hi - 1]) / (grid[hi] - grid[hi - 1])
    return [(hi - 1, 1.0 - t), (hi, t)]


def profile_loads(
    saturation_rps: float,
    n_points: int = 32,
    lowest_fraction: float = 0.05,
    highest_fraction: float = 0.95,
) -> np.ndarray:
    """Loads to profile: exponentially spaced, denser near saturation (§4.1).

    The gap to saturation shrinks geometrically: utilisation goes from ``lowest_fraction``
    to ``highest_fraction`` with each step closing the same share of the remaining distance.
    """
    if saturation_rps <= 0 or n_points < 2:
        raise InputError("saturation_rps", "must be > 0 with at least two points")
    if not 0 < lowest_fraction < highest_fraction < 1:
        raise InputError("highest_fraction", "need 0 < lowest_fraction < highest_fraction < 1")
    gaps = np.geomspace(1.0 - lowest_fraction, 1.0 - highest_fraction, n_points)
    return saturation_rps * (1.0 - gaps)


def profile_point(
    measure_ms: Callable[[float, float], np.ndarray],
    load_rps: float,
    write_fraction: float,
    step_ms: float = 0.1,
    max_response_ms: float = 5000.0,
) -> tuple[LatencyDistribution, float]:
    """One profiled point (§4.1): the trimmed distribution of the responses of a backend
    driven at ``load_rps`` and its fastest response, in ms. Responses beyond
    ``max_response_ms`` (a saturated backend's queue grows without bound) are kept at that
    value: tails below it, where every SLO lies, stay exact."""
    samples = np.asarray(measure_ms(load_rps, write_fraction), dtype=float)
    samples = np.minimum(samples, max_response_ms)
    distribution = LatencyDistribution.from_samples(samples, step_ms=step_ms).trimmed()
    return distribution, float(samples.min())


def profile_backend(
    measure_ms: Callable[[float, float], np.ndarray],
    load_rps: Sequence[float],
    write_fractions: Sequence[float] = (0.0,),
    step_ms: float = 0.1,
    on_point: Callable[[int, int], None] | None = None,
    max_response_ms: float = 5000.0,
    map_points: Callable[[Callable, list[tuple]], list] | None = None,
) -> ServiceProfile:
    """Drive a backend at each (write fraction, load) and keep the whole distribution (§4.1).

    ``measure_ms(load_rps, write_fraction)`` runs the backend open-loop at that load and
    returns the response times in ms; it can be a simulation or a real testbed. The points
    are independent: ``map_points(profile_point, jobs)``, if given, runs them (on
    processes, say: then ``measure_ms`` must pickle), else they run here in turn, calling
    ``on_point(done, total)`` after each.
    """
    loads = np.asarray(load_rps, dtype=float)
    mixes = np.asarray(write_fractions, dtype=float)
    jobs = [
        (measure_ms, float(x), float(w), step_ms, max_response_ms) for w in mixes for x in loads
    ]
    if map_points is not None:
        points = map_points(profile_point, jobs)
    else:
        points = []
        for job in jobs:
            points.append(profile_point(*job))
            if on_point is not None:
                on_point(len(points), len(jobs))
    rows = tuple(
        tuple(d for d, _ in points[w * len(loads) : (w + 1) * len(loads)])
        for w in range(len(mixes))
    )
    return ServiceProfile(mixes, loads, rows, min(m for _, m in points))


def saturation_rps(
    measure_ms: Callable[[float, float], np.ndarray], load_rps: Sequence[float], slo_ms: float
) -> float:
    """The first profiled load whose median response exceeds the SLO (reads only): the
    site's capacity as Kurma's model takes it (§4.1, §7.1.1); the last load if none does."""
    for load in load_rps:
        if float(np.median(measure_ms(float(load), 0.0))) > slo_ms:
            return float(load)
    return float(load_rps[-1])


@dataclass(frozen=True)
class SloSurface:
    """Violation fractions for requests into one site: ``violation[b, w, k]``.

    ``b`` indexes the base RTT (0 = local requests, no WAN), ``w`` the write fraction and
    ``k`` the load. :meth:`curve` selects the base delay (rounded to the ms, §6) and
    interpolates linearly between write fractions; with the linear interpolation in load
    of :class:`SloCurve`, this is Kurma's bilinear interpolation (§4.1).
    """

    base_rtt_ms: np.ndarray  # whole ms, increasing
    write_fractions: np.ndarray
    load_rps: np.ndarray
    violation: np.ndarray  # [base, write fraction, load]

    def curve(self, base_rtt_ms: float, write_fraction: float = 0.0) -> SloCurve:
        b = int(np.argmin(np.abs(self.base_rtt_ms - round(float(base_rtt_ms)))))
        return SloCurve(self.load_rps, self._mix(self.violation[b], write_fraction))

    def _mix(self, by_mix: np.ndarray, write_fraction: float) -> np.ndarray:
        mixes = self.write_fractions
        if len(mixes) == 1:
            return by_mix[0]
        w = float(np.clip(write_fraction, mixes[0], mixes[-1]))
        hi = int(np.clip(np.searchsorted(mixes, w), 1, len(mixes) - 1))
        t = (w - mixes[hi - 1]) / (mixes[hi] - mixes[hi - 1])
        return (1 - t) * by_mix[hi - 1] + t * by_mix[hi]


def build_slo_surface(
    profile: ServiceProfile,
    slo_ms: float,
    residual_rtt: LatencyDistribution | None = None,
    base_rtt_ms: Sequence[int] = (0,),
) -> SloSurface:
    """Combine a site's profile with WAN latency into its family of SLO curves (§4.2, §6).

    For base delay ``b`` > 0 the remote response is service + residual + b, so the violation
    fraction is ``P(service + residual > slo_ms - b)``: one convolution per profiled point,
    then one tail lookup per base delay. Base 0 means local requests (no WAN at all).
    Curves are made non-decreasing in load by an isotonic least-squares fit weighted by
    load: every point is held for the same time, so a point's fraction rests on a number of
    responses proportional to its load, and a light point's few late responses (one stall of
    the machine delays every request in flight) weigh that much less.
    """
    bases = np.asarray(base_rtt_ms, dtype=float)
    if np.any(bases < 0) or np.any(np.diff(bases) <= 0):
        raise InputError("base_rtt_ms", "must be increasing and >= 0")
    shape = (len(bases), len(profile.write_fractions), len(profile.load_rps))
    violation = np.empty(shape)
    thresholds = slo_ms - bases
    for w, row in enumerate(profile.distributions):
        for k, service in enumerate(row):
            remote = service if residual_rtt is None else service + residual_rtt
            violation[:, w, k] = remote.tail_probability(thresholds)
            violation[bases == 0, w, k] = service.tail_probability(slo_ms)
    # More load never means fewer violations: an isotonic fit removes profiling noise
    # without the upward bias a running maximum would add.
    violation = np.apply_along_axis(isotonic_increasing, 2, violation, profile.load_rps)
    return SloSurface(bases, profile.write_fractions, profile.load_rps, violation)


def isotonic_increasing(values: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """The non-decreasing sequence closest to ``values`` in least squares, each value's error
    weighted by ``weights`` (default 1): pool adjacent violators (PAVA)."""
    values = np.asarray(values, dtype=float)
    weights = np.ones_like(values) if weights is None else np.asarray(weights, dtype=float)
    if weights.shape != values.shape or np.any(weights <= 0):
        raise InputError("weights", "one positive weight per value")
    means: list[float] = []
    masses: list[float] = []
    sizes: list[int] = []
    for value, weight in zip(values, weights, strict=True):
        means.append(float(value))
        masses.append(float(weight))
        sizes.append(1)
        while len(means) > 1 and means[-2] > means[-1]:
            mass = masses[-2] + masses[-1]
            means[-2] = (means[-2] * masses[-2] + means[-1] * masses[-1]) / mass
            masses[-2] = mass
            sizes[-2] += sizes[-1]
            means.pop()
            masses.pop()
            sizes.pop()
    return np.repeat(means, sizes)

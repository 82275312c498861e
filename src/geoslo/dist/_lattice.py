"""Array helpers for lattice distributions: size guard, convolution, re-gridding.

A lattice distribution puts mass ``pmf[k]`` on ``offset_ms + k * step_ms``. These
helpers work on the raw arrays; :mod:`geoslo.dist._distribution` wraps them.
"""

from __future__ import annotations

import math

import numpy as np

from geoslo.errors import InputError

# Longest lattice we build (~16 MB of float64); beyond that the step is too fine.
MAX_LATTICE_POINTS = 2_000_000

# A position within this many steps of a lattice point counts as on it. It absorbs
# float rounding in ``offset + k * step`` (one ten-millionth of a step: 0.01 ns at 0.1 ms).
SNAP_STEPS = 1e-7

# Below this many multiply-adds np.convolve is faster than FFT, and it is exact.
_DIRECT_CONVOLVE_MAX_PRODUCT = 100_000


def check_lattice_size(n_points: int, field: str = "step_ms") -> None:
    """Raise InputError if a lattice of ``n_points`` would exceed the guard."""
    if n_points > MAX_LATTICE_POINTS:
        raise InputError(
            field,
            f"the lattice would have {n_points:,} points (limit {MAX_LATTICE_POINTS:,}); "
            "use a larger step_ms",
        )


def check_step(step_ms: float, field: str = "step_ms") -> float:
    """Return ``step_ms`` as float after checking it is finite and positive."""
    step = _as_finite_float(step_ms, field)
    if step <= 0.0:
        raise InputError(field, f"must be positive, got {step!r}")
    return step


def _as_finite_float(value: float, field: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InputError(field, f"must be a number, got {value!r}") from None
    if not math.isfinite(number):
        raise InputError(field, f"must be finite, got {number!r}")
    return number


def as_finite_float(value: float, field: str) -> float:
    """Return ``value`` as a finite float or raise InputError naming ``field``."""
    return _as_finite_float(value, field)


def same_step(step_a_ms: float, step_b_ms: float) -> bool:
    """True if two steps are equal up to float rounding (relative 1e-9)."""
    return math.isclose(step_a_ms, step_b_ms, rel_tol=1e-9, abs_tol=0.0)


def congruent(offset_a_ms: float, offset_b_ms: float, step_ms: float) -> bool:
    """True if two offsets differ by a whole number of steps (up to SNAP_STEPS)."""
    u = (offset_b_ms - offset_a_ms) / step_ms
    return abs(u - round(u)) <= SNAP_STEPS


def strip_zeros(offset_ms: float, step_ms: float, pmf: np.ndarray) -> tuple[float, np.ndarray]:
    """Drop exact-zero masses at both ends, moving the offset accordingly."""
    nonzero = np.flatnonzero(pmf)
    first, last = int(nonzero[0]), int(nonzero[-1])
    if first == 0 and last == pmf.size - 1:
        return offset_ms, pmf
    return offset_ms + first * step_ms, pmf[first : last + 1]


def convolve_pmfs(pmf_a: np.ndarray, pmf_b: np.ndarray) -> np.ndarray:
    """Pmf of the sum of two independent lattice variables with the same step.

    Small inputs use exact direct convolution; large ones FFT, whose round-off can
    leave tiny negative masses: those are clipped to zero, then the result is
    renormalised.
    """
    check_lattice_size(pmf_a.size + pmf_b.size - 1)
    if pmf_a.size * pmf_b.size <= _DIRECT_CONVOLVE_MAX_PRODUCT:
        out = np.convolve(pmf_a, pmf_b)
    else:
        from scipy.signal import fftconvolve  # ~0.1 s to import: only when an FFT is needed

        out = fftconvolve(pmf_a, pmf_b)
        np.clip(out, 0.0, None, out=out)
    return out / out.sum()


def regrid(
    values_ms: np.ndarray, masses: np.ndarray, offset_ms: float, step_ms: float
) -> tuple[float, np.ndarray]:
    """Move atoms onto the lattice ``offset_ms + k * step_ms``, keeping the mean exact.

    An atom on a lattice point (within SNAP_STEPS) stays there; any other atom
    splits its mass linearly between its two neighbours (the nearer one gets
    more), which preserves the total mass and the mean and adds at most
    ``step_ms**2 / 4`` to the variance. Returns ``(new_offset_ms, pmf)``; the pmf
    is not normalised and may start or end with zeros.
    """
    u = (values_ms - offset_ms) / step_ms
    nearest = np.rint(u)
    on_point = np.abs(u - nearest) <= SNAP_STEPS
    low = np.where(on_point, nearest, np.floor(u))
    upper_fraction = np.where(on_point, 0.0, u - low)
    k_min = int(low.min())
    k_max = int(low.max()) + (1 if np.any(upper_fraction > 0.0) else 0)
    check_lattice_size(k_max - k_min + 1)
    index = (low - k_min).astype(np.int64)
    size = k_max - k_min + 1
    pmf = np.bincount(index, weights=masses * (1.0 - upper_fraction), minlength=size)
    pmf += np.bincount(index + 1, weights=masses * upper_fraction, minlength=size + 1)[:size]
    return offset_ms + k_min * step_ms, pmf

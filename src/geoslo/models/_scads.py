"""The SCADS Director's two statistical models (FAST 2011, §5.4).

* :class:`SteadyStateModel`: logistic regression on a server's (get rate, put rate) that
  predicts whether it meets the latency threshold. It is trained from benchmarks at
  several read/write mixes, where each mix's loads below the threshold crossing are one
  class and those above are the other.
* :class:`CopyDurationModel`: linear regression of the copy-rate factor (observed over
  specified copy rate) on the specified rate and the servers' get and put rates, with
  linear and quadratic terms. It predicts how long a copy action takes.

Both fit from plain arrays, so the same code trains on the live cluster and on the
simulation, and both round-trip through plain dicts (the JSON of ``director decide``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from geoslo.errors import InputError

__all__ = [
    "SteadyStateModel",
    "CopyDurationModel",
    "fit_steady_state",
    "fit_copy_duration",
    "mix_crossing_samples",
    "PAPER_MIXES_READ_FRACTION",
]

# §5.4: benchmarks at read/write mixes 50/50, 80/20, 90/10 and 95/5.
PAPER_MIXES_READ_FRACTION = (0.5, 0.8, 0.9, 0.95)
_NEWTON_STEPS = 100
_RIDGE = 1e-6  # keeps Newton's step finite when the classes separate perfectly


@dataclass(frozen=True)
class SteadyStateModel:
    """``P(violation) = 1 / (1 + exp(-(b0 + b_get * get_rps + b_put * put_rps)))``; a
    server is predicted to meet the SLO when that is below ``threshold`` (§5.4)."""

    intercept: float
    get_coefficient: float  # per req/s
    put_coefficient: float  # per req/s
    threshold: float = 0.5

    def violation_probability(self, get_rps, put_rps) -> np.ndarray | float:
        z = self.intercept + self.get_coefficient * np.asarray(get_rps, dtype=float)
        z = z + self.put_coefficient * np.asarray(put_rps, dtype=float)
        out = 1.0 / (1.0 + np.exp(-z))
        return float(out) if np.ndim(out) == 0 else out

    def meets_slo(self, get_rps, put_rps) -> np.ndarray | bool:
        ok = np.asarray(self.violation_probability(get_rps, put_rps)) < self.threshold
        return bool(ok) if ok.ndim == 0 else ok

    def headroom(self, get_rps: float, put_rps: float) -> float:
        """The factor by which a server's load mix can grow before it is predicted to
        violate: how much "extra room" an underloaded server has (§3, §5.3). Below 1 the
        server is overloaded; ``inf`` if this mix never violates."""
        slope = self.get_coefficient * get_rps + self.put_coefficient * put_rps
        boundary = np.log(self.threshold / (1.0 - self.threshold)) - self.intercept
        if slope <= 0.0:
            return np.inf if boundary > 0.0 else 0.0
        return float(boundary / slope)

    def capacity_rps(self, read_fraction: float) -> float:
        """Total request rate at which a server with this mix reaches the boundary."""
        return self.headroom(read_fraction, 1.0 - read_fraction)

    def to_dict(self) -> dict:
        return {
            "intercept": self.intercept,
            "get_coefficient": self.get_coefficient,
            "put_coefficient": self.put_coefficient,
            "threshold": self.threshold,
        }

    @classmethod
    def from_dict(cls, data: dict) -> SteadyStateModel:
        names = ("intercept", "get_coefficient", "put_coefficient")
        return cls(*(float(data[k]) for k in names), float(data.get("threshold", 0.5)))


def fit_steady_state(get_rps, put_rps, violated, threshold: float = 0.5) -> SteadyStateModel:
    """Logistic regression of ``violated`` on (get rate, put rate), fitted by Newton's
    method (iteratively reweighted least squares)."""
    x = _design(np.column_stack([_vector(get_rps, "get_rps"), _vector(put_rps, "put_rps")]))
    y = np.asarray(violated, dtype=float)
    if y.shape != (x.shape[0],) or not np.all((y == 0.0) | (y == 1.0)):
        raise InputError("violated", "needs one 0/1 label per sample")
    if y.min() == y.max():
        raise InputError("violated", "needs samples of both classes (met and violated)")
    scale = np.maximum(np.abs(x).max(axis=0), 1e-12)  # fit on a unit scale, report per req/s
    xs = x / scale
    beta = np.zeros(xs.shape[1])
    for _ in range(_NEWTON_STEPS):
        p = 1.0 / (1.0 + np.exp(-(xs @ beta)))
        gradient = xs.T @ (y - p) - _RIDGE * beta
        hessian = (xs * (p * (1.0 - p))[:, None]).T @ xs + _RIDGE * np.eye(xs.shape[1])
        step = np.linalg.solve(hessian, gradient)
        beta += step
        if np.max(np.abs(step)) < 1e-10:
            break
    beta = beta / scale
    return SteadyStateModel(float(beta[0]), float(beta[1]), float(beta[2]), threshold)


def mix_crossing_samples(
    read_fractions, crossing_rps, loads_per_mix: int = 20, span: float = 2.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Training data as §5.4 builds it: for each mix, loads from ``1/span`` to ``span``
    times the measured crossing, labelled violated above the crossing."""
    fractions = _vector(read_fractions, "read_fractions")
    crossings = _vector(crossing_rps, "crossing_rps")
    if fractions.shape != crossings.shape:
        raise InputError("crossing_rps", "needs one crossing per mix")
    gets, puts, labels = [], [], []
    for fraction, crossing in zip(fractions, crossings, strict=True):
        totals = crossing * np.geomspace(1.0 / span, span, loads_per_mix)
        gets.append(fraction * totals)
        puts.append((1.0 - fraction) * totals)
        labels.append(totals > crossing)
    return np.concatenate(gets), np.concatenate(puts), np.concatenate(labels)


@dataclass(frozen=True)
class CopyDurationModel:
    """Copy-rate factor = ``coefficients . [1, r, r^2, g, g^2, p, p^2]``, with r the
    specified copy rate (bytes/s), g and p the get and put rates (req/s), clipped to
    (0, 1] (§5.4: "the actual rate is often lower")."""

    coefficients: tuple[float, ...]
    min_factor: float = 0.05

    def factor(self, specified_bytes_per_s: float, get_rps: float, put_rps: float) -> float:
        r, g, p = float(specified_bytes_per_s), float(get_rps), float(put_rps)
        c = self.coefficients
        value = c[0] + c[1] * r + c[2] * r * r + c[3] * g + c[4] * g * g + c[5] * p + c[6] * p * p
        return min(max(value, self.min_factor), 1.0)

    def duration_s(
        self, size_bytes: float, specified_bytes_per_s: float, get_rps: float, put_rps: float
    ) -> float:
        """How long copying ``size_bytes`` takes at the specified rate, under this load."""
        if specified_bytes_per_s <= 0:
            raise InputError("specified_bytes_per_s", "must be > 0")
        rate = specified_bytes_per_s * self.factor(specified_bytes_per_s, get_rps, put_rps)
        return float(size_bytes / rate)

    def to_dict(self) -> dict:
        return {"coefficients": list(self.coefficients), "min_factor": self.min_factor}

    @classmethod
    def from_dict(cls, data: dict) -> CopyDurationModel:
        coefficients = tuple(float(c) for c in data["coefficients"])
        if len(coefficients) != 7:
            raise InputError("coefficients", "needs 7 numbers: [1, r, r^2, g, g^2, p, p^2]")
        return cls(coefficients, float(data.get("min_factor", 0.05)))


def fit_copy_duration(
    specified_bytes_per_s, get_rps, put_rps, observed_factor
) -> CopyDurationModel:
    """Least squares of the observed copy-rate factor on the linear and quadratic terms."""
    r = _vector(specified_bytes_per_s, "specified_bytes_per_s")
    g, p = _vector(get_rps, "get_rps"), _vector(put_rps, "put_rps")
    y = _vector(observed_factor, "observed_factor")
    if not (r.shape == g.shape == p.shape == y.shape):
        raise InputError("observed_factor", "needs one value per benchmark run")
    features = _copy_features(r, g, p)
    if features.shape[0] < features.shape[1]:
        raise InputError("observed_factor", f"needs at least {features.shape[1]} benchmark runs")
    scale = np.maximum(np.abs(features).max(axis=0), 1e-12)
    solution, *_ = np.linalg.lstsq(features / scale, y, rcond=None)
    return CopyDurationModel(tuple(float(c) for c in solution / scale))


def _copy_features(r: np.ndarray, g: np.ndarray, p: np.ndarray) -> np.ndarray:
    return np.column_stack([np.ones_like(r), r, r**2, g, g**2, p, p**2])


def _design(covariates: np.ndarray) -> np.ndarray:
    return np.column_stack([np.ones(covariates.shape[0]), covariates])


def _vector(values, field: str) -> np.ndarray:
    out = np.asarray(values, dtype=float)
    if out.ndim != 1 or out.size == 0:
        raise InputError(field, "must be a non-empty list of numbers")
    if not np.all(np.isfinite(out)) or np.any(out < 0):
        raise InputError(field, "must be finite and >= 0")
    return out

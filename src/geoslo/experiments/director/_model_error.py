"""The steady-state model's error on a ground truth it does not assume (issue 23).

§5.4 fits a logistic regression, linear in a server's get and put rates, to benchmarks at
four read/write mixes. On the default simulated servers the work is linear in
``get + 3 put``, so that model is exact by construction. Here the model is fitted, by the
same procedure, to a truth with write contention, lasting per-server differences and
slowdowns (``ServerPerformance.contended``), and compared with that truth cell by cell:
for a grid of (mix, total rate), the truth's probability that a server-period's p99
passes the threshold (a fleet of servers over many noise periods, the benchmark's own
measure) against the model's ``P(violation)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from geoslo.models import SteadyStateModel
from geoslo.sim.director import ServerPerformance

__all__ = [
    "STUDY_READ_FRACTIONS",
    "STUDY_RATE_SPAN",
    "STUDY_SERVERS",
    "STUDY_PERIODS",
    "ModelError",
    "truth_violation_probability",
    "model_error",
    "violation_at_fill",
]

# the paper's four mixes and the ones between and beyond them it did not benchmark
STUDY_READ_FRACTIONS = (0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.99, 1.0)
STUDY_SERVERS, STUDY_PERIODS = 50, 40  # the truth's fleet: 2,000 server-periods
STUDY_RATE_SPAN = (0.75, 1.25)  # cells around each mix's noiseless capacity, where it matters


def truth_violation_probability(
    perf: ServerPerformance,
    get_rps: np.ndarray,
    put_rps: np.ndarray,
    seed: int = 0,
    servers: int = STUDY_SERVERS,
    periods: int = STUDY_PERIODS,
    threshold_ms: float = 100.0,
    percentile: float = 99.0,
) -> np.ndarray:
    """Per load cell, the share of ``servers`` x ``periods`` server-periods of the truth
    whose p99 passes ``threshold_ms`` (one replica: what the steady-state model is
    about, §5.4). One fleet draw (``seed``) serves every cell."""
    rng = np.random.default_rng(seed)
    factor, hiccup = perf.fleet_noise(servers, periods, rng)
    get = np.asarray(get_rps, float)[..., None]
    put = np.asarray(put_rps, float)[..., None]
    late = perf.tail(threshold_ms, perf.utilisation(get, put, factor), hiccup)
    return (late > 1.0 - percentile / 100.0).mean(axis=-1)


@dataclass(frozen=True)
class ModelError:
    """The model against the truth on a grid: rows are mixes, columns total rates."""

    read_fractions: np.ndarray
    total_rps: np.ndarray  # (mixes, rates)
    truth_probability: np.ndarray  # (mixes, rates)
    model_probability: np.ndarray  # (mixes, rates)
    threshold: float

    @property
    def truth_unsafe(self) -> np.ndarray:
        """Cells where most server-periods violate: the truth's own label."""
        return self.truth_probability >= 0.5

    @property
    def model_safe(self) -> np.ndarray:
        return self.model_probability < self.threshold

    def unsafe_called_safe_fraction(self) -> float:
        """Share of cells the model calls safe that most server-periods violate."""
        return float(np.mean(self.model_safe & self.truth_unsafe))

    def safe_called_unsafe_fraction(self) -> float:
        """Share of cells the model calls unsafe that most server-periods meet."""
        return float(np.mean(~self.model_safe & ~self.truth_unsafe))

    def mean_abs_error(self) -> float:
        """Mean |P_model - P_truth| over the cells (calibration of the probability)."""
        return float(np.mean(np.abs(self.model_probability - self.truth_probability)))

    def crossings_rps(self) -> np.ndarray:
        """Per mix, the lowest rate of the grid at which most server-periods violate."""
        unsafe = self.truth_unsafe
        first = np.argmax(unsafe, axis=1)
        rates = self.total_rps[np.arange(len(first)), first]
        return np.where(unsafe.any(axis=1), rates, np.nan)


def model_error(
    perf: ServerPerformance,
    model: SteadyStateModel,
    read_fractions=STUDY_READ_FRACTIONS,
    rates_per_mix: int = 101,
    seed: int = 0,
) -> ModelError:
    """The model's predictions and the truth's on a grid of (mix, total rate), the rates
    spanning ``STUDY_RATE_SPAN`` of each mix's noiseless capacity (``capacity_rps``)."""
    fractions = np.asarray(read_fractions, float)
    capacity = np.array([perf.capacity_rps(f, 100.0, 99.0) for f in fractions])
    total = capacity[:, None] * np.linspace(*STUDY_RATE_SPAN, rates_per_mix)[None, :]
    get, put = total * fractions[:, None], total * (1.0 - fractions[:, None])
    return ModelError(
        fractions,
        total,
        truth_violation_probability(perf, get, put, seed),
        np.asarray(model.violation_probability(get, put)),
        model.threshold,
    )


def violation_at_fill(
    perf: ServerPerformance,
    model: SteadyStateModel,
    read_fraction: float,
    fill_fraction: float,
    seed: int = 0,
) -> float:
    """The truth's share of server-periods violating at ``fill_fraction`` of the model's
    boundary at this mix: how often a server the controller fills that far is late."""
    total = fill_fraction * model.capacity_rps(read_fraction)
    get, put = np.array([total * read_fraction]), np.array([total * (1.0 - read_fraction)])
    return float(truth_violation_probability(perf, get, put, seed)[0])

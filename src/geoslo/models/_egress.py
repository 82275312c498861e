"""The egress link's model (Dürango et al., CDC 2016, §IV): buffer dynamics of the three
streams and the disturbance models of their arrivals, estimated by a Kalman filter.

* Buffers (1)-(3): ``x(k+1) = x(k) + lambda(k) - mu(k)``, so the data that arrived in an
  interval is measurable from the buffer levels and the data sent,
  ``lambda(k) = x(k+1) - x(k) + mu(k)`` (``arrivals_from_buffers``).
* Arrivals of the application and the replication service (4)-(5): a random walk
  ``z(k+1) = z(k) + e``, ``lambda = z + v``, or a local linear trend (level and slope).
  ``kalman_step`` folds one measured interval into the state; ``predicted_arrivals`` is
  what the MPC assumes for its horizon.
* VM images arrive in bulk at fixed intervals (``image_arrivals``), known in advance.

Data is in MB per sampling interval throughout.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from geoslo.errors import ConfigError

__all__ = [
    "ARRIVAL_MODEL_KINDS",
    "ArrivalModel",
    "FilterState",
    "arrivals_from_buffers",
    "image_arrivals",
    "kalman_step",
    "predicted_arrivals",
    "predicted_arrival_sd_mb",
]

ARRIVAL_MODEL_KINDS = ("random-walk", "local-trend")  # equations (4) and (5)


@dataclass(frozen=True)
class ArrivalModel:
    """One stream's arrival model: ``kind`` and the standard deviations (MB per interval)
    of the process noise ``e`` and the measurement noise ``v``. The paper gives no
    values; ours let the level follow a change within a few intervals."""

    kind: str = "random-walk"
    process_noise_mb: float = 5.0
    measurement_noise_mb: float = 10.0

    def __post_init__(self) -> None:
        if self.kind not in ARRIVAL_MODEL_KINDS:
            raise ConfigError("kind", f"must be one of {', '.join(ARRIVAL_MODEL_KINDS)}")
        for name in ("process_noise_mb", "measurement_noise_mb"):
            value = getattr(self, name)
            if not np.isfinite(value) or value <= 0:
                raise ConfigError(name, f"must be a number > 0, got {value!r}")

    @property
    def order(self) -> int:
        return 1 if self.kind == "random-walk" else 2

    def transition(self) -> np.ndarray:
        """F of (4) or (5)."""
        return np.eye(1) if self.order == 1 else np.array([[1.0, 1.0], [0.0, 1.0]])

    def observation(self) -> np.ndarray:
        """G (1 x order): the arrival is the level."""
        return np.eye(1) if self.order == 1 else np.array([[1.0, 0.0]])

    def process_covariance(self) -> np.ndarray:
        """Q of ``e``: the walk drives the level, or the trend's level and slope."""
        q = np.zeros((self.order, self.order))
        q[-1, -1] = self.process_noise_mb**2
        if self.order == 2:
            q[0, 0] = self.process_noise_mb**2
        return q

    def initial(self, arrival_mb: float = 0.0) -> FilterState:
        """A state at ``arrival_mb`` per interval, as uncertain as one measurement."""
        mean = np.zeros(self.order)
        mean[0] = arrival_mb
        return FilterState(mean, np.eye(self.order) * self.measurement_noise_mb**2)


@dataclass(frozen=True)
class FilterState:
    """Mean and covariance of the disturbance state ``z``."""

    mean: np.ndarray
    covariance: np.ndarray


def arrivals_from_buffers(before_mb, after_mb, sent_mb) -> np.ndarray:
    """Equation (3): what arrived in the interval, from the buffers and the data sent."""
    return np.asarray(after_mb, float) - np.asarray(before_mb, float) + np.asarray(sent_mb, float)


def kalman_step(model: ArrivalModel, state: FilterState, arrival_mb: float) -> FilterState:
    """Predict one interval ahead, then correct with the interval's measured arrival."""
    f, g = model.transition(), model.observation()[0]
    mean = f @ state.mean
    covariance = f @ state.covariance @ f.T + model.process_covariance()
    innovation = arrival_mb - float(g @ mean)
    variance = float(g @ covariance @ g) + model.measurement_noise_mb**2
    gain = covariance @ g / variance
    mean = mean + gain * innovation
    covariance = covariance - np.outer(gain, g @ covariance)
    return FilterState(mean, 0.5 * (covariance + covariance.T))


def predicted_arrivals(model: ArrivalModel, state: FilterState, horizon: int) -> np.ndarray:
    """The expected arrival (MB) in each of the next ``horizon`` intervals (``G F^(j+1) z``
    after the last measured one), never negative."""
    steps = np.arange(1, horizon + 1)
    level = np.full(horizon, float(state.mean[0]))
    if model.order == 2:  # F^(j+1) moves the level by j + 1 slopes
        level += steps * float(state.mean[1])
    return np.maximum(level, 0.0)


def predicted_arrival_sd_mb(model: ArrivalModel, state: FilterState) -> float:
    """The standard deviation (MB) the model gives the next interval's arrival:
    ``sqrt(G (F P F' + Q) G' + R)``, the spread of the filter's innovation."""
    f, g = model.transition(), model.observation()[0]
    covariance = f @ state.covariance @ f.T + model.process_covariance()
    return float(np.sqrt(g @ covariance @ g + model.measurement_noise_mb**2))


def image_arrivals(
    now_s: float, interval_s: float, horizon: int, image_mb: float, period_s: float
) -> np.ndarray:
    """MB of VM image arriving in each of the next ``horizon`` intervals, for copies that
    start at ``period_s``, ``2 period_s``, ... (the backup holds the image of time 0)."""
    starts = now_s + np.arange(horizon) * interval_s
    first = np.maximum(np.ceil(starts / period_s - 1e-9), 1)
    last = np.ceil((starts + interval_s) / period_s - 1e-9) - 1
    return np.maximum(last - first + 1, 0) * image_mb

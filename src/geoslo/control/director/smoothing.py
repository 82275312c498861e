"""Workload smoothing with hysteresis and overprovisioning (FAST 2011, §5.5)."""

from __future__ import annotations

import numpy as np

__all__ = ["Smoother", "smooth"]


def smooth(previous: np.ndarray, raw: np.ndarray, alpha_up: float, alpha_down: float) -> np.ndarray:
    """``previous + alpha * (raw - previous)`` per bin, with ``alpha_up`` where the raw
    workload rose and ``alpha_down`` where it fell: scale up fast, coalesce slowly."""
    previous = np.asarray(previous, dtype=float)
    raw = np.asarray(raw, dtype=float)
    alpha = np.where(raw > previous, alpha_up, alpha_down)
    return previous + alpha * (raw - previous)


class Smoother:
    """The smoothed per-bin get and put rates; the first histogram is taken as is."""

    def __init__(self, alpha_up: float, alpha_down: float) -> None:
        self.alpha_up = alpha_up
        self.alpha_down = alpha_down
        self.get_rps: np.ndarray | None = None
        self.put_rps: np.ndarray | None = None

    def update(self, raw_get_rps: np.ndarray, raw_put_rps: np.ndarray) -> None:
        raw_get = np.asarray(raw_get_rps, dtype=float)
        raw_put = np.asarray(raw_put_rps, dtype=float)
        if self.get_rps is None or self.put_rps is None:
            self.get_rps, self.put_rps = raw_get.copy(), raw_put.copy()
            return
        self.get_rps = smooth(self.get_rps, raw_get, self.alpha_up, self.alpha_down)
        self.put_rps = smooth(self.put_rps, raw_put, self.alpha_up, self.alpha_down)

    @property
    def ready(self) -> bool:
        return self.get_rps is not None

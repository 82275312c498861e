"""Curve substitution under interference (Kurma §7.1.4).

When a site's observed violations depart from its curve, Kurma picks, by least squares over
recent (load, observed violation fraction) points, the best-fitting curve of a family
profiled in advance (e.g. with 0..k of its servers degraded). Deterministic, so every
instance that sees the same exchanged points picks the same curve.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from geoslo.errors import InputError
from geoslo.models._slo_curves import SloCurve

__all__ = ["best_fitting_curve"]


def best_fitting_curve(
    family: Sequence[SloCurve], load_rps: np.ndarray, observed_violation_fraction: np.ndarray
) -> tuple[int, np.ndarray]:
    """Index of the curve with the least squared error on the observations, and every error.

    Ties go to the lowest index (the family's order, e.g. fewest degraded servers first).
    """
    loads = np.asarray(load_rps, dtype=float)
    observed = np.asarray(observed_violation_fraction, dtype=float)
    if len(family) == 0:
        raise InputError("family", "needs at least one curve")
    if loads.shape != observed.shape or loads.size == 0:
        raise InputError("observations", "need one or more (load, violation) pairs of equal length")
    errors = np.array([float(np.sum((curve(loads) - observed) ** 2)) for curve in family])
    return int(np.argmin(errors)), errors

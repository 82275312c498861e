"""What the Director's experiments measure (FAST 2011 §6): the highest percentile met in
every window (§6.2's table) and how long the p99 took to settle after a spike."""

from __future__ import annotations

import numpy as np

__all__ = ["PERCENTILE_GRID", "percentiles_met_per_second", "stabilised_s"]

PERCENTILE_GRID = (50.0, 80.0, 90.0, 95.0, 98.0, 99.0, 99.5, 99.9)


def percentiles_met_per_second(
    gets: np.ndarray, late_gets: np.ndarray, windows_s=(20, 60, 300)
) -> dict[int, dict]:
    """Per window length, from the gets and the late gets of each second: the worst
    window's late fraction and the highest percentile of the grid every window meets."""
    gets = np.asarray(gets, dtype=float)
    late_gets = np.asarray(late_gets, dtype=float)
    out = {}
    for window in windows_s:
        n = len(gets) // window * window
        per_window = gets[:n].reshape(-1, window).sum(1)
        late = late_gets[:n].reshape(-1, window).sum(1)
        worst = float(np.max(late / np.maximum(per_window, 1e-12))) if n else float("nan")
        met = [q for q in PERCENTILE_GRID if worst <= 1.0 - q / 100.0 + 1e-12]
        out[window] = {"worst_late_fraction": worst, "percentile": max(met) if met else None}
    return out


def stabilised_s(p99_ms: np.ndarray, start_s: float, period_s: float, threshold_ms: float) -> float:
    """Seconds from ``start_s`` until the per-period p99 stays under the threshold for
    good (period ``k`` covers ``[k, k + 1) * period_s``)."""
    first = int(start_s // period_s)
    over = np.flatnonzero(np.asarray(p99_ms)[first:] > threshold_ms)
    return 0.0 if over.size == 0 else float((first + over[-1] + 1) * period_s - start_s)

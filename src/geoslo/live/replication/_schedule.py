"""The testbed's schedule (Dürango et al., CDC 2016, §V-C): rate levels held in turn, and
VM images at every multiple of the image period from the first on (the backup holds the
image of time 0), as the MPC's arrival model assumes. Pure functions of time."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["cumulative_mb", "images_started"]


def cumulative_mb(levels_mbps, level_period_s: float, t_s: float) -> float:
    """MB arrived from time 0 to ``t_s`` at rates (Mbit/s) that hold ``level_period_s``
    each, in turn, repeating."""
    levels = np.asarray(levels_mbps, float) / 8.0  # MB/s
    cycle_s = level_period_s * len(levels)
    cycles, rest_s = divmod(max(t_s, 0.0), cycle_s)
    full, part = divmod(rest_s, level_period_s)
    full = int(full)
    done = cycles * levels.sum() * level_period_s + levels[:full].sum() * level_period_s
    return float(done + (levels[full] * part if full < len(levels) else 0.0))


def images_started(t_s: float, image_period_s: float) -> int:
    """VM images that have arrived by ``t_s``: one at each multiple of the period from the
    first (the backup holds the image of time 0)."""
    return int(math.floor(max(t_s, 0.0) / image_period_s + 1e-9))

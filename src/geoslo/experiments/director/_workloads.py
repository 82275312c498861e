"""The two workload profiles of §6: a hotspot spike and a diurnal day.

* Hotspot (§6.2): a flat load to which, over five minutes, an extra load growing
  linearly to the flat load's size is added, all of it on a single key (the aggregate
  doubles, as CNN.com's did after 9/11). The extra requests are reads: a flash crowd
  reads the news (puts to one key would load every replica alike, and no replication
  could absorb them).
* Diurnal (§6.3): the paper replays the aggregate pattern of an Ebates.com day, which we
  do not have; we take a weekday of the NASA Kennedy Space Center trace from
  ``shared/data`` (its per-minute means, smoothed over an hour: a site a thousand times
  bigger has the same day but far less relative noise) scaled to a peak rate.

Keys follow a constant Zipf popularity (§6.3), scattered over the key space by a seeded
permutation so that range partitioning does not put all popular keys in bin 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from geoslo.workload import ZipfKeys, load_trace_day

__all__ = ["bin_popularity", "hotspot_rates", "diurnal_rates", "HotspotShape", "DIURNAL_SOURCE"]

DIURNAL_SOURCE = ("nasa", 5)  # 1995-07-06, a Thursday: a clear day-night swing
_SMOOTH_MIN = 60


def bin_popularity(
    keys: int, bins: int, seed: int, exponent: float = 0.99
) -> tuple[np.ndarray, int]:
    """The share of requests each bin receives, and the bin of the most popular key.

    Keys are range-partitioned into equal bins; key popularity is Zipf over a seeded
    random ranking of the keys."""
    probabilities = ZipfKeys(keys, exponent).probabilities()
    ranking = np.random.default_rng(seed).permutation(keys)
    per_key = np.empty(keys)
    per_key[ranking] = probabilities
    bin_of_key = np.arange(keys) * bins // keys
    popularity = np.bincount(bin_of_key, weights=per_key, minlength=bins)
    return popularity / popularity.sum(), int(bin_of_key[ranking[0]])


@dataclass(frozen=True)
class HotspotShape:
    """Seconds of flat load, of the linear ramp (§6.2: five minutes), and after it."""

    flat_s: int = 600
    ramp_s: int = 300
    hold_s: int = 900

    @property
    def duration_s(self) -> int:
        return self.flat_s + self.ramp_s + self.hold_s


def hotspot_rates(flat_rps: float, shape: HotspotShape) -> tuple[np.ndarray, np.ndarray]:
    """Per second: the flat load over all keys, and the extra load on the hot key."""
    base = np.full(shape.duration_s, float(flat_rps))
    ramp = flat_rps * (np.arange(shape.ramp_s) + 0.5) / shape.ramp_s
    hot = np.concatenate([np.zeros(shape.flat_s), ramp, np.full(shape.hold_s, float(flat_rps))])
    return base, hot


def diurnal_rates(peak_rps: float, duration_s: int = 86400) -> np.ndarray:
    """Per second, the diurnal day of ``DIURNAL_SOURCE`` scaled so its peak is
    ``peak_rps``; a shorter ``duration_s`` compresses the day (the paper replayed 24 h
    in 2 h, §6.1)."""
    name, day = DIURNAL_SOURCE
    minutes = load_trace_day(name, day).per_minute_mean()
    kernel = np.ones(_SMOOTH_MIN) / _SMOOTH_MIN
    padded = np.concatenate([minutes[-_SMOOTH_MIN:], minutes, minutes[:_SMOOTH_MIN]])
    smooth = np.convolve(padded, kernel, mode="same")[_SMOOTH_MIN:-_SMOOTH_MIN]
    t_min = (np.arange(duration_s) + 0.5) * (minutes.size / duration_s)
    rate = np.interp(t_min, np.arange(minutes.size) + 0.5, smooth)
    return rate * (peak_rps / rate.max())

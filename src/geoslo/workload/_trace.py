"""Per-second request-rate traces and the synthetic shapes built from them.

Kurma (§7) replays per-second request rates recorded at several sites, each slice
time-shifted to its replay site's time zone and scaled to the testbed (Table 2).
:class:`RateTrace` is that series; the functions here derive new traces from it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from geoslo._checks import non_negative
from geoslo.errors import InputError

__all__ = ["RateTrace", "diurnal", "flash_spike", "multi_site"]

_SECONDS_PER_MINUTE = 60


def _as_rates(values: object, field: str) -> np.ndarray:
    """A read-only float64 1-D copy of ``values``, checked finite and non-negative."""
    if isinstance(values, np.ndarray) and values.dtype == np.float64 and not values.flags.writeable:
        rates = values
    else:
        try:
            rates = np.array(values, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise InputError(field, f"must be numbers ({exc})") from None
    if rates.ndim != 1:
        raise InputError(field, f"must be one-dimensional, got shape {rates.shape}")
    if rates.size == 0:
        raise InputError(field, "must hold at least one second")
    if not np.all(np.isfinite(rates)):
        raise InputError(field, "must be finite (found NaN or inf)")
    if np.any(rates < 0):
        raise InputError(field, f"must be >= 0, found {rates.min():g}")
    rates.setflags(write=False)
    return rates


def _as_int(value: object, field: str, minimum: int | None = None) -> int:
    """``value`` as an int if it is integral, else InputError."""
    try:
        as_float = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InputError(field, f"must be an integer, got {value!r}") from None
    if not np.isfinite(as_float) or as_float != int(as_float):
        raise InputError(field, f"must be a whole number of seconds, got {value!r}")
    result = int(as_float)
    if minimum is not None and result < minimum:
        raise InputError(field, f"must be >= {minimum}, got {result}")
    return result


@dataclass(frozen=True, eq=False)
class RateTrace:
    """Request rate per second (Kurma §7: "the rate of object requests ... at one
    second resolution"). ``rate_rps[i]`` is the mean rate during second ``i``.

    The array is stored as a read-only float64 copy.
    """

    rate_rps: np.ndarray
    name: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "rate_rps", _as_rates(self.rate_rps, "rate_rps"))
        if not isinstance(self.name, str):
            raise InputError("name", f"must be a string, got {type(self.name).__name__}")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RateTrace):
            return NotImplemented
        return self.name == other.name and np.array_equal(self.rate_rps, other.rate_rps)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"RateTrace(name={self.name!r}, duration_s={self.duration_s}, "
            f"mean_rps={self.mean_rps:.4g}, peak_rps={self.peak_rps:.4g})"
        )

    @property
    def duration_s(self) -> int:
        """Length of the trace in seconds."""
        return int(self.rate_rps.size)

    @property
    def mean_rps(self) -> float:
        return float(self.rate_rps.mean())

    @property
    def peak_rps(self) -> float:
        return float(self.rate_rps.max())

    def window(self, start_s: int, duration_s: int) -> RateTrace:
        """The seconds ``[start_s, start_s + duration_s)``; must lie inside the trace."""
        start = _as_int(start_s, "start_s", minimum=0)
        length = _as_int(duration_s, "duration_s", minimum=1)
        if start + length > self.duration_s:
            raise InputError(
                "duration_s",
                f"window [{start}, {start + length}) s runs past the trace end "
                f"({self.duration_s} s)",
            )
        name = f"{self.name}[{start}:{start + length}]"
        return RateTrace(self.rate_rps[start : start + length].copy(), name)

    def scaled(self, factor: float) -> RateTrace:
        """Every rate multiplied by ``factor`` (Kurma §7 scales its slices by 450)."""
        scale = non_negative(factor, "factor")
        return RateTrace(self.rate_rps * scale, f"{self.name}*{scale:g}")

    def time_shifted(self, shift_s: int) -> RateTrace:
        """Circular delay by ``shift_s`` seconds: the rate of second ``t`` appears at
        ``t + shift_s`` (mod duration). Kurma Table 2 shifts each site's trace by
        0, +1 and +4 hours to align time zones. Negative shifts advance.
        """
        shift = _as_int(shift_s, "shift_s")
        return RateTrace(np.roll(self.rate_rps, shift), f"{self.name}>>{shift}s")

    def per_minute_mean(self) -> np.ndarray:
        """Mean rate of each minute; a trailing partial minute is averaged over the
        seconds it has."""
        return _per_minute_mean(self.rate_rps)


def _per_minute_mean(rate_rps: np.ndarray) -> np.ndarray:
    n_full = rate_rps.size // _SECONDS_PER_MINUTE
    full = rate_rps[: n_full * _SECONDS_PER_MINUTE].reshape(n_full, _SECONDS_PER_MINUTE)
    means = full.mean(axis=1)
    rest = rate_rps[n_full * _SECONDS_PER_MINUTE :]
    if rest.size:
        means = np.append(means, rest.mean())
    return means


def diurnal(
    duration_s: int,
    mean_rps: float,
    amplitude_fraction: float,
    period_s: float = 86400,
    phase_s: float = 0,
    noise_fraction: float = 0.0,
    seed: int = 0,
) -> RateTrace:
    """A synthetic day-night trace: ``mean * (1 + amplitude * cos(2 pi (t - phase_s) /
    period_s))`` with multiplicative Gaussian noise of relative size ``noise_fraction``,
    clipped at zero. The peak falls at ``phase_s`` (and every period after it).
    """
    length = _as_int(duration_s, "duration_s", minimum=1)
    mean = non_negative(mean_rps, "mean_rps")
    amplitude = non_negative(amplitude_fraction, "amplitude_fraction")
    if amplitude > 1:
        raise InputError("amplitude_fraction", f"must be in [0, 1], got {amplitude_fraction!r}")
    period = non_negative(period_s, "period_s")
    if period == 0:
        raise InputError("period_s", "must be > 0")
    noise = non_negative(noise_fraction, "noise_fraction")
    try:
        phase = float(phase_s)
    except (TypeError, ValueError):
        raise InputError("phase_s", f"must be a number, got {phase_s!r}") from None
    t_s = np.arange(length, dtype=np.float64)
    rate = mean * (1.0 + amplitude * np.cos(2.0 * np.pi * (t_s - phase) / period))
    if noise > 0:
        rng = np.random.default_rng(seed)
        rate = rate * (1.0 + noise * rng.standard_normal(length))
    return RateTrace(np.clip(rate, 0.0, None), f"diurnal(mean={mean:g}, amp={amplitude:g})")


def flash_spike(
    trace: RateTrace, start_s: int, ramp_s: int, hold_s: int, peak_factor: float
) -> RateTrace:
    """``trace`` with a flash crowd: from ``start_s`` the rate multiplier rises linearly
    from 1 to ``peak_factor`` over ``ramp_s``, holds for ``hold_s``, and falls back to 1
    over another ``ramp_s``. The part past the trace end is cut off.
    """
    start = _as_int(start_s, "start_s", minimum=0)
    ramp = _as_int(ramp_s, "ramp_s", minimum=0)
    hold = _as_int(hold_s, "hold_s", minimum=0)
    peak = non_negative(peak_factor, "peak_factor")
    if start >= trace.duration_s:
        raise InputError("start_s", f"must be < trace duration {trace.duration_s} s")
    # Multiplier at second midpoints: up-ramp, hold, down-ramp.
    up = 1.0 + (peak - 1.0) * (np.arange(ramp) + 0.5) / max(ramp, 1)
    shape = np.concatenate([up, np.full(hold, peak), up[::-1]])
    shape = shape[: trace.duration_s - start]
    factor = np.ones(trace.duration_s)
    factor[start : start + shape.size] = shape
    name = f"{trace.name}+spike(x{peak:g}@{start}s)"
    return RateTrace(trace.rate_rps * factor, name)


def multi_site(
    trace: RateTrace,
    starts_s: Sequence[int],
    duration_s: int,
    scale: float | Sequence[float],
    names: Sequence[str],
) -> list[RateTrace]:
    """One trace per site, each the slice ``[start, start + duration_s)`` of ``trace``
    scaled by ``scale`` (one factor, or one per site) and named after its site.

    This is how Kurma built its three-site workload from one multi-day trace (§7,
    Table 2): different slices (or time shifts) of the trace per site, scaled to fit.
    """
    starts = list(starts_s)
    site_names = list(names)
    if len(starts) != len(site_names):
        raise InputError("names", f"need one name per start ({len(starts)}), got {len(site_names)}")
    if len(starts) == 0:
        raise InputError("starts_s", "need at least one site")
    if len(set(site_names)) != len(site_names):
        raise InputError("names", f"site names must be unique, got {site_names}")
    if np.ndim(scale) == 0:
        scales = [scale] * len(starts)
    else:
        scales = list(scale)  # type: ignore[arg-type]
        if len(scales) != len(starts):
            raise InputError("scale", f"need one factor or {len(starts)}, got {len(scales)}")
    sites = []
    for start, factor, site in zip(starts, scales, site_names, strict=True):
        piece = trace.window(start, duration_s).scaled(factor)
        sites.append(RateTrace(piece.rate_rps, site))
    return sites

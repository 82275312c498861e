"""A :class:`KurmaModel` as a file an agent can be pointed at (``.npz``, no pickle), and
the two ways to build one for stores of one's own (``geoslo kurma model``): the queueing
formula at a measured per-server rate (:func:`queueing_model`), or a measured profile
(:func:`profiled_model`, §4.1).

Every site's SLO surface (§4.1) and, when the model has them, the per-pair surfaces (§4.2)
are stored as plain arrays, so loading a model runs no code from the file: an agent reads
one named in its configuration, which an operator may have copied from anywhere.
"""

from __future__ import annotations

import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from geoslo.control.kurma.types import KurmaModel
from geoslo.dist import LatencyDistribution
from geoslo.errors import ConfigError
from geoslo.models import ServiceProfile, SloSurface, build_slo_surface, mmc_violation_surface

__all__ = [
    "BASE_RTT_MS",
    "exponential_residual",
    "load_model",
    "profiled_model",
    "queueing_model",
    "save_model",
]

_FORMAT = 1
BASE_RTT_MS = np.arange(0.0, 41.0)  # a curve per whole ms of base RTT, §6 (Table 2's RTTs)
QUEUEING_LOAD_POINTS = 40  # loads of a queueing model's curves, up to 98% of capacity


def queueing_model(
    sites: tuple[str, ...],
    servers_per_site: int,
    per_server_rps: float | Sequence[float],
    slo_ms: float,
    residual_rtt_mean_ms: float = 0.0,
) -> KurmaModel:
    """Every site ``servers_per_site`` independent M/M/1 servers of ``per_server_rps`` (one
    rate for all, or one per site), a request at a random one (§4 with a queueing formula);
    the residual WAN latency over the base RTT is exponential of ``residual_rtt_mean_ms``
    (0: none), §4.2."""
    rates_rps = np.broadcast_to(np.asarray(per_server_rps, float), (len(sites),))
    surfaces = {  # one per distinct rate
        rate: _queueing_surface(servers_per_site, rate, slo_ms, residual_rtt_mean_ms)
        for rate in set(rates_rps.tolist())
    }
    return KurmaModel(
        tuple(sites),
        servers_per_site * rates_rps.astype(float),
        tuple(surfaces[rate] for rate in rates_rps.tolist()),
        0.0,
    )


def _queueing_surface(
    servers: int, per_server_rps: float, slo_ms: float, residual_rtt_mean_ms: float
) -> SloSurface:
    capacity_rps = servers * per_server_rps
    loads_rps = np.linspace(0.0, 0.98 * capacity_rps, QUEUEING_LOAD_POINTS)
    violation = mmc_violation_surface(
        1,
        per_server_rps,
        loads_rps / servers,
        slo_ms,
        BASE_RTT_MS,
        exponential_residual(residual_rtt_mean_ms),
    )
    violation = np.clip(violation, 0.0, 1.0)  # a residual's mixture can sum to 1 + 1e-16
    return SloSurface(BASE_RTT_MS, np.array([0.0]), loads_rps, violation[:, None, :])


def profiled_model(
    sites: tuple[str, ...],
    profile: ServiceProfile,
    capacity_rps: float,
    slo_ms: float,
    residual_rtt: LatencyDistribution | None = None,
) -> KurmaModel:
    """Every site like the profiled one, of capacity ``capacity_rps`` (§4.1): its curves
    combine the profile with the residual WAN latency over the base RTT (None: none), §4.2."""
    surface = build_slo_surface(profile, slo_ms, residual_rtt, BASE_RTT_MS)
    n = len(sites)
    return KurmaModel(
        tuple(sites), np.full(n, capacity_rps), (surface,) * n, profile.min_service_ms
    )


def exponential_residual(mean_ms: float) -> LatencyDistribution | None:
    """The residual WAN latency as an exponential of ``mean_ms`` (0: None, no residual)."""
    return LatencyDistribution.exponential(mean_ms) if mean_ms > 0 else None


_SURFACE_PARTS = ("base_rtt_ms", "write_fractions", "load_rps", "violation")


def save_model(model: KurmaModel, path: str | Path) -> Path:
    """Write ``model`` to ``path`` (an ``.npz`` file); returns the path."""
    arrays: dict[str, np.ndarray] = {
        "format": np.array(_FORMAT),
        "sites": np.array(model.sites, dtype=str),
        "capacity_rps": np.asarray(model.capacity_rps, float),
        "min_service_ms": np.array(float(model.min_service_ms)),
    }
    for j, surface in enumerate(model.surfaces):
        arrays.update(_surface_arrays(f"site{j}", surface))
    if model.pair_surfaces is not None:
        for i, row in enumerate(model.pair_surfaces):
            for j, surface in enumerate(row):
                if surface is not None:
                    arrays.update(_surface_arrays(f"pair{i}_{j}", surface))
    path = Path(path)
    with path.open("wb") as out:  # np.savez would append .npz to a name without it
        np.savez_compressed(out, **arrays)
    return path


def load_model(path: str | Path) -> KurmaModel:
    """The model in ``path``; ``ConfigError`` naming the file if it is not one."""
    if not Path(path).is_file():
        raise ConfigError("model_file", f"no model file at {path}")
    if not zipfile.is_zipfile(path):  # (np.load would offer to unpickle it)
        raise ConfigError("model_file", f"{path} is not an .npz file (save_model writes one)")
    try:
        with np.load(Path(path), allow_pickle=False) as data:
            arrays = {name: data[name] for name in data.files}
    except (OSError, ValueError, zipfile.BadZipFile) as error:
        raise ConfigError("model_file", f"cannot read a Kurma model from {path}: {error}") from None
    try:
        return _model(arrays)
    except (KeyError, ValueError, IndexError) as error:
        raise ConfigError("model_file", f"{path} is not a Kurma model: {error}") from None


def _surface_arrays(stem: str, surface: SloSurface) -> dict[str, np.ndarray]:
    return {f"{stem}.{part}": np.asarray(getattr(surface, part), float) for part in _SURFACE_PARTS}


def _surface(arrays: dict[str, np.ndarray], stem: str) -> SloSurface | None:
    if f"{stem}.violation" not in arrays:
        return None
    base, writes, loads, violation = (arrays[f"{stem}.{part}"] for part in _SURFACE_PARTS)
    if violation.shape != (len(base), len(writes), len(loads)):
        raise ValueError(f"{stem}: violation is {violation.shape}, not base x writes x loads")
    if not (np.all(np.isfinite(violation)) and np.all((violation >= 0) & (violation <= 1))):
        raise ValueError(f"{stem}: violation fractions must lie in [0, 1]")
    return SloSurface(base, writes, loads, violation)


def _model(arrays: dict[str, np.ndarray]) -> KurmaModel:
    if int(arrays["format"]) != _FORMAT:
        raise ValueError(f"format {int(arrays['format'])}, this geoslo reads {_FORMAT}")
    sites = tuple(str(s) for s in arrays["sites"])
    n = len(sites)
    capacity = np.asarray(arrays["capacity_rps"], float)
    if capacity.shape != (n,) or not np.all(capacity > 0):
        raise ValueError("capacity_rps must give every site a capacity > 0")
    surfaces = tuple(_surface(arrays, f"site{j}") for j in range(n))
    if any(s is None for s in surfaces):
        raise ValueError("every site needs its surface")
    pairs = tuple(
        tuple(None if i == j else _surface(arrays, f"pair{i}_{j}") for j in range(n))
        for i in range(n)
    )
    has_pairs = any(s is not None for row in pairs for s in row)
    return KurmaModel(
        sites,
        capacity,
        surfaces,  # type: ignore[arg-type]
        float(arrays["min_service_ms"]),
        pairs if has_pairs else None,
    )

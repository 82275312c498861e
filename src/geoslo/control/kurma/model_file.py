"""A :class:`KurmaModel` as a file an agent can be pointed at (``.npz``, no pickle).

Every site's SLO surface (§4.1) and, when the model has them, the per-pair surfaces (§4.2)
are stored as plain arrays, so loading a model runs no code from the file: an agent reads
one named in its configuration, which an operator may have copied from anywhere.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from geoslo.control.kurma.types import KurmaModel
from geoslo.errors import ConfigError
from geoslo.models import SloSurface

__all__ = ["save_model", "load_model"]

_FORMAT = 1
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

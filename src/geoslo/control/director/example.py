"""An illustrative cluster for ``geoslo director example``, the tests and the benchmark.

Pure and seeded: the same arguments give the same state. The cluster has ``servers``
servers, of which ``standbys`` (the config's, §5.3) are empty and ready; the others hold
every bin ``replicas`` times on distinct servers. About a fifth of the data servers hold
few bins (underloaded, so the controller coalesces them) and one bin is hot: its gets
alone need several servers (§6.2's hotspot), so it gets replicas on dedicated servers.

The models are illustrative, not measured: the steady-state model is fitted, as §5.4
does, from four read/write mixes whose threshold crossings we choose
(``EXAMPLE_CROSSINGS_RPS``: a server of this example handles about 6,000 gets/s or
2,000 puts/s alone); the copy-rate factor falls linearly with the target's load.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from geoslo.control.director.decide import work_capacity
from geoslo.control.director.types import ClusterState, DirectorConfig, ServerState
from geoslo.errors import InputError
from geoslo.models import (
    PAPER_MIXES_READ_FRACTION,
    CopyDurationModel,
    SteadyStateModel,
    fit_steady_state,
    mix_crossing_samples,
)

__all__ = [
    "EXAMPLE_CROSSINGS_RPS",
    "EXAMPLE_COPY_COEFFICIENTS",
    "example_models",
    "example_state",
]

# Total req/s at which a server crosses the threshold at the mixes 50/50, 80/20, 90/10,
# 95/5: on the line get/6000 + put/2000 = 1. Illustrative choices, not the paper's.
EXAMPLE_CROSSINGS_RPS = (3000.0, 4300.0, 5000.0, 5450.0)
# Copy-rate factor [1, r, r^2, g, g^2, p, p^2]: 0.95 on an idle target, minus 0.04 per
# 1,000 gets/s and 0.1 per 1,000 puts/s on it. Illustrative.
EXAMPLE_COPY_COEFFICIENTS = (0.95, 0.0, 0.0, -4e-5, 0.0, -1e-4, 0.0)

_MEAN_FILL_FRACTION = 0.75  # of a server's capacity, on the evenly loaded data servers
_LIGHT_WEIGHT = 0.25  # underloaded servers receive this share of an even server's bins
_LIGHT_FRACTION = 0.2  # of the data servers
_HOT_GET_CAPACITIES = 2.5  # the hot bin's gets, in servers' worth of gets
_BIN_MEDIAN_BYTES = 8e6
_READ_FRACTION = 0.9  # mix of the ordinary bins (§6.3's workload is read-heavy)


@lru_cache(maxsize=1)
def example_models() -> tuple[SteadyStateModel, CopyDurationModel]:
    """The example's steady-state model (fitted, §5.4) and copy-duration model."""
    samples = mix_crossing_samples(PAPER_MIXES_READ_FRACTION, EXAMPLE_CROSSINGS_RPS)
    return fit_steady_state(*samples), CopyDurationModel(EXAMPLE_COPY_COEFFICIENTS)


def example_state(
    servers: int = 40, bins: int = 400, seed: int = 0, config: DirectorConfig | None = None
) -> tuple[ClusterState, SteadyStateModel, CopyDurationModel, DirectorConfig]:
    """A seeded cluster with a hot bin and underloaded servers (module docstring), in the
    form :func:`geoslo.control.director.validation.parse_state` returns."""
    config = config or DirectorConfig()
    data_servers = servers - config.standbys
    if data_servers < config.replicas:
        raise InputError(
            "servers",
            f"must be at least standbys + replicas = {config.standbys + config.replicas}",
        )
    if bins < 1:
        raise InputError("bins", "must be at least 1")
    model, copy_model = example_models()
    rng = np.random.default_rng(seed)
    weights = _server_weights(data_servers, rng)
    layout = _place_replicas(bins, weights, config.replicas, rng)
    get_rps, put_rps = _bin_rates(bins, weights, model, config, rng)
    bin_bytes = np.round(_BIN_MEDIAN_BYTES * rng.lognormal(0.0, 0.5, bins))
    names = [f"server-{i}" for i in range(servers)]
    state = ClusterState(
        tuple(
            ServerState(names[i], tuple(sorted(layout[i])) if i < data_servers else ())
            for i in range(servers)
        ),
        get_rps,
        put_rps,
        bin_bytes,
    )
    return state, model, copy_model, config


def _server_weights(data_servers: int, rng: np.random.Generator) -> np.ndarray:
    """Relative share of replicas per data server: a random fifth are light."""
    weights = np.ones(data_servers)
    light = rng.choice(data_servers, int(_LIGHT_FRACTION * data_servers), replace=False)
    weights[light] = _LIGHT_WEIGHT
    return weights


def _place_replicas(
    bins: int, weights: np.ndarray, replicas: int, rng: np.random.Generator
) -> list[list[int]]:
    """Each bin on ``replicas`` distinct data servers, drawn in proportion to weight
    (rows that drew a server twice are drawn again)."""
    p = weights / weights.sum()
    draws = rng.choice(len(weights), (bins, replicas), p=p)
    clash = _has_duplicates(draws)
    while clash.any():
        draws[clash] = rng.choice(len(weights), (int(clash.sum()), replicas), p=p)
        clash = _has_duplicates(draws)
    layout: list[list[int]] = [[] for _ in weights]
    for b, row in enumerate(draws.tolist()):
        for i in row:
            layout[i].append(b)
    return layout


def _has_duplicates(rows: np.ndarray) -> np.ndarray:
    ordered = np.sort(rows, axis=1)
    return (ordered[:, 1:] == ordered[:, :-1]).any(axis=1)


def _bin_rates(
    bins: int,
    weights: np.ndarray,
    model: SteadyStateModel,
    config: DirectorConfig,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-bin get and put rates: even servers about 3/4 full, one hot bin."""
    total_rps = rng.lognormal(0.0, 0.4, bins)
    replicas_per_even = config.replicas * bins / weights.sum()
    # With ``replicas`` replicas and fanout <= replicas, a replica carries
    # fanout/replicas of the gets and all puts; scale so an even server is 3/4 full.
    get_share = min(config.read_fanout, config.replicas) / config.replicas
    work_per_rps = _READ_FRACTION * model.get_coefficient * get_share + (
        (1 - _READ_FRACTION) * model.put_coefficient
    )
    target = _MEAN_FILL_FRACTION * work_capacity(model) / replicas_per_even / work_per_rps
    total_rps *= target / total_rps.mean()
    get_rps, put_rps = _READ_FRACTION * total_rps, (1 - _READ_FRACTION) * total_rps
    hot = int(rng.integers(bins))
    get_rps[hot] = _HOT_GET_CAPACITIES * work_capacity(model) / model.get_coefficient
    return get_rps, put_rps

"""CosTLO's measurement agents on the simulated clouds (§5.2): from a VM in every region,
pairs of concurrent GETs and PUTs to the local storage service (one object, and two
objects), split by the service's logs into network and service latency; pings to
client prefixes and to other regions; the rate one VM relays without queueing.

10K samples by default (§6.5: enough for a p99 within a few percent)."""

from __future__ import annotations

import numpy as np

from geoslo.models import PairSamples, StorageMeasurements
from geoslo.sim.costlo._behaviour import stationary_ms
from geoslo.sim.costlo._requests import copy_episodes_ms, fifo_service_ms, storage_requests
from geoslo.sim.costlo._world import CloudWorld

__all__ = ["DEFAULT_SAMPLES", "measure_storage", "ping_ms", "region_ping_ms"]

DEFAULT_SAMPLES = 10_000  # §6.5


def _pairs(
    world: CloudWorld, region: int, operation: str, counts: tuple[int, ...], n: int, rng
) -> PairSamples:
    behaviour = world.behaviours[region]
    extra = copy_episodes_ms(behaviour, operation, counts, n, rng)
    draws = storage_requests(behaviour, operation, counts, n, rng, extra_service_ms=extra)
    service = draws.service_ms
    if operation == "put" and behaviour.put_serialised:
        service = fifo_service_ms(draws.arrival_ms, service)  # what the logs show
    return PairSamples(draws.network_ms, service, draws.arrival_ms)


def measure_storage(
    world: CloudWorld, region: int, n: int = DEFAULT_SAMPLES, seed: int = 0
) -> StorageMeasurements:
    """The agent's concurrent pairs in ``region``."""
    rng = np.random.default_rng(seed)
    return StorageMeasurements(
        get_same_object=_pairs(world, region, "get", (2,), n, rng),
        get_distinct_objects=_pairs(world, region, "get", (1, 1), n, rng),
        put_same_object=_pairs(world, region, "put", (2,), n, rng),
        put_distinct_objects=_pairs(world, region, "put", (1, 1), n, rng),
    )


def ping_ms(
    world: CloudWorld, prefix: int, region: int, n: int = DEFAULT_SAMPLES, seed: int = 0
) -> np.ndarray:
    """RTTs from ``region``'s agent VM to a representative host of ``prefix`` (a slow
    episode of the path, in a world with them, met at each ping's random time)."""
    rng = np.random.default_rng(seed)
    path = world.internet[prefix][region]
    return path.sample(rng, n, 1)[:, 0] + stationary_ms(path.episodes, rng, n)


def region_ping_ms(
    world: CloudWorld, source: int, destination: int, n: int = DEFAULT_SAMPLES, seed: int = 0
) -> np.ndarray:
    """RTTs between two regions' agent VMs."""
    rng = np.random.default_rng(seed)
    return world.between_regions[source][destination].sample(rng, n, 1)[:, 0]

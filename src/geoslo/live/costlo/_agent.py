"""CosTLO's measurement agent and storage stalls on the live testbed (§2, §5.2).

* ``fill_objects``: every copy of every object, version 1, one copy per server.
* ``stall_server``: hold one Redis server busy with ``DEBUG SLEEP`` at Poisson times for
  lognormal durations: the storage service's isolated latency spikes (§2). The real
  server's queue turns them into the tail. ``stall_process`` does the same to any
  server by stopping its process (SIGSTOP/SIGCONT): the S3 engine's.
* ``agent_pairs``: pairs of concurrent GETs to one object's copy and to two objects
  (copies 0 and 1, on different servers), issued open loop at Poisson times so that a
  pair meeting a stall does not hold the next one back (no coordinated omission).
  The agent is handed the region's direct endpoints (loopback, or the region's namespace
  address without the delay injector): a request's whole latency, timed at the namespace
  boundary, counts as service latency.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import numpy as np

from geoslo.live._resp import RedisConnection
from geoslo.live.costlo._objects import RegionEndpoints
from geoslo.live.costlo._storage import Store, region_store
from geoslo.models import PairSamples, StorageMeasurements

__all__ = [
    "StallSettings",
    "fill_objects",
    "stall_server",
    "stall_process",
    "stall_region",
    "agent_pairs",
    "agent_pings",
]


@dataclass(frozen=True)
class StallSettings:
    """Poisson stalls per server: ``rate_per_s`` of them, lognormal around ``median_ms``."""

    rate_per_s: float = 2.0  # per server: about 4% of its time stalled
    median_ms: float = 20.0


async def fill_objects(endpoints: RegionEndpoints, keys: list[str]) -> None:
    """Every copy of every object, version 1 (one copy per server of the region)."""
    store = region_store(endpoints, "fill")
    try:
        for key in keys:
            for copy in range(len(endpoints.server_ports)):
                await store.write(key, copy, 1, f"{key}|value".encode())
    finally:
        await store.close()


async def _stalls(stalls: StallSettings, seed: int, stop: asyncio.Event):
    """Stall durations (s) at Poisson times, lognormal around the median, until ``stop``."""
    rng = np.random.default_rng(seed)
    while not stop.is_set():
        gap_s = rng.exponential(1.0 / stalls.rate_per_s)
        try:
            await asyncio.wait_for(stop.wait(), timeout=gap_s)
            return
        except TimeoutError:
            pass
        yield stalls.median_ms / 1e3 * float(np.exp(0.5 * rng.standard_normal()))


async def stall_server(port: int, stalls: StallSettings, seed: int, stop: asyncio.Event) -> None:
    """Hold one server busy at Poisson times until ``stop`` is set (§2's spikes)."""
    connection = await RedisConnection.open(port)
    try:
        async for stall_s in _stalls(stalls, seed, stop):
            await connection.command("DEBUG", "SLEEP", f"{stall_s:.4f}")
    finally:
        await connection.close()


async def stall_process(
    cluster, name: str, stalls: StallSettings, seed: int, stop: asyncio.Event
) -> None:
    """Stop one recorded server (SIGSTOP) at Poisson times for lognormal durations until
    ``stop`` is set (§2's spikes, for an engine without DEBUG SLEEP): everything sent to
    it waits, whoever sends it, and the real server's queue turns that into the tail."""
    async for stall_s in _stalls(stalls, seed, stop):
        cluster.pause(name)
        try:
            await asyncio.sleep(stall_s)
        finally:
            cluster.resume(name)


def stall_region(
    cluster, region: str, stalls: StallSettings, seed: int, stop: asyncio.Event
) -> list:
    """§2's spikes on every server of a region until ``stop``, as its engine allows:
    DEBUG SLEEP on Redis, stopping the process on S3. The coroutines, one per server."""
    ports = cluster.servers[cluster.name(region)]
    if cluster.engine == "redis":
        return [stall_server(p, stalls, seed + k, stop) for k, p in enumerate(ports)]
    names = [cluster.server_name(region, k) for k in range(len(ports))]
    return [stall_process(cluster, name, stalls, seed + k, stop) for k, name in enumerate(names)]


async def agent_pairs(
    endpoints: RegionEndpoints, keys: list[str], pairs: int, pairs_per_s: float, seed: int
) -> StorageMeasurements:
    """``pairs`` open-loop pairs of each kind (§5.2). The agent's PUT pairs are not
    needed without a PUT SLO: the GET pairs stand in for them."""
    rng = np.random.default_rng(seed)
    store = region_store(endpoints, "agent")
    await store.open()
    loop = asyncio.get_running_loop()
    tasks, start, at = [], loop.time(), 0.0
    try:
        for _ in range(pairs):
            # the two kinds alternate at their own times, each on its own object: a pair
            # of one kind sent with the other, to the same object, shared its server with
            # it (a single GET's median measured 9.6 ms against 2.8 ms alone)
            for other_copy in (0, 1):
                at += rng.exponential(0.5 / pairs_per_s)
                await asyncio.sleep(max(0.0, start + at - loop.time()))
                key = keys[int(rng.integers(len(keys)))]
                pair = _timed_pair(store, (key, 0), (key, other_copy))
                tasks.append(asyncio.ensure_future(pair))
        timed = await asyncio.gather(*tasks)
    finally:
        await store.close()
    same, distinct = _pairs(timed[0::2]), _pairs(timed[1::2])
    return StorageMeasurements(same, distinct, same, distinct)


async def agent_pings(
    through: RegionEndpoints, direct: RegionEndpoints, keys: list[str], count: int
) -> np.ndarray:
    """The clients' network latency to a region (ms), §5.2's pings: the same GET sent at
    the same moment through the delay injector and at the region's boundary; the
    difference is the path's (a stalled server delays both alike)."""
    via_injector, at_boundary = region_store(through, "ping"), region_store(direct, "ping-direct")

    async def timed(store: Store, key: str) -> float:
        started = time.perf_counter()
        await store.read(key, 0)
        return (time.perf_counter() - started) * 1e3

    differences = []
    try:
        for k in range(count):
            key = keys[k % len(keys)]
            via, at = await asyncio.gather(timed(via_injector, key), timed(at_boundary, key))
            differences.append(via - at)
    finally:
        await via_injector.close()
        await at_boundary.close()
    return np.clip(np.array(differences), 0.0, None)


async def _timed_pair(store: Store, a: tuple[str, int], b: tuple[str, int]) -> list[float]:
    started = time.perf_counter()

    async def one(key: str, copy: int) -> float:
        await store.read(key, copy)
        return (time.perf_counter() - started) * 1e3

    return list(await asyncio.gather(one(*a), one(*b)))


def _pairs(latencies_ms: list[list[float]]) -> PairSamples:
    service = np.array(latencies_ms)
    return PairSamples(np.zeros_like(service), service, np.zeros_like(service))

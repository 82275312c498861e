"""Open-loop load on a Redis Cluster (FAST 2011 §6), in the client's own process.

The binned store's generator, reused as it is: Poisson arrivals per second of a
``RateTrace``, scrambled Zipf keys, an optional hot-key trace (§6.2's spike) and the read
fraction (``LoadSpec``; ``geoslo.experiments.director``'s ``hotspot_rates`` and
``diurnal_rates`` give the paper's shapes), and its scheduler ``open_loop``: each request
leaves at its time whether or not earlier ones returned, and how late the generator ran is
reported. Keys are ``k:<i>``; their bin is their hash slot's (``bin_of_key``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np

from geoslo.errors import ConfigError
from geoslo.live._backend import key_name
from geoslo.live.director._loadgen import (
    LoadResult,
    LoadSpec,
    _schedule,
    open_loop,
    put_payload_for,
)
from geoslo.live.director.rediscluster._client import RedisClusterClient
from geoslo.live.director.rediscluster._stats import bin_of_key

__all__ = ["preload_keys", "replay_cluster_load"]

_PRELOAD_BATCH = 500  # keys per round (one pipeline of SETs per master)


async def preload_keys(client: RedisClusterClient, keys: int, value_bytes: int) -> None:
    """Store every key ``k:<i>``, ``i < keys``, with a ``value_bytes`` value, so gets find one."""
    _check_sizes(keys, value_bytes)
    for lo in range(0, keys, _PRELOAD_BATCH):
        batch = {
            key_name(i): put_payload_for(i, value_bytes)
            for i in range(lo, min(keys, lo + _PRELOAD_BATCH))
        }
        await client.put_many(batch)


async def replay_cluster_load(
    client: RedisClusterClient,
    spec: LoadSpec,
    keys: int | Sequence[bytes],
    value_bytes: int,
    stop: asyncio.Event | None = None,
) -> LoadResult:
    """Replay ``spec`` through ``client`` over ``keys``: ``k:0`` .. ``k:<keys-1>``, or the
    given key names (Zipf over their order, scrambled); puts write ``value_bytes`` bytes.
    ``extra`` holds the duration, the rate issued and the client's failures by error type."""
    universe = [key_name(i) for i in range(keys)] if isinstance(keys, int) else list(keys)
    _check_sizes(len(universe), value_bytes)
    bins = np.fromiter((bin_of_key(name) for name in universe), np.int64, count=len(universe))
    times, key_ids, is_put = _schedule(spec, len(universe))

    async def send(k: int, latency_ms: np.ndarray, ok: np.ndarray) -> None:
        name = universe[key_ids[k]]
        if is_put[k]:
            reply = await client.put(name, put_payload_for(k, value_bytes))
        else:
            reply = await client.get(name)
        latency_ms[k], ok[k] = reply.latency_ms, reply.ok

    errors_before = dict(client.errors)
    started_s = client.now_s()
    result = await open_loop(times, spec, send, stop)
    n = result.requests
    result.is_put = is_put[:n].copy()
    result.bin = bins[key_ids[:n]]
    last_s = float(result.issue_s[-1]) if n else 0.0
    result.extra = {
        "duration_s": client.now_s() - started_s,
        "issued_rps": (n - 1) / last_s if n > 1 and last_s > 0 else 0.0,
        "errors": {
            k: v - errors_before.get(k, 0)
            for k, v in client.errors.items()
            if v > errors_before.get(k, 0)
        },
    }
    return result


def _check_sizes(keys: int, value_bytes: int) -> None:
    if keys < 1:
        raise ConfigError("keys", f"must be >= 1, got {keys}")
    if value_bytes < 1:
        raise ConfigError("value_bytes", f"must be >= 1, got {value_bytes}")

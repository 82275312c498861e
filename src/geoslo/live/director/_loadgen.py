"""Open-loop load for the live cluster, in the client's own process (FAST 2011 §6).

Arrivals are Poisson within each second of a ``RateTrace`` (``poisson_arrivals``); keys
follow ``ZipfKeys`` over a seeded ranking of the keys (YCSB's scrambled Zipfian: range
partitioning would otherwise put the most popular keys in one bin); an optional second
trace sends every one of its requests to a single hot key (§6.2's spike: flat load plus a
linear doubling onto one key). Each request is a get or a put by the read fraction and
leaves at its time whether or not earlier ones have returned. asyncio wakes with ~1 ms
resolution: requests due together leave together, and how late the generator ran is
reported (``max_late_ms``), never hidden. ``open_loop`` is that scheduler alone, for
any client (the Redis Cluster client's load uses it too).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import numpy as np

from geoslo.errors import ConfigError
from geoslo.live.director._client import ClusterClient
from geoslo.workload import RateTrace, ZipfKeys, poisson_arrivals

__all__ = ["LoadResult", "LoadSpec", "open_loop", "put_payload_for", "replay_load"]


@dataclass(frozen=True)
class LoadSpec:
    """What to replay; bounded by ``max_requests`` and ``max_duration_s``."""

    trace: RateTrace
    read_fraction: float = 0.95  # §5.4's mixes: 0.5, 0.8, 0.9, 0.95
    zipf_exponent: float = 0.99  # YCSB's constant
    hot_trace: RateTrace | None = None  # requests that all go to hot_key
    hot_key: int = 0
    hot_read_fraction: float = 1.0  # a flash crowd reads (§6.2)
    key_range: tuple[int, int] | None = None  # draw keys from [lo, hi); all keys if None
    max_requests: int = 1_000_000
    max_duration_s: float = 600.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("read_fraction", "hot_read_fraction"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(name, f"must be in [0, 1], got {getattr(self, name)}")
        if self.max_requests < 1 or not self.max_duration_s > 0:
            raise ConfigError("max_requests", "max_requests and max_duration_s must be > 0")


@dataclass
class LoadResult:
    """Every request issued: times from the start (s), latency (ms), kind, bin, outcome."""

    issue_s: np.ndarray
    latency_ms: np.ndarray
    is_put: np.ndarray
    bin: np.ndarray
    ok: np.ndarray
    max_late_ms: float
    late_p99_ms: float
    scheduled: int  # arrivals in the trace (before the bounds)
    extra: dict = field(default_factory=dict)

    @property
    def requests(self) -> int:
        return int(self.issue_s.size)


def put_payload_for(sequence: int, value_bytes: int) -> bytes:
    """A put's payload: its sequence number, padded to ``value_bytes``."""
    return (b"put-%d-" % sequence).ljust(value_bytes, b"-")[:value_bytes]


def _schedule(spec: LoadSpec, keys: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Arrival times (s), key indices and put flags, in time order."""
    lo, hi = spec.key_range or (0, keys)
    rng = np.random.default_rng(spec.seed + 3)
    times = poisson_arrivals(spec.trace, spec.seed)
    ranks = ZipfKeys(hi - lo, spec.zipf_exponent).sample(times.size, spec.seed + 1)
    key_ids = lo + rng.permutation(hi - lo)[ranks]  # scrambled: popular keys in every bin
    is_put = rng.random(times.size) >= spec.read_fraction
    if spec.hot_trace is not None:
        hot = poisson_arrivals(spec.hot_trace, spec.seed + 2)
        times = np.concatenate([times, hot])
        key_ids = np.concatenate([key_ids, np.full(hot.size, spec.hot_key, dtype=np.int64)])
        is_put = np.concatenate([is_put, rng.random(hot.size) >= spec.hot_read_fraction])
        order = np.argsort(times, kind="stable")
        times, key_ids, is_put = times[order], key_ids[order], is_put[order]
    return times, key_ids, is_put


async def replay_load(
    client: ClusterClient, spec: LoadSpec, stop: asyncio.Event | None = None
) -> LoadResult:
    """Issue every arrival at its time until the trace, the bounds or ``stop`` end it; wait
    for the requests in flight; return what happened to each."""
    times, key_ids, is_put = _schedule(spec, client.config.keys)

    def send(k: int, latency_ms: np.ndarray, ok: np.ndarray):
        return _one(client, k, int(key_ids[k]), bool(is_put[k]), latency_ms, ok)

    result = await open_loop(times, spec, send, stop)
    k = result.requests
    result.is_put = is_put[:k].copy()
    result.bin = np.asarray([client.layout.bin_of(int(i)) for i in key_ids[:k]], dtype=np.int64)
    return result


async def open_loop(
    times: np.ndarray,
    spec: LoadSpec,
    send: Callable[[int, np.ndarray, np.ndarray], Awaitable[None]],
    stop: asyncio.Event | None = None,
) -> LoadResult:
    """Start ``send(k, latency_ms, ok)`` at ``times[k]`` (s from now) whether or not earlier
    ones have returned, within ``spec``'s bounds; wait for them; it fills ``latency_ms[k]``
    and ``ok[k]``. ``is_put`` and ``bin`` of the result are left for the caller."""
    scheduled = int(times.size)
    count = min(scheduled, spec.max_requests, int(np.searchsorted(times, spec.max_duration_s)))
    latency_ms = np.full(count, np.nan)
    ok = np.zeros(count, dtype=bool)
    issue_s = np.full(count, np.nan)
    late_s = np.zeros(count)
    tasks: set[asyncio.Task] = set()
    loop = asyncio.get_running_loop()
    started = time.monotonic()
    k = 0
    while k < count and not (stop is not None and stop.is_set()):
        now = time.monotonic() - started
        if times[k] > now:
            await asyncio.sleep(times[k] - now)
            continue
        while k < count and times[k] <= now:
            issue_s[k], late_s[k] = now, now - times[k]
            task = loop.create_task(send(k, latency_ms, ok))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            k += 1
    if tasks:
        await asyncio.wait(list(tasks))
    late_ms = late_s[:k] * 1e3
    return LoadResult(
        issue_s=issue_s[:k],
        latency_ms=latency_ms[:k],
        is_put=np.zeros(k, dtype=bool),
        bin=np.zeros(k, dtype=np.int64),
        ok=ok[:k],
        max_late_ms=float(late_ms.max()) if k else 0.0,
        late_p99_ms=float(np.percentile(late_ms, 99)) if k else 0.0,
        scheduled=scheduled,
    )


async def _one(
    client: ClusterClient, k: int, index: int, put: bool, latency_ms: np.ndarray, ok: np.ndarray
) -> None:
    started = time.perf_counter()
    if put:
        done = (await client.put(index, put_payload_for(k, client.config.value_bytes))).acked
    else:
        done = await client.get(index) is not None
    latency_ms[k] = (time.perf_counter() - started) * 1e3
    ok[k] = done

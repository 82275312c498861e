"""Benchmarks that train the Director's models on a Redis Cluster (FAST 2011 §5.4).

* ``steady_state_benchmark``: one master holding all 16384 slots (CPU-limited like every
  node of the cluster it models) driven open loop at increasing total rates, for each
  read fraction (§5.4's mixes); each load's get p99 against the threshold, stopping a mix
  at its first crossing. The crossings go to ``geoslo.models.mix_crossing_samples`` and
  ``fit_steady_state``, as with the binned store's ``SteadyStateBenchmark`` (same shape).
* ``copy_benchmark``: a bin of ``copy_bytes`` migrates between two masters
  (``migrate_slots`` at the specified rate) while the target serves a get/put load; the
  observed/specified factor goes to ``geoslo.models.fit_copy_duration``.

Both start their own cluster in ``state_dir`` (``RedisClusterTestbed``), bounded in
time, and stop it when done; ``progress`` gets a line per load.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import redis.asyncio as aioredis
from redis.crc import key_slot

from geoslo.errors import ConfigError
from geoslo.live._backend import key_name
from geoslo.live.director._bench import CopyBenchmark, SteadyStateBenchmark, _tail_ms, copy_rows
from geoslo.live.director._loadgen import LoadSpec, put_payload_for
from geoslo.live.director.rediscluster._client import ClientConfig, RedisClusterClient
from geoslo.live.director.rediscluster._engine import ClusterSpec, RedisClusterTestbed, slot_ranges
from geoslo.live.director.rediscluster._loadgen import preload_keys, replay_cluster_load
from geoslo.live.director.rediscluster._migrate import migrate_slots
from geoslo.live.director.rediscluster._stats import bin_of_key, slots_of_bin
from geoslo.workload import RateTrace

__all__ = ["BenchSettings", "steady_state_benchmark", "copy_benchmark"]

_IDLE_BETWEEN_LOADS_S = 0.5  # queues drain between loads
_QUIET_TIMEOUT_S = 60.0


async def wait_quiet(tb: RedisClusterTestbed, timeout_s: float = _QUIET_TIMEOUT_S) -> None:
    """Wait until no node rewrites its AOF or saves a snapshot: the forked child runs in the
    node's CPU cgroup and would eat the quota the next load is measured against."""
    deadline = time.monotonic() + timeout_s
    for node in tb.nodes():
        async with aioredis.Redis(host=node.host, port=node.port) as admin:
            while time.monotonic() < deadline:
                info = await admin.info("persistence")
                if not (info["aof_rewrite_in_progress"] or info["rdb_bgsave_in_progress"]):
                    break
                await asyncio.sleep(0.2)
    await asyncio.sleep(_IDLE_BETWEEN_LOADS_S)


@dataclass(frozen=True)
class BenchSettings:
    """The data and the nodes' cost, as in the cluster the models are for."""

    cpu_quota_fraction: float | None = None  # each node's share of a CPU (cgroup v1)
    keys: int = 10_000
    value_bytes: int = 1024
    threshold_ms: float = 100.0  # the SLO's get threshold (§6)
    duration_s: float = 3.0  # per load
    seed: int = 0


def _say(progress: Callable[[str], None] | None, line: str) -> None:
    if progress is not None:
        progress(line)


def steady_state_benchmark(
    state_dir: Path,
    read_fractions: Sequence[float],
    rates_rps: Sequence[float],
    settings: BenchSettings = BenchSettings(),
    stop_at_crossing: bool = True,
    progress: Callable[[str], None] | None = None,
) -> list[SteadyStateBenchmark]:
    """For each read fraction, drive one master at each rate (ascending) for
    ``settings.duration_s``; a mix stops at its crossing unless ``stop_at_crossing`` is off
    (to profile the whole curve)."""
    rates = np.sort(np.asarray(rates_rps, dtype=float))
    if rates.ndim != 1 or rates.size == 0 or np.any(rates <= 0):
        raise ConfigError("rates_rps", "must be a non-empty list of rates > 0")
    for fraction in read_fractions:
        if not 0.0 <= fraction <= 1.0:
            raise ConfigError("read_fractions", f"must be in [0, 1], got {fraction}")
    spec = ClusterSpec(masters=1, standbys=0, cpu_quota_fraction=settings.cpu_quota_fraction)
    with RedisClusterTestbed.up(spec, Path(state_dir), progress=progress or (lambda _: None)) as tb:
        run = _steady_state(tb, list(read_fractions), rates, settings, stop_at_crossing, progress)
        return asyncio.run(run)


async def _steady_state(tb, read_fractions, rates, settings, stop_at_crossing, progress):
    config = ClientConfig(latency_threshold_ms=settings.threshold_ms, seed=settings.seed)
    results = []
    async with await RedisClusterClient.connect(tb.seed_nodes(), config) as client:
        await preload_keys(client, settings.keys, settings.value_bytes)
        for m, fraction in enumerate(read_fractions):
            p99s: list[float] = []
            for k, rate in enumerate(rates):
                await wait_quiet(tb)  # also after a crossing: the next mix starts rested
                trace = RateTrace(np.full(max(1, math.ceil(settings.duration_s)), rate))
                seed = settings.seed + 1000 * m + 10 * k
                spec = LoadSpec(trace, fraction, max_duration_s=settings.duration_s, seed=seed)
                result = await replay_cluster_load(
                    client, spec, settings.keys, settings.value_bytes
                )
                p99s.append(_tail_ms(result.latency_ms, result.ok, result.is_put))
                _say(progress, _load_line(fraction, rate, p99s[-1], result))
                if stop_at_crossing and p99s[-1] > settings.threshold_ms:
                    break
            results.append(_mix_result(fraction, rates, np.asarray(p99s), settings.threshold_ms))
    return results


def _load_line(fraction: float, rate: float, p99_ms: float, result) -> str:
    return (
        f"steady state: read {fraction:.2f} at {rate:.0f} req/s: get p99 {p99_ms:.1f} ms, "
        f"issued {result.extra['issued_rps']:.0f} req/s, generator late by up to "
        f"{result.max_late_ms:.0f} ms"
    )


def _mix_result(fraction, rates, p99, threshold_ms) -> SteadyStateBenchmark:
    exceeded = p99 > threshold_ms
    crossing = float(rates[: p99.size][exceeded][0]) if exceeded.any() else float("nan")
    return SteadyStateBenchmark(fraction, rates[: p99.size], p99, exceeded, crossing)


def keys_in_bin(b: int, count: int, prefix: bytes = b"copy:") -> list[bytes]:
    """``count`` key names whose hash slots fall in bin ``b`` (found by trying names)."""
    found: list[bytes] = []
    i = 0
    while len(found) < count:
        name = b"%s%d" % (prefix, i)
        if bin_of_key(name) == b:
            found.append(name)
        i += 1
    return found


def copy_benchmark(
    state_dir: Path,
    specified_bytes_per_s,
    get_rps,
    put_rps,
    copy_bytes: int = 2_000_000,
    settings: BenchSettings = BenchSettings(),
    warmup_s: float = 0.5,
    progress: Callable[[str], None] | None = None,
) -> CopyBenchmark:
    """For each row, migrate bin 0 (``copy_bytes`` of data) from node-0 to node-1 at the
    specified rate while node-1 serves ``get_rps`` and ``put_rps`` on its own keys, then
    move it back unpaced."""
    rates, gets, puts = copy_rows(specified_bytes_per_s, get_rps, put_rps)
    if copy_bytes < settings.value_bytes:
        raise ConfigError("copy_bytes", f"must be at least one value ({settings.value_bytes})")
    spec = ClusterSpec(masters=2, standbys=0, cpu_quota_fraction=settings.cpu_quota_fraction)
    with RedisClusterTestbed.up(spec, Path(state_dir), progress=progress or (lambda _: None)) as tb:
        run = _copies(tb, rates, gets, puts, copy_bytes, settings, warmup_s, progress)
        observed = asyncio.run(run)
    return CopyBenchmark(rates.copy(), gets.copy(), puts.copy(), observed, observed / rates)


async def _copies(tb, rates, gets, puts, copy_bytes, settings, warmup_s, progress) -> np.ndarray:
    source, target = (tb.node(name) for name in ("node-0", "node-1"))
    slots = list(slots_of_bin(0))  # node-0 holds the low half of the slots, node-1 the rest
    (_, _), (target_lo, _) = slot_ranges(2)
    target_keys = [k for k in map(key_name, range(settings.keys)) if key_slot(k) >= target_lo]
    observed = []
    async with await RedisClusterClient.connect(tb.seed_nodes(), ClientConfig()) as client:
        copied = keys_in_bin(0, max(1, copy_bytes // settings.value_bytes))
        await client.put_many({k: put_payload_for(0, settings.value_bytes) for k in copied})
        await preload_keys(client, settings.keys, settings.value_bytes)
        await wait_quiet(tb)
        for k, (rate, get, put) in enumerate(zip(rates, gets, puts, strict=True)):
            stop = asyncio.Event()
            load = asyncio.create_task(_load(client, target_keys, get, put, settings, stop, k))
            await asyncio.sleep(warmup_s)
            moved = await migrate_slots(source, target, slots, float(rate))
            stop.set()
            await load
            observed.append(moved.observed_bytes_per_s)
            _say(progress, _copy_line(rate, get, put, moved))
            await migrate_slots(target, source, slots, 1e12)  # back, unpaced
    return np.asarray(observed)


def _copy_line(rate, get, put, moved) -> str:
    return (
        f"copy: {moved.bytes_moved / 1e6:.2f} MB specified {rate / 1e6:.2f} MB/s under "
        f"{get:.0f} gets/s + {put:.0f} puts/s: observed {moved.observed_bytes_per_s / 1e6:.2f} MB/s"
    )


async def _load(client, keys, get_rps, put_rps, settings, stop, run) -> None:
    total = get_rps + put_rps
    if total <= 0:
        await stop.wait()
        return
    trace = RateTrace(np.full(600, total))
    spec = LoadSpec(trace, read_fraction=get_rps / total, seed=settings.seed + 7 * run)
    await replay_cluster_load(client, spec, keys, settings.value_bytes, stop)

"""Benchmarks that train the Director's models on the live cluster (FAST 2011 §5.4).

* ``steady_state_benchmark``: one server (all bins, one replica, fanout 1) driven open
  loop at increasing total rates with one read fraction; each load's get p99 and whether
  it exceeds the threshold; the crossing is the lowest rate that does. Feed the
  crossings of several mixes to ``geoslo.models.mix_crossing_samples`` and
  ``fit_steady_state``.
* ``copy_benchmark``: copies at specified rates while the target serves a get/put load;
  the observed/specified rate factors feed ``geoslo.models.fit_copy_duration``.

Both start their own small cluster in ``state_dir`` and stop it when done.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from geoslo.control.director.types import Action, RunningAction
from geoslo.errors import ConfigError, TestbedError
from geoslo.live.director._cluster import DirectorCluster
from geoslo.live.director._config import ClusterConfig
from geoslo.live.director._loadgen import LoadSpec, replay_load
from geoslo.workload import RateTrace

__all__ = ["CopyBenchmark", "SteadyStateBenchmark", "copy_benchmark", "steady_state_benchmark"]

_IDLE_BETWEEN_LOADS_S = 0.5  # queues drain between loads


def copy_rows(specified_bytes_per_s, get_rps, put_rps) -> tuple[np.ndarray, ...]:
    """One row per copy run: (specified bytes/s, gets/s, puts/s) broadcast together; the
    rates must be > 0 (§5.4's copy benchmark)."""
    rates, gets, puts = np.broadcast_arrays(
        np.asarray(specified_bytes_per_s, dtype=float),
        np.asarray(get_rps, dtype=float),
        np.asarray(put_rps, dtype=float),
    )
    if rates.ndim != 1 or np.any(rates <= 0):
        raise ConfigError("specified_bytes_per_s", "must be rates > 0, one per run")
    return rates, gets, puts


@dataclass(frozen=True)
class SteadyStateBenchmark:
    """One mix: the loads run (ascending; the run stops after the first crossing)."""

    read_fraction: float
    rates_rps: np.ndarray
    p99_ms: np.ndarray
    exceeded: np.ndarray  # bool per load
    crossing_rps: float  # lowest rate whose p99 exceeds the threshold; nan if none


@dataclass(frozen=True)
class CopyBenchmark:
    """One row per copy run."""

    specified_bytes_per_s: np.ndarray
    get_rps: np.ndarray
    put_rps: np.ndarray
    observed_bytes_per_s: np.ndarray
    factor: np.ndarray  # observed / specified (§5.4's copy-rate factor)


def steady_state_benchmark(
    state_dir: Path,
    read_fraction: float,
    rates_rps,
    duration_s: float = 3.0,
    threshold_ms: float = 100.0,
    config: ClusterConfig | None = None,
    seed: int = 0,
) -> SteadyStateBenchmark:
    """Drive one server at each rate (ascending) for ``duration_s``; stop at the crossing."""
    rates = np.sort(np.asarray(rates_rps, dtype=float))
    if rates.ndim != 1 or rates.size == 0 or np.any(rates <= 0):
        raise ConfigError("rates_rps", "must be a non-empty list of rates > 0")
    base = config or ClusterConfig()
    one = dataclasses.replace(
        base, servers=1, replicas=1, read_fanout=1, standbys=0, latency_threshold_ms=threshold_ms
    )
    return asyncio.run(_steady_state(Path(state_dir), one, read_fraction, rates, duration_s, seed))


async def _steady_state(
    state_dir: Path,
    config: ClusterConfig,
    read_fraction: float,
    rates: np.ndarray,
    duration_s: float,
    seed: int,
) -> SteadyStateBenchmark:
    p99s: list[float] = []
    async with await DirectorCluster.up(state_dir, config) as cluster:
        for k, rate in enumerate(rates):
            trace = RateTrace(np.full(max(1, math.ceil(duration_s)), rate))
            spec = LoadSpec(trace, read_fraction, max_duration_s=duration_s, seed=seed + 10 * k)
            result = await replay_load(cluster.client, spec)
            p99s.append(_tail_ms(result.latency_ms, result.ok, result.is_put))
            if p99s[-1] > config.latency_threshold_ms:
                break
            await asyncio.sleep(_IDLE_BETWEEN_LOADS_S)
    p99 = np.asarray(p99s)
    exceeded = p99 > config.latency_threshold_ms
    crossing = float(rates[: p99.size][exceeded][0]) if exceeded.any() else float("nan")
    return SteadyStateBenchmark(read_fraction, rates[: p99.size], p99, exceeded, crossing)


def _tail_ms(latency_ms: np.ndarray, ok: np.ndarray, is_put: np.ndarray) -> float:
    """p99 of the gets (of every request when there are none); a failure counts as inf."""
    chosen = ~is_put if np.any(~is_put) else np.ones_like(is_put)
    values = np.where(ok[chosen], latency_ms[chosen], np.inf)
    return float(np.percentile(values, 99, method="higher")) if values.size else float("nan")


def copy_benchmark(
    state_dir: Path,
    specified_bytes_per_s,
    get_rps,
    put_rps,
    config: ClusterConfig | None = None,
    warmup_s: float = 0.5,
    seed: int = 0,
) -> CopyBenchmark:
    """For each row, copy bin 0 (half the data) from ``server-0`` to ``server-1`` at the
    specified rate while ``server-1`` serves ``get_rps`` and ``put_rps`` on bin 1."""
    rates, gets, puts = copy_rows(specified_bytes_per_s, get_rps, put_rps)
    base = config or ClusterConfig()
    two = dataclasses.replace(base, bins=2, servers=2, replicas=1, read_fanout=1, standbys=0)
    observed = asyncio.run(_copies(Path(state_dir), two, rates, gets, puts, warmup_s, seed))
    return CopyBenchmark(rates.copy(), gets.copy(), puts.copy(), observed, observed / rates)


async def _copies(state_dir, config, rates, gets, puts, warmup_s, seed) -> np.ndarray:
    observed = []
    copy = Action("copy", (0,), source="server-0", target="server-1")
    undo = Action("delete-replica", (0,), server="server-1")
    async with await DirectorCluster.up(state_dir, config) as cluster:
        for k, (rate, get, put) in enumerate(zip(rates, gets, puts, strict=True)):
            stop = asyncio.Event()
            load = asyncio.create_task(_target_load(cluster, get, put, stop, seed + k))
            await asyncio.sleep(warmup_s)
            cluster.start(RunningAction(copy, 0.0, 0.0), rate_bytes_per_s=float(rate))
            await cluster.wait_idle(timeout_s=600.0)
            stop.set()
            await load
            done = [f for f in cluster.finished() if f.action == copy]
            if not done or not done[0].ok:
                raise TestbedError(f"copy benchmark run {k}: the copy failed: {done}")
            observed.append(done[0].observed_bytes_per_s)
            cluster.start(RunningAction(undo, 0.0, 0.0))
            await cluster.wait_idle(timeout_s=60.0)
            cluster.finished()
    return np.asarray(observed)


async def _target_load(cluster, get_rps: float, put_rps: float, stop, seed: int) -> None:
    total = get_rps + put_rps
    if total <= 0:
        await stop.wait()
        return
    lo = cluster.layout.start(1)
    spec = LoadSpec(
        RateTrace(np.full(600, total)),
        read_fraction=get_rps / total,
        key_range=(lo, cluster.config.keys),
        seed=seed,
    )
    await replay_load(cluster.client, spec, stop)

"""Profile an operator's own store by address (Kurma §4.1; ``geoslo kurma model --profile``).

One site's servers are driven open loop through the client library (``SiteClient`` over
``StoreEndpoints``, ``GetSetWork``, AllLocal), with GETs only, never a write: each load
for a few seconds (``replay``), loads evenly spaced up to a maximum, one after the other.
Each point keeps every response (a failure counts as infinitely late); the profile ends at
the first load whose median response exceeds the SLO, the store's saturation point (the
model's capacity). A generator later than ``max_late_ms`` against its schedule has not
offered the load it was asked for: the profile stops and says so.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from geoslo.errors import TestbedError
from geoslo.live._backend import GetSetWork
from geoslo.live._resp import RedisConnection
from geoslo.live.kurma._client import RequestLog, SiteClient, StoreEndpoints
from geoslo.live.kurma._loadgen import LoadgenConfig, replay
from geoslo.models import ServiceProfile, profile_backend, saturation_rps

__all__ = ["StoreProfile", "profile_store", "store_profile_loads"]

SITE = "profiled"  # the one site of the profiling client
KEYS = 10_000  # GETs of k:0 .. k:9999, Zipf 0.99 (a key the store lacks reads as nil)
START_DELAY_S = 0.2  # each point's first arrival, after the previous point has drained


@dataclass(frozen=True)
class StoreProfile:
    """The profile (§4.1), the capacity taken from it, and whether the store saturated
    (False: no load up to the last one had a median response over the SLO)."""

    profile: ServiceProfile
    capacity_rps: float
    saturated: bool


def store_profile_loads(max_rps: float, points: int) -> np.ndarray:
    """``points`` loads evenly spaced up to ``max_rps`` (even, not §4.1's spacing: the
    light loads are where redirected requests land; see ``live_profile_loads``)."""
    return max_rps * np.arange(1, points + 1) / points


def profile_store(
    servers: Sequence[tuple[str, int]],
    loads_rps: Sequence[float],
    seconds_per_point: int,
    slo_ms: float,
    max_late_ms: float,
    password: str | None = None,
    tls: ssl.SSLContext | None = None,
    progress: Callable[[str], None] = print,
) -> StoreProfile:
    """Profile the store behind ``servers`` (one site's) at ``loads_rps`` in turn."""
    return asyncio.run(
        _profile(
            servers, loads_rps, seconds_per_point, slo_ms, max_late_ms, password, tls, progress
        )
    )


async def _profile(servers, loads_rps, seconds_per_point, slo_ms, max_late_ms, password, tls,
                   progress) -> StoreProfile:  # fmt: skip
    for host, port in servers:  # a clear error for an address, a password or TLS that fails
        await _ping(host, port, password, tls)
    endpoints = StoreEndpoints((SITE,), SITE, (tuple(servers),), password=password, tls=tls)
    client = await SiteClient(endpoints, GetSetWork(), "AllLocal", slo_ms).start()
    responses: dict[float, np.ndarray] = {}
    try:
        for k, load in enumerate(loads_rps):
            response_ms, late_ms = await _point(client, float(load), seconds_per_point, k)
            check_pace(late_ms, float(load), max_late_ms)
            responses[float(load)] = response_ms
            median_ms = float(np.median(response_ms))
            progress(_point_line(k, len(loads_rps), float(load), response_ms, slo_ms, late_ms))
            if median_ms > slo_ms:
                break
    finally:
        await client.close()
    loads = list(responses)
    if len(loads) < 2:
        raise TestbedError(
            f"the store saturated at the first load, {loads[0]:.0f} req/s: a profile needs "
            "two loads; lower --max-rps or add --points"
        )

    def measure(load_rps: float, write_fraction: float) -> np.ndarray:
        return responses[load_rps]

    capacity = saturation_rps(measure, loads, slo_ms)
    saturated = float(np.median(responses[loads[-1]])) > slo_ms
    return StoreProfile(profile_backend(measure, loads), capacity, saturated)


async def _ping(host: str, port: int, password: str | None, tls: ssl.SSLContext | None) -> None:
    connection = await RedisConnection.open(port, host, password=password, tls=tls)
    try:
        await asyncio.wait_for(connection.command(b"PING"), 5.0)
    except (TimeoutError, TestbedError) as error:
        raise TestbedError(f"{host}:{port} did not answer PING: {error}") from None
    finally:
        await connection.close()


async def _point(client: SiteClient, load_rps: float, seconds: int, seed: int):
    """(every response in ms, inf for a failure; the generator's largest lateness in ms)
    of ``seconds`` of GETs at ``load_rps``."""
    client.log = RequestLog(1, client.slo_ms)  # this point's requests only
    # replay reads the trace, the seed and the mix (no writes); it writes no file
    config = LoadgenConfig(
        state_dir="", site=SITE, policy="AllLocal", rate_rps=(load_rps,) * seconds,
        start_unix_s=time.time() + START_DELAY_S, output="", seed=seed,
    )  # fmt: skip
    summary = await replay(client, config, KEYS)
    arrays = client.log.arrays()
    if not arrays["ok"].any():
        raise TestbedError(f"no GET was answered at {load_rps:.0f} req/s; see the store's log")
    return np.where(arrays["ok"], arrays["response_ms"], np.inf), float(summary["max_late_ms"])


def check_pace(late_ms: float, load_rps: float, max_late_ms: float) -> None:
    """TestbedError if the generator ran more than ``max_late_ms`` behind its schedule: it
    did not offer ``load_rps``, so the point measures this client, not the store."""
    if late_ms > max_late_ms:
        raise TestbedError(
            f"at {load_rps:.0f} req/s the load generator ran {late_ms:.0f} ms late (over "
            f"{max_late_ms:g} ms): the store is faster than one Python client can profile. "
            "Lower --max-rps, or give its measured saturation point instead (e.g. from "
            "redis-benchmark): --saturation-rps with --servers-per-site"
        )


def _point_line(
    k: int, points: int, load_rps: float, response_ms: np.ndarray, slo_ms: float, late_ms: float
) -> str:
    over = float(np.mean(response_ms > slo_ms))
    return (
        f"load {k + 1}/{points}: {load_rps:.0f} req/s, {response_ms.size} GETs, median "
        f"{np.median(response_ms):.2f} ms, p95 {np.percentile(response_ms, 95):.2f} ms, "
        f"{over:.1%} over {slo_ms:g} ms (generator at most {late_ms:.0f} ms late)"
    )

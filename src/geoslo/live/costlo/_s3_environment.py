"""CosTLO's loop on the user's own S3 (``[environment] kind = "s3"``): the regions the
operator names, each an endpoint URL and a bucket (credentials from botocore's chain:
environment, ``~/.aws``, an instance role), measured from where ``geoslo run`` runs, and the
plan published for the operator's clients (§5.2).

What it touches: objects under ``probe_prefix`` only, ``probe_objects`` of them with two
copies each (``o`` and ``o#1``, the layout of ``copy_key``), written once if missing and
read by the agent. Nothing else in the buckets is read or written; the probes stay for the
next run (delete them with any S3 tool).

Measurement from one host. The paper's agent sits in each region and times pairs of GETs
at the storage service's boundary, and each client prefix pings every region (§5.2). Here
one process, at the application's site, does both: a ping is a TCP handshake with the
region's endpoint (the network's round trip, no request served), and a pair's latencies
less the median handshake of that observation are taken as the storage service's. Run one
service per client site whose configuration should be chosen.

``apply(plan)`` only notes the plan in force: the runtime publishes it at ``/plan`` (JSON),
as gauges and, with ``[service] plan_file``, as a JSON line per plan. The operator's clients
(``CostloClient``, ``VmLibrary``) issue it.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field, fields
from urllib.parse import urlsplit

import numpy as np

from geoslo.control.costlo import (
    EpochObservation,
    EpochPlan,
    PrefixObservation,
    PrefixWorkload,
    RegionObservation,
)
from geoslo.errors import InputError, TestbedError
from geoslo.live.costlo._agent import agent_pairs
from geoslo.live.costlo._objects import RegionEndpoints, S3Access
from geoslo.live.costlo._storage import region_store
from geoslo.models import PairSamples, StorageMeasurements
from geoslo.topology import StoragePrices, cloud_regions

__all__ = ["UserRegion", "CostloS3Environment", "handshake_ms"]

PROBE_COPIES = 2  # the agent's distinct-object pairs read copies 0 and 1
HANDSHAKE_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class UserRegion:
    """One of the operator's regions: ``name``, the S3 endpoint and the bucket."""

    name: str
    endpoint_url: str
    bucket: str
    signing_region: str = "us-east-1"

    @property
    def endpoints(self) -> RegionEndpoints:
        access = S3Access(self.bucket, signing_region=self.signing_region,
                          endpoint_url=self.endpoint_url)  # fmt: skip
        return RegionEndpoints((self.address[1],), None, self.address[0], access)

    @property
    def address(self) -> tuple[str, int]:
        """The endpoint's host and TCP port (what a ping's handshake goes to)."""
        url = urlsplit(self.endpoint_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise InputError("endpoint_url", f"{self.endpoint_url!r} is not an http(s) URL")
        return url.hostname, url.port or (443 if url.scheme == "https" else 80)


async def handshake_ms(host: str, port: int, count: int, gap_s: float = 0.02) -> np.ndarray:
    """``count`` TCP handshakes with ``host:port``, each timed in ms (a ping that needs no
    ICMP and crosses the same path as the requests)."""
    times = []
    for _ in range(count):
        started = time.perf_counter()
        try:
            _, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port), HANDSHAKE_TIMEOUT_S
            )
        except (OSError, TimeoutError) as error:
            raise TestbedError(f"ping {host}:{port}: {error}") from None
        times.append((time.perf_counter() - started) * 1e3)
        writer.close()
        await writer.wait_closed()
        await asyncio.sleep(gap_s)
    return np.array(times)


def _less(samples: PairSamples, network_ms: float) -> PairSamples:
    """A pair's latencies measured from afar, less the network's round trip."""
    service_ms = np.clip(samples.service_ms - network_ms, 0.0, None)
    return PairSamples(samples.network_ms, service_ms, samples.arrival_ms)


@dataclass
class CostloS3Environment:
    """The operator's regions (the serving one first) and the workload of the one client
    prefix this service chooses for."""

    regions: tuple[UserRegion, ...]
    workload: PrefixWorkload
    prefix: str = "app"
    probe_prefix: str = "geoslo-probe/"
    probe_objects: int = 20
    agent_pairs: int = 200  # of each kind per observation
    pairs_per_s: float = 20.0
    pings: int = 50  # handshakes per region and observation
    seed: int = 0
    simulated: bool = False
    epoch: int = 0
    in_force: EpochPlan | None = None
    _keys: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.regions:
            raise InputError("regions", "name at least one region, the serving one first")
        names = [r.name for r in self.regions]
        if len(set(names)) != len(names):
            raise InputError("regions", f"region names repeat: {names}")
        for region in self.regions:
            region.address  # noqa: B018 (a bad URL is said at construction)

    @property
    def prices(self) -> StoragePrices:
        return cloud_regions(("s3",))[0].prices  # an S3-like region's, for the costs

    async def start(self) -> None:
        """The probe objects, written where missing (their version 1 is left as it is)."""
        self._keys = [f"{self.probe_prefix}object-{k}" for k in range(self.probe_objects)]
        for region in self.regions:
            store = region_store(region.endpoints, f"probes-{region.name}")
            try:
                for key in self._keys:
                    for copy in range(PROBE_COPIES):
                        await store.write(key, copy, 1, f"{key}|geoslo probe".encode())
            finally:
                await store.close()

    async def observe(self) -> EpochObservation:
        """Every region's pings and pairs from here (the module's note on one host)."""
        self.epoch += 1
        observed = [await self._observe(k, region) for k, region in enumerate(self.regions)]
        prefix = PrefixObservation(self.prefix, self.regions[0].name, self.workload, None)
        return EpochObservation(tuple(observed), (prefix,))

    async def _observe(self, index: int, region: UserRegion) -> RegionObservation:
        pings = await handshake_ms(*region.address, self.pings)
        network_ms = float(np.median(pings))
        seed = self.seed + 1_000 * self.epoch + index
        pairs = await agent_pairs(
            region.endpoints, self._keys, self.agent_pairs, self.pairs_per_s, seed
        )
        storage = StorageMeasurements(
            *(_less(getattr(pairs, part.name), network_ms) for part in fields(pairs))
        )
        return RegionObservation(region.name, self.prices, storage, {self.prefix: pings}, 0.0)

    async def apply(self, plan: EpochPlan) -> None:
        """Note the plan in force (the runtime publishes it; the clients issue it)."""
        unknown = set(plan.configurations) - {self.prefix}
        if unknown:
            raise InputError("plan", f"this service chooses for {self.prefix!r} only")
        self.in_force = plan

    async def close(self) -> None:
        """Nothing runs between observations: nothing to stop."""

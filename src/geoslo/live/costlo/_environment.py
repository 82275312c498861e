"""CosTLO's loop on the live testbed: an environment handle (``geoslo.control``'s
``Environment``) for ``CostloLoop`` (§5.2) on real Redis servers, or (``engine="s3"``) on
versitygw S3 gateways reached through toxiproxy.

``start()`` brings up a ``CostloCluster`` (its serving region's servers hold one copy of
every object each), injects storage stalls into the serving region's servers (§2) and
starts one end-host: the client library (``CostloClient``) replaying an open-loop Poisson
GET load under the configuration in force. ``observe()`` runs the agent's pairs (§5.2)
and reports the GETs since the last observation: their inflation, the SLO's percentile
minus the median of one GET alone (§3, measured by the agent's single requests).
``apply(plan)`` hands the prefix's configuration to a new client library, which issues
exactly that configuration from then on; the old one finishes its GETs and closes.
``close()`` stops everything it started and returns when it has exited.

The testbed is one prefix (``local``, this machine). On Redis it is one region
(``serving``): loopback has no Internet between them, so the agent's pings are zero and the
search has no second region (its copies and requests per copy, relays, timeout and
probability remain). On S3 every region of the cluster (``regions``, the serving one
first) is observed: its agent's pairs at its boundary and its pings through the delay
injector (`agent_pings`), and the loop takes the closest other as the second region
(§5.2); the client then reaches the serving region and the plan's second one.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from geoslo.control.costlo import (
    Configuration,
    EpochObservation,
    EpochPlan,
    PrefixObservation,
    PrefixWorkload,
    RegionObservation,
)
from geoslo.control.costlo.cost import HOURS_PER_MONTH
from geoslo.errors import InputError, TestbedError
from geoslo.live.costlo._agent import (
    StallSettings,
    agent_pairs,
    agent_pings,
    fill_objects,
    stall_region,
)
from geoslo.live.costlo._client import CostloClient, GetRecord
from geoslo.live.costlo._cluster import CostloCluster
from geoslo.topology import StoragePrices, cloud_regions

__all__ = ["CostloTestbedEnvironment", "PREFIX"]

PREFIX = "local"  # the testbed's one prefix: this machine's end-host


def _retrieved(task: asyncio.Task) -> None:
    """A load GET's outcome is in its client's records: an unavailable store is counted
    there (``GetRecord.errors``), not raised to nobody."""
    if not task.cancelled():
        task.exception()


@dataclass
class CostloTestbedEnvironment:
    """The live deployment ``geoslo run`` drives. ``state_dir`` holds the processes' logs
    (a temporary directory, removed on close, when None)."""

    state_dir: Path | None = None
    servers_per_region: int = 3
    objects: int = 300
    stalls: StallSettings = field(default_factory=StallSettings)
    agent_pairs: int = 400  # of each kind per observation
    pairs_per_s: float = 200.0
    rate_rps: float = 100.0  # the end-host's GETs per second
    relay_rps: float = 1_000.0  # what one relay process moves without queueing (ours)
    percentile: float = 99.0  # the SLO's (§3)
    seed: int = 0
    simulated: bool = False
    engine: str = "redis"  # or "s3": versitygw gateways behind toxiproxy (CostloCluster)
    # engine "s3": region -> the clients' RTT (ms), the serving one first (None: the
    # cluster's default two)
    regions: dict[str, float] | None = None
    pings_per_region: int = 100  # per observation (engine s3)
    epoch: int = 0
    last_records: list[GetRecord] = field(default_factory=list)  # of the last observation
    cluster: CostloCluster | None = None
    _client: CostloClient | None = None
    _inflight: dict[CostloClient, set[asyncio.Task]] = field(default_factory=dict)
    _retiring: set[asyncio.Task] = field(default_factory=set)
    _unread: list[CostloClient] = field(default_factory=list)  # closed, records not taken
    _background: list[asyncio.Task] = field(default_factory=list)
    _stop: asyncio.Event | None = None
    _own_dir: bool = False
    _keys: list[str] = field(default_factory=list)
    _in_force: tuple = (Configuration(), None)  # the configuration and its second region

    @property
    def workload(self) -> PrefixWorkload:
        """The end-host's GETs, per month (the cost model's unit)."""
        return PrefixWorkload(
            gets_per_month=self.rate_rps * 3600.0 * HOURS_PER_MONTH, peak_get_rps=self.rate_rps
        )

    @property
    def configuration(self) -> Configuration:
        """What the client library issues now."""
        return Configuration() if self._client is None else self._client.configuration

    @property
    def prices(self) -> StoragePrices:
        return cloud_regions(("s3",))[0].prices  # an S3-like region's, for the costs

    # --- the contract -------------------------------------------------------------------
    async def start(self) -> None:
        if self.state_dir is None:
            self.state_dir, self._own_dir = Path(tempfile.mkdtemp(prefix="geoslo-costlo-")), True
        self.cluster = await asyncio.to_thread(
            CostloCluster.up,
            Path(self.state_dir),
            self.servers_per_region,
            seed=self.seed,
            engine=self.engine,
            regions=self.regions if self.engine == "s3" else None,
        )
        self._keys = [f"object-{k}" for k in range(self.objects)]
        self._stop = asyncio.Event()
        for k, region in enumerate(self._observed()):
            await fill_objects(self.cluster.direct(region), self._keys)
            stalls = stall_region(self.cluster, region, self.stalls, self.seed + k, self._stop)
            self._background += [asyncio.create_task(stall) for stall in stalls]
        self._client = await self._new_client(Configuration())
        self._background.append(asyncio.create_task(self._load()))

    async def observe(self) -> EpochObservation:
        """The agent's pairs, then the GETs the end-host made since the last call."""
        if self.cluster is None:
            raise TestbedError("the testbed is not started")
        self.epoch += 1
        regions = [await self._observe_region(k, r) for k, r in enumerate(self._observed())]
        self.last_records = self._take_records()
        # each request alone on its server: the serving region's baseline median
        single_ms = regions[0].storage.get_distinct_objects.service_ms
        prefix = PrefixObservation(
            PREFIX,
            self.cluster.serving,
            self.workload,
            self._inflation_ms(float(np.median(single_ms))),
        )
        return EpochObservation(tuple(regions), (prefix,))

    async def _observe_region(self, index: int, region: str) -> RegionObservation:
        """One region's agent (§5.2): pairs at its boundary and, on S3, the pings through
        the delay injector (on Redis the end-host is next to its one region: zero)."""
        seed = self.seed + 1_000 * self.epoch + index
        direct = self.cluster.direct(region)
        storage = await agent_pairs(direct, self._keys, self.agent_pairs, self.pairs_per_s, seed)
        if self.engine == "s3":
            through = self.cluster.reach(region)
            ping = await agent_pings(through, direct, self._keys, self.pings_per_region)
        else:
            ping = np.zeros(self.agent_pairs)
        return RegionObservation(region, self.prices, storage, {PREFIX: ping}, self.relay_rps)

    def _observed(self) -> list[str]:
        """The regions the agents measure: every one on S3, the serving one on Redis."""
        names = list(self.cluster.rtts_ms)
        return names if self.engine == "s3" else names[:1]

    async def apply(self, plan: EpochPlan) -> None:
        """The end-host's client library issues the plan's configuration from now on."""
        unknown = set(plan.configurations) - {PREFIX}
        if unknown:
            raise InputError("plan", f"the testbed serves only {PREFIX!r}, not {sorted(unknown)}")
        selection = plan.selections.get(PREFIX)
        configuration = Configuration() if selection is None else selection.configuration
        second = "" if selection is None else selection.second_region
        observed = self._observed()
        if configuration.second.copies and second not in observed[1:]:
            raise InputError("plan", f"{configuration} needs a second region; observed: {observed}")
        copies = max(configuration.serving_copies, configuration.second.copies)
        if copies > self.servers_per_region:
            raise InputError(
                "plan",
                f"the testbed holds {self.servers_per_region} copies per region: "
                f"{configuration} cannot be served",
            )
        in_force = (configuration, second or None)
        if self._client is not None and in_force == self._in_force:
            return
        old, self._client = self._client, await self._new_client(configuration, second or None)
        self._in_force = in_force
        if old is not None:
            self._retire(old)

    async def close(self) -> None:
        """Stop the load, the stalls and every process started; remove a temporary dir."""
        if self._stop is not None:
            self._stop.set()
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        self._background = []
        if self._client is not None:
            self._retire(self._client)
            self._client = None
        await asyncio.gather(*self._retiring, return_exceptions=True)
        if self.cluster is not None:
            await asyncio.to_thread(self.cluster.down)
            self.cluster = None
        if self._own_dir and self.state_dir is not None:
            shutil.rmtree(self.state_dir, ignore_errors=True)
            self.state_dir, self._own_dir = None, False

    # --- the end-host -------------------------------------------------------------------
    async def _new_client(
        self, configuration: Configuration, second: str | None = None
    ) -> CostloClient:
        regions = self.cluster.regions(second)
        client = CostloClient(configuration, regions, seed=self.seed + self.epoch)
        await client.start()
        self._inflight[client] = set()
        return client

    def _retire(self, client: CostloClient) -> None:
        """Close ``client`` once its GETs in flight are done (each gives up after 2 s)."""

        async def retire() -> None:
            try:
                await asyncio.gather(*self._inflight.pop(client, set()), return_exceptions=True)
            finally:
                await client.close()
                self._unread.append(client)  # its last GETs go to the next observation

        task = asyncio.create_task(retire())
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def _load(self) -> None:
        """Open-loop Poisson GETs at ``rate_rps`` (a slow GET holds no later one back)."""
        rng = np.random.default_rng(self.seed)
        loop = asyncio.get_running_loop()
        start, at = loop.time(), 0.0
        while not self._stop.is_set():
            at += rng.exponential(1.0 / self.rate_rps)
            await asyncio.sleep(max(0.0, start + at - loop.time()))
            client = self._client
            if client is None:
                continue
            key = self._keys[int(rng.integers(len(self._keys)))]
            task = asyncio.create_task(client.get(key))
            tasks = self._inflight[client]
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            task.add_done_callback(_retrieved)

    def _take_records(self) -> list[GetRecord]:
        """The GETs completed since the last call, by every client (bounded by a call)."""
        records = []
        for client in [*self._unread, *self._inflight]:
            records += client.records
            client.records = []
        self._unread = []
        return records

    def _inflation_ms(self, baseline_median_ms: float) -> float | None:
        found = [r.latency_ms for r in self.last_records if r.winner is not None]
        if not found:
            return None
        return float(np.percentile(found, self.percentile)) - baseline_median_ms

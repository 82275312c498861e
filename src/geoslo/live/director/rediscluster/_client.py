"""A timed Redis Cluster client that samples for the Director (FAST 2011 §5.5, §6.1).

Requests go through ``SlotRouter`` (``_router``: the slot map, ``MOVED`` and ``ASK``, and,
when asked, reads from replicas on ``READONLY`` connections, round robin over a shard's
master and replicas; why not redis-py's ``RedisCluster`` is written there). Every get
and put is timed from the moment it is called (waiting for one of the node's connections
counts) to its reply, bounded by ``request_timeout_s``; each feeds
the Director's statistics: the sampled per-bin counts (2% of gets, 40% of puts, seeded)
and every request's latency for the period's p99 (``WorkloadStats``).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from redis.exceptions import RedisClusterException, RedisError

from geoslo.errors import ConfigError
from geoslo.live.director._stats import PeriodStats, WorkloadStats
from geoslo.live.director.rediscluster._router import SlotRouter
from geoslo.live.director.rediscluster._stats import bin_of_key, cluster_workload_stats

__all__ = ["ClientConfig", "RedisClusterClient", "Reply"]


@dataclass(frozen=True)
class ClientConfig:
    """How the client reads, times out and samples."""

    period_s: float = 20.0  # statistics period (§5.5; §5.7 Table: the execution period)
    get_sample_fraction: float = 0.02  # §5.5
    put_sample_fraction: float = 0.4  # §5.5: puts are fewer in the mixes
    latency_threshold_ms: float = 100.0  # the SLO's threshold (§6)
    read_from_replicas: bool = False  # READONLY reads, round robin over master and replicas
    request_timeout_s: float = 5.0  # a request unanswered this long fails
    connections_per_node: int = 32  # requests in flight to one node; later ones wait their turn
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("get_sample_fraction", "put_sample_fraction"):
            if not 0.0 < getattr(self, name) <= 1.0:
                raise ConfigError(name, f"must be in (0, 1], got {getattr(self, name)}")
        for name in ("period_s", "latency_threshold_ms", "request_timeout_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(name, f"must be > 0, got {getattr(self, name)}")
        if self.connections_per_node < 1:
            raise ConfigError(
                "connections_per_node", f"must be >= 1, got {self.connections_per_node}"
            )


@dataclass(frozen=True)
class Reply:
    """One request: whether it succeeded, the value a get found (None if absent), its
    latency and, when it failed, why."""

    ok: bool
    value: bytes | None
    latency_ms: float
    error: str = ""


class RedisClusterClient:
    """Gets and puts on the cluster, timed and sampled per bin; ``collect()`` gives the
    periods that ended (the Director's histograms)."""

    def __init__(self, router: SlotRouter, config: ClientConfig) -> None:
        """Use ``await RedisClusterClient.connect(seed_nodes, config)``."""
        self.router = router
        self.config = config
        self.started = time.monotonic()
        self.stats: WorkloadStats = cluster_workload_stats(
            config.period_s,
            config.get_sample_fraction,
            config.put_sample_fraction,
            config.latency_threshold_ms,
            config.seed,
            failed_ms=config.request_timeout_s * 1e3,
        )
        self.errors: dict[str, int] = {}  # failed requests by error type

    @classmethod
    async def connect(
        cls, seed_nodes: list[tuple[str, int]], config: ClientConfig | None = None
    ) -> RedisClusterClient:
        """Connect through any of ``seed_nodes`` and load the slot map."""
        config = config or ClientConfig()
        router = await SlotRouter.connect(
            seed_nodes,
            config.connections_per_node,
            config.request_timeout_s,
            read_from_replicas=config.read_from_replicas,
        )
        return cls(router, config)

    async def refresh_slot_map(self) -> None:
        """Reload the slot map from the cluster. The router reloads it on MOVED and on
        lost connections, so a replica added (or first listed: Redis lists a replica in
        ``CLUSTER SLOTS`` only once gossip brought its replication offset) after the map
        was taken serves no reads until this is called."""
        await self.router.refresh()

    def master_of(self, key: bytes) -> str:
        """The ``host:port`` of the master serving ``key``, as the client's map has it."""
        return self.router.master_of(key)

    async def put_many(self, values: dict[bytes, bytes]) -> None:
        """Store every key (a preload: untimed, unsampled)."""
        await self.router.put_many(values)

    def now_s(self) -> float:
        """Seconds since the client started: the clock of its statistics."""
        return time.monotonic() - self.started

    async def get(self, key: bytes) -> Reply:
        """GET ``key`` (from a replica too when the config says so), timed and sampled."""
        reply = await self._timed(key, "GET", key, read=True)
        self.stats.record_get(bin_of_key(key), reply.latency_ms, reply.ok, self.now_s())
        return reply

    async def put(self, key: bytes, value: bytes) -> Reply:
        """SET ``key`` on its master, timed and sampled."""
        reply = await self._timed(key, "SET", key, value)
        self.stats.record_put(bin_of_key(key), self.now_s(), reply.latency_ms, reply.ok)
        return Reply(reply.ok, None, reply.latency_ms, reply.error)

    async def _timed(self, key: bytes, *command, read: bool = False) -> Reply:
        started = time.perf_counter()
        self._count_shard(key)
        try:
            async with asyncio.timeout(self.config.request_timeout_s):
                value = await self.router.execute(key, *command, read=read)
        except (RedisError, RedisClusterException, OSError, TimeoutError) as error:
            kind = type(error).__name__
            self.errors[kind] = self.errors.get(kind, 0) + 1
            return Reply(False, None, (time.perf_counter() - started) * 1e3, f"{kind}: {error}")
        return Reply(True, _as_value(value), (time.perf_counter() - started) * 1e3)

    def _count_shard(self, key: bytes) -> None:
        """Requests per shard, named by its master as the client's slot map has it."""
        try:
            master = self.router.master_of(key)
        except RedisClusterException:  # a slot no node covers: the request fails on its own
            return
        self.stats.record_server(master, self.now_s())

    def collect(self) -> list[PeriodStats]:
        """The statistics periods that ended and were not collected yet."""
        return self.stats.collect(self.now_s())

    async def aclose(self) -> None:
        await self.router.aclose()

    async def __aenter__(self) -> RedisClusterClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()


def _as_value(value) -> bytes | None:
    """A GET's reply as bytes (None if absent); a SET's True is no value."""
    return value if isinstance(value, bytes) else None

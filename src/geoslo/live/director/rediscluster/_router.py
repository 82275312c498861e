"""The client side of the Redis Cluster specification: slots to nodes, MOVED and ASK.

A key's slot (CRC16 mod 16384) names its shard; the slot map (``CLUSTER SLOTS``) names the
shard's master and replicas. A ``MOVED`` reply patches the map for that slot and reloads
it in the background; an ``ASK`` reply sends ``ASKING`` and the command again, on one
connection of the target, without touching the map; ``TRYAGAIN`` and a lost connection
wait a little and retry (a lost connection reloads the map first). Reads may go round
robin over a shard's master and replicas, whose connections say ``READONLY``.

Why not redis-py's ``RedisCluster`` (measured, redis-py 8.1): during a slot migration to
an empty master it fails every ``ASK`` with an AttributeError (the target holds no slots,
so it is not in its node cache: redis/redis-py #4015); it sends ``ASKING`` and the
command on whichever pooled connections come first, so the command usually arrives
without ``ASKING``; and every fifth ``MOVED`` it closes every connection to every node.
Under a 2% CPU quota the reconnections alone took a node's quota for seconds. Each node
here is a plain ``redis.asyncio.Redis`` (its pool and parser), at most
``connections_per_node`` requests in flight to it, the rest waiting their turn.

A request whose caller gives up (a timeout) is not cancelled once it was sent: it runs to
its reply in the background, keeping its connection (cancelling mid-reply forces redis-py
to drop the connection, and reconnecting costs the node more than the reply).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import dataclass

from redis.asyncio import Redis
from redis.backoff import NoBackoff
from redis.crc import key_slot
from redis.exceptions import (
    AskError,
    ClusterDownError,
    ClusterError,
    MovedError,
    RedisClusterException,
    RedisError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.retry import Retry

from geoslo.live.director.rediscluster._engine import SLOTS

__all__ = ["REDIRECTS", "SlotRouter"]

REDIRECTS = 16  # hops (MOVED, ASK, retries) before a request fails, as redis-py's TTL
_RETRY_PAUSE_S = 0.05  # after TRYAGAIN, CLUSTERDOWN or a lost connection
_REFRESH_EVERY_S = 0.5  # background slot-map reloads at most this often
# connections per node beyond the requests': the map's reloads and the preload pipelines
# bypass the request limit, and redis-py's pool refuses ("Too many connections") when full
# (measured: a lone master busy with 32 requests failed CLUSTER SLOTS, and the run ended)
_SPARE_CONNECTIONS = 2


@dataclass(frozen=True)
class _Shard:
    master: str  # "host:port"
    replicas: tuple[str, ...] = ()


class SlotRouter:
    """Sends each command to the node that serves its key's slot, following redirections."""

    def __init__(
        self,
        seeds: list[tuple[str, int]],
        connections_per_node: int,
        timeout_s: float,
        read_from_replicas: bool = False,
    ) -> None:
        """Use ``await SlotRouter.connect(...)``. ``timeout_s`` bounds connecting; a
        socket read gives up after four times it (a hung node frees its connections)."""
        self._seeds = [f"{host}:{port}" for host, port in seeds]
        self._per_node = connections_per_node
        self._timeout_s = timeout_s
        self._read_from_replicas = read_from_replicas
        self._shards: list[_Shard | None] = [None] * SLOTS
        self._nodes: dict[str, Redis] = {}
        self._slots: dict[str, asyncio.Semaphore] = {}
        self._in_flight: set[asyncio.Task] = set()
        self._round_robin = itertools.count()
        self._refresh: asyncio.Task | None = None
        self._refreshed_at = -float("inf")

    @classmethod
    async def connect(cls, seeds: list[tuple[str, int]], *args, **kwargs) -> SlotRouter:
        router = cls(seeds, *args, **kwargs)
        await router.refresh()
        return router

    # -- the slot map -------------------------------------------------------------------

    async def refresh(self) -> None:
        """Reload the slot map from the first node (known masters, then seeds) answering."""
        known = [shard.master for shard in self._shards if shard is not None]
        errors = []
        for name in dict.fromkeys([*known, *self._seeds]):
            try:
                async with asyncio.timeout(self._timeout_s):
                    reply = await self._node(name).execute_command("CLUSTER SLOTS")
            except (RedisError, OSError, TimeoutError) as error:
                errors.append(f"{name}: {error}")
                continue
            self._load(reply, asked=name)
            self._refreshed_at = time.monotonic()
            return
        raise RedisClusterException(f"no node answered CLUSTER SLOTS: {'; '.join(errors)}")

    def _load(self, reply, asked: str) -> None:
        shards: list[_Shard | None] = [None] * SLOTS
        asked_host = asked.rsplit(":", 1)[0]
        for start, end, master, *replicas in reply:
            # a node that knows no address of its own (a one-node cluster) reports host ""
            names = [f"{_text(n[0]) or asked_host}:{int(n[1])}" for n in (master, *replicas)]
            shard = _Shard(names[0], tuple(names[1:]))
            shards[int(start) : int(end) + 1] = [shard] * (int(end) - int(start) + 1)
        self._shards = shards

    def _refresh_soon(self) -> None:
        """Reload the map in the background, unless a reload runs or ran just now."""
        if self._refresh is not None and not self._refresh.done():
            return
        if time.monotonic() - self._refreshed_at < _REFRESH_EVERY_S:
            return
        self._refresh = asyncio.create_task(self._refresh_quietly())

    async def _refresh_quietly(self) -> None:
        try:
            await self.refresh()
        except RedisClusterException:
            pass  # the next redirection or lost connection tries again

    def master_of(self, key: bytes) -> str:
        """The ``host:port`` of the master serving ``key``'s slot, as the map has it."""
        shard = self._shards[key_slot(key)]
        if shard is None:
            raise RedisClusterException(f"slot {key_slot(key)} is not served by any node")
        return shard.master

    def _target(self, slot: int, read: bool) -> str:
        shard = self._shards[slot]
        if shard is None:
            raise RedisClusterException(f"slot {slot} is not served by any node")
        if not (read and self._read_from_replicas and shard.replicas):
            return shard.master
        members = (shard.master, *shard.replicas)
        return members[next(self._round_robin) % len(members)]

    # -- commands -----------------------------------------------------------------------

    async def execute(self, key: bytes, *command, read: bool = False):
        """Run ``command`` (which names ``key``) on the node serving ``key``'s slot,
        following MOVED and ASK; raises the node's error, the last lost connection's, or
        ``ClusterError`` after ``REDIRECTS`` tries (all ``RedisError``), and
        ``RedisClusterException`` if no node serves the slot."""
        slot = key_slot(key)
        target, asking = self._target(slot, read), False
        lost: Exception | None = None  # the last lost connection, if the last try lost one
        for _ in range(REDIRECTS):
            try:
                return await self._send(target, command, asking)
            except MovedError as moved:  # a subclass of AskError: first
                self._shards[slot] = _Shard(_address(moved))
                self._refresh_soon()
                target, asking, lost = _address(moved), False, None
            except AskError as ask:
                target, asking, lost = _address(ask), True, None
            except (TryAgainError, ClusterDownError):
                await asyncio.sleep(_RETRY_PAUSE_S)
                target, asking, lost = self._target(slot, read), False, None
            except (RedisConnectionError, OSError) as error:
                self._refresh_soon()
                await asyncio.sleep(_RETRY_PAUSE_S)
                target, asking, lost = self._target(slot, read), False, error
        if lost is not None:
            raise lost
        raise ClusterError(f"slot {slot}: still redirected after {REDIRECTS} tries")

    async def _send(self, name: str, command: tuple, asking: bool):
        """One try on one node: wait for one of its connections (the caller may give up
        while waiting), then run to the reply whatever the caller does."""
        slots = self._slots.setdefault(name, asyncio.Semaphore(self._per_node))
        await slots.acquire()
        try:
            task = asyncio.create_task(self._on_node(name, command, asking))
        except BaseException:
            slots.release()
            raise
        self._in_flight.add(task)
        task.add_done_callback(lambda done: self._finished(done, slots))
        return await asyncio.shield(task)

    def _finished(self, task: asyncio.Task, slots: asyncio.Semaphore) -> None:
        slots.release()
        self._in_flight.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: a caller that gave up does not see it

    async def _on_node(self, name: str, command: tuple, asking: bool):
        node = self._node(name)
        if not asking:
            return await node.execute_command(*command)
        async with node.pipeline(transaction=False) as pipe:  # ASKING on the same connection
            pipe.execute_command("ASKING")
            pipe.execute_command(*command)
            _, reply = await pipe.execute(raise_on_error=False)
        if isinstance(reply, Exception):
            raise reply
        return reply

    def _node(self, name: str) -> Redis:
        if name not in self._nodes:
            host, port = name.rsplit(":", 1)
            self._nodes[name] = Redis(
                host=host,
                port=int(port),
                max_connections=self._per_node + _SPARE_CONNECTIONS,
                socket_timeout=4 * self._timeout_s,
                socket_connect_timeout=self._timeout_s,
                retry=Retry(NoBackoff(), 0),  # the router retries, after reloading the map
                redis_connect_func=_readonly if self._read_from_replicas else None,
            )
        return self._nodes[name]

    async def put_many(self, values: dict[bytes, bytes]) -> None:
        """SET every key, one pipeline per master; keys redirected meanwhile one by one."""
        by_master: dict[str, list[bytes]] = {}
        for key in values:
            by_master.setdefault(self.master_of(key), []).append(key)
        for master, keys in by_master.items():
            async with self._node(master).pipeline(transaction=False) as pipe:
                for key in keys:
                    pipe.set(key, values[key])
                replies = await pipe.execute(raise_on_error=False)
            for key, reply in zip(keys, replies, strict=True):
                if isinstance(reply, Exception):
                    await self.execute(key, "SET", key, values[key])

    async def aclose(self) -> None:
        """Cancel what still runs and close every connection."""
        for task in [*self._in_flight, *([self._refresh] if self._refresh else [])]:
            task.cancel()
        await asyncio.gather(*self._in_flight, return_exceptions=True)
        if self._refresh is not None:
            await asyncio.gather(self._refresh, return_exceptions=True)
        for node in self._nodes.values():
            await node.aclose()


async def _readonly(connection) -> None:
    """Every connection reads from a replica too (harmless on a master)."""
    await connection.on_connect()
    await connection.send_command("READONLY")
    if _text(await connection.read_response()) != "OK":
        raise RedisConnectionError("READONLY failed")


def _address(redirect: AskError) -> str:
    return f"{redirect.host}:{redirect.port}"


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)

"""Safety of slot migration on a real Redis Cluster under continuous writes and reads
(docs/director-live.md, "Slot migration and its safety").

Writers (one ``RedisCluster`` client each, each the only writer of its keys) store
increasing sequence numbers; readers read random keys. Checked on every run:

* no acknowledged write is lost: after the last action, every key holds the last acked
  sequence number or a later attempted one (a write whose answer was lost);
* no read returns a sequence number older than one acknowledged before the read began.

The guarantee under a node crash: nodes run AOF with ``appendfsync always`` and a killed
node is restarted from its AOF and nodes.conf (no replica is promoted: Redis replicates
asynchronously, so a failover may lose acked writes, and that is not what is tested).
"""

from __future__ import annotations

import asyncio
import bisect
import random
import time
from dataclasses import dataclass, field

import pytest
from redis.asyncio.cluster import ClusterNode as ClientNode
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot
from redis.exceptions import RedisError

from geoslo.live.director.rediscluster import ClusterSpec, RedisClusterTestbed, cluster_view
from geoslo.live.director.rediscluster._migrate import (
    migrate_slots,
    repair,
)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("needs_redis")]

BIN = range(0, 128)  # the slots that move: one bin (SLOTS_PER_BIN), on node-0 at start
KEYS_IN_BIN = 160
BIN_SLOTS_USED = 8
KEYS_ELSEWHERE = 80
VALUE_PAD_BYTES = 1000
WRITERS = 4
READERS = 2
SLOW_BYTES_PER_S = 120_000  # the bin's ~170 KB take ~1.5 s: writes and reads overlap
FAST_BYTES_PER_S = 20_000_000


def safety_keys() -> list[str]:
    """Deterministic keys: KEYS_IN_BIN in BIN_SLOTS_USED of BIN's slots (hash tags, so a
    slot holds many keys and its migration takes a while), KEYS_ELSEWHERE outside BIN."""
    tags, outside, i = {}, [], 0
    while len(tags) < BIN_SLOTS_USED or len(outside) < KEYS_ELSEWHERE:
        slot = key_slot(f"t{i}".encode())
        if slot in BIN and slot not in tags and len(tags) < BIN_SLOTS_USED:
            tags[slot] = f"t{i}"
        elif slot not in BIN and len(outside) < KEYS_ELSEWHERE:
            outside.append(f"{{t{i}}}:solo")
        i += 1
    per_tag = KEYS_IN_BIN // BIN_SLOTS_USED
    inside = [f"{{{tag}}}:{k}" for tag in tags.values() for k in range(per_tag)]
    return inside + outside


def client_of(testbed: RedisClusterTestbed) -> RedisCluster:
    nodes = [ClientNode(host, port) for host, port in testbed.seed_nodes()]
    return RedisCluster(startup_nodes=nodes, socket_timeout=10, socket_connect_timeout=2)


@dataclass
class Ledger:
    """What the clients did: acked writes per key with their times, reads with theirs."""

    acks: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    attempted: dict[str, int] = field(default_factory=dict)
    reads: list[tuple[str, float, int]] = field(default_factory=list)  # key, start, seq
    failed_writes: int = 0
    failed_reads: int = 0

    def last_acked_before(self, key: str, time_s: float) -> int:
        acks = self.acks.get(key, [])
        index = bisect.bisect_left(acks, (time_s, -1))
        return acks[index - 1][1] if index else 0


def value_of(seq: int) -> bytes:
    return f"{seq}:".encode() + b"x" * VALUE_PAD_BYTES


def seq_of(value: bytes | None) -> int:
    return 0 if value is None else int(value.split(b":", 1)[0])


async def writer(testbed, keys: list[str], ledger: Ledger, stop: asyncio.Event) -> None:
    client = client_of(testbed)
    seq = dict.fromkeys(keys, 0)
    try:
        while not stop.is_set():
            for key in keys:
                seq[key] += 1
                ledger.attempted[key] = seq[key]
                try:
                    await client.set(key, value_of(seq[key]))
                except RedisError:
                    ledger.failed_writes += 1
                    await asyncio.sleep(0.05)
                    continue
                ledger.acks.setdefault(key, []).append((time.monotonic(), seq[key]))
                if stop.is_set():
                    break
    finally:
        await client.aclose()


async def reader(testbed, keys: list[str], ledger: Ledger, stop: asyncio.Event, seed: int):
    client = client_of(testbed)
    rng = random.Random(seed)
    try:
        while not stop.is_set():
            key = rng.choice(keys)
            started_s = time.monotonic()
            try:
                value = await client.get(key)
            except RedisError:
                ledger.failed_reads += 1
                await asyncio.sleep(0.05)
                continue
            ledger.reads.append((key, started_s, seq_of(value)))
    finally:
        await client.aclose()


class Workload:
    """WRITERS writers and READERS readers on the keys, until ``stop``."""

    def __init__(self, testbed: RedisClusterTestbed, keys: list[str]) -> None:
        self.testbed, self.keys, self.ledger = testbed, keys, Ledger()
        self.stop_event = asyncio.Event()
        self.tasks: list[asyncio.Task] = []

    async def start(self) -> None:
        shares = [self.keys[w::WRITERS] for w in range(WRITERS)]
        self.tasks = [
            *(
                asyncio.create_task(writer(self.testbed, s, self.ledger, self.stop_event))
                for s in shares
            ),
            *(
                asyncio.create_task(
                    reader(self.testbed, self.keys, self.ledger, self.stop_event, r)
                )
                for r in range(READERS)
            ),
        ]
        await self.until(lambda: all(k in self.ledger.acks for k in self.keys), "every key written")

    async def until(self, condition, what: str, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            await asyncio.sleep(0.02)

    async def stop(self) -> None:
        self.stop_event.set()
        await asyncio.gather(*self.tasks)

    async def violations(self) -> list[str]:
        """Lost acked writes (checksum of every key) and stale reads."""
        client = client_of(self.testbed)
        try:
            finals = {k: seq_of(await client.get(k)) for k in self.keys}
        finally:
            await client.aclose()
        ledger, found = self.ledger, []
        for key in self.keys:
            acked, attempted = ledger.acks[key][-1][1], ledger.attempted[key]
            if not acked <= finals[key] <= attempted:
                found.append(f"{key}: holds {finals[key]}, last acked {acked}")
        for key, started_s, seq in ledger.reads:
            before = ledger.last_acked_before(key, started_s)
            if seq < before:
                found.append(f"read of {key}: {seq}, acked {before} before the read began")
        return found


def cluster_of(tmp_path, node_timeout_ms: int = 2000) -> RedisClusterTestbed:
    spec = ClusterSpec(
        masters=3, replicas=0, standbys=1, appendfsync="always", node_timeout_ms=node_timeout_ms
    )
    return RedisClusterTestbed.up(spec, tmp_path, progress=lambda _line: None)


def address(testbed: RedisClusterTestbed, name: str) -> tuple[str, int]:
    node = testbed.node(name)
    return (node.host, node.port)


async def settled(testbed: RedisClusterTestbed, timeout_s: float = 30.0) -> None:
    """Until every live node agrees on the slot owners and none has a marker left."""
    deadline = time.monotonic() + timeout_s
    while True:
        views = []
        for host_port in testbed.seed_nodes():
            try:
                views.append(await asyncio.to_thread(cluster_view, host_port[1]))
            except RedisError:
                views.append(None)
        maps = [
            None
            if v is None
            else frozenset((n.node_id, n.slots) for n in v if n.is_master and n.slots)
            for v in views
        ]
        markers = [n for v in views if v for n in v if n.migrating or n.importing]
        if None not in maps and len(set(maps)) == 1 and not markers:
            covered = sum(hi - lo + 1 for _, slots in maps[0] for lo, hi in slots)
            if covered == 16384:
                return
        assert time.monotonic() < deadline, f"cluster not settled: markers {markers}"
        await asyncio.sleep(0.1)


async def migrate_under_load(testbed, order: str = "spec") -> tuple[list[str], object, Ledger]:
    """Migrate BIN from node-0 to node-1 under the workload: the violations, the result (a
    failed migration, possible only with a broken order, is repaired and returned), the
    ledger."""
    workload = Workload(testbed, safety_keys())
    await workload.start()
    source, target = address(testbed, "node-0"), address(testbed, "node-1")
    try:
        result = await migrate_slots(source, target, BIN, SLOW_BYTES_PER_S, order=order)
    except RedisError as error:
        result = error
        await repair(source)
    migrated_s = time.monotonic()
    await workload.until(lambda: workload.ledger.reads[-1][1] > migrated_s + 0.3, "reads after")
    await workload.stop()
    await settled(testbed)
    return await workload.violations(), result, workload.ledger


def test_writes_and_reads_stay_fresh_while_a_bin_migrates(tmp_path):
    with cluster_of(tmp_path) as testbed:
        violations, result, ledger = asyncio.run(migrate_under_load(testbed))
        assert violations == []
        # a migration is invisible to the clients: ASK redirects keep every key served
        assert (ledger.failed_writes, ledger.failed_reads) == (0, 0)
        owners = {n.port: n.slots for n in testbed.cluster_view() if n.is_master}
        assert (BIN[0], BIN[-1]) in owners[testbed.node("node-1").port]
    assert (result.slots_moved, result.keys_moved) == (len(BIN), KEYS_IN_BIN)
    assert result.bytes_moved >= KEYS_IN_BIN * VALUE_PAD_BYTES
    # paced: never faster than specified (one batch of slack), and not stalled
    slack_bytes = 64 * 1024
    assert result.bytes_moved <= SLOW_BYTES_PER_S * result.duration_s + slack_bytes
    assert result.observed_bytes_per_s > 0.2 * SLOW_BYTES_PER_S

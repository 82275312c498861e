"""Repair after a kill inside a ``MIGRATE`` round trip, on a real Redis Cluster
(docs/director-live.md, "Repair").

The target is stopped (SIGSTOP) while a migration runs, so the source's next ``MIGRATE``
waits for its answer with the batch sitting unread in the target's socket; the source is
then SIGKILLed and the target resumed: the target restores the batch, and the source,
restarted from its AOF (``appendfsync always``), still has it and still owns the slot.
Writes acknowledged by the source afterwards must survive ``repair``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest
from redis.asyncio import Redis
from redis.crc import key_slot
from redis.exceptions import RedisClusterException, RedisError

from geoslo.live.director.rediscluster import (
    ClusterSpec,
    MigrationProgress,
    RedisClusterTestbed,
    SlotRouter,
    cluster_view,
    migrate_slots,
    repair,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.usefixtures("needs_redis"),
    pytest.mark.timeout(150),
]

KEYS = 60
PAD = b"x" * 1000
RATE_BYTES_PER_S = 100_000  # batches of four ~1.1 KB keys, 60 keys in ~0.7 s
MOVED_BEFORE_STOP = 8
WAIT_S = 60.0  # generous: the machine is shared


def slot_keys() -> list[str]:
    """KEYS keys in one slot of node-0 (0..8191 of two masters)."""
    tag = next(f"r{i}" for i in range(10**6) if key_slot(f"r{i}".encode()) < 8000)
    return [f"{{{tag}}}:{i}" for i in range(KEYS)]


def value(version: int) -> bytes:
    return b"%d:" % version + PAD


def unread_bytes(port: int) -> int:
    """Bytes queued unread in established sockets of ``port`` (/proc/net/tcp)."""
    total = 0
    with open("/proc/net/tcp") as table:
        next(table)
        for line in table:
            fields = line.split()
            local_port = int(fields[1].split(":")[1], 16)
            if local_port == port and fields[3] == "01":  # ESTABLISHED
                total += int(fields[4].split(":")[1], 16)
    return total


async def until(condition, what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not await condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def command(port: int, *args):
    node = Redis(host="127.0.0.1", port=port, socket_timeout=10)
    try:
        return await node.execute_command(*args)
    finally:
        await node.aclose()


async def serving(ports) -> bool:
    for port in ports:
        try:
            if b"cluster_state:ok" not in await command(port, "CLUSTER", "INFO"):
                return False
        except RedisError:
            return False
    return True


async def write_until_acked(router: SlotRouter, key: str, payload: bytes) -> None:
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            await router.execute(key.encode(), "SET", key, payload)
            return
        except (RedisError, RedisClusterException, OSError):
            assert time.monotonic() < deadline, f"{key} never acknowledged"
            await asyncio.sleep(0.1)


async def duplicate_batch_then_repair(testbed: RedisClusterTestbed) -> dict:
    keys = slot_keys()
    slot = key_slot(keys[0].encode())
    source, target = testbed.node("node-0"), testbed.node("node-1")
    for key in keys:
        await command(source.port, "SET", key, value(1))
    progress = MigrationProgress()
    migration = asyncio.create_task(
        migrate_slots(
            (source.host, source.port),
            (target.host, target.port),
            [slot],
            RATE_BYTES_PER_S,
            migrate_timeout_ms=int(WAIT_S * 1000),  # the source waits in MIGRATE until killed
            progress=progress,
        )
    )

    async def moved_some() -> bool:
        assert not migration.done(), "the migration ended before the target was stopped"
        return progress.keys >= MOVED_BEFORE_STOP

    await until(moved_some, "a few batches moved")
    os.kill(target.pid, signal.SIGSTOP)  # no await since the check: no batch in between
    try:
        moved = progress.keys

        async def batch_in_flight() -> bool:
            return unread_bytes(target.port) > 0

        await until(batch_in_flight, "the next batch to reach the stopped target")
        await asyncio.to_thread(testbed.stop_node, "node-0", True)  # SIGKILL inside MIGRATE
    finally:
        os.kill(target.pid, signal.SIGCONT)
    with pytest.raises((RedisError, OSError)):
        await migration

    async def batch_restored() -> bool:
        return await command(target.port, "CLUSTER", "COUNTKEYSINSLOT", slot) > moved

    await until(batch_restored, "the target to restore the batch in flight")
    await asyncio.to_thread(testbed.restart_node, "node-0")
    await until(lambda: serving([source.port, target.port]), "both masters serving")
    on_source = set(await command(source.port, "CLUSTER", "GETKEYSINSLOT", slot, KEYS))
    on_target = set(await command(target.port, "CLUSTER", "GETKEYSINSLOT", slot, KEYS))
    both = sorted(k.decode() for k in on_source & on_target)
    # Acknowledged new versions: the restarted source owns the slot and has these keys.
    router = await SlotRouter.connect(testbed.seed_nodes(), connections_per_node=2, timeout_s=5)
    try:
        for key in keys:
            await write_until_acked(router, key, value(2))
        report = await repair((target.host, target.port))
        await router.refresh()
        finals = {k: await router.execute(k.encode(), "GET", k, read=True) for k in keys}
    finally:
        await router.aclose()
    markers = [
        (n.port, n.migrating, n.importing)
        for node in (source, target)
        for n in cluster_view(node.port)
        if n.migrating or n.importing
    ]
    counts = [
        await command(p, "CLUSTER", "COUNTKEYSINSLOT", slot) for p in (source.port, target.port)
    ]
    return dict(both=both, report=report, finals=finals, markers=markers, counts=counts, slot=slot)


def test_a_source_killed_inside_migrate_is_repaired_keeping_every_acked_write(tmp_path):
    spec = ClusterSpec(
        masters=2, replicas=0, standbys=0, appendfsync="always", node_timeout_ms=5000
    )
    with RedisClusterTestbed.up(spec, tmp_path, progress=lambda _line: None) as testbed:
        found = asyncio.run(duplicate_batch_then_repair(testbed))
    assert found["both"], "the kill left no key on both nodes: the scenario did not happen"
    stale = {k: v for k, v in found["finals"].items() if v != value(2)}
    assert stale == {}, f"{len(stale)} acked writes lost (keys on both: {len(found['both'])})"
    assert found["markers"] == []
    assert sorted(found["counts"]) == [0, KEYS]  # the slot's keys on one node only
    (step,) = [s for s in found["report"].steps if s.slot == found["slot"]]
    assert step.kind == "finish" and step.keep == step.source  # the source owned the slot

"""Slot migration tools on a real Redis Cluster without load: repair of slots no master
owns and of keys left on a master that does not own their slot, and the paced copy rate
(docs/director-live.md, "Slot migration and its safety")."""

from __future__ import annotations

import asyncio

import pytest
import redis
from redis.cluster import ClusterNode as ClientNode
from redis.cluster import RedisCluster
from redis.crc import key_slot

from geoslo.errors import InputError
from geoslo.live.director.rediscluster import (
    ClusterSpec,
    RedisClusterTestbed,
    RepairStep,
    cluster_view,
    migrate_slots,
    repair,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.usefixtures("needs_redis"),
    pytest.mark.timeout(150),
]


def admin(port: int) -> redis.Redis:
    return redis.Redis("127.0.0.1", port, socket_timeout=10)


def client_of(testbed: RedisClusterTestbed) -> RedisCluster:
    nodes = [ClientNode(host, port) for host, port in testbed.seed_nodes()]
    return RedisCluster(startup_nodes=nodes, socket_timeout=10)


def tagged_keys(first_tag: int, count: int) -> list[str]:
    """``count`` keys in one slot owned by node-0 at start (0..5461 of three masters)."""
    tag = next(f"t{i}" for i in range(first_tag, 10**6) if key_slot(f"t{i}".encode()) < 5000)
    return [f"{{{tag}}}:{i}" for i in range(count)]


@pytest.fixture
def testbed(tmp_path):
    spec = ClusterSpec(masters=3, replicas=0, standbys=1)
    with RedisClusterTestbed.up(spec, tmp_path, progress=lambda _line: None) as testbed:
        yield testbed


def test_repair_gives_an_unowned_slot_to_the_master_holding_its_keys(testbed):
    keys = tagged_keys(0, 20)
    slot = key_slot(keys[0].encode())
    empty_slot = 5001  # node-0's at start, no key
    with client_of(testbed) as client:
        for key in keys:
            client.set(key, key)
    owner = testbed.node("node-0")
    for node in testbed.nodes():  # as after a crash between DELSLOTS and ADDSLOTS
        admin(node.port).execute_command("CLUSTER", "DELSLOTS", slot, empty_slot)
    report = asyncio.run(repair((owner.host, owner.port)))
    assert report.steps == (
        RepairStep(slot, "assign", None, owner.node_id, "no master owns it"),
        RepairStep(empty_slot, "assign", None, None, "no master owns it"),
    )
    view = testbed.cluster_view()
    holder = next(n for n in view if any(lo <= empty_slot <= hi for lo, hi in n.slots))
    standby = testbed.node("node-3").node_id
    assert holder.node_id != standby  # a standby stays empty
    with client_of(testbed) as client:
        assert [client.get(k) for k in keys] == [k.encode() for k in keys]


def test_repair_moves_keys_stranded_on_a_non_owner_to_the_owner_whose_copy_wins(testbed):
    keys = tagged_keys(100, 6)
    slot = key_slot(keys[0].encode())
    owner, stranger = testbed.node("node-0"), testbed.node("node-1")
    with client_of(testbed) as client:
        client.set(keys[0], b"owner's newer value")
    # A write redirected by ASK landed on the target just before a roll-back cleared its
    # IMPORTING marker: the key sits on a master that does not own the slot.
    side = admin(stranger.port)
    side.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", owner.node_id)
    for key in keys:
        pipe = side.pipeline(transaction=False)
        pipe.execute_command("ASKING")
        pipe.set(key, b"stranded")
        pipe.execute()
    side.execute_command("CLUSTER", "SETSLOT", slot, "STABLE")
    report = asyncio.run(repair((owner.host, owner.port)))
    assert report.steps == () and report.orphan_keys_moved == len(keys)
    assert side.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) == 0
    with client_of(testbed) as client:
        values = [client.get(k) for k in keys]
    assert values == [b"owner's newer value"] + [b"stranded"] * (len(keys) - 1)


@pytest.mark.parametrize("rate_bytes_per_s", [100_000, 400_000])
def test_a_migration_copies_at_most_at_the_specified_rate(testbed, rate_bytes_per_s):
    keys, value = tagged_keys(200, 100), b"v" * 2000
    slot = key_slot(keys[0].encode())
    with client_of(testbed) as client:
        for key in keys:
            client.set(key, value)
    source, target = testbed.node("node-0"), testbed.node("node-1")
    result = asyncio.run(
        migrate_slots(
            (source.host, source.port), (target.host, target.port), [slot], rate_bytes_per_s
        )
    )
    assert (result.slots_moved, result.keys_moved) == (1, len(keys))
    assert result.bytes_moved >= len(keys) * len(value)
    # one batch (50 ms of the rate) may go before the first wait
    assert result.bytes_moved <= rate_bytes_per_s * (result.duration_s + 0.05) * 1.01
    assert result.observed_bytes_per_s > 0.3 * rate_bytes_per_s  # slower only when busy


def test_a_migration_of_slots_the_source_does_not_own_is_refused_before_any_marker(testbed):
    source, target = testbed.node("node-0"), testbed.node("node-1")
    with pytest.raises(InputError, match="1 not owned by the source"):
        asyncio.run(
            migrate_slots((source.host, source.port), (target.host, target.port), [0, 9000], 1e6)
        )
    with pytest.raises(InputError, match="is the source"):
        asyncio.run(migrate_slots((source.host, source.port), (source.host, source.port), [0], 1e6))
    views = [cluster_view(node.port) for node in testbed.nodes()]
    assert not any(n.migrating or n.importing for view in views for n in view)

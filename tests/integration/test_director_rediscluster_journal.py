"""The Director's migrations journal on a real Redis Cluster (docs/director-live.md,
"Repair"): start-up repairs only the moves the journal left open and leaves an operator's
open slots alone (with a warning); a move that a node crash failed is repaired while the
Director runs, once the node is back."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from redis.asyncio import Redis
from redis.crc import key_slot
from redis.exceptions import RedisError

from geoslo.control.director.types import Action, RunningAction, Step
from geoslo.live.director.rediscluster import (
    ClusterSpec,
    RedisClusterTestbed,
    SlotRouter,
    cluster_view,
    slots_of_bin,
)
from geoslo.live.director.rediscluster._environment import EnvSettings, RedisClusterEnvironment
from geoslo.live.director.rediscluster._repairs import MIGRATIONS_FILE, MigrationJournal

pytestmark = [
    pytest.mark.integration,
    pytest.mark.usefixtures("needs_redis"),
    pytest.mark.timeout(150),
]

WAIT_S = 60.0  # generous: the machine is shared
PAD = b"x" * 1000


def quiet(_line: str) -> None:
    pass


async def command(port: int, *args):
    node = Redis(host="127.0.0.1", port=port, socket_timeout=10)
    try:
        return await node.execute_command(*args)
    finally:
        await node.aclose()


def markers(testbed: RedisClusterTestbed) -> dict[int, list[int]]:
    """Each live node's port -> the slots it marks MIGRATING or IMPORTING."""
    found = {}
    for _host, port in testbed.seed_nodes():
        mine = next(n for n in cluster_view(port) if "myself" in n.flags)
        found[port] = sorted({*mine.migrating, *mine.importing})
    return found


def test_start_up_repairs_the_journals_open_move_and_leaves_an_operators_alone(tmp_path, caplog):
    spec = ClusterSpec(masters=2, standbys=0)
    state = tmp_path / "controller"
    with RedisClusterTestbed.up(spec, tmp_path / "cluster", progress=quiet) as tb:
        node0, node1 = tb.node("node-0"), tb.node("node-1")
        ours, theirs = 3, 9000  # node-0's and node-1's at start

        async def scenario():
            await command(node0.port, "SET", "{bsF}k", "v")  # "bsF" hashes to slot 3
            # A crashed Director: its journal holds the move, its markers are on the nodes.
            MigrationJournal(state / MIGRATIONS_FILE).begin(node0.node_id, node1.node_id, [ours])
            await command(node1.port, "CLUSTER", "SETSLOT", ours, "IMPORTING", node0.node_id)
            await command(node0.port, "CLUSTER", "SETSLOT", ours, "MIGRATING", node1.node_id)
            # An operator's reshard in progress, which the Director did not make.
            await command(node0.port, "CLUSTER", "SETSLOT", theirs, "IMPORTING", node1.node_id)
            await command(node1.port, "CLUSTER", "SETSLOT", theirs, "MIGRATING", node0.node_id)
            env = RedisClusterEnvironment(state, EnvSettings(seed_nodes=tuple(tb.seed_nodes())))
            with caplog.at_level(logging.WARNING, logger="geoslo.director.rediscluster"):
                await env.start()
            try:
                return env.repair_report, MigrationJournal(state / MIGRATIONS_FILE).open_moves()
            finally:
                await env.close()

        report, still_open = asyncio.run(scenario())
        left = markers(tb)
    assert left == {node0.port: [theirs], node1.port: [theirs]}  # slot 3 repaired, 9000 not
    assert [s.slot for s in report.steps] == [ours] and still_open == {}
    assert [s.slot for s in report.foreign] == [theirs]
    warned = [r.getMessage() for r in caplog.records if "did not make" in r.getMessage()]
    assert len(warned) == 1 and f"slot {theirs}:" in warned[0]


def bin_keys(count: int) -> list[str]:
    """``count`` keys in the slots of bin 0 (node-0's at start)."""
    slots = set(slots_of_bin(0))
    keys, i = [], 0
    while len(keys) < count:
        if key_slot(f"b{i}".encode()) in slots:
            keys.append(f"b{i}")
        i += 1
    return keys


async def keys_in_bin(port: int) -> int:
    node = Redis(host="127.0.0.1", port=port, socket_timeout=10)
    try:
        async with node.pipeline(transaction=False) as pipe:
            for slot in slots_of_bin(0):
                pipe.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot)
            return sum(await pipe.execute())
    finally:
        await node.aclose()


async def observe_quietly(env: RedisClusterEnvironment) -> None:
    try:
        await env.observe()
    except (RedisError, OSError):
        pass  # a node is down: what is read of it fails, the repair's poll ran before


async def move_bin_0(env: RedisClusterEnvironment, source: str, target: str) -> list:
    await env.apply(Step((RunningAction(Action("move", (0,), source, target), 0.0, 10.0),)))
    assert await env.wait_idle(WAIT_S), "the move did not end"
    return env.finished()


def test_a_move_failed_by_a_node_crash_is_repaired_once_the_node_is_back(tmp_path):
    spec = ClusterSpec(masters=2, standbys=0, appendfsync="always", node_timeout_ms=5000)
    state = tmp_path / "controller"  # the testbed in its cluster/ folder: the nodes' names
    keys = bin_keys(200)
    with RedisClusterTestbed.up(spec, state / "cluster", progress=quiet) as tb:
        node0, node1 = tb.node("node-0"), tb.node("node-1")

        async def scenario():
            for key in keys:
                await command(node0.port, "SET", key, key.encode() + PAD)
            settings = EnvSettings(seed_nodes=tuple(tb.seed_nodes()), copy_rate_bytes_per_s=60e3)
            env = RedisClusterEnvironment(state, settings)
            await env.start()
            try:
                await env.apply(
                    Step((RunningAction(Action("move", (0,), "node-0", "node-1"), 0.0, 10.0),))
                )
                deadline = time.monotonic() + WAIT_S
                while await keys_in_bin(node1.port) < len(keys) // 5:
                    assert time.monotonic() < deadline and env.running(), "the move ended"
                    await asyncio.sleep(0.02)
                await asyncio.to_thread(tb.stop_node, "node-0", True)  # SIGKILL mid-move
                assert await env.wait_idle(WAIT_S)
                (failed,) = env.finished()
                for _ in range(3):  # node-0 down: nothing can be repaired yet
                    await observe_quietly(env)
                    await asyncio.sleep(0.3)
                left_while_down = markers(tb)[node1.port]
                await asyncio.to_thread(tb.restart_node, "node-0")
                back_s = time.monotonic()
                while any(markers(tb).values()) or env.repairs.repaired_moves < 1:
                    assert time.monotonic() < back_s + WAIT_S, f"not repaired: {markers(tb)}"
                    await observe_quietly(env)
                    await asyncio.sleep(0.2)
                repaired_after_s = time.monotonic() - back_s
                router = await SlotRouter.connect(tb.seed_nodes(), 2, 5.0)
                try:
                    values = {
                        k: await router.execute(k.encode(), "GET", k, read=True) for k in keys
                    }
                finally:
                    await router.aclose()
                # repair finished the slots whose keys had reached node-1 and rolled back the
                # others: the bin, split, moves whole again
                (again,) = await move_bin_0(env, "node-1", "node-0")
                gathered = await keys_in_bin(node0.port)
                journal = MigrationJournal(state / MIGRATIONS_FILE).open_moves()
                return failed, left_while_down, repaired_after_s, values, again, gathered, journal
            finally:
                await env.close()

        failed, left_while_down, repaired_after_s, values, again, gathered, journal = asyncio.run(
            scenario()
        )
    assert not failed.ok and left_while_down  # the crash left the bin's slots open
    assert values == {k: k.encode() + PAD for k in keys}
    assert again.ok and gathered == len(keys), (again.detail, gathered)
    assert journal == {}
    print(f"repaired {repaired_after_s:.1f} s after the node was restarted")

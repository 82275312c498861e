"""``geoslo director repair`` on a real Redis Cluster (docs/director-live.md, "Repair"):
the dry run prints the repair and changes nothing, the repair then closes the open slot
and every key keeps its value; unreachable nodes are named in one-line errors."""

from __future__ import annotations

import pytest
import redis
from typer.testing import CliRunner

from geoslo.cli import app
from geoslo.live.director.rediscluster import ClusterSpec, RedisClusterTestbed, cluster_view

pytestmark = [
    pytest.mark.integration,
    pytest.mark.usefixtures("needs_redis"),
    pytest.mark.timeout(120),
]

SLOT = 3  # node-0's at start; "{bsF}" hashes to it


def geoslo(*args: str):
    return CliRunner().invoke(app, list(args))


def open_slots(testbed: RedisClusterTestbed) -> set[int]:
    slots = set()
    for _host, port in testbed.seed_nodes():
        mine = next(n for n in cluster_view(port) if "myself" in n.flags)
        slots |= {*mine.migrating, *mine.importing}
    return slots


def test_repair_command_dry_run_then_repair_then_clear_errors(tmp_path):
    spec = ClusterSpec(masters=2, standbys=0)
    with RedisClusterTestbed.up(spec, tmp_path, progress=lambda _line: None) as tb:
        node0, node1 = tb.node("node-0"), tb.node("node-1")
        keys = [f"{{bsF}}:{i}" for i in range(10)]
        with (
            redis.Redis("127.0.0.1", node0.port) as src,
            redis.Redis("127.0.0.1", node1.port) as dst,
        ):
            for key in keys:
                src.set(key, key)
            # a migration of the slot stopped after its first key (a crashed resharding)
            dst.execute_command("CLUSTER", "SETSLOT", SLOT, "IMPORTING", node0.node_id)
            src.execute_command("CLUSTER", "SETSLOT", SLOT, "MIGRATING", node1.node_id)
            src.execute_command("MIGRATE", "127.0.0.1", node1.port, keys[0], 0, 5000)
        seeds = ",".join(f"{h}:{p}" for h, p in tb.seed_nodes())

        dry = geoslo("director", "repair", "--seed-nodes", f"127.0.0.1:1,{seeds}", "--dry-run")
        assert dry.exit_code == 0, dry.output
        assert f"slot {SLOT}: finish {node0.node_id[:8]} -> {node1.node_id[:8]}" in dry.output
        assert open_slots(tb) == {SLOT}  # nothing changed

        done = geoslo("director", "repair", "--seed-nodes", seeds)
        assert done.exit_code == 0, done.output
        assert "repaired 1 slots; 9 keys moved" in done.output
        assert open_slots(tb) == set()
        with redis.Redis("127.0.0.1", node1.port) as owner:
            assert [owner.get(k) for k in keys] == [k.encode() for k in keys]

        nobody = geoslo("director", "repair", "--seed-nodes", "127.0.0.1:1")
        assert nobody.exit_code == 1
        assert "no seed node answers as a cluster node: 127.0.0.1:1:" in nobody.output
        tb.stop_node("node-1")
        down = geoslo("director", "repair", "--seed-nodes", f"127.0.0.1:{node0.port}")
        assert down.exit_code == 1
        assert f"master {node1.node_id[:8]} at 127.0.0.1:{node1.port} does not answer" in (
            down.output
        )
    bad = geoslo("director", "repair", "--seed-nodes", "localhost")
    assert bad.exit_code == 2 and "expected host:port" in bad.output

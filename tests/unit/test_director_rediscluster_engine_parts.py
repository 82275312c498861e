"""The Redis Cluster engine's pure parts: slot ranges, the node command, CLUSTER NODES,
the spec's validation and the state file (no processes)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from geoslo.errors import ConfigError
from geoslo.live.director.rediscluster import (
    SLOTS,
    SLOTS_PER_BIN,
    ClusterSpec,
    NodeInfo,
    RedisClusterTestbed,
    default_command_template,
    parse_cluster_nodes,
    render_command,
    roles_in_view,
    slot_ranges,
)


@pytest.mark.parametrize(
    ("masters", "expected"),
    [
        (1, [(0, 16383)]),
        (2, [(0, 8191), (8192, 16383)]),
        (3, [(0, 5461), (5462, 10922), (10923, 16383)]),  # redis-cli's split, too
        (128, [(128 * i, 128 * i + 127) for i in range(128)]),
    ],
)
def test_slot_ranges_split_evenly_and_contiguously(masters, expected):
    assert slot_ranges(masters) == expected


@pytest.mark.parametrize("masters", [1, 3, 5, 7, 100, 16384])
def test_slot_ranges_cover_every_slot_once_within_one_slot_of_even(masters):
    ranges = slot_ranges(masters)
    covered = [s for start, end in ranges for s in range(start, end + 1)]
    assert covered == list(range(SLOTS))
    sizes = {end - start + 1 for start, end in ranges}
    assert max(sizes) - min(sizes) <= 1


def test_a_bin_is_a_whole_number_of_slots():
    assert SLOTS % SLOTS_PER_BIN == 0 and SLOTS // SLOTS_PER_BIN == 128


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("redis-server --port {port} --dir {dir}", ["redis-server", "--port", "7001",
                                                    "--dir", "/var/x y"]),
        ("r --port {port} --cluster-port {bus_port} --dir {dir} --save ''",
         ["r", "--port", "7001", "--cluster-port", "17002", "--dir", "/var/x y", "--save", ""]),
    ],
)  # fmt: skip
def test_render_command_fills_port_dir_and_bus_port(template, expected):
    assert render_command(template, 7001, Path("/var/x y"), 17002) == expected


def test_default_command_runs_a_cluster_node_with_the_spec_persistence():
    argv = render_command(default_command_template("/usr/bin/redis-server", 1500, "always"),
                          7001, Path("/d"), 17001)  # fmt: skip
    options = dict(zip(argv[1::2], argv[2::2], strict=True))
    assert argv[0] == "/usr/bin/redis-server"
    assert options["--cluster-enabled"] == "yes" and options["--appendonly"] == "yes"
    assert options["--appendfsync"] == "always" and options["--cluster-node-timeout"] == "1500"
    assert options["--port"] == "7001" and options["--cluster-port"] == "17001"
    assert options["--dir"] == "/d" and options["--bind"] == "127.0.0.1"


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"masters": 0}, "masters"),
        ({"replicas": -1}, "replicas"),
        ({"standbys": 1.5}, "standbys"),
        ({"cpu_quota_fraction": 0.0}, "cpu_quota_fraction"),
        ({"appendfsync": "sometimes"}, "appendfsync"),
        ({"node_timeout_ms": 10}, "node_timeout_ms"),
        ({"command_template": "redis-server --port {port}"}, "command_template"),
        ({"command_template": "redis-server {port} {dir} {hostname}"}, "command_template"),
    ],
)
def test_spec_refuses_bad_values_naming_the_field(changes, field):
    with pytest.raises(ConfigError) as error:
        ClusterSpec(**changes)
    assert error.value.field == field


def test_spec_template_is_the_users_when_given():
    own = "/opt/redis/bin/redis-server /etc/redis/{port}.conf --dir {dir}"
    assert ClusterSpec(command_template=own).template("/usr/bin/redis-server") == own
    assert "--appendfsync everysec" in ClusterSpec().template("/usr/bin/redis-server")


NODES_REPLY = """\
07c3 127.0.0.1:30004@31004 slave e7d1 0 1426238317239 4 connected
67ed 127.0.0.1:30002@31002,host-b master - 0 1426238316232 2 connected 5461-10922 [5470->-e7d1]
292f 127.0.0.1:30003@31003 master - 0 1426238318243 3 connected 10923-16383 42
e7d1 127.0.0.1:30001@31001 myself,master - 0 0 1 connected 0-5460 [5470-<-67ed]
9fd3 127.0.0.1:30009@31009 master,fail - 1426238316232 0 9 disconnected
"""


def test_parse_cluster_nodes_reads_roles_slots_and_migrations():
    nodes = {n.node_id: n for n in parse_cluster_nodes(NODES_REPLY)}
    assert nodes["07c3"].master_id == "e7d1" and not nodes["07c3"].is_master
    assert nodes["67ed"].slots == ((5461, 10922),) and nodes["67ed"].port == 30002
    assert nodes["67ed"].migrating == {5470: "e7d1"}
    assert nodes["e7d1"].importing == {5470: "67ed"} and "myself" in nodes["e7d1"].flags
    assert nodes["292f"].slots == ((42, 42), (10923, 16383)) and nodes["292f"].slot_count == 5462
    assert nodes["9fd3"].failed and not nodes["292f"].failed
    assert nodes["9fd3"].link_state == "disconnected"


def test_state_file_round_trip(tmp_path):
    template = "r --port {port} --dir {dir}"
    spec = ClusterSpec(masters=2, replicas=1, standbys=0, cpu_quota_fraction=0.25,
                       appendfsync="always", command_template=template)  # fmt: skip
    record = {"name": "node-0", "host": "127.0.0.1", "port": 7001, "node_id": "ab" * 20,
              "role": "master", "pid": 1234, "bus_port": 17001, "dir": str(tmp_path / "node-0"),
              "master": None, "cgroup": "/sys/fs/cgroup/cpu/geoslo-x"}  # fmt: skip
    testbed = RedisClusterTestbed(spec, tmp_path, spec.template("r"), [record], "limited")
    testbed.save()
    loaded = RedisClusterTestbed.load(tmp_path)
    assert loaded is not None
    assert loaded.spec == spec and loaded.template == testbed.template
    assert loaded.nodes() == [NodeInfo(**record)] and loaded.cpu_limit == "limited"
    assert RedisClusterTestbed.load(tmp_path / "elsewhere") is None


def test_template_is_shell_split_like_a_command_line():
    template = default_command_template("/path with space/redis-server")
    assert render_command(template, 1, Path("/d"), 2)[0] == "/path with space/redis-server"
    assert shlex.quote("/path with space/redis-server") in template


def _node(name: str, node_id: str, role: str = "master") -> NodeInfo:
    return NodeInfo(name, "127.0.0.1", 7000, node_id, role, 1)


def test_roles_in_view_follow_the_cluster_not_the_start():
    nodes = [_node("node-0", "e7d1"), _node("node-1", "67ed"), _node("node-2", "07c3", "replica"),
             _node("node-3", "292f", "standby"), _node("node-4", "9fd3"),
             _node("node-5", "absent")]  # fmt: skip
    # 67ed serves slots now; 07c3 replicates e7d1; 292f holds slots; 9fd3 failed
    assert roles_in_view(nodes, parse_cluster_nodes(NODES_REPLY)) == {
        "node-0": ("master", None),
        "node-1": ("master", None),
        "node-2": ("replica", "node-0"),
        "node-3": ("master", None),
        "node-4": ("failed", None),
    }
    empty = parse_cluster_nodes("e7d1 127.0.0.1:30001@31001 myself,master - 0 0 1 connected\n")
    assert roles_in_view(nodes, empty) == {"node-0": ("standby", None)}

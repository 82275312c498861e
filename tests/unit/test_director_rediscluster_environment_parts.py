"""The Director's view of a Redis Cluster and its actions as cluster operations: pure
functions of ``CLUSTER NODES`` (docs/director-live.md, "The Director on Redis Cluster")."""

from __future__ import annotations

import pytest

from geoslo.control.director.types import (
    Action,
    DirectorConfig,
    RunningAction,
    ServerState,
    Step,
)
from geoslo.errors import ConfigError
from geoslo.live.director.rediscluster._actions import (
    bin_owners,
    check_director_config,
    copy_refusal,
    migration_slots,
    server_states,
    slot_ranges_of,
    slots_of_bins,
)
from geoslo.live.director.rediscluster._engine import ClusterNode
from geoslo.live.director.rediscluster._environment import RedisClusterEnvironment
from geoslo.runtime._config import parse_config
from geoslo.runtime.director import build, cluster_plan_record


def node(node_id, port, slots=(), flags=("master",), master=None) -> ClusterNode:
    return ClusterNode(node_id, "127.0.0.1", port, frozenset(flags), master, "connected", slots)


A = node("a", 7000, ((0, 8191),))
B = node("b", 7001, ((8192, 16383),))
EMPTY = node("e", 7002)
REPLICA_OF_B = node("r", 7003, flags=("slave",), master="b")
HOT = node("h", 7004, ((640, 767),))  # bin 5 alone
A_WITHOUT_5 = node("a", 7000, ((0, 639), (768, 8191)))


@pytest.mark.parametrize(
    ("bins", "ranges"),
    [
        ((0,), [(0, 127)]),
        ((1, 0), [(0, 255)]),
        ((0, 2), [(0, 127), (256, 383)]),
        ((127,), [(16256, 16383)]),
        ((), []),
    ],
)
def test_bins_become_contiguous_slot_ranges(bins, ranges):
    assert slot_ranges_of(slots_of_bins(bins)) == ranges


@pytest.mark.parametrize("bad", [-1, 128])
def test_a_bin_outside_the_cluster_is_refused(bad):
    with pytest.raises(ConfigError, match="bin"):
        slots_of_bins([bad])


@pytest.mark.parametrize(
    ("masters", "expected"),
    [
        ([A, B], {"a": tuple(range(64)), "b": tuple(range(64, 128))}),
        ([A, B, EMPTY], {"a": tuple(range(64)), "b": tuple(range(64, 128)), "e": ()}),
        # a bin split by a migration belongs to the node serving most of its slots
        (
            [node("a", 1, ((0, 8191 + 100),)), node("b", 2, ((8192 + 100, 16383),))],
            {"a": tuple(range(65)), "b": tuple(range(65, 128))},
        ),
        (
            [node("a", 1, ((0, 8191 + 64),)), node("b", 2, ((8192 + 64, 16383),))],
            {"a": tuple(range(65)), "b": tuple(range(65, 128))},  # 64 slots each: lower id
        ),
        (
            [node("a", 1, ((0, 8191 + 63),)), node("b", 2, ((8192 + 63, 16383),))],
            {"a": tuple(range(64)), "b": tuple(range(64, 128))},
        ),
    ],
)
def test_each_bin_has_one_owner(masters, expected):
    assert bin_owners(masters) == expected


def test_servers_are_masters_and_replicas_with_their_masters_bins():
    failed = node("f", 7009, flags=("master", "fail"))
    names = {"a": "node-0", "r": "server-3"}
    servers = server_states([A, B, EMPTY, REPLICA_OF_B, failed], names, hidden={"e"}, booting=["x"])
    assert servers == (
        ServerState("127.0.0.1:7001", tuple(range(64, 128))),
        ServerState("node-0", tuple(range(64))),
        ServerState("server-3", tuple(range(64, 128))),
        ServerState("x", (), False),
    )


@pytest.mark.parametrize(
    ("source", "bins", "slots"),
    [
        (A, (0,), list(range(128))),
        (A, (0, 64), list(range(128))),  # bin 64 is on B: nothing of it moves
        (A_WITHOUT_5, (4, 5, 6), list(range(512, 640)) + list(range(768, 896))),
        (EMPTY, (0,), []),
    ],
)
def test_a_move_migrates_the_slots_its_source_serves(source, bins, slots):
    action = Action("move", bins, source="s", target="t")
    assert migration_slots(action, source) == slots


@pytest.mark.parametrize(
    ("source", "target", "view", "refusal"),
    [
        (HOT, EMPTY, [A_WITHOUT_5, B, HOT, EMPTY], ""),
        (A, EMPTY, [A, B, EMPTY], "a whole master"),
        (HOT, B, [A_WITHOUT_5, B, HOT], "empty master"),
        (HOT, REPLICA_OF_B, [A_WITHOUT_5, B, HOT, REPLICA_OF_B], "empty master"),
        (HOT, EMPTY, [A_WITHOUT_5, B, HOT, EMPTY, node("s", 1, (), ("slave",), "e")], "replicas"),
        (None, EMPTY, [A, B, EMPTY], "source"),
        (HOT, None, [A_WITHOUT_5, B, HOT], "target"),
    ],
)
def test_a_copy_is_a_replica_of_a_master_holding_exactly_the_bins(source, target, view, refusal):
    action = Action("copy", (5,), source="s", target="t")
    found = copy_refusal(action, source, target, view)
    assert (refusal in found and bool(found)) if refusal else found == ""


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        (dict(replicas=1, read_fanout=1), None),
        (dict(replicas=2, read_fanout=1), "controller.replicas"),
        (dict(replicas=2, read_fanout=2), "controller.replicas"),
    ],
)
def test_the_config_must_fit_redis_cluster(fields, problem):
    config = DirectorConfig(**fields)
    if problem is None:
        check_director_config(config)
        return
    with pytest.raises(ConfigError) as error:
        check_director_config(config)
    assert error.value.field == problem


CONFIG = {
    "system": "director",
    "environment": {"kind": "redis-cluster", "seed_nodes": ["127.0.0.1:7000"], "keys": 500},
    "controller": {
        "replicas": 1,
        "read_fanout": 1,
        "steady_state": {"intercept": -11.8, "get_coefficient": 0.0055, "put_coefficient": 0.0141},
    },
}


def test_a_redis_cluster_run_config_builds_the_environment_without_starting_it():
    service = build(*_tables(CONFIG))
    assert isinstance(service.environment, RedisClusterEnvironment)
    assert service.environment.settings.seed_nodes == (("127.0.0.1", 7000),)
    assert service.environment.client is None  # nothing started
    assert len(service.controller.bin_bytes) == 128 and service.controller.bin_bytes.sum() > 0


@pytest.mark.parametrize(
    ("environment", "controller", "field"),
    [
        ({"seed_nodes": ["no-port"]}, {}, "environment.seed_nodes"),
        ({"seed_nodes": []}, {}, "environment.seed_nodes"),
        ({}, {"replicas": 2, "read_fanout": 1}, "controller.replicas"),
        ({}, {"read_fanout": 2, "replicas": 2}, "controller.replicas"),
    ],
)
def test_a_redis_cluster_run_config_is_refused_with_the_field(environment, controller, field):
    data = {
        **CONFIG,
        "environment": {**CONFIG["environment"], **environment},
        "controller": {**CONFIG["controller"], **controller},
    }
    with pytest.raises(ConfigError) as error:
        build(*_tables(data))
    assert error.value.field == field


def test_the_dry_run_record_names_the_slots_a_move_migrates():
    move = Action("move", (1, 0), source="node-1", target="node-0")
    copy = Action("copy", (5,), source="node-2", target="node-3")
    step = Step((RunningAction(move, 0.0, 1.0), RunningAction(copy, 0.0, 1.0)))
    record = cluster_plan_record(step)
    assert record["cluster_operations"] == [
        {"migrate_slots": [[0, 255]], "from": "node-1", "to": "node-0"},
        {"replicate": "node-2", "replica": "node-3"},
    ]
    assert len(record["start"]) == 2


def _tables(data):
    config = parse_config(data)
    return config.controller, config.environment, 1.0

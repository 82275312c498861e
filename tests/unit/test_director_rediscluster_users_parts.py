"""The pure parts of the Director on a user's Redis Cluster (docs/director-live.md, "On
your own cluster"): MONITOR lines to slots, commandstats to calls, per-bin rates, the p99
of a latency histogram, the move guard, the user's replicas, credentials, ``{host}``."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from redis.crc import key_slot

from geoslo.control.director.types import Action, ServerState
from geoslo.errors import ConfigError
from geoslo.live.director.rediscluster import Credentials, render_command
from geoslo.live.director.rediscluster._actions import overpacked_moves
from geoslo.live.director.rediscluster._engine import SLOTS_PER_BIN, ClusterNode
from geoslo.live.director.rediscluster._environment import (
    _fewest_replicas,
    _replicas_per_master,
)
from geoslo.live.director.rediscluster._observe import (
    BINS,
    ClusterObserver,
    ObserverSettings,
    bin_rates,
    counted_calls,
    p99_from_histograms,
    parse_monitor_line,
    parse_slot_stats,
    slot_increases,
    slot_of_request,
)
from geoslo.models import SteadyStateModel
from geoslo.runtime import load_config

FIRST_KEY = {"get": 1, "set": 1, "mget": 1, "hset": 1, "ping": 0}


@pytest.mark.parametrize(
    ("line", "args"),
    [
        (b'1700000000.123456 [0 127.0.0.1:5555] "GET" "user:7"', [b"get", b"user:7"]),
        (b'1.0 [0 127.0.0.1:1] "SET" "a\\"b" "v\\x00\\n"', [b"set", b'a"b', b"v\x00\n"]),
        (b'1.0 [0 unix:/tmp/r.sock] "mget" "{t}a" "{t}b"', [b"mget", b"{t}a", b"{t}b"]),
        (b"OK", None),
        (b'1.0 [0 lua] "GET" "k"', None),  # a script's inner call: its EVAL counted already
    ],
)
def test_a_monitor_line_becomes_its_arguments(line, args):
    assert parse_monitor_line(line) == args


@pytest.mark.parametrize(
    ("args", "slot"),
    [
        ([b"get", b"user:7"], key_slot(b"user:7")),
        ([b"mget", b"{t}a", b"{t}b"], key_slot(b"t")),  # hash tags as the cluster hashes
        ([b"ping"], None),
        ([b"get"], None),  # malformed: no key where COMMAND INFO says
        ([b"flushall"], None),  # not a counted command
    ],
)
def test_a_request_is_hashed_to_its_first_keys_slot(args, slot):
    assert slot_of_request(args, FIRST_KEY) == slot


def test_commandstats_count_only_the_users_keyed_reads_and_writes():
    stats = {
        "cmdstat_get": {"calls": 10},
        "cmdstat_set": {"calls": 4},
        "cmdstat_migrate": {"calls": 100},  # a move's own traffic: not counted
        "cmdstat_info": {"calls": 7},
    }
    assert counted_calls(stats, frozenset({"get"}), frozenset({"set"})) == (10, 4)


def test_a_nodes_calls_follow_its_sampled_slots_or_else_its_slots_evenly():
    hot_slot = 5 * SLOTS_PER_BIN + 3
    samples = {"a": Counter({hot_slot: 30, 0: 10}), "b": Counter({7 * SLOTS_PER_BIN: 2})}
    fallback = {"a": {0: 1.0, 5: 1.0}, "b": {7: 1.0, 8: 3.0}}
    rates = bin_rates({"a": 400.0, "b": 100.0}, samples, fallback, 2.0, min_samples=20)
    assert rates.shape == (BINS,)
    assert rates[5] == pytest.approx(150.0) and rates[0] == pytest.approx(50.0)
    # b: 2 samples < 20: its calls spread by the fallback weights (1:3)
    assert rates[7] == pytest.approx(12.5) and rates[8] == pytest.approx(37.5)
    assert rates.sum() == pytest.approx(250.0)  # every call counted once


def test_slot_stats_replies_parse_flat_or_as_maps_and_say_none_without_the_counters():
    flat = [
        [0, [b"key-count", 3, b"network-bytes-out", 700]],
        [5, [b"key-count", 1, b"network-bytes-out", 9]],
    ]
    as_maps = [
        {0: {"key-count": 3, "network-bytes-out": 700}},
        {5: {"key-count": 1, "network-bytes-out": 9}},
    ]
    for reply in (flat, as_maps):
        assert parse_slot_stats(reply, ["network-bytes-out"]) == {
            "network-bytes-out": {0: 700, 5: 9}
        }
    # cluster-slot-stats-enabled no: key counts only, so no spread can come from it
    assert parse_slot_stats([[0, [b"key-count", 3]]], ["network-bytes-out"]) is None


def test_a_slots_increase_counts_from_zero_after_its_counter_went_back():
    increases = slot_increases({1: 100, 2: 50, 3: 7}, {1: 160, 2: 20, 3: 7, 4: 5})
    # slot 2 restarted (20 < 50): its 20 since; slot 3 did not move; slot 4 is new
    assert increases == Counter({1: 60, 2: 20, 4: 5})


def test_the_p99_of_a_histogram_is_the_bucket_that_holds_it():
    assert p99_from_histograms({8: 98, 16: 1, 1024: 1}) == pytest.approx(0.016)
    assert p99_from_histograms({8: 10, 2048: 90}) == pytest.approx(2.048)
    assert np.isnan(p99_from_histograms({}))


# capacity: -3 + 0.01 * rate < logit(0.5) = 0 -> 300 req/s a server
MODEL = SteadyStateModel(-3.0, 0.01, 0.01)


def _rates(**per_bin: float) -> tuple[np.ndarray, np.ndarray]:
    get = np.zeros(BINS)
    for name, rate in per_bin.items():
        get[int(name[1:])] = rate
    return get, np.zeros(BINS)


@pytest.mark.parametrize(
    ("moves", "refused"),
    [
        # the outside check's plan: everything onto one master, 3 x 150 req/s observed
        ([("b", "a", (1,)), ("c", "a", (2,))], {("c", "a", (2,))}),
        ([("b", "a", (1,))], set()),  # 280 req/s: under the boundary
        ([("c", "d", (2,))], set()),  # onto an empty server: fine
        # in order, cumulative: the third would make 420 req/s
        ([("a", "d", (0,)), ("b", "d", (1,)), ("c", "d", (2,))], {("c", "d", (2,))}),
    ],
)
def test_the_guard_refuses_moves_that_pack_more_than_the_model_allows(moves, refused):
    servers = (
        ServerState("a", (0,)),
        ServerState("b", (1,)),
        ServerState("c", (2,)),
        ServerState("d", ()),
    )
    get, put = _rates(b0=140.0, b1=140.0, b2=140.0)
    actions = [Action("move", bins, source=s, target=t) for s, t, bins in moves]
    out = overpacked_moves(actions, servers, get, put, MODEL)
    assert {(a.source, a.target, a.bins) for a in out} == refused
    for reason in out.values():
        assert "P(violation)" in reason


def test_the_guard_refuses_a_move_onto_an_already_overloaded_master():
    servers = (ServerState("a", (0,)), ServerState("b", (1,)))
    get, put = _rates(b0=400.0, b1=0.0)
    move = Action("move", (1,), source="b", target="a")
    assert move in overpacked_moves([move], servers, get, put, MODEL)


def test_the_guard_lets_a_bin_too_hot_for_any_server_move_alone_to_an_empty_one():
    """§6.2: the hot bin is isolated on an empty server, then copied; a second bin
    joining it there is refused."""
    servers = (ServerState("a", (0, 1)), ServerState("d", ()))
    get, put = _rates(b0=400.0, b1=10.0)
    alone = Action("move", (0,), source="a", target="d")
    joined = Action("move", (1,), source="a", target="d")
    assert overpacked_moves([alone], servers, get, put, MODEL) == {}
    assert joined in overpacked_moves([alone, joined], servers, get, put, MODEL)


def _node(node_id: str, master: str | None = None, slots=(), failed=False) -> ClusterNode:
    flags = {"master"} if master is None else {"slave"}
    if failed:
        flags.add("fail")
    return ClusterNode(node_id, "10.0.0.1", 7000, frozenset(flags), master, "connected", slots)


def test_a_new_master_gets_as_many_replicas_as_the_fewest_of_its_peers():
    view = [
        _node("m1", slots=((0, 99),)),
        _node("m2", slots=((100, 199),)),
        _node("empty"),
        _node("r1", "m1"),
        _node("r2", "m2"),
        _node("r3", "m2"),
        _node("mine", "m1"),  # a copy of the Director's: not the user's
    ]
    users = {"r1", "r2", "r3"}
    assert _replicas_per_master(view, users) == 1
    assert _replicas_per_master(view, set()) == 0
    # a released master's user replica goes to the serving master with the fewest
    assert _fewest_replicas(view, exclude="m2").node_id == "m1"
    assert _fewest_replicas([_node("m1", slots=((0, 1),))], exclude="m1") is None


def test_credentials_reach_redis_py_and_refuse_a_user_without_password():
    kwargs = Credentials(username="director", password="s3cret").redis_kwargs()
    assert kwargs == {"username": "director", "password": "s3cret"}
    tls = Credentials(tls=True, tls_ca_file="/ca.pem").connection_kwargs()
    assert tls["ssl_ca_certs"] == "/ca.pem" and "ssl" not in tls
    with pytest.raises(ConfigError, match="password"):
        Credentials(username="director")


def test_the_command_template_places_the_node_on_host():
    args = render_command(
        "run-on {host} redis-server --port {port}", 7001, Path("/d"), 17001, "10.0.0.9"
    )
    assert args == ["run-on", "10.0.0.9", "redis-server", "--port", "7001"]


USERS = """
system = "director"
[environment]
kind = "redis-cluster"
seed_nodes = ["127.0.0.1:7000"]
{extra}
[controller]
replicas = 1
read_fanout = 1
[controller.steady_state]
intercept = -11.8
get_coefficient = 0.0055
put_coefficient = 0.0141
"""


def _build(tmp_path, extra: str):
    from geoslo.runtime.director import build

    path = tmp_path / "c.toml"
    path.write_text(USERS.format(extra=extra))
    config = load_config(path)
    return build(config.controller, config.environment, 1.0)


def test_on_a_users_cluster_the_load_is_none_and_a_synthetic_one_is_refused(tmp_path):
    service = _build(tmp_path, "")
    env = service.environment
    assert env.load is None and env.settings.guard_model is not None
    with pytest.raises(ConfigError, match="load"):
        _build(tmp_path, 'load = "flash-crowd"')


def test_the_password_comes_from_the_named_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("GEOSLO_TEST_REDIS_PASSWORD", "pw")
    env = _build(tmp_path, 'username = "u"\npassword_env = "GEOSLO_TEST_REDIS_PASSWORD"')
    assert env.environment.settings.credentials.password == "pw"
    monkeypatch.delenv("GEOSLO_TEST_REDIS_PASSWORD")
    with pytest.raises(ConfigError, match="GEOSLO_TEST_REDIS_PASSWORD"):
        _build(tmp_path, 'password_env = "GEOSLO_TEST_REDIS_PASSWORD"')


class _SwallowingLink:
    """A MONITOR window that takes a cancel for its own end (as redis-py's timed read can
    when the two coincide)."""

    async def monitor(self, node, window_s: float) -> list[bytes]:
        try:
            await asyncio.sleep(window_s)
        except asyncio.CancelledError:
            pass
        return []


def test_closing_the_observer_ends_its_monitor_windows_even_if_a_cancel_is_swallowed():
    async def scenario() -> None:
        settings = ObserverSettings(period_s=1.0, monitor_window_s=0.05, monitor_every_s=0.05)
        observer = ClusterObserver(settings, _SwallowingLink())
        observer._view = [_node("m1", slots=((0, 9),))]
        observer._sampler = asyncio.create_task(observer._sample_forever())
        await asyncio.sleep(0.2)
        await asyncio.wait_for(observer.aclose(), timeout=5.0)
        assert observer.sample_windows >= 1

    asyncio.run(scenario())

"""The cluster client and open-loop load on a real Redis Cluster: rates issued and sampled
per bin, reads from replicas when asked, MOVED followed after a slot moves
(docs/director-live.md, "Load and statistics on the cluster")."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import redis
from redis.crc import key_slot
from scipy.stats import binom

from geoslo.errors import DependencyError
from geoslo.live._backend import key_name
from geoslo.live._processes import find_program
from geoslo.live.director import LoadSpec
from geoslo.live.director.rediscluster import (
    BINS,
    BenchSettings,
    ClientConfig,
    ClusterSpec,
    RedisClusterClient,
    RedisClusterTestbed,
    bin_of_key,
    copy_benchmark,
    preload_keys,
    replay_cluster_load,
    steady_state_benchmark,
)
from geoslo.workload import RateTrace

pytestmark = [
    pytest.mark.integration,
    pytest.mark.usefixtures("needs_redis"),
    pytest.mark.timeout(150),
]

KEYS, VALUE_BYTES = 2_000, 256


@pytest.fixture(scope="module")
def testbed(tmp_path_factory):
    """3 masters with one replica each: started once for the module."""
    try:  # the function-scoped needs_redis fixture cannot guard a module-scoped one
        find_program("redis-server", "redis-server", install=False)
    except DependencyError as error:
        pytest.skip(f"redis-server is not available: {error}")
    spec = ClusterSpec(masters=3, replicas=1, standbys=0)
    with RedisClusterTestbed.up(spec, tmp_path_factory.mktemp("rc-load")) as tb:
        asyncio.run(_preload(tb))
        yield tb


async def _preload(tb) -> None:
    async with await RedisClusterClient.connect(tb.seed_nodes()) as client:
        await preload_keys(client, KEYS, VALUE_BYTES)


def admin(node) -> redis.Redis:
    return redis.Redis(host=node.host, port=node.port, socket_timeout=10)


def test_a_key_bin_is_the_bin_of_the_slot_the_cluster_computes(testbed):
    node = testbed.nodes()[0]
    with admin(node) as r:
        for key in [key_name(i) for i in range(0, 400, 7)] + [b"{user}.a", b"{}x"]:
            assert r.execute_command("CLUSTER", "KEYSLOT", key) == key_slot(key)
            assert bin_of_key(key) == key_slot(key) * BINS // 16384


def test_a_fixed_rate_load_is_issued_on_time_and_sampled_per_bin(testbed):
    """600 req/s for 4 s, 80% gets: the rate issued is within 15%; summed over the periods,
    each bin's sample count is within the 1e-6 binomial quantiles of what was sent to it
    (so none where nothing was sent), and the total within 5 sigma. Gets are sampled at
    20%, not §5.5's 2%, so that a few seconds of load tell a wrong fraction apart."""
    rate_rps, duration_s, period_s, get_fraction = 600.0, 4.0, 1.0, 0.2
    config = ClientConfig(period_s=period_s, get_sample_fraction=get_fraction, seed=5)

    async def run():
        async with await RedisClusterClient.connect(testbed.seed_nodes(), config) as client:
            spec = LoadSpec(RateTrace(np.full(4, rate_rps)), 0.8, max_duration_s=duration_s, seed=9)
            result = await replay_cluster_load(client, spec, KEYS, VALUE_BYTES)
            await asyncio.sleep(period_s)  # the last period ends
            return result, client.collect()

    result, periods = asyncio.run(run())
    assert result.ok.all(), result.extra["errors"]
    assert result.extra["issued_rps"] == pytest.approx(rate_rps, rel=0.15)
    gets_sent = np.bincount(result.bin[~result.is_put], minlength=BINS)
    puts_sent = np.bincount(result.bin[result.is_put], minlength=BINS)
    gets_est = sum(p.get_rps for p in periods) * period_s
    puts_est = sum(p.put_rps for p in periods) * period_s
    for sent, estimate, fraction in (
        (gets_sent, gets_est, get_fraction),
        (puts_sent, puts_est, 0.4),
    ):
        samples = np.rint(estimate * fraction)
        lo, hi = binom.ppf(1e-6, sent, fraction), binom.ppf(1 - 1e-6, sent, fraction)
        assert np.all((lo <= samples) & (samples <= hi)), np.flatnonzero(samples > hi)
        sigma = np.sqrt(sent.sum() * fraction * (1 - fraction)) / fraction
        assert abs(estimate.sum() - sent.sum()) <= 5 * sigma
    assert sum(p.gets for p in periods) == gets_sent.sum()
    assert sum(p.puts for p in periods) == puts_sent.sum()
    assert sum(sum(p.server_requests.values()) for p in periods) == result.requests
    masters = {f"{n.host}:{n.port}" for n in testbed.nodes() if n.role == "master"}
    assert set().union(*(p.server_requests for p in periods)) == masters
    busy = [p for p in periods if p.gets]
    assert all(0 < p.get_p99_ms < 1000 for p in busy) and busy


def _get_calls(node) -> int:
    with admin(node) as r:
        return int(r.info("commandstats").get("cmdstat_get", {}).get("calls", 0))


@pytest.mark.parametrize("from_replicas", [False, True])
def test_gets_reach_the_replicas_only_when_asked(testbed, from_replicas):
    replicas = [n for n in testbed.nodes() if n.role == "replica"]
    before = sum(_get_calls(n) for n in replicas)

    async def run():
        config = ClientConfig(read_from_replicas=from_replicas)
        async with await RedisClusterClient.connect(testbed.seed_nodes(), config) as client:
            replies = [await client.get(key_name(i)) for i in range(300)]
        return replies

    replies = asyncio.run(run())
    assert all(r.ok and r.value is not None for r in replies)
    served = sum(_get_calls(n) for n in replicas) - before
    if from_replicas:  # round robin over a shard's master and replica: about half
        assert 60 <= served <= 240, served
    else:
        assert served == 0


def _move_slot(testbed, slot: int) -> tuple[str, str]:
    """Move ``slot`` to another master the way the specification orders it (IMPORTING,
    MIGRATING, MIGRATE the keys, SETSLOT NODE everywhere), by direct commands."""
    masters = [n for n in testbed.nodes() if n.role == "master"]
    ids = {n.name: n for n in masters}
    with admin(masters[0]) as r:
        owner_port = next(
            port
            for lo, hi, (_, port, *_), *_ in r.execute_command("CLUSTER", "SLOTS")
            if lo <= slot <= hi
        )
    source = next(n for n in masters if n.port == owner_port)
    target = next(n for n in masters if n is not source)
    with admin(source) as src, admin(target) as dst:
        dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source.node_id)
        src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target.node_id)
        while keys := src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100):
            src.execute_command("MIGRATE", target.host, target.port, "", 0, 5000, "KEYS", *keys)
        for node in [target, source, *(n for n in ids.values() if n not in (source, target))]:
            with admin(node) as r:
                r.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target.node_id)
    return f"{source.host}:{source.port}", f"{target.host}:{target.port}"


def test_a_moved_slot_is_followed_and_the_slot_map_updated(testbed):
    key = key_name(17)
    slot = key_slot(key)

    async def run():
        async with await RedisClusterClient.connect(testbed.seed_nodes()) as client:
            assert (await client.put(key, b"before")).ok
            before = client.cluster.get_node_from_key(key).name
            old, new = await asyncio.to_thread(_move_slot, testbed, slot)
            assert before == old
            reply = await client.get(key)  # the old owner answers MOVED
            return before, old, new, reply, client.cluster.get_node_from_key(key).name

    before, old, new, reply, after = asyncio.run(run())
    assert reply.ok and reply.value == b"before"
    assert after == new != old


def test_the_benchmarks_find_a_crossing_and_a_copy_rate_factor(tmp_path):
    """Short runs of both §5.4 benchmarks on their own clusters: a threshold below any
    latency is crossed at the first rate and the mix stops there; an unloaded copy at
    1 MB/s runs at about that rate (the pacing holds it; margins for a busy machine)."""
    settings = BenchSettings(keys=500, value_bytes=512, duration_s=1.0, threshold_ms=0.001)
    (mix,) = steady_state_benchmark(tmp_path / "steady", [0.9], [100.0, 200.0], settings)
    assert mix.crossing_rps == 100.0 and mix.rates_rps.tolist() == [100.0]
    assert mix.exceeded.tolist() == [True] and mix.p99_ms[0] > 0
    copies = copy_benchmark(tmp_path / "copy", [1e6], [0.0], [0.0], 500_000, settings)
    assert copies.specified_bytes_per_s.tolist() == [1e6]
    assert 0.5 < copies.factor[0] < 1.1, copies.factor

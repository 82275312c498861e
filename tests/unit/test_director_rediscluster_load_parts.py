"""Pure parts of the Redis Cluster load: bins of keys, sampling, per-period aggregation,
the open-loop scheduler (docs/director-live.md, "Load and statistics on the cluster")."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest
from redis.exceptions import RedisClusterException

from geoslo.errors import ConfigError
from geoslo.live._backend import key_name
from geoslo.live.director._loadgen import LoadSpec, open_loop
from geoslo.live.director.rediscluster import (
    BINS,
    SLOTS_PER_BIN,
    ClientConfig,
    SlotRouter,
    bin_of_key,
    bin_of_slot,
    cluster_workload_stats,
    slots_of_bin,
)
from geoslo.workload import RateTrace


@pytest.mark.parametrize(
    ("key", "slot"),
    [
        # CLUSTER KEYSLOT on redis-server 7.0 gives these
        (b"foo", 12182),
        (b"bar", 5061),
        (b"hello", 866),
        (b"somekey", 11058),
        (b"{foo}.anything", 12182),  # a hash tag: only "foo" is hashed
        (b"{}foo", 9500),  # an empty tag hashes the whole key
    ],
)
def test_a_key_falls_in_the_bin_of_its_hash_slot(key, slot):
    assert BINS == 16384 // SLOTS_PER_BIN
    assert bin_of_key(key) == slot // SLOTS_PER_BIN == bin_of_slot(slot)


def test_bins_are_contiguous_slot_ranges_covering_every_slot():
    covered = [s for b in range(BINS) for s in slots_of_bin(b)]
    assert covered == list(range(16384))
    assert all(bin_of_slot(s) == b for b in (0, 7, BINS - 1) for s in slots_of_bin(b))


@pytest.mark.parametrize(
    ("call", "value"), [(bin_of_slot, 16384), (bin_of_slot, -1), (slots_of_bin, BINS)]
)
def test_out_of_range_slots_and_bins_are_refused(call, value):
    with pytest.raises(ConfigError):
        call(value)


def stats(period_s: float = 20.0, seed: int = 0):
    return cluster_workload_stats(period_s, 0.02, 0.4, 100.0, seed, failed_ms=5000.0)


@pytest.mark.parametrize(("gets_per_bin", "puts_per_bin"), [(40_000, 4_000), (10_000, 1_000)])
def test_sampled_rates_estimate_the_requests_sent_to_each_bin(gets_per_bin, puts_per_bin):
    """2% of gets, 40% of puts (§5.5): the rate estimate of each bin is within a few
    standard deviations of the truth (binomial; margin 5 sigma)."""
    period_s = 20.0
    s = stats(period_s, seed=3)
    loaded = [0, 5, BINS - 1]
    for b in loaded:
        for k in range(gets_per_bin):
            s.record_get(b, 1.0, True, now_s=k * period_s / gets_per_bin)
        for k in range(puts_per_bin):
            s.record_put(b, now_s=k * period_s / puts_per_bin, latency_ms=2.0)
    (period,) = s.collect(now_s=period_s)
    for b, rate_rps, sent, fraction in [
        *((b, period.get_rps[b], gets_per_bin, 0.02) for b in loaded),
        *((b, period.put_rps[b], puts_per_bin, 0.4) for b in loaded),
    ]:
        sigma = np.sqrt(sent * fraction * (1 - fraction)) / fraction / period_s
        assert abs(rate_rps - sent / period_s) < 5 * sigma, (b, rate_rps)
    others = np.setdiff1d(np.arange(BINS), loaded)
    assert not period.get_rps[others].any() and not period.put_rps[others].any()


def test_sampling_is_seeded():
    def run(seed):
        s = stats(seed=seed)
        for k in range(5_000):
            s.record_get(k % BINS, 1.0, True, now_s=0.0)
        return s.collect(now_s=20.0)[0].get_rps

    assert np.array_equal(run(1), run(1)) and not np.array_equal(run(1), run(2))


def test_per_key_requests_aggregate_into_their_bins():
    """Requests to keys k:0..k:1999, 50 gets each: every bin's estimate is within 5 sigma
    (binomial sampling) of the gets its keys received."""
    s = stats()
    keys = [key_name(i) for i in range(2000)]
    for _ in range(50):
        for key in keys:
            s.record_get(bin_of_key(key), 1.0, True, now_s=1.0)
    (period,) = s.collect(now_s=20.0)
    truth = np.bincount([bin_of_key(k) for k in keys], minlength=BINS) * 50 / 20.0
    sigma = np.sqrt(truth * 20.0 * 0.02 * 0.98) / 0.02 / 20.0
    assert np.all(np.abs(period.get_rps - truth) <= 5 * sigma + 1e-9)
    assert period.get_rps.sum() == pytest.approx(truth.sum(), rel=0.05)


@pytest.mark.parametrize(
    ("put_ms", "failed_puts", "p99_ms"),
    [
        ([1.0] * 99 + [50.0], 0, 50.0),
        ([1.0] * 100, 0, 1.0),
        ([1.0] * 98, 2, 5000.0),  # a failed put counts as the timeout
        ([], 0, float("nan")),
    ],
)
def test_the_period_keeps_the_p99_of_puts(put_ms, failed_puts, p99_ms):
    s = stats()
    for ms in put_ms:
        s.record_put(0, now_s=1.0, latency_ms=ms)
    for _ in range(failed_puts):
        s.record_put(0, now_s=1.0, latency_ms=5000.0, ok=False)
    (period,) = s.collect(now_s=20.0)
    assert (period.puts, period.failed_puts) == (len(put_ms) + failed_puts, failed_puts)
    assert period.put_p99_ms == pytest.approx(p99_ms, nan_ok=True)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("get_sample_fraction", 0.0),
        ("put_sample_fraction", 1.5),
        ("period_s", 0.0),
        ("request_timeout_s", -1.0),
        ("connections_per_node", 0),
    ],
)
def test_client_config_rejects_bad_values_naming_the_field(field, value):
    with pytest.raises(ConfigError) as error:
        ClientConfig(**{field: value})
    assert error.value.field == field


def test_client_config_defaults_follow_the_paper():
    config = ClientConfig()
    assert (config.get_sample_fraction, config.put_sample_fraction) == (0.02, 0.4)
    assert (config.period_s, config.latency_threshold_ms) == (20.0, 100.0)


def test_open_loop_sends_on_time_whether_or_not_earlier_requests_returned():
    """Every request takes 1 s; 200 arrivals in 0.4 s still all leave within that time."""
    times = np.linspace(0.0, 0.4, 200)
    spec = LoadSpec(RateTrace(np.array([500.0])), max_duration_s=1.0)

    async def send(k, latency_ms, ok):
        started = time.perf_counter()
        await asyncio.sleep(1.0)
        latency_ms[k], ok[k] = (time.perf_counter() - started) * 1e3, True

    result = asyncio.run(open_loop(times, spec, send))
    assert result.requests == 200 and result.ok.all()
    assert result.issue_s[-1] < 0.4 + 0.5  # not 200 s: nothing waited for a reply
    assert result.max_late_ms < 500.0
    assert np.all(result.latency_ms >= 990.0)


def _slots_reply(*shards):
    """A ``CLUSTER SLOTS`` reply: (start, end, [host, port, id], replicas...) per range."""
    return [
        [start, end, *([host.encode(), port, b"id"] for host, port in nodes)]
        for start, end, nodes in shards
    ]


def test_the_router_maps_every_slot_and_reads_round_robin_over_a_shard():
    router = SlotRouter([("127.0.0.1", 7000)], 4, 1.0, read_from_replicas=True)
    reply = _slots_reply(
        (0, 8191, [("10.0.0.1", 7000), ("10.0.0.2", 7001)]),
        (8192, 16383, [("10.0.0.3", 7002)]),
    )
    router._load(reply, asked="127.0.0.1:7000")
    low, high = b"k:3", b"k:0"  # slots 2,036 and 14,231
    assert (router.master_of(low), router.master_of(high)) == ("10.0.0.1:7000", "10.0.0.3:7002")
    reads = {router._target(2036, read=True) for _ in range(4)}
    assert reads == {"10.0.0.1:7000", "10.0.0.2:7001"}
    assert {router._target(2036, read=False) for _ in range(4)} == {"10.0.0.1:7000"}
    assert {router._target(14231, read=True) for _ in range(4)} == {"10.0.0.3:7002"}


def test_the_router_names_a_node_without_an_address_by_the_one_asked():
    """A one-node cluster's node reports host "" in CLUSTER SLOTS."""
    router = SlotRouter([("127.0.0.1", 7000)], 4, 1.0)
    router._load(_slots_reply((0, 16383, [("", 7000)])), asked="127.0.0.1:7000")
    assert router.master_of(b"k:1") == "127.0.0.1:7000"


def test_a_slot_no_node_serves_is_an_error_not_a_guess():
    router = SlotRouter([("127.0.0.1", 7000)], 4, 1.0)
    router._load(_slots_reply((0, 100, [("10.0.0.1", 7000)])), asked="127.0.0.1:7000")
    with pytest.raises(RedisClusterException, match="not served"):
        router.master_of(b"k:0")

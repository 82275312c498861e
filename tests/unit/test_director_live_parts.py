"""Pure parts of the live Director cluster: bins, layout, router, versions, throttle,
sampling (no processes)."""

from __future__ import annotations

import numpy as np
import pytest

import geoslo.live.director as live_director
from geoslo.errors import ConfigError
from geoslo.live.director import (
    CLIENT_SLOTS,
    BinLayout,
    ClusterConfig,
    Router,
    VersionClock,
    WorkloadStats,
    batch_key_count,
    decode_value,
    encode_value,
    initial_placement,
    pace_delay_s,
    rates_from_samples,
    should_write,
    version_of,
)


def test_exports_the_cluster_and_its_parts():
    assert {"DirectorCluster", "ClusterConfig", "LoadSpec", "replay_load"} <= set(
        live_director.__all__
    )
    assert all(hasattr(live_director, name) for name in live_director.__all__)


@pytest.mark.parametrize(("keys", "bins"), [(10, 3), (100, 100), (1000, 7), (10_000, 100)])
def test_bins_are_contiguous_ranges_covering_every_key_once(keys, bins):
    layout = BinLayout(keys, bins)
    ranges = [layout.indices(b) for b in range(bins)]
    assert ranges[0].start == 0 and ranges[-1].stop == keys
    assert all(a.stop == b.start for a, b in zip(ranges, ranges[1:], strict=False))
    for b, indices in enumerate(ranges):
        assert all(layout.bin_of(i) == b for i in indices)
    sizes = [layout.size(b) for b in range(bins)]
    assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize(("bins", "servers", "replicas"), [(8, 4, 2), (10, 3, 2), (7, 5, 3)])
def test_initial_placement_spreads_distinct_replicas_evenly(bins, servers, replicas):
    placement = initial_placement(bins, servers, replicas)
    assert all(len(set(holders)) == replicas for holders in placement)
    load = np.bincount(np.concatenate(placement), minlength=servers)
    assert load.max() - load.min() <= 1


def router_with(replicas_of_bin0: list[str], fanout: int = 2) -> Router:
    router = Router(bins=2, read_fanout=fanout)
    for name in replicas_of_bin0:
        router.add_replica(0, name)
    return router


def test_gets_go_to_every_replica_while_the_bin_has_exactly_fanout():
    router = router_with(["a", "b"])
    rng = np.random.default_rng(0)
    assert all(sorted(router.read_choice(0, rng)) == ["a", "b"] for _ in range(20))
    assert router.read_share(0) == 1.0


def test_extra_replicas_of_a_hot_bin_share_its_gets():
    router = router_with(["a", "b", "c", "d"])
    rng = np.random.default_rng(1)
    counts = {name: 0 for name in "abcd"}
    draws = 4000
    for _ in range(draws):
        chosen = router.read_choice(0, rng)
        assert len(set(chosen)) == 2
        for name in chosen:
            counts[name] += 1
    assert router.read_share(0) == 0.5
    for count in counts.values():
        assert count / draws == pytest.approx(0.5, abs=0.04)


def test_copy_targets_get_writes_not_reads_until_they_join():
    router = router_with(["a", "b"])
    router.add_copy_target(0, "c")
    assert router.write_set(0) == ("a", "b", "c")
    assert "c" not in router.read_choice(0, np.random.default_rng(0))
    assert router.bins_of("c") == () and router.holds_anything("c")
    router.add_replica(0, "c")
    assert router.replicas(0) == ("a", "b", "c") and router.copy_targets(0) == ()


def test_a_dead_server_leaves_every_set():
    router = router_with(["a", "b"])
    router.add_replica(1, "a")
    router.add_copy_target(1, "b")
    assert router.drop_server("a") == [0, 1]
    assert router.replicas(0) == ("b",) and router.replicas(1) == ()
    router.drop_server("b")
    assert not router.holds_anything("b")


def test_puts_in_flight_are_a_snapshot_per_bin():
    router = router_with(["a"])
    router.begin_put(0, "t1")
    router.begin_put(1, "t2")
    assert router.puts_in_flight([0]) == ["t1"]
    router.end_put(0, "t1")
    assert router.puts_in_flight([0, 1]) == ["t2"]


@pytest.mark.parametrize(
    ("current", "incoming", "write"),
    [
        (None, (1, b"x"), True),
        ((1, b"x"), (2, b"y"), True),
        ((2, b"y"), (1, b"x"), False),
        ((2, b"y"), (2, b"y"), False),
        ((9, b"a"), (10, b"b"), True),  # numeric, not lexicographic
    ],
)
def test_a_write_applies_only_if_newer(current, incoming, write):
    stored = None if current is None else encode_value(*current)
    assert should_write(stored, encode_value(*incoming)) is write


def test_versions_of_different_clients_never_collide_and_follow_the_ticks():
    versions = {version_of(tick, client) for tick in (1, 2, 3) for client in (0, 1, 7)}
    assert len(versions) == 9
    assert max(version_of(1, c) for c in range(CLIENT_SLOTS)) < version_of(2, 0)


@pytest.mark.parametrize("client_id", [-1, CLIENT_SLOTS])
def test_a_client_id_outside_the_slots_is_refused(client_id):
    with pytest.raises(ConfigError) as error:
        version_of(1, client_id)
    assert error.value.field == "client_id"


def test_the_version_clock_never_repeats_and_keeps_up_with_the_wall_clock():
    clock = VersionClock()
    ticks = [clock.next_tick(now_ms) for now_ms in (100, 100, 100, 50, 200)]
    assert ticks == [100, 101, 102, 103, 200]
    year_2200_ms = 7_258_118_400_000
    assert version_of(year_2200_ms, CLIENT_SLOTS - 1) < 2**53  # exact in the servers' Lua


def test_values_round_trip_with_colons_in_the_payload():
    assert decode_value(encode_value(42, b"a:b:c")) == (42, b"a:b:c")


@pytest.mark.parametrize(
    ("sent_bytes", "elapsed_s", "rate_bytes_per_s", "delay_s"),
    [(4e6, 0.5, 4e6, 0.5), (1e6, 0.25, 4e6, 0.0), (0.0, 0.0, 1.0, 0.0), (2e5, 1.0, 1e5, 1.0)],
)
def test_the_throttle_waits_until_the_bytes_sent_match_the_rate(
    sent_bytes, elapsed_s, rate_bytes_per_s, delay_s
):
    assert pace_delay_s(sent_bytes, elapsed_s, rate_bytes_per_s) == pytest.approx(delay_s)


def test_a_copy_paced_batch_by_batch_takes_size_over_rate():
    size_bytes, batch_bytes, rate = 1_000_000, 65_536, 4e6
    now_s, sent = 0.0, 0
    while sent < size_bytes:
        sent += min(batch_bytes, size_bytes - sent)
        now_s += pace_delay_s(sent, now_s, rate)
    assert now_s == pytest.approx(size_bytes / rate)


def test_batches_hold_at_least_one_key():
    assert batch_key_count(65_536, 258) == 254
    assert batch_key_count(10, 258) == 1


def test_sampled_counts_become_rates():
    rates = rates_from_samples(np.array([4, 0, 8]), sample_fraction=0.02, period_s=20.0)
    assert rates.tolist() == [10.0, 0.0, 20.0]


def test_statistics_estimate_rates_and_roll_periods():
    stats = WorkloadStats(
        bins=2,
        period_s=10.0,
        get_sample_fraction=0.02,
        put_sample_fraction=0.4,
        threshold_ms=100.0,
        seed=0,
    )
    gets_per_s, puts_per_s = 5000, 200  # all in bin 1
    for k in range(gets_per_s * 10):
        stats.record_get(1, latency_ms=150.0 if k % 200 == 0 else 5.0, ok=True, now_s=k / 5000)
    for k in range(puts_per_s * 10):
        stats.record_put(1, now_s=k / puts_per_s)
    stats.record_server("server-0", now_s=9.0)
    assert stats.collect(now_s=9.99) == []
    (period,) = stats.collect(now_s=10.0)
    assert period.get_rps[0] == 0 and period.put_rps[0] == 0
    assert period.get_rps[1] == pytest.approx(gets_per_s, rel=0.1)
    assert period.put_rps[1] == pytest.approx(puts_per_s, rel=0.1)
    assert period.gets == 50_000 and period.over_threshold_fraction == pytest.approx(0.005)
    assert period.get_p99_ms == pytest.approx(5.0)
    assert period.server_requests == {"server-0": 1}
    assert stats.collect(now_s=35.0)[-1].start_s == 20.0  # empty periods still come


def test_failed_gets_count_in_the_p99_as_the_timeout():
    stats = WorkloadStats(2, 10.0, 0.02, 0.4, 100.0, seed=0, failed_get_ms=5000.0)
    for k in range(100):
        stats.record_get(0, latency_ms=5.0, ok=k >= 2, now_s=k / 100)
    (period,) = stats.collect(now_s=10.0)
    assert period.failed_gets == 2 and period.over_threshold_fraction == pytest.approx(0.02)
    assert period.get_p99_ms == 5000.0


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("replicas", 5),
        ("read_fanout", 3),
        ("bins", 20_000),
        ("get_sample_fraction", 1.5),
        ("copy_rate_bytes_per_s", 0),
        ("boot_delay_s", -1),
        ("servers", 0),
        ("request_timeout_s", 0),
    ],
)
def test_config_rejects_bad_values_naming_the_field(field, value):
    with pytest.raises(ConfigError) as error:
        ClusterConfig(**{field: value})
    assert error.value.field == field


def test_config_defaults_follow_the_paper():
    config = ClusterConfig()
    assert (config.period_s, config.copy_rate_bytes_per_s, config.standbys) == (20.0, 4e6, 2)
    assert (config.get_sample_fraction, config.put_sample_fraction) == (0.02, 0.4)

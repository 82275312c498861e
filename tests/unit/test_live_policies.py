"""Routing policies of the live client: pure decisions over (site, server), no processes."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from scipy.stats import chi2

from geoslo.errors import InputError
from geoslo.live.kurma._policies import (
    C3,
    POLICY_NAMES,
    AliasTable,
    DecayingReservoir,
    DynamicSnitch,
    GlobalRoundRobin,
    LatencyAware,
    RatesPolicy,
    make_policy,
)

SERVERS = [2, 2, 2]
FAR_FUTURE_MS = 1e12


def rates(site=0, servers_per_site=SERVERS, row=None):
    policy = RatesPolicy(site, list(servers_per_site), follows_plan=True)
    if row is not None:
        policy.set_fractions(np.asarray(row, dtype=float))
    return policy


def draw_hosts(policy, draws, now_ms=0.0, seed=0):
    rng = np.random.default_rng(seed)
    return Counter(policy.choose(rng, now_ms) for _ in range(draws))


def site_split(hosts, n_sites):
    total = sum(hosts.values())
    split = np.zeros(n_sites)
    for (site, _server), count in hosts.items():
        split[site] += count
    return split / total


def latency_aware(site=0, servers_per_site=SERVERS, proximity=(0, 1, 2)):
    return LatencyAware(site, list(servers_per_site), list(proximity))


def feed(policy, host, response_ms, count, start_ms, step_ms=10.0):
    """``count`` observations of ``response_ms`` for ``host``, ``step_ms`` apart; the time of
    the last one."""
    now_ms = start_ms
    for k in range(count):
        now_ms = start_ms + k * step_ms
        policy.observe(*host, response_ms, now_ms)
    return now_ms


# --- RatesPolicy -------------------------------------------------------------------------------
@pytest.mark.parametrize("site", [0, 1, 2])
def test_identity_row_keeps_every_request_local(site):
    hosts = draw_hosts(make_policy("AllLocal", site, SERVERS, [0, 1, 2]), 2000)
    assert {s for s, _ in hosts} == {site}
    assert set(hosts) == {(site, 0), (site, 1)}


def test_row_of_fractions_sets_the_split():
    hosts = draw_hosts(rates(row=[0.5, 0.3, 0.2]), 20_000, seed=7)
    np.testing.assert_allclose(site_split(hosts, 3), [0.5, 0.3, 0.2], atol=0.015)


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ([0.0, 0.0, 0.0], [1.0, 0.0, 0.0]),
        ([-1.0, 0.0, -3.0], [1.0, 0.0, 0.0]),
        ([-1.0, 0.25, 0.75], [0.0, 0.25, 0.75]),
        ([0.2, -5.0, 0.2], [0.5, 0.0, 0.5]),
        ([2.0, 1.0, 1.0], [0.5, 0.25, 0.25]),
    ],
)
def test_set_fractions_clips_negatives_normalises_and_falls_back_to_local(row, expected):
    policy = rates(row=row)
    np.testing.assert_allclose(policy.row, expected)


@pytest.mark.parametrize("site", [0, 2])
def test_all_zero_row_routes_everything_local(site):
    hosts = draw_hosts(rates(site=site, row=[0.0, 0.0, 0.0]), 500)
    assert {s for s, _ in hosts} == {site}


@pytest.mark.parametrize(
    ("row", "expected"),
    [([0.5, 0.3, 0.2], [0.0, 0.6, 0.4]), ([1.0, 0.0, 0.0], [0.0, 0.5, 0.5])],
)
def test_a_plan_follower_whose_own_servers_are_down_sends_its_share_to_the_remote_sites(
    row, expected
):
    """Until its agent's next row (issue 42): by the row's remote weights, else evenly."""
    policy = rates(row=row)
    for server in range(SERVERS[0]):
        policy.mark_down(0, server, 1_000.0)
    split = site_split(draw_hosts(policy, 20_000, now_ms=500.0, seed=5), 3)
    np.testing.assert_allclose(split, expected, atol=0.015)
    all_local = make_policy("AllLocal", 0, SERVERS, [0, 1, 2])  # a baseline keeps its rule
    for server in range(SERVERS[0]):
        all_local.mark_down(0, server, 1_000.0)
    assert {s for s, _ in draw_hosts(all_local, 500, now_ms=500.0)} == {0}


def test_remote_site_whose_servers_are_all_down_gets_nothing_and_its_share_goes_local():
    policy = rates(row=[0.5, 0.3, 0.2])
    until_ms = 1_000.0
    for server in range(SERVERS[1]):
        policy.mark_down(1, server, until_ms)
    hosts = draw_hosts(policy, 20_000, now_ms=500.0, seed=3)
    split = site_split(hosts, 3)
    assert split[1] == 0.0
    np.testing.assert_allclose(split, [0.8, 0.0, 0.2], atol=0.015)
    # once the backoff is over the site gets its share again
    later = site_split(draw_hosts(policy, 20_000, now_ms=until_ms, seed=4), 3)
    np.testing.assert_allclose(later, [0.5, 0.3, 0.2], atol=0.015)


def test_remote_site_with_one_server_down_keeps_its_share_on_the_servers_that_are_up():
    policy = rates(servers_per_site=[1, 3], row=[0.0, 1.0])
    policy.mark_down(1, 1, FAR_FUTURE_MS)
    hosts = draw_hosts(policy, 3000)
    assert set(hosts) == {(1, 0), (1, 2)}


def test_servers_within_a_site_are_uniform():
    policy = rates(servers_per_site=[1, 4], row=[0.0, 1.0])
    hosts = draw_hosts(policy, 20_000, seed=11)
    assert {s for s, _ in hosts} == {1}
    shares = np.array([hosts[(1, s)] for s in range(4)]) / 20_000
    np.testing.assert_allclose(shares, 0.25, atol=0.015)


def test_a_row_without_local_share_never_makes_choose_fail():
    policy = rates(row=[0.0, 0.03, 0.29])  # normalised: [0, 0.09375..01, 0.90625..01]
    hosts = draw_hosts(policy, 200)
    assert {s for s, _ in hosts} <= {1, 2}


# --- the alias table behind RatesPolicy.choose -------------------------------------------------
@pytest.mark.parametrize(
    "weights",
    [
        [1.0],
        [0.5, 0.5],
        [0.7, 0.2, 0.1],
        [0.0, 3.0, 0.0, 1.0],
        [1e-9, 1.0, 2.0, 0.0, 5.0, 0.25],
        [1.0] * 7,
    ],
)
def test_alias_table_holds_exactly_the_normalised_weights(weights):
    outcomes = [f"host{i}" for i in range(len(weights))]
    table = AliasTable(outcomes, weights)
    total = sum(weights)
    expected = {o: w / total for o, w in zip(outcomes, weights, strict=True) if w > 0}
    got = table.distribution()
    assert set(got) == set(expected)  # a zero weight is never drawn
    for outcome, p in expected.items():
        assert got[outcome] == pytest.approx(p, rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("uniform", [0.0, 0.25, 0.5, 0.999999, np.nextafter(1.0, 0.0)])
def test_alias_table_draw_never_returns_a_zero_weight_outcome(uniform):
    table = AliasTable(["a", "b", "c", "d"], [0.0, 1.0, 0.0, 2.0])
    assert table.draw(uniform) in {"b", "d"}


def test_alias_table_needs_a_positive_weight():
    with pytest.raises(InputError, match="positive"):
        AliasTable(["a", "b"], [0.0, -1.0])


def chi_square_p_value(hosts: Counter, expected: dict) -> float:
    """Pearson's chi-square test of the drawn counts against the expected probabilities."""
    draws = sum(hosts.values())
    statistic = sum((hosts.get(h, 0) - draws * p) ** 2 / (draws * p) for h, p in expected.items())
    return float(chi2.sf(statistic, df=len(expected) - 1))


@pytest.mark.parametrize(
    ("servers", "row", "down"),
    [
        ([2, 2, 2], [0.5, 0.3, 0.2], []),
        ([1, 3, 2], [0.1, 0.6, 0.3], [(1, 1)]),
        ([2, 2, 2], [0.5, 0.3, 0.2], [(1, 0), (1, 1), (2, 0)]),  # site 1's share goes local
        ([3, 1], [0.05, 0.95], [(0, 2)]),
    ],
)
def test_choose_draws_each_host_with_its_weight_and_never_a_down_host(servers, row, down):
    policy = rates(servers_per_site=servers, row=row)
    for host in down:
        policy.mark_down(*host, FAR_FUTURE_MS)
    expected = policy.host_weights(now_ms=0.0)
    # the expected split, by hand: the row, an unreachable site's share local, uniform servers
    site_weight = np.asarray(row, dtype=float) / sum(row)
    for j, n in enumerate(servers):
        if j != 0 and all((j, s) in down for s in range(n)):
            site_weight[0] += site_weight[j]
            site_weight[j] = 0.0
    for (j, _s), p in expected.items():
        up = [t for t in range(servers[j]) if (j, t) not in down]
        assert p == pytest.approx(site_weight[j] / len(up))
    assert sum(expected.values()) == pytest.approx(1.0)

    hosts = draw_hosts(policy, 60_000, seed=17)
    assert not set(hosts) & set(down)
    assert set(hosts) <= set(expected)
    assert chi_square_p_value(hosts, expected) > 1e-3
    assert policy.rebuilds == 1  # 60,000 choices, one table


def test_the_table_is_rebuilt_when_the_plan_changes():
    policy = rates(row=[1.0, 0.0, 0.0])
    assert {s for s, _ in draw_hosts(policy, 200)} == {0}
    policy.set_fractions(np.array([0.0, 0.0, 1.0]))
    assert {s for s, _ in draw_hosts(policy, 200)} == {2}
    policy.set_fractions(np.array([0.0, 1.0, 1.0]))
    split = site_split(draw_hosts(policy, 20_000, seed=5), 3)
    np.testing.assert_allclose(split, [0.0, 0.5, 0.5], atol=0.015)
    assert policy.rebuilds == 3


def test_the_table_is_rebuilt_when_a_host_goes_down_and_when_its_mark_expires():
    policy = rates(servers_per_site=[1, 2], row=[0.0, 1.0])
    assert set(draw_hosts(policy, 500, now_ms=0.0)) == {(1, 0), (1, 1)}
    policy.mark_down(1, 0, 100.0)
    assert set(draw_hosts(policy, 500, now_ms=50.0)) == {(1, 1)}
    assert set(draw_hosts(policy, 500, now_ms=99.9)) == {(1, 1)}
    assert policy.rebuilds == 2
    assert set(draw_hosts(policy, 500, now_ms=100.0)) == {(1, 0), (1, 1)}
    assert policy.rebuilds == 3


# --- GlobalRoundRobin --------------------------------------------------------------------------
def test_global_round_robin_visits_every_host_once_per_cycle():
    servers = [2, 1, 3]
    policy = GlobalRoundRobin(1, servers)
    rng = np.random.default_rng(0)
    every_host = [(j, s) for j, n in enumerate(servers) for s in range(n)]
    for _cycle in range(3):
        chosen = [policy.choose(rng, 0.0) for _ in every_host]
        assert chosen == every_host


def test_global_round_robin_skips_hosts_that_are_down_until_they_are_back():
    servers = [2, 1, 3]
    policy = GlobalRoundRobin(0, servers)
    rng = np.random.default_rng(0)
    policy.mark_down(1, 0, 100.0)
    policy.mark_down(2, 2, 100.0)
    up_hosts = [(0, 0), (0, 1), (2, 0), (2, 1)]
    chosen = [policy.choose(rng, 50.0) for _ in range(2 * len(up_hosts))]
    assert chosen == up_hosts * 2
    later = [policy.choose(rng, 100.0) for _ in range(6)]
    assert sorted(later) == sorted((j, s) for j, n in enumerate(servers) for s in range(n))


def test_global_round_robin_with_every_host_down_falls_back_to_the_first_local_server():
    policy = GlobalRoundRobin(2, [1, 1, 2])
    for host in policy.hosts:
        policy.mark_down(*host, FAR_FUTURE_MS)
    assert policy.choose(np.random.default_rng(0), 0.0) == (2, 0)


# --- LatencyAware ------------------------------------------------------------------------------
def test_latency_aware_without_measurements_chooses_a_local_server():
    hosts = draw_hosts(latency_aware(site=1, proximity=[2, 0, 1]), 1000)
    assert set(hosts) == {(1, 0), (1, 1)}


def test_latency_aware_with_local_servers_down_goes_to_the_nearest_remote_site():
    policy = latency_aware(site=0, proximity=[0, 2, 1])
    assert policy.proximity == [2, 1]
    for server in range(SERVERS[0]):
        policy.mark_down(0, server, FAR_FUTURE_MS)
    hosts = draw_hosts(policy, 500)
    assert set(hosts) == {(2, 0), (2, 1)}


def test_latency_aware_avoids_a_slow_local_host_until_the_retry_period_passes():
    policy = latency_aware()
    slow, fast = (0, 0), (0, 1)
    n = policy.min_measure
    last_slow_ms = feed(policy, slow, 50.0, n, start_ms=0.0)
    last_fast_ms = feed(policy, fast, 5.0, n, start_ms=5.0)
    assert policy.average_ms[slow] > policy.exclusion_threshold * policy.average_ms[fast]
    now_ms = max(last_slow_ms, last_fast_ms) + 1.0
    assert draw_hosts(policy, 500, now_ms) == Counter({fast: 500})

    # the fast host keeps being measured; the slow one is not, and is retried once stale
    retry_ms = last_slow_ms + policy.retry_period_ms
    feed(policy, fast, 5.0, 3, start_ms=retry_ms - 30.0, step_ms=10.0)
    before = draw_hosts(policy, 500, now_ms=retry_ms, seed=1)
    assert before == Counter({fast: 500})
    after = draw_hosts(policy, 2000, now_ms=retry_ms + 1.0, seed=2)
    assert set(after) == {slow, fast}
    assert after[slow] / 2000 == pytest.approx(0.5, abs=0.05)


def test_latency_aware_with_every_measurement_stale_accepts_every_host_again():
    policy = latency_aware()
    last_ms = feed(policy, (0, 0), 50.0, policy.min_measure, start_ms=0.0)
    feed(policy, (0, 1), 5.0, policy.min_measure, start_ms=0.0)
    assert policy._best_ms(last_ms) is not None
    later_ms = last_ms + policy.retry_period_ms + 1.0
    assert policy._best_ms(later_ms) is None
    hosts = draw_hosts(policy, 2000, now_ms=later_ms)
    assert set(hosts) == {(0, 0), (0, 1)}


@pytest.mark.parametrize(
    ("slow_ms", "penalised"),
    [(19.0, False), (21.0, True)],
)
def test_latency_aware_penalises_only_above_twice_the_best_average(slow_ms, penalised):
    policy = latency_aware(servers_per_site=[2, 1, 1])
    last_ms = feed(policy, (0, 0), slow_ms, policy.min_measure, start_ms=0.0)
    feed(policy, (0, 1), 10.0, policy.min_measure, start_ms=0.0)
    hosts = draw_hosts(policy, 1000, now_ms=last_ms + 1.0)
    assert ((0, 0) in hosts) is not penalised
    assert (0, 1) in hosts


def test_latency_aware_needs_min_measure_observations_before_penalising():
    policy = latency_aware()
    n = policy.min_measure - 1
    last_ms = feed(policy, (0, 0), 50.0, n, start_ms=0.0)
    feed(policy, (0, 1), 5.0, n, start_ms=0.0)
    assert policy._best_ms(last_ms) is None
    assert set(draw_hosts(policy, 1000, now_ms=last_ms + 1.0)) == {(0, 0), (0, 1)}


def test_latency_aware_time_weighted_average_by_hand():
    policy = latency_aware()
    host = (0, 0)
    ignored = math.floor(0.3 * policy.min_measure) - 1  # the first 14 are only counted
    feed(policy, host, 999.0, ignored, start_ms=0.0, step_ms=1.0)
    assert policy.count[host] == ignored
    assert policy.average_ms[host] == -1.0

    policy.observe(*host, 10.0, 100.0)  # the first one that counts: taken as is
    assert policy.average_ms[host] == 10.0
    policy.observe(*host, 30.0, 200.0)  # 100 ms later: scaled delay 1, past weight ln 2
    first = (1 - math.log(2)) * 30.0 + math.log(2) * 10.0
    assert policy.average_ms[host] == pytest.approx(first, rel=1e-12)
    policy.observe(*host, 20.0, 500.0)  # 300 ms later: scaled delay 3, weight ln(4) / 3
    weight = math.log(4.0) / 3.0
    assert policy.average_ms[host] == pytest.approx((1 - weight) * 20.0 + weight * first)
    assert policy.stamp_ms[host] == 500.0
    assert policy.count[host] == ignored + 3


def test_latency_aware_ignores_an_observation_without_elapsed_time():
    policy = latency_aware()
    host = (0, 0)
    last_ms = feed(policy, host, 10.0, 20, start_ms=0.0)
    before = policy.average_ms[host]
    policy.observe(*host, 500.0, last_ms)
    assert policy.average_ms[host] == before
    assert policy.stamp_ms[host] == last_ms


def test_latency_aware_observation_without_elapsed_time_is_not_counted():
    policy = latency_aware()
    host = (0, 0)
    last_ms = feed(policy, host, 10.0, 20, start_ms=0.0)
    policy.observe(*host, 500.0, last_ms)
    assert policy.count[host] == 20


# --- DynamicSnitch ---------------------------------------------------------------------------
def test_the_reservoir_keeps_its_size_and_weights_recent_samples():
    reservoir = DecayingReservoir(100, 0.75, landmark_s=0.0)
    uniforms = np.random.default_rng(0).random(2000)
    for k, u in enumerate(uniforms[:1000]):  # 10 s of 1 ms responses...
        reservoir.update(1.0, k * 0.01, 1.0 - u)
    for k, u in enumerate(uniforms[1000:]):  # ...then 2 s of 9 ms ones
        reservoir.update(9.0, 10.0 + k * 0.002, 1.0 - u)
    assert len(reservoir) == 100
    assert reservoir.median() == 9.0  # the recent samples weigh e^(0.75 s) more a second
    assert DecayingReservoir(100, 0.75, 0.0).median() == 0.0


def test_the_weighted_median_is_codahales():
    reservoir = DecayingReservoir(10, 0.0, landmark_s=0.0)  # alpha 0: equal weights
    for value in (5.0, 1.0, 3.0, 2.0):
        reservoir.update(value, 0.0, 0.5)
    # values 1 2 3 5, preceding weights 0 .25 .5 .75: the largest at most one half is 3
    assert reservoir.median() == 3.0


def snitch(site=0, servers_per_site=SERVERS, proximity=(0, 1, 2)):
    return DynamicSnitch(site, list(servers_per_site), list(proximity), seed=1)


def test_the_snitch_reads_locally_until_a_local_host_is_worse_by_the_badness():
    policy = snitch()
    feed(policy, (0, 0), 2.0, 50, 0.0)
    feed(policy, (0, 1), 2.0, 50, 0.0)
    feed(policy, (1, 0), 12.0, 50, 0.0)  # remote: measured by earlier reads
    hosts = draw_hosts(policy, 400, now_ms=1000.0)
    assert set(hosts) == {(0, 0), (0, 1)} and min(hosts.values()) > 150  # both, at random
    feed(policy, (0, 0), 40.0, 50, 1000.0)  # one local server slows: the order is broken
    feed(policy, (0, 1), 40.0, 50, 1000.0)
    # up to 3.11.0 (the paper's 3.9) the unscored remote hosts keep the subsnitch's order
    assert set(draw_hosts(policy, 100, now_ms=2000.0)) == {(0, 0), (0, 1)}
    policy.unscored_as_zero = True  # 3.11.1 on (CASSANDRA-13074)
    hosts = draw_hosts(policy, 100, now_ms=2000.0)
    # scored in proximity order 1.0, 1.0, 0.3: sorted by score, the unscored host (1, 1)
    # counts as 0 and comes first (compareEndpoints)
    assert hosts == Counter({(1, 1): 100})
    policy.mark_down(1, 1, FAR_FUTURE_MS)  # the next unscored hosts, of the next site
    assert set(draw_hosts(policy, 40, now_ms=2000.0)) == {(2, 0), (2, 1)}


def test_the_snitch_rescores_only_every_100_ms_and_forgets_after_10_minutes():
    policy = snitch()
    policy.unscored_as_zero = True  # 3.11.1 on: an unscored host is read and measured
    feed(policy, (0, 0), 40.0, 50, 0.0)
    feed(policy, (0, 1), 40.0, 50, 0.0)
    feed(policy, (1, 0), 5.0, 50, 0.0)
    assert draw_hosts(policy, 5, now_ms=500.0) == Counter({(1, 1): 5})  # unscored first
    feed(policy, (1, 1), 5.0, 50, 500.0)
    feed(policy, (2, 0), 5.0, 50, 500.0)
    feed(policy, (2, 1), 5.0, 50, 500.0)
    assert draw_hosts(policy, 5, now_ms=550.0) == Counter({(1, 1): 5})  # scores not updated
    assert set(draw_hosts(policy, 5, now_ms=700.0)) <= {(1, 0), (1, 1)}  # nearest, scored
    later_ms = 700.0 + DynamicSnitch.reset_interval_ms
    assert set(draw_hosts(policy, 50, now_ms=later_ms)) == {(0, 0), (0, 1)}  # all forgotten


def test_the_snitch_reads_among_the_keys_replicas_only():
    """Four servers a site: a key's candidates are 3 consecutive servers of every site
    from the key's start, this site's first (as the simulator's dynamic_snitch)."""
    policy = snitch(servers_per_site=[4, 4, 4])
    assert policy.replicas(0.6) == [(0, 2), (0, 3), (0, 0), (1, 2), (1, 3), (1, 0), (2, 2),
                                    (2, 3), (2, 0)]  # fmt: skip
    hosts = draw_hosts(policy, 400)
    assert set(hosts) == {(0, s) for s in range(4)}  # nothing scored: the key's first
    policy.mark_down(0, 0, FAR_FUTURE_MS)
    assert (0, 0) not in draw_hosts(policy, 100)


# --- make_policy -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "kind", "follows_plan"),
    [
        ("AllLocal", RatesPolicy, False),
        ("KurmaPerf", RatesPolicy, True),
        ("KurmaCost", RatesPolicy, True),
        ("GlobalRR", GlobalRoundRobin, False),
        ("LatencyAware", LatencyAware, False),
        ("DynamicSnitch", DynamicSnitch, False),
        ("C3", C3, False),
    ],
)
def test_make_policy_by_name(name, kind, follows_plan):
    policy = make_policy(name, 1, SERVERS, [1, 0, 2])
    assert type(policy) is kind
    assert policy.follows_plan is follows_plan
    assert policy.site == 1
    assert policy.servers == SERVERS


def test_policy_names_are_the_ones_make_policy_knows():
    assert set(POLICY_NAMES) == {
        "AllLocal", "GlobalRR", "LatencyAware", "DynamicSnitch", "C3", "KurmaPerf", "KurmaCost"
    }  # fmt: skip
    for name in POLICY_NAMES:
        make_policy(name, 0, SERVERS, [0, 1, 2])


@pytest.mark.parametrize("name", ["", "alllocal", "RoundRobin", "Kurma"])
def test_make_policy_rejects_an_unknown_name(name):
    with pytest.raises(InputError, match="unknown policy") as error:
        make_policy(name, 0, SERVERS, [0, 1, 2])
    assert error.value.field == "policy"
    assert "AllLocal" in str(error.value)

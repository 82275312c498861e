"""C3 in the request-level simulator as the authors' Cassandra code has it
(lalithsuresh/cassandra-c3, org.apache.cassandra.c3): the rate controller's rules as
tables, on the compiled kernel and its plain-Python reference, and whole runs of both."""

from __future__ import annotations

import numpy as np
import pytest

from geoslo.sim.kurma import BackendParams, RequestLevelSim, residual_wan_samples_ms
from geoslo.sim.kurma import _kernels as K
from geoslo.sim.kurma._reference import reference_kernels

KERNELS = [pytest.param(K, id="numba"), pytest.param(reference_kernels(), id="reference")]

RTT_MS = np.array([[0.0, 10.0, 12.0], [10.0, 0.0, 22.0], [12.0, 22.0, 0.0]])  # Table 2


def build_sim(policy, rate_rps, write_fraction=0.0, seed=1, **params) -> RequestLevelSim:
    return RequestLevelSim(
        site_names=["London", "Ireland", "Frankfurt"],
        backend=BackendParams(),
        rate_traces=[np.full(60, rate_rps)] * 3,
        write_fraction=write_fraction,
        base_rtt_ms=RTT_MS,
        residual_rtt_samples_ms=residual_wan_samples_ms(500, seed=0),
        seed=seed,
        policy=policy,
        policy_params=params or None,
    )


def _arrays(stats):
    return {k: v for k, v in stats.__dict__.items() if isinstance(v, np.ndarray)}


BETA, GAMMA, SMAX, HYST_MS, MIN_RATE = 0.2, 4e-6, 10.0, 80.0, 0.1  # RateController's


def cubic(kern, send, recv, t_ms, t_inc_ms, t_dec_ms, rmax):
    return kern._c3_cubic(
        send, recv, t_ms, t_inc_ms, t_dec_ms, rmax, BETA, GAMMA, SMAX, HYST_MS, MIN_RATE
    )


@pytest.mark.parametrize("kern", KERNELS)
@pytest.mark.parametrize(
    ("send", "recv", "t_ms", "t_inc_ms", "t_dec_ms", "rmax", "expected"),
    [
        # sending above the receive rate, no rise within 80 ms: cut to 0.2 x, Rmax = send
        (50.0, 20.0, 1000.0, 0.0, 0.0, 0.0, (10.0, 50.0, 1000.0, 0.0)),
        # ... but not within the hysteresis after the last increase
        (50.0, 20.0, 1000.0, 950.0, 0.0, 7.0, (50.0, 7.0, 0.0, 950.0)),
        # the hysteresis counts from the last increase, not from the last decrease
        (50.0, 20.0, 1000.0, 0.0, 990.0, 7.0, (10.0, 50.0, 1000.0, 0.0)),
        # a cut never goes below 0.1 a interval
        (0.2, 0.0, 1000.0, 0.0, 0.0, 0.0, (0.1, 0.2, 1000.0, 0.0)),
        # below the receive rate: the cubic, by at most smax a response
        (10.0, 20.0, 1000.0, 0.0, 0.0, 50.0, (20.0, 50.0, 0.0, 1000.0)),
        # at T = K the cubic is Rmax (K = (50 x 0.2 / 4e-6)^(1/3) ms)
        (45.0, 50.0, 2.5e6 ** (1 / 3), 0.0, 0.0, 50.0, (50.0, 50.0, 0.0, 2.5e6 ** (1 / 3))),
        # right after a cut the cubic is (1 - beta) Rmax: a rate above it falls to it
        (45.0, 50.0, 100.0, 0.0, 100.0, 50.0, (40.0, 50.0, 100.0, 100.0)),
        # equal rates: nothing changes
        (20.0, 20.0, 1000.0, 0.0, 0.0, 50.0, (20.0, 50.0, 0.0, 0.0)),
    ],
)
def test_cubic_rate_rules(kern, send, recv, t_ms, t_inc_ms, t_dec_ms, rmax, expected):
    got = cubic(kern, send, recv, t_ms, t_inc_ms, t_dec_ms, rmax)
    assert got == pytest.approx(expected, rel=1e-12, abs=1e-9)


@pytest.mark.parametrize("kern", KERNELS)
@pytest.mark.parametrize(
    ("tokens", "last_ms", "rate", "t_ms", "expected"),
    [
        (0.0, 0.0, 10.0, 20.0, 10.0),  # rate tokens a 20 ms interval
        (0.5, 0.0, 1.0, 10.0, 1.0),
        (0.0, 0.0, 10.0, 1e6, 200.0),  # the bucket holds 200
        (200.0, 0.0, 10.0, 5.0, 200.0),
    ],
)
def test_token_bucket_refills_at_the_rate_up_to_200(kern, tokens, last_ms, rate, t_ms, expected):
    assert kern._c3_tokens(tokens, last_ms, rate, t_ms, 20.0, 200.0) == pytest.approx(expected)


@pytest.mark.parametrize("kern", KERNELS)
@pytest.mark.parametrize(
    ("rate", "slot", "count", "now_slot", "expected"),
    [
        (100.0, 5.0, 3.0, 5.0, (100.0, 5.0, 4.0)),  # the same slot: counted
        (100.0, 5.0, 3.0, 6.0, (0.9 * 4.0 + 0.1 * 100.0, 6.0, 0.0)),  # next slot: folded in
        (100.0, 5.0, 3.0, 9.0, (0.9 * 3.0 + 0.1 * 100.0, 9.0, 0.0)),  # a gap: this one lost
    ],
)
def test_receive_rate_is_a_slotted_ewma(kern, rate, slot, count, now_slot, expected):
    got = kern._c3_receive_tick(rate, slot, count, now_slot, 1.0, 0.9)
    assert got == pytest.approx(expected)


def _route_state(self_server=0, tokens=0.0):
    """One coordinator at site 0 (2 sites of 3 servers, RF 3: every server a replica)."""
    gs = np.zeros((1, 6, K.NGS))
    gs[0, :, K.GS_C3_TOKENS] = tokens
    gs[0, :, K.GS_C3_RATE] = 1e-9  # no refill within the test
    gs[0, :, K.GS_C3_SVC] = 1.0
    gs[0, 0, K.GS_C3_SELF] = self_server
    gs[0, 0, K.GS_C3_NHOSTS] = 1.0
    pp = np.zeros(K.NPP)
    pp[K.PP_C3_RF] = 3
    pp[K.PP_C3_WINDOW_MS] = 20.0
    pp[K.PP_C3_MAX_TOKENS] = 200.0
    allowed = np.ones((2, 2), dtype=np.bool_)
    site_off = np.array([0, 3, 6], dtype=np.int64)
    n_servers = np.array([3, 3], dtype=np.int64)
    return gs, pp, allowed, site_off, n_servers


def route(kern, gs, pp, allowed, site_off, n_servers, self_os=0.0):
    return kern._route_c3(0, 0, 100.0, 0.0, self_os, gs, pp, allowed, site_off, n_servers)


@pytest.mark.parametrize("kern", KERNELS)
def test_the_coordinator_itself_needs_no_token(kern):
    """pushRead skips tryAcquire for FBUtilities.getBroadcastAddress(): with every bucket
    empty the coordinator's own server still takes the read, however busy; a coordinator
    that is no server has to wait."""
    gs, *rest = _route_state(self_server=1, tokens=0.0)
    assert route(kern, gs, *rest, self_os=50.0) == (0, 1)
    assert gs[0, :, K.GS_C3_OS].sum() == 0  # its own server keeps its own count
    gs, *rest = _route_state(self_server=-1, tokens=0.0)
    assert route(kern, gs, *rest) == (-1, -1)


@pytest.mark.parametrize("kern", KERNELS)
def test_the_best_score_with_a_token_takes_it_and_counts_a_pending_read(kern):
    gs, *rest = _route_state(self_server=-1, tokens=5.0)
    gs[0, :, K.GS_C3_Q] = [3.0, 2.0, 4.0, 0.0, 5.0, 5.0]  # site 1's server 0 is idle
    assert route(kern, gs, *rest) == (1, 0)
    assert gs[0, 3, K.GS_C3_TOKENS] == pytest.approx(4.0)
    assert gs[0, 3, K.GS_C3_OS] == 1 and gs[0, 3, K.GS_C3_KNOWN] == 1
    assert gs[0, 0, K.GS_C3_NHOSTS] == 2  # n: one more host with a counter
    gs[0, 3, K.GS_C3_TOKENS] = 0.5  # no token left there: the next best
    assert route(kern, gs, *rest) == (0, 1)


@pytest.mark.parametrize("kern", KERNELS)
def test_ties_go_to_the_coordinator_then_its_site(kern):
    """Every score 0 (nothing heard yet): compareEndpoints falls back on the subsnitch,
    which puts the coordinator first, then its datacenter."""
    gs, *rest = _route_state(self_server=2, tokens=5.0)
    gs[0, :, K.GS_C3_SVC] = 0.0
    assert route(kern, gs, *rest) == (0, 2)
    gs[0, 0, K.GS_C3_SELF] = -1.0
    assert route(kern, gs, *rest) == (0, 0)


def test_psi_weighs_outstanding_reads_by_the_hosts_counted():
    """ScoreTracker.getScore: R + (1 + q + n * os)^3 / mu, n = pendingRequests.size()."""
    assert K._c3_score(2.0, 0.5, 3.0, 1.0, 15.0) == pytest.approx(2.0 + (1 + 1 + 45) ** 3 * 0.5)


@pytest.mark.parametrize(
    "params",
    [
        pytest.param({"c3_paper_text": 1.0, "c3_initial_rate": 20.0}, id="paper-text"),
        pytest.param({"c3_read_repair_chance": 0.5, "c3_max_tokens": 1.5}, id="read-repair"),
        pytest.param({"coordinators_per_site": 1, "c3_max_tokens": 1.5}, id="one-client"),
    ],
)
def test_kernel_equals_reference_on_c3_variants(params):
    compiled = build_sim("c3", rate_rps=9000.0, write_fraction=0.05, **params)
    interpreted = build_sim("c3", rate_rps=9000.0, write_fraction=0.05, **params)
    for s in (compiled, interpreted):
        s.set_server_slowdown(2, np.array([3.0, 3.0, 1.0, 1.0, 1.0]))
    ref = reference_kernels()
    for duration_s in (0.2, 0.25):
        a = _arrays(compiled.run(duration_s))
        b = _arrays(interpreted.run(duration_s, kernels=ref))
        for name in a:
            assert np.array_equal(a[name], b[name]), name
    assert np.array_equal(compiled._gs, interpreted._gs)


def test_read_repair_sends_digests_that_feed_c3_and_enter_no_statistic():
    """dclocal_read_repair_chance 1: every read also sends m - 1 = 2 digests; their answers
    come back as feedback (3 per read) but no request is added."""
    plain = build_sim("c3", rate_rps=3000.0, seed=4)
    repair = build_sim("c3", rate_rps=3000.0, seed=4, c3_read_repair_chance=1.0)
    a, b = plain.run(0.5), repair.run(0.5)
    assert a.requests.sum() == b.requests.sum() == b.completed.sum()
    assert plain._st[K.ST_FBSEQ] == a.requests.sum()
    assert repair._st[K.ST_FBSEQ] > 2.9 * b.requests.sum()

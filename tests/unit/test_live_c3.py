"""The live client's C3 (Suresh et al., NSDI 2015) and its servers' feedback: pure
decisions and parsing, no processes. The rate control is checked against the simulator's
kernel (``geoslo.sim.kurma``), which implements the same §4.3 independently."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest

from geoslo.live._sockdiag import parse_dump
from geoslo.live.kurma._feedback import ServerCounters, info_counters
from geoslo.live.kurma._policies import C3, C3Scores

SERVERS = [2, 2, 2]
NEAREST = [0, 1, 2]


def c3(site=0, servers=SERVERS) -> C3:
    return C3(site, list(servers), NEAREST)


def answer(policy: C3, host, response_ms: float, queue: float, service_ms: float, now_ms=0.0):
    policy.feedback(*host, queue, service_ms)
    policy.observe(*host, response_ms, now_ms)


def test_the_score_is_the_authors_score_trackers():
    policy = c3()
    host = (1, 0)
    scores = policy.scores
    scores.net_response_ms[host], scores.queue[host], scores.service_ms[host] = 11.5, 4.0, 0.5
    policy.outstanding[host] = 2
    scores.known |= {(0, 0), (1, 0), (2, 0)}  # n: the hosts it has sent to
    q_hat = 1 + 4.0 + 3 * 2
    assert policy.score(host) == pytest.approx(11.5 + q_hat**3 * 0.5)


def test_with_nothing_known_it_stays_at_its_own_site():
    policy = c3(site=1)
    policy.order = [1, 0, 2]
    rng = np.random.default_rng(0)
    assert policy.choose(rng, 0.0)[0] == 1  # every score is 0: ties go to the nearer


def test_a_long_queue_at_home_sends_requests_to_a_remote_replica():
    policy = c3()
    rng = np.random.default_rng(1)
    for _ in range(30):  # home servers answer in 3 ms but report 20 requests queued
        for s in range(2):
            answer(policy, (0, s), 3.0, 20.0, 0.4)
        answer(policy, (1, 0), 14.0, 0.0, 0.4)
        answer(policy, (1, 1), 14.0, 0.0, 0.4)
        answer(policy, (2, 0), 20.0, 0.0, 0.4)
        answer(policy, (2, 1), 20.0, 0.0, 0.4)
    chosen = policy.choose(rng, 1.0)
    assert chosen[0] == 1  # 2.6 + 21^3 x 0.4 at home against 13.6 + 0.4 remote


def test_feedback_counts_only_when_a_response_of_that_server_arrives():
    policy = c3()
    scores = policy.scores
    policy.feedback(0, 0, 50.0, 1.0)
    assert scores.queue[(0, 0)] == 0.0  # nothing arrived: piggybacking carries nothing yet
    policy.observe(0, 0, 2.0, 0.0)
    assert scores.queue[(0, 0)] == pytest.approx(0.9 * 50.0)  # the new sample's weight 0.9
    assert scores.service_ms[(0, 0)] == pytest.approx(0.9)
    assert scores.net_response_ms[(0, 0)] == pytest.approx(0.9 * (2.0 - 1.0))
    policy.feedback(0, 0, 10.0, 3.0)
    policy.observe(0, 0, 2.0, 1.0)
    assert scores.queue[(0, 0)] == pytest.approx(0.1 * 45.0 + 0.9 * 10.0)
    assert scores.service_ms[(0, 0)] == pytest.approx(0.1 * 0.9 + 0.9 * 3.0)


def test_outstanding_requests_rise_on_choice_and_fall_on_answer_or_failure():
    policy = c3()
    rng = np.random.default_rng(2)
    first = policy.choose(rng, 0.0)
    assert policy.outstanding[first] == 1
    policy.observe(*first, 1.0, 1.0)
    assert policy.outstanding[first] == 0
    second = policy.choose(rng, 2.0)
    policy.failed(*second, until_ms=500.0)
    assert policy.outstanding[second] == 0
    assert not policy.is_up(*second, 100.0)


def test_a_host_without_a_token_is_skipped_and_none_holds_the_request_until_one():
    policy = c3(servers=[1, 1, 1])
    rng = np.random.default_rng(3)
    for host in policy.tokens:
        policy.tokens[host] = 2.0  # and 1 token a rate interval (the initial rate)
    chosen = [policy.choose(rng, 0.0) for _ in range(7)]
    assert chosen[-1] is None  # 3 hosts x 2 tokens
    assert sum(h is not None for h in chosen) == 6
    assert policy.held_until_ms == pytest.approx(C3.interval_ms)  # one token's refill
    assert policy.choose(rng, C3.interval_ms) is not None


def test_rate_control_follows_the_simulators_kernel():
    """The same acquires and responses through the live C3 and the simulator's C3 rules
    (_c3_tokens, _c3_receive_tick, _c3_cubic, the authors' RateController): the same
    tokens, receive rates and sending rates, response after response."""
    from geoslo.sim.kurma import _kernels as K
    from geoslo.sim.kurma._env import DEFAULT_POLICY_PARAMS as defaults

    for attribute in (
        "beta", "gamma", "smax", "hysteresis_ms", "min_rate", "max_tokens", "initial_rate",
        "initial_receive_rate", "receive_alpha", "replicas_per_site",
    ):  # fmt: skip
        assert getattr(C3, attribute) == defaults[f"c3_{attribute}"]  # the simulator's
    assert C3.interval_ms == defaults["c3_window_ms"]
    assert C3Scores.ewma_alpha == defaults["c3_ewma_alpha"]
    policy = c3(servers=[1, 1, 1])
    host = (1, 0)
    interval, p = C3.interval_ms, defaults
    tokens, last, rate = C3.max_tokens, 0.0, C3.initial_rate
    rrate, rslot, rcount = C3.initial_receive_rate, -1e12, 0.0
    tinc, tdec, rmax = -1e12, -1e12, 0.0
    rng = np.random.default_rng(4)
    t, rates = 0.0, []
    for _ in range(3000):
        t += float(rng.exponential(3.0))
        if rng.random() < 0.5:  # an acquire, when the bucket has a token
            have = K._c3_tokens(tokens, last, rate, t, interval, p["c3_max_tokens"])
            assert policy.tokens_at(host, t) == pytest.approx(have, rel=1e-9)
            if have >= 1.0:
                tokens, last = have - 1.0, t
                policy.tokens[host], policy.token_ms[host] = tokens, t
        else:  # a response
            rrate, rslot, rcount = K._c3_receive_tick(
                rrate, rslot, rcount, math.floor(t / interval), 1.0, p["c3_receive_alpha"]
            )
            rate, rmax, tdec, tinc = K._c3_cubic(
                rate, rrate, math.floor(t), tinc, tdec, rmax, p["c3_beta"], p["c3_gamma"],
                p["c3_smax"], p["c3_hysteresis_ms"], p["c3_min_rate"],
            )  # fmt: skip
            policy._update_rate(host, t)
            assert policy.receive[host][0] == pytest.approx(rrate, rel=1e-9)
            assert policy.rate[host] == pytest.approx(rate, rel=1e-9)
            rates.append(rate)
    assert min(rates) < C3.initial_rate < max(rates)  # cut and grown


# --- the servers' feedback -----------------------------------------------------------------
def diag_message(port: int, unread: int, state: int = 1) -> bytes:
    """One inet_diag_msg in a netlink message, as the kernel sends it (linux/inet_diag.h)."""
    body = struct.pack("=BBBB", 2, state, 0, 0) + struct.pack(">HH", port, 40000)
    body += bytes(32 + 4 + 8) + struct.pack("=IIIII", 0, unread, 0, 0, 7)
    return struct.pack("=IHHII", 16 + len(body), 20, 2, 1, 0) + body


DONE = struct.pack("=IHHII", 20, 3, 2, 1, 0) + bytes(4)


def test_a_sock_diag_dump_sums_each_ports_unread_bytes_to_its_end():
    unread = {8080: 0, 8081: 0}
    first = diag_message(8080, 128) + diag_message(8080, 32) + diag_message(40000, 999)
    assert not parse_dump(first, unread)  # no end yet: read on
    assert parse_dump(diag_message(8081, 5) + DONE, unread)
    assert unread == {8080: 160, 8081: 5}


def test_a_sock_diag_error_is_raised():
    error = struct.pack("=IHHII", 36, 2, 0, 1, 0) + struct.pack("=i", -1) + bytes(16)
    with pytest.raises(OSError, match="sock_diag"):
        parse_dump(error, {})


INFO = """\
# Stats\r
total_net_input_bytes:10000\r
# Commandstats\r
cmdstat_sort_ro:calls=90,usec=27000,usec_per_call=300.00,rejected_calls=0,failed_calls=0\r
cmdstat_lset:calls=10,usec=100,usec_per_call=10.00,rejected_calls=0,failed_calls=0\r
cmdstat_info:calls=5,usec=500,usec_per_call=100.00,rejected_calls=0,failed_calls=0\r
cmdstat_auth:calls=1,usec=5,usec_per_call=5.00,rejected_calls=0,failed_calls=0\r
cmdstat_client|list:calls=1,usec=5,usec_per_call=5.00,rejected_calls=0,failed_calls=0\r
"""


def test_info_counters_leave_the_feedbacks_own_commands_out():
    assert info_counters(INFO) == (10000, 100, 27100)


def test_server_counters_give_request_size_and_service_time_between_polls():
    counters = ServerCounters(commands_per_request=2)
    assert counters.queue(400) == 0.0  # a request's size is not known yet
    counters.update((1000, 10, 1000))  # the first poll counts from the server's start
    assert counters.request_bytes == pytest.approx(200.0)
    assert counters.service_ms == pytest.approx(0.2)
    counters.update((5000, 50, 41000))  # 20 requests of 200 B, 2 ms each
    assert counters.request_bytes == pytest.approx(200.0)
    assert counters.service_ms == pytest.approx(2.0)
    assert counters.queue(1000) == pytest.approx(5.0)
    counters.update((5000, 50, 41000))  # idle: the means stand
    assert counters.service_ms == pytest.approx(2.0)
    counters.update((100, 2, 50))  # a restarted server: nothing measured, counting anew
    assert counters.service_ms == pytest.approx(2.0) and counters.last == (100, 2, 50)
    assert not math.isnan(counters.queue(0))


def test_feedback_from_a_server_not_measured_yet_is_not_taken():
    policy = c3()
    scores = policy.scores
    policy.feedback(0, 0, 0.0, 0.0)  # the feedback process has not timed the server yet
    policy.observe(0, 0, 2.0, 0.0)
    assert (0, 0) not in scores.fed and scores.service_ms[(0, 0)] == 0.0
    policy.feedback(0, 0, 4.0, 0.5)
    policy.observe(0, 0, 2.0, 1.0)
    assert scores.queue[(0, 0)] == pytest.approx(3.6)
    assert scores.service_ms[(0, 0)] == pytest.approx(0.45)

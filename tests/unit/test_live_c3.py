"""The live client's C3 (Suresh et al., NSDI 2015) and its servers' feedback: pure
decisions and parsing, no processes. The rate control is checked against the simulator's
kernel (``geoslo.sim.kurma``), which implements the same §4.3 independently."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest

from geoslo.errors import InputError
from geoslo.live._sockdiag import parse_dump
from geoslo.live.kurma._feedback import ServerCounters, info_counters
from geoslo.live.kurma._policies import C3, make_policy

SERVERS = [2, 2, 2]
NEAREST = [0, 1, 2]


def c3(site=0, servers=SERVERS, n_clients=3) -> C3:
    return C3(site, list(servers), NEAREST, n_clients)


def answer(policy: C3, host, response_ms: float, queue: float, service_ms: float, now_ms=0.0):
    policy.feedback(*host, queue, service_ms)
    policy.observe(*host, response_ms, now_ms)


def test_psi_is_the_papers_ranking_function():
    policy = c3()
    host = (1, 0)
    policy.response_ms[host], policy.queue[host], policy.service_ms[host] = 12.0, 4.0, 0.5
    policy.outstanding[host] = 2
    q_hat = 1 + 2 * 3 + 4.0
    assert policy.psi(host) == pytest.approx(12.0 - 0.5 + q_hat**3 * 0.5)


def test_with_nothing_known_it_stays_at_its_own_site():
    policy = c3(site=1, n_clients=3)
    policy.order = [1, 0, 2]
    rng = np.random.default_rng(0)
    assert policy.choose(rng, 0.0)[0] == 1  # every psi is 0: ties go to the nearer


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
    assert chosen[0] == 1  # psi 3 - 0.4 + 21^3 * 0.4 at home against 14 - 0.4 + 0.4 remote


def test_feedback_counts_only_when_a_response_of_that_server_arrives():
    policy = c3()
    policy.feedback(0, 0, 50.0, 1.0)
    assert policy.queue[(0, 0)] == 0.0  # nothing arrived: piggybacking carries nothing yet
    policy.observe(0, 0, 2.0, 0.0)
    assert policy.queue[(0, 0)] == 50.0  # a host's first feedback is taken as it is
    assert policy.service_ms[(0, 0)] == 1.0
    assert policy.response_ms[(0, 0)] == pytest.approx(0.1 * 2.0)  # EWMA alpha 0.9 from 0
    policy.feedback(0, 0, 10.0, 3.0)
    policy.observe(0, 0, 2.0, 1.0)
    assert policy.queue[(0, 0)] == pytest.approx(0.9 * 50.0 + 0.1 * 10.0)
    assert policy.service_ms[(0, 0)] == pytest.approx(0.9 * 1.0 + 0.1 * 3.0)


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


def test_a_host_without_room_in_its_window_is_skipped_and_none_holds_the_request():
    policy = c3(servers=[1, 1, 1])
    rng = np.random.default_rng(3)
    for host in policy.rate:
        policy.rate[host] = 2.0
    chosen = [policy.choose(rng, 0.0) for _ in range(7)]
    assert chosen[-1] is None  # 3 hosts x 2 a window
    assert sum(h is not None for h in chosen) == 6
    assert policy.held_until_ms == pytest.approx(C3.window_ms)
    assert policy.choose(rng, C3.window_ms) is not None  # the next window has room


def test_rate_control_follows_the_simulators_kernel():
    """The same sends and answers per window through the live C3 and the simulator's
    _c3_window: the same rates, window after window."""
    from geoslo.sim.kurma import _kernels as K
    from geoslo.sim.kurma._env import C3_PAPER_TEXT_PARAMS, DEFAULT_POLICY_PARAMS

    defaults = {**DEFAULT_POLICY_PARAMS, **C3_PAPER_TEXT_PARAMS}  # the live client's variant

    params = np.zeros(K.NPP)
    for attribute, column in (
        ("beta", K.PP_C3_BETA), ("gamma", K.PP_C3_GAMMA), ("smax", K.PP_C3_SMAX),
        ("hysteresis_ms", K.PP_C3_HYST_MS), ("min_rate", K.PP_C3_MIN_RATE),
    ):  # fmt: skip
        params[column] = defaults[f"c3_{attribute}"]
        assert getattr(C3, attribute) == params[column]  # the same defaults as the simulator
    policy = c3(servers=[1, 1, 1])
    gs = np.zeros((1, 3, K.NGS))
    gs[0, :, K.GS_C3_RATE] = gs[0, :, K.GS_C3_R0] = C3.initial_rate
    gs[0, :, K.GS_C3_TDEC] = -1e9
    rng = np.random.default_rng(4)
    hosts = [(0, 0), (1, 0), (2, 0)]
    policy.choose(rng, 0.0)  # opens the first window at 0
    policy.sent[(0, 0)] -= 1
    policy.outstanding[(0, 0)] -= 1
    for window in range(1, 60):
        t = window * C3.window_ms
        for g, host in enumerate(hosts):
            sent, received = rng.integers(0, 40), rng.integers(0, 40)
            policy.sent[host], policy.received[host] = int(sent), int(received)
            gs[0, g, K.GS_C3_SENT], gs[0, g, K.GS_C3_RECV] = sent, received
        policy._close_windows(t)
        K._c3_window(gs, t, params)
        for g, host in enumerate(hosts):
            assert policy.rate[host] == pytest.approx(gs[0, g, K.GS_C3_RATE], rel=1e-9)


def test_make_policy_gives_c3_one_client_per_site_by_default():
    assert make_policy("C3", 0, SERVERS, NEAREST).n_clients == 3
    assert make_policy("C3", 0, SERVERS, NEAREST, n_clients=12).n_clients == 12
    with pytest.raises(InputError):
        C3(0, SERVERS, NEAREST, 0)


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
    policy.feedback(0, 0, 0.0, 0.0)  # the feedback process has not timed the server yet
    policy.observe(0, 0, 2.0, 0.0)
    assert (0, 0) not in policy.fed
    policy.feedback(0, 0, 4.0, 0.5)
    policy.observe(0, 0, 2.0, 1.0)
    assert policy.queue[(0, 0)] == 4.0 and policy.service_ms[(0, 0)] == 0.5

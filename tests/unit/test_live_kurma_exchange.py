"""Which sites take part in a round, from the states the instance holds (Kurma §6, §9), and
which state messages it takes at all."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from geoslo.live.kurma._agent import (
    _valid_state,
    client_demand,
    measurements_from_states,
    views_agree,
)
from geoslo.live.kurma._client_metrics import ClientTotals

N = 3


def state(site: int, round_k: int, backend_up: bool = True, arrivals: int = 100) -> dict:
    return {
        "site": site,
        "round": round_k,
        "backend_up": backend_up,
        "arrivals": arrivals,
        "writes": arrivals // 10,
        "requests": [arrivals if j == site else 5 for j in range(N)],
        "violations": [1, 0, 0],
        "wan_bytes": [0 if j == site else 750 for j in range(N)],
        "min_response_ms": [0.3 if j == site else None for j in range(N)],
        "probe_rtt_ms": [None if j == site else 12.5 for j in range(N)],
    }


@pytest.mark.parametrize(
    "states, expected",
    [
        ({0: state(0, 10), 1: state(1, 10), 2: state(2, 10)}, [True, True, True]),
        ({0: state(0, 10), 1: state(1, 9), 2: state(2, 10)}, [True, True, True]),  # late by one
        ({0: state(0, 10), 1: state(1, 8), 2: state(2, 10)}, [True, False, True]),  # silent
        ({0: state(0, 10), 2: state(2, 10)}, [True, False, True]),  # never heard
        ({0: state(0, 10), 1: state(1, 10), 2: state(2, 10, False)}, [True, True, False]),
        ({0: state(0, 10, False)}, [False, False, False]),
    ],
)
def test_availability(states, expected):
    m = measurements_from_states(states, 10, N, 2.5)
    assert m.available.tolist() == expected


def test_an_excluded_site_contributes_nothing_and_others_fill_their_rows():
    m = measurements_from_states({0: state(0, 10, arrivals=200), 1: state(1, 7)}, 10, N, 2.5)
    assert m.duration_s == 2.5
    assert m.arrivals.tolist() == [200, 0, 0] and m.writes.tolist() == [20, 0, 0]
    assert m.requests[0].tolist() == [200, 5, 5] and not m.requests[1:].any()
    assert m.violations[0].tolist() == [1, 0, 0]
    assert m.min_response_ms[0, 0] == 0.3 and np.isinf(m.min_response_ms[0, 1:]).all()
    assert np.isinf(m.probe_rtt_ms[0, 0]) and (m.probe_rtt_ms[0, 1:] == 12.5).all()
    assert np.isinf(m.min_response_ms[1:]).all()


def test_a_site_that_comes_back_is_readmitted():
    states = {0: state(0, 12), 1: state(1, 9)}
    assert not measurements_from_states(states, 12, N, 2.5).available[1]
    states[1] = state(1, 12)
    assert measurements_from_states(states, 12, N, 2.5).available[1]


def with_field(key, value):
    message = {"type": "state", **state(1, 10)}
    if value is DROP:
        del message[key]
    else:
        message[key] = value
    return message


DROP = object()


@pytest.mark.parametrize(
    ("message", "valid"),
    [
        ({"type": "state", **state(1, 10)}, True),
        (with_field("min_response_ms", [None, None, None]), True),
        (with_field("arrivals", 12.5), True),
        (with_field("site", 0), False),  # claims to be the receiving site itself
        (with_field("site", 3), False),
        (with_field("site", -1), False),
        (with_field("site", "1"), False),
        (with_field("site", True), False),
        (with_field("round", DROP), False),
        (with_field("round", 1.5), False),
        (with_field("backend_up", 1), False),
        (with_field("arrivals", -1), False),
        (with_field("arrivals", float("nan")), False),
        (with_field("writes", None), False),
        (with_field("requests", [1, 2]), False),  # one site short
        (with_field("requests", [1, 2, 3, 4]), False),
        (with_field("requests", [1, None, 3]), False),
        (with_field("violations", "0,0,0"), False),
        (with_field("wan_bytes", DROP), False),
        (with_field("min_response_ms", [0.3, float("inf"), None]), False),
        (with_field("probe_rtt_ms", [None, -2.0, 1.0]), False),
        (with_field("view", [True, False, True]), True),
        (with_field("view", None), True),  # an agent's first round
        (with_field("view", [True, False]), False),
        (with_field("view", [1, 0, 1]), False),
    ],
)
def test_only_well_formed_states_from_other_sites_are_taken(message, valid):
    assert _valid_state(message, N, me=0) is valid
    if valid:  # what is taken, measurements_from_states can read
        measurements_from_states({message["site"]: message}, 10, N, 2.5)


ALL = [True, True, True]


def viewed(site: int, view) -> dict:
    return {**state(site, 10), "view": view}


@pytest.mark.parametrize(
    "own, views, available, agreed",
    [
        (ALL, {1: ALL, 2: ALL}, ALL, True),  # steady
        # an asymmetric partition: site 1 no longer hears site 0, site 0 still hears site 1
        (ALL, {1: [False, True, True], 2: ALL}, ALL, False),  # seen from site 0
        (ALL, {1: ALL, 2: [False, True, True]}, ALL, False),
        # site 2 failed and every agent saw it: the first round with the new view holds
        # local (the views sent were of the round before), the next one agrees
        (ALL, {1: ALL}, [True, True, False], False),
        ([True, True, False], {1: [True, True, False]}, [True, True, False], True),
        (None, {1: ALL, 2: ALL}, ALL, False),  # this agent's first round
    ],
)
def test_a_plan_is_applied_only_when_every_view_agrees(own, views, available, agreed):
    states = {0: viewed(0, own)} | {j: viewed(j, v) for j, v in views.items()}
    ok, compared = views_agree(states, np.array(available), own, me=0)
    assert ok is agreed
    assert set(compared) == {0} | {j for j in views if available[j]}


def answer(round_k: int, arrivals: float) -> dict:
    counts = replace(ClientTotals.zero(N), arrivals=arrivals, writes=arrivals / 10)
    return {"round": round_k, "counts": counts}


def test_a_client_late_for_a_round_is_taken_at_its_last_demand_and_not_twice_after():
    # on time in round 7; no answer in round 8; in round 9 its late answer to 8 comes too
    assert client_demand([answer(7, 500.0)], 7, None) == (500.0, 50.0)
    assert client_demand([], 8, (500.0, 50.0)) == (500.0, 50.0)
    assert client_demand([answer(8, 510.0), answer(9, 490.0)], 9, (500.0, 50.0)) == (490.0, 49.0)
    assert client_demand([], 1, None) == (0.0, 0.0)  # nothing known yet

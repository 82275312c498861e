"""A failed server (Kurma §9): the site plans on its reduced-capacity curve, from the share
of its servers that its agent finds up."""

from __future__ import annotations

import numpy as np
import pytest

from geoslo.control.kurma import (
    IntervalMeasurements,
    KurmaConfig,
    KurmaController,
    KurmaModel,
)
from geoslo.dist import LatencyDistribution
from geoslo.live.kurma._agent import _valid_state, measurements_from_states
from geoslo.models import SloSurface, mmc_violation_surface

SITES = ("a", "b", "c")
SERVERS, SERVER_RPS, SLO_MS = 2, 500.0, 30.0


def mm_site_surface() -> SloSurface:
    """Two M/M/1 servers, a request at a random one (the live testbed's site)."""
    loads = np.linspace(0.0, 0.98 * SERVERS * SERVER_RPS, 60)
    bases = np.arange(0.0, 31.0)
    violation = mmc_violation_surface(
        1, SERVER_RPS, loads / SERVERS, SLO_MS, bases, LatencyDistribution.point(1.0)
    )
    return SloSurface(bases, np.array([0.0]), loads, violation[:, None, :])


def model() -> KurmaModel:
    surface = mm_site_surface()
    return KurmaModel(SITES, np.full(3, SERVERS * SERVER_RPS), (surface,) * 3, 0.2)


def test_half_the_servers_is_the_whole_site_at_twice_the_load():
    full = model()
    half = full.with_capacity_share(np.array([1.0, 0.5, 1.0]))
    assert full.with_capacity_share(np.ones(3)) is full
    assert half.capacity_rps.tolist() == [1000.0, 500.0, 1000.0]
    for load in (100.0, 200.0, 300.0):
        assert half.surface(0, 1).curve(10)(load) == pytest.approx(
            full.surface(0, 1).curve(10)(2 * load)
        )
        assert half.surface(1, 0).curve(10)(load) == full.surface(1, 0).curve(10)(load)
    # and as the servers really are: one M/M/1 server left takes the site's whole load
    one = mmc_violation_surface(1, SERVER_RPS, np.array([300.0]), SLO_MS, np.array([10.0]),
                                LatencyDistribution.point(1.0))  # fmt: skip
    assert half.surface(0, 1).curve(10)(300.0) == pytest.approx(one[0, 0], abs=0.01)


def measurements(share: np.ndarray) -> IntervalMeasurements:
    arrivals = np.array([1900.0, 500.0, 500.0])  # a overloaded: 760 req/s for 2.5 s
    requests = np.diag(arrivals)
    rtt = np.full((3, 3), 10.0) - 10.0 * np.eye(3)
    return IntervalMeasurements(
        2.5, arrivals, np.zeros(3), requests, np.zeros((3, 3)), np.full((3, 3), np.inf), rtt,
        np.ones(3, dtype=bool), share,
    )  # fmt: skip


def test_a_site_with_a_failed_server_takes_less_of_the_overload():
    config = KurmaConfig(solve_time_limit_s=5.0)
    redirected_to_b = []
    for share in (np.ones(3), np.array([1.0, 0.5, 1.0])):
        controller = KurmaController(model(), config)
        routing = controller.step(measurements(share))
        redirected_to_b.append(routing.plan.rates_rps[0, 1])
        load_b = routing.plan.rates_rps[:, 1].sum()
        assert load_b <= controller.model_in_force.capacity_rps[1]
    assert redirected_to_b[1] < redirected_to_b[0] - 50  # b's spare capacity halved


def test_the_agents_state_carries_the_share_of_servers_up():
    base = {
        "site": 1, "round": 4, "backend_up": True, "arrivals": 10, "writes": 0,
        "requests": [0, 10, 0], "violations": [0, 0, 0], "wan_bytes": [0, 0, 0],
        "min_response_ms": [None, 1.0, None], "probe_rtt_ms": [5.0, None, 5.0],
    }  # fmt: skip
    m = measurements_from_states(
        {1: {**base, "capacity_share": 0.5}, 0: {**base, "site": 0}}, 4, 3, 2.5
    )
    assert m.capacity_share.tolist() == [1.0, 0.5, 1.0]  # an older agent's state: all up
    assert _valid_state({**base, "capacity_share": 0.5}, 3, 0)
    for bad in (1.5, -0.1, "half", None):
        assert not _valid_state({**base, "capacity_share": bad}, 3, 0)

"""The Kurma agent's pure decisions about failures (issue 42): the failover row of a site
whose own stores are down, why each peer is unavailable, when a client counts as silent,
the plan record ``/plan`` serves, how the runtime turns an environment's reasons into
``/healthz`` 503 and warning records, how far client counts are trusted, and the clients'
port beyond loopback."""

from __future__ import annotations

import asyncio
import io
import json
from dataclasses import replace

import numpy as np
import pytest

from geoslo.control import Outcome
from geoslo.errors import ConfigError
from geoslo.live.kurma import AgentPlan, AgentSpec
from geoslo.live.kurma._agent import (
    checked_scale,
    client_silent,
    clients_listen_warning,
    failover_row,
    peer_problems,
)
from geoslo.runtime import ServiceLog, ServiceLoop, ServiceSettings
from geoslo.runtime._metrics import Health
from geoslo.runtime.kurma import agent_plan_record
from geoslo.runtime.replication import SYSTEM, ReplicationSettings, SimulatorSettings

SITES = ("East", "West", "North")


@pytest.mark.parametrize(
    ("available", "capacity_rps", "served_rps", "row"),
    [
        # room 600 at West and 200 at North: shared 3:1, nothing local
        ([False, True, True], [1000, 1000, 1000], [0, 400, 800], [0.0, 0.75, 0.25]),
        # North full: everything to West
        ([False, True, True], [1000, 1000, 1000], [0, 400, 1200], [0.0, 1.0, 0.0]),
        # nobody has room: by capacity (a slow answer beats a failed one)
        ([False, True, True], [1000, 3000, 1000], [0, 4000, 1200], [0.0, 0.75, 0.25]),
        # North unavailable: it gets nothing however much room it has
        ([False, True, False], [1000, 1000, 1000], [0, 900, 0], [0.0, 1.0, 0.0]),
        # nobody else available: all local (nothing better)
        ([False, False, False], [1000, 1000, 1000], [0, 0, 0], [1.0, 0.0, 0.0]),
    ],
)
def test_the_failover_row_sends_nothing_local_and_follows_the_room(
    available, capacity_rps, served_rps, row
):
    got = failover_row(0, np.array(available), np.array(capacity_rps), np.array(served_rps))
    np.testing.assert_allclose(got, row)
    assert got.sum() == pytest.approx(1.0) and (got >= 0).all()


def state(k: int, backend_up: bool = True) -> dict:
    return {"round": k, "backend_up": backend_up}


def test_each_unavailable_peer_is_named_with_its_reason():
    states = {0: state(10), 1: state(7), 2: state(10, backend_up=False)}
    assert peer_problems(states, 10, SITES, 0) == [
        "peer West: no state since round 7",
        "peer North: its stores are down",
    ]
    assert peer_problems({0: state(10)}, 10, SITES[:2], 0) == [
        "peer West: no state received (unreachable, or another key)"
    ]
    assert peer_problems({0: state(10), 1: state(9)}, 10, SITES[:2], 0) == []  # late by one


@pytest.mark.parametrize(
    ("joined", "answered", "k", "silent"),
    [
        (5, -1, 5, False),  # its first collection: not silent yet
        (5, -1, 6, True),  # two collections, no answer
        (5, 5, 6, False),  # one missed (a busy machine): not yet
        (5, 5, 7, True),
        (5, 9, 10, False),
    ],
)
def test_a_client_is_silent_after_two_collections_without_an_answer(joined, answered, k, silent):
    assert client_silent(joined, answered, k) is silent


def test_the_plan_record_gives_the_row_round_time_status_and_source():
    plan = AgentPlan(np.array([0.0, 1.0]), Outcome("feasible", "failover"), round=8, failover=True)
    record = agent_plan_record(("East", "West"), "East", 2.5, 100.0, plan)
    assert record == {
        "sites": ["East", "West"],
        "site": "East",
        "row": [0.0, 1.0],
        "round": 8,
        "round_unix_s": 120.0,
        "status": "feasible",
        "solver_status": "failover",
        "source": "failover",
    }
    json.dumps(record, allow_nan=False)
    disagree = replace(plan, failover=False, views_disagree={0: [True, True]})
    assert agent_plan_record(("East", "West"), "East", 2.5, 0.0, disagree)["source"] == (
        "views_disagree"
    )


def test_health_is_503_with_the_reasons_while_degraded():
    health = Health(stale_after_s=60.0)
    health.completed("optimal", ["local store 127.0.0.1:6379 does not accept connections"])
    status, body = health.report()
    assert status == 503 and body["status"] == "degraded"
    assert body["degraded"] == ["local store 127.0.0.1:6379 does not accept connections"]
    health.completed("optimal", [])
    status, body = health.report()
    assert status == 200 and body["status"] == "ok" and "degraded" not in body


class Degrading:
    """The real simulated link, degraded on chosen intervals (counted from 1)."""

    def __init__(self, inner, degraded_on) -> None:
        self.inner, self.simulated = inner, inner.simulated
        self.degraded_on, self.observed = set(degraded_on), 0

    async def start(self) -> None:
        await self.inner.start()

    async def observe(self):
        self.observed += 1
        return await self.inner.observe()

    async def apply(self, plan) -> None:
        await self.inner.apply(plan)

    async def close(self) -> None:
        await self.inner.close()

    def degraded_reasons(self) -> list[str]:
        return ["the link is half down"] if self.observed in self.degraded_on else []


def test_the_loop_logs_a_warning_when_degraded_and_a_line_when_it_recovers():
    service = SYSTEM.build(
        ReplicationSettings(policy="mpc"),
        SimulatorSettings(kind="simulator", application_mbps=[80.0], replication_mbps=[30.0]),
        10.0,
    )
    environment = Degrading(service.environment, degraded_on={2, 3})
    stream = io.StringIO()
    loop = ServiceLoop(
        replace(service, environment=environment),
        ServiceSettings(),
        ServiceLog("replication", stream),
    )

    async def run() -> list:
        await environment.start()
        return [await loop.run_interval() for _ in range(5)]

    reports = asyncio.run(run())
    assert [bool(r.degraded) for r in reports] == [False, True, True, False, False]
    assert all(not r.errors for r in reports)
    assert loop.degraded_intervals == 2 and loop.failed_intervals == 0
    records = [json.loads(line) for line in stream.getvalue().splitlines()]
    changes = [(r["event"], r["interval"]) for r in records if r["event"] != "interval"]
    assert changes == [("degraded", 2), ("recovered", 4)]
    (warning,) = [r for r in records if r["event"] == "degraded"]
    assert warning["level"] == "warning" and warning["reasons"] == ["the link is half down"]
    assert loop.health.report()[0] == 200


@pytest.mark.parametrize(
    ("arrivals", "local", "executed", "share", "scale"),
    [
        (100.0, 100.0, 105.0, 1.0, 1.0),  # honest: the stores executed what was claimed
        (115.0, 100.0, 100.0, 1.0, 1.0),  # within the slack (10% + 20)
        (1000.0, 1000.0, 100.0, 1.0, 0.1),  # the lie: scaled to what the stores executed
        (1000.0, 50.0, 50.0, 0.5, 0.1),  # arrivals over executed / share (100)
        (1000.0, 50.0, 50.0, None, 1.0),  # no row in force: only local requests are checked
        (1000.0, 50.0, 50.0, 0.01, 1.0),  # a share too small to bound anything
        (1000.0, 1000.0, None, 1.0, 1.0),  # the counters could not be read: unchecked
    ],
)
def test_client_counts_are_scaled_to_what_the_stores_executed(
    arrivals, local, executed, share, scale
):
    assert checked_scale(arrivals, local, executed, share) == pytest.approx(scale)


def test_a_clients_port_beyond_loopback_needs_a_secret_and_is_warned_about():
    peers = {"West": ("127.0.0.1", 7400)}
    spec = dict(
        sites=("East", "West"), site="East", peers=peers, exchange_listen=("127.0.0.1", 7401),
        servers=(("127.0.0.1", 6379),), secret_file="exchange.key",
    )  # fmt: skip
    with pytest.raises(ConfigError, match="clients_secret_file") as refused:
        AgentSpec(clients_listen=("0.0.0.0", 7402), **spec)
    assert "beyond loopback" in refused.value.problem
    AgentSpec(clients_listen=("0.0.0.0", 7402), clients_secret_file="clients.key", **spec)
    AgentSpec(clients_listen=("127.0.0.1", 7402), **spec)  # loopback: plain reports allowed
    assert clients_listen_warning("127.0.0.1", sealed=False) is None
    assert "sealed reports only" in clients_listen_warning("0.0.0.0", sealed=True)
    assert "UNSEALED" in clients_listen_warning("10.0.0.5", sealed=False)

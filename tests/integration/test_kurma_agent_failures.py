"""Kurma's agent when something fails, as ``geoslo run`` runs it (issue 42, items 2, 4, 5):
``/plan`` serves the site's row; a dead local Redis turns ``/healthz`` 503 naming it, a
warning goes to the log, the site's clients fail over to the other site through the
agent's row, and restarting the Redis turns it back to 200. Real redis-server processes,
real agents, real clients; the deadlines are counted in the agents' own intervals."""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import _kurma_agents as shared
import pytest

from _run import http_get, parse_log
from geoslo.live._backend import GetSetWork, key_name
from geoslo.live._processes import (
    ManagedProcess,
    free_ports,
    python_module_command,
    redis_server_command,
)
from geoslo.live.kurma import SiteClient, StoreEndpoints
from geoslo.live.kurma._instance import AGENT_START_TIMEOUT_S

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(400),
    pytest.mark.skipif(not shutil.which("redis-server"), reason="redis-server is not installed"),
]

SITES = shared.SITES
INTERVAL_S = 1.0
WAIT_S = 90.0  # a bound on a broken run only; what is asserted is counted in intervals


def agent_toml(site: str, ports: dict, secret: Path, model: Path) -> str:
    redis_address = f"127.0.0.1:{ports[site]['redis']}"
    files = {"model_file": str(model)}
    return shared.agent_toml(site, ports, [redis_address], secret, INTERVAL_S, "perf", files)


def get_json(port: int, path: str) -> tuple[int, dict]:
    status, body = http_get(f"http://127.0.0.1:{port}{path}")
    return status, json.loads(body)


def redis(tmp_path: Path, site: str, port: int) -> ManagedProcess:
    command = redis_server_command(shutil.which("redis-server"), f"redis-{site}", port, tmp_path)
    return ManagedProcess(f"redis-{site}", command, tmp_path / f"redis-{site}.log", port)


def test_a_dead_local_redis_shows_fails_over_and_recovers(tmp_path):
    numbers = iter(free_ports(4 * len(SITES)))
    ports = {
        s: {k: next(numbers) for k in ("redis", "exchange", "clients", "metrics")} for s in SITES
    }
    secret = shared.write_secret(tmp_path / "exchange.key")
    model = shared.mm1_model_file(tmp_path / "model.npz")
    servers = {site: redis(tmp_path, site, ports[site]["redis"]).start() for site in SITES}
    agents: list[ManagedProcess] = []
    try:
        for site in SITES:
            config = tmp_path / f"agent-{site}.toml"
            config.write_text(agent_toml(site, ports, secret, model))
            command = python_module_command("geoslo", "run", str(config))
            log = tmp_path / f"agent-{site}.log"
            agents.append(ManagedProcess(f"agent-{site}", command, log, ports[site]["clients"]))
        with ThreadPoolExecutor(len(agents)) as pool:  # both warm their solvers at once
            list(pool.map(lambda a: a.start(wait_timeout_s=AGENT_START_TIMEOUT_S), agents))
        result = asyncio.run(_scenario(ports, servers))
    finally:
        for process in [*reversed(agents), *servers.values()]:
            process.stop()
    east_log, _ = parse_log((tmp_path / "agent-East.log").read_text())
    store = f"127.0.0.1:{ports['East']['redis']}"

    # /plan: the site's row, its round and that round's time, its status
    plan = result["plan"]
    assert plan["system"] == "kurma" and plan["plan"]["site"] == "East"
    assert plan["plan"]["sites"] == list(SITES) and sum(plan["plan"]["row"]) == pytest.approx(1)
    assert plan["plan"]["round"] >= 1 and plan["plan"]["status"] in ("optimal", "feasible")
    assert plan["plan"]["round_unix_s"] == pytest.approx(plan["plan"]["round"] * INTERVAL_S)

    # the dead store: 503 naming it within a few of the agent's intervals, a warning logged
    status, body = result["down_health"]
    assert status == 503 and body["status"] == "degraded"
    assert any(store in reason for reason in body["degraded"]), body
    assert result["intervals_to_503"] <= 4, result["intervals_to_503"]
    warnings = [
        r for r in east_log if r["event"] == "degraded" and any(store in x for x in r["reasons"])
    ]
    assert warnings and warnings[0]["level"] == "warning"
    west_status, west_body = result["west_health"]  # the peer says why East is out
    assert west_status == 503 and "peer East: its stores are down" in west_body["degraded"]

    # failover: East's row sends nothing local, and East's requests succeed at West
    assert result["failover_plan"]["source"] == "failover"
    assert result["failover_plan"]["row"] == [0.0, 1.0]
    sent, failed, at_west = result["failover_requests"]
    assert sent >= 50, result["failover_requests"]
    assert failed <= 0.05 * sent, result["failover_requests"]
    assert at_west >= 0.95 * sent, result["failover_requests"]

    # restarted: 200 again, and the log says so
    assert result["up_health"][0] == 200, result["up_health"]
    assert "degraded" not in result["up_health"][1]
    recovered = [r for r in east_log if r["event"] == "recovered"]
    assert recovered and recovered[-1]["interval"] > warnings[0]["interval"]


async def _scenario(ports: dict, servers: dict[str, ManagedProcess]) -> dict:
    """Both sites up and planned; East's Redis killed; East's client's requests while the
    agent fails it over; East's Redis restarted. What was seen at each step."""
    east, west = ports["East"]["metrics"], ports["West"]["metrics"]
    clients = {}
    for site in SITES:
        endpoints = StoreEndpoints(
            SITES,
            site,
            tuple(((("127.0.0.1", ports[s]["redis"]),)) for s in SITES),
            ("127.0.0.1", ports[site]["clients"]),
        )
        clients[site] = await SiteClient(endpoints, GetSetWork(64), "KurmaPerf").start()
    load = asyncio.ensure_future(_load(clients))
    result: dict = {}
    try:
        key = key_name(1)  # written everywhere (the client propagates it) before the failure
        assert await clients["East"].put(key, clients["East"].work.write_value())
        await clients["East"].drain()
        result["plan"] = (await _until(lambda: _plan(east), "a plan at East"))[1]
        await _until(lambda: _healthy(east) and _healthy(west), "both agents healthy")

        _, before = get_json(east, "/healthz")
        servers["East"].stop()  # SIGKILL: the site's only Redis is gone
        store = f"127.0.0.1:{ports['East']['redis']}"
        result["down_health"] = await _until(lambda: _naming(east, store), "East naming it")
        result["intervals_to_503"] = result["down_health"][1]["intervals"] - before["intervals"]
        result["west_health"] = await _until(
            lambda: _reason(west, "peer East: its stores are down"), "West naming East"
        )
        failover = await _until(lambda: _plan(east, source="failover"), "East failing over")
        result["failover_plan"] = failover[1]["plan"]
        await _until(lambda: clients["East"].plans_received and _follows(clients["East"]), "row")
        result["failover_requests"] = await _count(clients["East"], key, seconds=2 * INTERVAL_S)

        servers["East"].start()
        result["up_health"] = await _until(lambda: _healthy(east), "East healthy again")
    finally:
        load.cancel()
        for client in clients.values():
            await client.close()
    return result


async def _load(clients: dict[str, SiteClient]) -> None:
    """Every client's demand, 50 GETs a second each, for the agents to plan on."""
    key = key_name(1)
    while True:
        await asyncio.gather(*(c.get(key) for c in clients.values()))
        await asyncio.sleep(0.02)


def _follows(client: SiteClient) -> bool:
    return client.policy.row[0] == 0.0


async def _count(client: SiteClient, key: bytes, seconds: float) -> tuple[int, int, int]:
    """The client's requests over ``seconds`` (the background load's and more GETs of
    ``key``), from its own log: (sent, failed, served at West)."""
    requests, failures = client.log.requests, client.log.failures
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        await client.get(key)
        await asyncio.sleep(0.01)
    sent = client.log.requests - requests
    return int(sent.sum()), int((client.log.failures - failures).sum()), int(sent[1])


async def _until(probe, what: str):
    """``probe()``'s first true value, polled (in a thread: the HTTP calls block)."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        found = await asyncio.to_thread(probe)
        if found:
            return found
        await asyncio.sleep(0.1)
    raise AssertionError(f"no {what} within {WAIT_S:g} s")


def _plan(port: int, source: str | None = None):
    status, body = get_json(port, "/plan")
    if status != 200 or (source is not None and body["plan"]["source"] != source):
        return None
    return status, body


def _healthy(port: int) -> tuple[int, dict] | None:
    status, body = get_json(port, "/healthz")
    return (status, body) if status == 200 and body["intervals"] > 0 else None


def _naming(port: int, text: str) -> tuple[int, dict] | None:
    status, body = get_json(port, "/healthz")
    named = any(text in reason for reason in body.get("degraded", []))
    return (status, body) if named else None


def _reason(port: int, reason: str) -> tuple[int, dict] | None:
    status, body = get_json(port, "/healthz")
    return (status, body) if reason in body.get("degraded", []) else None

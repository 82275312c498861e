"""Kurma's agent and the clients of its site (issue 42, item 5): with a clients secret the
agent takes only sealed reports (a plain client and one with another key are refused,
their requests never counted), and a client that lies about its demand cannot move the
plan beyond what the site's stores executed (the agent reads their ``INFO``). Real
redis-server processes, real agents (``geoslo run``) and clients, loopback only."""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import _kurma_agents as shared
import pytest

from _metrics import scrape
from _run import http_get
from geoslo.live._backend import GetSetWork, key_name
from geoslo.live._exchange import seal
from geoslo.live._processes import (
    ManagedProcess,
    free_ports,
    python_module_command,
    redis_server_command,
)
from geoslo.live._resp import RedisConnection
from geoslo.live.kurma import (
    InstanceConfig,
    SiteClient,
    StoreEndpoints,
    Testbed,
    TestbedSpec,
    start_instance,
)
from geoslo.live.kurma._client import agent_clients_name
from geoslo.live.kurma._client_metrics import ClientMetrics
from geoslo.live.kurma._instance import AGENT_START_TIMEOUT_S

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(400),
    pytest.mark.skipif(not shutil.which("redis-server"), reason="redis-server is not installed"),
]

SITES = shared.SITES
INTERVAL_S = 1.0
LIE_RPS = 950.0  # what the lying client claims, on top of the site's real demand
WAIT_S = 90.0


def agent_toml(site: str, ports: dict, files: dict) -> str:
    environment = {"clients_secret_file": str(files["clients"]), "model_file": str(files["model"])}
    redis_address = f"127.0.0.1:{ports[site]['redis']}"
    return shared.agent_toml(
        site, ports, [redis_address], files["exchange"], INTERVAL_S, "perf", environment
    )


def test_only_sealed_reports_count_and_a_lying_client_cannot_move_the_plan(tmp_path):
    numbers = iter(free_ports(4 * len(SITES)))
    ports = {
        s: {k: next(numbers) for k in ("redis", "exchange", "clients", "metrics")} for s in SITES
    }
    files = {
        "exchange": shared.write_secret(tmp_path / "exchange.key"),
        "clients": shared.write_secret(tmp_path / "clients.key"),
        "other": shared.write_secret(tmp_path / "other.key"),
        "model": shared.mm1_model_file(tmp_path / "model.npz"),
    }
    started: list[ManagedProcess] = []
    try:
        for site in SITES:
            command = redis_server_command(
                shutil.which("redis-server"), f"redis-{site}", ports[site]["redis"], tmp_path
            )
            log = tmp_path / f"redis-{site}.log"
            started.append(ManagedProcess(f"redis-{site}", command, log, ports[site]["redis"]))
            started[-1].start()
        agents = []
        for site in SITES:
            config = tmp_path / f"agent-{site}.toml"
            config.write_text(agent_toml(site, ports, files))
            command = python_module_command("geoslo", "run", str(config))
            log = tmp_path / f"agent-{site}.log"
            agents.append(ManagedProcess(f"agent-{site}", command, log, ports[site]["clients"]))
        started += agents
        with ThreadPoolExecutor(len(agents)) as pool:  # both warm their solvers at once
            list(pool.map(lambda a: a.start(wait_timeout_s=AGENT_START_TIMEOUT_S), agents))
        seen = asyncio.run(_scenario(ports, files))
    finally:
        for process in reversed(started):
            process.stop()

    # refused: a plain client (malformed) and one with another key (unauthenticated)
    rejected = seen["rejected"]
    assert rejected["malformed"] >= 1 and rejected["unauthenticated"] >= 1, rejected
    assert any("clients: refused" in reason for reason in seen["refused_health"]["degraded"])
    # their requests are never counted: the agent counts the sealed client's only
    honest, strangers, counted = seen["honest_sent"], seen["strangers_sent"], seen["counted"]
    assert strangers >= 100, strangers  # counting them would show
    assert 0.5 * honest <= counted <= honest + 1, (counted, honest, strangers)

    # the liar: the demand the agents plan on stays within what East's Redis executed
    executed_rps, demand_rps = seen["executed_rps"], seen["demand_rps"]
    assert executed_rps < 0.3 * LIE_RPS, executed_rps  # the lie would be visible
    assert max(demand_rps) <= 1.5 * executed_rps + 30.0, (demand_rps, executed_rps)
    assert seen["west_share"] == pytest.approx(0.0, abs=0.01), seen["west_share"]
    assert seen["lie_named"], "the lie never named in /healthz"


async def _scenario(ports: dict, files: dict) -> dict:
    seen: dict = {}
    east = ports["East"]

    def endpoints(site: str, key: Path | None) -> StoreEndpoints:
        return StoreEndpoints(
            SITES,
            site,
            tuple(((("127.0.0.1", ports[s]["redis"]),)) for s in SITES),
            ("127.0.0.1", ports[site]["clients"]),
            agent_secret_file=None if key is None else str(key),
        )

    def client(site: str, key: Path | None) -> SiteClient:
        return SiteClient(endpoints(site, key), GetSetWork(64), "KurmaPerf")

    honest = await client("East", files["clients"]).start()
    west = await client("West", files["clients"]).start()
    plain = await client("East", None).start()
    stranger = await client("East", files["other"]).start()
    everyone = [honest, west, plain, stranger]
    key = key_name(3)
    assert await honest.put(key, honest.work.write_value())
    await honest.drain()
    load = asyncio.ensure_future(_load(everyone, key))
    try:
        # phase 1: three clients at East, one sealed with the agents' clients key
        status, body = await _until(lambda: _naming(east["metrics"], "clients: refused"), "refused")
        seen["refused_health"] = body
        await asyncio.sleep(3 * INTERVAL_S)
        load.cancel()
        for other in (plain, stranger):
            await other.close()
        await honest.close()  # its last report is sent unasked: every request counted
        await asyncio.sleep(2 * INTERVAL_S)
        metrics = await asyncio.to_thread(scrape, east["metrics"])
        seen["rejected"] = {
            reason: metrics[("geoslo_kurma_clients_rejected_total", (("reason", reason),))]
            for reason in ("malformed", "unauthenticated")
        }
        seen["counted"] = sum(
            metrics[("geoslo_kurma_requests_total", (("dst", dst),))] for dst in SITES
        )
        seen["honest_sent"] = float(honest.metrics.totals().requests.sum())
        seen["strangers_sent"] = float(
            plain.metrics.totals().requests.sum() + stranger.metrics.totals().requests.sum()
        )

        # phase 2: a sealed client that claims 950 req/s more than the site asks
        honest = await client("East", files["clients"]).start()
        everyone = [honest, west]
        load = asyncio.ensure_future(_load(everyone, key))
        liar = asyncio.ensure_future(_lie(east["clients"], files["clients"]))
        redis = await RedisConnection.open(east["redis"])
        executed_before, t0 = await _commands(redis), time.monotonic()
        demand, west_share, named = [], [], []
        await asyncio.sleep(INTERVAL_S)  # the liar's first report is its baseline
        end = time.monotonic() + 5 * INTERVAL_S
        while time.monotonic() < end:
            metrics = await asyncio.to_thread(scrape, ports["West"]["metrics"])
            demand.append(metrics[("geoslo_kurma_demand_requests_per_second", (("site", "East"),))])
            status, plan = await asyncio.to_thread(_plan, east["metrics"])
            if status == 200:
                west_share.append(plan["plan"]["row"][1])
            named.append(await asyncio.to_thread(_naming, east["metrics"], "reports exceed"))
            await asyncio.sleep(0.2)
        seen["lie_named"] = [body for body in named if body is not None]
        seen["executed_rps"] = (await _commands(redis) - executed_before) / (time.monotonic() - t0)
        seen["demand_rps"] = demand
        seen["west_share"] = max(west_share)
        liar.cancel()
        await redis.close()
    finally:
        load.cancel()
        for each in everyone:
            await each.close()
    return seen


async def _load(clients: list[SiteClient], key: bytes) -> None:
    while True:
        await asyncio.gather(*(c.get(key) for c in clients))
        await asyncio.sleep(0.02)


async def _lie(port: int, secret_path: Path) -> None:
    """Answer every collection with a sealed report that adds LIE_RPS of local requests."""
    secret = secret_path.read_bytes().strip()
    metrics = ClientMetrics(SITES, 30.0)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    first = True
    try:
        while line := await reader.readline():
            message = json.loads(line)
            if message["type"] != "collect":
                continue
            lie = int(LIE_RPS * INTERVAL_S)
            metrics.arrivals += lie
            for _ in range(lie):
                metrics.observe_ms(0, 1.0)
            report = {
                "type": "report",
                "round": message["round"],
                "first": first,
                "metrics": metrics.exposition(),
                "min_response_ms": [1.0, None],
            }
            first = False
            writer.write(seal(secret, "client:East", agent_clients_name("East"), report))
    finally:
        writer.close()


async def _commands(redis: RedisConnection) -> float:
    info = (await redis.command(b"INFO", b"stats")).decode()
    return float(next(x for x in info.splitlines() if x.startswith("total_commands_processed:"))
                 .split(":")[1])  # fmt: skip


async def _until(probe, what: str):
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        found = await asyncio.to_thread(probe)
        if found:
            return found
        await asyncio.sleep(0.1)
    raise AssertionError(f"no {what} within {WAIT_S:g} s")


def _plan(port: int) -> tuple[int, dict]:
    status, body = http_get(f"http://127.0.0.1:{port}/plan")
    return status, json.loads(body)


def _naming(port: int, text: str):
    status, body = http_get(f"http://127.0.0.1:{port}/healthz")
    body = json.loads(body)
    named = any(text in reason for reason in body.get("degraded", []))
    return (status, body) if named else None


def test_the_testbeds_agent_takes_its_clients_sealed_reports(tmp_path):
    """The testbed's agents have a clients secret (``kurma-clients.key`` in its state
    folder) and its clients seal with it (``Testbed.client_endpoints``): counted, none
    refused. Nothing but the agent is started: the client's requests fail, and count."""
    state_dir = tmp_path / "testbed"
    state_dir.mkdir()
    spec = TestbedSpec(sites=("London", "Ireland"), servers_per_site=1, network="loopback")
    testbed = Testbed._allocate(spec, state_dir, "loopback", "only the agent is started")
    testbed.save()
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    agent = start_instance(InstanceConfig(str(state_dir), "London", str(run_dir), interval_s=0.5))
    try:
        sent = asyncio.run(_client_of(testbed, seconds=2.0))
        metrics_port = testbed.sites["London"].metrics_port
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            metrics = scrape(metrics_port)
            counted = sum(
                metrics[("geoslo_kurma_requests_total", (("dst", s),))] for s in spec.sites
            )
            if counted >= sent:
                break
            time.sleep(0.1)
    finally:
        agent.stop()
    assert sent > 0 and counted == sent, (counted, sent)
    refused = [k for k, v in metrics.items() if k[0] == "geoslo_kurma_clients_rejected_total" and v]
    assert refused == []


async def _client_of(testbed, seconds: float) -> float:
    client = await SiteClient(testbed.client_endpoints("London"), GetSetWork(64)).start()
    try:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            await client.get(key_name(1))
            await asyncio.sleep(0.01)
    finally:
        await client.close()  # its last report, unasked: every request counted
    return float(client.metrics.totals().requests.sum())

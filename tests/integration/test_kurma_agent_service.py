"""Kurma pointed at stores it did not start, as an operator does (docs/live.md, "Point it at
your own Redis"): two plain Redis servers that ask for AUTH and TLS, one agent per site
started as ``geoslo run`` from a hand-written config that names every address, and clients
built from addresses only (StoreEndpoints). Real Redis, real sockets, real processes."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import ssl
import subprocess
import time
from pathlib import Path

import _kurma_agents as shared
import pytest

from _metrics import scrape
from geoslo.live._backend import GetSetWork, key_name
from geoslo.live._processes import ManagedProcess, free_ports, python_module_command
from geoslo.live.kurma import SiteClient, StoreEndpoints
from geoslo.live.kurma._instance import AGENT_START_TIMEOUT_S

pytestmark = pytest.mark.integration

SITES = shared.SITES
SERVER_CHOICE = {"East": "least_outstanding"}  # West's agent names none: its clients keep theirs
INTERVAL_S = 1.0
PASSWORD = "agent-test-password"

needs = [
    (shutil.which("redis-server"), "redis-server is not installed"),
    (shutil.which("openssl"), "openssl is not installed (the servers' TLS certificate)"),
]
pytestmark = [pytestmark] + [pytest.mark.skipif(not ok, reason=why) for ok, why in needs]


def certificate(folder: Path) -> tuple[Path, Path]:
    key, cert = folder / "key.pem", folder / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
         "-out", str(cert), "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    return key, cert


def start_redis(folder: Path, name: str, port: int, key: Path, cert: Path) -> ManagedProcess:
    """A Redis server that takes only TLS clients that authenticate (a config file keeps
    the password off the command line)."""
    config = folder / f"{name}.conf"
    config.write_text(
        f"port 0\ntls-port {port}\nbind 127.0.0.1\ntls-cert-file {cert}\ntls-key-file {key}\n"
        f'tls-auth-clients no\nrequirepass {PASSWORD}\nsave ""\nappendonly no\ndir {folder}\n'
    )
    config.chmod(0o600)
    command = [shutil.which("redis-server"), str(config)]
    return ManagedProcess(name, command, folder / f"{name}.log", port).start()


def agent_toml(site: str, ports: dict, files: dict) -> str:
    """What an operator writes for one site's agent (every address named)."""
    environment = {
        "servers_password_file": str(files["password"]),
        "servers_tls_ca_file": str(files["ca"]),
        "model_file": str(files["model"]),
        "log_dir": str(files["logs"]),
    }
    if site in SERVER_CHOICE:
        environment["server_choice"] = SERVER_CHOICE[site]
    servers = [f"127.0.0.1:{ports[site]['redis']}"]
    return shared.agent_toml(site, ports, servers, files["secret"], INTERVAL_S, "perf", environment)


def test_agents_from_their_own_configs_steer_clients_of_stores_they_did_not_start(tmp_path):
    key, cert = certificate(tmp_path)
    numbers = iter(free_ports(4 * len(SITES)))
    ports = {
        s: {k: next(numbers) for k in ("redis", "exchange", "clients", "metrics")} for s in SITES
    }
    secret = tmp_path / "exchange.key"
    secret.write_bytes(os.urandom(32).hex().encode())
    secret.chmod(0o600)
    logs = tmp_path / "logs"
    logs.mkdir()
    password = tmp_path / "redis.password"
    password.write_text(PASSWORD + "\n")
    password.chmod(0o600)
    files = {
        "secret": secret,
        "model": shared.mm1_model_file(tmp_path / "model.npz"),
        "logs": logs,
        "password": password,
        "ca": cert,
    }
    started: list[ManagedProcess] = []
    try:
        for site in SITES:
            started.append(start_redis(tmp_path, f"redis-{site}", ports[site]["redis"], key, cert))
        for site in SITES:
            config = tmp_path / f"agent-{site}.toml"
            config.write_text(agent_toml(site, ports, files))
            command = python_module_command("geoslo", "run", str(config))
            log = tmp_path / f"agent-{site}.log"
            started.append(ManagedProcess(f"agent-{site}", command, log, ports[site]["clients"]))
            started[-1].start(wait_timeout_s=AGENT_START_TIMEOUT_S)  # after the solver warms up
        tls = ssl.create_default_context(cafile=str(cert))
        values, plans, sent, choices = asyncio.run(_drive(ports, tls, seconds=5 * INTERVAL_S))
        metrics = {site: scrape(ports[site]["metrics"]) for site in SITES}
    finally:
        for process in reversed(started):
            process.stop()
    assert values == {site: b"w" * 64 for site in SITES}  # SET then GET over TLS, with AUTH
    assert all(count >= 2 for count in plans.values()), plans  # the agents' rows arrived
    assert choices == {"East": "least_outstanding", "West": None}  # the agent's, if it has one
    for site in SITES:
        log = (logs / f"kurma-{site.lower()}-rounds.jsonl").read_text()
        rounds = [json.loads(line) for line in log.splitlines()]
        planned = [r for r in rounds if "rates_rps" in r]
        both = [r["available"] == [True, True] for r in planned]
        # the peer counts once it has started (the agents start one after the other); a
        # round whose exchange a busy machine delayed past its deadline may miss it (§9)
        assert True in both, rounds
        since = both[both.index(True) :]
        assert sum(since) >= 0.75 * len(since), rounds
        counted = metrics[site]
        assert counted[("geoslo_intervals_total", (("system", "kurma"),))] >= 2  # the runtime's
        # the clients' counts were checked against the stores' INFO, read over TLS with AUTH
        assert counted[("geoslo_kurma_reports_checked", ())] == 1.0
        served = counted[("geoslo_kurma_requests_total", (("dst", site),))]  # the agent's
        assert served > 0
        # the agent reads its client's cumulative histograms and counts each request once
        # (the last interval's may still be uncounted when the agent is stopped)
        read = sum(counted[("geoslo_kurma_requests_total", (("dst", dst),))] for dst in SITES)
        assert 0.5 * sent[site] <= read <= sent[site], (read, sent[site])


async def _drive(ports: dict, tls: ssl.SSLContext, seconds: float):
    """One client per site at 100 req/s of GETs (a SET first); each site's value read
    back, how many rows each client received, how many requests it made and the server
    choice it follows."""
    clients = {}
    for site in SITES:
        servers = tuple(((("127.0.0.1", ports[s]["redis"]),)) for s in SITES)
        endpoints = StoreEndpoints(
            SITES, site, servers, ("127.0.0.1", ports[site]["clients"]), PASSWORD, tls
        )
        clients[site] = await SiteClient(endpoints, GetSetWork(64), "KurmaPerf").start()
    try:
        key = key_name(7)
        for client in clients.values():
            assert await client.put(key, client.work.write_value())
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            await asyncio.gather(*(c.get(key) for c in clients.values()))
            await asyncio.sleep(0.01)
        values = {site: await c.get(key) for site, c in clients.items()}
        sent = {site: float(c.metrics.totals().requests.sum()) for site, c in clients.items()}
        choices = {
            site: c.server_choice.name if c.server_choice else None for site, c in clients.items()
        }
        return values, {site: c.plans_received for site, c in clients.items()}, sent, choices
    finally:
        for client in clients.values():
            await client.drain()
            await client.close()

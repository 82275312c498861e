"""The server choice inside a site against real Redis servers: a site of two servers, one
kept busy by another client's ``DEBUG SLEEP`` commands (it blocks in a sleep, not on the
CPU, so other load on the machine does not make it less slow). Three clients of the site
run side by side, the same open-loop pace each, under random, least_outstanding and p2c:
the two that count their requests in flight send the slow server a smaller share than
random does, by a margin measured in the same run (random's share and its binomial noise)."""

from __future__ import annotations

import asyncio
import gc
import shutil
import time
from collections import defaultdict

import numpy as np
import pytest

from geoslo.live._backend import SleepWork, key_name
from geoslo.live._processes import ManagedProcess, free_ports
from geoslo.live._resp import RedisConnection
from geoslo.live.kurma._client import SiteClient, StoreEndpoints

REDIS = shutil.which("redis-server")
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(REDIS is None, reason="redis-server is not installed on PATH"),
]

SITE = "Here"
CHOICES = ("random", "least_outstanding", "p2c")
REQUESTS = 600  # per client
PACE_S = 0.004  # between a client's requests (250 req/s each, open loop)
HOG_SLEEP_S = 0.03  # each of the hog's commands blocks the slow server this long
SERVICE_MEAN_MS = 0.5  # each request's own DEBUG SLEEP (exponential)


def redis_server(folder, name: str) -> ManagedProcess:
    (port,) = free_ports(1)
    command = [
        REDIS, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
        "--enable-debug-command", "local", "--dir", str(folder),
    ]  # fmt: skip
    return ManagedProcess(name, command, folder / f"{name}.log", port).start(wait_timeout_s=10)


@pytest.fixture
def servers(tmp_path):
    started = [redis_server(tmp_path, f"redis-{k}") for k in range(2)]
    yield [p.port for p in started]
    for process in started:
        process.stop()
    gc.collect()


async def hog(port: int, stop: asyncio.Event) -> int:
    """Keep the server at ``port`` blocked in DEBUG SLEEP, one command after another."""
    connection = await RedisConnection.open(port, "127.0.0.1", 5.0)
    sleeps = 0
    try:
        while not stop.is_set():
            await connection.command("DEBUG", "SLEEP", str(HOG_SLEEP_S))
            sleeps += 1
    finally:
        await connection.close()
    return sleeps


def counted(client: SiteClient, chosen: dict, response_ms: dict) -> None:
    """Count every request's server and time its reply (from when it is sent)."""
    exchange = client._exchange

    async def timed(host, payload, replies, sent):
        reply = await exchange(host, payload, replies, sent)
        chosen[host[1]] += 1
        response_ms[host[1]].append((time.perf_counter() - sent) * 1e3)
        return reply

    client._exchange = timed


async def drive(client: SiteClient) -> None:
    pending = []
    key = key_name(1)
    for _ in range(REQUESTS):
        pending.append(asyncio.ensure_future(client.get(key)))
        await asyncio.sleep(PACE_S)
    await asyncio.gather(*pending)


def test_a_slow_server_gets_a_smaller_share_under_least_outstanding_and_p2c(servers):
    endpoints = StoreEndpoints((SITE,), SITE, (tuple(("127.0.0.1", p) for p in servers),))

    async def scenario():
        clients, chosen, response_ms = {}, {}, {}
        for k, name in enumerate(CHOICES):
            client = SiteClient(
                endpoints, SleepWork(SERVICE_MEAN_MS), "AllLocal", seed=k, server_choice=name
            )
            chosen[name], response_ms[name] = defaultdict(int), defaultdict(list)
            counted(client, chosen[name], response_ms[name])
            clients[name] = await client.start()
        for client in clients.values():  # connections open before the clock starts
            await client.get(key_name(1))
        for name in CHOICES:
            chosen[name].clear()
            response_ms[name].clear()
        stop = asyncio.Event()
        hogging = asyncio.ensure_future(hog(servers[0], stop))
        try:
            await asyncio.gather(*(drive(c) for c in clients.values()))
        finally:
            stop.set()
            sleeps = await hogging
            for client in clients.values():
                await client.close()
        in_flight = {name: c.in_flight for name, c in clients.items()}
        return chosen, response_ms, sleeps, in_flight

    chosen, response_ms, sleeps, in_flight = asyncio.run(scenario())
    assert sleeps > 10
    assert all(counts == [[0, 0]] for counts in in_flight.values())  # every request settled
    share = {name: chosen[name][0] / (chosen[name][0] + chosen[name][1]) for name in CHOICES}
    slow_ms = np.mean(response_ms["random"][0])
    fast_ms = np.mean(response_ms["random"][1])
    report = f"slow server's share {share}; random's mean reply {slow_ms:.1f} / {fast_ms:.1f} ms"
    print(report)
    assert slow_ms > 1.5 * fast_ms, report  # the hog makes server 0 slow for this client too
    n = chosen["random"][0] + chosen["random"][1]
    noise = np.sqrt(share["random"] * (1 - share["random"]) / n)
    margin = max(0.1, 5 * noise)  # random's own binomial noise, five times, or 10 points
    for name in ("least_outstanding", "p2c"):
        assert share[name] < share["random"] - margin, report

"""C3 on the live testbed: each site's feedback process sees the requests waiting at a real
Redis server (in the kernel's socket buffers), and a C3 client moves its requests off a
server kept busy by another client. Real Redis, real sockets, the real feedback process;
both forms of the testbed (the namespaces form skips where the machine cannot make it)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import time
from collections import Counter

import numpy as np
import pytest

from geoslo.errors import TestbedError
from geoslo.live._sites import choose_network
from geoslo.live.kurma import Testbed, TestbedSpec
from geoslo.live.kurma._client import SiteClient
from geoslo.live.kurma._policies import C3
from geoslo.live.kurma._testbed import _namespaces_lack

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server missing"),
]

SITES = ("Toronto", "Montreal", "Washington-DC")
HELD = 40  # requests sent to a stopped server


@pytest.fixture(params=["loopback", "namespaces"])
def testbed(request, tmp_path):
    if request.param == "namespaces":
        try:
            choose_network("namespaces", _namespaces_lack)
        except TestbedError as error:
            pytest.skip(f"the namespaces form cannot run here: {error}")
    spec = TestbedSpec(sites=SITES, servers_per_site=2, keys=200, network=request.param, seed=5)
    bed = Testbed.up(spec, tmp_path / "testbed", progress=lambda line: None)
    yield bed
    bed.down()


def pid_of(testbed: Testbed, name: str) -> int:
    return next(p["pid"] for p in testbed.processes if p["name"] == name)


async def latest_line(reader: asyncio.StreamReader, wait_s: float) -> dict:
    """The last line the feedback sent within ``wait_s``."""
    line, deadline = None, time.monotonic() + wait_s
    while (left := deadline - time.monotonic()) > 0:
        try:
            line = await asyncio.wait_for(reader.readline(), left)
        except TimeoutError:
            break
    assert line, "the feedback process sent nothing"
    return json.loads(line)


def reads(testbed: Testbed, connection, count: int) -> list[asyncio.Future]:
    """``count`` pipelined reads on ``connection``."""
    rng = np.random.default_rng(count)
    return [connection.send(*testbed.workload.read_payload(b"k:1", rng)) for _ in range(count)]


def test_the_feedback_counts_the_requests_waiting_at_a_stopped_server(testbed):
    async def scenario():
        host, port = testbed.client_endpoints(SITES[0]).feedback[0]
        reader, writer = await asyncio.open_connection(host, port)
        server = testbed.server_address(SITES[0], SITES[0], 0)
        warm, held = await testbed.connect(*server), await testbed.connect(*server)
        await asyncio.gather(*reads(testbed, warm, 300))  # a request's size and time
        await asyncio.sleep(2.5)  # two INFO polls
        before = await latest_line(reader, 0.2)
        redis = pid_of(testbed, f"redis-{SITES[0].lower()}-0")
        os.kill(redis, signal.SIGSTOP)
        try:
            futures = reads(testbed, held, HELD)
            stopped = await latest_line(reader, 0.5)
        finally:
            os.kill(redis, signal.SIGCONT)
        await asyncio.gather(*futures)
        after = await latest_line(reader, 0.5)
        for connection in (warm, held):
            await connection.close()
        writer.close()
        return before, stopped, after

    before, stopped, after = asyncio.run(scenario())
    assert before["q"] == [0, 0] and before["service_ms"][0] > 0
    assert stopped["q"][0] == pytest.approx(HELD, rel=0.15)  # bytes over a request's size
    assert stopped["q"][1] == 0  # the other server has nothing waiting
    assert after["q"][0] == 0


class CountingC3(C3):
    """C3 that counts the hosts it chooses (what a request log does not keep: the server)."""

    counting = False

    def choose(self, rng, now_ms):
        host = super().choose(rng, now_ms)
        if self.counting:
            self.chosen[host] += 1
        return host


async def keep_busy(testbed: Testbed, stop: asyncio.Event) -> None:
    """Another client keeping Toronto's server 0 busy: about 20 ms of work a command."""
    hog = await testbed.connect(*testbed.server_address(SITES[0], SITES[0], 0))
    read, _ = testbed.workload.read_payload(b"k:2", np.random.default_rng(0))
    try:
        while not stop.is_set():
            if testbed.network == "loopback":
                await hog.command(b"DEBUG", b"SLEEP", b"0.02")
            else:  # a server under its CPU quota: reads 20 at a time
                await asyncio.gather(*[hog.send(read) for _ in range(20)])
    finally:
        await hog.close()


def test_c3_moves_its_requests_off_a_busy_server(testbed):
    """The C3 client at Toronto sends its reads elsewhere, mostly to Toronto's server 1."""

    async def scenario() -> Counter:
        endpoints = testbed.client_endpoints(SITES[0], agent=False)
        policy = CountingC3(0, [2, 2, 2], endpoints.nearest_first)
        policy.chosen = Counter()
        client = await SiteClient(endpoints, testbed.workload, policy, seed=1).start()

        async def load(requests: int) -> None:
            """``requests`` GETs 5 ms apart: a count, so a busy machine that stretches the
            sleeps stretches the run, not the sample (152 GETs in 4 s under load)."""
            tasks = []
            for _ in range(requests):
                tasks.append(asyncio.ensure_future(client.get(b"k:3")))
                await asyncio.sleep(0.005)
            await asyncio.gather(*tasks)

        await load(400)  # every replica answers at least once
        stop = asyncio.Event()
        hogging = asyncio.ensure_future(keep_busy(testbed, stop))
        await asyncio.sleep(0.5)
        policy.counting = True
        await load(800)
        stop.set()
        await hogging
        await client.close()
        return policy.chosen

    chosen = asyncio.run(scenario())
    total = sum(n for host, n in chosen.items() if host is not None)
    assert total > 300, chosen
    assert chosen[(0, 0)] / total < 0.2, chosen  # uniform over Toronto's two would be 0.5


def test_every_replicas_feedback_reaches_the_client_through_the_wan(testbed):
    """After reads for 3 s, the client holds every site's feedback (the remote sites'
    cross the WAN paths), and C3 a service time, which comes from the feedback alone, for
    the replicas that answered it."""

    async def scenario() -> C3:
        endpoints = testbed.client_endpoints(SITES[0], agent=False)
        client = await SiteClient(endpoints, testbed.workload, "C3", seed=2).start()
        for _ in range(6):  # reads over 3 s: the servers' INFO is polled once a second
            await asyncio.gather(*[client.get(b"k:4") for _ in range(50)], asyncio.sleep(0.5))
        await client.close()
        return client.policy

    policy = asyncio.run(scenario())
    scores = policy.scores
    measured = {host for host, (_, service_ms) in scores.latest.items() if service_ms > 0}
    assert {site for site, _ in measured} == {0, 1, 2}, scores.latest  # every site's arrived
    assert scores.fed and all(scores.service_ms[host] > 0 for host in scores.fed)
    assert scores.fed <= scores.known  # fed by the responses of hosts it sent to


class HeldC3(C3):
    """C3 whose hosts never have room: every request waits in the backpressure queue."""

    def choose(self, rng, now_ms):
        self.held_until_ms = now_ms + self.interval_ms
        return None


def test_requests_held_at_close_fail_instead_of_waiting_forever(testbed):
    async def scenario():
        endpoints = testbed.client_endpoints(SITES[0], agent=False)
        policy = HeldC3(0, [2, 2, 2], endpoints.nearest_first)
        client = SiteClient(endpoints, testbed.workload, policy, seed=3, request_timeout_s=30.0)
        await client.start()
        gets = [asyncio.ensure_future(client.get(b"k:5")) for _ in range(5)]
        await asyncio.sleep(0.2)
        assert not any(g.done() for g in gets)  # held
        await client.close()
        return await asyncio.wait_for(asyncio.gather(*gets), 2.0), client

    values, client = asyncio.run(scenario())
    assert values == [None] * 5
    assert client.log.failures.sum() == 5

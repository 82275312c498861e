"""SiteClient's request deadline (one watchdog for every request, no timer per request),
against real loopback sockets: a server that never answers, and one that answers late."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

from geoslo.live._backend import SleepWork
from geoslo.live.kurma._client import DOWN_BACKOFF_MS, SiteClient, StoreEndpoints, _now_ms

SITE = "Here"


def one_site_client(port: int) -> SiteClient:
    """A client of one site whose one server is at ``port`` (no agent)."""
    endpoints = StoreEndpoints((SITE,), SITE, ((("127.0.0.1", port),),))
    return SiteClient(endpoints, SleepWork(mean_ms=1e-6))


class Server:
    """A loopback server that answers each request's two commands ``reply_after_s`` late
    (``None``: never answers, keeps the connection open)."""

    def __init__(self, reply_after_s: float | None) -> None:
        self.reply_after_s = reply_after_s
        self.handlers: set[asyncio.Task] = set()

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def _handle(self, reader, writer):
        self.handlers.add(asyncio.current_task())
        received, answered = b"", 0
        try:
            while data := await reader.read(65536):
                received += data
                requests = received.count(b"$3\r\nGET\r\n")  # each GET follows its DEBUG
                if self.reply_after_s is not None and requests > answered:
                    await asyncio.sleep(self.reply_after_s)
                    writer.write(b"+OK\r\n$1\r\nv\r\n" * (requests - answered))
                    answered = requests
        except asyncio.CancelledError:
            pass
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def stop(self) -> None:
        self.server.close()
        for task in self.handlers:
            task.cancel()
        await asyncio.gather(*self.handlers, return_exceptions=True)
        await self.server.wait_closed()


@pytest.mark.parametrize("timeout_s", [0.2, 0.5])
def test_a_request_without_reply_fails_after_its_timeout_and_marks_the_host_down(timeout_s):
    async def scenario():
        server = Server(reply_after_s=None)
        port = await server.start()
        client = one_site_client(port)
        client.timeout_s = timeout_s
        try:
            start = time.perf_counter()
            reply = await asyncio.wait_for(client.get(b"k:0"), 30.0)
            elapsed_s = time.perf_counter() - start
            down = not client.policy.is_up(0, 0, _now_ms())
            return (
                reply,
                elapsed_s,
                down,
                client.metrics.totals().errors.tolist(),
                len(client._deadlines),
            )
        finally:
            await client.close()
            await server.stop()

    reply, elapsed_s, down, errors, pending = asyncio.run(scenario())
    assert reply is None and errors == [1]
    assert elapsed_s >= timeout_s  # never failed before its deadline
    assert down  # skipped for DOWN_BACKOFF_MS after the timeout
    assert DOWN_BACKOFF_MS > 0 and pending == 0


def test_replies_within_the_timeout_are_not_failed_and_deadlines_are_released():
    async def scenario():
        server = Server(reply_after_s=0.05)
        port = await server.start()
        client = one_site_client(port)
        client.timeout_s = 1.0
        try:
            replies = [await client.get(b"k:%d" % k) for k in range(5)]
            replies += await asyncio.gather(*(client.get(b"k:0") for _ in range(5)))
            await asyncio.sleep(2 * client.timeout_s * 0.1)  # the watchdog's next round
            return replies, client.metrics.totals().errors.tolist(), len(client._deadlines)
        finally:
            await client.close()
            await server.stop()

    replies, errors, pending = asyncio.run(scenario())
    assert replies == [b"v"] * 10 and errors == [0]
    assert pending == 0


def test_requests_racing_for_a_hosts_first_connection_share_one():
    """Twenty GETs issued at once to a host with no connection yet: one connection is
    opened and every request is answered on it (before the fix, each opened its own and
    all but the last were leaked)."""

    async def scenario() -> tuple[int, int]:
        server = Server(reply_after_s=0.0)
        client = one_site_client(await server.start())
        try:
            values = await asyncio.gather(*[client.get(b"k:1") for _ in range(20)])
            return sum(v == b"v" for v in values), len(server.handlers)
        finally:
            await client.close()
            await server.stop()

    answered, connections = asyncio.run(scenario())
    assert answered == 20
    assert connections == 1

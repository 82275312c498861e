"""The pipelined RESP client and the WAN emulator against a real redis-server on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import shutil
import statistics
import time

import numpy as np
import pytest

from geoslo.errors import TestbedError
from geoslo.live._backend import get_payload
from geoslo.live._processes import ManagedProcess, free_ports
from geoslo.live._resp import RedisConnection, RedisReplyError, encode_command
from geoslo.live._wan import DelayPath, WanConfig, serve_wan
from geoslo.topology import BaseRttSchedule

pytestmark = [
    pytest.mark.integration,
]

REDIS = shutil.which("redis-server")
needs_redis = pytest.mark.skipif(REDIS is None, reason="redis-server is not installed on PATH")
TIMEOUT_S = 2.0
CLOCK_SLACK_S = 1e-4  # timers and perf_counter read different clocks


def redis_server(log_dir, name="redis") -> ManagedProcess:
    (port,) = free_ports(1)
    command = [
        REDIS,
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--enable-debug-command",
        "local",
        "--dir",
        str(log_dir),
    ]
    return ManagedProcess(name, command, log_dir / f"{name}.log", port).start(wait_timeout_s=10)


@pytest.fixture(scope="module")
def redis_port(tmp_path_factory):
    if REDIS is None:
        pytest.skip("redis-server is not installed on PATH")
    process = redis_server(tmp_path_factory.mktemp("redis"))
    yield process.port
    process.stop()
    gc.collect()


@pytest.fixture
def own_redis(tmp_path):
    """A server only this test uses (it gets killed)."""
    if REDIS is None:
        pytest.skip("redis-server is not installed on PATH")
    process = redis_server(tmp_path, "redis-own")
    yield process
    process.stop()
    gc.collect()


def run(coroutine):
    return asyncio.run(coroutine)


@contextlib.asynccontextmanager
async def connected(port: int):
    connection = await RedisConnection.open(port)
    try:
        yield connection
    finally:
        await connection.close()


async def outcome(future, timeout_s: float = TIMEOUT_S):
    """The result of ``future`` or the TestbedError it failed with; a hang fails the test."""
    try:
        return await asyncio.wait_for(future, timeout_s)
    except TestbedError as error:
        return error


def keys(prefix: str, count: int) -> list[bytes]:
    return [b"%s:%d:%d" % (prefix.encode(), time.monotonic_ns(), i) for i in range(count)]


# --- the pipelined client -----------------------------------------------------------------------
@needs_redis
def test_two_hundred_pipelined_commands_resolve_in_order(redis_port):
    names = keys("pipe", 100)

    async def scenario():
        async with connected(redis_port) as connection:
            sets = [connection.send(encode_command(b"SET", k, b"v-" + k)) for k in names]
            gets = [connection.send(encode_command(b"GET", k)) for k in reversed(names)]
            assert not any(f.done() for f in sets + gets)  # all 200 in flight at once
            return await asyncio.wait_for(asyncio.gather(*sets, *gets), TIMEOUT_S)

    replies = run(scenario())
    assert replies[:100] == [b"OK"] * 100
    assert replies[100:] == [b"v-" + k for k in reversed(names)]


@needs_redis
def test_payload_of_several_commands_resolves_to_the_list_of_their_replies(redis_port):
    (key,) = keys("multi", 1)

    async def scenario():
        async with connected(redis_port) as connection:
            payload = (
                encode_command(b"SET", key, b"7")
                + encode_command(b"INCR", key)
                + encode_command(b"GET", key)
                + encode_command(b"GET", key + b":missing")
            )
            return await outcome(connection.send(payload, 4))

    assert run(scenario()) == [b"OK", 8, b"8", None]


@needs_redis
def test_error_reply_fails_only_its_future_and_the_connection_keeps_working(redis_port):
    text_key, number_key = keys("err", 2)

    async def scenario():
        async with connected(redis_port) as connection:
            await connection.command(b"SET", text_key, b"abc")
            await connection.command(b"SET", number_key, b"1")
            before = connection.send(encode_command(b"INCR", number_key))
            failing = connection.send(encode_command(b"INCR", text_key))
            after = connection.send(encode_command(b"GET", text_key))
            pair = connection.send(
                encode_command(b"GET", number_key) + encode_command(b"INCR", text_key), 2
            )
            results = [await outcome(f) for f in (before, failing, after, pair)]
            results.append(await outcome(connection.command(b"PING")))
            return results

    before, failing, after, pair, ping = run(scenario())
    assert before == 2
    assert isinstance(failing, RedisReplyError)
    assert "not an integer" in str(failing)
    assert after == b"abc"
    assert isinstance(pair, RedisReplyError)
    assert ping == b"PONG"


@needs_redis
def test_killing_the_server_fails_pending_and_new_sends_without_hanging(own_redis):
    async def scenario():
        connection = await RedisConnection.open(own_redis.port)
        (key,) = keys("blocked", 1)
        pending = connection.send(encode_command(b"BLPOP", key, 0))  # never answered
        await asyncio.sleep(0.1)
        assert not pending.done()
        own_redis.stop()
        racing = connection.send(encode_command(b"PING"))  # before the client noticed
        results = [await outcome(pending), await outcome(racing)]
        results.append(await outcome(connection.send(encode_command(b"PING"))))
        closed = connection.closed
        await connection.close()
        with pytest.raises(TestbedError, match=f"cannot connect to 127.0.0.1:{own_redis.port}"):
            await RedisConnection.open(own_redis.port, timeout_s=TIMEOUT_S)
        return results, closed

    started = time.monotonic()
    results, closed = run(scenario())
    assert all(isinstance(r, TestbedError) for r in results), results
    assert closed
    assert not own_redis.alive
    assert time.monotonic() - started < 3 * TIMEOUT_S


@needs_redis
def test_debug_sleep_pipelined_with_get_holds_the_reply(redis_port):
    (key,) = keys("sleep", 1)

    async def scenario():
        async with connected(redis_port) as connection:
            await connection.command(b"SET", key, b"x")
            start = time.perf_counter()
            reply = await outcome(connection.send(get_payload(key, 0.05), 2))
            return reply, time.perf_counter() - start

    reply, elapsed_s = run(scenario())
    assert reply == [b"OK", b"x"]
    assert elapsed_s >= 0.05 - CLOCK_SLACK_S


@needs_redis
def test_debug_sleep_holds_the_server_for_every_connection(redis_port):
    """One command at a time: two requests with 50 ms of work each take 100 ms together."""
    (key,) = keys("fcfs", 1)

    async def timed(connection, start):
        await outcome(connection.send(get_payload(key, 0.05), 2))
        return time.perf_counter() - start

    async def scenario():
        async with connected(redis_port) as one, connected(redis_port) as two:
            start = time.perf_counter()
            return await asyncio.gather(timed(one, start), timed(two, start))

    elapsed_s = sorted(run(scenario()))
    assert elapsed_s[0] >= 0.05 - CLOCK_SLACK_S
    assert elapsed_s[1] >= 0.10 - CLOCK_SLACK_S


# --- the WAN emulator ---------------------------------------------------------------------------
@contextlib.asynccontextmanager
async def wan(config: WanConfig):
    """The emulator serving ``config`` on this loop; cancelled and closed on exit."""
    task = asyncio.get_running_loop().create_task(serve_wan(config))
    try:
        yield task
    finally:
        await asyncio.sleep(0.05)  # let the relays see their connections close
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def open_through(port: int, timeout_s: float = 5.0) -> RedisConnection:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return await RedisConnection.open(port, timeout_s=TIMEOUT_S)
        except TestbedError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.01)


async def ping_rtt_s(connection: RedisConnection) -> float:
    start = time.perf_counter()
    assert await asyncio.wait_for(connection.command(b"PING"), TIMEOUT_S) == b"PONG"
    return time.perf_counter() - start


def path_to(target_port: int, base_rtt: BaseRttSchedule) -> DelayPath:
    (listen_port,) = free_ports(1)
    return DelayPath("a", "b", listen_port, target_port, base_rtt, residual_rtt_mean_ms=0.0)


@needs_redis
def test_ping_through_a_path_takes_its_base_rtt(redis_port):
    path = path_to(redis_port, BaseRttSchedule.constant(20.0))

    async def scenario():
        async with wan(WanConfig((path,), epoch_unix_s=time.time())):
            connection = await open_through(path.listen_port)
            try:
                return [await ping_rtt_s(connection) for _ in range(5)]
            finally:
                await connection.close()

    rtts_s = run(scenario())
    assert min(rtts_s) >= 0.020 - CLOCK_SLACK_S
    assert statistics.median(rtts_s) < 0.035


@needs_redis
def test_routing_change_steps_the_rtt_at_its_time(redis_port):
    change_s = 1.0
    schedule = BaseRttSchedule(np.array([0.0, change_s]), np.array([10.0, 40.0]))
    path = path_to(redis_port, schedule)

    async def scenario():
        epoch = time.time()
        async with wan(WanConfig((path,), epoch_unix_s=epoch)):
            connection = await open_through(path.listen_port)
            try:
                before = [await ping_rtt_s(connection) for _ in range(3)]
                before_at_s = time.time() - epoch
                await asyncio.sleep(max(0.0, change_s + 0.05 - (time.time() - epoch)))
                after = [await ping_rtt_s(connection) for _ in range(3)]
            finally:
                await connection.close()
        return before, before_at_s, after

    before, before_at_s, after = run(scenario())
    assert before_at_s < change_s, "the first pings came too late to see the old route"
    assert min(before) >= 0.010 - CLOCK_SLACK_S
    assert statistics.median(before) < 0.025
    assert min(after) >= 0.040 - CLOCK_SLACK_S
    assert statistics.median(after) < 0.055

"""The RESP2 client (encoding, reply parsing, pipelining) and the backend's payloads."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from geoslo.errors import ConfigError, TestbedError
from geoslo.live._backend import ServiceWork, get_payload, key_name, put_payload
from geoslo.live._resp import (
    REPLY_READERS,
    PythonReader,
    RedisConnection,
    RedisReplyError,
    _parse_reply,
    _read_reply,
    encode_command,
    new_reply_reader,
)

READER_KINDS = ["python", "hiredis"]


@pytest.fixture(params=READER_KINDS)
def reader_kind(request) -> str:
    """Every connection test runs with the pure-Python reader and with hiredis's."""
    if request.param not in REPLY_READERS:
        pytest.skip(f"{request.param} is not installed (pip install hiredis)")
    return request.param


def run(coroutine):
    return asyncio.run(coroutine)


async def parse_all(data: bytes, count: int = 1):
    """``count`` replies parsed from ``data`` (then end of stream)."""
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    return [await _read_reply(reader) for _ in range(count)]


def parse(data: bytes):
    return run(parse_all(data))[0]


class FakeWriter:
    """Stands in for an asyncio.StreamWriter: records what was written."""

    def __init__(self) -> None:
        self.written = bytearray()
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True

    async def wait_closed(self) -> None:
        return None


async def fake_connection(reader_kind: str):
    reader = asyncio.StreamReader()
    writer = FakeWriter()
    return RedisConnection(reader, writer, reader_kind), reader, writer


async def outcome(future, timeout_s: float = 1.0):
    """The result of ``future``, or the exception it failed with."""
    try:
        return await asyncio.wait_for(future, timeout_s)
    except (TimeoutError, TestbedError) as error:
        return error


# --- encode_command ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("PING",), b"*1\r\n$4\r\nPING\r\n"),
        (("GET", "k"), b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"),
        ((b"SET", b"key", b"value"), b"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\n"),
        (("EXPIRE", "k", 10), b"*3\r\n$6\r\nEXPIRE\r\n$1\r\nk\r\n$2\r\n10\r\n"),
        (("INCRBY", "k", -5), b"*3\r\n$6\r\nINCRBY\r\n$1\r\nk\r\n$2\r\n-5\r\n"),
        (("INCRBY", "k", 0), b"*3\r\n$6\r\nINCRBY\r\n$1\r\nk\r\n$1\r\n0\r\n"),
        (("DEBUG", "SLEEP", 0.5), b"*3\r\n$5\r\nDEBUG\r\n$5\r\nSLEEP\r\n$3\r\n0.5\r\n"),
        (("SET", "k", ""), b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n"),
        (("SET", "k", b""), b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n"),
        ((b"a\r\nb",), b"*1\r\n$4\r\na\r\nb\r\n"),
        (("\u00e9",), b"*1\r\n$2\r\n\xc3\xa9\r\n"),
        ((), b"*0\r\n"),
    ],
)
def test_encode_command_is_a_resp_array_of_bulk_strings(args, expected):
    assert encode_command(*args) == expected


def test_encode_command_length_counts_bytes_of_a_long_argument():
    value = b"x" * 1000
    assert encode_command(b"SET", b"k", value) == (
        b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1000\r\n" + value + b"\r\n"
    )


# --- _read_reply and _parse_reply -------------------------------------------------------------
REPLIES = [
    (b"+OK\r\n", b"OK"),
    (b"+\r\n", b""),
    (b":42\r\n", 42),
    (b":-7\r\n", -7),
    (b":0\r\n", 0),
    (b"$-1\r\n", None),
    (b"$5\r\nhello\r\n", b"hello"),
    (b"$0\r\n\r\n", b""),
    (b"$4\r\na\r\nb\r\n", b"a\r\nb"),
    (b"*-1\r\n", None),
    (b"*0\r\n", []),
    (b"*2\r\n$1\r\na\r\n:1\r\n", [b"a", 1]),
    (b"*3\r\n$1\r\na\r\n*2\r\n:1\r\n+x\r\n$-1\r\n", [b"a", [1, b"x"], None]),
    (b"*2\r\n*1\r\n*0\r\n*-1\r\n", [[[]], None]),
]


@pytest.mark.parametrize(("data", "expected"), REPLIES)
def test_read_reply(data, expected):
    assert parse(data) == expected


@pytest.mark.parametrize(("data", "expected"), REPLIES)
def test_parse_reply_reads_the_same_value_and_ends_after_it(data, expected):
    assert _parse_reply(data, 0) == (expected, len(data))
    assert _parse_reply(b"+OK\r\n" + data + b":1\r\n", 5) == (expected, 5 + len(data))


@pytest.mark.parametrize(("data", "expected"), REPLIES)
def test_parse_reply_of_a_cut_reply_asks_for_more_bytes(data, expected):
    for cut in range(len(data)):
        value, end = _parse_reply(data[:cut], 0)
        assert value is None and end < 0, cut
        assert cut < -end <= len(data), cut  # it asks for more, never beyond the reply


# --- reply readers: hiredis's against the pure-Python reference ---------------------------------
def read_all(kind: str, stream: bytes, piece_bytes: int) -> list:
    """Every reply a reader of ``kind`` gives when ``stream`` is fed in pieces."""
    reader, values = new_reply_reader(kind), []
    for start in range(0, len(stream), piece_bytes):
        reader.feed(stream[start : start + piece_bytes])
        while (value := reader.gets()) is not False:
            values.append(value)
    return values


def comparable(value):
    """Error replies compare by class and message."""
    if isinstance(value, RedisReplyError):
        return ("error", str(value))
    if isinstance(value, list):
        return [comparable(v) for v in value]
    return value


ERROR_REPLIES = [(b"-ERR no\r\n", ("error", "ERR no")), (b"*1\r\n-E x\r\n", [("error", "E x")])]


@pytest.mark.parametrize("piece_bytes", [1, 2, 5, 17, 64, 100_000])
def test_every_reader_gives_every_reply_of_a_stream_cut_anywhere(reader_kind, piece_bytes):
    cases = REPLIES + ERROR_REPLIES
    stream = b"".join(data for data, _ in cases)
    values = read_all(reader_kind, stream, piece_bytes)
    assert [comparable(v) for v in values] == [expected for _, expected in cases]


def random_reply(rng: np.random.Generator, depth: int = 0) -> bytes:
    """One random RESP2 reply (arrays nest up to 3 deep; bulks up to 3,000 bytes)."""
    kind = int(rng.integers(6 if depth < 3 else 5))
    if kind == 0:
        return b"+%s\r\n" % (b"s" * int(rng.integers(10)))
    if kind == 1:
        return b":%d\r\n" % int(rng.integers(-(10**12), 10**12))
    if kind == 2:
        return b"-ERR e%d\r\n" % int(rng.integers(100))
    if kind == 3:
        return b"$-1\r\n"
    if kind == 4:
        body = rng.integers(0, 256, int(rng.integers(3000)), dtype=np.uint8).tobytes()
        return b"$%d\r\n%s\r\n" % (len(body), body)
    items = [random_reply(rng, depth + 1) for _ in range(int(rng.integers(4)))]
    return b"*%d\r\n%s" % (len(items), b"".join(items))


@pytest.mark.parametrize("seed", range(5))
def test_hiredis_reader_agrees_with_the_python_reference_on_random_streams(seed):
    if "hiredis" not in REPLY_READERS:
        pytest.skip("hiredis is not installed (pip install hiredis)")
    rng = np.random.default_rng(seed)
    stream = b"".join(random_reply(rng) for _ in range(300))
    piece_bytes = int(rng.integers(1, 400))
    reference = [comparable(v) for v in read_all("python", stream, piece_bytes)]
    assert len(reference) == 300
    assert [comparable(v) for v in read_all("hiredis", stream, piece_bytes)] == reference


def test_python_reader_holds_a_long_reply_until_it_is_whole():
    body = b"x" * 200_000
    reader = PythonReader()
    reader.feed(b"$%d\r\n" % len(body))
    assert reader.gets() is False
    data = body + b"\r\n+OK\r\n"
    head, tail = data[:-10], data[-10:]  # the head stops 3 bytes short of the body
    for start in range(0, len(head), 1000):
        reader.feed(head[start : start + 1000])
        assert reader.gets() is False
    reader.feed(tail)
    assert reader.gets() == body
    assert reader.gets() == b"OK"
    assert reader.gets() is False


def test_an_unknown_reader_kind_names_the_ones_there_are():
    with pytest.raises(TestbedError, match="no RESP reply reader 'nope'; use one of"):
        new_reply_reader("nope")


@pytest.mark.parametrize("piece_bytes", [1, 3, 64, 70_000])
def test_pipelined_replies_cut_anywhere_resolve_every_future_in_order(piece_bytes, reader_kind):
    # longer than one read of the socket (fed in pieces of 64 bytes or more)
    large = b"x" * (150_000 if piece_bytes >= 64 else 300)
    stream = (
        b"+OK\r\n$5\r\nhello\r\n"
        + b"$%d\r\n%s\r\n" % (len(large), large)
        + b"*2\r\n:1\r\n$-1\r\n+OK\r\n-ERR no\r\n:7\r\n"
    )

    async def scenario():
        connection, reader, _ = await fake_connection(reader_kind)
        futures = [connection.send(b"", 2), connection.send(b""), connection.send(b"")]
        futures += [connection.send(b"", 2), connection.send(b"")]
        for start in range(0, len(stream), piece_bytes):
            reader.feed_data(stream[start : start + piece_bytes])
            await asyncio.sleep(0)
        results = [await outcome(f) for f in futures]
        await connection.close()
        return results

    pair, big, array, failed, last = run(scenario())
    assert pair == [b"OK", b"hello"] and big == large and array == [1, None]
    assert isinstance(failed, RedisReplyError) and str(failed) == "ERR no"
    assert last == 7


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"-ERR unknown command\r\n", "ERR unknown command"),
        (b"-WRONGTYPE Operation against a key\r\n", "WRONGTYPE Operation against a key"),
    ],
)
def test_error_reply_is_returned_as_a_redis_reply_error(data, message):
    reply = parse(data)
    assert isinstance(reply, RedisReplyError)
    assert isinstance(reply, TestbedError)
    assert str(reply) == message


def test_error_reply_inside_an_array_is_an_element():
    first, second = parse(b"*2\r\n-ERR bad\r\n:5\r\n")
    assert isinstance(first, RedisReplyError)
    assert second == 5


def test_consecutive_replies_are_read_one_at_a_time():
    data = b"+OK\r\n$3\r\nfoo\r\n:1\r\n*1\r\n$-1\r\n"
    assert run(parse_all(data, 4)) == [b"OK", b"foo", 1, [None]]


@pytest.mark.parametrize("data", [b"!oops\r\n", b"hello\r\n", b"\r\n", b"%2\r\n"])
def test_garbage_type_byte_raises_testbed_error(data):
    with pytest.raises(TestbedError, match="unexpected reply from Redis") as error:
        parse(data)
    assert not isinstance(error.value, RedisReplyError)


@pytest.mark.parametrize("data", [b"$5\r\nhel", b"+OK", b"*2\r\n:1\r\n", b""])
def test_truncated_reply_raises_incomplete_read(data):
    with pytest.raises(asyncio.IncompleteReadError):
        parse(data)


# --- RedisConnection over a fake stream ---------------------------------------------------------
def test_replies_resolve_the_oldest_waiting_future_with_one_or_several_replies(reader_kind):
    async def scenario():
        connection, reader, writer = await fake_connection(reader_kind)
        payload = encode_command("SET", "k", "v") + encode_command("GET", "k")
        pair = connection.send(payload, 2)
        single = connection.send(encode_command("INCR", "n"))
        assert bytes(writer.written) == payload + encode_command("INCR", "n")
        reader.feed_data(b"+OK\r\n$1\r")
        await asyncio.sleep(0)
        assert not pair.done()
        reader.feed_data(b"\nv\r\n:3\r\n")
        results = [await outcome(pair), await outcome(single)]
        await connection.close()
        return results

    assert run(scenario()) == [[b"OK", b"v"], 3]


def test_an_error_among_the_replies_of_a_payload_fails_only_that_future(reader_kind):
    async def scenario():
        connection, reader, _ = await fake_connection(reader_kind)
        pair = connection.send(b"", 2)
        after = connection.send(b"")
        reader.feed_data(b"$1\r\nv\r\n-ERR not an integer\r\n:1\r\n")
        results = [await outcome(pair), await outcome(after)]
        await connection.close()
        return results

    failed, after = run(scenario())
    assert isinstance(failed, RedisReplyError)
    assert str(failed) == "ERR not an integer"
    assert after == 1


def test_end_of_stream_fails_waiting_futures_and_later_sends(reader_kind):
    async def scenario():
        connection, reader, writer = await fake_connection(reader_kind)
        pending = connection.send(b"", 2)
        reader.feed_data(b"+OK\r\n")
        reader.feed_eof()
        failed = await outcome(pending)
        later = await outcome(connection.send(b"PING"))
        state = connection.closed, writer.closed, bytes(writer.written)
        await connection.close()
        return failed, later, state

    failed, later, (closed, writer_closed, written) = run(scenario())
    assert type(failed) is TestbedError
    assert "closed by the server" in str(failed)
    assert type(later) is TestbedError
    assert str(later) == "connection closed"
    assert closed and writer_closed
    assert written == b""  # nothing is written once the connection is closed


def test_garbage_from_the_server_fails_every_waiting_future_with_its_message(reader_kind):
    async def scenario():
        connection, reader, _ = await fake_connection(reader_kind)
        futures = [connection.send(b"") for _ in range(3)]
        reader.feed_data(b":1\r\n?garbage\r\n")
        results = [await outcome(f) for f in futures]
        await connection.close()
        return results

    first, *rest = run(scenario())
    assert first == 1
    assert all(isinstance(r, TestbedError) and "unexpected reply" in str(r) for r in rest)


def test_a_reply_nobody_waits_for_closes_the_connection(reader_kind):
    async def scenario():
        connection, reader, _ = await fake_connection(reader_kind)
        reader.feed_data(b"+OK\r\n")
        for _ in range(10):
            await asyncio.sleep(0)
        closed = connection.closed
        await connection.close()
        return closed

    assert run(scenario()) is True


def test_close_fails_the_futures_still_waiting(reader_kind):
    async def scenario():
        connection, _, writer = await fake_connection(reader_kind)
        pending = connection.send(b"")
        await asyncio.sleep(0)
        await connection.close()
        return await outcome(pending), writer.closed

    failed, writer_closed = run(scenario())
    assert isinstance(failed, TestbedError)
    assert writer_closed


def test_a_malformed_integer_reply_fails_the_future_and_close_still_succeeds(reader_kind):
    async def scenario():
        connection, reader, _ = await fake_connection(reader_kind)
        pending = connection.send(b"")
        reader.feed_data(b":not-a-number\r\n")
        failed = await outcome(pending)
        await connection.close()
        return failed

    assert isinstance(run(scenario()), TestbedError)


# --- the backend's payloads --------------------------------------------------------------------
def test_get_payload_is_debug_sleep_then_get():
    assert get_payload(b"k:1", 0.0025) == (
        b"*3\r\n$5\r\nDEBUG\r\n$5\r\nSLEEP\r\n$8\r\n0.002500\r\n*2\r\n$3\r\nGET\r\n$3\r\nk:1\r\n"
    )


@pytest.mark.parametrize(
    ("work_s", "argument"),
    [
        (0.0, b"0.000000"),
        (1.5, b"1.500000"),
        (0.0123456789, b"0.012346"),
        (1e-7, b"0.000000"),
        (12.0, b"12.000000"),
    ],
)
def test_debug_sleep_argument_has_six_decimals(work_s, argument):
    sleep = encode_command(b"DEBUG", b"SLEEP", argument)
    assert get_payload(b"k", work_s) == sleep + encode_command(b"GET", b"k")
    assert put_payload(b"k", b"v", work_s) == sleep + encode_command(b"SET", b"k", b"v")


def test_put_payload_is_two_commands_with_work_and_a_plain_set_without():
    with_work = put_payload(b"k:9", b"value", 0.001)
    plain = put_payload(b"k:9", b"value", None)
    assert plain == b"*3\r\n$3\r\nSET\r\n$3\r\nk:9\r\n$5\r\nvalue\r\n"
    assert with_work == (
        b"*3\r\n$5\r\nDEBUG\r\n$5\r\nSLEEP\r\n$8\r\n0.001000\r\n"
        b"*3\r\n$3\r\nSET\r\n$3\r\nk:9\r\n$5\r\nvalue\r\n"
    )
    assert with_work.count(b"*") == 2 and plain.count(b"*") == 1


@pytest.mark.parametrize(("index", "name"), [(0, b"k:0"), (7, b"k:7"), (123456, b"k:123456")])
def test_key_name(index, name):
    assert key_name(index) == name


# --- ServiceWork -------------------------------------------------------------------------------
@pytest.mark.parametrize("mean_ms", [0.5, 2.0, 10.0])
def test_service_work_mean_matches_mean_ms(mean_ms):
    work = ServiceWork(mean_ms=mean_ms)
    rng = np.random.default_rng(5)
    draws_s = np.array([work.draw_s(rng) for _ in range(50_000)])
    assert draws_s.mean() == pytest.approx(mean_ms / 1000, rel=0.02)
    assert draws_s.min() >= 0.0
    assert work.capacity_per_server_rps == pytest.approx(1000.0 / mean_ms)


def test_service_work_never_draws_below_min_ms():
    work = ServiceWork(mean_ms=2.0, min_ms=1.0)
    rng = np.random.default_rng(6)
    draws_s = np.array([work.draw_s(rng) for _ in range(5000)])
    assert draws_s.min() == pytest.approx(0.001)
    assert np.mean(draws_s == 0.001) == pytest.approx(1 - np.exp(-0.5), abs=0.03)


@pytest.mark.parametrize("mean_ms", [0.0, -1.0, float("nan")])
def test_service_work_rejects_a_mean_that_is_not_positive(mean_ms):
    with pytest.raises(ConfigError, match="service_mean_ms"):
        ServiceWork(mean_ms=mean_ms)


@pytest.mark.parametrize("kind", READER_KINDS)
def test_the_environment_chooses_the_default_reader(monkeypatch, kind):
    if kind not in REPLY_READERS:
        pytest.skip(f"{kind} is not installed (pip install hiredis)")
    monkeypatch.setenv("GEOSLO_RESP_READER", kind)
    reader = new_reply_reader()
    assert isinstance(reader, PythonReader) == (kind == "python")
    assert type(reader) is type(REPLY_READERS[kind]())

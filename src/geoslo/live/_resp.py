"""A small pipelined Redis client on asyncio streams (the RESP2 protocol).

One connection carries many requests in flight: commands are written as they come and
replies, which Redis sends in order, resolve the oldest waiting future. This keeps a
site's client at one socket per server. Replies are parsed by hiredis's C reader when
hiredis is installed (it is a dependency), else by :class:`PythonReader`, the pure-Python
reference with the same interface that the tests compare it with
(``benchmarks/bench_live_client.py`` measures the client against redis-py).
"""

from __future__ import annotations

import asyncio
import os
import ssl
from collections import deque

from geoslo.errors import TestbedError

try:
    import hiredis
except ImportError:  # pragma: no cover - hiredis is a dependency; the fallback is kept
    hiredis = None

__all__ = [
    "RedisConnection",
    "RedisReplyError",
    "PythonReader",
    "encode_command",
    "new_reply_reader",
    "REPLY_READERS",
]

READ_CHUNK_BYTES = 1 << 16
READER_VARIABLE = "GEOSLO_RESP_READER"  # hiredis or python: the default reply reader


class RedisReplyError(TestbedError):
    """Redis answered a command with an error reply."""


class _ProtocolError(Exception):
    """hiredis's reader met bytes that are not RESP (turned into a TestbedError)."""


def encode_command(*args: bytes | str | int | float) -> bytes:
    """One command as a RESP array of bulk strings."""
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


class PythonReader:
    """RESP2 replies from a byte stream, with hiredis.Reader's interface: ``feed`` bytes,
    ``gets`` the next whole reply or False. Error replies are :class:`RedisReplyError`
    values; bytes that are not RESP raise :class:`TestbedError`.

    Bytes that arrive while a long reply is still incomplete are held as a list of chunks
    and joined once the reply's known length is there (no quadratic copying)."""

    def __init__(self) -> None:
        self._buffer = b""
        self._position = 0  # the next reply starts here in _buffer
        self._need = 0  # bytes from _position the next reply needs, as far as known
        self._chunks: list[bytes] = []
        self._held = 0  # bytes in _chunks

    def feed(self, data: bytes) -> None:
        have = len(self._buffer) - self._position
        if self._chunks or have + len(data) < self._need:
            self._chunks.append(data)
            self._held += len(data)
            if have + self._held < self._need:
                return
            data, self._chunks, self._held = b"".join(self._chunks), [], 0
        self._buffer = self._buffer[self._position :] + data if have else data
        self._position = 0

    def gets(self):
        if self._chunks:
            return False
        value, end = _parse_reply(self._buffer, self._position)
        if end < 0:
            self._need = -end - self._position
            return False
        self._position = end
        return value


def _hiredis_reader():
    return hiredis.Reader(replyError=RedisReplyError, protocolError=_ProtocolError)


REPLY_READERS = {"python": PythonReader}
if hiredis is not None:
    REPLY_READERS["hiredis"] = _hiredis_reader


def new_reply_reader(kind: str | None = None):
    """A reply reader: ``kind`` one of ``REPLY_READERS``; by default the environment's
    ``GEOSLO_RESP_READER``, else hiredis if it is installed."""
    if kind is None:
        kind = os.environ.get(READER_VARIABLE) or ("hiredis" if hiredis is not None else "python")
    try:
        return REPLY_READERS[kind]()
    except KeyError:
        raise TestbedError(
            f"no RESP reply reader {kind!r}; use one of {sorted(REPLY_READERS)}"
            + ("" if hiredis is not None else " (pip install hiredis for the C reader)")
        ) from None


class RedisConnection:
    """One pipelined connection; ``send`` returns a future for the command's reply(ies).

    ``reader_kind``: the reply reader (:func:`new_reply_reader`; default hiredis)."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        reader_kind: str | None = None,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._replies = new_reply_reader(reader_kind)
        # the futures waiting, oldest first, and how many replies each one takes
        self._waiting: deque[asyncio.Future] = deque()
        self._counts: deque[int] = deque()
        self._create_future = asyncio.get_running_loop().create_future
        self._reading = asyncio.get_running_loop().create_task(self._read_replies())
        self.closed = False

    @classmethod
    async def open(
        cls,
        port: int,
        host: str = "127.0.0.1",
        timeout_s: float = 2.0,
        reader_kind: str | None = None,
        password: str | None = None,
        tls: ssl.SSLContext | None = None,
    ):
        """Connect (over TLS with a ``tls`` context), authenticate with ``AUTH password``
        when given, or raise :class:`TestbedError` naming the address."""
        try:
            async with asyncio.timeout(timeout_s):  # not wait_for: 3.11 can drop a done socket
                reader, writer = await asyncio.open_connection(host, port, ssl=tls)
        except (TimeoutError, OSError) as error:
            raise TestbedError(f"cannot connect to {host}:{port}: {error}") from None
        connection = cls(reader, writer, reader_kind)
        if password is not None:
            try:
                await asyncio.wait_for(connection.command(b"AUTH", password), timeout_s)
            except (TimeoutError, TestbedError) as error:
                await connection.close()
                raise TestbedError(f"{host}:{port} refused AUTH: {error}") from None
        return connection

    def send(self, payload: bytes, replies: int = 1) -> asyncio.Future:
        """Write an already-encoded payload holding ``replies`` commands; the future
        resolves to the list of their replies (or to the one reply when ``replies == 1``)."""
        future = self._create_future()
        if self.closed:
            future.set_exception(TestbedError("connection closed"))
            return future
        self._waiting.append(future)
        self._counts.append(replies)
        self._writer.write(payload)
        return future

    async def command(self, *args: bytes | str | int | float):
        """Send one command and wait for its reply."""
        return await self.send(encode_command(*args))

    async def _read_replies(self) -> None:
        """Replies arrive in command order: each one goes to the oldest waiting future.

        The socket is read a chunk at a time, fed to the reply reader, and every whole
        reply in it is handed out without awaiting; an incomplete one waits for more."""
        error = TestbedError("connection closed by the server")
        replies, waiting, counts = self._replies, self._waiting, self._counts
        values: list = []  # replies of the oldest future so far, when it takes several
        try:
            while True:
                data = await self._reader.read(READ_CHUNK_BYTES)
                if not data:
                    break
                replies.feed(data)
                while (value := replies.gets()) is not False:
                    count = counts[0]
                    if count > 1:
                        values.append(value)
                        if len(values) < count:
                            continue
                        value, values = values, []
                    counts.popleft()
                    _resolve(waiting.popleft(), value, count)
        except _ProtocolError as failure:
            error = TestbedError(f"unexpected reply from Redis: {failure}")
        except (
            OSError,
            asyncio.IncompleteReadError,
            TestbedError,
            IndexError,
            ValueError,
        ) as failure:
            if isinstance(failure, TestbedError):
                error = failure
        finally:
            self._fail_all(error)

    def _fail_all(self, error: BaseException) -> None:
        self.closed = True
        while self._waiting:
            future = self._waiting.popleft()
            if not future.done():
                future.set_exception(error)
        self._counts.clear()
        self._writer.close()

    async def close(self) -> None:
        self.closed = True
        self._reading.cancel()
        try:
            await self._reading
        except asyncio.CancelledError:
            pass
        self._writer.close()
        try:
            await self._writer.wait_closed()
        except OSError:
            pass


def _resolve(future: asyncio.Future, value, count: int) -> None:
    """Settle ``future`` with its reply (``count == 1``) or list of replies; an error reply
    among them fails it."""
    if future.done():  # cancelled, or failed by a deadline
        return
    if count == 1:
        if isinstance(value, RedisReplyError):
            future.set_exception(value)
        else:
            future.set_result(value)
        return
    for item in value:
        if isinstance(item, RedisReplyError):
            future.set_exception(item)
            return
    future.set_result(value)


def _parse_reply(data: bytes, start: int) -> tuple[object, int]:
    """One reply from ``data`` at ``start``: ``(value, end)``; ``(None, -n)`` if ``data``
    does not hold it whole yet (``n``: the length it needs from 0, as far as known)."""
    line_end = data.find(b"\r\n", start)
    if line_end < 0:
        return None, -(len(data) + 1)
    kind, body, end = data[start], data[start + 1 : line_end], line_end + 2
    if kind == 43:  # +
        return body, end
    if kind == 36:  # $
        size = int(body)
        if size < 0:
            return None, end
        stop = end + size
        if len(data) < stop + 2:
            return None, -(stop + 2)
        return data[end:stop], stop + 2
    if kind == 42:  # *
        size = int(body)
        if size < 0:
            return None, end
        items = []
        for _ in range(size):
            item, end = _parse_reply(data, end)
            if end < 0:
                return None, end
            items.append(item)
        return items, end
    if kind == 58:  # :
        return int(body), end
    if kind == 45:  # -
        return RedisReplyError(body.decode(errors="replace")), end
    raise TestbedError(f"unexpected reply from Redis: {data[start : start + 40]!r}")


async def _read_reply(reader: asyncio.StreamReader):
    line = await reader.readuntil(b"\r\n")
    kind, body = line[:1], line[1:-2]
    if kind == b"+":
        return body
    if kind == b"-":
        return RedisReplyError(body.decode(errors="replace"))
    if kind == b":":
        return int(body)
    if kind == b"$":
        size = int(body)
        if size < 0:
            return None
        return (await reader.readexactly(size + 2))[:-2]
    if kind == b"*":
        size = int(body)
        return None if size < 0 else [await _read_reply(reader) for _ in range(size)]
    raise TestbedError(f"unexpected reply from Redis: {line[:40]!r}")

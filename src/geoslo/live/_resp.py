"""A small pipelined Redis client on asyncio streams (the RESP2 protocol).

One connection carries many requests in flight: commands are written as they come and
replies, which Redis sends in order, resolve the oldest waiting future. This keeps a
site's client at one socket per server; per request it costs about what redis-py does
(``benchmarks/bench_live_client.py`` measures both).
"""

from __future__ import annotations

import asyncio
from collections import deque

from geoslo.errors import TestbedError

__all__ = ["RedisConnection", "RedisReplyError", "encode_command"]

READ_CHUNK_BYTES = 1 << 16


class RedisReplyError(TestbedError):
    """Redis answered a command with an error reply."""


def encode_command(*args: bytes | str | int | float) -> bytes:
    """One command as a RESP array of bulk strings."""
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


class RedisConnection:
    """One pipelined connection; ``send`` returns a future for the command's reply(ies)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._waiting: deque[tuple[asyncio.Future, int]] = deque()
        self._reading = asyncio.get_running_loop().create_task(self._read_replies())
        self.closed = False

    @classmethod
    async def open(cls, port: int, host: str = "127.0.0.1", timeout_s: float = 2.0):
        """Connect, or raise :class:`TestbedError` naming the address."""
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)
        except (TimeoutError, OSError) as error:
            raise TestbedError(f"cannot connect to {host}:{port}: {error}") from None
        return cls(reader, writer)

    def send(self, payload: bytes, replies: int = 1) -> asyncio.Future:
        """Write an already-encoded payload holding ``replies`` commands; the future
        resolves to the list of their replies (or to the one reply when ``replies == 1``)."""
        future = asyncio.get_running_loop().create_future()
        if self.closed:
            future.set_exception(TestbedError("connection closed"))
            return future
        self._waiting.append((future, replies))
        self._writer.write(payload)
        return future

    async def command(self, *args: bytes | str | int | float):
        """Send one command and wait for its reply."""
        return await self.send(encode_command(*args))

    async def _read_replies(self) -> None:
        """Replies arrive in command order: each one goes to the oldest waiting future.

        The socket is read a chunk at a time and every complete reply in it is parsed
        without awaiting (:func:`_parse_reply`); an incomplete one waits for more bytes."""
        error = TestbedError("connection closed by the server")
        values: list = []
        buffer, need = b"", 0  # bytes not parsed yet; the next reply needs ``need`` of them
        chunks, held = [], 0  # bytes received while ``need`` is not there: not joined yet
        try:
            while True:
                data = await self._reader.read(READ_CHUNK_BYTES)
                if not data:
                    break
                if chunks or len(buffer) + len(data) < need:
                    chunks.append(data)
                    held += len(data)
                    if len(buffer) + held < need:
                        continue
                    buffer, chunks, held = buffer + b"".join(chunks), [], 0
                else:
                    buffer = buffer + data if buffer else data
                position = 0
                while True:
                    value, end = _parse_reply(buffer, position)
                    if end < 0:
                        need = -end - position  # at least this many bytes from position
                        break
                    position = end
                    values.append(value)
                    future, count = self._waiting[0]
                    if len(values) < count:
                        continue
                    self._waiting.popleft()
                    if not future.done():
                        failure = next((v for v in values if isinstance(v, RedisReplyError)), None)
                        if failure is not None:
                            future.set_exception(failure)
                        else:
                            future.set_result(values[0] if count == 1 else values)
                    values = []
                buffer = buffer[position:]
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
            future, _ = self._waiting.popleft()
            if not future.done():
                future.set_exception(error)
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

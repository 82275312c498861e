"""Messages of the image storage service: a JSON header and an optional payload (a block),
framed by their two lengths. Every request names the site it comes from, so the server
can count the bytes that cross the WAN."""

from __future__ import annotations

import asyncio
import json
import struct

from geoslo.errors import TestbedError

__all__ = ["send", "receive", "Connection", "StaleCloseError"]

_LENGTHS = struct.Struct("!II")
REQUEST_TIMEOUT_S = 60.0  # one request, even a block across the WAN, takes well under this


class StaleCloseError(RuntimeError):
    """A close refused because another writer closed the image since this one opened it
    (§4.1.2 assumes one writer at a time; the second one's updates are not applied)."""


async def send(writer: asyncio.StreamWriter, header: dict, payload: bytes = b"") -> int:
    """Write one message; the bytes it took."""
    head = json.dumps(header, separators=(",", ":")).encode()
    writer.write(_LENGTHS.pack(len(head), len(payload)) + head + payload)
    await writer.drain()
    return _LENGTHS.size + len(head) + len(payload)


async def receive(reader: asyncio.StreamReader) -> tuple[dict, bytes, int]:
    """One message: header, payload and the bytes it took (IncompleteReadError at EOF)."""
    head_len, payload_len = _LENGTHS.unpack(await reader.readexactly(_LENGTHS.size))
    head = await reader.readexactly(head_len)
    payload = await reader.readexactly(payload_len) if payload_len else b""
    return json.loads(head), payload, _LENGTHS.size + head_len + payload_len


class Connection:
    """One client connection: requests answered in order (callers take turns)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self._lock = asyncio.Lock()
        self._streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def request(self, header: dict, payload: bytes = b"") -> tuple[dict, bytes]:
        async with self._lock:
            if self._streams is None:
                self._streams = await asyncio.open_connection("127.0.0.1", self.port)
            reader, writer = self._streams
            try:
                reply, data = await asyncio.wait_for(
                    self._exchange(reader, writer, header, payload), REQUEST_TIMEOUT_S
                )
            except TimeoutError:
                await self.close()  # the reply may still come: never read it as another's
                raise TestbedError(
                    f"image store on port {self.port}: no answer to {header.get('op')!r} "
                    f"within {REQUEST_TIMEOUT_S:g} s"
                ) from None
        if "error" in reply:
            kind = StaleCloseError if reply.get("stale") else RuntimeError
            raise kind(f"image store: {reply['error']}")
        return reply, data

    @staticmethod
    async def _exchange(reader, writer, header: dict, payload: bytes) -> tuple[dict, bytes]:
        await send(writer, header, payload)
        reply, data, _ = await receive(reader)
        return reply, data

    async def close(self) -> None:
        if self._streams is not None:
            self._streams[1].close()
            self._streams = None


class ConnectionPool:
    """Connections to one server, one per concurrent caller."""

    def __init__(self, port: int) -> None:
        self.port = port
        self._free: list[Connection] = []

    async def request(self, header: dict, payload: bytes = b"") -> tuple[dict, bytes]:
        connection = self._free.pop() if self._free else Connection(self.port)
        try:
            answer = await connection.request(header, payload)
        except RuntimeError:  # the server's error reply: the connection itself is fine
            self._free.append(connection)
            raise
        except (OSError, asyncio.IncompleteReadError):
            await connection.close()  # a broken connection is not reused
            raise
        self._free.append(connection)
        return answer

    async def close(self) -> None:
        for connection in self._free:
            await connection.close()

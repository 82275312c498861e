"""A small asyncio client of QMP, QEMU's JSON machine protocol (docs/interop/qmp-spec):
how the migration is set up, started and watched (Supercloud, SoCC 2016, §2, §4.2).

The protocol is one JSON object per line: the server greets (``{"QMP": ...}``), the client
sends ``qmp_capabilities``, then each ``{"execute": cmd, "arguments": ...}`` gets one
``{"return": ...}`` or ``{"error": {"class", "desc"}}``; events (``{"event": ...}``) may
come in between and are kept in ``events``. Commands are sent one at a time. The few
commands geoslo needs make a library (and a dependency) unnecessary.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from geoslo.errors import TestbedError

__all__ = ["QmpClient", "QmpError", "parse_message"]

_LINE_LIMIT_BYTES = 1 << 20


class QmpError(TestbedError):
    """QEMU answered a command with an error; the message has its class and description."""


def parse_message(line: bytes) -> dict:
    """One QMP message from one line; TestbedError if it is not a JSON object."""
    try:
        message = json.loads(line)
    except ValueError:
        raise TestbedError(f"QMP sent a line that is not JSON: {line[:200]!r}") from None
    if not isinstance(message, dict):
        raise TestbedError(f"QMP sent a message that is not an object: {message!r}")
    return message


class QmpClient:
    """One QMP connection over a Unix socket (QEMU's ``-qmp unix:PATH,server=on,wait=off``)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader, self._writer = reader, writer
        self.events: list[dict] = []
        self.greeting: dict = {}

    @classmethod
    async def connect(cls, path: Path, timeout_s: float = 10.0) -> QmpClient:
        """Connect (retrying while QEMU creates the socket), read the greeting and enter
        command mode."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            try:
                streams = await asyncio.open_unix_connection(str(path), limit=_LINE_LIMIT_BYTES)
                break
            except OSError as error:
                if loop.time() > deadline:
                    raise TestbedError(f"no QMP socket at {path}: {error}") from None
                await asyncio.sleep(0.05)
        client = cls(*streams)
        client.greeting = await asyncio.wait_for(client._read(), timeout_s)
        if "QMP" not in client.greeting:
            raise TestbedError(f"QMP at {path} greeted with {client.greeting!r}")
        await client.execute("qmp_capabilities")
        return client

    async def _read(self) -> dict:
        line = await self._reader.readline()
        if not line:
            raise TestbedError("QEMU closed its QMP connection")
        return parse_message(line)

    async def execute(self, command: str, timeout_s: float = 30.0, **arguments) -> object:
        """Run ``command`` with ``arguments`` (names as QMP spells them: pass a dict via
        ``**{"max-bandwidth": ...}``); its ``return`` value, or QmpError."""
        request: dict = {"execute": command}
        if arguments:
            request["arguments"] = arguments
        self._writer.write(json.dumps(request).encode() + b"\n")
        await self._writer.drain()
        return await asyncio.wait_for(self._answer(command), timeout_s)

    async def _answer(self, command: str) -> object:
        while True:
            message = await self._read()
            if "event" in message:
                self.events.append(message)
            elif "error" in message:
                error = message["error"]
                raise QmpError(f"QMP {command}: {error.get('class')}: {error.get('desc')}")
            elif "return" in message:
                return message["return"]

    async def close(self) -> None:
        self._writer.close()
        try:
            await self._writer.wait_closed()
        except OSError:
            pass

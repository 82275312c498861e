"""A region's storage service as CosTLO uses it: versioned reads and guarded writes.

One pipelined :class:`~geoslo.live.RedisConnection` per server of the region (direct, or
through the WAN emulator for a remote region); a dropped connection is reopened on the
next request. A write carries its version and is applied by a small Lua script only if
the copy does not already hold that version or a newer one, so an older version never
overwrites a newer one, whatever order the requests arrive in (§5.4; see
docs/costlo-live.md, "Consistency"). The script says which of three things happened:
the copy took the write, already held exactly this version and value (a repeated
request), or refused it; the VM library never counts a refusal as a completed PUT.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from geoslo.errors import TestbedError
from geoslo.live._resp import RedisConnection, RedisReplyError, encode_command
from geoslo.live._versions import GUARDED_SET_SCRIPT
from geoslo.live.costlo._objects import (
    RegionEndpoints,
    copy_key,
    decode_value,
    encode_value,
    server_index,
)

__all__ = [
    "GuardedWrites",
    "RegionStore",
    "Store",
    "region_store",
    "GUARDED_SET_SCRIPT",
    "CHECKED_SET_SCRIPT",
    "WriteOutcome",
]

# KEYS[1] = key, ARGV[1] = version, ARGV[2] = "<version>:<payload>". Returns {status,
# stored version}: 1 written; 2 the copy already holds exactly ARGV[2]; 0 refused (it
# holds that version with another value, or a newer one). GUARDED_SET_SCRIPT's rule.
CHECKED_SET_SCRIPT = """
local current = redis.call('GET', KEYS[1])
if current then
  if current == ARGV[2] then return {2, tonumber(ARGV[1])} end
  local version = tonumber(string.match(current, '^(%d+):'))
  if version and version >= tonumber(ARGV[1]) then return {0, version} end
end
redis.call('SET', KEYS[1], ARGV[2])
return {1, tonumber(ARGV[1])}
"""


@dataclass(frozen=True)
class WriteOutcome:
    """What one guarded write did: ``"written"``, ``"present"`` (the copy already held
    this version and value) or ``"refused"``; ``stored_version`` is the copy's version."""

    status: str
    stored_version: int

    @property
    def accepted(self) -> bool:
        """The copy holds the written version and value now."""
        return self.status != "refused"


_STATUS = {0: "refused", 1: "written", 2: "present"}


class Store(Protocol):
    """What the client library, relays, agents and the VM library need of a region's
    storage, whatever engine holds it (Redis here, S3 in ``_s3``)."""

    name: str

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def read(self, key: str, copy: int) -> tuple[int, bytes] | None: ...

    async def write_checked(
        self, key: str, copy: int, version: int, payload: bytes
    ) -> WriteOutcome: ...

    async def write_retrying(
        self,
        key: str,
        copy: int,
        version: int,
        payload: bytes,
        deadline_s: float = 5.0,
        may_retry: RetryGate | None = None,
    ) -> WriteOutcome: ...


def region_store(endpoints: RegionEndpoints, name: str = "region") -> Store:
    """The store of one region as ``endpoints`` reach it: S3 when they name an S3 access,
    Redis servers otherwise."""
    if endpoints.s3 is not None:
        from geoslo.live.costlo._s3 import S3RegionStore

        return S3RegionStore(endpoints, name)
    return RegionStore(endpoints.server_ports, name)


class StoreUnavailable(TestbedError):
    """The storage did not answer: a GET that no copy answered (the key may exist: not the
    same as a key never written, which a GET answers with None), or a PUT whose synchronous
    requests failed (not acknowledged unless one of them completed first; what a copy took
    is propagated and repaired, and a PUT that no copy took can be put again: a request
    still in flight that lands later is overwritten by the newer version)."""


# asked before a write is sent again: True to send it (the hedge budget's try_extra)
RetryGate = Callable[[], Awaitable[bool]]
RETRY_FIRST_S = 0.05  # a write's first wait before it is sent again, then doubled
RETRY_MAX_S = 1.0  # up to this


class GuardedWrites:
    """``write`` and ``write_retrying`` on top of a store's ``write_checked`` (the same
    for every engine); ``fatal_errors`` are replies that retrying cannot change."""

    name: str
    fatal_errors: tuple[type[BaseException], ...] = ()

    async def write_checked(
        self, key: str, copy: int, version: int, payload: bytes
    ) -> WriteOutcome:
        raise NotImplementedError

    async def write(self, key: str, copy: int, version: int, payload: bytes) -> bool:
        """:meth:`write_checked`; True if this request stored the version."""
        return (await self.write_checked(key, copy, version, payload)).status == "written"

    async def write_retrying(
        self,
        key: str,
        copy: int,
        version: int,
        payload: bytes,
        deadline_s: float = 5.0,
        may_retry: RetryGate | None = None,
    ) -> WriteOutcome:
        """:meth:`write_checked`, retried while the server is unreachable or throttles, up
        to ``deadline_s`` (a server that does not answer counts as unreachable); then
        TestbedError. A refusal is returned, not retried. The waits between attempts
        double from RETRY_FIRST_S to RETRY_MAX_S (exponential backoff, as S3 asks of a
        client it throttles). Each retry first asks ``may_retry`` (the hedge budget: a
        retry is an extra storage request, issue 38, item 4); refused, it waits its turn
        of the backoff and asks again."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + deadline_s
        wait_s = RETRY_FIRST_S
        first = True
        while True:
            error: BaseException | None = None
            if first or may_retry is None or await may_retry():
                attempt = self.write_checked(key, copy, version, payload)
                try:
                    return await asyncio.wait_for(attempt, max(give_up - loop.time(), 0.05))
                except self.fatal_errors:
                    raise
                except (TestbedError, TimeoutError) as failed:
                    error = failed
            first = False
            if loop.time() >= give_up:
                reason = error or "its retries were refused by the hedge budget"
                if isinstance(error, TimeoutError):
                    reason = f"no answer within {deadline_s:g} s"
                raise TestbedError(f"{self.name}: cannot write {copy_key(key, copy)}: {reason}")
            await asyncio.sleep(min(wait_s, max(give_up - loop.time(), 0.0)))
            wait_s = min(2.0 * wait_s, RETRY_MAX_S)


class RegionStore(GuardedWrites):
    """The storage servers of one region, as reached from this process."""

    fatal_errors = (RedisReplyError,)

    def __init__(self, server_ports: tuple[int, ...], name: str = "region") -> None:
        self.server_ports = tuple(server_ports)
        self.name = name
        self._connections: list[RedisConnection | None] = [None] * len(self.server_ports)
        self._opening = [asyncio.Lock() for _ in self.server_ports]

    async def open(self) -> None:
        """Connect to every server now (otherwise on first use)."""
        for index in range(len(self.server_ports)):
            await self._connection(index)

    async def close(self) -> None:
        for index, connection in enumerate(self._connections):
            if connection is not None:
                await connection.close()
            self._connections[index] = None

    async def _connection(self, index: int) -> RedisConnection:
        async with self._opening[index]:
            connection = self._connections[index]
            if connection is not None and not connection.closed:
                return connection
            if connection is not None:
                await connection.close()
            connection = await RedisConnection.open(self.server_ports[index])
            self._connections[index] = connection
            return connection

    def server_for(self, key: str, copy: int) -> int:
        return server_index(key, copy, len(self.server_ports))

    async def read(self, key: str, copy: int) -> tuple[int, bytes] | None:
        """``(version, payload)`` of a copy, or None if the copy was never written."""
        connection = await self._connection(self.server_for(key, copy))
        stored = await connection.send(encode_command("GET", copy_key(key, copy)))
        return None if stored is None else decode_value(stored)

    async def write_checked(
        self, key: str, copy: int, version: int, payload: bytes
    ) -> WriteOutcome:
        """Write one version of a copy unless it holds that version or a newer one."""
        connection = await self._connection(self.server_for(key, copy))
        command = encode_command(
            "EVAL",
            CHECKED_SET_SCRIPT,
            1,
            copy_key(key, copy),
            version,
            encode_value(version, payload),
        )
        status, stored = await connection.send(command)
        return WriteOutcome(_STATUS[int(status)], int(stored))

"""How the environment reaches one node: its address and the cluster's credentials
(``AUTH`` as an ACL user or with the default user's password, TLS), the same for every
connection this package's environment opens (docs/director-live.md, "On your own
cluster")."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.connection import Connection, SSLConnection

from geoslo.errors import ConfigError

__all__ = ["Credentials", "NodeLink"]


@dataclass(frozen=True)
class Credentials:
    """``username`` (an ACL user; None: the default user) and ``password`` (None: no
    AUTH); ``tls`` with optional CA, client certificate and key files (PEM)."""

    username: str | None = None
    password: str | None = None
    tls: bool = False
    tls_ca_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None

    def __post_init__(self) -> None:
        if self.username is not None and self.password is None:
            raise ConfigError("password", "an ACL username needs its password")
        if not self.tls and (self.tls_ca_file or self.tls_cert_file or self.tls_key_file):
            raise ConfigError("tls", "TLS files are given: set tls = true")

    def redis_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of redis-py's clients and connections."""
        out: dict[str, Any] = {}
        if self.password is not None:
            out["password"] = self.password
        if self.username is not None:
            out["username"] = self.username
        if self.tls:
            out["ssl"] = True
            out["ssl_ca_certs"] = self.tls_ca_file
            out["ssl_certfile"] = self.tls_cert_file
            out["ssl_keyfile"] = self.tls_key_file
        return out

    def connection_kwargs(self) -> dict[str, Any]:
        """The same for a single ``Connection`` (no ``ssl`` flag: the class says it)."""
        return {k: v for k, v in self.redis_kwargs().items() if k != "ssl"}


class NodeLink:
    """Commands to the cluster's nodes with the credentials: ``command`` over a pool kept
    per node (a tick reads every node; connecting each time cost most of it on a busy
    machine), ``client`` a connection of the caller's own."""

    def __init__(self, credentials: Credentials | None = None, timeout_s: float = 10.0) -> None:
        self.credentials = credentials or Credentials()
        self.timeout_s = timeout_s
        self._pools: dict[tuple[str, int], aioredis.Redis] = {}

    def client(self, host: str, port: int, timeout_s: float | None = None) -> aioredis.Redis:
        """A client of the caller's own (it closes it)."""
        return aioredis.Redis(
            host=host,
            port=port,
            socket_timeout=timeout_s or self.timeout_s,
            **self.credentials.redis_kwargs(),
        )

    async def command(self, node: Any, *args: Any) -> Any:
        """One command to ``node`` (anything with ``host`` and ``port``)."""
        address = (node.host, node.port)
        pooled = self._pools.get(address)
        if pooled is None:
            pooled = self._pools[address] = self.client(*address)
        return await pooled.execute_command(*args)

    async def aclose(self) -> None:
        pools, self._pools = self._pools, {}
        for pooled in pools.values():
            await pooled.aclose()

    async def raw(self, node: Any, *args: Any) -> Any:
        """One command's reply as the server sent it (no redis-py parsing: ``COMMAND LIST``
        and ``COMMAND INFO`` of Redis 7 do not fit redis-py's parser)."""
        connection = self._connection(node)
        try:
            await connection.connect()
            await connection.send_command(*args)
            return await connection.read_response()
        finally:
            await connection.disconnect()

    def _connection(self, node: Any) -> Connection:
        kind = SSLConnection if self.credentials.tls else Connection
        return kind(
            host=node.host,
            port=node.port,
            socket_timeout=self.timeout_s,
            **self.credentials.connection_kwargs(),
        )

    async def pipeline(self, node: Any, commands: Sequence[tuple]) -> list[Any]:
        """Commands in one round trip (errors returned in place, not raised)."""
        connection = self.client(node.host, node.port)
        try:
            async with connection.pipeline(transaction=False) as pipe:
                for command in commands:
                    pipe.execute_command(*command)
                return await pipe.execute(raise_on_error=False)
        finally:
            await connection.aclose()

    async def monitor(self, node: Any, window_s: float) -> list[bytes]:
        """Every line ``MONITOR`` shows on ``node`` for ``window_s`` (then disconnected,
        which ends the monitoring)."""
        connection = self._connection(node)
        lines: list[bytes] = []
        try:
            await connection.connect()
            await connection.send_command("MONITOR")
            await connection.read_response()  # OK
            deadline = time.monotonic() + window_s
            while (left := deadline - time.monotonic()) > 0:
                try:
                    line = await connection.read_response(timeout=left)
                except TimeoutError:
                    task = asyncio.current_task()
                    if task is not None and task.cancelling():
                        raise asyncio.CancelledError from None  # a cancel, not the window's end
                    break
                if isinstance(line, bytes):
                    lines.append(line)
        finally:
            await connection.disconnect()
        return lines

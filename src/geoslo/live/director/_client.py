"""The client library of the live binned cluster (FAST 2011 §5.1, §6.1).

* ``get(index)``: ``DEBUG SLEEP`` + ``GET`` to ``read_fanout`` replicas of the key's bin;
  the first answer counts (§6.1). If none of them has the key (a replica being deleted),
  the other replicas are asked once.
* ``put(index, payload)``: a new version (unique across clients: ``version_of``),
  ``DEBUG SLEEP`` + guarded ``SET`` (a Lua script that writes only if newer) to every
  server of the bin's write set, each with its own service time. When every one has
  answered, a :class:`PutResult`: acked if at least one replica stored it; refused if
  none did because each already held a newer version; failed otherwise.
* A request that fails because the connection broke means the server died: the router
  drops it from every set at once (docs/director-live.md, failures).
* Every request is watched: a server that has answered nothing for ``request_timeout_s``
  while a request to it waits (hung, e.g. SIGSTOP) is declared down the same way, and
  every request waiting for it fails with :class:`ServerFailed` saying so.

One pipelined :class:`~geoslo.live.RedisConnection` per server carries the data path;
copies and checks open their own (``open_connection``), watched alike.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np

from geoslo.errors import TestbedError
from geoslo.live._backend import ServiceWork, get_payload, key_name, work_payload
from geoslo.live._resp import RedisConnection, RedisReplyError, encode_command
from geoslo.live.director._config import ClusterConfig
from geoslo.live.director._layout import (
    COPY_SET_SCRIPT,
    GUARDED_SET_SCRIPT,
    BinLayout,
    VersionClock,
    decode_value,
    encode_value,
    script_sha,
    version_of,
)
from geoslo.live.director._router import Router
from geoslo.live.director._stats import WorkloadStats

__all__ = ["ClusterClient", "PutResult", "ServerFailed"]

_GUARDED_SHA = script_sha(GUARDED_SET_SCRIPT)
_COPY_SHA = script_sha(COPY_SET_SCRIPT)


# After a request's server looks silent for request_timeout_s, look once more this much
# later: replies that were waiting in the socket while the event loop itself was stalled
# (a loaded machine) are read in between, so a busy client never declares a live server down.
_CONFIRM_DELAY_S = 0.2


class ServerFailed(TestbedError):
    """A server could not be reached: its connection broke (the process died) or it
    answered nothing for ``request_timeout_s`` (hung); the message says which."""


@dataclass(frozen=True)
class PutResult:
    """How a put ended. ``acked``: a replica stored ``version``. ``refused``: no replica
    stored it because each one already held a newer version (another client's later put);
    the put did not happen. ``detail`` names the replicas that failed or refused, and why."""

    version: int
    acked: bool
    refused: bool = False
    detail: str = ""


class _Watched:
    """One request in flight: the caller's future and when it was sent (loop time)."""

    __slots__ = ("name", "future", "sent_s", "suspected")

    def __init__(self, name: str, future: asyncio.Future, sent_s: float) -> None:
        self.name = name
        self.future = future
        self.sent_s = sent_s
        self.suspected = False


class ClusterClient:
    """Routes gets and puts by bin, measures them and feeds the statistics (§5.5)."""

    def __init__(
        self,
        config: ClusterConfig,
        router: Router,
        stats: WorkloadStats,
        on_failure: Callable[[str], None] = lambda name: None,
        client_id: int = 0,
        clock: VersionClock | None = None,
    ) -> None:
        """``client_id`` makes this client's versions unique among the clients of one
        cluster; clients in one process share ``clock`` (``DirectorCluster.open_client``)."""
        version_of(0, client_id)  # validates the id
        self.config = config
        self.layout = BinLayout(config.keys, config.bins)
        self.router = router
        self.stats = stats
        self.on_failure = on_failure
        self.get_work = ServiceWork(config.get_service_mean_ms)
        self.put_work = ServiceWork(config.put_service_mean_ms)
        self.reply_errors: list[str] = []  # Redis error replies: a bug, never expected
        self.client_id = client_id
        self.clock = clock or VersionClock()
        seed = config.seed if client_id == 0 else [config.seed, client_id]
        self._rng = np.random.default_rng(seed)
        self._connections: dict[str, RedisConnection] = {}
        self._opened: list[RedisConnection] = []
        self._heard_s: dict[str, float] = {}  # loop time of each server's latest reply
        self._waiting: dict[str, set[_Watched]] = {}
        self.down_reasons: dict[str, str] = {}  # servers declared down, and why

    # --- connections ------------------------------------------------------------------------
    async def open_connection(self, name: str, port: int) -> RedisConnection:
        """A new connection to server ``name`` with the scripts loaded (the data path's or
        a copy's own)."""
        connection = await RedisConnection.open(port)
        self._opened.append(connection)
        for script in (GUARDED_SET_SCRIPT, COPY_SET_SCRIPT):
            await self.call(name, connection, encode_command(b"SCRIPT", b"LOAD", script))
        return connection

    async def attach(self, name: str, port: int) -> None:
        """Connect the data path to a server (before it receives anything)."""
        self._connections[name] = await self.open_connection(name, port)

    def detach(self, name: str) -> None:
        """Stop using a server (it is removed or dead); its connection closes at ``close``."""
        self._connections.pop(name, None)

    def server_failed(self, name: str, reason: str = "") -> None:
        """The server is gone: drop it from every replica set and stop using it."""
        self.router.drop_server(name)
        if name in self._connections:
            self.down_reasons.setdefault(name, reason or f"{name}: its connection broke")
            self.detach(name)
            self.on_failure(name)

    async def close(self) -> None:
        self._connections.clear()
        opened, self._opened = self._opened, []
        for connection in opened:
            await connection.close()

    def now_s(self) -> float:
        return time.monotonic()

    # --- gets -------------------------------------------------------------------------------
    async def get(self, index: int) -> tuple[int, bytes] | None:
        """``(version, payload)`` of key ``index``, or None if it failed or timed out."""
        b = self.layout.bin_of(index)
        key = key_name(index)
        started = time.perf_counter()
        chosen = self.router.read_choice(b, self._rng)
        result = await self._first_answer(chosen, key)
        if result is None:
            others = [n for n in self.router.replicas(b) if n not in chosen]
            if others:
                result = await self._first_answer(others, key)
        latency_ms = (time.perf_counter() - started) * 1e3
        self.stats.record_get(b, latency_ms, result is not None, self.now_s())
        return result

    async def _first_answer(self, names: list[str], key: bytes) -> tuple[int, bytes] | None:
        pending = set()
        for name in names:
            work_s = self.get_work.draw_s(self._rng)
            pending.add(self._send(name, get_payload(key, work_s)))
        deadline = time.monotonic() + self.config.get_timeout_s
        while pending:
            timeout_s = deadline - time.monotonic()
            if timeout_s <= 0:
                return None
            done, pending = await asyncio.wait(
                pending, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
            )
            for future in done:
                if future.exception() is None and future.result()[1] is not None:
                    return decode_value(future.result()[1])
        return None

    # --- puts -------------------------------------------------------------------------------
    def next_version(self) -> int:
        """A version no other client of the cluster uses, newer than every earlier one."""
        return version_of(self.clock.next_tick(time.time_ns() // 1_000_000), self.client_id)

    async def put(self, index: int, payload: bytes) -> PutResult:
        """Store ``payload`` under key ``index`` on every server of its bin's write set;
        acked, refused or failed (:class:`PutResult`)."""
        b = self.layout.bin_of(index)
        key = key_name(index)
        version = self.next_version()
        stored = encode_value(version, payload)
        targets, replicas = self.router.write_set(b), set(self.router.replicas(b))
        token = asyncio.get_running_loop().create_future()
        self.router.begin_put(b, token)
        try:
            payloads = [self._put_payload(key, version, stored) for _ in targets]
            futures = [self._send(n, p) for n, p in zip(targets, payloads, strict=True)]
            results = await asyncio.gather(*futures, return_exceptions=True)
        finally:
            self.router.end_put(b, token)
            token.set_result(None)
        self.stats.record_put(b, self.now_s())
        return _put_result(version, b, targets, replicas, results)

    def _put_payload(self, key: bytes, version: int, stored: bytes) -> bytes:
        work_s = self.put_work.draw_s(self._rng)
        guarded = encode_command(b"EVALSHA", _GUARDED_SHA, 1, key, version, stored)
        return work_payload(work_s) + guarded

    def _send(self, name: str, payload: bytes) -> asyncio.Future:
        """Two pipelined commands to ``name`` on the data path, watched."""
        self.stats.record_server(name, self.now_s())
        connection = self._connections.get(name)
        if connection is None:
            future = asyncio.get_running_loop().create_future()
            future.set_exception(ServerFailed(f"{name} is not in use"))
            return future
        return self._watch(name, connection.send(payload, replies=2))

    # --- watching requests (a broken connection or a silent server means it is down) ------
    async def call(self, name: str, connection: RedisConnection, payload: bytes, replies=1):
        """Send ``payload`` to server ``name`` on ``connection`` and wait for the reply, or
        :class:`ServerFailed` once the server is declared down."""
        return await self._watch(name, connection.send(payload, replies))

    def _watch(self, name: str, sent: asyncio.Future) -> asyncio.Future:
        """A future for ``sent``'s reply that fails if the connection breaks or the server
        stays silent for ``request_timeout_s``."""
        loop = asyncio.get_running_loop()
        watched = _Watched(name, loop.create_future(), loop.time())
        watched.future.add_done_callback(_retrieve)
        self._waiting.setdefault(name, set()).add(watched)
        sent.add_done_callback(partial(self._answered, watched))
        loop.call_later(self.config.request_timeout_s, self._check_silence, watched)
        return watched.future

    def _answered(self, watched: _Watched, sent: asyncio.Future) -> None:
        name = watched.name
        self._waiting.get(name, set()).discard(watched)
        error = None if sent.cancelled() else sent.exception()
        if not sent.cancelled() and (error is None or isinstance(error, RedisReplyError)):
            self._heard_s[name] = asyncio.get_running_loop().time()
        if watched.future.done():
            return  # declared down already, or the caller gave up (its connection closed)
        if sent.cancelled():
            watched.future.set_exception(ServerFailed(f"{name}: request abandoned"))
        elif error is None:
            watched.future.set_result(sent.result())
        elif isinstance(error, RedisReplyError):
            self.reply_errors.append(f"{name}: {error}")
            watched.future.set_exception(error)
        else:
            reason = self.down_reasons.get(name) or f"{name}: its connection broke ({error})"
            self.server_failed(name, reason)
            watched.future.set_exception(ServerFailed(reason))

    def _check_silence(self, watched: _Watched) -> None:
        """At a request's deadline: re-arm while its server still answers (busy, not hung);
        after ``request_timeout_s`` of silence, confirmed once, declare it down."""
        if watched.future.done():
            return
        loop = asyncio.get_running_loop()
        timeout_s = self.config.request_timeout_s
        quiet_since_s = max(self._heard_s.get(watched.name, watched.sent_s), watched.sent_s)
        silent_s = loop.time() - quiet_since_s
        if silent_s < timeout_s:
            watched.suspected = False
            loop.call_later(timeout_s - silent_s, self._check_silence, watched)
        elif not watched.suspected:
            watched.suspected = True
            loop.call_later(_CONFIRM_DELAY_S, self._check_silence, watched)
        else:
            self._declare_down(watched.name, silent_s)

    def _declare_down(self, name: str, silent_s: float) -> None:
        """The server hangs: drop it like a dead one and fail everything waiting for it."""
        reason = (
            f"{name} answered nothing for {silent_s:.1f} s "
            f"(request_timeout_s={self.config.request_timeout_s:g}); declared down"
        )
        self.down_reasons.setdefault(name, reason)
        self.server_failed(name, reason)
        for watched in self._waiting.pop(name, set()):
            if not watched.future.done():
                watched.future.set_exception(ServerFailed(reason))

    # --- copies (on a copy's own connection) ------------------------------------------------
    async def read_keys(
        self, name: str, connection: RedisConnection, keys: list[bytes]
    ) -> list[bytes | None]:
        return await self.call(name, connection, encode_command(b"MGET", *keys))

    async def write_copied(
        self,
        name: str,
        connection: RedisConnection,
        keys: list[bytes],
        values: list[bytes],
        work_s: float,
    ) -> int:
        """Store copied values on server ``name`` unless it holds a newer version (§5.3's
        copy); ``work_s`` is the target's service time for this batch."""
        command = encode_command(b"EVALSHA", _COPY_SHA, len(keys), *keys, *values)
        if work_s > 0:
            return (await self.call(name, connection, work_payload(work_s) + command, 2))[1]
        return await self.call(name, connection, command)

    async def delete_keys(self, name: str, connection: RedisConnection, keys: list[bytes]) -> None:
        if keys:
            await self.call(name, connection, encode_command(b"UNLINK", *keys))


def _put_result(version: int, b: int, targets, replicas: set[str], results) -> PutResult:
    """Acked if a replica stored the put (the guard answered 1); refused if the replicas
    that answered all held a newer version (0); failed if none answered. Copy targets
    take the put but do not ack it."""
    stored, refused, failed = [], [], []
    for name, result in zip(targets, results, strict=True):
        if name not in replicas:
            continue
        if isinstance(result, BaseException):
            failed.append(str(result) or type(result).__name__)
        elif result[1] == 1:
            stored.append(name)
        else:
            refused.append(name)
    problems = [f"{name} holds a newer version" for name in refused] + failed
    detail = "; ".join(problems) or ("" if stored else f"bin {b} has no live replica")
    return PutResult(version, bool(stored), refused=bool(refused and not stored), detail=detail)


def _retrieve(future: asyncio.Future) -> None:
    """Mark a watched future's error as seen: a get stops listening after its first answer."""
    if not future.cancelled():
        future.exception()

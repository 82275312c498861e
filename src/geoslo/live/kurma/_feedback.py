"""C3's server feedback for RESP stores: each server's queue and service time.

C3 (Suresh et al., NSDI 2015, §4.1) has every server piggyback its queue length and its
service time on each response. Redis sends neither, and its requests wait in the kernel's
socket buffers, where Redis cannot see them. A feedback process beside a site's servers
measures both from outside:

* **queue**: the bytes received on a server's connections and not yet read by it (the
  unread bytes of every established socket whose local port is the server's, in the
  servers' network namespace, from the kernel's sock_diag: ``geoslo.live._sockdiag``),
  over the mean size of a request (the server's input bytes per request since its last
  ``INFO``);
* **service time**: the server's own time per request (``INFO commandstats``: microseconds
  over calls since the last poll, times the commands a request takes).

While anyone subscribes, it sends every subscriber one JSON line per period (20 ms by
default) with every server of its site. A client applies a server's latest line only when
a response of that server arrives, which is what piggybacking would give it; a remote
site's lines reach the client across the WAN, as its responses do.

Known gap: requests Redis has already read into its query buffer and not yet executed do
not count (Redis executes all of a connection's buffered commands in one go).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass

from geoslo.errors import ConfigError, TestbedError
from geoslo.live._processes import JsonConfigFile
from geoslo.live._resp import RedisConnection
from geoslo.live._sockdiag import SockDiag

__all__ = [
    "FeedbackConfig",
    "ServerCounters",
    "info_counters",
    "serve_feedback",
]

OWN_COMMANDS = frozenset({"info", "auth", "hello", "ping", "client", "select"})  # not requests


@dataclass(frozen=True)
class FeedbackConfig(JsonConfigFile):
    """One site's feedback process: where it listens, the site's servers (host, port) and
    their password, how often it sends (ms) and polls INFO (s), and how many commands a
    client's request takes (SleepWork pipelines two: DEBUG SLEEP and the GET). Written
    readable by its owner only (it holds the password)."""

    site: str
    host: str
    port: int
    servers: tuple[tuple[str, int], ...]
    password: str | None = None
    # every 20 ms, C3's own rate interval: at 5 ms the three sites' feedback processes took
    # 25-37% of a core each during C3's replay on 2 cores, and the load generators ran
    # 62-384 ms late (the others' 8-20 ms); the twin's C3 with feedback 20 ms stale had
    # 0.04-0.15% violations against 0.00-0.02% exact (run 5 of 2026-11-29)
    period_ms: float = 20.0
    info_period_s: float = 1.0
    commands_per_request: int = 1

    def __post_init__(self) -> None:
        if not self.servers:
            raise ConfigError("servers", "give at least one server")
        if not self.period_ms > 0 or not self.info_period_s > 0:
            raise ConfigError("period_ms", "the periods must be > 0")
        if self.commands_per_request < 1:
            raise ConfigError("commands_per_request", "must be >= 1")


def info_counters(info: str) -> tuple[int, int, int]:
    """From ``INFO`` text: input bytes, calls and microseconds of the clients' commands
    (the feedback's own INFO, AUTH and such left out)."""
    input_bytes = calls = usec = 0
    for line in info.splitlines():
        key, _, value = line.partition(":")
        if key == "total_net_input_bytes":
            input_bytes = int(value)
        elif key.startswith("cmdstat_") and key[8:].split("|")[0] not in OWN_COMMANDS:
            stats = dict(item.split("=") for item in value.split(","))
            calls += int(stats["calls"])
            usec += int(stats["usec"])
    return input_bytes, calls, usec


class ServerCounters:
    """One server's INFO counters between polls: mean request bytes and service time."""

    def __init__(self, commands_per_request: int) -> None:
        self.commands_per_request = commands_per_request
        self.last: tuple[int, int, int] | None = None
        self.request_bytes = 0.0  # 0: not measured yet
        self.service_ms = 0.0

    def update(self, counters: tuple[int, int, int]) -> None:
        """A new poll; the means move only when the server served requests since the last
        (the first poll counts from the server's start)."""
        last = self.last or (0, 0, 0)
        if all(a >= b for a, b in zip(counters, last, strict=True)):  # not a restart
            d_bytes, d_calls, d_usec = (a - b for a, b in zip(counters, last, strict=True))
            requests = d_calls / self.commands_per_request
            if requests >= 1 and d_bytes > 0:
                self.request_bytes = d_bytes / requests
                self.service_ms = d_usec / requests / 1e3
        self.last = counters

    def queue(self, unread_bytes: int) -> float:
        """Requests waiting unread (0 until a request's size is known)."""
        return unread_bytes / self.request_bytes if self.request_bytes > 0 else 0.0


class _Feedback:
    def __init__(self, config: FeedbackConfig) -> None:
        self.config = config
        self.ports = {port for _, port in config.servers}
        self.counters = [ServerCounters(config.commands_per_request) for _ in config.servers]
        self.subscribers: set[asyncio.StreamWriter] = set()
        self.diag = SockDiag()
        self.wake = asyncio.Event()

    async def subscribe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        """A subscriber gets lines until it closes its connection."""
        self.subscribers.add(writer)
        self.wake.set()
        with contextlib.suppress(OSError):
            while await reader.read(4096):  # whatever it sends is dropped; EOF ends it
                pass
        self.subscribers.discard(writer)
        writer.close()

    def line(self) -> bytes:
        unread = self.diag.unread_bytes(self.ports)
        servers = self.config.servers
        message = {
            "t_unix_s": time.time(),
            "q": [
                round(c.queue(unread[port]), 2)
                for c, (_, port) in zip(self.counters, servers, strict=True)
            ],
            "service_ms": [round(c.service_ms, 4) for c in self.counters],
        }
        return json.dumps(message).encode() + b"\n"

    async def send_lines(self) -> None:
        period_s = self.config.period_ms / 1e3
        while True:
            if not self.subscribers:
                self.wake.clear()
                await self.wake.wait()
            line = self.line()
            for writer in list(self.subscribers):
                if writer.transport.get_write_buffer_size() < 1 << 16:  # a slow reader skips
                    writer.write(line)
            await asyncio.sleep(period_s)

    async def poll_info(self) -> None:
        connections: list[RedisConnection | None] = [None] * len(self.config.servers)
        while True:
            for k, (host, port) in enumerate(self.config.servers):
                try:
                    if connections[k] is None or connections[k].closed:
                        connections[k] = await RedisConnection.open(
                            port, host, 2.0, password=self.config.password
                        )
                    info = await asyncio.wait_for(connections[k].command(b"INFO", b"all"), 2.0)
                    self.counters[k].update(info_counters(info.decode()))
                except (OSError, TimeoutError, TestbedError, ValueError, KeyError):
                    if connections[k] is not None:  # down: its last means stand meanwhile
                        await connections[k].close()
                    connections[k] = None
            await asyncio.sleep(self.config.info_period_s)


async def serve_feedback(config: FeedbackConfig) -> None:
    """Run one site's feedback process until it is stopped."""
    feedback = _Feedback(config)
    server = await asyncio.start_server(feedback.subscribe, config.host, config.port)
    async with server:
        await asyncio.gather(feedback.send_lines(), feedback.poll_info())

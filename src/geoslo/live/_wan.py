"""The WAN emulator: a delay-injecting TCP proxy for every directed path between sites.

A path ``src -> dst`` listens on a loopback port and forwards to a server of ``dst``.
Every chunk of bytes, in each direction, is held for half the base RTT of the moment
(a :class:`~geoslo.topology.BaseRttSchedule`, so routes change during a run) plus a
one-way residual drawn from a gamma distribution, and chunks leave in the order they
came (no reordering, as on a TCP path). One process serves every path on one asyncio loop.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from geoslo.live._routes import schedule_from_dict, schedule_to_dict
from geoslo.topology import BaseRttSchedule

__all__ = [
    "DelayPath",
    "WanConfig",
    "measure_throughput_bytes_per_s",
    "pump_both_ways",
    "serve_wan",
]

CHUNK_BYTES = 65536


@dataclass(frozen=True)
class DelayPath:
    """One directed path: clients at ``src`` reach a server of ``dst`` through it."""

    src: str
    dst: str
    listen_port: int
    target_port: int
    base_rtt: BaseRttSchedule
    residual_rtt_mean_ms: float = 0.5  # as the simulator's default residual (sim._params)
    residual_rtt_shape: float = 2.0

    def one_way_delay_s(self, t_s: float, rng: np.random.Generator) -> float:
        """Half the base RTT at ``t_s`` (since the epoch) plus a one-way residual sample."""
        residual_ms = 0.0
        if self.residual_rtt_mean_ms > 0:
            scale = self.residual_rtt_mean_ms / 2 / self.residual_rtt_shape
            residual_ms = float(rng.gamma(self.residual_rtt_shape, scale))
        return (float(self.base_rtt.at(t_s)) / 2 + residual_ms) / 1e3

    def to_dict(self) -> dict:
        return {
            "src": self.src,
            "dst": self.dst,
            "listen_port": self.listen_port,
            "target_port": self.target_port,
            "base_rtt": schedule_to_dict(self.base_rtt),
            "residual_rtt_mean_ms": self.residual_rtt_mean_ms,
            "residual_rtt_shape": self.residual_rtt_shape,
        }

    @classmethod
    def from_dict(cls, data: dict) -> DelayPath:
        return cls(
            data["src"],
            data["dst"],
            int(data["listen_port"]),
            int(data["target_port"]),
            schedule_from_dict(data["base_rtt"]),
            float(data["residual_rtt_mean_ms"]),
            float(data["residual_rtt_shape"]),
        )


@dataclass(frozen=True)
class WanConfig:
    """Every path, the wall-clock epoch (Unix seconds) the schedules count from, a seed."""

    paths: tuple[DelayPath, ...]
    epoch_unix_s: float
    seed: int = 0

    def write(self, path: Path) -> None:
        data = {
            "epoch_unix_s": self.epoch_unix_s,
            "seed": self.seed,
            "paths": [p.to_dict() for p in self.paths],
        }
        path.write_text(json.dumps(data))

    @classmethod
    def read(cls, path: Path) -> WanConfig:
        data = json.loads(path.read_text())
        paths = tuple(DelayPath.from_dict(p) for p in data["paths"])
        return cls(paths, float(data["epoch_unix_s"]), int(data["seed"]))


class _Pump:
    """Copies one direction of one connection, holding each chunk for the path's delay."""

    def __init__(self, path: DelayPath, epoch_unix_s: float, rng: np.random.Generator):
        self.path = path
        self.epoch_unix_s = epoch_unix_s
        self.rng = rng
        self.queue: deque[tuple[float, bytes]] = deque()
        self.ready = asyncio.Event()
        self.last_release_s = 0.0

    async def read(self, reader: asyncio.StreamReader) -> None:
        loop = asyncio.get_running_loop()
        try:
            while data := await reader.read(CHUNK_BYTES):
                delay_s = self.path.one_way_delay_s(time.time() - self.epoch_unix_s, self.rng)
                release = max(loop.time() + delay_s, self.last_release_s)
                self.last_release_s = release
                self.queue.append((release, data))
                self.ready.set()
        except OSError:
            pass
        self.queue.append((0.0, b""))  # end of stream, delivered after what came before it
        self.ready.set()

    async def write(self, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                while not self.queue:
                    self.ready.clear()
                    await self.ready.wait()
                release, data = self.queue.popleft()
                if not data:
                    break
                wait_s = release - loop.time()
                if wait_s > 0:
                    await asyncio.sleep(wait_s)
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()


async def pump_both_ways(path: DelayPath, epoch: float, rng, client, upstream) -> None:
    """Copy both directions between a client's and the server's (reader, writer) streams,
    every chunk held for the path's one-way delay."""
    (reader, writer), (up_reader, up_writer) = client, upstream
    forward, backward = _Pump(path, epoch, rng), _Pump(path, epoch, rng)
    await asyncio.gather(
        forward.read(reader),
        forward.write(up_writer),
        backward.read(up_reader),
        backward.write(writer),
    )


async def _relay(path: DelayPath, epoch: float, rng, reader, writer) -> None:
    try:
        upstream = await asyncio.open_connection("127.0.0.1", path.target_port)
    except OSError:
        writer.close()  # the destination is down: the client sees the connection drop
        return
    await pump_both_ways(path, epoch, rng, (reader, writer), upstream)


async def serve_wan(config: WanConfig) -> None:
    """Serve every path until cancelled."""
    rng = np.random.default_rng(config.seed)
    servers = []
    for path in config.paths:

        async def handle(reader, writer, path=path):
            await _relay(path, config.epoch_unix_s, rng, reader, writer)

        servers.append(await asyncio.start_server(handle, "127.0.0.1", path.listen_port))
    try:
        await asyncio.gather(*(s.serve_forever() for s in servers))
    finally:
        for s in servers:
            s.close()


def measure_throughput_bytes_per_s(
    rtt_ms: float, size_bytes: int = 64_000_000, timeout_s: float = 120.0
) -> float:
    """Bytes per second that one TCP stream carries through the delay pump at ``rtt_ms``,
    measured on loopback: ``size_bytes`` are sent to a sink, which answers when it has them
    all (so the time includes the last byte's delay). Bounded in bytes and in time."""
    return asyncio.run(asyncio.wait_for(_measure(rtt_ms, size_bytes), timeout_s))


async def _measure(rtt_ms: float, size_bytes: int) -> float:
    received = asyncio.get_running_loop().create_future()

    async def sink(reader, writer):
        got = 0
        while got < size_bytes and (data := await reader.read(CHUNK_BYTES)):
            got += len(data)
        writer.write(b"k")
        await writer.drain()
        writer.close()
        if not received.done():
            received.set_result(got)

    rtt = BaseRttSchedule(np.array([0.0]), np.array([float(rtt_ms)]))
    sink_server = await asyncio.start_server(sink, "127.0.0.1", 0)
    sink_port = sink_server.sockets[0].getsockname()[1]
    path = DelayPath("a", "b", 0, sink_port, rtt, 0.0)

    relayed = asyncio.get_running_loop().create_future()

    async def relay(reader, writer):
        await _relay(path, time.time(), np.random.default_rng(0), reader, writer)
        relayed.set_result(None)

    relay_server = await asyncio.start_server(relay, "127.0.0.1", 0)
    relay_port = relay_server.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", relay_port)
        started = time.perf_counter()
        block = bytes(CHUNK_BYTES)
        for offset in range(0, size_bytes, CHUNK_BYTES):
            writer.write(block[: min(CHUNK_BYTES, size_bytes - offset)])
            await writer.drain()
        await reader.readexactly(1)
        elapsed_s = time.perf_counter() - started
        writer.close()
        await received
        await relayed  # both directions drained: nothing is left running
    finally:
        for server in (relay_server, sink_server):
            server.close()
    return size_bytes / elapsed_s

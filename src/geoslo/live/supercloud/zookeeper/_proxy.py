"""The WAN between the sites: a delay proxy for every server address in every other site.

For a server of site S with address A, the proxy listens on A in each site other than S
and forwards each connection to A inside S's namespace, holding every chunk for half the
RTT in each direction, in order (the project's :func:`geoslo.live._wan.pump_both_ways`). So the
same address is reached directly in-site and across the WAN from elsewhere (§5.2.2).
Run as ``python -m geoslo.live zk-proxy <config.json>``; it touches
``<config>.ready`` once every listener is bound.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from geoslo.live._netns import socket_in
from geoslo.live._wan import DelayPath, pump_both_ways
from geoslo.topology import BaseRttSchedule

__all__ = ["ProxyRoute", "main", "write_routes"]


@dataclass(frozen=True)
class ProxyRoute:
    """Listen on ``address:port`` in ``listen_ns``; forward to the same in ``target_ns``,
    ``rtt_ms`` apart (None: the file's RTT)."""

    listen_ns: str
    target_ns: str
    address: str
    port: int
    rtt_ms: float | None = None


def write_routes(path: Path, routes: list[ProxyRoute], rtt_ms: float = 0.0) -> None:
    """The proxy's config: every route, and the RTT of those that do not set their own."""
    data = {"rtt_ms": rtt_ms, "routes": [r.__dict__ for r in routes]}
    Path(path).write_text(json.dumps(data))


def _delay_path(route: ProxyRoute, rtt_ms: float) -> DelayPath:
    rtt = BaseRttSchedule(np.array([0.0]), np.array([float(rtt_ms)]))
    return DelayPath(route.listen_ns, route.target_ns, route.port, route.port, rtt, 0.0)


def _listener(route: ProxyRoute) -> socket.socket:
    sock = socket_in(route.listen_ns)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((route.address, route.port))
    sock.listen(128)
    sock.setblocking(False)
    return sock


async def _open_upstream(route: ProxyRoute):
    sock = socket_in(route.target_ns)
    sock.setblocking(False)
    try:
        await asyncio.get_running_loop().sock_connect(sock, (route.address, route.port))
    except OSError:
        sock.close()
        raise
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return await asyncio.open_connection(sock=sock)


async def _relay(route: ProxyRoute, path: DelayPath, rng, reader, writer) -> None:
    try:
        upstream = await _open_upstream(route)
    except OSError:
        writer.close()  # the server is not running: the peer sees the connection drop
        return
    await pump_both_ways(path, time.time(), rng, (reader, writer), upstream)


async def serve(routes: list[ProxyRoute], rtt_ms: float, ready_path: Path) -> None:
    """Serve every route until cancelled."""
    rng = np.random.default_rng(0)  # unused: the paths have no random residual
    servers = []
    for route in routes:
        path = _delay_path(route, rtt_ms if route.rtt_ms is None else route.rtt_ms)

        async def handle(reader, writer, route=route, path=path):
            writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await _relay(route, path, rng, reader, writer)

        servers.append(await asyncio.start_server(handle, sock=_listener(route)))
    ready_path.write_text("ready\n")
    await asyncio.gather(*(s.serve_forever() for s in servers))


def main(argv: list[str]) -> None:
    config_path = Path(argv[0])
    data = json.loads(config_path.read_text())
    routes = [ProxyRoute(**r) for r in data["routes"]]
    ready = config_path.with_suffix(".ready")
    asyncio.run(serve(routes, float(data["rtt_ms"]), ready))

"""A relay VM in a region (CosTLO §3, Fig. 4b; §5.2): one client message in, the tuple's
GET requests out to the local storage servers, the first found value back.

Only one copy of the object leaves the region, whatever the number of requests. Protocol
(JSON lines): ``{"key": k, "requests": [[copy, index], ...]}`` -> ``{"found": true,
"version": v, "value": base64, "copy": c, "index": i}`` or ``{"found": false}``. With a
``secret_file`` every request is sealed (``_jsonlines.Sealing``, service ``costlo-relay``);
a relay beyond loopback does not start without one: it reads the region's objects.
"""

from __future__ import annotations

import asyncio
import base64
from dataclasses import dataclass
from pathlib import Path

from geoslo.errors import InputError, TestbedError
from geoslo.live._processes import JsonConfigFile
from geoslo.live.costlo._jsonlines import (
    Sealing,
    listener_sealing,
    run_until_sigterm,
    sealing_from_file,
    serve_until,
)
from geoslo.live.costlo._objects import RegionEndpoints
from geoslo.live.costlo._storage import Store, region_store

__all__ = ["RelayConfig", "Relay", "RELAY_SERVICE", "relay_sealing", "serve_relay", "run_relay"]

RELAY_SERVICE = "costlo-relay"  # the name sealed requests are addressed to


@dataclass(frozen=True)
class RelayConfig(JsonConfigFile):
    """Where the relay listens (``listen_host:port``), the file of the secret its requests
    are sealed with, and how it reaches its region's (local) storage servers: their ports
    on ``host``, speaking S3 with ``s3`` (an :class:`S3Access` as a dict)."""

    port: int
    server_ports: tuple[int, ...]
    host: str = "127.0.0.1"
    s3: dict | None = None
    listen_host: str = "127.0.0.1"
    secret_file: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "server_ports", tuple(self.server_ports))

    @property
    def endpoints(self) -> RegionEndpoints:
        return RegionEndpoints(self.server_ports, None, self.host, self.s3)

    def sealing(self) -> Sealing | None:
        """The sealing requests need (`listener_sealing`)."""
        exposure = "anybody reaching it could read the region's objects"
        return listener_sealing(self.listen_host, self.secret_file, RELAY_SERVICE, exposure)


def relay_sealing(endpoints: RegionEndpoints) -> Sealing | None:
    """How a client seals its requests to the region's relay (None: plain)."""
    return sealing_from_file(endpoints.relay_secret_file, RELAY_SERVICE)


class Relay:
    """Fans one GET out to the requested copies; the first found answer wins."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def handle(self, message: dict) -> dict:
        key = message["key"]
        requests = [(int(c), int(i)) for c, i in message["requests"]]
        if not requests:
            raise InputError("requests", "a relayed GET names at least one request")
        return await first_found(self.store, key, requests)


async def first_found(store: Store, key: str, requests: list[tuple[int, int]]) -> dict:
    """Issue every request; return the first found value and cancel the others."""
    tasks = {asyncio.create_task(store.read(key, copy)): (copy, index) for copy, index in requests}
    pending = set(tasks)
    reply: dict = {"found": False}
    errors = 0
    try:
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task.exception() is not None:
                    errors += 1
                    continue
                found = task.result()
                if found is not None and not reply["found"]:
                    copy, index = tasks[task]
                    value = base64.b64encode(found[1]).decode()
                    reply = {"found": True, "version": found[0], "value": value}
                    reply.update(copy=copy, index=index)
            if reply["found"]:
                break
    finally:
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    if errors == len(requests):
        raise TestbedError(f"relay: every request for {key!r} failed")
    return reply


async def serve_relay(config: RelayConfig, stop: asyncio.Event | None = None) -> None:
    """Serve until ``stop`` is set. The store's clients are made before the port opens
    (an S3 client loads its service model once: not on the first relayed GET)."""
    sealing = config.sealing()
    store = region_store(config.endpoints, "relay")
    await store.open()
    await serve_until(
        Relay(store).handle, config.port, stop, store.close, config.listen_host, sealing
    )


def run_relay(config_path: Path) -> None:
    """The ``costlo-relay`` process: serve until SIGTERM."""
    config = RelayConfig.read(config_path)
    run_until_sigterm(lambda stop: serve_relay(config, stop))

"""The image storage service on loopback: a controller, one store per site and the WAN
emulator between sites (``python -m geoslo.live wan``), each a process of its own.

The controller runs at the first site. Every path between two sites goes through the
delay proxy: store to store (fetches and pushes), a remote site's store to the
controller, and a VM that uses a store in another site (NFS after the move).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from geoslo.errors import InputError
from geoslo.live._processes import ManagedProcess, free_ports, python_module_command
from geoslo.live._wan import DelayPath, WanConfig
from geoslo.live.supercloud.imagestore._servers import POLICIES, NodeConfig
from geoslo.live.supercloud.imagestore._wire import ConnectionPool
from geoslo.topology import BaseRttSchedule

__all__ = ["ImageService", "ImageClient"]


class ImageClient:
    """A VM's view of its image: open, read and write 4 KB blocks, close (§4.1.2).

    ``close`` raises :class:`StaleCloseError` when another writer closed the image after
    this client opened it: this client's writes are then not applied anywhere."""

    def __init__(self, site: str, port: int, image: str = "vm-image") -> None:
        self.site, self.image = site, image
        self._pool = ConnectionPool(port)
        self._session: str | None = None
        self.fetched_reads = 0

    async def _call(self, op: str, payload: bytes = b"", **fields) -> tuple[dict, bytes]:
        header = {"op": op, "image": self.image, "site": self.site, **fields}
        return await self._pool.request(header, payload)

    async def open(self) -> None:
        self._session = (await self._call("open"))[0]["session"]

    async def read(self, block: int) -> bytes:
        """A block's data; ``fetched_reads`` counts those the store fetched from another site."""
        header, data = await self._call("read", block=block, session=self._session)
        self.fetched_reads += bool(header.get("fetched"))
        return data

    async def write(self, block: int, data: bytes) -> list:
        """Write a block; its version, [generation, session, sequence]."""
        return (await self._call("write", data, block=block, session=self._session))[0]["version"]

    async def close(self) -> None:
        try:
            await self._call("close", session=self._session)
        finally:
            self._session = None
            await self._pool.close()


@dataclass
class ImageService:
    """Started by :meth:`up`; ``port(from_site, to_site)`` is how a VM at ``from_site``
    reaches the store of ``to_site``."""

    sites: tuple[str, ...]
    policy: str
    state_dir: Path
    processes: list[ManagedProcess]
    store_ports: dict[str, int]
    paths: dict[tuple[str, str], int]
    controller_port: int

    @classmethod
    def up(
        cls,
        sites: tuple[str, ...],
        policy: str,
        rtt_ms: float | Mapping[tuple[str, str], float],
        state_dir: Path,
        transitions: dict | None = None,
        seed: int = 0,
    ) -> ImageService:
        if policy not in POLICIES:
            raise InputError("policy", f"must be one of {list(POLICIES)}, not {policy!r}")
        if len(set(sites)) != len(sites) or len(sites) < 2:
            raise InputError("sites", "need two or more distinct sites")
        state_dir.mkdir(parents=True, exist_ok=True)
        pairs = [(a, b) for a in sites for b in sites if a != b]
        ports = iter(free_ports(2 + len(sites) + 2 * len(pairs)))
        controller_port = next(ports)
        store_ports = {site: next(ports) for site in sites}
        paths = {pair: next(ports) for pair in pairs}
        to_controller = {pair: next(ports) for pair in pairs}

        def rtt(a: str, b: str) -> BaseRttSchedule:
            ms = rtt_ms if isinstance(rtt_ms, int | float) else rtt_ms[a, b]
            return BaseRttSchedule(np.array([0.0]), np.array([float(ms)]))

        delay_paths = [
            DelayPath(a, b, paths[a, b], store_ports[b], rtt(a, b), 0.0) for a, b in pairs
        ]
        delay_paths += [
            DelayPath(a, b, to_controller[a, b], controller_port, rtt(a, b), 0.0)
            for a, b in pairs
            if b == sites[0]
        ]
        service = cls(sites, policy, state_dir, [], store_ports, paths, controller_port)
        try:
            wan_config = state_dir / "wan.json"
            WanConfig(tuple(delay_paths), 0.0, seed).write(wan_config)
            service._start(
                "wan",
                python_module_command("geoslo.live", "wan", str(wan_config)),
                delay_paths[0].listen_port,
            )
            service._node(NodeConfig("controller", sites[0], controller_port))
            table = transitions or {a: {b: 1.0 for b in sites if b != a} for a in sites}
            for k, site in enumerate(sites):
                reach = controller_port if site == sites[0] else to_controller[site, sites[0]]
                peers = {other: paths[site, other] for other in sites if other != site}
                config = NodeConfig(
                    "store",
                    site,
                    store_ports[site],
                    reach,
                    peers,
                    policy,
                    transitions=table,
                    seed=seed + k,
                )
                service._node(config)
        except BaseException:
            service.down()
            raise
        return service

    def _start(self, name: str, command: list[str], port: int) -> None:
        process = ManagedProcess(name, command, self.state_dir / f"{name}.log", port)
        self.processes.append(process)
        process.start()

    def _node(self, config: NodeConfig) -> None:
        name = f"{config.role}-{config.site}"
        path = self.state_dir / f"{name}.json"
        config.write(path)
        self._start(
            name, python_module_command("geoslo.live", "imagestore", str(path)), config.port
        )

    def port(self, from_site: str, to_site: str) -> int:
        return self.store_ports[to_site] if from_site == to_site else self.paths[from_site, to_site]

    def client(
        self, vm_site: str, store_site: str | None = None, image: str = "vm-image"
    ) -> ImageClient:
        """A VM at ``vm_site`` using its own site's store, or ``store_site``'s (NFS)."""
        return ImageClient(vm_site, self.port(vm_site, store_site or vm_site), image)

    async def stats(self) -> dict[str, dict]:
        """Every server's counters (WAN bytes by remote site, reads, pushes)."""
        out = {}
        targets = {
            "controller": self.controller_port,
            **{f"store-{s}": p for s, p in self.store_ports.items()},
        }
        for name, port in targets.items():
            pool = ConnectionPool(port)
            out[name] = (await pool.request({"op": "stats", "site": "local"}))[0]
            await pool.close()
        return out

    def down(self) -> None:
        for process in reversed(self.processes):
            process.stop()
        self.processes.clear()

    def __enter__(self) -> ImageService:
        return self

    def __exit__(self, *exc) -> None:
        self.down()

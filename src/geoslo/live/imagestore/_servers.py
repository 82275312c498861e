"""The two layers of the Supercloud's image storage (SoCC 2016, §4.1, Fig. 2), as processes.

* The **controller** holds the global metadata of the data view layer: per image, per 4 KB
  block, the latest version and the site that wrote it. It is involved only when an image
  is opened (the opener syncs from it) or closed (the closer flushes its commits):
  close-to-open consistency (§4.1.2).
* A **store** per site is the data store layer: it serves the VM's reads and writes from
  local blocks, commits a write's new version locally, fetches a block it lacks from the
  site holding the latest version, and, by policy, pushes blocks to other sites:
  ``on_demand`` never, ``proactive`` by §4.1.3's priority in the background,
  ``sync_on_write`` every write to every site before acknowledging it. ``nfs`` is a store
  used as one central server (the VM reaches it over the WAN once it has moved).

Blocks never written are the base image's, present everywhere at version 0 (zeros).
Every request names its site; a server counts the bytes of requests from other sites and
of its answers to them (each WAN byte once, at the server).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import numpy as np

from geoslo.control.placement.propagation import PropagationQueue, TransitionTable
from geoslo.live._processes import JsonConfigFile
from geoslo.live.imagestore._wire import ConnectionPool, receive, send

__all__ = ["NodeConfig", "POLICIES", "serve_node"]

POLICIES = ("nfs", "sync_on_write", "on_demand", "proactive")  # §5.3's four, in its order


@dataclass(frozen=True)
class NodeConfig(JsonConfigFile):
    role: str  # "controller" or "store"
    site: str
    port: int
    controller_port: int = 0  # how this site reaches the controller
    peer_ports: dict = field(default_factory=dict)  # site -> how this site reaches its store
    policy: str = "on_demand"
    block_bytes: int = 4096  # §4.1.1
    k: float = 1000.0  # §4.1.3
    s: float = 1.0  # §4.1.3
    transitions: dict = field(default_factory=dict)
    pushes_in_flight: int = 32
    seed: int = 0


class _Server:
    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self.wan_bytes: dict[str, int] = {}
        self.requests = 0

    async def handle(self, reader, writer) -> None:
        try:
            while True:
                header, payload, size = await receive(reader)
                self.requests += 1
                try:
                    reply, data = await self.answer(header, payload)
                except (KeyError, ValueError, RuntimeError, OSError) as error:
                    reply, data = {"error": f"{type(error).__name__}: {error}"}, b""
                sent = await send(writer, reply, data)
                origin = header.get("site", self.config.site)
                if origin != self.config.site and header.get("op") != "stats":
                    self.wan_bytes[origin] = self.wan_bytes.get(origin, 0) + size + sent
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def stats(self) -> dict:
        return {"site": self.config.site, "wan_bytes": self.wan_bytes, "requests": self.requests}

    async def answer(self, header: dict, payload: bytes) -> tuple[dict, bytes]:
        raise NotImplementedError


class Controller(_Server):
    """The data view layer's global metadata (§4.1.1-§4.1.2)."""

    def __init__(self, config: NodeConfig) -> None:
        super().__init__(config)
        self.views: dict[str, dict[str, list]] = {}

    async def answer(self, header: dict, payload: bytes) -> tuple[dict, bytes]:
        op = header["op"]
        if op == "open":
            return {"view": self.views.get(header["image"], {})}, b""
        if op == "close":
            view = self.views.setdefault(header["image"], {})
            for block, (version, site) in header["updates"].items():
                if version > view.get(block, [0, None])[0]:
                    view[block] = [version, site]
            return {}, b""
        if op == "stats":
            return self.stats(), b""
        raise ValueError(f"unknown op {op!r}")


class Store(_Server):
    """One site's data store layer (§4.1.1, §4.1.3)."""

    def __init__(self, config: NodeConfig) -> None:
        super().__init__(config)
        self.blocks: dict[tuple[str, int], tuple[int, bytes]] = {}
        self.views: dict[str, dict[int, list]] = {}
        self.dirty: dict[str, set[int]] = {}
        self.queues: dict[str, PropagationQueue] = {}
        self.controller = ConnectionPool(config.controller_port)
        self.peers = {site: ConnectionPool(port) for site, port in config.peer_ports.items()}
        self.transitions = TransitionTable(config.transitions)
        self.rng = np.random.default_rng(config.seed)
        self.counts = {
            "local_reads": 0,
            "remote_reads": 0,
            "pushes": 0,
            "pushed_bytes": 0,
            "failed_pushes": 0,
        }
        self._pushing = asyncio.Semaphore(config.pushes_in_flight)
        self._wake = asyncio.Event()
        self._in_flight: set[asyncio.Task] = set()

    def _version(self, image: str, block: int) -> int:
        return self.blocks.get((image, block), (0, b""))[0]

    def _data(self, image: str, block: int) -> bytes:
        return self.blocks.get((image, block), (0, bytes(self.config.block_bytes)))[1]

    def _request(self, pool: ConnectionPool, header: dict, payload: bytes = b""):
        return pool.request({**header, "site": self.config.site}, payload)

    async def answer(self, header: dict, payload: bytes) -> tuple[dict, bytes]:
        op = header["op"]
        image = header.get("image", "")
        if op == "open":
            reply, _ = await self._request(self.controller, {"op": "open", "image": image})
            self.views[image] = {int(b): v for b, v in reply["view"].items()}
            return {"blocks": len(self.views[image])}, b""
        if op == "read":
            return await self._read(image, int(header["block"]))
        if op == "write":
            return await self._write(image, int(header["block"]), payload)
        if op == "close":
            return await self._close(image)
        if op == "get":
            block = int(header["block"])
            return {"version": self._version(image, block)}, self._data(image, block)
        if op == "push":
            block, version = int(header["block"]), int(header["version"])
            if version > self._version(image, block):
                self.blocks[(image, block)] = (version, payload)
            return {}, b""
        if op == "stats":
            return {**self.stats(), **self.counts}, b""
        raise ValueError(f"unknown op {op!r}")

    async def _read(self, image: str, block: int) -> tuple[dict, bytes]:
        latest, site = self.views.get(image, {}).get(block, [0, None])
        self._queue(image).record_read(block)
        if self._version(image, block) >= latest:
            self.counts["local_reads"] += 1
            return {"version": self._version(image, block)}, self._data(image, block)
        reply, data = await self._request(
            self.peers[site], {"op": "get", "image": image, "block": block}
        )
        if reply["version"] < latest:
            raise RuntimeError(
                f"{site} has version {reply['version']} of block {block}, not {latest}"
            )
        self.blocks[(image, block)] = (reply["version"], data)
        self.counts["remote_reads"] += 1
        return {"version": reply["version"]}, data

    async def _write(self, image: str, block: int, data: bytes) -> tuple[dict, bytes]:
        view = self.views.setdefault(image, {})
        version = max(view.get(block, [0, None])[0], self._version(image, block)) + 1
        self.blocks[(image, block)] = (version, data)
        view[block] = [version, self.config.site]
        self.dirty.setdefault(image, set()).add(block)
        if self.config.policy == "sync_on_write":
            await asyncio.gather(*(self._push(site, image, block) for site in self.peers))
        elif self.config.policy == "proactive":
            self._queue(image).record_write(block)
            self._wake.set()
        return {"version": version}, b""

    async def _close(self, image: str) -> tuple[dict, bytes]:
        view = self.views.get(image, {})
        updates = {str(b): view[b] for b in sorted(self.dirty.pop(image, set()))}
        await self._request(self.controller, {"op": "close", "image": image, "updates": updates})
        return {"flushed": len(updates)}, b""

    def _queue(self, image: str) -> PropagationQueue:
        """The image's propagation queue, made on first use (not on every request)."""
        queue = self.queues.get(image)
        if queue is None:
            queue = self.queues[image] = PropagationQueue(self.config.k, self.config.s)
        return queue

    async def _push(self, site: str, image: str, block: int) -> None:
        version, data = self._version(image, block), self._data(image, block)
        header = {"op": "push", "image": image, "block": block, "version": version}
        await self._request(self.peers[site], header, data)
        self.counts["pushes"] += 1
        self.counts["pushed_bytes"] += len(data)

    def _pushed(self, task: asyncio.Task) -> None:
        self._in_flight.discard(task)
        self._pushing.release()
        if not task.cancelled() and task.exception() is not None:
            self.counts["failed_pushes"] += 1

    async def propagate(self) -> None:
        """§4.1.3: push the highest-priority updated block to a site drawn from the
        transition table, a bounded number in flight, for as long as there are any."""
        while True:
            block = image = None
            for name, queue in self.queues.items():
                block, image = queue.pop(), name
                if block is not None:
                    break
            if block is None:
                self._wake.clear()
                await self._wake.wait()
                continue
            site = self.transitions.destination(self.config.site, self.rng)
            if site is None or site not in self.peers:
                continue
            await self._pushing.acquire()
            task = asyncio.create_task(self._push(site, image, block))
            self._in_flight.add(task)  # a task nobody holds may be collected mid-flight
            task.add_done_callback(self._pushed)


async def serve_node(config: NodeConfig) -> None:
    """Run a controller or a store until cancelled."""
    node = Controller(config) if config.role == "controller" else Store(config)
    server = await asyncio.start_server(node.handle, "127.0.0.1", config.port)
    tasks = [asyncio.create_task(server.serve_forever())]
    if isinstance(node, Store) and config.policy == "proactive":
        tasks.append(asyncio.create_task(node.propagate()))
    await asyncio.gather(*tasks)

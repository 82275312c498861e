"""The two layers of the Supercloud's image storage (SoCC 2016, §4.1, Fig. 2), as processes.

* The **controller** holds the global metadata of the data view layer: per image, per 4 KB
  block, the latest version and the site that wrote it. It is involved only when an image
  is opened (the opener syncs from it) or closed (the closer flushes its commits):
  close-to-open consistency (§4.1.2). §4.1.2 assumes one writer of an image at a time; the
  controller checks it: a writer's close is refused (``StaleCloseError`` at the client)
  when another writer closed the image after this one opened it.
* A **store** per site is the data store layer: it serves the VM's reads and writes from
  local blocks, commits a write's new version locally, fetches a block it lacks from the
  site holding the latest version, and, by policy, pushes blocks to other sites:
  ``on_demand`` never, ``proactive`` by §4.1.3's priority in the background,
  ``sync_on_write`` every write to every site before acknowledging it. ``nfs`` is a store
  used as one central server (the VM reaches it over the WAN once it has moved).

Blocks never written are the base image's, present everywhere (zeros, no version).
Every request names its site; a server counts the bytes of requests from other sites and
of its answers to them (each WAN byte once, at the server).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import numpy as np

from geoslo.control.supercloud.propagation import PropagationQueue, TransitionTable
from geoslo.live._processes import JsonConfigFile
from geoslo.live.supercloud.imagestore._wire import ConnectionPool, StaleCloseError, receive, send

__all__ = ["BLOCK_BYTES", "NodeConfig", "POLICIES", "serve_node"]

POLICIES = ("nfs", "sync_on_write", "on_demand", "proactive")  # §5.3's four, in its order
BLOCK_BYTES = 4096  # §4.1.1: an image's block


@dataclass(frozen=True)
class NodeConfig(JsonConfigFile):
    role: str  # "controller" or "store"
    site: str
    port: int
    controller_port: int = 0  # how this site reaches the controller
    peer_ports: dict = field(default_factory=dict)  # site -> how this site reaches its store
    policy: str = "on_demand"
    block_bytes: int = BLOCK_BYTES
    k: float = 1000.0  # §4.1.3
    s: float = 1.0  # §4.1.3
    transitions: dict = field(default_factory=dict)
    pushes_in_flight: int = 32
    seed: int = 0


Version = tuple  # (generation, session, sequence number): unique; see Store


@dataclass
class _Session:
    """One open of an image at a store: the view it synced and what it wrote since."""

    id: str
    image: str
    base_generation: int  # the image's generation at this open (the controller's count)
    view: dict[int, list]  # block -> [generation, session, sequence, site]
    written: dict[int, Version] = field(default_factory=dict)  # block -> its newest write


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
                    if isinstance(error, StaleCloseError):
                        reply["stale"] = True
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
    """The data view layer's global metadata (§4.1.1-§4.1.2), with a generation per image:
    the number of writers' closes applied so far."""

    def __init__(self, config: NodeConfig) -> None:
        super().__init__(config)
        self.views: dict[str, dict[str, list]] = {}
        self.generations: dict[str, int] = {}

    async def answer(self, header: dict, payload: bytes) -> tuple[dict, bytes]:
        op = header["op"]
        image = header.get("image", "")
        if op == "open":
            view, generation = self.views.get(image, {}), self.generations.get(image, 0)
            return {"view": view, "generation": generation}, b""
        if op == "close":
            return self._close(image, int(header["base_generation"]), header["updates"]), b""
        if op == "stats":
            return self.stats(), b""
        raise ValueError(f"unknown op {op!r}")

    def _close(self, image: str, base_generation: int, updates: dict) -> dict:
        """Apply a writer's updates unless another writer closed the image since it opened
        (§4.1.2 assumes one writer at a time: a second one is refused, never merged or
        dropped silently). A close without updates (a reader's) is always fine."""
        generation = self.generations.get(image, 0)
        if not updates:
            return {"generation": generation}
        if base_generation != generation:
            return {"refused": True, "generation": generation}
        self.views.setdefault(image, {}).update(updates)
        self.generations[image] = generation + 1
        return {"generation": generation + 1}


class Store(_Server):
    """One site's data store layer (§4.1.1, §4.1.3).

    A write's version is (generation, session, sequence): the generation its session's
    close would create (the image's generation at open, plus one), the session, and a
    counter, so two writers never share a version. A store keeps every version of a block
    that may still be read: the newest committed one it knows of and those of sessions
    that have not closed. Data never replaces other data: a refused session's blocks, even
    pushed to other sites, cannot shadow the committed ones, and go when a newer commit is
    learnt (at an open or a close here) or when its close is refused.
    """

    def __init__(self, config: NodeConfig) -> None:
        super().__init__(config)
        self.blocks: dict[tuple[str, int], dict[Version, bytes]] = {}
        self.committed: dict[tuple[str, int], Version] = {}  # the newest known commit
        self.sessions: dict[str, _Session] = {}
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
            "refused_closes": 0,
        }
        self._opened = self._sequence = 0
        self._pushing = asyncio.Semaphore(config.pushes_in_flight)
        self._wake = asyncio.Event()
        self._in_flight: set[asyncio.Task] = set()

    def _request(self, pool: ConnectionPool, header: dict, payload: bytes = b""):
        return pool.request({**header, "site": self.config.site}, payload)

    def _session(self, header: dict) -> _Session:
        session = self.sessions.get(header.get("session", ""))
        if session is None:
            raise KeyError(f"no open session {header.get('session')!r}: open the image first")
        return session

    async def answer(self, header: dict, payload: bytes) -> tuple[dict, bytes]:
        op = header["op"]
        image = header.get("image", "")
        if op == "open":
            return await self._open(image), b""
        if op == "read":
            return await self._read(self._session(header), int(header["block"]))
        if op == "write":
            return await self._write(self._session(header), int(header["block"]), payload)
        if op == "close":
            return await self._close(self._session(header)), b""
        if op == "get":
            return self._get(image, int(header["block"]), tuple(header["version"]))
        if op == "push":
            self._keep_pushed(image, int(header["block"]), tuple(header["version"]), payload)
            return {}, b""
        if op == "stats":
            return {**self.stats(), **self.counts}, b""
        raise ValueError(f"unknown op {op!r}")

    async def _open(self, image: str) -> dict:
        """§4.1.2: an open syncs the image's view from the controller."""
        reply, _ = await self._request(self.controller, {"op": "open", "image": image})
        view = {int(b): entry for b, entry in reply["view"].items()}
        for block, entry in view.items():
            self._learn_committed(image, block, tuple(entry[:3]))
        self._opened += 1
        session = _Session(f"{self.config.site}.{self._opened}", image, reply["generation"], view)
        self.sessions[session.id] = session
        return {"session": session.id, "blocks": len(view)}

    def _learn_committed(self, image: str, block: int, version: Version) -> None:
        """``version`` of the block is committed: older generations of it (superseded, or
        refused writers') go, except what sessions still open here wrote."""
        key = (image, block)
        known = self.committed.get(key)
        if known is not None and known[0] >= version[0]:
            return
        self.committed[key] = version
        held = self.blocks.get(key, {})
        for old in [v for v in held if v[0] <= version[0] and v != version]:
            if old[1] not in self.sessions:
                del held[old]

    async def _read(self, session: _Session, block: int) -> tuple[dict, bytes]:
        image = session.image
        self._queue(image).record_read(block)
        entry = session.view.get(block)
        if entry is None:  # never written: the base image's block
            self.counts["local_reads"] += 1
            return {"version": None}, bytes(self.config.block_bytes)
        version, site = tuple(entry[:3]), entry[3]
        held = self.blocks.get((image, block), {})
        if version in held:
            self.counts["local_reads"] += 1
            return {"version": list(version)}, held[version]
        if site not in self.peers:
            raise RuntimeError(f"{site} lost version {list(version)} of block {block}")
        header = {"op": "get", "image": image, "block": block, "version": list(version)}
        reply, data = await self._request(self.peers[site], header)
        got = tuple(reply["version"])
        self.blocks.setdefault((image, block), {})[got] = data
        self._learn_committed(image, block, got)
        self.counts["remote_reads"] += 1
        return {"version": reply["version"], "fetched": True}, data

    def _get(self, image: str, block: int, version: Version) -> tuple[dict, bytes]:
        """A peer's fetch: that version, or a newer committed one (close-to-open allows
        reading past one's open)."""
        held = self.blocks.get((image, block), {})
        newer = self.committed.get((image, block))
        if version not in held and newer is not None and newer[0] > version[0]:
            version = newer
        if version not in held:
            raise RuntimeError(f"{self.config.site} holds no version {list(version)} of {block}")
        return {"version": list(version)}, held[version]

    async def _write(self, session: _Session, block: int, data: bytes) -> tuple[dict, bytes]:
        self._sequence += 1
        version = (session.base_generation + 1, session.id, self._sequence)
        held = self.blocks.setdefault((session.image, block), {})
        held.pop(session.written.get(block), None)  # the session's own older write
        held[version] = data
        session.written[block] = version
        session.view[block] = [*version, self.config.site]
        if self.config.policy == "sync_on_write":
            pushes = (self._push(site, session.image, block, version) for site in self.peers)
            await asyncio.gather(*pushes)
        elif self.config.policy == "proactive":
            self._queue(session.image).record_write(block)
            self._wake.set()
        return {"version": list(version)}, b""

    async def _close(self, session: _Session) -> dict:
        """§4.1.2: flush the session's updates to the controller. Refused (another writer
        closed since this open): its blocks are dropped and the client gets the error."""
        del self.sessions[session.id]
        image = session.image
        updates = {str(b): session.view[b] for b in sorted(session.written)}
        header = {"op": "close", "image": image, "updates": updates}
        header["base_generation"] = session.base_generation
        reply, _ = await self._request(self.controller, header)
        if reply.get("refused"):
            for block, version in session.written.items():
                self.blocks.get((image, block), {}).pop(version, None)
            self.counts["refused_closes"] += 1
            raise StaleCloseError(
                f"image {image!r} was closed by another writer since this one opened it "
                f"(generation {session.base_generation} then, {reply['generation']} now); "
                f"this close's {len(updates)} written blocks are not applied: reopen the "
                "image and write them again"
            )
        for block, version in session.written.items():
            self._learn_committed(image, block, version)
        return {"flushed": len(updates), "generation": reply["generation"]}

    def _keep_pushed(self, image: str, block: int, version: Version, data: bytes) -> None:
        """A peer's push: kept beside the other versions unless a newer commit is known,
        or the same session's newer write is already here (it replaces older ones)."""
        key = (image, block)
        known = self.committed.get(key)
        if known is not None and version[0] <= known[0] and version != known:
            return
        held = self.blocks.setdefault(key, {})
        same = [v for v in held if v[:2] == version[:2]]
        if any(v[2] > version[2] for v in same):
            return
        for old in same:
            del held[old]
        held[version] = data

    def _queue(self, image: str) -> PropagationQueue:
        """The image's propagation queue, made on first use (not on every request)."""
        queue = self.queues.get(image)
        if queue is None:
            queue = self.queues[image] = PropagationQueue(self.config.k, self.config.s)
        return queue

    async def _push(self, site: str, image: str, block: int, version: Version | None) -> None:
        """Push a version of the block to ``site`` (by default the newest written here)."""
        held = self.blocks.get((image, block), {})
        if version is None and held:
            version = max(held, key=lambda v: (v[0], v[2]))
        if version not in held:
            return  # nothing (left) to push
        data = held[version]
        header = {"op": "push", "image": image, "block": block, "version": list(version)}
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
            task = asyncio.create_task(self._push(site, image, block, None))
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

"""Each ensemble node's VM image in the Supercloud image store, following the node when
the placement loop moves it (SoCC 2016 §4.1: a VM reads and writes its image at its own
site's store; §4.1.3: blocks propagate proactively to the sites the VM may move to).

A node here is a server slot: when a reconfiguration replaces a server in one site by a
server in another, the leaving server's image becomes the newcomer's. Each image has a
VM that runs a small block workload where its node runs (ours, in the spirit of §5.3:
reads mostly to one half of the image, writes mostly to the other) and closes and reopens
its image every few seconds so that its writes commit (close-to-open, §4.1.2). On a move
the VM closes at the old site, opens at the new one, and its first reads there are
counted: served by the new site's store, or fetched across the WAN. The store refuses a
close from a writer that another writer superseded (``StaleCloseError``), so a VM that
kept running at the old site could not overwrite the moved one's image.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from geoslo.live.supercloud.imagestore import BLOCK_BYTES, ImageService

__all__ = ["ImageMove", "ImageSettings", "NodeImages", "pair_moves"]


@dataclass(frozen=True)
class ImageSettings:
    """The VMs' images and their workload (ours; §5.3 gives DBENCH, not its mix)."""

    policy: str = "proactive"  # §4.1.3; "on_demand" fetches only what is read
    blocks: int = 128  # 4 KB blocks per image (§4.1.1)
    read_fraction: float = 0.7
    ops_per_s: float = 40.0  # per VM
    commit_every_s: float = 2.0  # a close and reopen: the writes commit (§4.1.2)
    reads_after_move: int = 64  # the first reads at the new site that are counted


@dataclass(frozen=True)
class ImageMove:
    """One image following its node: where from and to, and its first reads there."""

    image: str
    from_site: str
    to_site: str
    at_unix_s: float
    reads: int
    fetched_reads: int

    @property
    def local_read_fraction(self) -> float:
        return 1.0 - self.fetched_reads / self.reads if self.reads else float("nan")


def pair_moves(owners: Mapping[str, int], members: Mapping[int, str]) -> list[tuple[str, int]]:
    """(image, new server id) for every image whose server left the ensemble: the
    departed servers' images go to the servers no image belongs to, in id order."""
    departed = sorted((sid, image) for image, sid in owners.items() if sid not in members)
    owned = set(owners.values())
    newcomers = sorted(sid for sid in members if sid not in owned)
    return [(image, sid) for (_, image), sid in zip(departed, newcomers, strict=False)]


class NodeImages:
    """The images of an ensemble's nodes, each with its VM where its node runs."""

    def __init__(self, service: ImageService, settings: ImageSettings, seed: int = 0) -> None:
        self.service, self.settings = service, settings
        self.rng = np.random.default_rng(seed)
        self.owners: dict[str, int] = {}  # image -> server id
        self.sites: dict[str, str] = {}  # image -> site
        self.moves: list[ImageMove] = []
        self._vms: dict[str, tuple[asyncio.Task, asyncio.Event]] = {}

    async def start(self, members: Mapping[int, str]) -> None:
        """An image per member, written once whole at its site, its VM started."""
        for k, (sid, site) in enumerate(sorted(members.items())):
            image = f"node-{k + 1}"
            self.owners[image], self.sites[image] = sid, site
            client = self.service.client(site, image=image)
            await client.open()
            for block in range(self.settings.blocks):
                await client.write(block, self._data())
            await client.close()
            self._run(image, site, None)

    async def follow(self, members: Mapping[int, str]) -> list[str]:
        """Move every image whose server left to a newcomer's site; the moves finish (their
        first reads counted) in the background and land in ``moves``."""
        started = []
        for image, sid in pair_moves(self.owners, members):
            old_site, new_site = self.sites[image], members[sid]
            await self._stop(image)
            self.owners[image], self.sites[image] = sid, new_site
            self._run(image, new_site, old_site)
            started.append(image)
        return started

    async def close(self) -> None:
        for image in list(self._vms):
            await self._stop(image)

    def _data(self) -> bytes:
        return self.rng.bytes(BLOCK_BYTES)  # one block of the store's

    def _run(self, image: str, site: str, moved_from: str | None) -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(self._vm(image, site, moved_from, stop))
        self._vms[image] = (task, stop)

    async def _stop(self, image: str) -> None:
        task, stop = self._vms.pop(image)
        stop.set()
        with contextlib.suppress(Exception):
            await task

    def _block(self, read: bool) -> int:
        """Reads go mostly to the image's first half, writes mostly to its second."""
        half, blocks = self.settings.blocks // 2, self.settings.blocks
        first_half = (self.rng.random() < 0.9) == read
        return int(self.rng.integers(0, half) if first_half else self.rng.integers(half, blocks))

    async def _vm(self, image: str, site: str, moved_from: str | None, stop) -> None:
        """The VM: open, work, close and reopen every ``commit_every_s``, close at stop;
        after a move, its first ``reads_after_move`` reads make an ``ImageMove``."""
        s = self.settings
        started_s, counted, fetched = time.time(), 0, 0
        while not stop.is_set():
            client = self.service.client(site, image=image)
            await client.open()
            commit_at = time.monotonic() + s.commit_every_s
            try:
                while not stop.is_set() and time.monotonic() < commit_at:
                    if self.rng.random() >= s.read_fraction:
                        await client.write(self._block(read=False), self._data())
                    else:
                        before = client.fetched_reads
                        await client.read(self._block(read=True))
                        if moved_from is not None and counted < s.reads_after_move:
                            counted += 1
                            fetched += client.fetched_reads - before
                            if counted == s.reads_after_move:
                                move = ImageMove(
                                    image, moved_from, site, started_s, counted, fetched
                                )
                                self.moves.append(move)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), 1.0 / s.ops_per_s)
            finally:
                await client.close()

"""§5.3's storage benchmark on the real service: a VM runs a DBENCH-like file workload on
its image and is live-migrated to another site as soon as it starts.

The workload (ours; DBENCH's NetBench load file is not reproduced): ``clients`` clients,
each in its own directory of files as DBENCH's are. A client first writes its files once
(creating them), then loops as fast as it can: reads (of 1-4 consecutive blocks) go
mostly to read-mostly files (programs, documents), writes mostly to scratch files (logs,
temporaries), so most blocks are either read-mostly or write-mostly, as §4.1.3 assumes.
The VM's migration follows :class:`~geoslo.models.MigrationModel`: its dirty rate comes
from the blocks the benchmark wrote in its first second (each dirties a cached page); the
VM pauses for the downtime (closing the image at the source) and resumes at the
destination (opening it there).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from geoslo.live.supercloud.imagestore._service import ImageService
from geoslo.models import MigrationModel

__all__ = ["DbenchSettings", "StorageRun", "run_storage_benchmark"]


@dataclass(frozen=True)
class DbenchSettings:
    sites: tuple[str, str] = ("virginia", "california")
    rtt_ms: float = 75.0  # §5.3: ping between the two regions
    clients: int = 4  # §5.3: four DBENCH clients
    files_per_client: int = 12
    blocks_per_file: int = 16
    read_mostly_file_fraction: float = 0.5
    read_fraction: float = 0.7
    reads_on_read_mostly: float = 0.85
    writes_on_scratch: float = 0.9
    operations_per_client: int = 500  # file operations after the files are created
    cpu_ms_per_op: float = 4.0  # the VM's own work per block operation, on its one vCPU
    max_run_s: float = 150.0
    block_bytes: int = 4096  # §4.1.1
    migration: MigrationModel = field(
        default_factory=lambda: MigrationModel(
            memory_bytes=512e6,  # §5.3: a 512 MB VM
            bandwidth_bytes_per_s=64e6,
            writable_working_set_bytes=128e6,
        )
    )
    seed: int = 0

    @classmethod
    def quick(cls) -> DbenchSettings:
        return cls(
            files_per_client=8,
            operations_per_client=300,
        )


@dataclass(frozen=True)
class StorageRun:
    policy: str
    op_end_s: np.ndarray  # completion time of every block operation, from the start
    migration_end_s: float
    downtime_s: float
    memory_wan_bytes: float
    storage_wan_bytes: float
    server_stats: dict

    def throughput_per_s(self, block_bytes: int) -> np.ndarray:
        """MB/s in every second of the run."""
        seconds = np.bincount(self.op_end_s.astype(int))
        return seconds * block_bytes / 1e6

    def mean_mb_per_s(
        self, block_bytes: int, start_s: float = 0.0, end_s: float | None = None
    ) -> float:
        """MB/s between ``start_s`` and ``end_s`` (the end of the benchmark if None)."""
        end_s = float(self.op_end_s.max()) if end_s is None else min(end_s, self.op_end_s.max())
        done = np.count_nonzero((self.op_end_s >= start_s) & (self.op_end_s < end_s))
        return done * block_bytes / 1e6 / max(end_s - start_s, 1e-9)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["op_end_s"] = self.op_end_s.tolist()
        return out


@dataclass
class _OpLog:
    ends_s: list = field(default_factory=list)  # completion times from the start
    writes: int = 0


class _Vm:
    """The migrating VM: which store its clients use, and a gate closed while it is paused."""

    def __init__(self, service: ImageService, policy: str, sites) -> None:
        self.service, self.policy, self.sites = service, policy, sites
        self.home, self.here = sites[0], sites[0]
        self.client = service.client(self.here)
        self.running = asyncio.Event()
        self.running.set()
        self.cpu = asyncio.Lock()  # §5.3's VM has one vCPU
        self.in_flight = 0

    async def move(self, destination: str) -> None:
        self.running.clear()
        while self.in_flight:  # operations already past the gate finish at the source
            await asyncio.sleep(0.001)
        await self.client.close()  # §4.1.2: flush the metadata at close
        self.here = destination
        store = self.home if self.policy == "nfs" else destination
        self.client = self.service.client(destination, store)
        await self.client.open()  # an open syncs the metadata from the controller

    def resume(self) -> None:
        self.running.set()


def _block_plan(settings: DbenchSettings, client: int, rng: np.random.Generator):
    files = settings.files_per_client
    first = client * files * settings.blocks_per_file
    read_mostly = int(round(files * settings.read_mostly_file_fraction))

    def pick(kind_read_mostly: bool) -> tuple[int, int]:
        file = (
            rng.integers(0, read_mostly) if kind_read_mostly else rng.integers(read_mostly, files)
        )
        length = int(rng.integers(1, 5))
        offset = int(rng.integers(0, settings.blocks_per_file - length + 1))
        return first + int(file) * settings.blocks_per_file + offset, length

    return first, files * settings.blocks_per_file, pick


async def _client_loop(
    vm: _Vm, settings: DbenchSettings, client: int, start: float, log: _OpLog, stop_at: float
) -> None:
    rng = np.random.default_rng(settings.seed * 100 + client)
    first, count, pick = _block_plan(settings, client, rng)
    payload = bytes(settings.block_bytes)

    async def op(block: int, write: bool) -> None:
        await vm.running.wait()
        vm.in_flight += 1
        try:
            async with vm.cpu:
                await asyncio.sleep(settings.cpu_ms_per_op / 1e3)
            if write:
                await vm.client.write(block, payload)
                log.writes += 1
            else:
                await vm.client.read(block)
        finally:
            vm.in_flight -= 1
        log.ends_s.append(time.monotonic() - start)

    for block in range(first, first + count):  # DBENCH creates its files first
        await op(block, True)
    for _ in range(settings.operations_per_client):
        if time.monotonic() >= stop_at:
            return
        write = rng.random() >= settings.read_fraction
        share = settings.writes_on_scratch if write else settings.reads_on_read_mostly
        block, length = pick(bool(rng.random() >= share) if write else bool(rng.random() < share))
        for b in range(block, block + length):
            await op(b, write)


async def _migrate(
    vm: _Vm, settings: DbenchSettings, start: float, log: _OpLog
) -> tuple[float, float, float]:
    await asyncio.sleep(1.0)
    writes_per_s = log.writes / (time.monotonic() - start)
    model = MigrationModel(
        **{
            **asdict(settings.migration),
            "dirty_bytes_per_s": writes_per_s * settings.block_bytes,
            "rtt_s": settings.rtt_ms / 1e3,
        }
    )
    cost = model.cost()
    await asyncio.sleep(max(0.0, start + cost.total_s - cost.downtime_s - time.monotonic()))
    paused = time.monotonic()
    await vm.move(vm.sites[1])
    await asyncio.sleep(max(0.0, paused + cost.downtime_s - time.monotonic()))
    vm.resume()
    return time.monotonic() - start, cost.downtime_s, cost.wan_bytes


async def _benchmark(service: ImageService, policy: str, settings: DbenchSettings):
    vm = _Vm(service, policy, settings.sites)
    await vm.client.open()
    start = time.monotonic()
    log = _OpLog()
    stop_at = start + settings.max_run_s
    migration = asyncio.create_task(_migrate(vm, settings, start, log))
    await asyncio.gather(
        *(_client_loop(vm, settings, c, start, log, stop_at) for c in range(settings.clients))
    )
    migration_end_s, downtime_s, memory_bytes = await migration
    await vm.client.close()
    return (
        np.array(sorted(log.ends_s)),
        migration_end_s,
        downtime_s,
        memory_bytes,
        await service.stats(),
    )


def run_storage_benchmark(policy: str, settings: DbenchSettings, state_dir: Path) -> StorageRun:
    """One policy: start the service, run the benchmark with the migration, stop it."""
    with ImageService.up(
        settings.sites, policy, settings.rtt_ms, state_dir / policy, seed=settings.seed
    ) as service:
        ends, migration_end_s, downtime_s, memory_bytes, stats = asyncio.run(
            _benchmark(service, policy, settings)
        )
    storage_bytes = sum(sum(s["wan_bytes"].values()) for s in stats.values())
    return StorageRun(
        policy, ends, migration_end_s, downtime_s, memory_bytes, float(storage_bytes), stats
    )

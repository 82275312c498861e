"""``python -m geoslo.live costlo-vm CONFIG``: a VM running a bounded PUT workload.

On start it calls :meth:`VmLibrary.recover` (a restarted VM first finishes what its log
holds), then issues the PUTs its config still owes at ``rate_per_s`` on keys drawn
uniformly from ``keys``, with at most ``max_in_flight`` of them outstanding: on a slow
machine the workload slows down rather than queueing PUTs on their keys' locks until
they time out (its write queue is bounded, as an application's is). Every acknowledged
PUT is appended to the acks file (``{"key", "version", "value"}``, fsync'd after the
library acknowledged it), so a test can check that no acknowledged write is lost. PUTs
already in the acks file count toward ``puts``: a restarted VM only finishes the
workload. A PUT that fails is reported on stderr and not acknowledged. It exits once
every PUT has ended and the background propagation has drained.
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from geoslo.control.costlo.types import configuration_from_dict
from geoslo.errors import InputError, TestbedError
from geoslo.live._processes import JsonConfigFile
from geoslo.live.costlo._locks import DEFAULT_LEASE_S, fsync_append, read_json_lines
from geoslo.live.costlo._objects import Regions
from geoslo.live.costlo._vm import VmLibrary

__all__ = ["VmProcessConfig", "run_vm_process", "run_vm_workload", "workload_value"]


@dataclass(frozen=True)
class VmProcessConfig(JsonConfigFile):
    """What a ``costlo-vm`` process runs (JSON). ``configuration`` and ``regions`` are in
    the form of :func:`configuration_to_dict` and :meth:`Regions.to_dict`."""

    configuration: dict
    regions: dict
    lock_port: int
    log_path: str
    acks_path: str
    owner_id: str
    keys: tuple[str, ...]
    puts: int
    rate_per_s: float
    strong: bool = False
    seed: int = 0
    value_bytes: int = 64
    lease_s: float = DEFAULT_LEASE_S
    max_in_flight: int = 16

    def __post_init__(self) -> None:
        object.__setattr__(self, "keys", tuple(self.keys))
        if not self.keys:
            raise InputError("keys", "name at least one key")
        if self.puts < 0 or not self.rate_per_s > 0:
            raise InputError("rate_per_s", "puts must be >= 0 and rate_per_s > 0")
        if self.max_in_flight < 1:
            raise InputError("max_in_flight", "at least one PUT must be allowed in flight")


def workload_value(key: str, owner_id: str, serial: int, value_bytes: int) -> bytes:
    """The payload of one PUT: names its key, VM and serial number, padded with dots."""
    text = f"{key}|{owner_id}|{serial}|"
    return text.encode().ljust(value_bytes, b".")


async def run_vm_workload(config: VmProcessConfig) -> int:
    """Recover, run the rest of the workload, drain; the number of PUTs acknowledged."""
    acks_path = Path(config.acks_path)
    already = len(read_json_lines(acks_path))
    library = VmLibrary(
        configuration_from_dict(config.configuration),
        Regions.from_dict(config.regions),
        config.lock_port,
        Path(config.log_path),
        config.owner_id,
        strong=config.strong,
        seed=config.seed + already,
        lease_s=config.lease_s,
    )
    await library.start()
    acks = open(acks_path, "a")  # noqa: SIM115 (closed below)
    try:
        recovered = await library.recover()
        print(f"costlo-vm {config.owner_id}: recovered {recovered} operations", flush=True)
        rng = random.Random(config.seed + already)
        loop = asyncio.get_running_loop()
        window = asyncio.Semaphore(config.max_in_flight)
        next_s, tasks = loop.time(), []
        for n in range(already, config.puts):
            await asyncio.sleep(max(0.0, next_s - loop.time()))
            await window.acquire()
            next_s = max(next_s + 1.0 / config.rate_per_s, loop.time())  # late: no burst
            key = config.keys[rng.randrange(len(config.keys))]
            value = workload_value(key, config.owner_id, n, config.value_bytes)
            put = asyncio.create_task(_put_and_record(library, acks, key, value))
            put.add_done_callback(lambda _: window.release())
            tasks.append(put)
        await asyncio.gather(*tasks)
        await library.drain()
    finally:
        await library.close()
        acks.close()
    print(f"costlo-vm {config.owner_id}: {config.puts - already} PUTs done", flush=True)
    return config.puts - already


async def _put_and_record(library: VmLibrary, acks, key: str, value: bytes) -> None:
    """One PUT; its acknowledgement appended to the acks file. A PUT that fails (a lock
    not granted in time, every request refused or unreachable) is reported and left out:
    it was never acknowledged, and the workload goes on."""
    try:
        version = await library.put(key, value)
    except TestbedError as error:
        print(f"costlo-vm: PUT of {key!r} failed: {error}", file=sys.stderr, flush=True)
        return
    fsync_append(acks, {"key": key, "version": version, "value": value.decode(), "t": time.time()})


def run_vm_process(config_path: Path) -> None:
    """The ``costlo-vm`` process."""
    asyncio.run(run_vm_workload(VmProcessConfig.read(config_path)))

"""Open-loop load generation: replay a per-second rate trace through the client library.

Arrivals are Poisson within each second (``geoslo.workload.poisson_arrivals``, Kurma §7),
keys Zipf-distributed (YCSB's 0.99); each request is issued at its arrival time whether or
not earlier ones have returned (open loop). asyncio wakes with about 1 ms resolution, so
requests due within the same millisecond leave together; the largest lateness is
recorded so that an overloaded generator is visible rather than silent.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from geoslo.errors import TestbedError
from geoslo.live._backend import key_name
from geoslo.live._processes import ManagedProcess, python_module_command
from geoslo.live.kurma._client import SiteClient
from geoslo.live.kurma._testbed import Testbed
from geoslo.workload import RateTrace, ZipfKeys, poisson_arrivals

__all__ = ["LoadgenConfig", "replay", "start_loadgen", "read_loadgen_result"]


@dataclass(frozen=True)
class LoadgenConfig:
    """One site's generator: its trace, when to start, the mix and the policy."""

    state_dir: str
    site: str
    policy: str
    rate_rps: tuple[float, ...]
    start_unix_s: float
    output: str  # .npz with every request; a .json summary is written beside it
    write_fraction: float = 0.0
    slo_ms: float = 30.0
    seed: int = 0
    zipf_exponent: float = 0.99
    server_choice: str | None = None  # inside the site (SERVER_CHOICES); None: the policy's


async def replay(client: SiteClient, config: LoadgenConfig, keys: int) -> dict:
    """Issue every arrival of the trace at its time; return lateness statistics."""
    trace = RateTrace(np.asarray(config.rate_rps, dtype=float), name=config.site)
    arrivals = poisson_arrivals(trace, config.seed, start_s=config.start_unix_s)
    rng = np.random.default_rng(config.seed + 1)
    key_ids = ZipfKeys(keys, config.zipf_exponent).sample(arrivals.size, config.seed + 2)
    is_write = rng.random(arrivals.size) < config.write_fraction
    value = client.work.write_value()
    pending: set[asyncio.Task] = set()
    max_late_s, k = 0.0, 0
    loop = asyncio.get_running_loop()
    while k < arrivals.size:
        now = time.time()
        if arrivals[k] > now:
            await asyncio.sleep(arrivals[k] - now)
            continue
        max_late_s = max(max_late_s, now - arrivals[k])
        while k < arrivals.size and arrivals[k] <= now:
            key = key_name(int(key_ids[k]))
            request = client.put(key, value) if is_write[k] else client.get(key)
            task = loop.create_task(request)
            pending.add(task)
            task.add_done_callback(pending.discard)
            k += 1
    if pending:
        await asyncio.wait(list(pending), timeout=client.timeout_s + 1)
    await client.drain()
    return {"requests": int(arrivals.size), "max_late_ms": max_late_s * 1e3}


async def _run(config: LoadgenConfig) -> None:
    testbed = Testbed.load(Path(config.state_dir))
    if testbed is None:
        raise TestbedError(f"no testbed recorded in {config.state_dir}")
    client = SiteClient(
        testbed.client_endpoints(config.site), testbed.workload, config.policy,
        config.slo_ms, config.seed, server_choice=config.server_choice,
    )  # fmt: skip
    await client.start()
    try:
        summary = await replay(client, config, testbed.spec.keys)
    finally:
        await client.close()
    output = Path(config.output)
    np.savez_compressed(output, **client.log.arrays())
    summary["plans_received"] = client.plans_received
    output.with_suffix(".json").write_text(json.dumps(summary))


def run_loadgen_process(config_path: Path) -> None:
    """``python -m geoslo.live loadgen CONFIG``."""
    data = json.loads(Path(config_path).read_text())
    data["rate_rps"] = tuple(data["rate_rps"])
    asyncio.run(_run(LoadgenConfig(**data)))


def start_loadgen(config: LoadgenConfig, run_dir: Path) -> ManagedProcess:
    """Start one site's generator as its own process (it stops by itself at the end)."""
    name = f"loadgen-{config.site.lower()}"
    config_path = run_dir / f"{name}.json"
    config_path.write_text(json.dumps(asdict(config)))
    command = python_module_command("geoslo.live", "loadgen", str(config_path))
    testbed = Testbed.load(Path(config.state_dir))
    if testbed is None:
        raise TestbedError(f"no testbed recorded in {config.state_dir}")
    command = testbed.command_at(config.site, command)  # inside the site, in that form
    return ManagedProcess(name, command, run_dir / f"{name}.log").start()


def read_loadgen_result(output: Path) -> tuple[dict[str, np.ndarray], dict]:
    """The per-request arrays and the summary a generator wrote."""
    output = Path(output)
    if not output.exists():
        raise TestbedError(f"the load generator wrote no result at {output}; see its log")
    with np.load(output) as data:
        arrays = {k: data[k] for k in data.files}
    return arrays, json.loads(output.with_suffix(".json").read_text())

"""What observing a Redis Cluster's own load costs its node (a script, not a test).

    python benchmarks/bench_director_observation.py [--rounds 3] [--requests 200000]
        [--clients 50] [--quota 0.5]

One master (the testbed's, optionally under a CPU quota so that the node, not the
client, is the bottleneck) serves ``redis-benchmark`` (GET and SET, closed loop: as fast
as it can) while ``ClusterObserver`` (``geoslo.live.director.rediscluster._observe``)
reads it as the Director does on a user's cluster, in each of these settings:

* ``baseline``: nobody observes;
* ``commandstats``: ``INFO commandstats`` and ``LATENCY HISTOGRAM`` every period (1 s),
  no MONITOR;
* ``sampled``: plus MONITOR windows of 0.1 s every 2 s (the default, 5% of the time);
* ``sampled-20%``: windows of 0.1 s every 0.5 s;
* ``monitor``: MONITOR all the time (windows of 1 s every 1 s).

The settings are interleaved round after round; each prints its requests/s and the
node's CPU time per 100k requests as ratios to the baseline measured in the same round,
and the median over the rounds. Needs ``redis-server`` and ``redis-benchmark``; root for
the quota.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import tempfile
from pathlib import Path

from geoslo.live._processes import find_program
from geoslo.live.director.rediscluster import ClusterSpec, RedisClusterTestbed
from geoslo.live.director.rediscluster._engine import cluster_view
from geoslo.live.director.rediscluster._link import NodeLink
from geoslo.live.director.rediscluster._observe import ClusterObserver, ObserverSettings

SETTINGS = {
    "baseline": None,
    "commandstats": ObserverSettings(period_s=1.0, monitor=False),
    "sampled": ObserverSettings(period_s=1.0, monitor_window_s=0.1, monitor_every_s=2.0),
    "sampled-20%": ObserverSettings(period_s=1.0, monitor_window_s=0.1, monitor_every_s=0.5),
    "monitor": ObserverSettings(period_s=1.0, monitor_window_s=1.0, monitor_every_s=1.0),
}


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _benchmark(port: int, requests: int, clients: int, cluster: bool = False) -> float:
    """redis-benchmark's GET and SET requests/s (their mean); ``cluster``: ``--cluster``."""
    command = [
        find_program("redis-benchmark", "redis-server"), *(["--cluster"] if cluster else []),
        "-h", "127.0.0.1", "-p", str(port), "-t", "get,set", "-n", str(requests),
        "-c", str(clients), "-r", "100000", "-q", "--csv",
    ]  # fmt: skip
    process = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, _ = await process.communicate()
    rates = [float(m) for m in re.findall(r'^"(?:GET|SET)","([0-9.]+)"', out.decode(), re.M)]
    if len(rates) != 2:
        raise RuntimeError(f"redis-benchmark said: {out.decode()[:300]}")
    return statistics.mean(rates)


async def _one(testbed, settings, requests: int, clients: int) -> tuple[float, float, int]:
    """(requests/s, node CPU s per 100k requests, MONITOR samples) of one setting."""
    node = testbed.node("node-0")
    view = cluster_view(node.port)
    observer = None
    stop = asyncio.Event()
    if settings is not None:
        observer = ClusterObserver(settings, NodeLink())
        await observer.start(view)

    async def poll() -> None:
        while not stop.is_set():
            await observer.poll(view)
            await asyncio.sleep(0.2)

    poller = asyncio.create_task(poll()) if observer else None
    cpu_before = _cpu_s(node.pid)
    try:
        rate = await _benchmark(node.port, requests, clients)
    finally:
        stop.set()
        if poller:
            await poller
        if observer:
            await observer.aclose()
    cpu = _cpu_s(node.pid) - cpu_before
    samples = observer.sampled_requests if observer else 0
    return rate, cpu / (2 * requests) * 1e5, samples


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=200_000)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--quota", type=float, default=None, help="node CPU share (root)")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench-observation-"))
    spec = ClusterSpec(masters=1, standbys=0, cpu_quota_fraction=args.quota)
    with RedisClusterTestbed.up(spec, folder, progress=print) as testbed:
        print(f"node: {testbed.cpu_limit}; {args.requests} GETs and SETs, {args.clients} clients")
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in SETTINGS}
        for round_index in range(args.rounds):
            base = None
            for name, settings in SETTINGS.items():
                rate, cpu, samples = await _one(testbed, settings, args.requests, args.clients)
                base = base or (rate, cpu)
                results[name].append((rate / base[0], cpu / base[1]))
                print(
                    f"round {round_index}: {name:13s} {rate:9.0f} req/s "
                    f"({rate / base[0]:5.3f}x), node CPU {cpu * 1e3:6.1f} ms/100k "
                    f"({cpu / base[1]:5.3f}x), {samples} samples"
                )
        print("median over the rounds (ratio to the same round's baseline):")
        for name, ratios in results.items():
            rate = statistics.median(r for r, _ in ratios)
            cpu = statistics.median(c for _, c in ratios)
            print(f"  {name:13s} throughput {rate:5.3f}x, node CPU per request {cpu:5.3f}x")


if __name__ == "__main__":
    asyncio.run(main())

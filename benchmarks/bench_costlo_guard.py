"""What CosTLO's write guard costs per PUT on S3 (issue 38, item 8): the guard's read before
each conditional PUT (GET, then PUT with If-Match) against the PUT with If-Match on the ETag
the store last saw (no read when it holds), on one versitygw gateway on loopback, in the
same run, rounds interleaved.

Printed per guard: storage requests per PUT (GETs and PUTs the server was sent), wall time
and this process's CPU time per sequential PUT of a newer version of one 1-KiB object; then
the ratio of the skipped read over the full guard (under 1: cheaper). The safety tests
(tests/integration/test_costlo_put_safety.py) run with the read skipped, the default.

    python benchmarks/bench_costlo_guard.py [--puts N] [--rounds R]
"""

from __future__ import annotations

import argparse
import time

from _gateway import medians, on_one_gateway

from geoslo.live.costlo import CostloCluster, region_store
from geoslo.live.costlo import _s3 as s3

KEY = "bench-guard"
PAYLOAD = b"x" * 1024


async def measure(store, puts: int, first_version: int, skip_read: bool) -> dict:
    """``puts`` sequential writes of newer versions, the read skipped or not."""
    s3.SKIP_GUARD_READ = skip_read
    sent = {"get": 0, "put": 0}
    get, put = store._get, store._put

    async def counted_get(*args):
        sent["get"] += 1
        return await get(*args)

    async def counted_put(*args):
        sent["put"] += 1
        return await put(*args)

    store._get, store._put = counted_get, counted_put
    try:
        wall, cpu = time.perf_counter(), time.process_time()
        for version in range(first_version, first_version + puts):
            outcome = await store.write_checked(KEY, 0, version, PAYLOAD)
            assert outcome.status == "written", outcome
        wall_ms = (time.perf_counter() - wall) / puts * 1e3
        cpu_ms = (time.process_time() - cpu) / puts * 1e3
    finally:
        store._get, store._put = get, put
    return {
        "requests_per_put": (sent["get"] + sent["put"]) / puts,
        "wall_ms": wall_ms,
        "cpu_ms": cpu_ms,
    }


async def run(cluster: CostloCluster, puts: int, rounds: int) -> dict[str, list[dict]]:
    store = region_store(cluster.direct_regions().serving, "bench")
    await store.open()
    results: dict[str, list[dict]] = {"read, then If-Match": [], "If-Match on last seen": []}
    version = 1
    try:
        await store.write_checked(KEY, 0, version, PAYLOAD)
        for _ in range(rounds):
            for name, skip in (("read, then If-Match", False), ("If-Match on last seen", True)):
                version += 1
                results[name].append(await measure(store, puts, version, skip))
                version += puts
    finally:
        s3.SKIP_GUARD_READ = True
        await store.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--puts", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    results = on_one_gateway(
        "geoslo-bench-guard-", lambda cluster: run(cluster, args.puts, args.rounds)
    )
    if results is None:
        return
    figures = medians(results)
    print(f"S3 PUT of 1 KiB, one versitygw gateway, loopback; median of {args.rounds} rounds")
    for name, row in figures.items():
        print(f"  {name:22s} " + "  ".join(f"{k} {v:.3f}" for k, v in row.items()))
    full, skipped = figures["read, then If-Match"], figures["If-Match on last seen"]
    print("  skipped read / full guard: " + "  ".join(
        f"{k} {skipped[k] / full[k]:.2f}x" for k in full
    ))  # fmt: skip


if __name__ == "__main__":
    main()

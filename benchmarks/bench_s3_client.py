"""The S3 client's cost per GET: aiobotocore (what geoslo.live.costlo._s3 uses) against
obstore (Rust's object_store), on one versitygw gateway on loopback, in the same run.

A hedged GET sends several requests from one event loop, so the client's own CPU per
request shows in its latency (docs/costlo-live.md, "The S3 engine"). Printed per client, over
interleaved rounds: wall time and this process's CPU time per sequential GET, and the
latency of a "first of three" GET (three at once, the first answer wins, the others are
cancelled). Ratios are obstore over aiobotocore (under 1: obstore is cheaper).

    python benchmarks/bench_s3_client.py [--gets N] [--rounds R]
"""

from __future__ import annotations

import argparse
import asyncio
import time

import numpy as np
from _gateway import medians, on_one_gateway

from geoslo.live.costlo import CostloCluster, region_store

KEY = "bench-object"


async def aiobotocore_client(cluster: CostloCluster):
    store = region_store(cluster.direct_regions().serving, "bench")
    await store.open()
    await store.write(KEY, 0, 1, b"x" * 1024)

    async def get() -> None:
        await store.read(KEY, 0)

    return get, store.close


async def obstore_client(cluster: CostloCluster):
    import obstore
    from obstore.store import S3Store

    access = cluster.s3
    port = cluster.servers["serving"][0]
    store = S3Store(
        access["bucket"],
        endpoint=f"http://{cluster.host('serving')}:{port}",
        access_key_id=access["access_key"],
        secret_access_key=access["secret_key"],
        region="us-east-1",
        virtual_hosted_style_request=False,
        client_options={"allow_http": True},
    )

    async def get() -> None:
        result = await obstore.get_async(store, KEY)
        await result.bytes_async()

    async def close() -> None:
        return None

    return get, close


async def measure(get, gets: int) -> dict:
    """Sequential GETs (wall and CPU per GET), then first-of-three GETs."""
    for _ in range(20):
        await get()
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(gets):
        await get()
    sequential_ms = (time.perf_counter() - wall) / gets * 1e3
    cpu_ms = (time.process_time() - cpu) / gets * 1e3
    firsts = []
    for _ in range(gets // 3):
        started = time.perf_counter()
        tasks = [asyncio.create_task(get()) for _ in range(3)]
        _, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        firsts.append((time.perf_counter() - started) * 1e3)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    return {
        "sequential_ms": sequential_ms,
        "cpu_ms": cpu_ms,
        "first_of_three_p50_ms": float(np.median(firsts)),
        "first_of_three_p99_ms": float(np.percentile(firsts, 99)),
    }


async def run(cluster: CostloCluster, gets: int, rounds: int) -> dict[str, list[dict]]:
    clients = {"aiobotocore": await aiobotocore_client(cluster)}
    try:
        clients["obstore"] = await obstore_client(cluster)
    except ImportError:
        print("obstore is not installed (pip install obstore): aiobotocore alone")
    results: dict[str, list[dict]] = {name: [] for name in clients}
    try:
        for _ in range(rounds):
            for name, (get, _) in clients.items():
                results[name].append(await measure(get, gets))
    finally:
        for _, close in clients.values():
            await close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gets", type=int, default=600)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    results = on_one_gateway(
        "geoslo-bench-s3-", lambda cluster: run(cluster, args.gets, args.rounds)
    )
    if results is None:
        return
    figures = medians(results)
    print(f"S3 GET of 1 KiB on one versitygw gateway, loopback; median of {args.rounds} rounds")
    for name, row in figures.items():
        print(f"  {name:12s} " + "  ".join(f"{k} {v:.3f}" for k, v in row.items()))
    if "obstore" in figures:
        ratios = {k: figures["obstore"][k] / figures["aiobotocore"][k] for k in figures["obstore"]}
        print("  obstore / aiobotocore: " + "  ".join(f"{k} {v:.2f}x" for k, v in ratios.items()))


if __name__ == "__main__":
    main()

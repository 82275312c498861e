"""Benchmark of the live client library's own overhead per request (a script, not a test).

    python benchmarks/bench_live_client.py [--requests 5000] [--rounds 5] [--json PATH]

Starts a small testbed (2 sites, 1 Redis server each, backend work ~0) in a temporary
folder, always stops it, and times closed-loop sequential GETs of one key on the LOCAL
server (no WAN), each request with ``time.perf_counter_ns``, for four variants measured
in the same run, interleaved in rounds with the order rotated:

* ``redis-py``: a plain ``redis.asyncio.Redis`` client's GET (the baseline);
* ``raw GET``: geoslo's ``RedisConnection.command("GET", key)`` (one command);
* ``raw DEBUG+GET``: ``RedisConnection.send(get_payload(key, 0.0), 2)``, the two
  pipelined commands SiteClient sends, without any of the library's own work;
* ``SiteClient``: ``SiteClient(testbed, "London", "AllLocal", use_agent=False).get(key)``.

Prints p50, p99 and mean per variant, their ratios to both baselines, and the library
overhead: SiteClient minus ``raw DEBUG+GET`` at p50 and at p99 (routing, timing, counting).
Needs ``redis-server`` on the PATH and the ``redis`` package (redis-py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import redis
import redis.asyncio

from geoslo.live._backend import get_payload, key_name
from geoslo.live._resp import RedisConnection
from geoslo.live.kurma._client import SiteClient
from geoslo.live.kurma._testbed import Testbed, TestbedSpec

SITE = "London"
KEY = key_name(0)
# DEBUG SLEEP's argument is formatted with 6 decimals, so this mean sends "0.000000".
SERVICE_MEAN_MS = 1e-6
VARIANTS = ("redis-py", "raw GET", "raw DEBUG+GET", "SiteClient")


async def _timed(op, n: int, out: list[int]) -> None:
    """``n`` closed-loop requests, one at a time; append each one's time (ns) to ``out``."""
    clock = time.perf_counter_ns
    for _ in range(n):
        start = clock()
        await op()
        out.append(clock() - start)


async def _measure(testbed: Testbed, requests: int, rounds: int, warmup: int) -> dict:
    port = testbed.server_port(SITE, SITE, 0)
    plain = redis.asyncio.Redis(host="127.0.0.1", port=port)
    raw = await RedisConnection.open(port)
    client = SiteClient(testbed, SITE, "AllLocal", use_agent=False)
    await client.start()
    two_commands = get_payload(KEY, 0.0)
    value = b"v" * testbed.spec.value_bytes

    async def redis_py_get():
        return await plain.get(KEY)

    async def raw_get():
        return await raw.command(b"GET", KEY)

    async def raw_debug_get():
        return (await raw.send(two_commands, 2))[1]

    ops = {
        "redis-py": redis_py_get,
        "raw GET": raw_get,
        "raw DEBUG+GET": raw_debug_get,
        "SiteClient": lambda: client.get(KEY),
    }
    try:
        for name, op in ops.items():  # every variant answers, and with the stored value
            if await op() != value:
                raise RuntimeError(f"{name}: GET {KEY!r} did not return the stored value")
        for op in ops.values():
            await _timed(op, warmup, [])
        samples: dict[str, list[int]] = {name: [] for name in VARIANTS}
        per_round = [requests // rounds + (r < requests % rounds) for r in range(rounds)]
        for r, n in enumerate(per_round):
            order = VARIANTS[r % len(VARIANTS) :] + VARIANTS[: r % len(VARIANTS)]
            for name in order:
                await _timed(ops[name], n, samples[name])
        errors = int(client.counters.errors.sum())
        if errors:
            raise RuntimeError(f"SiteClient counted {errors} failed requests")
    finally:
        await client.close()
        await raw.close()
        await plain.aclose()
    return samples


def _stats(ns: list[int]) -> dict[str, float]:
    us = np.asarray(ns, dtype=float) / 1e3
    return {
        "n": int(us.size),
        "p50_us": float(np.percentile(us, 50)),
        "p99_us": float(np.percentile(us, 99)),
        "mean_us": float(us.mean()),
    }


def report(samples: dict[str, list[int]]) -> dict:
    stats = {name: _stats(samples[name]) for name in VARIANTS}
    base_py, base_raw = stats["redis-py"], stats["raw GET"]
    header = (
        f"{'variant':<15}{'p50 us':>9}{'p99 us':>9}{'mean us':>9}"
        f"{'p50/redis-py':>14}{'p99/redis-py':>14}{'p50/raw':>9}{'p99/raw':>9}"
    )
    print(header)
    print("-" * len(header))
    for name, s in stats.items():
        s["p50_vs_redis_py"] = s["p50_us"] / base_py["p50_us"]
        s["p99_vs_redis_py"] = s["p99_us"] / base_py["p99_us"]
        s["p50_vs_raw_get"] = s["p50_us"] / base_raw["p50_us"]
        s["p99_vs_raw_get"] = s["p99_us"] / base_raw["p99_us"]
        print(
            f"{name:<15}{s['p50_us']:>9.1f}{s['p99_us']:>9.1f}{s['mean_us']:>9.1f}"
            f"{s['p50_vs_redis_py']:>14.2f}{s['p99_vs_redis_py']:>14.2f}"
            f"{s['p50_vs_raw_get']:>9.2f}{s['p99_vs_raw_get']:>9.2f}"
        )
    site, pipelined = stats["SiteClient"], stats["raw DEBUG+GET"]
    overhead = {
        "p50_us": site["p50_us"] - pipelined["p50_us"],
        "p99_us": site["p99_us"] - pipelined["p99_us"],
        "mean_us": site["mean_us"] - pipelined["mean_us"],
    }
    protocol = {
        "p50_us": pipelined["p50_us"] - base_raw["p50_us"],
        "p99_us": pipelined["p99_us"] - base_raw["p99_us"],
    }
    print(
        f"library overhead (SiteClient - raw DEBUG+GET): p50 {overhead['p50_us']:+.1f} us, "
        f"p99 {overhead['p99_us']:+.1f} us, mean {overhead['mean_us']:+.1f} us "
        "(differences of percentiles)"
    )
    print(
        f"second command (raw DEBUG+GET - raw GET): p50 {protocol['p50_us']:+.1f} us, "
        f"p99 {protocol['p99_us']:+.1f} us"
    )
    return {"variants": stats, "library_overhead": overhead, "debug_sleep_command": protocol}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=5000, help="timed requests per variant")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (order rotated)")
    ap.add_argument("--warmup", type=int, default=500, help="untimed requests per variant")
    ap.add_argument("--json", type=Path, help="also write the numbers to this file")
    args = ap.parse_args()
    if args.requests < args.rounds or args.rounds < 1:
        ap.error("--requests must be >= --rounds >= 1")
    spec = TestbedSpec(
        sites=("London", "Ireland"), servers_per_site=1, service_mean_ms=SERVICE_MEAN_MS, keys=10
    )
    with tempfile.TemporaryDirectory(prefix="geoslo-bench-client-") as state_dir:
        testbed = Testbed.up(spec, Path(state_dir), progress=lambda message: None)
        try:
            samples = asyncio.run(_measure(testbed, args.requests, args.rounds, args.warmup))
        finally:
            testbed.down()
    print(
        f"{args.requests} sequential GETs per variant on the local Redis server "
        f"(warm-up {args.warmup}, {args.rounds} interleaved rounds); redis-py {redis.__version__}"
    )
    result = report(samples)
    if args.json is not None:
        result.update(
            requests=args.requests,
            rounds=args.rounds,
            warmup=args.warmup,
            redis_py_version=redis.__version__,
            service_mean_ms=SERVICE_MEAN_MS,
        )
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()

"""Benchmark of the live client library's own overhead per request (a script, not a test).

    python benchmarks/bench_live_client.py [--requests 20000] [--blocks 5] [--json PATH]

Starts a small testbed (2 sites, 1 Redis server each, backend work ~0) in a temporary
folder, always stops it, and times closed-loop sequential GETs of one key on the LOCAL
server (no WAN), each request with ``time.perf_counter_ns``, for four variants measured
in the same run, interleaved request by request (one of each variant in turn, the order
rotated every time), so that the machine's load falls on all of them alike; the run is
cut into blocks, and each figure is the median over blocks of that block's percentile
(a burst of load from elsewhere spoils one block, not the figure):

* ``redis-py``: a plain ``redis.asyncio.Redis`` client's GET (the baseline; its reply
  parser, hiredis or pure Python, is printed);
* ``raw GET``: geoslo's ``RedisConnection.command("GET", key)`` (one command);
* ``raw DEBUG+GET``: ``RedisConnection.send(get_payload(key, 0.0), 2)``, the two
  pipelined commands SiteClient sends, without any of the library's own work;
* ``SiteClient``: ``SiteClient(testbed, "London", "AllLocal", use_agent=False).get(key)``.

Prints p50, p99 and mean per variant, their ratios to both baselines, and the library's
added share: SiteClient minus ``raw DEBUG+GET`` at p50 and at p99 (routing, timing,
counting, logging), as a ratio of redis-py's GET at the same percentile (issue 17 §3:
under 0.10 at p99). Then the library's own work per request without any I/O (SiteClient
over a connection whose reply is already there), and ``RatesPolicy.choose`` per call
against the list-scanning implementation it replaced (kept below as ``_reference_choose``).
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
from redis.utils import HIREDIS_AVAILABLE

from geoslo.live._backend import get_payload, key_name
from geoslo.live._resp import RedisConnection
from geoslo.live.kurma._client import SiteClient
from geoslo.live.kurma._policies import RatesPolicy
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


async def _interleaved(ops: dict, n: int, samples: dict[str, list[int]]) -> None:
    """``n`` requests of every variant, one of each in turn, the order rotated each time."""
    clock = time.perf_counter_ns
    names = list(ops)
    for i in range(n):
        k = i % len(names)
        for name in names[k:] + names[:k]:
            op = ops[name]
            start = clock()
            await op()
            samples[name].append(clock() - start)


async def _measure(testbed: Testbed, requests: int, blocks: int, warmup: int) -> list:
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
        blocks_samples = []
        for size in _block_sizes(requests, blocks):
            samples: dict[str, list[int]] = {name: [] for name in VARIANTS}
            await _interleaved(ops, size, samples)
            blocks_samples.append(samples)
        errors = int(client.counters.errors.sum())
        if errors:
            raise RuntimeError(f"SiteClient counted {errors} failed requests")
    finally:
        await client.close()
        await raw.close()
        await plain.aclose()
    return blocks_samples


def _block_sizes(requests: int, blocks: int) -> list[int]:
    return [requests // blocks + (b < requests % blocks) for b in range(blocks)]


def _block_stats(ns: list[int]) -> dict[str, float]:
    us = np.asarray(ns, dtype=float) / 1e3
    return {
        "p50_us": float(np.percentile(us, 50)),
        "p99_us": float(np.percentile(us, 99)),
        "mean_us": float(us.mean()),
    }


def _stats(blocks: list[list[int]]) -> dict[str, float]:
    """Median over blocks of each block's p50, p99 and mean (us)."""
    per_block = [_block_stats(ns) for ns in blocks]
    stats = {k: float(np.median([b[k] for b in per_block])) for k in per_block[0]}
    stats["n"] = sum(len(ns) for ns in blocks)
    return stats


def report(blocks: list[dict[str, list[int]]]) -> dict:
    stats = {name: _stats([b[name] for b in blocks]) for name in VARIANTS}
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
    overhead["p50_vs_redis_py"] = overhead["p50_us"] / base_py["p50_us"]
    overhead["p99_vs_redis_py"] = overhead["p99_us"] / base_py["p99_us"]
    protocol = {
        "p50_us": pipelined["p50_us"] - base_raw["p50_us"],
        "p99_us": pipelined["p99_us"] - base_raw["p99_us"],
    }
    print(
        f"library's added share (SiteClient - raw DEBUG+GET): p50 {overhead['p50_us']:+.1f} us "
        f"= {overhead['p50_vs_redis_py']:.3f} of redis-py's p50, p99 {overhead['p99_us']:+.1f} us "
        f"= {overhead['p99_vs_redis_py']:.3f} of redis-py's p99 (target < 0.10); "
        f"mean {overhead['mean_us']:+.1f} us (differences of percentiles)"
    )
    print(
        f"second command (raw DEBUG+GET - raw GET): p50 {protocol['p50_us']:+.1f} us, "
        f"p99 {protocol['p99_us']:+.1f} us (the server's DEBUG SLEEP, not the library)"
    )
    return {"variants": stats, "library_overhead": overhead, "debug_sleep_command": protocol}


class _Answered:
    """A stand-in connection whose reply is already there: SiteClient's work without I/O."""

    closed = False

    def __init__(self, reply: list) -> None:
        self.reply = reply

    def send(self, payload: bytes, replies: int = 1) -> asyncio.Future:
        future = asyncio.get_running_loop().create_future()
        future.set_result(self.reply)
        return future

    async def close(self) -> None:
        return None


async def _library_work(testbed: Testbed, requests: int, blocks: int, warmup: int) -> list:
    """Each SiteClient GET's time (ns) over a connection that answers at once, by block."""
    client = SiteClient(testbed, SITE, "AllLocal", use_agent=False)
    client._connections[(client.site, 0)] = _Answered([b"OK", b"v"])
    samples: list[list[int]] = []
    try:
        await _timed(lambda: client.get(KEY), warmup, [])
        for size in _block_sizes(requests, blocks):
            samples.append([])
            await _timed(lambda: client.get(KEY), size, samples[-1])
    finally:
        await client.close()
    return samples


def _reference_choose(policy: RatesPolicy, rng: np.random.Generator, now_ms: float):
    """RatesPolicy.choose before issue 17: a copy of the row and a down-mark check of every
    host on every call, a cumulative sum and a choice from a list."""
    weights = policy.row.copy()
    for j, n in enumerate(policy.servers):
        if j != policy.site and not any(policy.is_up(j, s, now_ms) for s in range(n)):
            weights[policy.site] += weights[j]
            weights[j] = 0.0
    cumulative = np.cumsum(weights)
    site = int(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right"))
    site = min(site, len(weights) - 1)
    up = [s for s in range(policy.servers[site]) if policy.is_up(site, s, now_ms)]
    return site, int(rng.choice(up)) if up else int(rng.integers(policy.servers[site]))


CHOOSE_CASES = {  # name: servers per site, the row of the plan
    "2 sites x 1 server, all local": ([1, 1], [1.0, 0.0]),
    "5 sites x 3 servers, a plan row": ([3] * 5, [0.4, 0.2, 0.2, 0.1, 0.1]),
    "10 sites x 4 servers, a plan row": ([4] * 10, [0.1] * 10),
}


def choose_cost(calls: int) -> dict:
    """ns per call of RatesPolicy.choose and of the reference, on the same policy."""
    result = {}
    print(f"RatesPolicy.choose, ns per call ({calls} calls each):")
    for name, (servers, row) in CHOOSE_CASES.items():
        policy = RatesPolicy(0, servers, follows_plan=True)
        policy.set_fractions(np.asarray(row))
        times = {}
        for label, choose in (("before", _reference_choose), ("after", RatesPolicy.choose)):
            rng = np.random.default_rng(0)
            for k in range(100):  # untimed: the first call builds the alias table
                choose(policy, rng, float(k))
            start = time.perf_counter_ns()
            for k in range(calls):
                choose(policy, rng, float(k))
            times[label] = (time.perf_counter_ns() - start) / calls
        times["speedup"] = times["before"] / times["after"]
        print(
            f"  {name:<34} before {times['before']:>8.0f}  after {times['after']:>6.0f}  "
            f"({times['speedup']:.0f}x)"
        )
        result[name] = times
    return result


def _redis_py_parser() -> str:
    parser = (
        redis.asyncio.Redis()
        .connection_pool.connection_class(**redis.asyncio.Redis().connection_pool.connection_kwargs)
        ._parser
    )
    return "hiredis" if HIREDIS_AVAILABLE else f"pure Python ({type(parser).__name__})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=20_000, help="timed requests per variant")
    ap.add_argument("--blocks", type=int, default=5, help="blocks (figures: median over them)")
    ap.add_argument("--warmup", type=int, default=1000, help="untimed requests per variant")
    ap.add_argument("--choose-calls", type=int, default=100_000, help="calls per choose case")
    ap.add_argument("--json", type=Path, help="also write the numbers to this file")
    args = ap.parse_args()
    if args.requests < 100 * args.blocks or args.blocks < 1:
        ap.error("--requests must be >= 100 x --blocks, --blocks >= 1")
    spec = TestbedSpec(
        sites=("London", "Ireland"), servers_per_site=1, service_mean_ms=SERVICE_MEAN_MS, keys=10
    )
    with tempfile.TemporaryDirectory(prefix="geoslo-bench-client-") as state_dir:
        testbed = Testbed.up(spec, Path(state_dir), progress=lambda message: None)
        try:
            samples = asyncio.run(_measure(testbed, args.requests, args.blocks, args.warmup))
            work = _stats(
                asyncio.run(_library_work(testbed, args.requests, args.blocks, args.warmup))
            )
        finally:
            testbed.down()
    parser = _redis_py_parser()
    print(
        f"{args.requests} sequential GETs per variant on the local Redis server (warm-up "
        f"{args.warmup}, interleaved request by request, median of {args.blocks} blocks); "
        f"baseline redis-py "
        f"{redis.__version__} asyncio client, reply parser {parser}"
    )
    result = report(samples)
    base = result["variants"]["redis-py"]
    work["p50_vs_redis_py"] = work["p50_us"] / base["p50_us"]
    work["p99_vs_redis_py"] = work["p99_us"] / base["p99_us"]
    print(
        f"library work per GET without I/O (SiteClient over an answered connection): "
        f"p50 {work['p50_us']:.1f} us = {work['p50_vs_redis_py']:.3f} of redis-py's p50, "
        f"p99 {work['p99_us']:.1f} us = {work['p99_vs_redis_py']:.3f} of redis-py's p99"
    )
    result["library_work_without_io"] = work
    result["choose_ns"] = choose_cost(args.choose_calls)
    if args.json is not None:
        result.update(
            requests=args.requests,
            warmup=args.warmup,
            blocks=args.blocks,
            redis_py_version=redis.__version__,
            redis_py_parser=parser,
            service_mean_ms=SERVICE_MEAN_MS,
        )
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()

"""Benchmark of the live client library's own overhead per request (a script, not a test).

    python benchmarks/bench_live_client.py [--rounds 20] [--requests 2000] [--json PATH]
    GEOSLO_RESP_READER=python python benchmarks/bench_live_client.py   # our Python reader

Starts a small testbed (2 sites, 1 Redis server each, backend work ~0) in a temporary
folder, always stops it, and times closed-loop sequential GETs of one key on the LOCAL
server (no WAN), each request with ``time.perf_counter_ns``, for these variants measured
in the same run, interleaved request by request (one of each in turn, in a random order
every time) so that the machine's load falls on all of them alike:

* ``redis-py``: a plain ``redis.asyncio.Redis`` client's GET with its strongest reply
  parser, hiredis (the baseline of issue 17 §3);
* ``redis-py (Python)``: the same client with its pure-Python parser (the baseline as it
  was without hiredis);
* ``raw GET``: geoslo's ``RedisConnection.command("GET", key)`` (one command);
* ``raw DEBUG+GET`` and ``raw DEBUG+GET'``: ``RedisConnection.send(get_payload(key, 0.0),
  2)``, the two pipelined commands SiteClient sends, encoded on every request as every
  client encodes its command (redis-py's GET too), without any of the library's own work,
  on two connections: the second is the benchmark's noise floor (the "added share" it
  measures between two identical variants);
* ``raw DEBUG+GET (pre-encoded)``: the same payload encoded once, before the run (the
  reference of this benchmark before issue 17 §3's second round, printed for comparison:
  against it the library's share also holds the encoding of the request);
* ``SiteClient``: ``SiteClient(endpoints, testbed.workload).get(key)`` (AllLocal, no agent:
  ``testbed.client_endpoints("London", agent=False)``).

The run is cut into rounds; in each round the library's added share is SiteClient minus
``raw DEBUG+GET`` at p50 and at p99 (routing, drawing the service time, timing, counting,
logging, the deadline), as a ratio of redis-py's GET at the same percentile (issue 17
§3: under 0.10 at p99). The figures are the median over rounds of the per-round ratios,
with their quartiles and range, so a burst of load from elsewhere spoils a round, not
the figure. Then the library's own work per request without any I/O (SiteClient over a
connection whose reply is already there), and ``RatesPolicy.choose`` per call against
the list-scanning implementation it replaced (kept below as ``_reference_choose``). Our
connections parse with hiredis unless ``GEOSLO_RESP_READER=python``. Needs
``redis-server`` on the PATH and the ``redis`` and ``hiredis`` packages.

Last, the per-request CPU cost of each server choice inside the chosen site (issue 37) in
the client's choose path (``policy.choose`` with the client's block-drawn random numbers,
KurmaPerf's site choice, this client's requests in flight spread over the servers), in ns
per call and as a ratio against "random" measured in the same rounds (interleaved, the
median over rounds); the policy's own server (no server choice) is printed beside them.
``--choose-only`` runs only the two choose benchmarks (no testbed, no Redis needed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import redis
import redis.asyncio
from redis._parsers import _AsyncRESP2Parser
from redis.utils import HIREDIS_AVAILABLE

from geoslo.control.kurma import SERVER_CHOICES
from geoslo.live._backend import get_payload, key_name
from geoslo.live._resp import RedisConnection, new_reply_reader
from geoslo.live.kurma._client import SiteClient, _Draws
from geoslo.live.kurma._policies import RatesPolicy, ServerChoice, make_policy
from geoslo.live.kurma._testbed import Testbed, TestbedSpec

SITE = "London"
KEY = key_name(0)
# DEBUG SLEEP's argument is formatted with 6 decimals, so this mean sends "0.000000".
SERVICE_MEAN_MS = 1e-6
BASELINE = "redis-py"
VARIANTS = (
    BASELINE,
    "redis-py (Python)",
    "raw GET",
    "raw DEBUG+GET",
    "raw DEBUG+GET'",
    "raw DEBUG+GET (pre-encoded)",
    "SiteClient",
)
# name: (variant, the variant it is compared with, the redis-py it is a share of)
SHARES = {
    "library": ("SiteClient", "raw DEBUG+GET", BASELINE),
    "library vs redis-py (Python)": ("SiteClient", "raw DEBUG+GET", "redis-py (Python)"),
    "noise floor": ("raw DEBUG+GET'", "raw DEBUG+GET", BASELINE),
    "library and encoding": ("SiteClient", "raw DEBUG+GET (pre-encoded)", BASELINE),
}
PERCENTILES = (50, 99)


async def _timed(op, n: int, out: list[int]) -> None:
    """``n`` closed-loop requests, one at a time; append each one's time (ns) to ``out``."""
    clock = time.perf_counter_ns
    for _ in range(n):
        start = clock()
        await op()
        out.append(clock() - start)


async def _interleaved(
    ops: dict, n: int, samples: dict[str, list[int]], rng: np.random.Generator
) -> None:
    """``n`` requests of every variant, one of each in turn, in a random order each time:
    every variant follows every other one equally often (a request that follows one of
    its own kind finds its code in the caches, which a fixed order would give to some)."""
    clock = time.perf_counter_ns
    names = list(ops)
    for order in rng.permuted(np.tile(np.arange(len(names)), (n, 1)), axis=1).tolist():
        for k in order:
            name = names[k]
            op = ops[name]
            start = clock()
            await op()
            samples[name].append(clock() - start)


def _redis_py(port: int, python_parser: bool) -> redis.asyncio.Redis:
    if not python_parser:
        return redis.asyncio.Redis(host="127.0.0.1", port=port)
    pool = redis.asyncio.ConnectionPool(host="127.0.0.1", port=port, parser_class=_AsyncRESP2Parser)
    return redis.asyncio.Redis(connection_pool=pool)


async def _measure(testbed: Testbed, requests: int, rounds: int, warmup: int, seed: int) -> list:
    """Per round, every variant's request times (ns)."""
    _, port = testbed.server_address(SITE, SITE, 0)
    plain, plain_python = _redis_py(port, False), _redis_py(port, True)
    raw, pipelined, again, encoded = [await RedisConnection.open(port) for _ in range(4)]
    client = SiteClient(testbed.client_endpoints(SITE, agent=False), testbed.workload, "AllLocal")
    await client.start()
    two_commands = get_payload(KEY, 0.0)
    value = b"v" * testbed.spec.value_bytes

    async def raw_get():
        return await raw.command(b"GET", KEY)

    async def raw_debug_get():
        return (await pipelined.send(get_payload(KEY, 0.0), 2))[1]

    async def raw_debug_get_again():
        return (await again.send(get_payload(KEY, 0.0), 2))[1]

    async def raw_debug_get_encoded():
        return (await encoded.send(two_commands, 2))[1]

    ops = {
        BASELINE: lambda: plain.get(KEY),
        "redis-py (Python)": lambda: plain_python.get(KEY),
        "raw GET": raw_get,
        "raw DEBUG+GET": raw_debug_get,
        "raw DEBUG+GET'": raw_debug_get_again,
        "raw DEBUG+GET (pre-encoded)": raw_debug_get_encoded,
        "SiteClient": lambda: client.get(KEY),
    }
    try:
        for name, op in ops.items():  # every variant answers, and with the stored value
            if await op() != value:
                raise RuntimeError(f"{name}: GET {KEY!r} did not return the stored value")
        for op in ops.values():
            await _timed(op, warmup, [])
        per_round, rng = [], np.random.default_rng(seed)
        for _ in range(rounds):
            samples: dict[str, list[int]] = {name: [] for name in VARIANTS}
            await _interleaved(ops, requests, samples, rng)
            per_round.append(samples)
        errors = int(client.metrics.totals().errors.sum())
        if errors:
            raise RuntimeError(f"SiteClient counted {errors} failed requests")
    finally:
        await client.close()
        for connection in (raw, pipelined, again, encoded):
            await connection.close()
        await plain.aclose()
        await plain_python.aclose()
    return per_round


def _percentiles_us(ns: list[int]) -> dict[int, float]:
    us = np.asarray(ns, dtype=float) / 1e3
    return dict(zip(PERCENTILES, np.percentile(us, PERCENTILES).tolist(), strict=True))


def _spread(values: list[float]) -> dict[str, float]:
    """Median, quartiles and range of per-round values."""
    q = np.percentile(values, [0, 25, 50, 75, 100])
    return dict(zip(("min", "q25", "median", "q75", "max"), q.tolist(), strict=True))


def round_shares(per_round: list[dict[str, list[int]]]) -> dict:
    """Per round: each variant's p50/p99 (us) and each share of ``SHARES`` at both."""
    times = {name: {p: [] for p in PERCENTILES} for name in VARIANTS}
    shares = {name: {p: [] for p in PERCENTILES} for name in SHARES}
    for samples in per_round:
        at = {name: _percentiles_us(samples[name]) for name in VARIANTS}
        for name in VARIANTS:
            for p in PERCENTILES:
                times[name][p].append(at[name][p])
        for name, (variant, reference, base) in SHARES.items():
            for p in PERCENTILES:
                shares[name][p].append((at[variant][p] - at[reference][p]) / at[base][p])
    return {"times_us": times, "shares": shares}


def report(per_round: list[dict[str, list[int]]]) -> dict:
    measured = round_shares(per_round)
    times, shares = measured["times_us"], measured["shares"]
    header = f"{'variant':<29}{'p50 us':>9}{'p99 us':>9}{'p50/redis-py':>14}{'p99/redis-py':>14}"
    print(header)
    print("-" * len(header))
    summary: dict = {"variants": {}, "shares": {}}
    for name in VARIANTS:
        row = {f"p{p}_us": float(np.median(times[name][p])) for p in PERCENTILES}
        for p in PERCENTILES:
            ratios = np.divide(times[name][p], times[BASELINE][p])
            row[f"p{p}_vs_redis_py"] = float(np.median(ratios))
        summary["variants"][name] = row
        print(
            f"{name:<29}{row['p50_us']:>9.1f}{row['p99_us']:>9.1f}"
            f"{row['p50_vs_redis_py']:>14.2f}{row['p99_vs_redis_py']:>14.2f}"
        )
    print("added share, median over rounds [quartiles] (range):")
    for name, (variant, reference, base) in SHARES.items():
        summary["shares"][name] = {f"p{p}": _spread(shares[name][p]) for p in PERCENTILES}
        text = "  ".join(
            f"p{p} {s['median']:+.3f} [{s['q25']:+.3f}, {s['q75']:+.3f}] "
            f"({s['min']:+.3f}, {s['max']:+.3f})"
            for p, s in ((p, summary["shares"][name][f"p{p}"]) for p in PERCENTILES)
        )
        print(f"  {name:<30} ({variant} - {reference}) / {base}: {text}")
    library = summary["shares"]["library"]["p99"]
    held = sum(s < 0.10 for s in shares["library"][99])
    print(
        f"library's added share at p99: {library['median']:.3f} of redis-py's p99 (target < "
        f"0.10; {held} of {len(per_round)} rounds under it); the noise floor's median "
        f"{summary['shares']['noise floor']['p99']['median']:+.3f}"
    )
    summary["rounds_under_target_p99"] = held
    summary["per_round"] = {
        "times_us": {n: {f"p{p}": v for p, v in d.items()} for n, d in times.items()},
        "shares": {n: {f"p{p}": v for p, v in d.items()} for n, d in shares.items()},
    }
    return summary


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


async def _library_work(testbed: Testbed, requests: int, rounds: int, warmup: int) -> list:
    """Each SiteClient GET's time (ns) over a connection that answers at once, by round."""
    client = SiteClient(testbed.client_endpoints(SITE, agent=False), testbed.workload, "AllLocal")
    client._connections[(client.site, 0)] = _Answered([b"OK", b"v"])
    samples: list[list[int]] = []
    try:
        await _timed(lambda: client.get(KEY), warmup, [])
        for _ in range(rounds):
            samples.append([])
            await _timed(lambda: client.get(KEY), requests, samples[-1])
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


SERVER_CHOICE_CASES = {  # name: servers per site, the row of the plan
    "3 sites x 2 servers": ([2] * 3, [0.6, 0.2, 0.2]),
    "3 sites x 6 servers (rf 3)": ([6] * 3, [0.6, 0.2, 0.2]),
}
OWN = "policy's own"  # no server choice: RatesPolicy's alias table over hosts


def _server_choice_policy(servers: list[int], row: list[float], name: str):
    """KurmaPerf at site 0 with ``name``'s server choice, some requests in flight
    everywhere and c3's scores fed, as a busy client's are."""
    policy = make_policy("KurmaPerf", 0, servers, list(range(len(servers))))
    policy.set_fractions(np.asarray(row))
    if name != OWN:
        choice = ServerChoice(name, servers)
        rng = np.random.default_rng(1)
        for j, n in enumerate(servers):
            choice.in_flight[j][:] = rng.integers(0, 4, n).tolist()
            if choice.needs_feedback:
                for s in range(n):
                    choice.feedback(j, s, float(rng.integers(0, 10)), 0.5 + rng.random())
                    choice.observe(j, s, 1.0 + 5 * rng.random())
        policy.set_server_choice(choice)
    return policy


def server_choice_cost(calls: int, rounds: int) -> dict:
    """ns per ``policy.choose`` call of each server choice, and its ratio against random
    in the same round (median over rounds, each round every variant in a random order)."""
    variants = (OWN, *SERVER_CHOICES)
    result = {}
    print(f"server choice in the choose path, ns per call ({rounds} rounds x {calls} calls):")
    for case, (servers, row) in SERVER_CHOICE_CASES.items():
        policies = {name: _server_choice_policy(servers, row, name) for name in variants}
        draws = {name: _Draws(np.random.default_rng(0)) for name in variants}
        per_round: dict[str, list[float]] = {name: [] for name in variants}
        order_rng = np.random.default_rng(2)
        for name in variants:  # untimed: tables built, code warm
            for k in range(1000):
                policies[name].choose(draws[name], float(k))
        for _ in range(rounds):
            for k in order_rng.permutation(len(variants)):
                name = variants[k]
                choose, rng = policies[name].choose, draws[name]
                start = time.perf_counter_ns()
                for _ in range(calls):
                    choose(rng, 0.0)
                per_round[name].append((time.perf_counter_ns() - start) / calls)
        times = {name: float(np.median(ns)) for name, ns in per_round.items()}
        ratios = {
            name: float(np.median(np.divide(per_round[name], per_round["random"])))
            for name in variants
        }
        print(f"  {case}:")
        for name in variants:
            print(f"    {name:<18} {times[name]:>6.0f} ns  {ratios[name]:.2f}x random")
        result[case] = {"ns": times, "vs_random": ratios}
    return result


def _parsers() -> dict[str, str]:
    """The reply parser of each kind of client in this run."""
    python_pool = redis.asyncio.ConnectionPool(parser_class=_AsyncRESP2Parser)
    ours = type(new_reply_reader()).__module__.split(".")[0]
    return {
        BASELINE: "hiredis" if HIREDIS_AVAILABLE else "pure Python (hiredis missing)",
        "redis-py (Python)": type(python_pool.make_connection()._parser).__name__,
        "geoslo": "hiredis" if ours == "hiredis" else "PythonReader",
    }


def _library_work_stats(per_round: list[list[int]], base: dict) -> dict:
    """Median over rounds of the p50 and p99 (us) of SiteClient's work without I/O."""
    at = [_percentiles_us(ns) for ns in per_round]
    work = {f"p{p}_us": float(np.median([a[p] for a in at])) for p in PERCENTILES}
    for p in PERCENTILES:
        work[f"p{p}_vs_redis_py"] = work[f"p{p}_us"] / base[f"p{p}_us"]
    return work


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20, help="rounds (figures: median over them)")
    ap.add_argument("--requests", type=int, default=2000, help="timed requests per variant a round")
    ap.add_argument("--warmup", type=int, default=1000, help="untimed requests per variant")
    ap.add_argument("--choose-calls", type=int, default=100_000, help="calls per choose case")
    ap.add_argument("--seed", type=int, default=0, help="seed of the interleaving order")
    ap.add_argument("--json", type=Path, help="also write the numbers to this file")
    ap.add_argument(
        "--choose-only", action="store_true", help="only the choose benchmarks (no testbed)"
    )
    args = ap.parse_args()
    if args.choose_only:
        result = {
            "choose_ns": choose_cost(args.choose_calls),
            "server_choice_ns": server_choice_cost(args.choose_calls // 10, args.rounds),
        }
        if args.json is not None:
            args.json.write_text(json.dumps(result, indent=1) + "\n")
        return
    if args.requests < 100 or args.rounds < 1:
        ap.error("--requests must be >= 100 (a p99 needs them), --rounds >= 1")
    if not HIREDIS_AVAILABLE:
        print("warning: hiredis is not installed: the baseline is redis-py's Python parser")
    spec = TestbedSpec(
        sites=("London", "Ireland"),
        servers_per_site=1,
        service_mean_ms=SERVICE_MEAN_MS,
        keys=10,
        network="loopback",  # DEBUG SLEEP + GET, the request this benchmark times
    )
    with tempfile.TemporaryDirectory(prefix="geoslo-bench-client-") as state_dir:
        testbed = Testbed.up(spec, Path(state_dir), progress=lambda message: None)
        try:
            samples = asyncio.run(
                _measure(testbed, args.requests, args.rounds, args.warmup, args.seed)
            )
            work_samples = asyncio.run(
                _library_work(testbed, args.requests, args.rounds, args.warmup)
            )
        finally:
            testbed.down()
    parsers = _parsers()
    print(
        f"{args.rounds} rounds of {args.requests} sequential GETs per variant on the local "
        f"Redis server (warm-up {args.warmup}, interleaved request by request in random "
        f"order); redis-py {redis.__version__} asyncio client, reply parsers: "
        + ", ".join(f"{k} {v}" for k, v in parsers.items())
        + f" (GEOSLO_RESP_READER={os.environ.get('GEOSLO_RESP_READER', '')!r})"
    )
    result = report(samples)
    work = _library_work_stats(work_samples, result["variants"][BASELINE])
    print(
        f"library work per GET without I/O (SiteClient over an answered connection): "
        f"p50 {work['p50_us']:.1f} us = {work['p50_vs_redis_py']:.3f} of redis-py's p50, "
        f"p99 {work['p99_us']:.1f} us = {work['p99_vs_redis_py']:.3f} of redis-py's p99"
    )
    result["library_work_without_io"] = work
    result["choose_ns"] = choose_cost(args.choose_calls)
    result["server_choice_ns"] = server_choice_cost(args.choose_calls // 10, args.rounds)
    if args.json is not None:
        result.update(
            rounds=args.rounds,
            requests_per_round=args.requests,
            warmup=args.warmup,
            redis_py_version=redis.__version__,
            parsers=parsers,
            service_mean_ms=SERVICE_MEAN_MS,
        )
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()

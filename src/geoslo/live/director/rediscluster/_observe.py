"""The users' own load on a Redis Cluster, per bin, read from the cluster itself (FAST
2011 §5.5's histogram, without a client of ours in the request path).

Redis 7.0 counts requests per command and node (``INFO commandstats``), not per slot
(``CLUSTER SLOT-STATS`` came in Redis 8.2 / Valkey 8.0). So, every period:

* **how many**: each node's read and write calls are the deltas of its commandstats
  counters (commands in the ``@read`` or ``@write`` ACL categories that take a key, less
  ``@dangerous`` ones such as ``MIGRATE`` and ``RESTORE-ASKING``, a move's own traffic;
  a replica's writes are its master's, replicated, and are not counted);
* **where**: short ``MONITOR`` windows on each node (``monitor_window_s`` every
  ``monitor_every_s``) sample its requests; each one's first key is hashed to its slot
  with the cluster's CRC16 (any key name, hash tags honoured), so a node's calls are
  spread over its bins in the sampled shares (those of the last ``share_periods``
  periods). A node with fewer than ``min_samples`` samples spreads its calls evenly
  over the slots it serves (its master's, for a replica);
* **how fast**: ``LATENCY HISTOGRAM`` of the read commands (Redis 7), delta over the
  period, merged over the nodes: the p99 of the time a node spent executing a read (it
  leaves out queueing and the network: a lower bound of what clients see).

Where every master answers ``CLUSTER SLOT-STATS`` with its per-slot counters (Valkey 8+
with ``cluster-slot-stats-enabled yes``; Redis 8.2), **where** comes from them instead of
MONITOR: each node's calls are spread over its slots in the shares of the period's
increase of a per-slot counter, and no MONITOR window is opened. The counters do not
tell reads from writes: ``network-bytes`` (the default) spreads reads by the bytes sent
(a read's reply carries the value) and writes by the bytes received (a write carries
it); ``cpu-usec`` and the one-way byte counts spread both alike (their errors measured
by benchmarks/bench_director_slot_stats.py). The source is chosen at ``start`` by what
the cluster answers (``ClusterObserver.source``).

Nothing here writes: every command used is a read of the node's state (docs/director-live.md,
"On your own cluster"; the cost of the windows is measured by
benchmarks/bench_director_observation.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import redis
from redis.crc import key_slot
from redis.exceptions import RedisError

from geoslo.errors import ConfigError
from geoslo.live.director.rediscluster._engine import (
    SLOTS,
    SLOTS_PER_BIN,
    ClusterNode,
    parse_cluster_nodes,
)
from geoslo.live.director.rediscluster._link import NodeLink

__all__ = [
    "BINS",
    "ClusterObserver",
    "ObservedPeriod",
    "ObserverSettings",
    "bin_rates",
    "counted_calls",
    "p99_from_histograms",
    "parse_monitor_line",
    "parse_slot_stats",
    "read_bin_bytes",
    "slot_increases",
    "slot_of_request",
]

BINS = SLOTS // SLOTS_PER_BIN
# slot_stats_metric -> the counters that spread (reads, writes)
SLOT_STATS_METRICS = {
    "network-bytes": ("network-bytes-out", "network-bytes-in"),
    "cpu-usec": ("cpu-usec", "cpu-usec"),
    "network-bytes-in": ("network-bytes-in", "network-bytes-in"),
    "network-bytes-out": ("network-bytes-out", "network-bytes-out"),
}
# Keyed commands of a node's own machinery, not the users' requests (a move sizes keys).
_NOT_REQUESTS = frozenset({"memory|usage", "memory", "object", "dump"})


@dataclass(frozen=True)
class ObserverSettings:
    """How the cluster is read. A MONITOR window costs the node while it lasts (every
    command is copied to the monitor): ``monitor_window_s / monitor_every_s`` is the share
    of time a node is monitored (5% by default; the measured cost in the docs)."""

    period_s: float = 20.0  # §5.5, §5.7's Table: the execution period
    monitor_window_s: float = 0.1
    monitor_every_s: float = 2.0
    min_samples: int = 20  # fewer: spread a node's calls evenly over its slots
    # A node's slot shares come from the samples of this many periods (the last one's
    # and the ones before): where the load is, changes slower than how much of it.
    share_periods: int = 3
    monitor: bool = True  # False: commandstats spread by key counts only
    # Use CLUSTER SLOT-STATS where every master answers it (no MONITOR then), spreading
    # by this counter's increase (benchmarks/bench_director_slot_stats.py compares them).
    slot_stats: bool = True
    slot_stats_metric: str = "network-bytes"

    def __post_init__(self) -> None:
        for name in ("period_s", "monitor_window_s", "monitor_every_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(name, f"must be > 0, got {getattr(self, name)}")
        if self.monitor_window_s > self.monitor_every_s:
            raise ConfigError("monitor_window_s", "must not exceed monitor_every_s")
        if self.min_samples < 1:
            raise ConfigError("min_samples", f"must be >= 1, got {self.min_samples}")
        if self.share_periods < 1:
            raise ConfigError("share_periods", f"must be >= 1, got {self.share_periods}")
        if self.slot_stats_metric not in SLOT_STATS_METRICS:
            raise ConfigError(
                "slot_stats_metric",
                f"must be one of {', '.join(SLOT_STATS_METRICS)}, got {self.slot_stats_metric!r}",
            )


@dataclass(frozen=True)
class ObservedPeriod:
    """One period's per-bin rates and the nodes' read p99 (``nan`` without reads)."""

    start_s: float
    end_s: float
    get_rps: np.ndarray
    put_rps: np.ndarray
    reads: int
    writes: int
    read_p99_ms: float
    samples: int  # MONITOR samples that named a slot
    node_rps: dict[str, float] = field(default_factory=dict)  # reads + writes per node
    source: str = "monitor"  # where the shares came from: "monitor" or "slot-stats"


# --- pure parts -----------------------------------------------------------------------------
_TOKEN = re.compile(rb'"((?:[^"\\]|\\.)*)"')
_ESCAPES = {b"n": b"\n", b"r": b"\r", b"t": b"\t", b"a": b"\a", b"b": b"\b"}


def _unescape(token: bytes) -> bytes:
    """A MONITOR argument as Redis quoted it (``sdscatrepr``) back to its bytes."""
    out, i = bytearray(), 0
    while i < len(token):
        c = token[i : i + 1]
        if c != b"\\" or i + 1 >= len(token):
            out += c
            i += 1
            continue
        nxt = token[i + 1 : i + 2]
        if nxt == b"x" and i + 3 < len(token):
            out.append(int(token[i + 2 : i + 4], 16))
            i += 4
        else:
            out += _ESCAPES.get(nxt, nxt)
            i += 2
    return bytes(out)


def parse_monitor_line(line: bytes | str) -> list[bytes] | None:
    """A ``MONITOR`` line (``<time> [<db> <client>] "CMD" "arg" ...``) as its arguments,
    the command lowercased; None for what is not a request (``OK``, a Lua line)."""
    if isinstance(line, str):
        line = line.encode()
    bracket = line.find(b"]")
    if bracket < 0 or b"lua" in line[:bracket]:
        return None
    args = [_unescape(m.group(1)) for m in _TOKEN.finditer(line, bracket)]
    if not args:
        return None
    return [args[0].lower(), *args[1:]]


def slot_of_request(args: Sequence[bytes], first_key: Mapping[str, int]) -> int | None:
    """The hash slot of a request's first key (None if the command is not counted or has
    no key where ``first_key`` says: ``COMMAND INFO``'s first-key position)."""
    name = args[0].decode(errors="replace")
    if name in ("cluster", "config", "client", "memory", "object") and len(args) > 1:
        name = f"{name}|{args[1].decode(errors='replace').lower()}"
    position = first_key.get(name, 0)
    if position <= 0 or position >= len(args):
        return None
    return key_slot(args[position])


def counted_calls(
    commandstats: Mapping[str, Mapping[str, int]],
    reads: frozenset[str],
    writes: frozenset[str],
) -> tuple[int, int]:
    """A node's total read and write calls from ``INFO commandstats`` (redis-py's parse:
    ``cmdstat_<name>`` -> ``{"calls": ...}``), counting only the given commands."""
    read = write = 0
    for key, stats in commandstats.items():
        name = key.removeprefix("cmdstat_")
        calls = int(stats.get("calls", 0))
        if name in reads:
            read += calls
        elif name in writes:
            write += calls
    return read, write


def bin_rates(
    calls: Mapping[str, float],
    samples: Mapping[str, Counter],
    fallback_shares: Mapping[str, Mapping[int, float]],
    period_s: float,
    min_samples: int,
) -> np.ndarray:
    """Per-bin request rates: each node's ``calls`` in the period spread over bins by its
    sampled slots' shares (``samples[node]``: slot -> count), or, with fewer than
    ``min_samples`` samples, by ``fallback_shares[node]`` (bin -> weight; even over
    those bins when it has no keys). A node with calls and nowhere to put them (no
    samples, no bins) adds nothing."""
    rates = np.zeros(BINS)
    for node, total in calls.items():
        if total <= 0:
            continue
        sampled = samples.get(node, Counter())
        count = sum(sampled.values())
        if count >= min_samples:
            for slot, n in sampled.items():
                rates[slot // SLOTS_PER_BIN] += total * n / count
            continue
        shares = fallback_shares.get(node, {})
        weight = sum(shares.values())
        for b, share in shares.items():
            rates[b] += total * (share / weight if weight > 0 else 1.0 / len(shares))
    return rates / period_s


def p99_from_histograms(buckets: Mapping[int, int], quantile: float = 0.99) -> float:
    """The quantile in ms of a latency histogram (``LATENCY HISTOGRAM``'s buckets as upper
    bounds in µs -> calls in that bucket, not cumulative): the upper bound of the bucket
    that holds it (Redis's buckets are powers of two, so within 2x). nan if empty."""
    total = sum(buckets.values())
    if total <= 0:
        return float("nan")
    seen = 0
    for bound_us in sorted(buckets):
        seen += buckets[bound_us]
        if seen >= quantile * total:
            return bound_us / 1e3
    return max(buckets) / 1e3


def _pairs(value) -> list[tuple]:
    """A RESP2 flat list or a RESP3 map as (key, value) pairs."""
    if isinstance(value, Mapping):
        return list(value.items())
    return list(zip(value[::2], value[1::2], strict=True))


def histogram_of(reply: Sequence) -> dict[str, dict[int, int]]:
    """``LATENCY HISTOGRAM``'s reply as command -> {bucket µs: cumulative calls}."""
    out: dict[str, dict[int, int]] = {}
    for name, body in _pairs(reply):
        fields = {_text(k): v for k, v in _pairs(body)}
        pairs = _pairs(fields.get("histogram_usec", []))
        out[_text(name)] = {int(b): int(c) for b, c in pairs}
    return out


def parse_slot_stats(reply: Sequence, metrics: Iterable[str]) -> dict[str, dict[int, int]] | None:
    """``CLUSTER SLOT-STATS SLOTSRANGE``'s reply (``[[slot, [name, value, ...]], ...]``,
    or RESP3 maps) as metric -> slot -> value; None if the node does not report one of
    ``metrics`` (``cluster-slot-stats-enabled no`` leaves only ``key-count``)."""
    out: dict[str, dict[int, int]] = {m: {} for m in metrics}
    for entry in reply:
        slot, body = (next(iter(entry.items())) if isinstance(entry, Mapping) else entry)[:2]
        fields = {_text(k).lower(): v for k, v in _pairs(body)}
        for metric, values in out.items():
            if metric not in fields:
                return None
            values[int(slot)] = int(fields[metric])
    return out


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _uncumulate(cumulative: Mapping[int, int]) -> dict[int, int]:
    out, before = {}, 0
    for bound in sorted(cumulative):
        out[bound] = cumulative[bound] - before
        before = cumulative[bound]
    return out


# --- the observer -----------------------------------------------------------------------------
@dataclass
class _NodeCounters:
    reads: int
    writes: int
    histogram: dict[int, int]  # bucket -> calls in it (read commands, summed)
    at_s: float = 0.0  # when they were read (the observer's clock)
    slots: dict[str, dict[int, int]] | None = None  # SLOT-STATS: metric -> slot -> value


class ClusterObserver:
    """Per-period, per-bin rates of every request the cluster served. ``poll(view)`` is
    called every tick with the cluster's nodes; it returns the periods that ended."""

    def __init__(
        self,
        settings: ObserverSettings,
        link: NodeLink,
        clock=time.monotonic,
        log=lambda _message: None,
    ) -> None:
        self.settings = settings
        self.link = link
        self.clock = clock
        self.log = log
        self.started = clock()
        self._period_start_s = 0.0
        self._first_key: dict[str, int] = {}
        self._reads: frozenset[str] = frozenset()
        self._writes: frozenset[str] = frozenset()
        self._last: dict[str, _NodeCounters] = {}  # node address -> counters at period start
        self._samples: dict[str, Counter] = {}
        self._past_samples: list[dict[str, Counter]] = []  # the periods before, newest last
        self._view: list[ClusterNode] = []
        self._sampler: asyncio.Task | None = None
        self._closing = False
        self.sample_windows = 0
        self.sampled_requests = 0
        self.source = "monitor"  # or "slot-stats": chosen by start()

    def now_s(self) -> float:
        return self.clock() - self.started

    async def start(self, view: Sequence[ClusterNode]) -> None:
        """Learn the commands (``COMMAND INFO``, ``COMMAND LIST FILTERBY ACLCAT``), take
        every node's counters as the first period's start, start the MONITOR windows."""
        node = next(n for n in view if not n.failed)
        await self._learn_commands(node)
        if self.settings.slot_stats:
            self.source = await self._choose_source(view)
        self.started = self.clock()  # the first period begins now
        self._view = list(view)
        for n in view:
            if not n.failed:
                with contextlib.suppress(RedisError, OSError):
                    self._last[_address(n)] = await self._counters(n)
        if self.settings.monitor and self.source == "monitor":
            self._sampler = asyncio.create_task(self._sample_forever())

    async def _choose_source(self, view: Sequence[ClusterNode]) -> str:
        """``"slot-stats"`` if every live master reports ``slot_stats_metric`` per slot."""
        metric = self.settings.slot_stats_metric
        for n in view:
            if not n.is_master or n.failed:
                continue
            try:
                slots = await self._slot_stats(n)
            except (RedisError, OSError) as error:  # Redis 7, or an ACL without it
                self.log(f"{_address(n)}: no CLUSTER SLOT-STATS ({error}); sampling MONITOR")
                return "monitor"
            if slots is None:
                self.log(
                    f"{_address(n)}: CLUSTER SLOT-STATS without the {metric} counters "
                    "(cluster-slot-stats-enabled yes spares MONITOR); sampling MONITOR"
                )
                return "monitor"
        self.log(f"every master reports {metric} per slot: CLUSTER SLOT-STATS, no MONITOR")
        return "slot-stats"

    async def _slot_stats(self, node: ClusterNode) -> dict[str, dict[int, int]] | None:
        reply = await self.link.raw(node, "CLUSTER", "SLOT-STATS", "SLOTSRANGE", 0, SLOTS - 1)
        return parse_slot_stats(reply, set(SLOT_STATS_METRICS[self.settings.slot_stats_metric]))

    async def aclose(self) -> None:
        """Stop the MONITOR windows. A cancel that lands as a window's own timeout fires
        is taken for that timeout by redis-py's read (measured: the sampler then ran on and
        ``close()`` never returned), so the loop also checks a flag, and the cancel is
        repeated until the task ended."""
        self._closing = True
        task, self._sampler = self._sampler, None
        while task is not None and not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=1.0)
        if task is not None and not task.cancelled():
            with contextlib.suppress(Exception):
                task.result()

    async def _learn_commands(self, node: ClusterNode) -> None:
        async def category(name: str) -> set[str]:
            reply = await self.link.raw(node, "COMMAND", "LIST", "FILTERBY", "ACLCAT", name)
            return {_text(c) for c in reply}

        read, write, dangerous = (
            await category("read"),
            await category("write"),
            await category("dangerous"),
        )
        names = sorted(read | write)
        info = await self.link.raw(node, "COMMAND", "INFO", *names)
        keyed = set()
        for entry in info:
            if entry and int(entry[3]) > 0:
                self._first_key[_text(entry[0])] = int(entry[3])
                keyed.add(_text(entry[0]))
        counted = keyed - dangerous - _NOT_REQUESTS
        self._reads = frozenset(counted & read - write)
        self._writes = frozenset(counted & write)

    async def _counters(self, node: ClusterNode) -> _NodeCounters:
        stats = await self.link.command(node, "INFO", "commandstats")
        reads, writes = counted_calls(stats, self._reads, self._writes)
        if not node.is_master:
            writes = 0  # a replica's writes come from its master (replicated)
        histogram: dict[int, int] = {}
        if self._reads:
            reply = await self.link.raw(node, "LATENCY", "HISTOGRAM", *sorted(self._reads))
            for cumulative in histogram_of(reply).values():
                for bound, n in _uncumulate(cumulative).items():
                    histogram[bound] = histogram.get(bound, 0) + n
        slots = None
        if self.source == "slot-stats":
            with contextlib.suppress(RedisError, OSError):  # a node without: spread evenly
                slots = await self._slot_stats(node)
        return _NodeCounters(reads, writes, histogram, self.now_s(), slots)

    async def poll(self, view: Sequence[ClusterNode]) -> list[ObservedPeriod]:
        """The period that ended by now, if one did: from the last one's end to now (a
        late tick makes it longer, never two with the calls all in the first); every
        node's calls are divided by the time between its own two reads."""
        self._view = list(view)
        now = self.now_s()
        done = []
        if now >= self._period_start_s + self.settings.period_s:
            done.append(await self._close_period(self._period_start_s, now, view))
            self._period_start_s = now
        for n in view:  # a node first seen: its counters from now on
            if not n.failed and _address(n) not in self._last:
                with contextlib.suppress(RedisError, OSError):
                    self._last[_address(n)] = await self._counters(n)
        return done

    async def _close_period(
        self, start_s: float, end_s: float, view: Sequence[ClusterNode]
    ) -> ObservedPeriod:
        masters = {n.node_id: n for n in view if n.is_master and not n.failed}
        read_calls: dict[str, float] = {}
        write_calls: dict[str, float] = {}
        histogram: dict[int, int] = {}
        node_rps: dict[str, float] = {}
        shares: dict[str, dict[int, float]] = {}
        # (reads, writes): node -> slot -> its counter's increase
        slot_weights: tuple[dict[str, Counter], dict[str, Counter]] = ({}, {})
        live = [n for n in view if not n.failed]
        read_now = await asyncio.gather(*(self._counters(n) for n in live), return_exceptions=True)
        for n, now in zip(live, read_now, strict=True):
            address = _address(n)
            if isinstance(now, BaseException):
                if not isinstance(now, RedisError | OSError):
                    raise now
                continue
            before = self._last.get(address)
            self._last[address] = now
            if before is None:
                continue
            reads, writes = _delta(now.reads, before.reads), _delta(now.writes, before.writes)
            elapsed_s = max(now.at_s - before.at_s, 1e-3)
            read_calls[address], write_calls[address] = reads / elapsed_s, writes / elapsed_s
            node_rps[address] = (reads + writes) / elapsed_s
            if now.slots is not None and before.slots is not None:
                counters = SLOT_STATS_METRICS[self.settings.slot_stats_metric]
                for weights, metric in zip(slot_weights, counters, strict=True):
                    weights[address] = slot_increases(before.slots[metric], now.slots[metric])
            for bound, count in now.histogram.items():
                histogram[bound] = histogram.get(bound, 0) + max(
                    0, count - before.histogram.get(bound, 0)
                )
        s = self.settings
        if self.source == "slot-stats":
            return self._slot_stats_period(
                start_s, end_s, view, masters, (read_calls, write_calls), slot_weights,
                histogram, node_rps,
            )  # fmt: skip
        period_samples, self._samples = self._samples, {}
        self._past_samples = (self._past_samples + [period_samples])[-s.share_periods :]
        samples: dict[str, Counter] = {}
        for past in self._past_samples:
            for node, counter in past.items():
                samples.setdefault(node, Counter()).update(counter)
        for n in view:  # the fallback spread, only where the samples are too few
            address = _address(n)
            if not (read_calls.get(address) or write_calls.get(address)):
                continue
            sampled = samples.get(address, Counter())
            few = min(
                sum(c for (_, w), c in sampled.items() if not w),
                sum(c for (_, w), c in sampled.items() if w)
                if write_calls.get(address)
                else s.min_samples,
            )
            owner = n if n.is_master else masters.get(n.master_id or "")
            if owner is not None and few < s.min_samples:
                shares[address] = self._slot_shares(owner)
        # calls are per second already (each node over its own span)
        reads_by_bin = bin_rates(read_calls, _only(samples, False), shares, 1.0, s.min_samples)
        writes_by_bin = bin_rates(write_calls, _only(samples, True), shares, 1.0, s.min_samples)
        return ObservedPeriod(
            start_s=start_s,
            end_s=end_s,
            get_rps=reads_by_bin,
            put_rps=writes_by_bin,
            reads=int(sum(read_calls.values()) * (end_s - start_s)),
            writes=int(sum(write_calls.values()) * (end_s - start_s)),
            read_p99_ms=p99_from_histograms(histogram),
            samples=sum(sum(c.values()) for c in period_samples.values()),
            node_rps=node_rps,
        )

    def _slot_stats_period(
        self,
        start_s: float,
        end_s: float,
        view: Sequence[ClusterNode],
        masters: Mapping[str, ClusterNode],
        calls: tuple[dict[str, float], dict[str, float]],
        slot_weights: tuple[Mapping[str, Counter], Mapping[str, Counter]],
        histogram: Mapping[int, int],
        node_rps: dict[str, float],
    ) -> ObservedPeriod:
        """The period from SLOT-STATS: each node's read (write) calls per second over its
        slots in the shares of their read (write) counters' increase; a node whose
        counters did not move (or that did not answer) spreads them over its master's
        slots evenly."""
        rates = []
        for node_calls, node_weights in zip(calls, slot_weights, strict=True):
            shares: dict[str, dict[int, float]] = {}
            for n in view:
                owner = n if n.is_master else masters.get(n.master_id or "")
                if sum(node_weights.get(_address(n), Counter()).values()) <= 0 and owner:
                    shares[_address(n)] = self._slot_shares(owner)
            weights = {a: w for a, w in node_weights.items() if sum(w.values()) > 0}
            rates.append(bin_rates(node_calls, weights, shares, 1.0, 1))
        read_calls, write_calls = calls
        return ObservedPeriod(
            start_s=start_s,
            end_s=end_s,
            get_rps=rates[0],
            put_rps=rates[1],
            reads=int(sum(read_calls.values()) * (end_s - start_s)),
            writes=int(sum(write_calls.values()) * (end_s - start_s)),
            read_p99_ms=p99_from_histograms(histogram),
            samples=0,
            node_rps=node_rps,
            source="slot-stats",
        )

    @staticmethod
    def _slot_shares(master: ClusterNode) -> dict[int, float]:
        """The master's bins weighted by its slots in each: the fallback spread where a
        node was too little sampled (no command: counting keys per slot costs a node
        thousands of ``CLUSTER COUNTKEYSINSLOT`` every period)."""
        shares: dict[int, float] = {}
        for lo, hi in master.slots:
            for slot in range(lo, hi + 1):
                shares[slot // SLOTS_PER_BIN] = shares.get(slot // SLOTS_PER_BIN, 0.0) + 1.0
        return shares

    # MONITOR windows ------------------------------------------------------------------------
    async def _sample_forever(self) -> None:
        """One window per node every ``monitor_every_s``, the nodes in turn (staggered)."""
        s = self.settings
        while not self._closing:
            nodes = [n for n in self._view if not n.failed]
            gap = s.monitor_every_s / max(len(nodes), 1)
            for n in nodes:
                started = self.clock()
                with contextlib.suppress(RedisError, OSError, asyncio.TimeoutError):
                    await self._sample(n)
                await asyncio.sleep(max(0.0, gap - (self.clock() - started)))
            if not nodes:
                await asyncio.sleep(s.monitor_every_s)

    async def _sample(self, node: ClusterNode) -> None:
        lines = await self.link.monitor(node, self.settings.monitor_window_s)
        self.sample_windows += 1
        counter = self._samples.setdefault(_address(node), Counter())
        for line in lines:
            args = parse_monitor_line(line)
            if args is None:
                continue
            name = args[0].decode(errors="replace")
            is_write = name in self._writes
            if not node.is_master and is_write:
                continue
            if name not in self._reads and not is_write:
                continue
            slot = slot_of_request(args, self._first_key)
            if slot is not None:
                counter[(slot, is_write)] += 1
                self.sampled_requests += 1


def slot_increases(before: Mapping[int, int], now: Mapping[int, int]) -> Counter:
    """Each slot's counter increase; a slot new to the node, or whose counter went back
    (the node restarted, or the slot left and came back: its stats reset), from zero."""
    out: Counter = Counter()
    for slot, value in now.items():
        increase = _delta(value, before.get(slot, 0))
        if increase > 0:
            out[slot] = increase
    return out


def _only(samples: Mapping[str, Counter], writes: bool) -> dict[str, Counter]:
    return {
        node: Counter({slot: n for (slot, w), n in counter.items() if w == writes})
        for node, counter in samples.items()
    }


def _delta(now: int, before: int) -> int:
    """Calls since ``before``; a restarted node (counters reset) counts from zero."""
    return now - before if now >= before else now


def _address(node: ClusterNode) -> str:
    return f"{node.host}:{node.port}"


def nodes_of(view: Iterable[ClusterNode]) -> list[str]:
    return [_address(n) for n in view if not n.failed]


def read_bin_bytes(
    seeds: Sequence[tuple[str, int]], credentials: Mapping | None = None
) -> np.ndarray:
    """Each bin's stored bytes on the cluster as it is now (what a move of it carries): its
    keys (``CLUSTER COUNTKEYSINSLOT``, one pipeline per master) times its master's bytes
    per key (``INFO memory``'s ``used_memory_dataset`` over ``dbsize``). Read-only."""
    errors = []
    for host, port in seeds:
        try:
            with redis.Redis(host, port, socket_timeout=10.0, **(credentials or {})) as seed:
                text = seed.execute_command("CLUSTER", "NODES")
            break
        except (RedisError, OSError) as error:
            errors.append(f"{host}:{port}: {error}")
    else:
        raise ConfigError("seed_nodes", "no seed node answers: " + "; ".join(errors))
    text = text.decode() if isinstance(text, bytes) else text
    out = np.zeros(BINS)
    for node in parse_cluster_nodes(text):
        if not node.is_master or node.failed or not node.slots:
            continue
        slots = [s for lo, hi in node.slots for s in range(lo, hi + 1)]
        with redis.Redis(node.host, node.port, socket_timeout=30.0, **(credentials or {})) as r:
            pipe = r.pipeline(transaction=False)
            for slot in slots:
                pipe.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot)
            counts = pipe.execute()
            keys = max(int(r.dbsize()), 1)
            per_key = float(r.info("memory").get("used_memory_dataset", 0)) / keys
        for slot, count in zip(slots, counts, strict=True):
            out[slot // SLOTS_PER_BIN] += int(count) * per_key
    return out

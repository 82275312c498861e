"""What a request asks of a site's Redis server on the live testbed: the workload.

Kurma's curves (§4, Fig. 4) come from a server whose queue grows with load. A Redis GET
of 375 B costs the server microseconds, so a 2-core machine can never load it to
saturation; each form of the testbed gives the server its work another way
(docs/live.md, calibration):

* ``QueryWork`` (sites in network namespaces, as root): every read is a real query,
  ``SORT_RO key LIMIT 0 10`` over a list of ``list_length`` numbers (the top ten), and
  every write replaces the list's first element (``LSET``). Each server runs under a
  CFS CPU quota (``_cgroup.limit_cpu``), so its capacity is the quota over the query's
  CPU cost, and requests queue at the server when it is busy or throttled. Nothing on
  the request's path asks the server to wait.
* ``SleepWork`` (the rootless loopback form): the request is sent as ``DEBUG SLEEP <s>``
  pipelined with the GET or SET, so the sleep holds the server and later requests queue
  behind it; the service time is drawn by the client (exponential).

Both give the same interface: a read's or a write's payload and how many replies it
takes, and the bytes of a reply (for the WAN byte count).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from geoslo.errors import ConfigError
from geoslo.live._resp import encode_command

__all__ = [
    "GetSetWork",
    "QueryWork",
    "ServiceWork",
    "SleepWork",
    "Workload",
    "get_payload",
    "key_name",
    "put_payload",
    "reply_bytes",
    "work_payload",
]


def key_name(index: int) -> bytes:
    return b"k:%d" % index


def reply_bytes(reply) -> int:
    """The payload bytes of a reply (a bulk string, or a list of them; 0 for others)."""
    if isinstance(reply, bytes):
        return len(reply)
    if isinstance(reply, list):
        return sum(reply_bytes(item) for item in reply)
    return 0


@dataclass(frozen=True)
class ServiceWork:
    """Service time of one request on one server: ``mean_ms * Exp(1)``, at least
    ``min_ms`` (the server's own cost), drawn by whoever sends the request."""

    mean_ms: float = 2.0
    min_ms: float = 0.0

    def __post_init__(self) -> None:
        if not self.mean_ms > 0:
            raise ConfigError("service_mean_ms", f"must be > 0, got {self.mean_ms}")

    @property
    def capacity_per_server_rps(self) -> float:
        return 1000.0 / self.mean_ms

    def draw_s(self, rng: np.random.Generator) -> float:
        return max(self.mean_ms * rng.standard_exponential(), self.min_ms) / 1e3


_DEBUG_SLEEP = encode_command(b"DEBUG", b"SLEEP", b"")[:-6]  # up to the argument's length


def work_payload(work_s: float) -> bytes:
    """``DEBUG SLEEP``: the server's work for the request pipelined after it."""
    seconds = b"%.6f" % work_s
    return b"%s$%d\r\n%s\r\n" % (_DEBUG_SLEEP, len(seconds), seconds)


def get_payload(key: bytes, work_s: float) -> bytes:
    """``DEBUG SLEEP`` then ``GET``: two replies (OK, the value); built with two format
    operations, as it is on every request's path."""
    seconds = b"%.6f" % work_s
    return b"%s$%d\r\n%s\r\n*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n" % (
        _DEBUG_SLEEP, len(seconds), seconds, len(key), key
    )  # fmt: skip


def put_payload(key: bytes, value: bytes, work_s: float | None) -> bytes:
    """``DEBUG SLEEP`` then ``SET``: two replies; with ``work_s`` None a plain SET (one reply),
    for replicas that only store the write."""
    store = encode_command(b"SET", key, value)
    if work_s is None:
        return store
    return work_payload(work_s) + store


@dataclass(frozen=True)
class SleepWork:
    """Reads are GETs of ``value_bytes`` values, each sent after ``DEBUG SLEEP`` for a
    service time drawn by the client (``ServiceWork``)."""

    mean_ms: float = 2.0
    value_bytes: int = 375  # Kurma §7.1.3: 375-byte requests

    def __post_init__(self) -> None:  # raises ConfigError for a bad mean
        object.__setattr__(self, "_service", ServiceWork(self.mean_ms))

    commands_per_request = 2  # DEBUG SLEEP and the command (C3's feedback counts them)

    @property
    def capacity_per_server_rps(self) -> float:
        return self._service.capacity_per_server_rps

    def write_value(self) -> bytes:
        return b"w" * self.value_bytes

    def read_payload(self, key: bytes, rng) -> tuple[bytes, int]:
        """``DEBUG SLEEP`` then ``GET``: two replies (OK, the value)."""
        return get_payload(key, self._service.draw_s(rng)), 2

    def write_payload(self, key: bytes, value: bytes, rng, loaded: bool) -> tuple[bytes, int]:
        """``DEBUG SLEEP`` then ``SET`` (two replies); a plain SET (one) unless ``loaded``:
        a replica that only stores a propagated write."""
        if not loaded:
            return put_payload(key, value, None), 1
        return put_payload(key, value, self._service.draw_s(rng)), 2

    def value_of(self, reply):
        return reply[1] if isinstance(reply, list) else reply

    def fill_commands(self, keys: int, seed: int = 0, batch: int = 500):
        """The data set: as :class:`GetSetWork`'s."""
        return GetSetWork(self.value_bytes).fill_commands(keys, seed, batch)


@dataclass(frozen=True)
class GetSetWork:
    """Plain ``GET`` and ``SET`` of ``value_bytes`` values: what a client sends to a store
    it does not load on purpose (an operator's own Redis, docs/live.md). Its capacity is
    the store's, which only profiling it tells (0 here)."""

    value_bytes: int = 375  # Kurma §7.1.3: 375-byte requests
    commands_per_request = 1

    def __post_init__(self) -> None:
        if not (isinstance(self.value_bytes, int) and 1 <= self.value_bytes <= 2**20):
            raise ConfigError("value_bytes", "must be an integer from 1 to 1048576")

    @property
    def capacity_per_server_rps(self) -> float:
        return 0.0

    def write_value(self) -> bytes:
        return b"w" * self.value_bytes

    def read_payload(self, key: bytes, rng) -> tuple[bytes, int]:
        return encode_command(b"GET", key), 1

    def write_payload(self, key: bytes, value: bytes, rng, loaded: bool) -> tuple[bytes, int]:
        return encode_command(b"SET", key, value), 1

    def value_of(self, reply):
        return reply

    def fill_commands(self, keys: int, seed: int = 0, batch: int = 500):
        """The data set, as (payload, replies): every key holds a value (pipelined MSETs)."""
        value = b"v" * self.value_bytes
        for start in range(0, keys, batch):
            args: list = [b"MSET"]
            for k in range(start, min(start + batch, keys)):
                args += [key_name(k), value]
            yield encode_command(*args), 1


@dataclass(frozen=True)
class QueryWork:
    """Reads are ``SORT_RO key LIMIT 0 <top>`` over lists of ``list_length`` numbers (the
    server sorts the whole list: real CPU work, measured at ``up``); writes ``LSET`` the
    first element. The server's capacity is its CPU quota over that cost."""

    list_length: int = 2000
    top: int = 10
    cpu_fraction: float = 0.10  # of one CPU per server (CFS quota)
    cpu_period_us: int = 10_000  # a throttled server waits at most this long
    cost_us: float | None = None  # measured CPU per read (set at up)
    commands_per_request = 1

    def __post_init__(self) -> None:
        if not (isinstance(self.list_length, int) and 10 <= self.list_length <= 100_000):
            raise ConfigError("list_length", "must be an integer from 10 to 100000")
        if not 0 < self.cpu_fraction <= 1:
            raise ConfigError("cpu_fraction", f"must be in (0, 1], got {self.cpu_fraction}")
        if not 1000 <= self.cpu_period_us <= 1_000_000:
            raise ConfigError("cpu_period_us", "must be 1000 to 1000000 (the kernel's range)")

    @property
    def capacity_per_server_rps(self) -> float:
        """Nominal: the quota over the measured cost of a read (0 before it is measured)."""
        return self.cpu_fraction * 1e6 / self.cost_us if self.cost_us else 0.0

    def write_value(self) -> bytes:
        return b"7"

    def read_payload(self, key: bytes, rng) -> tuple[bytes, int]:
        return b"*5\r\n$7\r\nSORT_RO\r\n$%d\r\n%s\r\n$5\r\nLIMIT\r\n$1\r\n0\r\n$%d\r\n%d\r\n" % (
            len(key), key, len(b"%d" % self.top), self.top
        ), 1  # fmt: skip

    def write_payload(self, key: bytes, value: bytes, rng, loaded: bool) -> tuple[bytes, int]:
        return encode_command(b"LSET", key, b"0", value), 1

    def value_of(self, reply):
        return reply

    def fill_commands(self, keys: int, seed: int = 0, batch: int = 500):
        """The data set, as (payload, replies): key 0 a list of random numbers, every other
        key a server-side ``COPY`` of it (pipelined, ``batch`` at a time)."""
        numbers = np.random.default_rng(seed).integers(0, 10**9, self.list_length)
        first = key_name(0)
        yield encode_command(b"DEL", first) + encode_command(b"RPUSH", first, *numbers.tolist()), 2
        for start in range(1, keys, batch):
            copies = range(start, min(start + batch, keys))
            copy = (encode_command(b"COPY", first, key_name(k), b"REPLACE") for k in copies)
            payload = b"".join(copy)
            yield payload, len(copies)


Workload = SleepWork | QueryWork | GetSetWork

"""The storage backend's work per request on the live testbed.

Each site's servers are real Redis processes. Redis answers a GET in microseconds, so a
2-core machine could never load it to saturation; the testbed therefore gives every
request a service time: it is sent as ``DEBUG SLEEP <s>`` pipelined with the real GET or
SET. Redis runs one command at a time, so the sleep holds the server and every request
behind it waits: a real FCFS queue whose service times follow ``ServiceWork`` while the
CPU stays idle (docs/live.md, calibration). Writes carry the same work as reads.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from geoslo.errors import ConfigError
from geoslo.live._resp import encode_command

__all__ = ["ServiceWork", "get_payload", "put_payload", "work_payload", "key_name"]


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


def key_name(index: int) -> bytes:
    return b"k:%d" % index


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

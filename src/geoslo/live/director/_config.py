"""The live binned cluster's parameters (FAST 2011 §5.7's Table, §5.5, §6.1)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from geoslo.errors import ConfigError

__all__ = ["ClusterConfig"]


@dataclass(frozen=True)
class ClusterConfig:
    """Data set, layout, calibration, copy and statistics of a live Director cluster."""

    keys: int = 10_000
    bins: int = 100  # range partitions of the key space (§5.1)
    value_bytes: int = 256  # payload size; stored values add "<version>:"
    servers: int = 4  # servers holding data at start
    replicas: int = 2  # copies of every bin (§6.1)
    read_fanout: int = 2  # gets go to this many replicas, first answer counts (§6.1)
    standbys: int = 2  # running empty servers (§5.7 Table)
    boot_delay_s: float = 5.0  # a new server serves only after this (§6: "adding a delay")
    copy_rate_bytes_per_s: float = 4e6  # specified copy rate (§5.7 Table: 4 MB/s)
    copy_batch_bytes: int = 65_536  # data per copy batch
    copy_work_ms_per_mb: float = 10.0  # the target's service time for copied data (§5.4)
    get_service_mean_ms: float = 2.0  # exponential service time per request (docs/live.md)
    put_service_mean_ms: float = 2.0  # on every replica a put goes to
    period_s: float = 20.0  # statistics period (§5.5, §5.7 Table)
    get_sample_fraction: float = 0.02  # §5.5
    put_sample_fraction: float = 0.4  # §5.5
    latency_threshold_ms: float = 100.0  # the SLO's get threshold (§6)
    get_timeout_s: float = 5.0  # a get still unanswered after this fails
    request_timeout_s: float = 5.0  # a server silent this long, with requests waiting, is down
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("keys", "bins", "value_bytes", "servers", "replicas", "read_fanout"):
            _integer(getattr(self, name), name, lowest=1)
        for name in ("standbys", "copy_batch_bytes", "seed"):
            _integer(getattr(self, name), name, lowest=0)
        for name in (
            "copy_rate_bytes_per_s",
            "get_service_mean_ms",
            "put_service_mean_ms",
            "period_s",
            "latency_threshold_ms",
            "get_timeout_s",
            "request_timeout_s",
        ):
            _number(getattr(self, name), name, positive=True)
        for name in ("boot_delay_s", "copy_work_ms_per_mb"):
            _number(getattr(self, name), name, positive=False)
        for name in ("get_sample_fraction", "put_sample_fraction"):
            value = getattr(self, name)
            _number(value, name, positive=True)
            if value > 1.0:
                raise ConfigError(name, f"must be in (0, 1], got {value!r}")
        if self.bins > self.keys:
            raise ConfigError("bins", f"must not exceed keys ({self.keys}), got {self.bins}")
        if self.replicas > self.servers:
            raise ConfigError("replicas", f"must not exceed servers ({self.servers})")
        if self.read_fanout > self.replicas:
            raise ConfigError("read_fanout", f"must not exceed replicas ({self.replicas})")
        if self.copy_batch_bytes < 1:
            raise ConfigError("copy_batch_bytes", "must be >= 1")

    @property
    def server_count(self) -> int:
        """Servers running at start: data servers and standbys."""
        return self.servers + self.standbys


def _integer(value: object, name: str, lowest: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
        raise ConfigError(name, f"must be an integer >= {lowest}, got {value!r}")


def _number(value: object, name: str, positive: bool) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(name, f"must be a finite number, got {value!r}")
    if value < 0 or (positive and value == 0):
        raise ConfigError(name, f"must be {'> 0' if positive else '>= 0'}, got {value!r}")

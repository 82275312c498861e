"""The bandwidth-sharing controller's configuration and results (Dürango et al., CDC 2016,
§IV-§V).

Three streams share one egress link: the application's replies, the replication service
(every write mirrored to the backup site) and VM images copied in bulk at fixed
intervals. Every ``interval_s`` the controller sets each stream's guaranteed minimum share
``u_i`` of the link (``u_i >= 0``, ``sum u_i <= 1``); the link is work conserving, so a
share a stream does not use goes to the others.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from geoslo.control._contract import Outcome
from geoslo.errors import ConfigError
from geoslo.models import ArrivalModel, FilterState

__all__ = [
    "STREAMS",
    "Allocation",
    "Decision",
    "Measurement",
    "Policy",
    "ReplicationConfig",
    "ReplicationObservation",
    "ReplicationState",
    "Weights",
]

STREAMS = ("application", "replication", "vm_image")
APPLICATION, REPLICATION, VM_IMAGE = 0, 1, 2


@dataclass(frozen=True)
class Weights:
    """Penalties of the cost (7): on buffer levels ``q_i``, on share moves ``r_i``, and on
    the VM image's integral state ``q_n`` (all on squares, ``mpc.py``). Defaults:
    Experiment 1 (§V-C)."""

    buffer: tuple[float, float, float] = (600.0, 250.0, 50.0)
    moves: tuple[float, float, float] = (1e6, 1e6, 1e6)
    integral: float = 1.0

    def __post_init__(self) -> None:
        for name in ("buffer", "moves"):
            values = getattr(self, name)
            if len(values) != 3 or not all(_finite(v) and v >= 0 for v in values):
                raise ConfigError(name, "must be 3 finite numbers >= 0, one per stream")
        if not (_finite(self.integral) and self.integral >= 0):
            raise ConfigError("integral", f"must be a finite number >= 0, got {self.integral!r}")


@dataclass(frozen=True)
class ReplicationConfig:
    """The link, the controller's horizon and weights, the arrival model and the VM image
    schedule. Defaults: Experiment 1 (§V-C)."""

    capacity_mbps: float = 100.0  # C
    interval_s: float = 10.0  # sampling time
    horizon: int = 30  # H_p: 5 minutes
    weights: Weights = field(default_factory=Weights)
    buffer_limits_mb: tuple[float, float, float] = (math.inf, math.inf, math.inf)  # x-bar
    arrival_model: ArrivalModel = field(default_factory=ArrivalModel)  # (4); (5) for Exp. 2
    image_mb: float = 375.0  # one VM image
    image_period_s: float = 600.0  # a copy starts every 10 minutes

    def __post_init__(self) -> None:
        for name in ("capacity_mbps", "interval_s", "image_mb", "image_period_s"):
            value = getattr(self, name)
            if not (_finite(value) and value > 0):
                raise ConfigError(name, f"must be a finite number > 0, got {value!r}")
        if isinstance(self.horizon, bool) or not isinstance(self.horizon, int):
            raise ConfigError("horizon", f"must be an integer >= 1, got {self.horizon!r}")
        if self.horizon < 1:
            raise ConfigError("horizon", f"must be an integer >= 1, got {self.horizon!r}")
        limits = self.buffer_limits_mb
        if len(limits) != 3 or not all(isinstance(v, int | float) and v > 0 for v in limits):
            raise ConfigError("buffer_limits_mb", "must be 3 numbers > 0 (inf: no limit)")

    @property
    def capacity_mb(self) -> float:
        """C: what the link sends in one interval, in MB."""
        return self.capacity_mbps * self.interval_s / 8.0


@dataclass(frozen=True)
class Measurement:
    """One interval as the link saw it (MB per stream): the buffers at its end, the data
    sent during it, and the data that arrived (equation (3) when not measured)."""

    buffers_mb: np.ndarray
    sent_mb: np.ndarray
    arrived_mb: np.ndarray


@dataclass(frozen=True)
class ReplicationObservation:
    """What a loop is handed every interval: the start of the interval to decide (s, on the
    clock the VM image schedule counts from) and the last interval's measurement."""

    now_s: float
    measurement: Measurement


@dataclass(frozen=True)
class ReplicationState:
    """What one step reads (the contract's state.json): the configuration, the time, the
    last interval's measurement, the shares in force, the arrival filters (None: start
    them at this interval's arrivals) and the image integral."""

    config: ReplicationConfig
    now_s: float
    measurement: Measurement
    shares: np.ndarray
    filters: tuple[FilterState, FilterState] | None = None
    integral_mb: float = 0.0


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class Allocation:
    """How the link is split until the next interval."""

    mode: str  # "shares" or "priority"
    shares: tuple[float, float, float] = (1 / 3, 1 / 3, 1 / 3)
    order: tuple[int, int, int] = (APPLICATION, REPLICATION, VM_IMAGE)  # for "priority"

    def __post_init__(self) -> None:
        if self.mode not in ("shares", "priority"):
            raise ConfigError("mode", f"must be 'shares' or 'priority', got {self.mode!r}")


@dataclass(frozen=True)
class Decision:
    """One interval's decision: the ``allocation`` to apply and how the decision ended
    (``outcome``: ``optimal`` when OSQP solved the MPC's QP, ``failed`` when it did not and
    the shares in force are kept, ``feasible`` for a fixed policy's rule).

    The MPC's decisions also carry its plan over the horizon (rows: intervals; columns:
    ``STREAMS``), the arrival filters after this interval's measurement and the image
    integral; a fixed policy (FIFO, STATIC, PRIO) leaves them None. ``outcome.objective``
    is the whole cost J (7) of the plan reported, buffers in units of C."""

    allocation: Allocation
    outcome: Outcome
    planned_shares: np.ndarray | None = None
    predicted_buffers_mb: np.ndarray | None = None
    predicted_arrivals_mb: np.ndarray | None = None
    filters: tuple[FilterState, FilterState] | None = None  # application, replication
    integral_mb: float | None = None  # the image integral i_vm after this interval (MB x int.)

    @property
    def shares(self) -> np.ndarray:
        """The guaranteed shares in force from now on (``allocation.mode == "shares"``)."""
        return np.asarray(self.allocation.shares, dtype=float)

    @property
    def held(self) -> bool:
        """No plan: the shares in force were kept."""
        return not self.outcome.applicable


class Policy(Protocol):
    """A bandwidth policy as an environment (the simulator, the live link) consults it
    every interval; ``name`` labels its runs."""

    name: str

    def allocate(self, measurement: Measurement, now_s: float) -> Allocation: ...

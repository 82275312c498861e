"""The SCADS Director's view of a binned key-value cluster and its actions (FAST 2011, §5).

The key space is range-partitioned into bins (§5.1); each bin has a replica set of
servers. A get goes to ``read_fanout`` of its bin's replicas (every replica while a bin
has exactly that many, §6.1) and the first answer counts; a put goes to every replica.
So a replica of bin b carries ``get_rps[b] * read_fanout / replicas(b)`` gets and all of
``put_rps[b]``: adding replicas of a hot bin spreads its gets (§6.2).

Actions (§5.3) are plain values: ``copy`` (new replicas of bins on ``target``), ``move``
(copy, then delete the source's replica), ``delete-replica``, ``add-server`` and
``remove-server``. Environments (the simulation, the live cluster) execute them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from geoslo.control import Outcome
from geoslo.errors import ConfigError

__all__ = [
    "ACTION_KINDS",
    "Action",
    "ClusterState",
    "DirectorConfig",
    "Histogram",
    "Observation",
    "Plan",
    "RunningAction",
    "ServerState",
    "Step",
    "replica_loads",
]

ACTION_KINDS = ("add-server", "copy", "move", "delete-replica", "remove-server")


@dataclass(frozen=True)
class DirectorConfig:
    """The controller's parameters, defaults from the paper's Table (§5.7) and §6.1."""

    period_s: float = 20.0  # execution period
    alpha_up: float = 0.9  # hysteresis smoothing (§5.5)
    alpha_down: float = 0.1
    standbys: int = 2  # running empty servers kept ready (§5.3)
    overprovisioning: float = 0.1  # the workload looks (1 + this) times larger (§5.5)
    copy_rate_bytes_per_s: float = 4e6  # specified copy rate, 4 MB/s
    replicas: int = 2  # at least two copies of every bin (§6.1)
    read_fanout: int = 2  # gets go to this many replicas; first answer counts (§3.3)
    max_action_s: float = 20.0  # split copies predicted to take longer (§5.3)
    cancel_factor: float = 3.0  # cancel an action running this many times its prediction
    coalesce_below: float = 0.9  # underloaded below this fraction of the boundary (ours)
    charge_interval_s: float | None = 3600.0  # release a server only as its paid hour ends
    max_servers_added: int = 100  # ours: servers one plan may add (a period's growth)
    max_servers: int = 10_000  # ours: servers leased after a plan, at most

    def __post_init__(self) -> None:
        for name in ("period_s", "copy_rate_bytes_per_s", "max_action_s"):
            _positive(getattr(self, name), name)
        for name in ("alpha_up", "alpha_down", "coalesce_below"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and 0.0 < value <= 1.0):
                raise ConfigError(name, f"must be in (0, 1], got {value!r}")
        if not (isinstance(self.overprovisioning, int | float) and self.overprovisioning >= 0):
            raise ConfigError("overprovisioning", f"must be >= 0, got {self.overprovisioning!r}")
        if self.charge_interval_s is not None:
            _positive(self.charge_interval_s, "charge_interval_s")
        if not self.cancel_factor >= 1.0:
            raise ConfigError("cancel_factor", f"must be >= 1, got {self.cancel_factor!r}")
        for name in ("standbys", "replicas", "read_fanout"):
            value = getattr(self, name)
            lowest = 0 if name == "standbys" else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
                raise ConfigError(name, f"must be an integer >= {lowest}, got {value!r}")
        if self.read_fanout > self.replicas:
            raise ConfigError("read_fanout", "must not exceed replicas")
        for name, lowest, highest in _SERVER_BOUNDS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(name, f"must be an integer, got {value!r}")
            if not lowest <= value <= highest:
                raise ConfigError(name, f"must be in [{lowest}, {highest}], got {value!r}")


# Ranges of the bounds on a plan's size (ours): whatever they allow is decided in bounded
# time, since a plan adds at most ``max_servers_added`` servers.
_SERVER_BOUNDS = (("max_servers_added", 0, 10_000), ("max_servers", 1, 100_000))


@dataclass(frozen=True)
class ServerState:
    """One leased server: the bins it holds; ``ready`` is False while it boots."""

    name: str
    bins: tuple[int, ...] = ()
    ready: bool = True


@dataclass(frozen=True)
class ClusterState:
    """Servers with their bins and the per-bin workload the controller sees (§5.5)."""

    servers: tuple[ServerState, ...]
    get_rps: np.ndarray  # per bin
    put_rps: np.ndarray  # per bin
    bin_bytes: np.ndarray  # per bin

    @property
    def bins(self) -> int:
        return len(self.get_rps)

    def replica_counts(self) -> np.ndarray:
        counts = np.zeros(self.bins, dtype=np.int64)
        for server in self.servers:
            counts[list(server.bins)] += 1
        return counts


def replica_loads(
    get_rps: np.ndarray, put_rps: np.ndarray, replicas: np.ndarray, read_fanout: int
) -> tuple[np.ndarray, np.ndarray]:
    """(get, put) req/s that one replica of each bin serves (module docstring)."""
    replicas = np.maximum(np.asarray(replicas, dtype=float), 1.0)
    share = np.minimum(read_fanout, replicas) / replicas
    return np.asarray(get_rps, dtype=float) * share, np.asarray(put_rps, dtype=float)


@dataclass(frozen=True)
class Action:
    """One step for the cluster. ``bins`` for copy/move/delete-replica; ``source`` and
    ``target`` for copy/move; ``server`` for delete-replica/add-server/remove-server."""

    kind: str
    bins: tuple[int, ...] = ()
    source: str | None = None
    target: str | None = None
    server: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in ACTION_KINDS:
            raise ConfigError("kind", f"must be one of {', '.join(ACTION_KINDS)}")

    @property
    def copies_data(self) -> bool:
        return self.kind in ("copy", "move")

    @property
    def servers(self) -> tuple[str, ...]:
        """Every server the action touches."""
        names = (self.source, self.target, self.server)
        return tuple(name for name in names if name is not None)

    def to_dict(self) -> dict:
        out: dict = {"kind": self.kind}
        if self.bins:
            out["bins"] = list(self.bins)
        for name in ("source", "target", "server"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out


@dataclass(frozen=True)
class Plan:
    """The controller's answer: ordered actions and the predicted load of every server
    after them, as the model's violation probability and (get, put) req/s.
    ``limited_by`` names the config field (``max_servers_added`` or ``max_servers``) that
    kept the plan from adding a server it needed, or is None: a limited plan is the best
    the bound allows, and some servers may stay over the SLO.

    ``outcome`` (the one status vocabulary, ``geoslo.control.Outcome``): ``feasible`` when
    every server's predicted violation probability is below the model's threshold and
    every bin has a replica (the greedy search of §5.3 proves no optimum), else
    ``infeasible`` (the best effort found). ``solver_status`` is ``greedy``, or the config
    field that limited the plan (``max_servers_added``, ``max_servers``); ``objective`` is
    the number of servers leased after the plan (standbys and booting ones included)."""

    actions: tuple[Action, ...]
    servers: tuple[ServerState, ...]  # the layout after the actions
    get_rps: dict[str, float] = field(default_factory=dict)  # per server, after
    put_rps: dict[str, float] = field(default_factory=dict)
    violation_probability: dict[str, float] = field(default_factory=dict)
    limited_by: str | None = None
    moved_bytes: float = 0.0  # data the copies and moves carry
    outcome: Outcome = Outcome("feasible", "greedy")

    def count(self, kind: str) -> int:
        return sum(1 for action in self.actions if action.kind == kind)


@dataclass(frozen=True)
class RunningAction:
    """An action in progress: when it started and how long the copy model said it takes."""

    action: Action
    started_s: float
    predicted_s: float


@dataclass(frozen=True)
class Histogram:
    """One statistics period's per-bin workload, as req/s (§5.5's raw histogram)."""

    get_rps: np.ndarray
    put_rps: np.ndarray


@dataclass(frozen=True)
class Observation:
    """What the loop reads at one tick: the time, the servers (their bins, booted or not),
    the actions still running and the histograms of the periods that ended since the last
    tick (none most ticks, §5.5). ``measurements`` are the environment's own figures
    (p99, servers, ...) for logs and gauges; the controller does not read them."""

    now_s: float
    servers: tuple[ServerState, ...]
    running: tuple[RunningAction, ...] = ()
    histograms: tuple[Histogram, ...] = ()
    measurements: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Step:
    """What the control loop asks of the environment at one tick: actions to start and to
    cancel. ``outcome`` is that of the latest decision, the plan the actions come from
    (``no-decision`` before the first); ``decided`` is True on the tick that decision was
    made (count decisions by it: one decision's actions may start over several ticks)."""

    start: tuple[RunningAction, ...] = ()
    cancel: tuple[Action, ...] = ()
    outcome: Outcome = Outcome("feasible", "no-decision")
    decided: bool = False


def _positive(value: object, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(name, f"must be a number, got {value!r}")
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(name, f"must be finite and > 0, got {value!r}")

"""The live link as an environment handle (Dürango et al., CDC 2016, §III-§IV): the
controller's loop observes the real link's backlogs and sent bytes and puts its decision
in force as HTB classes (``geoslo run``'s testbed for the replication MPC).

``start()`` brings up the two namespaces, the HTB link and the three TCP streams
(``EgressLink``; root only) and a generator thread that feeds the streams: the
application's and the replication service's data at their rates (levels held
``level_period_s`` each, repeating), in small ticks, and one VM image of ``image_mb`` every
``image_period_s`` from the first period on (the backup holds the image of time 0), as the
MPC's schedule assumes. ``observe()`` returns the interval's measurement with the time since
``start()``; ``apply(decision)`` sets the shares (or PRIO's strict order); ``close()`` stops
the generator and the streams and deletes the namespaces.
"""

from __future__ import annotations

import asyncio
import logging
import math
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from geoslo.control.replication.types import (
    Allocation,
    Decision,
    Measurement,
    ReplicationObservation,
)
from geoslo.errors import ConfigError, TestbedError
from geoslo.live._netns import cannot_run_reason
from geoslo.live.replication._link import DEFAULT_PORTS, EgressLink

__all__ = ["LinkSpec", "ReplicationTestbedEnvironment", "cumulative_mb", "images_started"]

MB = 1e6  # bytes; the controller counts in MB (10^6 bytes) and Mbit/s
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LinkSpec:
    """The live link and what flows into it. The defaults are a small form of Experiment 1
    (§V-C) that fits this machine: a 20 Mbit/s link (``docs/replication-live.md``), the
    application alternating between overloading its share and not, and a 4 MB image every
    8 s."""

    capacity_mbps: float = 20.0
    application_mbps: tuple[float, ...] = (15.2, 6.4)  # levels, each held level_period_s
    replication_mbps: tuple[float, ...] = (7.2,)
    level_period_s: float = 8.0
    image_mb: float = 4.0
    image_period_s: float = 8.0
    tick_s: float = 0.05  # how often the generator feeds the streams
    namespace_prefix: str = "geoslo"
    ports: tuple[int, int, int] = DEFAULT_PORTS
    state_dir: Path | None = None  # None: a new temporary folder
    initial_shares: tuple[float, float, float] = (1 / 3, 1 / 3, 1 / 3)  # until the first apply

    def __post_init__(self) -> None:
        for name in ("capacity_mbps", "level_period_s", "image_mb", "image_period_s", "tick_s"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ConfigError(name, f"must be a finite number > 0, got {value!r}")
        for name in ("application_mbps", "replication_mbps"):
            levels = getattr(self, name)
            if not levels or not all(math.isfinite(v) and v >= 0 for v in levels):
                raise ConfigError(name, "must be one or more finite rates >= 0 (Mbit/s)")


def cumulative_mb(levels_mbps, level_period_s: float, t_s: float) -> float:
    """MB arrived from time 0 to ``t_s`` at rates that hold ``level_period_s`` each, in
    turn, repeating."""
    levels = np.asarray(levels_mbps, float) / 8.0  # MB/s
    cycle_s = level_period_s * len(levels)
    cycles, rest_s = divmod(max(t_s, 0.0), cycle_s)
    full, part = divmod(rest_s, level_period_s)
    full = int(full)
    done = cycles * levels.sum() * level_period_s + levels[:full].sum() * level_period_s
    return float(done + (levels[full] * part if full < len(levels) else 0.0))


def images_started(t_s: float, image_period_s: float) -> int:
    """VM images that have arrived by ``t_s``: one at each multiple of the period from the
    first (the backup holds the image of time 0)."""
    return int(math.floor(max(t_s, 0.0) / image_period_s + 1e-9))


def as_allocation(plan: Decision | Allocation) -> Allocation:
    if isinstance(plan, Decision):
        return plan.allocation
    if isinstance(plan, Allocation):
        return plan
    raise TypeError(f"cannot apply {type(plan).__name__} to the link: a Decision or Allocation")


class ReplicationTestbedEnvironment:
    """The real link, observed and shaped in real time (``simulated = False``)."""

    simulated = False

    def __init__(self, spec: LinkSpec | None = None) -> None:
        self.spec = spec or LinkSpec()
        self.link: EgressLink | None = None
        self.allocation = Allocation("shares", self.spec.initial_shares)
        self._started_s = 0.0
        self._fed_mb = np.zeros(3)
        self._feed_lock = threading.Lock()
        self._stop = threading.Event()
        self._generator: threading.Thread | None = None

    # --- the contract ---------------------------------------------------------------------
    async def start(self) -> None:
        """The namespaces, HTB and streams, then the generator. Without root (or without
        ``tc``, namespaces or HTB) a TestbedError says why."""
        if self.link is not None:
            raise TestbedError("the replication testbed is already started")
        reason = await asyncio.to_thread(cannot_run_reason)
        if reason:
            raise TestbedError(f"the replication testbed cannot start here: {reason}")
        self.link = await asyncio.to_thread(self._bring_up)
        self._started_s = time.monotonic()
        self.link.measure()  # intervals count from here
        self._stop.clear()
        self._generator = threading.Thread(target=self._generate, daemon=True)
        self._generator.start()

    async def observe(self) -> ReplicationObservation:
        """The interval since the last observation: backlogs now, MB sent and arrived."""
        link = self._running()
        now_s = self.elapsed_s()
        self._feed(now_s)
        m = link.measure()
        measurement = Measurement(m.backlog_bytes / MB, m.sent_bytes / MB, m.arrived_bytes / MB)
        return ReplicationObservation(now_s, measurement)

    async def apply(self, plan: Decision | Allocation) -> None:
        """Put the plan's allocation in force on the link's HTB classes."""
        allocation = as_allocation(plan)
        link = self._running()
        if allocation.mode == "priority":
            await asyncio.to_thread(link.set_priority, allocation.order)
        else:
            await asyncio.to_thread(link.set_shares, allocation.shares)
        self.allocation = allocation

    async def close(self) -> None:
        """Stop the generator and the streams, delete the namespaces (idempotent)."""
        self._stop.set()
        if self._generator is not None:
            await asyncio.to_thread(self._generator.join)
            self._generator = None
        if self.link is not None:
            link, self.link = self.link, None
            await asyncio.to_thread(link.down)
            if link.threads_alive():
                _log.warning(
                    "replication testbed: %d stream threads still running", link.threads_alive()
                )

    # --- parts ----------------------------------------------------------------------------
    def elapsed_s(self) -> float:
        """Seconds since ``start()`` (the MPC's clock: images at multiples of the period)."""
        return time.monotonic() - self._started_s

    def _bring_up(self) -> EgressLink:
        spec = self.spec
        state_dir = spec.state_dir or Path(tempfile.mkdtemp(prefix="geoslo-replication-"))
        return EgressLink.up(
            state_dir,
            capacity_bps=spec.capacity_mbps * 1e6,
            shares=spec.initial_shares,
            ports=spec.ports,
            prefix=spec.namespace_prefix,
        )

    def _running(self) -> EgressLink:
        if self.link is None:
            raise TestbedError("the replication testbed is not started (call start() first)")
        return self.link

    def _generate(self) -> None:
        while not self._stop.wait(self.spec.tick_s):
            try:
                self._feed(self.elapsed_s())
            except Exception:  # the streams are closing
                _log.exception("replication testbed: the generator stopped")
                return

    def _feed(self, t_s: float) -> None:
        """Add what has arrived by ``t_s`` and was not yet added."""
        spec = self.spec
        target = np.array(
            [
                cumulative_mb(spec.application_mbps, spec.level_period_s, t_s),
                cumulative_mb(spec.replication_mbps, spec.level_period_s, t_s),
                images_started(t_s, spec.image_period_s) * spec.image_mb,
            ]
        )
        with self._feed_lock:
            link = self.link
            if link is None:
                return
            new_bytes = np.floor((target - self._fed_mb) * MB)
            new_bytes = np.maximum(new_bytes, 0.0)
            link.add_arrivals(new_bytes)
            self._fed_mb = self._fed_mb + new_bytes / MB

"""The simulated egress link as an environment handle (``geoslo run``'s simulator for the
replication MPC, Dürango et al., CDC 2016 §V): each ``observe()`` advances the link by one
interval under the allocation in force and reports what the controller measures;
``apply(plan)`` puts new shares in force."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from geoslo.control.replication.types import Allocation, ReplicationObservation
from geoslo.errors import ConfigError
from geoslo.sim.replication._link import LinkSettings, LinkStepper

__all__ = ["ReplicationSimEnvironment", "as_allocation"]


def as_allocation(plan: object) -> Allocation:
    """The link split a plan asks for: an :class:`Allocation`, a plan carrying one
    (``plan.allocation``), or a plan of guaranteed shares (``plan.shares``, a Decision)."""
    if isinstance(plan, Allocation):
        return plan
    allocation = getattr(plan, "allocation", None)
    if isinstance(allocation, Allocation):
        return allocation
    shares = getattr(plan, "shares", None)
    if shares is not None:
        return Allocation("shares", tuple(float(s) for s in np.asarray(shares, float)))
    raise TypeError(f"cannot apply {type(plan).__name__} to the link: no allocation or shares")


class ReplicationSimEnvironment:
    """The link of ``simulate_link`` driven from outside, one interval per ``observe()``.

    The application's and the replication service's mean rates (Mbps) are levels, each
    held ``level_period_s`` in turn and repeating; messages arrive as Poisson counts of
    ``message_mb`` per step (§V-C). The first interval runs with equal shares, as in
    ``simulate_link``. An observation's ``now_s`` is the end of the interval observed,
    the start of the one to decide."""

    simulated = True

    def __init__(
        self,
        settings: LinkSettings,
        application_mbps: Sequence[float],
        replication_mbps: Sequence[float],
        level_period_s: float,
    ) -> None:
        for name, levels in (
            ("application_mbps", application_mbps),
            ("replication_mbps", replication_mbps),
        ):
            if len(levels) == 0 or min(levels) < 0:
                raise ConfigError(name, "must be one or more rates >= 0 (Mbps)")
        if not level_period_s > 0:
            raise ConfigError("level_period_s", f"must be > 0, got {level_period_s!r}")
        self.settings = settings
        self._levels_mbps = (
            np.asarray(application_mbps, float),
            np.asarray(replication_mbps, float),
        )
        self._level_period_s = float(level_period_s)
        self._rng = np.random.default_rng(settings.seed)
        self._link = LinkStepper(settings)
        self._allocation = Allocation("shares")
        self.intervals = 0

    @property
    def allocation(self) -> Allocation:
        """The split of the link in force."""
        return self._allocation

    @property
    def time_s(self) -> float:
        return self._link.time_s

    @property
    def buffers_mb(self) -> np.ndarray:
        return self._link.backlog_mb.copy()

    async def start(self) -> None:
        """Nothing to start: the link lives in this process."""

    async def observe(self) -> ReplicationObservation:
        return self.advance()

    async def apply(self, plan: object) -> None:
        self._allocation = as_allocation(plan)

    async def close(self) -> None:
        """Nothing to stop."""

    def advance(self) -> ReplicationObservation:
        """One interval of arrivals and sending under the allocation in force."""
        measurement = self._link.advance(self._messages_mb(), self._allocation)
        self.intervals += 1
        return ReplicationObservation(self._link.time_s, measurement)

    def _messages_mb(self) -> np.ndarray:
        """MB of application and replication data arriving in each step of the interval:
        Poisson counts of messages at the levels in force (§V-C)."""
        settings = self.settings
        steps = self._link.steps_per_interval
        start_s = self._link.time_s + np.arange(steps) * settings.step_s
        columns = []
        for levels in self._levels_mbps:
            index = (start_s // self._level_period_s).astype(int) % len(levels)
            mean_messages = levels[index] / 8.0 * settings.step_s / settings.message_mb
            columns.append(self._rng.poisson(mean_messages) * settings.message_mb)
        return np.column_stack(columns)

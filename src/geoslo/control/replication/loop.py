"""The controller across intervals (Dürango et al., CDC 2016, §IV): the state kept between
steps (the arrival filters, the shares in force, the image integral and the warm QP) around
the pure ``decide``. A solve that fails changes nothing: the shares in force stay, with a
warning in the log and ``Decision.held`` set.

A fixed policy (FIFO, STATIC, PRIO; ``baselines.py``) runs in the same shape through
:class:`PolicyLoop`, so that an environment, the runtime and its metrics treat every
policy alike."""

from __future__ import annotations

import logging
import time

import numpy as np

from geoslo.control._contract import Outcome
from geoslo.control.replication.decide import decide
from geoslo.control.replication.mpc import ShareMpc
from geoslo.control.replication.types import (
    Decision,
    Policy,
    ReplicationConfig,
    ReplicationObservation,
    ReplicationState,
)
from geoslo.models import FilterState

__all__ = ["ReplicationController", "PolicyLoop", "EQUAL_SHARES"]

EQUAL_SHARES = np.full(3, 1.0 / 3.0)
_log = logging.getLogger(__name__)


class ReplicationController:
    """The MPC's loop on one link: ``step(observation) -> Decision`` every interval."""

    name = "MPC"

    def __init__(
        self,
        config: ReplicationConfig,
        filters: tuple[FilterState, FilterState] | None = None,
        shares: np.ndarray | None = None,
        integral_mb: float = 0.0,
    ) -> None:
        self.config = config
        model = config.arrival_model
        self.filters = filters or (model.initial(), model.initial())
        self.shares = EQUAL_SHARES.copy() if shares is None else np.asarray(shares, float)
        self.integral_mb = integral_mb
        self._mpc = ShareMpc(config)

    def step(self, observation: ReplicationObservation) -> Decision:
        """The shares for the interval that starts at ``observation.now_s``."""
        state = ReplicationState(
            self.config,
            observation.now_s,
            observation.measurement,
            self.shares,
            self.filters,
            self.integral_mb,
        )
        decision = decide(state, self._mpc)
        if decision.held:
            _log.warning(
                "replication MPC at t=%.0f s: %s (OSQP: %s); keeping the shares in force %s",
                observation.now_s,
                decision.outcome.status,
                decision.outcome.solver_status,
                np.round(self.shares, 4).tolist(),
            )
        self.filters = decision.filters
        self.shares = decision.shares
        self.integral_mb = decision.integral_mb
        return decision


class PolicyLoop:
    """A fixed policy as a loop: its allocation every interval, ``feasible`` (a rule that
    keeps every constraint, no optimality claimed), the policy's name as the solver's."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.name = policy.name

    def step(self, observation: ReplicationObservation) -> Decision:
        started = time.perf_counter()
        allocation = self.policy.allocate(observation.measurement, observation.now_s)
        decide_ms = (time.perf_counter() - started) * 1e3
        return Decision(allocation, Outcome("feasible", self.policy.name, None, decide_ms))

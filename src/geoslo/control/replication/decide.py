"""One controller step from a state (the ``geoslo replication decide`` contract): the
Kalman filters fold in the interval's arrivals, the MPC plans the horizon (§IV)."""

from __future__ import annotations

from geoslo.control.replication.loop import ReplicationController
from geoslo.control.replication.types import Decision, ReplicationState

__all__ = ["decide", "SOLVE_FAILED_EXIT"]

SOLVE_FAILED_EXIT = 3  # the CLI's exit status when the solve failed (docs/replication.md)


def decide(state: ReplicationState) -> Decision:
    """The shares for the interval that starts at ``state.now_s``; when the solve fails
    (``Decision.held``), the shares in ``state.shares``."""
    filters = state.filters
    if filters is None:
        model = state.config.arrival_model
        filters = tuple(model.initial(float(state.measurement.arrived_mb[i])) for i in (0, 1))
    controller = ReplicationController(state.config, filters, state.shares, state.integral_mb)
    return controller.step(state.measurement, state.now_s)

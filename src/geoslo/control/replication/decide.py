"""One step of the MPC from a state (Dürango et al., CDC 2016, §IV; the ``geoslo replication
decide`` contract): the Kalman filters fold in the interval's arrivals, the horizon's
arrivals are predicted (VM images from their schedule), the image integral moves on, and
the QP of (7)-(8) is solved. No clock but the decision's own timing, no I/O: the loop
(``loop.py``) keeps the state between intervals and logs."""

from __future__ import annotations

import time

import numpy as np

from geoslo.control._contract import Outcome
from geoslo.control.replication.mpc import ShareMpc
from geoslo.control.replication.types import (
    Allocation,
    Decision,
    Measurement,
    ReplicationConfig,
    ReplicationState,
)
from geoslo.errors import ConfigError
from geoslo.models import FilterState, image_arrivals, kalman_step, predicted_arrivals

__all__ = ["decide", "next_integral", "fold_arrivals", "horizon_arrivals", "SOLVE_FAILED_EXIT"]

SOLVE_FAILED_EXIT = 3  # the CLI's exit status when the solve failed (docs/replication.md)


def next_integral(integral_mb: float, image_backlog_mb: float) -> float:
    """The image integral after one more interval: it adds the backlog and starts again
    from zero when the transfers have finished (the VM buffer is empty)."""
    return integral_mb + image_backlog_mb if image_backlog_mb > 1e-9 else 0.0


def fold_arrivals(
    config: ReplicationConfig,
    filters: tuple[FilterState, FilterState] | None,
    measurement: Measurement,
) -> tuple[FilterState, FilterState]:
    """The application's and replication's filters after this interval's arrivals (None:
    start them at these arrivals)."""
    model = config.arrival_model
    arrived = [float(measurement.arrived_mb[i]) for i in (0, 1)]
    if filters is None:
        filters = (model.initial(arrived[0]), model.initial(arrived[1]))
    return kalman_step(model, filters[0], arrived[0]), kalman_step(model, filters[1], arrived[1])


def horizon_arrivals(
    config: ReplicationConfig, filters: tuple[FilterState, FilterState], now_s: float
) -> np.ndarray:
    """Predicted MB arriving per interval of the horizon (H x 3): the filters' predictions
    for the application and replication, the image schedule for the VM stream."""
    model, h = config.arrival_model, config.horizon
    return np.column_stack(
        [
            predicted_arrivals(model, filters[0], h),
            predicted_arrivals(model, filters[1], h),
            image_arrivals(now_s, config.interval_s, h, config.image_mb, config.image_period_s),
        ]
    )


def decide(state: ReplicationState, solver: ShareMpc | None = None) -> Decision:
    """The shares for the interval that starts at ``state.now_s``; when the solve fails
    (``outcome.status == "failed"``), the shares in ``state.shares``, kept.

    ``solver`` is the configuration's QP kept warm by a loop (None: a new one); it must have
    been built for ``state.config``."""
    started = time.perf_counter()
    config = state.config
    if solver is None:
        solver = ShareMpc(config)
    elif solver.config != config:
        raise ConfigError("solver", "was built for another configuration than the state's")
    filters = fold_arrivals(config, state.filters, state.measurement)
    arrivals = horizon_arrivals(config, filters, state.now_s)
    integral_mb = next_integral(state.integral_mb, float(state.measurement.buffers_mb[2]))
    shares_in_force = np.asarray(state.shares, dtype=float)
    plan = solver.solve(state.measurement.buffers_mb, arrivals, shares_in_force, integral_mb)
    shares = shares_in_force if plan.held else plan.shares[0]
    outcome = Outcome(
        plan.outcome.status,
        plan.outcome.solver_status,
        plan.outcome.objective,
        (time.perf_counter() - started) * 1e3,
    )
    return Decision(
        allocation=Allocation("shares", tuple(float(s) for s in shares)),
        outcome=outcome,
        planned_shares=plan.shares,
        predicted_buffers_mb=plan.buffers_mb,
        predicted_arrivals_mb=arrivals,
        filters=filters,
        integral_mb=integral_mb,
    )

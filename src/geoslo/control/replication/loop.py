"""The controller across intervals (Dürango et al., CDC 2016, §IV): each interval, fold
the measured arrivals into the Kalman filters, predict the horizon's arrivals (VM images
from their schedule), solve the MPC and apply its first shares. A solve that fails
(status other than ``optimal``) changes nothing: the shares in force stay, with a warning
in the log and ``Decision.held`` set."""

from __future__ import annotations

import logging

import numpy as np

from geoslo.control.replication.mpc import ShareMpc
from geoslo.control.replication.types import Decision, Measurement, ReplicationConfig
from geoslo.models import FilterState, image_arrivals, kalman_step, predicted_arrivals

__all__ = ["ReplicationController", "EQUAL_SHARES", "next_integral"]

EQUAL_SHARES = np.full(3, 1.0 / 3.0)
_log = logging.getLogger(__name__)


def next_integral(integral_mb: float, image_backlog_mb: float) -> float:
    """The image integral after one more interval: it adds the backlog and starts again
    from zero when the transfers have finished (the VM buffer is empty)."""
    return integral_mb + image_backlog_mb if image_backlog_mb > 1e-9 else 0.0


class ReplicationController:
    """Filters, shares in force and the warm QP of one link."""

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

    def step(self, measurement: Measurement, now_s: float) -> Decision:
        """The shares for the interval that starts at ``now_s``."""
        config = self.config
        model = config.arrival_model
        self.filters = tuple(
            kalman_step(model, f, float(measurement.arrived_mb[i]))
            for i, f in enumerate(self.filters)
        )
        arrivals = np.column_stack(
            [
                predicted_arrivals(model, self.filters[0], config.horizon),
                predicted_arrivals(model, self.filters[1], config.horizon),
                image_arrivals(
                    now_s, config.interval_s, config.horizon, config.image_mb, config.image_period_s
                ),
            ]
        )
        self.integral_mb = next_integral(self.integral_mb, float(measurement.buffers_mb[2]))
        plan = self._mpc.solve(measurement.buffers_mb, arrivals, self.shares, self.integral_mb)
        if plan.held:
            _log.warning(
                "replication MPC at t=%.0f s: %s (OSQP: %s); keeping the shares in force %s",
                now_s,
                plan.status,
                plan.solver_status,
                np.round(self.shares, 4).tolist(),
            )
        else:
            self.shares = plan.shares[0].copy()
        return Decision(
            shares=self.shares.copy(),
            planned_shares=plan.shares,
            predicted_buffers_mb=plan.buffers_mb,
            predicted_arrivals_mb=arrivals,
            filters=self.filters,
            integral_mb=self.integral_mb,
            status=plan.status,
            solver_status=plan.solver_status,
            objective=plan.objective,
            solve_ms=plan.solve_ms,
        )

"""The MPC of (7)-(8) (Dürango et al., CDC 2016, §IV) as a sparse QP solved by OSQP.

**Units.** Shares ``u`` are fractions of the link; buffers ``x``, the image integral
``i_vm`` and the slacks are counted in intervals of the link's capacity C (MB / C, so
``x = 2`` is two intervals of a full link). The cost (7) is taken in these units: with the
paper's weights (§V-C: ``q`` of 50-600, ``r = 1e6``) a share move of 0.1 then costs as much
as about 4 intervals of application backlog, so ``r`` smooths the shares as the paper asks
("to avoid incurring into the effect of the dynamics of the TCP window"). Counted in MB,
the buffer terms are C^2 (15,625 at 100 Mbps and 10 s) times larger and ``r`` is inert.

Variables over the horizon ``j = 0..H-1``: the shares ``u_j`` (3), the buffers
``x_{j+1}`` (3) and, when buffers have limits, slacks ``s_{j+1}`` (3) that let a buffer
pass its limit at a steep price, so that the problem stays feasible under overload.

* dynamics (1) with the disturbance predicted by the arrival models:
  ``x_{j+1} = x_j + lambda_j / C - u_j``;
* ``0 <= x_{j+1}``, ``x_{j+1} - s_{j+1} <= xbar / C``, ``s >= 0``;
* ``u_j >= 0``, ``sum_i u_{i,j} <= 1``;
* the integral state of the image backlog, ``i_vm(j+1) = i_vm(j) + x_vm(j+1)``, starting
  from the controller's ``i_vm`` (``loop.py`` resets it when an image transfer finishes).
  It is a sum of buffers, so its cost is written on them (a dense H x H block and a
  linear term in ``i_vm(0)``) rather than as a variable: a variable of its size (hundreds
  of C) loosened OSQP's relative tolerance on everything else;
* cost J: ``q_i x_i^2``, ``r_i (u_{i,j} - u_{i,j-1})^2`` and ``q_n i_vm^2`` summed over
  the horizon, plus the slacks' penalty (not part of J): ``SLACK_LINEAR`` per C of excess,
  an exact penalty that keeps a limit as a hard one whenever that costs less, and a small
  quadratic term ``SLACK_WEIGHT`` that spreads an unavoidable excess.

Two readings of the paper are ours. As printed, (6)'s ``Z`` makes the integral *fall*
while image data waits, the opposite of what the text asks of it; we integrate the
backlog. And (7) prints ``q_n i_vm`` without a square: a linear penalty has a constant
marginal cost that never grows however long an image waits, and with the paper's weights
(``q_n = 1`` against ``q_i`` of 50-600 on squared buffers) it changes nothing. We use
the quadratic penalty of every other state, ``x' Q x`` with ``Q = diag(q, q_n)``, which
makes the pressure to finish an image grow the longer it waits: an integral action.

The matrices are built once per configuration; each step updates only the right-hand
sides and the linear cost, and OSQP starts from the previous plan shifted one interval.
A solve that does not reach OSQP's ``solved`` is no plan: the shares in force are kept
(``outcome.status`` is ``failed``; ``outcome.solver_status`` gives OSQP's own words).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import osqp
import scipy.sparse as sp
from osqp.interface import SolverStatus

from geoslo.control._contract import Outcome
from geoslo.control.replication.types import ReplicationConfig

__all__ = ["ShareMpc", "MpcSolution", "plan_cost"]

_STREAMS = 3
SLACK_WEIGHT = 10.0  # per (slack / C)^2, times the largest buffer weight
SLACK_LINEAR = 1e3  # per slack / C, times the largest buffer weight: an exact penalty

OSQP_SETTINGS = {
    "verbose": False,
    "warm_starting": True,
    "polishing": True,  # the active set's exact solution once ADMM has found it
    "polish_refine_iter": 10,
    "rho": 0.1,  # ADMM's first step size (OSQP's default), adapted as it goes
    "adaptive_rho": True,
    # every 25 iterations, not OSQP's default (0: an interval from the measured setup
    # time), which made a solve's path depend on the machine's load: one degenerate plan
    # (a byte of backlog beside an empty link) ended "solved inaccurate" on a busy machine
    "adaptive_rho_interval": 25,
    "eps_abs": 1e-7,  # shares to 1e-7 of the link, buffers to 1e-7 of C
    "eps_rel": 1e-7,
    "eps_prim_inf": 1e-7,
    "eps_dual_inf": 1e-7,
    "max_iter": 100_000,  # ~0.4 s here at worst; near-degenerate plans took 23,000
}
# ADMM's first step size when a solve ends without a solution: one cold re-solve from 0.01
# (the setting above). A plan with a whole link's backlog beside a 2e-5 MB arrival ended
# "solved inaccurate" after 100,000 iterations at 0.1 and solved in 300 at 0.01; of 301
# random plans 1 failed at 0.1, none at 0.01 (tests/unit/test_replication_control.py).
RETRY_RHO = 0.01
# Retried: "solved inaccurate", and the iteration limit (a fresh clone's live loop had one
# plan stop there at t = 8 s); a retried decision may take twice the longest solve (the
# largest accepted state: 22 s, 44 s retried, on this machine at load 8)
_RETRIED = (SolverStatus.OSQP_SOLVED_INACCURATE, SolverStatus.OSQP_MAX_ITER_REACHED)


@dataclass(frozen=True)
class MpcSolution:
    """Planned shares and predicted buffers (MB), rows per interval of the horizon, and how
    the solve ended: ``optimal`` when OSQP solved the QP, else ``failed`` and the plan holds
    the shares in force (``held``); the objective is J (7) of the plan reported (buffers in
    units of C) and ``decide_ms`` the solve's time."""

    shares: np.ndarray
    buffers_mb: np.ndarray
    outcome: Outcome

    @property
    def held(self) -> bool:
        return not self.outcome.applicable


def plan_cost(
    config: ReplicationConfig,
    shares: np.ndarray,
    buffers_mb: np.ndarray,
    previous_shares: np.ndarray,
    integral_mb: float,
) -> float:
    """J of (7) for a plan (H x 3 shares and buffers), buffers and the integral in units of
    C, the first move counted from ``previous_shares``: the whole cost, constant included."""
    c, w = config.capacity_mb, config.weights
    x = np.asarray(buffers_mb, float) / c
    moves = np.diff(np.vstack([previous_shares, shares]), axis=0)
    integral = integral_mb / c + np.cumsum(x[:, 2])
    return float(
        np.sum(np.asarray(w.buffer) * x**2)
        + np.sum(np.asarray(w.moves) * moves**2)
        + w.integral * np.sum(integral**2)
    )


class ShareMpc:
    """One configuration's QP, kept between steps for warm starts."""

    def __init__(self, config: ReplicationConfig) -> None:
        self.config = config
        h = config.horizon
        self._h = h
        self._slacks = bool(np.any(np.isfinite(config.buffer_limits_mb)))  # only with limits
        self._n = (2 + (1 if self._slacks else 0)) * _STREAMS * h
        self._blocks = [(0, _STREAMS), (_STREAMS * h, _STREAMS)]
        if self._slacks:
            self._blocks.append((2 * _STREAMS * h, _STREAMS))
        weights = config.weights
        self._scale = max(*weights.buffer, *weights.moves, weights.integral, 1e-12)
        self._p = self._cost_matrix()
        self._a, self._lower, self._upper = self._constraints()
        self._rho = OSQP_SETTINGS["rho"]
        self._solver = osqp.OSQP()
        self._solver.setup(
            sp.triu(self._p, format="csc"),
            np.zeros(self._n),
            self._a,
            self._lower,
            self._upper,
            **OSQP_SETTINGS,
        )

    # --- indices of the variables ----------------------------------------------------------
    def _u(self, j: int, i: int) -> int:
        return _STREAMS * j + i

    def _x(self, j: int, i: int) -> int:  # x_{j+1}
        return _STREAMS * (self._h + j) + i

    def _s(self, j: int, i: int) -> int:
        return 2 * _STREAMS * self._h + _STREAMS * j + i

    # --- the problem -----------------------------------------------------------------------
    def _cost_matrix(self) -> sp.csc_matrix:
        """``1/2 z' P z`` of J (7) in units of C, plus the slacks (divided by ``_scale``)."""
        h = self._h
        weights = self.config.weights
        slack = SLACK_WEIGHT * max(max(weights.buffer), 1e-12)
        rows, cols, values = [], [], []

        def add(r: int, col: int, v: float) -> None:
            rows.append(r)
            cols.append(col)
            values.append(v / self._scale)

        for j in range(h):  # q_n sum_m (i_vm(0) + sum_{k<=m} x_vm(k+1))^2: (T'T)_jk = H - max
            for k in range(h):
                add(self._x(j, 2), self._x(k, 2), 2 * weights.integral * (h - max(j, k)))
            for i in range(_STREAMS):
                add(self._x(j, i), self._x(j, i), 2 * weights.buffer[i])
                if self._slacks:
                    add(self._s(j, i), self._s(j, i), 2 * slack)
                r = weights.moves[i]
                add(self._u(j, i), self._u(j, i), 2 * r * (2 if j < h - 1 else 1))
                if j > 0:
                    add(self._u(j, i), self._u(j - 1, i), -2 * r)
                    add(self._u(j - 1, i), self._u(j, i), -2 * r)
        return sp.csc_matrix((values, (rows, cols)), shape=(self._n, self._n))

    def _constraints(self):
        h = self._h
        limits = np.asarray(self.config.buffer_limits_mb, float) / self.config.capacity_mb
        rows, cols, values, lower, upper = [], [], [], [], []
        row = 0

        def add_row(entries: list[tuple[int, float]], lo: float, hi: float) -> None:
            nonlocal row
            for col, v in entries:
                rows.append(row)
                cols.append(col)
                values.append(v)
            lower.append(lo)
            upper.append(hi)
            row += 1

        for j in range(h):  # dynamics; right-hand sides set per step
            for i in range(_STREAMS):
                entries = [(self._x(j, i), 1.0), (self._u(j, i), 1.0)]
                if j > 0:
                    entries.append((self._x(j - 1, i), -1.0))
                add_row(entries, 0.0, 0.0)
        for j in range(h):
            for i in range(_STREAMS):
                add_row([(self._x(j, i), 1.0)], 0.0, np.inf)
                add_row([(self._u(j, i), 1.0)], 0.0, 1.0)
                if self._slacks:
                    add_row([(self._x(j, i), 1.0), (self._s(j, i), -1.0)], -np.inf, limits[i])
                    add_row([(self._s(j, i), 1.0)], 0.0, np.inf)
            add_row([(self._u(j, i), 1.0) for i in range(_STREAMS)], -np.inf, 1.0)
        a = sp.csc_matrix((values, (rows, cols)), shape=(row, self._n))
        return a, np.asarray(lower), np.asarray(upper)

    # --- one step --------------------------------------------------------------------------
    def solve(
        self,
        buffers_mb: np.ndarray,
        arrivals_mb: np.ndarray,
        previous_shares: np.ndarray,
        integral_mb: float = 0.0,
    ) -> MpcSolution:
        """Plan from the measured buffers, the predicted arrivals (H x 3, MB), the shares in
        force (for the first move's penalty) and the image integral ``i_vm``."""
        h, c = self._h, self.config.capacity_mb
        previous_shares = np.asarray(previous_shares, float)
        arrivals = np.asarray(arrivals_mb, float).reshape(h, _STREAMS)
        rhs = arrivals / c
        rhs[0] += np.asarray(buffers_mb, float) / c
        lower, upper = self._lower.copy(), self._upper.copy()
        lower[: h * _STREAMS] = upper[: h * _STREAMS] = rhs.ravel()
        q = np.zeros(self._n)
        integral_terms = 2 * self.config.weights.integral * (integral_mb / c) * np.arange(h, 0, -1)
        q[[self._x(j, 2) for j in range(h)]] = integral_terms / self._scale  # T' 1 i_vm(0)
        for i in range(_STREAMS):
            q[self._u(0, i)] = -2 * self.config.weights.moves[i] * previous_shares[i] / self._scale
        if self._slacks:
            q[self._s(0, 0) :] = SLACK_LINEAR * max(self.config.weights.buffer) / self._scale
        self._solver.update(q=q, l=lower, u=upper)
        started = time.perf_counter()
        result, solved = self._admm()
        if SolverStatus(result.info.status_val) in _RETRIED:  # cold, another step size
            self._cold_start()
            self._solver.update_settings(rho=RETRY_RHO)
            result, solved = self._admm()
            self._solver.update_settings(rho=self._rho)
        solve_ms = (time.perf_counter() - started) * 1e3
        z = result.x
        if solved:
            self._solver.warm_start(x=self._shifted(z), y=result.y)
            shares, buffers = self._plan(z)
        else:  # no plan: start the next solve afresh
            self._cold_start()
            shares, buffers = self._hold(previous_shares, buffers_mb, arrivals)
        objective = plan_cost(self.config, shares, buffers, previous_shares, integral_mb)
        status = "optimal" if solved else "failed"
        outcome = Outcome(status, str(result.info.status), objective, solve_ms)
        return MpcSolution(shares, buffers, outcome)

    def _admm(self):
        """OSQP's result and whether it holds a finite solution."""
        result = self._solver.solve(raise_error=False)
        solved = SolverStatus(result.info.status_val) == SolverStatus.OSQP_SOLVED
        return result, solved and result.x is not None and bool(np.all(np.isfinite(result.x)))

    def _cold_start(self) -> None:
        self._solver.warm_start(x=np.zeros(self._n), y=np.zeros(len(self._lower)))

    def _plan(self, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Shares and buffers (MB) from OSQP's solution."""
        h = self._h
        shares = np.clip(z[: _STREAMS * h].reshape(h, _STREAMS), 0.0, 1.0)
        shares[shares < 1e-7] = 0.0  # the solver's tolerance, not a share
        shares /= np.maximum(shares.sum(axis=1, keepdims=True), 1.0)  # nor is a sum over 1
        buffers = np.maximum(z[_STREAMS * h : 2 * _STREAMS * h].reshape(h, _STREAMS), 0.0)
        return shares, buffers * self.config.capacity_mb

    def _shifted(self, z: np.ndarray) -> np.ndarray:
        """The plan one interval on (the next step's warm start): every block of
        per-interval variables moves up one step, the last step repeated."""
        out = z.copy()
        h = self._h
        for start, width in self._blocks:
            block = z[start : start + width * h].reshape(h, width)
            out[start : start + width * h] = np.vstack([block[1:], block[-1:]]).ravel()
        return out

    def _hold(self, previous_shares, buffers_mb, arrivals_mb):
        """No plan: the shares in force over the horizon, and the buffers (1) they give if
        each stream is sent just its share."""
        h, c = self._h, self.config.capacity_mb
        shares = np.tile(previous_shares, (h, 1))
        x = np.asarray(buffers_mb, float)
        buffers = np.empty((h, _STREAMS))
        for j in range(h):
            x = np.maximum(x + arrivals_mb[j] - c * previous_shares, 0.0)
            buffers[j] = x
        return shares, buffers

"""Exact solver of KurmaPerf and KurmaCost on the quantised problem (Kurma §5, §9).

Method (the paper used MiniZinc + Gecode; benchmarks/bench_kurma_solver.py compares):

1. Roles. Complementarity (§5.1) splits the available sites into senders S and receivers
   R; a sender that sends nothing or a receiver that takes nothing is neutral, so the
   partitions (S, available minus S) cover every plan. Senders are drawn from provable
   candidates only (see :func:`_candidates`).
2. For one partition the objective separates: a sender's own violations depend on its total
   sent, a receiver's on its incoming vector (which fixes its load Lambda_j exactly). An
   exact DP runs over receivers with state = quanta sent so far by each sender (any
   per-sender quantum). Perf keeps one value per state; cost keeps a Pareto set per state
   of (remote violations of each sender, receivers' excess), since a sender's excess is
   known only once its total is.
3. Bounds. A greedy plan is the first incumbent; partitions and DP labels whose lower bound
   cannot beat it (objective, then redirected rate) are dropped; senders' ranges are cut
   where their own violations alone exceed it.

KurmaCost when no plan meets every bound returns the least violating plan: it minimises
the total violations in excess of the bounds, sum_i max(0, V_i - rho D_i) over available
sites (req/s), then the redirected rate; with zero excess this is exactly model (2).
Ties: fewer redirected req/s first (within 1e-9 of total demand); remaining ties by a fixed
search order. The limit counts work units (never the clock), so the same problem and limit
always give the same plan, stopped or not.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, replace

import numpy as np

from geoslo._warmup import notice_if_cold
from geoslo.control import Outcome
from geoslo.control.kurma import _aggregate
from geoslo.control.kurma import _solver_kernels as kern
from geoslo.control.kurma.problem import OBJECTIVES, KurmaPlan, KurmaProblem
from geoslo.errors import InputError

__all__ = ["solve", "evaluate", "check_problem", "work_limit_for"]

WORK_PER_S = 6e7  # perf DP transitions per nominal second of limit (measured here, 2 cores)
WORK_PER_S_COST = 7e6  # cost: each step also bounds and compares Pareto labels
WORK_PER_PARTITION = 20_000  # a partition's Python set-up (bounds, tables): ~0.3 ms here
MAX_STATES = 10_000_000  # states of one partition's DP (memory: 8 bytes each)
MAX_LABELS = 4_000_000
DUAL_ITERATIONS = 40  # supergradient steps for a perf partition's Lagrangian bound
DUAL_STEPS_PER_WORK = 2  # intake rows a dual step prices per work unit (measured here)
INTAKE_WORK = 6  # work units per (intake row, sender) built (measured here: build + offsets)
COARSE_BELOW = 8  # solve at twice the quantum first when a sender has more quanta than this
COARSE_MIN_SITES = 3  # ...and more sites than this (measured: 3 sites at 1%, 6 ms -> 1.5 ms)
_HUGE_RATE = 1e300  # "no receiver left": a per-quantum rate no budget can pay


@dataclass
class _Prepared:
    """The problem as flat arrays in quanta (shared by every partition)."""

    grid: np.ndarray
    vio: np.ndarray
    demand: np.ndarray
    q: np.ndarray
    avail: np.ndarray
    capu: np.ndarray  # [i, j] most quanta i may send to j (0: not allowed)
    own: list  # own[i][u]: violations of what i keeps after sending u quanta
    upper: np.ndarray  # most useful quanta each site may send
    monotone: bool
    rho: float
    mode: int
    tol: float
    tol_rps: float
    rate: np.ndarray | None = None  # [i, j] least Omega_ij a quantum from i meets at j


def check_problem(problem: KurmaProblem) -> None:
    """Shapes and values a hand-built problem must have (parse_problem checks JSON fully)."""
    n = len(problem.sites)
    grid = np.asarray(problem.load_grid_rps, dtype=float)
    arrays = {
        "demand_rps": (np.asarray(problem.demand_rps, dtype=float), (n,)),
        "capacity_rps": (np.asarray(problem.capacity_rps, dtype=float), (n,)),
        "violation": (np.asarray(problem.violation, dtype=float), (n, n, grid.size)),
    }
    for name, (value, shape) in arrays.items():
        if value.shape != shape:
            raise InputError(name, f"must have shape {shape}, not {value.shape}")
        if not np.all(np.isfinite(value)) or np.any(value < 0):
            raise InputError(name, "must be finite and >= 0")
    if grid.ndim != 1 or grid.size < 1 or np.any(np.diff(grid) <= 0):
        raise InputError("load_grid_rps", "must be a strictly increasing 1-d grid")
    if np.any(np.asarray(problem.violation) > 1):
        raise InputError("violation", "fractions must be in [0, 1]")
    if not 0 < problem.quantum_fraction <= 1:
        raise InputError("quantum_fraction", "must be in (0, 1]")
    if problem.available is not None and np.shape(problem.available) != (n,):
        raise InputError("available", f"must have {n} entries")
    if problem.max_redirect_fraction is not None and np.shape(problem.max_redirect_fraction) != (
        n,
        n,
    ):
        raise InputError("max_redirect_fraction", f"must have shape ({n}, {n})")


def evaluate(problem: KurmaProblem, rates_rps: np.ndarray) -> tuple[float, np.ndarray]:
    """(expected violations req/s, per-origin violation fraction) of a rate matrix (§5).

    Lambda_j is column j's sum; requests from i served at j miss the SLO at rate
    lambda_ij Omega_ij(Lambda_j). A site with no demand has fraction 0.
    """
    rates = np.asarray(rates_rps, dtype=float)
    load = rates.sum(axis=0)
    n = len(problem.sites)
    per_origin = np.zeros(n)
    for i in range(n):
        for j in range(n):
            if rates[i, j] > 0:
                per_origin[i] += rates[i, j] * problem.omega(i, j, load[j])
    demand = np.asarray(problem.demand_rps, dtype=float)
    fraction = np.divide(per_origin, demand, out=np.zeros(n), where=demand > 0)
    return float(per_origin.sum()), fraction


def _prepare(problem: KurmaProblem, mode: int) -> _Prepared:
    grid = np.ascontiguousarray(problem.load_grid_rps, dtype=float)
    vio = np.ascontiguousarray(problem.violation, dtype=float)
    demand = np.asarray(problem.demand_rps, dtype=float)
    q = problem.quantum_rps
    avail = problem.available_mask
    n = len(problem.sites)
    max_units = np.zeros(n, dtype=np.int64)
    for i in range(n):
        if avail[i] and q[i] > 0:
            max_units[i] = int(math.floor(demand[i] / q[i] * (1 + 1e-12) + 1e-9))
    bounds = problem.max_redirect_matrix
    capu = np.zeros((n, n), dtype=np.int64)
    for i, j in itertools.product(range(n), range(n)):
        if i != j and avail[i] and avail[j] and max_units[i] > 0:
            pair = int(math.floor(bounds[i, j] * demand[i] / q[i] * (1 + 1e-12) + 1e-9))
            capu[i, j] = min(max_units[i], pair)
    own = [kern.own_costs(grid, vio, demand, q, i, int(max_units[i])) for i in range(n)]
    monotone = bool(np.all(np.diff(vio, axis=2) >= 0))
    upper = np.minimum(max_units, capu.sum(axis=1))
    if monotone:
        # Curves never fall with load: once i's kept load violates nothing, sending more
        # quanta adds remote violations and load elsewhere and never lowers i's own (0), so
        # returning them is no worse in either objective and redirects less.
        for i in range(n):
            zero = np.flatnonzero(own[i] == 0.0)
            if zero.size:
                upper[i] = min(upper[i], int(zero[0]))
    scale = 1.0 + float(demand.sum())
    rate = np.full((n, n), _HUGE_RATE)
    for i, j in zip(*np.nonzero(capu > 0), strict=True):
        rate[i, j] = kern.curve_min_from(grid, vio, i, j, demand[j] + q[i])
    return _Prepared(
        grid, vio, demand, q, avail, capu, own, upper, monotone,
        float(problem.slo_violation_target), mode, 1e-9 * scale, 1e-9 * scale, rate,
    )  # fmt: skip


def _min_remote_rate(prep: _Prepared, i: int, receivers) -> float:
    """Least Omega_ij a quantum from i can meet at any receiver that may take it."""
    best = _HUGE_RATE
    for j in receivers:
        best = min(best, prep.rate[i, j])  # _HUGE_RATE where i may not send to j
    return best


def _candidates(prep: _Prepared) -> list[int]:
    """Sites that may send in some optimal plan.

    Always: available, some demand, a quantum and a receiver it may send to. With curves
    that never fall with load two more rules hold (moving every quantum of i back home
    leaves i neutral, lowers every receiver's load, so no other site's violations rise, and
    redirects less):
    * perf: if for every s > 0, own_i(s) + s * (least remote rate of i) >= own_i(0), sending
      cannot lower i's violations plus those of its quanta, so i never sends;
    * cost: if i meets its bound at its own demand (own_i(0) <= rho D_i), i never sends.
    """
    n = prep.demand.size
    out = []
    for i in range(n):
        if prep.upper[i] <= 0:
            continue
        if prep.monotone:
            own = prep.own[i]
            if prep.mode == kern.PERF:
                rate = _min_remote_rate(prep, i, range(n))
                u = np.arange(1, prep.upper[i] + 1)
                if not np.any(own[u] + u * prep.q[i] * rate < own[0]):
                    continue
            elif own[0] <= prep.rho * prep.demand[i]:
                continue
        out.append(i)
    return out


def _bound_tables(prep, senders, receivers, upper, minimum_base):
    """Per stage: least remote rate m, separable sender bounds B, least receiver sums."""
    n_s, n_r = len(senders), len(receivers)
    m_rate = np.full((n_r + 1, max(n_s, 1)), _HUGE_RATE)
    for s, i in enumerate(senders):  # least rate over receivers[stage:]: a suffix minimum
        m_rate[:n_r, s] = np.minimum.accumulate(prep.rate[i, receivers][::-1])[::-1]
    return _tables_from(prep, senders, upper, m_rate, minimum_base)


def _tables_from(prep, senders, upper, m_rate, stage_terms):
    """Sender bounds B[stage, s, t] = min over u >= t of own(u) + (u - t) q m[stage, s]."""
    n_s, n_stages = len(senders), m_rate.shape[0]
    width = int(upper.max()) + 1 if n_s else 1
    bound_b = np.zeros((n_stages, max(n_s, 1), width))
    own = np.zeros((max(n_s, 1), width))
    bound_own = np.zeros((max(n_s, 1), width))
    for s, i in enumerate(senders):
        u = np.arange(upper[s] + 1)
        own[s, u] = prep.own[i][u]
        bound_own[s, u] = np.minimum.accumulate(own[s, u][::-1])[::-1]
        huge = m_rate[:, s] >= _HUGE_RATE  # every stage at once (same values as one by one)
        priced = (u * prep.q[i])[None, :] * np.where(huge, 0.0, m_rate[:, s])[:, None]
        shifted = own[s, u][None, :] + priced
        best = np.minimum.accumulate(shifted[:, ::-1], axis=1)[:, ::-1] - priced
        bound_b[:, s, : upper[s] + 1] = np.where(huge[:, None], own[s, u][None, :], best)
    lb_a = np.append(np.cumsum(np.asarray(stage_terms, dtype=float)[::-1])[::-1], 0.0)
    return m_rate, bound_b, own, bound_own, lb_a


class _Search:
    """Incumbent, bounds and the partition loop of one solve."""

    def __init__(self, problem: KurmaProblem, mode: int, work_limit: int):
        self.problem = problem
        self.prep = _prepare(problem, mode)
        self.work_limit = int(work_limit)
        self.work = 0  # work units spent: the limit counts these, never the clock
        prep = self.prep
        n = prep.demand.size
        self.candidates = _candidates(prep)
        can_send = np.zeros(n, dtype=np.bool_)
        can_send[self.candidates] = True
        capu = prep.capu.copy()
        capu[~can_send] = 0
        start = np.zeros((n, n), dtype=np.int64)
        if _aggregate.applies(prep):  # its repaired relaxations are the incumbents
            self.units = start
            self.value, self.rps = kern.score_plan(
                prep.grid, prep.vio, prep.demand, prep.q, start, prep.avail, prep.rho, mode
            )
        else:
            coarse = _coarse_plan(problem, mode, prep, self.work_limit)
            if coarse is not None:
                start, coarse_work = coarse
                self.work += coarse_work
            self.units, self.value, self.rps = kern.local_search(
                prep.grid, prep.vio, prep.demand, prep.q, capu, can_send, prep.avail, prep.rho,
                mode, prep.tol, prep.tol_rps, start,
            )  # fmt: skip
        self.unfinished: list[tuple[float, float]] = []  # (objective bound, redirect bound)
        self.base = 0.0
        if mode == kern.PERF:  # unavailable sites keep their demand: a constant
            for i in np.flatnonzero(~prep.avail):
                d = prep.demand[i]
                self.base += d * kern.omega(prep.grid, prep.vio, i, i, d) if d > 0 else 0.0
        self.floor = None if _aggregate.applies(prep) else _floor(prep, self.base)

    def run(self) -> None:
        if _aggregate.applies(self.prep):
            self._run_aggregate()
            return
        prep = self.prep
        available = [int(i) for i in np.flatnonzero(prep.avail)]
        for size in range(1, len(self.candidates) + 1):
            for senders in itertools.combinations(self.candidates, size):
                if self._out_of_work():
                    # Every partition not yet solved (this one and the rest) is covered by
                    # the problem-wide bound: record it once and stop.
                    self.unfinished.append((self.floor, 0.0))
                    return
                self.work += WORK_PER_PARTITION
                receivers = [j for j in available if j not in senders]
                self._partition(list(senders), receivers)

    def _run_aggregate(self) -> None:
        """KurmaPerf with equal quanta: Lagrangian branch and bound (_aggregate.py)."""
        search = _aggregate.AggregateSearch(
            self.prep, self.candidates, self.base, self.units, self.value, self.rps,
            self._work_left(),
        )  # fmt: skip
        search.run()
        self.work += search.work
        self.units, self.value, self.rps = search.units, search.value, search.rps
        if not search.proven:
            self.unfinished.append((search.lower, 0.0))

    def _out_of_work(self) -> bool:
        return self.work > self.work_limit

    def _partition(self, senders: list[int], receivers: list[int]) -> None:
        prep = self.prep
        upper = np.array([min(prep.upper[i], prep.capu[i, receivers].sum()) for i in senders])
        if np.any(upper <= 0):
            return  # a sender with nowhere to send: covered by a smaller partition
        if prep.mode == kern.PERF:
            least = [
                prep.demand[j] * kern.curve_min_from(prep.grid, prep.vio, j, j, prep.demand[j])
                for j in receivers
            ]
        else:
            least = [
                prep.demand[j]
                * max(kern.curve_min_from(prep.grid, prep.vio, j, j, prep.demand[j]) - prep.rho, 0)
                for j in receivers
            ]
        tables = _bound_tables(prep, senders, receivers, upper, least)
        upper = self._cut_upper(senders, upper, tables)
        if upper is None:
            return
        tables = _bound_tables(prep, senders, receivers, upper, least)
        m_rate, bound_b, own, bound_own, lb_a = tables
        root = self._root_bounds(senders, upper, tables)
        if root is None:
            return
        q_s = prep.q[senders]
        if len(receivers) == 1 and np.all(q_s == q_s[0]):
            if not self._single(senders, receivers[0], upper, own):
                self.unfinished.append(root)
            return
        if len(receivers) == 2 and np.all(q_s == q_s[0]):
            if not self._double(senders, receivers, upper, own):
                self.unfinished.append(root)
            return
        n_states = math.prod(int(u) + 1 for u in upper)  # Python ints: no int64 overflow
        if n_states > MAX_STATES or self._out_of_work():
            self.unfinished.append(root)
            return
        rows = self._intake_rows(senders, receivers, upper)
        if self.work + rows * len(senders) * INTAKE_WORK > self.work_limit:
            self.unfinished.append(root)  # its tables alone would overrun the work limit
            return
        intakes = self._intakes(senders, receivers, upper)
        if intakes is None or self._out_of_work():
            self.unfinished.append(root)
            return
        if prep.mode == kern.PERF:
            priced = self._price(senders, receivers, upper, intakes, tables)
            if priced is None:
                return
            upper, intakes, tables = priced
            m_rate, bound_b, own, bound_own, lb_a = tables
        in_start, in_units, in_off, in_cost, in_vec, least_intake = intakes
        lb_b = np.append(np.cumsum(least_intake[::-1])[::-1], 0.0)
        rdem = prep.rho * prep.demand[senders]
        status, best, value, rps, parent, intake, work = kern.label_dp(
            prep.mode, upper, _strides(upper), prep.q[senders].copy(), own, rdem, in_start,
            in_units, in_off, in_cost, in_vec, bound_b, bound_own, lb_a, lb_b, m_rate,
            self.base, self.value, self.rps, prep.tol, prep.tol_rps, self._work_left(),
            MAX_LABELS,
        )  # fmt: skip
        self.work += work
        if status != 0:
            self.unfinished.append(root)
            return
        if best >= 0:
            self.units = _plan_units(
                prep.demand.size, senders, receivers, best, parent, intake, in_start, in_units
            )
            self.value, self.rps = value, rps

    def _single(self, senders, j, upper, own) -> bool:
        """One receiver, equal quanta: enumerate its intake, knapsack over senders.

        False when the time limit stopped it (its incumbent, if improved, is kept).
        """
        prep = self.prep
        caps = np.minimum(prep.capu[senders, j], upper).astype(np.int64)
        done, best, value, rps, x, work = kern.single_receiver(
            prep.grid, prep.vio, prep.demand, float(prep.q[senders[0]]), prep.rho, prep.mode,
            j, np.asarray(senders, dtype=np.int64), caps, np.ascontiguousarray(own),
            prep.rho * prep.demand[senders], self.base, self.value, self.rps, prep.tol,
            prep.tol_rps, self._work_left(),
        )  # fmt: skip
        self.work += work
        if best >= 0:
            units = np.zeros_like(self.units)
            units[senders, j] = x
            self.units, self.value, self.rps = units, value, rps
        return done

    def _double(self, senders, receivers, upper, own) -> bool:
        """Two receivers, equal quanta: screen intake pairs, exact 2-D DP for survivors.

        False when the time limit stopped it (its incumbent, if improved, is kept).
        """
        prep = self.prep
        j1, j2 = receivers
        caps1 = np.minimum(prep.capu[senders, j1], upper).astype(np.int64)
        caps2 = np.minimum(prep.capu[senders, j2], upper).astype(np.int64)
        done, a1, _, value, rps, x, work = kern.two_receivers(
            prep.grid, prep.vio, prep.demand, float(prep.q[senders[0]]), prep.rho, prep.mode,
            j1, j2, np.asarray(senders, dtype=np.int64), caps1, caps2,
            np.asarray(upper, dtype=np.int64), np.ascontiguousarray(own),
            prep.rho * prep.demand[senders], self.base, self.value, self.rps, prep.tol,
            prep.tol_rps, self._work_left(),
        )  # fmt: skip
        self.work += work
        if a1 >= 0:
            units = np.zeros_like(self.units)
            units[senders, j1] = x[:, 0]
            units[senders, j2] = x[:, 1]
            self.units, self.value, self.rps = units, value, rps
        return done

    def _work_left(self) -> int:
        return max(self.work_limit - self.work, 0)

    def _price(self, senders, receivers, upper, intakes, tables):
        """Lagrangian prices for a perf partition: a tight bound, then fixing by reduced cost.

        With prices mu (see kern.dual_value) any plan's objective is base + L(mu) plus the
        reduced costs of its senders' totals and receivers' intakes above their minima, so a
        total or an intake whose reduced cost exceeds incumbent - (base + L) cannot be in a
        better plan. Stage bounds then use the same prices.
        """
        prep = self.prep
        in_start, in_units, _, in_cost, in_vec, _ = intakes
        m_rate, _, own, bound_own, _ = tables
        q_s = prep.q[senders]
        mu0 = np.where(m_rate[0, : len(senders)] < _HUGE_RATE, -q_s * m_rate[0, : len(senders)], 0)
        mu, dual = kern.dual_ascent(
            mu0.astype(float), own, upper, in_start, in_units, in_cost,
            self.value - self.base, DUAL_ITERATIONS,
        )  # fmt: skip
        self.work += DUAL_ITERATIONS * len(in_cost) // DUAL_STEPS_PER_WORK
        slack = self.value + prep.tol - (self.base + dual)
        if slack < 0:
            return None
        new_upper = upper.copy()
        for s in range(len(senders)):
            reduced = own[s, : upper[s] + 1] - mu[s] * np.arange(upper[s] + 1)
            new_upper[s] = int(np.flatnonzero(reduced - reduced.min() <= slack)[-1])
        if np.any(new_upper <= 0):
            return None  # some sender cannot send in a better plan: a smaller partition
        reduced = in_cost + in_units @ mu
        keep = np.all(in_units <= new_upper, axis=1)
        starts, least, stage_min = [0], [], []
        for k in range(len(receivers)):
            block = slice(in_start[k], in_start[k + 1])
            keep[block] &= reduced[block] - reduced[block].min() <= slack
            if not keep[block].any():
                return None
            starts.append(starts[-1] + int(keep[block].sum()))
            least.append(in_cost[block][keep[block]].min())
            stage_min.append(reduced[block][keep[block]].min())
        units = np.ascontiguousarray(in_units[keep])
        intakes = (
            np.asarray(starts, dtype=np.int64),
            units,
            kern.offsets(units, _strides(new_upper)),
            in_cost[keep],
            np.ascontiguousarray(in_vec[keep]),
            np.asarray(least),
        )
        m_rate = np.full((len(receivers) + 1, max(len(senders), 1)), _HUGE_RATE)
        for stage in range(len(receivers)):
            for s, i in enumerate(senders):
                if prep.capu[i, receivers[stage:]].sum() > 0:
                    m_rate[stage, s] = -mu[s] / q_s[s]
        tables = _tables_from(prep, senders, new_upper, m_rate, stage_min)
        return new_upper, intakes, tables

    def _cut_upper(self, senders, upper, tables):
        """Drop quanta a sender cannot reach while staying within the incumbent.

        Sender s's final term (own violations plus at least the cheapest remote rate per
        quantum; for cost, its excess) plus every other term's bound must not exceed the
        incumbent, so quanta beyond the largest such count are useless.
        """
        prep = self.prep
        m_rate, bound_b, own, _, lb_a = tables
        rdem = prep.rho * prep.demand[senders]
        terms = bound_b[0, : len(senders), 0].copy()
        if prep.mode == kern.COST:
            terms = np.maximum(terms - rdem, 0.0)
        new = upper.copy()
        for s, i in enumerate(senders):
            others = self.base + lb_a[0] + terms.sum() - terms[s]
            u = np.arange(upper[s] + 1)
            with np.errstate(over="ignore", invalid="ignore"):
                cost = own[s, u] + np.where(u > 0, u * prep.q[i] * m_rate[0, s], 0.0)
            if prep.mode == kern.COST:
                cost = np.maximum(cost - rdem[s], 0.0)
            ok = np.flatnonzero(others + cost <= self.value + prep.tol)
            if ok.size == 0 or ok[-1] == 0:
                return None  # cannot win, or cannot send: a smaller partition covers it
            new[s] = int(ok[-1])
        return new

    def _root_bounds(self, senders, upper, tables):
        """(objective bound, redirect bound) at the root, or None when it cannot win."""
        prep = self.prep
        m_rate, bound_b, own, bound_own, lb_a = tables
        t = np.zeros(len(senders), dtype=np.int64)
        vec = np.zeros(max(len(senders), 1))
        rdem = prep.rho * prep.demand[senders]
        lb_b = np.zeros(1) + lb_a[0]
        lb, lb1 = kern._lower_bound(
            prep.mode, t, self.base, vec, 0, bound_b, bound_own, lb_a, lb_b, rdem
        )
        q_s = prep.q[senders].copy()
        t_lb = kern._redirect_bound(
            prep.mode, t, vec, lb1, 0, bound_b, own, m_rate, q_s, upper, rdem, self.value,
            prep.tol,
        )  # fmt: skip
        if lb > self.value + prep.tol:
            return None
        if lb >= self.value - prep.tol and t_lb >= self.rps - prep.tol_rps:
            return None
        return lb, t_lb

    def _intake_rows(self, senders, receivers, upper) -> int:
        """How many intake vectors the receivers' tables hold (before building them)."""
        prep = self.prep
        return sum(
            math.prod(int(min(prep.capu[i, j], u)) + 1 for i, u in zip(senders, upper, strict=True))
            for j in receivers
        )

    def _intakes(self, senders, receivers, upper):
        """Concatenated intake tables of the receivers, with state offsets (None: out of time)."""
        prep = self.prep
        strides = _strides(upper)
        starts, units, offs, costs, vecs, least = [0], [], [], [], [], []
        for j in receivers:
            if self._out_of_work():
                return None
            caps = np.minimum(prep.capu[senders, j], upper).astype(np.int64)
            u, perf_cost, excess, per_sender = kern.build_intakes(
                prep.grid, prep.vio, prep.demand, prep.q, prep.rho, j,
                np.asarray(senders, dtype=np.int64), caps,
            )  # fmt: skip
            self.work += len(perf_cost) * len(senders) * INTAKE_WORK
            cost = perf_cost if prep.mode == kern.PERF else excess
            units.append(u)
            offs.append(kern.offsets(u, strides))
            costs.append(cost)
            vecs.append(per_sender)
            least.append(cost.min())
            starts.append(starts[-1] + len(cost))
        return (
            np.asarray(starts, dtype=np.int64),
            np.ascontiguousarray(np.concatenate(units)),
            np.concatenate(offs).astype(np.int64),
            np.concatenate(costs),
            np.ascontiguousarray(np.concatenate(vecs)),
            np.asarray(least, dtype=float),
        )

    def gap(self) -> float:
        if not self.unfinished:
            return 0.0
        lowest = min(b for b, _ in self.unfinished)
        if self.prep.mode == kern.PERF or lowest < self.value - self.prep.tol:
            return max(self.value - lowest, 0.0)
        return max(self.rps - min(r for _, r in self.unfinished), 0.0)


def _floor(prep: _Prepared, base: float) -> float:
    """A lower bound on every plan's objective, for partitions a time limit leaves unsolved.

    Requests from an available site i are either all kept at a load >= D_i (i does not
    send: at least D_i min Omega_ii over [D_i, inf)), or i sends u >= 1 quanta: it keeps
    own_i(u) exactly (a sender receives nothing) and each sent quantum meets at least the
    least remote rate (a receiver's load is >= D_j + q_i). Perf adds these per origin;
    cost adds each origin's excess over rho D_i, which only grows with its violations.
    """
    n = prep.demand.size
    total = base
    for i in np.flatnonzero(prep.avail):
        d = prep.demand[i]
        term = d * kern.curve_min_from(prep.grid, prep.vio, i, i, d) if d > 0 else 0.0
        rate = _min_remote_rate(prep, i, range(n))
        own = prep.own[i]
        if own.size > 1 and rate < _HUGE_RATE:
            u = np.arange(1, own.size)
            term = min(term, float(np.min(own[u] + u * prep.q[i] * rate)))
        if prep.mode == kern.PERF:
            total += term
        else:
            total += max(term - prep.rho * d, 0.0)
    return total


def _coarse_plan(problem, mode, prep, work_limit):
    """An incumbent from the same problem at twice the quantum, solved exactly (recursively).

    Every plan of the coarse problem is a plan of this one (each amount is a multiple of
    2 quanta and within the same bounds), so its optimum is a good, valid starting point.
    Returns (units, work spent) or None; it gets a quarter of the work limit.
    """
    if prep.upper.max(initial=0) <= COARSE_BELOW or problem.quantum_fraction * 2 > 1:
        return None
    if prep.avail.sum() <= COARSE_MIN_SITES:
        return None  # few partitions, each tiny: the recursion's overhead costs more
    coarse = replace(problem, quantum_fraction=problem.quantum_fraction * 2)
    search = _Search(coarse, mode, work_limit // 4)
    search.run()
    return search.units * 2, search.work


def _strides(upper: np.ndarray) -> np.ndarray:
    strides = np.ones(len(upper), dtype=np.int64)
    for s in range(len(upper) - 2, -1, -1):
        strides[s] = strides[s + 1] * (upper[s + 1] + 1)
    return strides


def _plan_units(n, senders, receivers, best, parent, intake, in_start, in_units) -> np.ndarray:
    units = np.zeros((n, n), dtype=np.int64)
    lab = best
    while lab >= 0 and intake[lab] >= 0:
        m = intake[lab]
        r = int(np.searchsorted(in_start, m, side="right")) - 1
        for s, i in enumerate(senders):
            units[i, receivers[r]] += in_units[m, s]
        lab = parent[lab]
    return units


def _rates(problem: KurmaProblem, units: np.ndarray) -> np.ndarray:
    rates = units * problem.quantum_rps[:, None]
    np.fill_diagonal(rates, 0.0)
    kept = np.asarray(problem.demand_rps, dtype=float) - rates.sum(axis=1)
    np.fill_diagonal(rates, np.maximum(kept, 0.0))
    return rates


_compiled = False


def _ensure_compiled() -> None:
    """Compile (or load from numba's cache) every kernel once per process, off the clock,
    so that a first solve's time limit is not spent compiling."""
    global _compiled
    if _compiled:
        return
    notice_if_cold(kern)
    grid = np.array([0.0, 10.0, 20.0])
    problem = KurmaProblem(
        sites=("a", "b", "c"),
        demand_rps=np.array([18.0, 2.0, 9.0]),
        capacity_rps=np.full(3, 10.0),
        load_grid_rps=grid,
        violation=np.tile(np.array([0.0, 0.2, 0.9]), (3, 3, 1)),
        quantum_fraction=0.05,
    )
    for mode in (kern.PERF, kern.COST):
        _Search(problem, mode, 10**12).run()
    _compiled = True


def work_limit_for(time_limit_s: float, objective: str = "perf") -> int:
    """The work limit a nominal time limit stands for: work units at this machine's measured
    rate (WORK_PER_S; cost steps are dearer). A fixed conversion, so a limit is the same
    amount of search wherever and however busy the solve runs."""
    rate = WORK_PER_S if objective == "perf" else WORK_PER_S_COST
    return max(int(time_limit_s * rate), 1)


def solve(
    problem: KurmaProblem,
    objective: str = "perf",
    time_limit_s: float = 10.0,
    work_limit: int | None = None,
) -> KurmaPlan:
    """The optimal quantised plan of KurmaPerf (1) or KurmaCost (2), §5, with §9's bounds.

    The search stops after ``work_limit`` work units (DP transitions, knapsack steps, label
    comparisons; default: :func:`work_limit_for` ``time_limit_s``) with the best plan found
    and its gap (``optimal`` false). The limit counts work, never the clock, so the same
    problem and limit always give the same plan. No wall-clock cut-off is applied.
    """
    if objective not in OBJECTIVES:
        raise InputError("objective", f"must be one of {list(OBJECTIVES)}, not {objective!r}")
    if not time_limit_s > 0:
        raise InputError("time_limit_s", "must be > 0")
    if work_limit is None:
        work_limit = work_limit_for(time_limit_s, objective)
    if isinstance(work_limit, bool) or not isinstance(work_limit, (int, np.integer)):
        raise InputError("work_limit", f"must be an integer, not {work_limit!r}")
    if work_limit < 1:
        raise InputError("work_limit", "must be >= 1")
    check_problem(problem)
    _ensure_compiled()
    start = time.perf_counter()
    mode = kern.PERF if objective == "perf" else kern.COST
    search = _Search(problem, mode, int(work_limit))
    search.run()
    rates = _rates(problem, search.units)
    violations, fraction = evaluate(problem, rates)
    gap = search.gap()
    optimal = not search.unfinished
    demand = np.asarray(problem.demand_rps, dtype=float)
    rho = problem.slo_violation_target
    missing = ()
    if mode == kern.COST:
        over = (fraction * demand > rho * demand + search.prep.tol) & problem.available_mask
        missing = tuple(problem.sites[i] for i in np.flatnonzero(over))
    feasible = not missing
    solver_status = "optimal" if optimal else "limit"
    if not feasible and optimal:
        solver_status = "infeasible"
    rates_redirected = float((rates * (1.0 - np.eye(len(rates)))).sum())
    value = violations if mode == kern.PERF else rates_redirected
    outcome = Outcome(
        plan_status(optimal, feasible), solver_status, float(value),
        (time.perf_counter() - start) * 1e3,
    )  # fmt: skip
    return KurmaPlan(
        formulation=objective,
        outcome=outcome,
        rates_rps=rates,
        expected_violations_rps=violations,
        site_violation_fraction=fraction,
        redirected_rps=rates_redirected,
        optimal=optimal,
        gap=gap,
        feasible=feasible,
        infeasible_sites=missing,
        work_limit=int(work_limit),
        work_units=int(search.work),
    )


def plan_status(optimal: bool, feasible: bool) -> str:
    """The one vocabulary (geoslo.control.STATUSES) for a solve: a plan that misses a site's
    bound is ``infeasible`` whatever stopped the search; otherwise a proven optimum is
    ``optimal`` and a search stopped by its time limit is ``time_limit`` (gap on the plan)."""
    if not feasible:
        return "infeasible"
    return "optimal" if optimal else "time_limit"

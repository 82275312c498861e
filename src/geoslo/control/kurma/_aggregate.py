"""KurmaPerf with equal quanta: Lagrangian branch and bound on the sites' net quanta (§5).

For fixed senders' totals u_i and receivers' intakes a_j the rest of model (1) is a
transportation problem (a receiver's per-quantum rates are fixed by its intake). Pricing
each origin's quanta at pi_i relaxes only the per-origin balance; what remains separates
into one term per site over its net quanta t_i (sender, neutral or receiver) with one
coupling constraint, sum_i t_i = 0, solved exactly by a min-plus DP over the sites
(_aggregate_kernels.py). Any prices give a lower bound; subgradient steps raise it, every
relaxed solution is repaired into a plan by the exact transportation problem (an
incumbent), values whose bound exceeds the incumbent are fixed out, and branching on one
site's net quanta closes what the prices leave. Work counts DP transitions and price
evaluations (never the clock), so a limited search is deterministic.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from geoslo.control.kurma import _aggregate_kernels as agg
from geoslo.control.kurma import _solver_kernels as kern

__all__ = ["AggregateSearch", "applies"]

ITERATIONS = 40  # subgradient steps at the root (warm-started children take NODE_ITERATIONS)
NODE_ITERATIONS = 12
STALL = 4  # halve the step after this many steps without a better bound
MAX_TABLE_CELLS = 25_000_000  # rates and DP tables: 200 MB of float64
MAX_OPEN_BYTES = 200_000_000  # open nodes' value masks; beyond, the search stops with its gap
FIX_FIRST = 2  # the first fixing comes early: the widest tables are the first ones
FIX_EVERY = 10
RAW_PER_WORK = 4  # kernel steps per work unit: 1-3e8 units/s here, above WORK_PER_S (a safe side)
NODE_OVERHEAD_WORK = 12_000  # a kernel call's Python around it (measured here: ~50 us)


def applies(prep) -> bool:
    """KurmaPerf with one quantum for every available site (a common unit for the DP) whose
    tables fit MAX_TABLE_CELLS (otherwise the partition search and its caps take it)."""
    q = prep.q[prep.avail]
    if prep.mode != kern.PERF or q.size == 0 or not np.all(q == q[0]):
        return False
    n = int(prep.avail.sum())
    quanta = int(prep.upper[prep.avail].sum())  # bounds every intake and every running sum
    return n * n * (quanta + 1) + 2 * (n + 1) * (n + 1) * (quanta + 1) <= MAX_TABLE_CELLS


@dataclass
class _Tables:
    """The available sites' terms in quanta (index = position among available sites)."""

    sites: np.ndarray  # problem index of each available site
    own: np.ndarray  # [i, u] violations of what i keeps after sending u quanta
    local: np.ndarray  # [j, a] violations of j's own demand after taking a quanta
    c: np.ndarray  # [k, j, a] violations of one quantum from k served at j (intake a)
    cap: np.ndarray  # [k, j] most quanta k may send to j
    upper: np.ndarray  # most quanta i may send (0: never sends)
    intake: np.ndarray  # most quanta i may take
    offset: int  # index of running sum 0 in the DP tables


def _tables(prep, candidates) -> _Tables:
    sites = np.flatnonzero(prep.avail)
    n = sites.size
    q = float(prep.q[sites[0]])
    is_candidate = np.isin(sites, candidates)
    upper = np.where(is_candidate, prep.upper[sites], 0).astype(np.int64)
    cap = prep.capu[np.ix_(sites, sites)].astype(np.int64)
    cap[~is_candidate] = 0
    cap = np.minimum(cap, upper[:, None])
    intake = np.minimum(cap.sum(axis=0), upper.sum()).astype(np.int64)
    width_a = int(intake.max(initial=0)) + 1
    own = np.zeros((n, int(upper.max(initial=0)) + 1))
    for r, i in enumerate(sites):
        own[r, : upper[r] + 1] = prep.own[i][: upper[r] + 1]
    local = np.zeros((n, width_a))
    c = np.zeros((n, n, width_a))
    a = np.arange(width_a)
    for r, j in enumerate(sites):
        load = prep.demand[j] + q * a
        local[r] = prep.demand[j] * _omega(prep, j, j, load)
        for k_r, k in enumerate(sites):
            if cap[k_r, r] > 0:
                c[k_r, r] = q * _omega(prep, k, j, load)
    offset = int(upper.sum())
    return _Tables(sites, own, local, c, cap, upper, intake, offset)


def _omega(prep, i, j, load):
    """Omega_ij at loads (kern.omega's rule: first value below the grid, 1 above it)."""
    return np.interp(load, prep.grid, prep.vio[i, j], left=prep.vio[i, j, 0], right=1.0)


class AggregateSearch:
    """Branch and bound over net quanta with Lagrangian bounds (see the module docstring).

    ``units``, ``value`` and ``rps`` are the incumbent (initially the caller's); after
    ``run`` ``lower`` is a proven bound on the optimum (== value when proven) and
    ``proven`` says whether the search finished.
    """

    def __init__(self, prep, candidates, base, units, value, rps, work_limit):
        self.prep = prep
        self.base = float(base)
        self.units, self.value, self.rps = units, float(value), float(rps)
        self.work_limit = int(work_limit)
        self.work = 0
        self.tab = _tables(prep, candidates)
        self.lower = -np.inf
        self.proven = False
        n = self.tab.sites.size
        width = int((self.tab.upper + self.tab.intake).max(initial=0)) + 1
        span = int(self.tab.upper.sum() + self.tab.intake.sum()) + 1
        self._h = np.empty((n, width))
        self._fwd = np.empty((n + 1, span))
        self._bwd = np.empty((n + 1, span))
        self._t = np.zeros(n, dtype=np.int64)
        self._best_units = np.ascontiguousarray(units, dtype=np.int64).copy()
        self._scratch = np.zeros_like(self._best_units)

    # -- the search -------------------------------------------------------------------------

    def run(self) -> None:
        tab = self.tab
        n = tab.sites.size
        allowed = np.zeros(self._h.shape, dtype=np.bool_)
        for i in range(n):
            allowed[i, : tab.upper[i] + tab.intake[i] + 1] = True
        heap = [(-np.inf, 0, allowed, np.zeros(n), ITERATIONS)]
        counter = 1
        open_bounds = []
        while heap:
            bound, _, allowed, pi, iterations = heapq.heappop(heap)
            if self._prunable(bound, allowed):
                continue
            if self.work > self.work_limit or len(heap) * allowed.nbytes > MAX_OPEN_BYTES:
                open_bounds = [bound] + [b for b, *_ in heap]
                break
            node = self._node(allowed, pi, iterations)
            if node is None:
                continue
            bound, pi = node
            for child in self._children(allowed):
                heapq.heappush(heap, (bound, counter, child, pi.copy(), NODE_ITERATIONS))
                counter += 1
        if open_bounds:
            self.lower = min(self.value, *open_bounds)
        else:
            self.lower, self.proven = self.value, True

    def gap(self) -> float:
        return max(self.value - self.lower, 0.0)

    def _prunable(self, bound: float, allowed) -> bool:
        """A node that cannot beat the incumbent: a worse objective bound, or a tie with no
        fewer redirected req/s possible (the solver's tie rule)."""
        prep = self.prep
        if bound > self.value + prep.tol:
            return True
        if bound < self.value - prep.tol:
            return False
        return self._redirect_floor(allowed) >= self.rps - prep.tol_rps

    def _redirect_floor(self, allowed) -> float:
        """Least req/s redirected by any plan of the node (each site's fewest quanta sent)."""
        tab = self.tab
        last = allowed.shape[1] - 1 - np.argmax(allowed[:, ::-1], axis=1)  # largest allowed
        sent = np.maximum(tab.upper - last, 0).sum()
        return float(sent) * float(self.prep.q[tab.sites[0]])

    # -- one node ---------------------------------------------------------------------------

    def _node(self, allowed, pi, iterations):
        """Raise the node's bound by subgradient steps (repairing every relaxed plan into an
        incumbent) and fix values out every FIX_EVERY steps.

        Returns None when the node is closed, else (bound, prices).
        """
        tab, prep = self.tab, self.prep
        pi = pi.copy()
        problem = (prep.grid, prep.vio, prep.demand, prep.q, prep.avail, prep.rho, prep.mode,
                   tab.sites)  # fmt: skip
        best = -np.inf
        done = 0
        while done < iterations:
            steps = min(FIX_FIRST if done == 0 else FIX_EVERY, iterations - done)
            done += steps
            incumbent = np.array([self.value, self.rps])
            bound, state, work = agg.subgradient(
                tab.own, tab.local, tab.c, self._caps(allowed), tab.upper, tab.intake, tab.offset,
                allowed,
                pi, steps, STALL, self._h, self._fwd, self._t,
                self.base, problem, incumbent, self._best_units, self._scratch, prep.tol,
                prep.tol_rps, max(self.work_limit - self.work, 0) * RAW_PER_WORK,
            )  # fmt: skip
            self.work += (work + NODE_OVERHEAD_WORK) // RAW_PER_WORK
            if incumbent[0] != self.value or incumbent[1] != self.rps:
                self.units = self._best_units.copy()
                self.value, self.rps = float(incumbent[0]), float(incumbent[1])
            best = max(best, bound)
            if state == agg.CLOSED or self._prunable(best, allowed):
                return None
            if self.work > self.work_limit:
                break  # the node stays open with its bound
            if not self._fix(allowed, pi):
                return None
            if self.work > self.work_limit or state == agg.BALANCED:
                break  # open with its bound (a balanced node: only a tie is left to find)
        return best, pi

    def _caps(self, allowed) -> np.ndarray:
        """Most quanta each origin may send each receiver in this node: no more than the
        most its allowed values send (none when it can only be neutral or receive)."""
        tab = self.tab
        first = np.argmax(allowed, axis=1)  # each site's smallest allowed value index
        most_sent = np.maximum(tab.upper - first, 0)
        return np.minimum(tab.cap, most_sent[:, None])

    def _fix(self, allowed, pi) -> bool:
        """Disallow values that cannot be in a plan at least as good as the incumbent,
        from the relaxation under prices pi; whether a plan is left."""
        tab = self.tab
        steps = agg.site_terms(
            tab.own,
            tab.local,
            tab.c,
            self._caps(allowed),
            tab.upper,
            tab.intake,
            pi,
            allowed,
            self._h,
        )
        forward = agg.forward(self._h, tab.upper, tab.intake, tab.offset, self._fwd)
        self.work += (steps + max(forward, 0)) // RAW_PER_WORK
        if forward < 0:
            return False  # the relaxation is infeasible: so is every plan in this node
        steps = agg.backward(self._h, tab.upper, tab.intake, tab.offset, self._bwd)
        limit = self.value - self.base + self.prep.tol
        left, work = agg.fix_values(
            self._h, tab.upper, tab.intake, tab.offset, self._fwd, self._bwd, limit, allowed
        )
        self.work += (steps + work + NODE_OVERHEAD_WORK) // RAW_PER_WORK
        return left > 0 and bool(np.all(allowed.any(axis=1)))

    def _children(self, allowed):
        """Halve the largest domain of net quanta (both halves non-empty)."""
        sizes = allowed.sum(axis=1)
        site = int(np.argmax(sizes))
        if sizes[site] <= 1:
            return []  # every site fixed: its one net-quanta vector was repaired exactly
        values = np.flatnonzero(allowed[site])
        cut = int(values[values.size // 2 - 1])
        low, high = allowed.copy(), allowed.copy()
        low[site, cut + 1 :] = False
        high[site, : cut + 1] = False
        return [low, high]

"""Compiled inner loops of Kurma's exact solver (§5): curves, plan scoring, greedy, label DP.

Units: a plan is an integer matrix ``units[i, j]`` (j != i) of quanta ``q[i]`` req/s; the
diagonal is implied (what i keeps). ``mode`` 0 is KurmaPerf (model 1: total expected
violations), 1 is KurmaCost (model 2: violations in excess of rho * D_i, then redirected rate).
The plain-Python reference every kernel is checked against lives in ``_solver_reference``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

PERF = 0
COST = 1


@njit(cache=True, nogil=True)
def omega(grid, vio, i, j, load):
    """Omega_ij(load): linear between grid points, first value below, 1 above the last."""
    k = grid.shape[0]
    if load > grid[k - 1]:
        return 1.0
    if load <= grid[0]:
        return vio[i, j, 0]
    lo = 0
    hi = k - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if grid[mid] < load:
            lo = mid
        else:
            hi = mid
    slope = (vio[i, j, hi] - vio[i, j, lo]) / (grid[hi] - grid[lo])
    return vio[i, j, lo] + slope * (load - grid[lo])


@njit(cache=True, nogil=True)
def curve_min_from(grid, vio, i, j, load):
    """min of Omega_ij over [load, inf): a bound valid for any curve shape."""
    best = omega(grid, vio, i, j, load)
    for k in range(grid.shape[0]):
        if grid[k] >= load and vio[i, j, k] < best:
            best = vio[i, j, k]
    return best


@njit(cache=True, nogil=True)
def own_costs(grid, vio, demand, q, i, n_units):
    """own[u] = (D_i - u q_i) Omega_ii(D_i - u q_i): violations of what i keeps, u = 0..n."""
    out = np.empty(n_units + 1)
    for u in range(n_units + 1):
        kept = max(demand[i] - u * q[i], 0.0)
        out[u] = kept * omega(grid, vio, i, i, kept)
    return out


@njit(cache=True, nogil=True)
def _column(grid, vio, demand, q, units, j, contrib):
    """Fill contrib[:] with the violations at site j of requests from each origin."""
    n = demand.shape[0]
    sent_j = 0.0
    for k in range(n):
        if k != j:
            sent_j += units[j, k] * q[j]
    load = demand[j] - sent_j
    for i in range(n):
        if i != j:
            load += units[i, j] * q[i]
    for i in range(n):
        if i == j:
            rate = demand[j] - sent_j
        else:
            rate = units[i, j] * q[i]
        contrib[i] = rate * omega(grid, vio, i, j, load) if rate > 0 else 0.0


@njit(cache=True, nogil=True)
def score_plan(grid, vio, demand, q, units, avail, rho, mode):
    """(objective, redirected): perf = total violations; cost = excess over rho * D_i."""
    n = demand.shape[0]
    contrib = np.zeros((n, n))
    col = np.zeros(n)
    for j in range(n):
        _column(grid, vio, demand, q, units, j, col)
        contrib[:, j] = col
    return _score_from(contrib, demand, q, units, avail, rho, mode)


@njit(cache=True, nogil=True)
def _score_from(contrib, demand, q, units, avail, rho, mode):
    n = demand.shape[0]
    value = 0.0
    for i in range(n):
        v_i = 0.0
        for j in range(n):
            v_i += contrib[i, j]
        if mode == PERF:
            value += v_i
        elif avail[i] and v_i > rho * demand[i]:
            value += v_i - rho * demand[i]
    redirected = 0.0
    for i in range(n):
        for j in range(n):
            if i != j:
                redirected += units[i, j] * q[i]
    return value, redirected


@njit(cache=True, nogil=True)
def _better(value, redirected, best_value, best_redirected, tol, tol_rps):
    """Lexicographic (objective, redirected) with absolute tolerances."""
    if value < best_value - tol:
        return True
    return value <= best_value + tol and redirected < best_redirected - tol_rps


@njit(cache=True, nogil=True)
def _sends(units, i):
    n = units.shape[0]
    total = 0
    for k in range(n):
        if k != i:
            total += units[i, k]
    return total


@njit(cache=True, nogil=True)
def _receives(units, j):
    n = units.shape[0]
    total = 0
    for k in range(n):
        if k != j:
            total += units[k, j]
    return total


@njit(cache=True, nogil=True)
def local_search(grid, vio, demand, q, capu, can_send, avail, rho, mode, tol, tol_rps, units):
    """Best-improvement descent over one-quantum moves: add i->j, return i->j, shift i: j->k.

    Moves keep complementarity (§5.1): only a site that receives nothing adds, only to a
    site that sends nothing. "Improves" is lexicographic: objective, then redirected rate.
    From the all-local plan this is a greedy; from a coarse optimum, a polish.
    """
    n = demand.shape[0]
    units = units.copy()
    value, redirected = score_plan(grid, vio, demand, q, units, avail, rho, mode)
    while True:
        best_kind = -1
        best_i = best_j = best_k = -1
        best_v = value
        best_r = redirected
        for i in range(n):
            if not can_send[i]:
                continue
            sent = _sends(units, i)
            for j in range(n):
                if j == i:
                    continue
                if units[i, j] > 0:  # return one quantum home
                    units[i, j] -= 1
                    v, r = score_plan(grid, vio, demand, q, units, avail, rho, mode)
                    units[i, j] += 1
                    if _better(v, r, best_v, best_r, tol, tol_rps):
                        best_kind, best_i, best_j, best_v, best_r = 0, i, j, v, r
                if units[i, j] >= capu[i, j] or _sends(units, j) > 0:
                    continue
                if _receives(units, i) > 0:
                    continue
                if (sent + 1) * q[i] <= demand[i] * (1 + 1e-12):  # add one quantum
                    units[i, j] += 1
                    v, r = score_plan(grid, vio, demand, q, units, avail, rho, mode)
                    units[i, j] -= 1
                    if _better(v, r, best_v, best_r, tol, tol_rps):
                        best_kind, best_i, best_j, best_v, best_r = 1, i, j, v, r
                for k in range(n):  # shift one quantum from k to j
                    if k == i or k == j or units[i, k] == 0:
                        continue
                    units[i, k] -= 1
                    units[i, j] += 1
                    v, r = score_plan(grid, vio, demand, q, units, avail, rho, mode)
                    units[i, j] -= 1
                    units[i, k] += 1
                    if _better(v, r, best_v, best_r, tol, tol_rps):
                        best_kind, best_i, best_j, best_k, best_v, best_r = 2, i, j, k, v, r
        if best_kind < 0:
            break
        if best_kind == 0:
            units[best_i, best_j] -= 1
        else:
            units[best_i, best_j] += 1
            if best_kind == 2:
                units[best_i, best_k] -= 1
        value, redirected = best_v, best_r
    return units, value, redirected


@njit(cache=True, nogil=True)
def build_intakes(grid, vio, demand, q, rho, j, senders, caps):
    """Every intake vector of receiver j (a[s] quanta from senders[s], a[s] <= caps[s]).

    Returns per intake: units [m, s], base cost (perf: what j's own requests and the incoming
    ones violate; cost: j's own excess over rho), and per-sender violations [m, s].
    """
    n_s = senders.shape[0]
    count = 1
    for s in range(n_s):
        count *= caps[s] + 1
    units = np.zeros((count, n_s), dtype=np.int64)
    perf_cost = np.empty(count)
    excess = np.empty(count)
    per_sender = np.zeros((count, n_s))
    a = np.zeros(n_s, dtype=np.int64)
    for m in range(count):
        load = demand[j]
        for s in range(n_s):
            load += a[s] * q[senders[s]]
        own = omega(grid, vio, j, j, load)
        total = demand[j] * own
        for s in range(n_s):
            units[m, s] = a[s]
            if a[s] > 0:
                v = a[s] * q[senders[s]] * omega(grid, vio, senders[s], j, load)
                per_sender[m, s] = v
                total += v
        perf_cost[m] = total
        excess[m] = demand[j] * (own - rho) if own > rho else 0.0
        for s in range(n_s):  # odometer, last sender fastest
            idx = n_s - 1 - s
            a[idx] += 1
            if a[idx] <= caps[idx]:
                break
            a[idx] = 0
    return units, perf_cost, excess, per_sender


@njit(cache=True, nogil=True)
def offsets(units, strides):
    """State offset of each intake row: units[m] . strides (integer, no BLAS)."""
    out = np.zeros(units.shape[0], dtype=np.int64)
    for m in range(units.shape[0]):
        for s in range(units.shape[1]):
            out[m] += units[m, s] * strides[s]
    return out


@njit(cache=True, nogil=True)
def _lower_bound(mode, t, value, vvec, stage, bound_b, bound_own, lb_a, lb_b, rdem):
    """(bound, separable bound) on the final objective of a label.

    Perf: remaining receivers cost at least their least base (lb_a) and each sender's
    remaining quanta at least the cheapest remote rate (bound_b); or, separately, remaining
    receivers at least their cheapest intake (lb_b) and senders their least own cost.
    Cost: receivers' least excess (lb_a) and each sender's least excess given what it has.
    """
    n_s = t.shape[0]
    lb1 = value + lb_a[stage]
    if mode == PERF:
        lb2 = value + lb_b[stage]
        for s in range(n_s):
            lb1 += bound_b[stage, s, t[s]]
            lb2 += bound_own[s, t[s]]
        return max(lb1, lb2), lb1
    for s in range(n_s):
        e = bound_b[stage, s, t[s]] + vvec[s] - rdem[s]
        if e > 0:
            lb1 += e
    return lb1, lb1


@njit(cache=True, nogil=True)
def _redirect_bound(mode, t, vvec, lb1, stage, bound_b, own, m_rate, q_s, upper, rdem, inc, tol):
    """Least redirected rate of any completion whose objective is within inc + tol.

    Each sender's term of the separable bound lb1 may grow only by what the others leave:
    that gives the fewest quanta it must end with.
    """
    n_s = t.shape[0]
    total = 0.0
    for s in range(n_s):
        term = bound_b[stage, s, t[s]]
        if mode == COST:
            term = max(term + vvec[s] - rdem[s], 0.0)
        budget = inc + tol - (lb1 - term)
        lo = -1
        for u in range(t[s], upper[s] + 1):
            c = own[s, u] + (u - t[s]) * q_s[s] * m_rate[stage, s]
            if mode == COST:
                c = max(c + vvec[s] - rdem[s], 0.0)
            if c <= budget:
                lo = u
                break
        if lo < 0:
            return np.inf
        total += lo * q_s[s]
    return total


@njit(cache=True, nogil=True)
def _prunable(
    mode,
    t,
    value,
    vvec,
    stage,
    bound_b,
    bound_own,
    lb_a,
    lb_b,
    own,
    m_rate,
    q_s,
    upper,
    rdem,
    inc,
    inc_rps,
    tol,
    tol_rps,
):
    """True when no completion of this label can beat the incumbent (objective, redirected)."""
    lb, lb1 = _lower_bound(mode, t, value, vvec, stage, bound_b, bound_own, lb_a, lb_b, rdem)
    if lb > inc + tol:
        return True
    if lb < inc - tol:
        return False
    t_lb = _redirect_bound(
        mode, t, vvec, lb1, stage, bound_b, own, m_rate, q_s, upper, rdem, inc, tol
    )
    return t_lb >= inc_rps - tol_rps


@njit(cache=True, nogil=True)
def _grow(arr, size):
    out = np.empty((size,) + arr.shape[1:], dtype=arr.dtype)
    out[: arr.shape[0]] = arr
    return out


@njit(cache=True, nogil=True)
def label_dp(
    mode,
    upper,
    strides,
    q_s,
    own,
    rdem,
    in_start,
    in_units,
    in_off,
    in_cost,
    in_vec,
    bound_b,
    bound_own,
    lb_a,
    lb_b,
    m_rate,
    base_value,
    inc,
    inc_rps,
    tol,
    tol_rps,
    work_limit,
    label_limit,
):
    """Exact DP over receivers, state = quanta sent so far by each sender (§5, quantised).

    Perf labels carry one number (violations so far, one label per state). Cost labels carry
    each sender's remote violations and the receivers' excess (a Pareto set per state),
    because a sender's excess max(0, own + remote - rho D) is only known at the end. Labels
    whose bound cannot beat the incumbent (objective, then redirected) are dropped.
    Returns (status 0 done / 1 stopped, best label or -1, value, redirected, parent, intake,
    work spent: transitions tried plus Pareto comparisons).
    """
    n_s = upper.shape[0]
    n_states = 1
    for s in range(n_s):
        n_states *= upper[s] + 1
    n_r = in_start.shape[0] - 1
    cap = 1024
    lab_state = np.empty(cap, dtype=np.int64)
    lab_value = np.empty(cap)
    lab_vec = np.zeros((cap, max(n_s, 1)))
    lab_parent = np.empty(cap, dtype=np.int64)
    lab_intake = np.empty(cap, dtype=np.int64)
    lab_alive = np.empty(cap, dtype=np.bool_)
    lab_next = np.empty(cap, dtype=np.int64)
    lab_state[0] = 0
    lab_value[0] = base_value
    lab_parent[0] = -1
    lab_intake[0] = -1
    lab_alive[0] = True
    size = 1
    begin = 0
    end = 1
    head = np.full(n_states, -1, dtype=np.int64)
    t = np.zeros(n_s, dtype=np.int64)
    t2 = np.zeros(n_s, dtype=np.int64)
    vec = np.zeros(max(n_s, 1))
    work = 0
    for stage in range(n_r):
        head[:] = -1
        for lab in range(begin, end):
            if not lab_alive[lab]:
                continue
            p = lab_state[lab]
            rem = p
            for s in range(n_s):
                t[s] = rem // strides[s]
                rem -= t[s] * strides[s]
            value = lab_value[lab]
            if _prunable(
                mode,
                t,
                value,
                lab_vec[lab],
                stage,
                bound_b,
                bound_own,
                lb_a,
                lb_b,
                own,
                m_rate,
                q_s,
                upper,
                rdem,
                inc,
                inc_rps,
                tol,
                tol_rps,
            ):
                continue
            for m in range(in_start[stage], in_start[stage + 1]):
                work += 1
                ok = True
                for s in range(n_s):
                    t2[s] = t[s] + in_units[m, s]
                    if t2[s] > upper[s]:
                        ok = False
                        break
                if not ok:
                    continue
                np_ = p + in_off[m]
                nv = value + in_cost[m]
                if mode == PERF:
                    k = head[np_]
                    if k >= 0:
                        if nv < lab_value[k]:
                            lab_value[k] = nv
                            lab_parent[k] = lab
                            lab_intake[k] = m
                        continue
                else:
                    for s in range(n_s):
                        vec[s] = lab_vec[lab, s] + in_vec[m, s]
                    if _prunable(
                        mode,
                        t2,
                        nv,
                        vec,
                        stage + 1,
                        bound_b,
                        bound_own,
                        lb_a,
                        lb_b,
                        own,
                        m_rate,
                        q_s,
                        upper,
                        rdem,
                        inc,
                        inc_rps,
                        tol,
                        tol_rps,
                    ):
                        continue
                    k = head[np_]
                    dominated = False
                    while k >= 0:
                        work += 1
                        if lab_alive[k]:
                            k_le = lab_value[k] <= nv
                            new_le = nv <= lab_value[k]
                            for s in range(n_s):
                                if lab_vec[k, s] > vec[s]:
                                    k_le = False
                                if vec[s] > lab_vec[k, s]:
                                    new_le = False
                            if k_le:
                                dominated = True
                                break
                            if new_le:
                                lab_alive[k] = False
                        k = lab_next[k]
                    if dominated:
                        continue
                if size >= cap:
                    if size >= label_limit:
                        return 1, -1, 0.0, 0.0, lab_parent[:size], lab_intake[:size], work
                    cap *= 2
                    lab_state = _grow(lab_state, cap)
                    lab_value = _grow(lab_value, cap)
                    lab_vec = _grow(lab_vec, cap)
                    lab_parent = _grow(lab_parent, cap)
                    lab_intake = _grow(lab_intake, cap)
                    lab_alive = _grow(lab_alive, cap)
                    lab_next = _grow(lab_next, cap)
                lab_state[size] = np_
                lab_value[size] = nv
                for s in range(n_s):
                    lab_vec[size, s] = vec[s] if mode == COST else 0.0
                lab_parent[size] = lab
                lab_intake[size] = m
                lab_alive[size] = True
                lab_next[size] = head[np_]
                head[np_] = size
                size += 1
            if work > work_limit:
                return 1, -1, 0.0, 0.0, lab_parent[:size], lab_intake[:size], work
        begin = end
        end = size
    best = -1
    best_value = inc
    best_rps = inc_rps
    for lab in range(begin, end):
        if not lab_alive[lab]:
            continue
        rem = lab_state[lab]
        value = lab_value[lab]
        redirected = 0.0
        for s in range(n_s):
            t[s] = rem // strides[s]
            rem -= t[s] * strides[s]
            redirected += t[s] * q_s[s]
            if mode == PERF:
                value += own[s, t[s]]
            else:
                e = own[s, t[s]] + lab_vec[lab, s] - rdem[s]
                if e > 0:
                    value += e
        if _better(value, redirected, best_value, best_rps, tol, tol_rps):
            best, best_value, best_rps = lab, value, redirected
    return 0, best, best_value, best_rps, lab_parent[:size], lab_intake[:size], work


@njit(cache=True, nogil=True)
def dual_value(mu, own, upper, in_start, in_units, in_cost, grad):
    """Lagrangian bound L(mu) of one partition (perf), and its supergradient in ``grad``.

    Relaxing "sender s's total = sum of what receivers take from it" with prices mu_s per
    quantum separates the problem: each sender minimises own_s(u) - mu_s u, each receiver
    G_k(a) + mu . a. For any mu, L(mu) is a lower bound on the partition's optimum.
    """
    n_s = upper.shape[0]
    n_r = in_start.shape[0] - 1
    total = 0.0
    for s in range(n_s):
        best = np.inf
        best_u = 0
        for u in range(upper[s] + 1):
            v = own[s, u] - mu[s] * u
            if v < best:
                best, best_u = v, u
        total += best
        grad[s] = -best_u
    for k in range(n_r):
        best = np.inf
        best_m = in_start[k]
        for m in range(in_start[k], in_start[k + 1]):
            v = in_cost[m]
            for s in range(n_s):
                v += mu[s] * in_units[m, s]
            if v < best:
                best, best_m = v, m
        total += best
        for s in range(n_s):
            grad[s] += in_units[best_m, s]
    return total


@njit(cache=True, nogil=True)
def dual_ascent(mu0, own, upper, in_start, in_units, in_cost, target, iterations):
    """Best prices found by supergradient ascent with Polyak steps toward ``target``."""
    n_s = upper.shape[0]
    mu = mu0.copy()
    grad = np.zeros(n_s)
    best_mu = mu0.copy()
    best = -np.inf
    theta = 1.0
    stall = 0
    for _ in range(iterations):
        value = dual_value(mu, own, upper, in_start, in_units, in_cost, grad)
        if best == -np.inf or value > best + 1e-12 * (1.0 + abs(best)):
            best = value
            best_mu[:] = mu
            stall = 0
        else:
            stall += 1
            if stall >= 4:
                theta *= 0.5
                stall = 0
        norm = 0.0
        for s in range(n_s):
            norm += grad[s] * grad[s]
        if norm == 0.0 or target - value <= 0.0:
            break
        step = theta * (target - value) / norm
        for s in range(n_s):
            mu[s] += step * grad[s]
    return best_mu, best


@njit(cache=True, nogil=True)
def _receiver_terms(grid, vio, demand, q, rho, mode, j, senders, caps, own, rdem, a, h):
    """Receiver j's term at intake ``a`` quanta and each sender's term h[s, x] (x to j).

    With one receiver every sender's total is what it sends to j, so once j's load
    D_j + a q is fixed each sender's whole contribution depends on its own x alone.
    """
    load = demand[j] + a * q
    w = omega(grid, vio, j, j, load)
    if mode == PERF:
        c = demand[j] * w
    else:
        c = demand[j] * (w - rho) if w > rho else 0.0
    least = 0.0
    for s in range(senders.shape[0]):
        rate = q * omega(grid, vio, senders[s], j, load)
        best = np.inf
        for x in range(caps[s] + 1):
            v = own[s, x] + (x * rate if x > 0 else 0.0)
            if mode == COST:
                v = v - rdem[s] if v > rdem[s] else 0.0
            h[s, x] = v
            if v < best:
                best = v
        least += best
    return c, least


@njit(cache=True, nogil=True)
def single_receiver(grid, vio, demand, q, rho, mode, j, senders, caps, own, rdem, base,
                    inc, inc_rps, tol, tol_rps, work_limit):  # fmt: skip
    """Exact optimum of a partition with one receiver j and equal quanta ``q`` (§5).

    For each total intake a of j (its load, hence every curve value, is then fixed) a
    knapsack DP over senders splits a among them; a is enumerated in increasing order so
    ties go to fewer redirected quanta. Intakes whose separable bound (receiver term plus
    each sender's least term) cannot beat the incumbent (objective, then redirected) are
    skipped. Stops once ``work_limit`` knapsack steps are spent. Returns (finished, best a
    or -1, value, redirected, x[s], work spent).
    """
    n_s = senders.shape[0]
    total = 0
    width = 1
    for s in range(n_s):
        total += caps[s]
        width = max(width, caps[s] + 1)
    h = np.empty((n_s, width))
    f = np.empty(total + 1)
    g = np.empty(total + 1)
    best_a = -1
    best_v = inc
    best_r = inc_rps
    work = 0
    done = True
    for a in range(total + 1):
        if work > work_limit:
            done = False
            break
        c, least = _receiver_terms(grid, vio, demand, q, rho, mode, j, senders, caps, own,
                                   rdem, a, h)  # fmt: skip
        lb = base + c + least
        r = a * q
        if lb > best_v + tol or (lb >= best_v - tol and r >= best_r - tol_rps):
            continue
        f[:] = np.inf
        f[0] = 0.0
        reach = 0
        for s in range(n_s):
            new_reach = min(reach + caps[s], a)
            g[: new_reach + 1] = np.inf
            for b in range(reach + 1):
                if f[b] == np.inf:
                    continue
                work += min(caps[s], a - b) + 1
                for x in range(min(caps[s], a - b) + 1):
                    v = f[b] + h[s, x]
                    if v < g[b + x]:
                        g[b + x] = v
            reach = new_reach
            f[: reach + 1] = g[: reach + 1]
        if reach < a or f[a] == np.inf:
            continue
        value = base + c + f[a]
        if _better(value, r, best_v, best_r, tol, tol_rps):
            best_a, best_v, best_r = a, value, r
    x_out = np.zeros(n_s, dtype=np.int64)
    if best_a < 0:
        return done, best_a, best_v, best_r, x_out, work
    a = best_a
    _receiver_terms(grid, vio, demand, q, rho, mode, j, senders, caps, own, rdem, a, h)
    table = np.full((n_s + 1, a + 1), np.inf)
    choice = np.zeros((n_s + 1, a + 1), dtype=np.int64)
    table[0, 0] = 0.0
    for s in range(n_s):
        for b in range(a + 1):
            if table[s, b] == np.inf:
                continue
            for x in range(min(caps[s], a - b) + 1):
                v = table[s, b] + h[s, x]
                if v < table[s + 1, b + x]:
                    table[s + 1, b + x] = v
                    choice[s + 1, b + x] = x
    b = a
    for s in range(n_s - 1, -1, -1):
        x_out[s] = choice[s + 1, b]
        b -= x_out[s]
    return done, best_a, best_v, best_r, x_out, work


@njit(cache=True, nogil=True)
def _pair_terms(grid, vio, demand, q, rho, mode, j1, j2, senders, caps1, caps2, own, rdem,
                upper, a1, a2, rates):  # fmt: skip
    """Receivers' terms at intakes (a1, a2) quanta; rates[s, k] per quantum of s at k."""
    load1 = demand[j1] + a1 * q
    load2 = demand[j2] + a2 * q
    w1 = omega(grid, vio, j1, j1, load1)
    w2 = omega(grid, vio, j2, j2, load2)
    if mode == PERF:
        c = demand[j1] * w1 + demand[j2] * w2
    else:
        c = (demand[j1] * (w1 - rho) if w1 > rho else 0.0) + (
            demand[j2] * (w2 - rho) if w2 > rho else 0.0
        )
    for s in range(senders.shape[0]):
        rates[s, 0] = q * omega(grid, vio, senders[s], j1, load1) if caps1[s] > 0 else np.inf
        rates[s, 1] = q * omega(grid, vio, senders[s], j2, load2) if caps2[s] > 0 else np.inf
    return c


@njit(cache=True, nogil=True)
def _sender_term(mode, own_u, rdem_s, cost):
    v = own_u + cost
    if mode == COST:
        return v - rdem_s if v > rdem_s else 0.0
    return v


@njit(cache=True, nogil=True)
def _pair_dp(mode, own, rdem, upper, caps1, caps2, rates, a1, a2, f, g, choice, keep):
    """Exact 2-D knapsack: least sum of sender terms taking a1 quanta to j1 and a2 to j2.

    f[b1, b2] after each sender; ``keep`` stores each sender's (x1, x2) for the plan.
    Returns (value, work).
    """
    n_s = upper.shape[0]
    f[: a1 + 1, : a2 + 1] = np.inf
    f[0, 0] = 0.0
    r1 = 0
    r2 = 0
    work = 0
    for s in range(n_s):
        n1 = min(r1 + caps1[s], a1)
        n2 = min(r2 + caps2[s], a2)
        g[: n1 + 1, : n2 + 1] = np.inf
        for b1 in range(r1 + 1):
            for b2 in range(r2 + 1):
                base = f[b1, b2]
                if base == np.inf:
                    continue
                for x1 in range(min(caps1[s], a1 - b1) + 1):
                    c1 = x1 * rates[s, 0] if x1 > 0 else 0.0
                    top = min(caps2[s], a2 - b2, upper[s] - x1)
                    work += top + 1
                    for x2 in range(top + 1):
                        cost = c1 + (x2 * rates[s, 1] if x2 > 0 else 0.0)
                        v = base + _sender_term(mode, own[s, x1 + x2], rdem[s], cost)
                        if v < g[b1 + x1, b2 + x2]:
                            g[b1 + x1, b2 + x2] = v
                            if keep:
                                choice[s, b1 + x1, b2 + x2, 0] = x1
                                choice[s, b1 + x1, b2 + x2, 1] = x2
        r1, r2 = n1, n2
        f[: r1 + 1, : r2 + 1] = g[: r1 + 1, : r2 + 1]
    if r1 < a1 or r2 < a2:
        return np.inf, work
    return f[a1, a2], work


@njit(cache=True, nogil=True)
def _least_terms(grid, vio, demand, q, rho, mode, j, senders, caps, caps1, caps2, own, rdem,
                 upper, c, g):  # fmt: skip
    """Receiver j's own term c[a] and each sender's least term g[a, s] at j's rate, for every
    intake a (the sender's quanta all priced at j's rate; inf rate when it cannot reach j).
    Returns the work spent."""
    n_s = senders.shape[0]
    work = 0
    for a in range(c.shape[0]):
        load = demand[j] + a * q
        w = omega(grid, vio, j, j, load)
        if mode == PERF:
            c[a] = demand[j] * w
        else:
            c[a] = demand[j] * (w - rho) if w > rho else 0.0
        for s in range(n_s):
            m = q * omega(grid, vio, senders[s], j, load) if caps[s] > 0 else np.inf
            top = min(upper[s], caps1[s] + caps2[s])
            best = np.inf
            for u in range(top + 1):
                v = _sender_term(mode, own[s, u], rdem[s], u * m if u > 0 else 0.0)
                if v < best:
                    best = v
            g[a, s] = best
            work += top + 1
    return work


@njit(cache=True, nogil=True)
def two_receivers(grid, vio, demand, q, rho, mode, j1, j2, senders, caps1, caps2, upper, own,
                  rdem, base, inc, inc_rps, tol, tol_rps, work_limit):  # fmt: skip
    """Exact optimum of a partition with two receivers and equal quanta ``q`` (§5).

    For each pair of total intakes (a1, a2) the receivers' loads, so every curve value, are
    fixed. Pairs are screened by two relaxations that drop how each sender splits its
    total: (i) each sender's least term alone; (ii) a 1-D knapsack over senders giving
    a1 + a2 quanta in all, each quantum at its sender's cheaper receiver rate (a sender's
    term only grows with its remote violations, so this is below the exact value). Pairs
    that survive against the incumbent (objective, then redirected) get the exact 2-D DP
    over senders, in increasing (bound, a1 + a2, a1) order. Stops after ``work_limit``
    steps. Returns (finished, a1 or -1, a2, value, redirected, x[s, 2], work spent).
    """
    n_s = senders.shape[0]
    tot1 = 0
    tot2 = 0
    width = 1
    for s in range(n_s):
        tot1 += caps1[s]
        tot2 += caps2[s]
        width = max(width, upper[s] + 1)
    rates = np.empty((n_s, 2))
    n_pairs = (tot1 + 1) * (tot2 + 1)
    lb = np.empty(n_pairs)
    recv = np.empty(n_pairs)
    h = np.empty(width)
    work = 0
    x_out = np.zeros((n_s, 2), dtype=np.int64)
    # (i): separable bound of every pair. A receiver's rates depend on its own intake only,
    # and u * min(m1, m2) = min(u m1, u m2), so a sender's least term at (a1, a2) is the
    # lesser of its least terms at j1's rate (a1) and at j2's rate (a2): tabulate both once.
    c1 = np.empty(tot1 + 1)
    c2 = np.empty(tot2 + 1)
    g1 = np.empty((tot1 + 1, n_s))
    g2 = np.empty((tot2 + 1, n_s))
    work += _least_terms(grid, vio, demand, q, rho, mode, j1, senders, caps1, caps1, caps2,
                         own, rdem, upper, c1, g1)  # fmt: skip
    work += _least_terms(grid, vio, demand, q, rho, mode, j2, senders, caps2, caps1, caps2,
                         own, rdem, upper, c2, g2)  # fmt: skip
    if work > work_limit:
        return False, -1, -1, inc, inc_rps, x_out, work
    for a1 in range(tot1 + 1):
        if work > work_limit:
            return False, -1, -1, inc, inc_rps, x_out, work
        for a2 in range(tot2 + 1):
            work += n_s
            c = c1[a1] + c2[a2]
            total = base + c
            for s in range(n_s):
                total += min(g1[a1, s], g2[a2, s])
            lb[a1 * (tot2 + 1) + a2] = total
            recv[a1 * (tot2 + 1) + a2] = c
    order = np.argsort(lb, kind="mergesort")  # by bound, ties by (a1, a2)
    f = np.empty((tot1 + 1, tot2 + 1))
    g = np.empty((tot1 + 1, tot2 + 1))
    k1 = np.empty(tot1 + tot2 + 1)
    k2 = np.empty(tot1 + tot2 + 1)
    dummy = np.zeros((1, 1, 1, 2), dtype=np.int64)
    best_a1 = -1
    best_a2 = -1
    best_v = inc
    best_r = inc_rps
    done = True
    for idx in range(n_pairs):
        p = order[idx]
        a1 = p // (tot2 + 1)
        a2 = p - a1 * (tot2 + 1)
        r = (a1 + a2) * q
        if lb[p] > best_v + tol:
            break  # sorted: every later pair is bounded out too
        if lb[p] >= best_v - tol and r >= best_r - tol_rps:
            continue
        if work > work_limit:
            done = False
            break
        c = _pair_terms(grid, vio, demand, q, rho, mode, j1, j2, senders, caps1, caps2, own,
                        rdem, upper, a1, a2, rates)  # fmt: skip
        total_a = a1 + a2
        k1[: total_a + 1] = np.inf  # (ii): 1-D knapsack at the cheaper rate
        k1[0] = 0.0
        reach = 0
        for s in range(n_s):
            m = min(rates[s, 0], rates[s, 1])
            top = min(upper[s], caps1[s] + caps2[s])
            for u in range(top + 1):
                h[u] = _sender_term(mode, own[s, u], rdem[s], u * m if u > 0 else 0.0)
            new_reach = min(reach + top, total_a)
            k2[: new_reach + 1] = np.inf
            for b in range(reach + 1):
                if k1[b] == np.inf:
                    continue
                hi = min(top, total_a - b)
                work += hi + 1
                for u in range(hi + 1):
                    v = k1[b] + h[u]
                    if v < k2[b + u]:
                        k2[b + u] = v
            reach = new_reach
            k1[: reach + 1] = k2[: reach + 1]
        if reach < total_a or k1[total_a] == np.inf:
            continue
        bound = base + c + k1[total_a]
        if bound > best_v + tol or (bound >= best_v - tol and r >= best_r - tol_rps):
            continue
        v, w = _pair_dp(mode, own, rdem, upper, caps1, caps2, rates, a1, a2, f, g, dummy, False)
        work += w
        if v == np.inf:
            continue
        value = base + c + v
        if _better(value, r, best_v, best_r, tol, tol_rps):
            best_a1, best_a2, best_v, best_r = a1, a2, value, r
    if best_a1 < 0:
        return done, best_a1, best_a2, best_v, best_r, x_out, work
    a1, a2 = best_a1, best_a2
    _pair_terms(grid, vio, demand, q, rho, mode, j1, j2, senders, caps1, caps2, own, rdem,
                upper, a1, a2, rates)  # fmt: skip
    choice = np.zeros((n_s, a1 + 1, a2 + 1, 2), dtype=np.int64)
    _pair_dp(mode, own, rdem, upper, caps1, caps2, rates, a1, a2, f, g, choice, True)
    b1, b2 = a1, a2
    for s in range(n_s - 1, -1, -1):
        x_out[s, 0] = choice[s, b1, b2, 0]
        x_out[s, 1] = choice[s, b1, b2, 1]
        b1 -= x_out[s, 0]
        b2 -= x_out[s, 1]
    return done, best_a1, best_a2, best_v, best_r, x_out, work

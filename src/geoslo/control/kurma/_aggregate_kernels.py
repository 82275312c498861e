"""Compiled kernels of the aggregate Lagrangian bound for KurmaPerf (§5; see _aggregate.py).

A site's net quanta t is negative when it sends (u = -t), positive when it receives
(a = t), 0 when neutral; values are indexed v = t + U_i. With prices pi (one per origin,
per quantum sent), a site's term is

* sender: own_i(u) + pi_i u;
* neutral: own_i(0);
* receiver: local_i(a) + min over x (sum x_k = a, x_k <= cap_ki) of sum_k x_k (c_ki(a) - pi_k),
  filled greedily by price;

and the bound is the least sum of terms with sum_i t_i = 0: a min-plus DP over the sites
(state: running sum). Plain-Python reference: _aggregate_reference.py.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from geoslo.control.kurma._solver_kernels import _better
from geoslo.control.kurma._solver_kernels import score_plan as _score

__all__ = [
    "site_terms",
    "receiver_take",
    "forward",
    "backtrack",
    "backward",
    "fix_values",
    "transport",
    "subgradient",
]

INF = np.inf
OPEN, CLOSED, BALANCED = 0, 1, 2  # a node's state after subgradient steps


@njit(cache=True, nogil=True)
def _sorted_prices(c, cap, pi, i, a, order, price):
    """Origins that may send to i, sorted by price c_ki(a) - pi_k (insertion sort; stable)."""
    m = 0
    n = cap.shape[0]
    for k in range(n):
        if cap[k, i] > 0:
            p = c[k, i, a] - pi[k]
            pos = m
            while pos > 0 and price[pos - 1] > p:
                price[pos] = price[pos - 1]
                order[pos] = order[pos - 1]
                pos -= 1
            price[pos] = p
            order[pos] = k
            m += 1
    return m


@njit(cache=True, nogil=True)
def site_terms(own, local, c, cap, upper, intake, pi, allowed, h):
    """h[i, v]: site i's term at net quanta t = v - upper[i] under prices pi (inf: not allowed).

    Returns the work done (price evaluations).
    """
    n = upper.shape[0]
    order = np.empty(n, dtype=np.int64)
    price = np.empty(n)
    work = 0
    for i in range(n):
        up = upper[i]
        for v in range(h.shape[1]):
            h[i, v] = INF
        for u in range(up, 0, -1):
            if allowed[i, up - u]:
                h[i, up - u] = own[i, u] + pi[i] * u
        if allowed[i, up]:
            h[i, up] = own[i, 0]
        for a in range(1, intake[i] + 1):
            if not allowed[i, up + a]:
                continue
            m = _sorted_prices(c, cap, pi, i, a, order, price)
            work += m + m * m // 4  # an insertion sort
            left = a
            total = local[i, a]
            for r in range(m):
                if left == 0:
                    break
                take = min(left, cap[order[r], i])
                total += take * price[r]
                left -= take
            if left == 0:
                h[i, up + a] = total
    return work


@njit(cache=True, nogil=True)
def receiver_take(c, cap, pi, i, a, x):
    """x[k]: quanta receiver i takes from each origin k at intake a (the greedy fill)."""
    n = cap.shape[0]
    order = np.empty(n, dtype=np.int64)
    price = np.empty(n)
    for k in range(n):
        x[k] = 0
    m = _sorted_prices(c, cap, pi, i, a, order, price)
    left = a
    for r in range(m):
        if left == 0:
            break
        take = min(left, cap[order[r], i])
        x[order[r]] = take
        left -= take


@njit(cache=True, nogil=True)
def _spans(h, upper, intake, tmin, tmax):
    """tmin[k], tmax[k]: site k's least and largest net quanta with a finite term."""
    n = upper.shape[0]
    for k in range(n):
        up = upper[k]
        tmin[k] = 1
        tmax[k] = 0
        for v in range(up + intake[k] + 1):
            if h[k, v] < INF:
                if tmin[k] > tmax[k]:
                    tmin[k] = v - up
                tmax[k] = v - up
    return n


@njit(cache=True, nogil=True)
def _window(tmin, tmax, k):
    """Running sums after sites [0, k) from which 0 is still reachable, as (low, high)."""
    n = tmin.shape[0]
    lo_done = 0
    hi_done = 0
    for i in range(k):
        lo_done += tmin[i]
        hi_done += tmax[i]
    lo_rest = 0
    hi_rest = 0
    for i in range(k, n):
        lo_rest += tmin[i]
        hi_rest += tmax[i]
    return max(lo_done, -hi_rest), min(hi_done, -lo_rest)


@njit(cache=True, nogil=True)
def forward(h, upper, intake, offset, table):
    """table[k, s + offset]: least sum of the terms of sites [0, k) whose net quanta sum to s
    (only running sums from which 0 stays reachable are set).

    Returns the work done (running sums scanned plus transitions); -1 when a site has no
    finite term (the relaxation is infeasible).
    """
    n = upper.shape[0]
    tmin = np.empty(n, dtype=np.int64)
    tmax = np.empty(n, dtype=np.int64)
    _spans(h, upper, intake, tmin, tmax)
    for k in range(n):
        if tmin[k] > tmax[k]:
            table[n, offset] = INF
            return -1
    work = 0
    lo, hi = _window(tmin, tmax, 0)
    for s in range(lo, hi + 1):
        table[0, s + offset] = INF
    table[0, offset] = 0.0
    for k in range(n):
        lo, hi = _window(tmin, tmax, k)
        nlo, nhi = _window(tmin, tmax, k + 1)
        for t in range(nlo, nhi + 1):
            table[k + 1, t + offset] = INF
        work += (hi - lo + 1) + (nhi - nlo + 1)
        up = upper[k]
        for s in range(lo, hi + 1):
            base = table[k, s + offset]
            if base == INF:
                continue
            vlo = max(tmin[k], nlo - s) + up
            vhi = min(tmax[k], nhi - s) + up
            for v in range(vlo, vhi + 1):
                term = h[k, v]
                if term == INF:
                    continue
                work += 1
                value = base + term
                t = s + v - up + offset
                if value < table[k + 1, t]:
                    table[k + 1, t] = value
    return work


@njit(cache=True, nogil=True)
def backtrack(h, upper, intake, offset, table, t_out):
    """t_out[i]: the net quanta of a least plan of the relaxation (its sum is 0)."""
    n = upper.shape[0]
    tmin = np.empty(n, dtype=np.int64)
    tmax = np.empty(n, dtype=np.int64)
    _spans(h, upper, intake, tmin, tmax)
    s = 0
    for k in range(n - 1, -1, -1):
        target = table[k + 1, s + offset]
        up = upper[k]
        lo, hi = _window(tmin, tmax, k)
        best_v = -1
        for v in range(tmin[k] + up, tmax[k] + up + 1):
            term = h[k, v]
            if term == INF:
                continue
            prev = s - (v - up)
            if prev < lo or prev > hi:
                continue
            base = table[k, prev + offset]
            if base == INF:
                continue
            if abs(base + term - target) <= 1e-9 * (1.0 + abs(target)):
                best_v = v
                break
        t_out[k] = best_v - up
        s -= best_v - up


@njit(cache=True, nogil=True)
def backward(h, upper, intake, offset, table):
    """table[k, s + offset]: least sum of the terms of sites [k, n) whose net quanta sum to
    s (only sums that a prefix can cancel are set). Returns the work done."""
    n = upper.shape[0]
    tmin = np.empty(n, dtype=np.int64)
    tmax = np.empty(n, dtype=np.int64)
    _spans(h, upper, intake, tmin, tmax)
    work = 0
    for k in range(n, -1, -1):
        lo, hi = _window(tmin, tmax, k)
        for s in range(-hi, -lo + 1):
            table[k, s + offset] = INF
        work += hi - lo + 1
    table[n, offset] = 0.0
    for k in range(n - 1, -1, -1):
        up = upper[k]
        lo, hi = _window(tmin, tmax, k + 1)  # sums of the prefix [0, k+1)
        plo, phi = _window(tmin, tmax, k)
        for s in range(-hi, -lo + 1):  # sums of the suffix [k+1, n)
            base = table[k + 1, s + offset]
            if base == INF:
                continue
            vlo = max(tmin[k], -phi - s) + up
            vhi = min(tmax[k], -plo - s) + up
            for v in range(vlo, vhi + 1):
                term = h[k, v]
                if term == INF:
                    continue
                work += 1
                t = s + v - up + offset
                value = base + term
                if value < table[k, t]:
                    table[k, t] = value
    return work


@njit(cache=True, nogil=True)
def fix_values(h, upper, intake, offset, fwd, bwd, limit, allowed):
    """Disallow every (site, value) whose best completion's bound exceeds ``limit``.

    The bound of site k at value v is min over s of fwd[k, s] + h[k, v] + bwd[k+1, -s-t].
    Returns (values left, work done).
    """
    n = upper.shape[0]
    tmin = np.empty(n, dtype=np.int64)
    tmax = np.empty(n, dtype=np.int64)
    _spans(h, upper, intake, tmin, tmax)
    left = 0
    work = 0
    for k in range(n):
        up = upper[k]
        lo, hi = _window(tmin, tmax, k)
        nlo, nhi = _window(tmin, tmax, k + 1)
        for v in range(up + intake[k] + 1):
            if not allowed[k, v]:
                continue
            term = h[k, v]
            best = INF
            if term < INF:
                t = v - up
                for s in range(max(lo, nlo - t), min(hi, nhi - t) + 1):
                    a = fwd[k, s + offset]
                    if a == INF:
                        continue
                    b = bwd[k + 1, -s - t + offset]
                    work += 1
                    if a + b < best:
                        best = a + b
            if term == INF or best + term > limit:
                allowed[k, v] = False
            else:
                left += 1
    return left, work


@njit(cache=True, nogil=True)
def transport(supply, demand, cost, cap):
    """Least-cost integral flow from senders (supply) to receivers (demand) (successive
    shortest paths, Bellman-Ford on the residual graph). cost[s, r] per unit, cap[s, r] the
    most units. Returns (flow[s, r], total cost); total is inf when the demand cannot be met.
    """
    ns = supply.shape[0]
    nr = demand.shape[0]
    flow = np.zeros((ns, nr), dtype=np.int64)
    left_s = supply.copy()
    left_r = demand.copy()
    need = 0
    for r in range(nr):
        need += demand[r]
    nodes = ns + nr
    dist = np.empty(nodes)
    parent = np.empty(nodes, dtype=np.int64)
    total = 0.0
    while need > 0:
        # Distances from every sender with supply left (a super source).
        for v in range(nodes):
            dist[v] = INF
            parent[v] = -1
        for s in range(ns):
            if left_s[s] > 0:
                dist[s] = 0.0
        for _ in range(nodes):
            changed = False
            for s in range(ns):
                for r in range(nr):
                    if flow[s, r] < cap[s, r] and dist[s] + cost[s, r] < dist[ns + r] - 1e-12:
                        dist[ns + r] = dist[s] + cost[s, r]
                        parent[ns + r] = s
                        changed = True
                    if flow[s, r] > 0 and dist[ns + r] - cost[s, r] < dist[s] - 1e-12:
                        dist[s] = dist[ns + r] - cost[s, r]
                        parent[s] = ns + r
                        changed = True
            if not changed:
                break
        end = -1
        for r in range(nr):
            if left_r[r] > 0 and dist[ns + r] < INF and (end < 0 or dist[ns + r] < dist[end]):
                end = ns + r
        if end < 0:
            return flow, INF
        # Bottleneck along the path back to a sender with supply left.
        amount = left_r[end - ns]
        v = end
        while parent[v] >= 0:
            p = parent[v]
            if v >= ns:  # forward arc p -> v
                amount = min(amount, cap[p, v - ns] - flow[p, v - ns])
            else:  # backward arc p (receiver) -> v (sender)
                amount = min(amount, flow[v, p - ns])
            v = p
        amount = min(amount, left_s[v])
        start = v
        v = end
        while parent[v] >= 0:
            p = parent[v]
            if v >= ns:
                flow[p, v - ns] += amount
                total += amount * cost[p, v - ns]
            else:
                flow[v, p - ns] -= amount
                total -= amount * cost[v, p - ns]
            v = p
        left_s[start] -= amount
        left_r[end - ns] -= amount
        need -= amount
    return flow, total


@njit(cache=True, nogil=True)
def _repair(c, cap, t, sites, units):
    """The exact transportation plan of net quanta t, written into units (problem indices).

    Returns (feasible, work).
    """
    n = t.shape[0]
    ns = 0
    nr = 0
    for i in range(n):
        if t[i] < 0:
            ns += 1
        elif t[i] > 0:
            nr += 1
    if ns == 0:
        return False, 0
    snd = np.empty(ns, dtype=np.int64)
    rcv = np.empty(nr, dtype=np.int64)
    ns = 0
    nr = 0
    for i in range(n):
        if t[i] < 0:
            snd[ns] = i
            ns += 1
        elif t[i] > 0:
            rcv[nr] = i
            nr += 1
    supply = np.empty(ns, dtype=np.int64)
    need = np.empty(nr, dtype=np.int64)
    cost = np.empty((ns, nr))
    caps = np.empty((ns, nr), dtype=np.int64)
    for a in range(ns):
        supply[a] = -t[snd[a]]
    for b in range(nr):
        need[b] = t[rcv[b]]
        for a in range(ns):
            cost[a, b] = c[snd[a], rcv[b], need[b]]
            caps[a, b] = cap[snd[a], rcv[b]]
    flow, total = transport(supply, need, cost, caps)
    work = ns * nr * (ns + nr)
    if total == INF:
        return False, work
    units[:, :] = 0
    for a in range(ns):
        for b in range(nr):
            units[sites[snd[a]], sites[rcv[b]]] = flow[a, b]
    return True, work


@njit(cache=True, nogil=True)
def subgradient(
    own,
    local,
    c,
    cap,
    upper,
    intake,
    offset,
    allowed,
    pi,
    iterations,
    stall_limit,
    h,
    fwd,
    t,
    base,
    problem,
    incumbent,
    best_units,
    scratch_units,
    tol,
    tol_rps,
    budget,
):
    """Subgradient steps on the prices of one node, repairing every relaxed plan.

    ``problem`` is (grid, vio, demand, q, avail, rho, mode, sites) for scoring plans;
    ``incumbent`` [value, redirected] and ``best_units`` are updated in place when a repair
    beats them. ``pi`` ends at the best prices found. Returns (best bound with base, status,
    site with the largest imbalance, work): status 1 when the node is closed (infeasible,
    its bound cannot beat the incumbent, or its relaxed plan is a plan), else 0.
    """
    grid, vio, demand, q, avail, rho, mode, sites = problem
    n = upper.shape[0]
    best = -INF
    best_pi = pi.copy()
    step = 1.0
    stall = 0
    work = 0
    x = np.empty(n, dtype=np.int64)
    gradient = np.empty(n)
    last_t = np.full(n, -(10**9), dtype=np.int64)
    for _ in range(iterations):
        if work > budget:
            break
        work += site_terms(own, local, c, cap, upper, intake, pi, allowed, h)
        w = forward(h, upper, intake, offset, fwd)
        if w < 0:
            return INF, CLOSED, work
        work += w
        bound = base + fwd[n, offset]
        if bound == INF:
            return INF, CLOSED, work
        if bound > best + tol:
            best = bound
            best_pi[:] = pi
            stall = 0
        else:
            stall += 1
            if stall >= stall_limit:
                step /= 2
                stall = 0
        if best > incumbent[0] + tol:
            pi[:] = best_pi
            return best, CLOSED, work
        backtrack(h, upper, intake, offset, fwd, t)
        same = True
        for i in range(n):
            if t[i] != last_t[i]:
                same = False
            last_t[i] = t[i]
        if not same:
            ok, w = _repair(c, cap, t, sites, scratch_units)
            work += w
            if ok:
                value, rps = _score(grid, vio, demand, q, scratch_units, avail, rho, mode)
                if _better(value, rps, incumbent[0], incumbent[1], tol, tol_rps):
                    incumbent[0] = value
                    incumbent[1] = rps
                    best_units[:, :] = scratch_units
        for i in range(n):
            gradient[i] = max(-t[i], 0)
        for j in range(n):
            if t[j] > 0:
                receiver_take(c, cap, pi, j, t[j], x)
                for k in range(n):
                    gradient[k] -= x[k]
        norm = 0.0
        for i in range(n):
            norm += gradient[i] * gradient[i]
        if norm == 0.0:
            pi[:] = best_pi
            return best, BALANCED, work  # the relaxed plan is a plan: its repair is optimal here
        gap = max(incumbent[0] - bound, tol)
        for i in range(n):
            pi[i] += step * gap / norm * gradient[i]
    pi[:] = best_pi
    return best, OPEN, work

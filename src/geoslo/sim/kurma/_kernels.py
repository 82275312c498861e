"""Hot loops of the request-level simulator, compiled with numba.

The same source runs uncompiled as the plain-Python reference (`_reference.py`
loads this file with ``_PURE_PYTHON = True``), so kernel and reference can be
compared exactly on identical pre-generated random numbers.

Time advances in slices (default 10 ms). In a slice every source routes its
arrivals and appends them to a pending buffer keyed by arrival time at the
server; at the slice end the pending requests that reached their server before
the slice end are sorted by (server arrival, sequence number) and run through
the FCFS (Lindley) recursion of their server (into its first free thread, on a clock
that stops during the site's pauses: the backend's tails, `_params`). Feedback to adaptive policies
(the response observed at the source) is applied at the first slice end after
it reaches the source, in (feedback time, sequence number) order; responses in
flight wait in a 4-ary min-heap on that key, so a slice costs O(log n) per
feedback applied, not a scan of everything in flight, and local responses, whose
feedback times never decrease per server, in one FIFO per server (O(1)).
"""

from __future__ import annotations

import math

import numpy as np

if globals().get("_PURE_PYTHON", False):

    def _jit(func):
        return func

    _inline = _jit

else:
    from numba import njit

    _jit = njit(cache=True)
    # small helpers: inlined into the caller's IR. Inlining does not remove numba's
    # atomic reference counting of array arguments (perf: NRT_incref/decref took
    # about half of the kernel's time), so the two hottest per-request paths (the
    # read dispatch in run_chunk and the recording in _process_servers) are written
    # out instead of calling helpers that take many arrays; per-request helpers take
    # scalars where they can (C3's psi) and allocate nothing (DynamicSnitch's routing).
    _inline = njit(cache=True, inline="always")

# Policy codes.
RATES = 0
GLOBAL_RR = 1
LATENCY_AWARE = 2
DYNAMIC_SNITCH = 3
C3 = 4

# Server choice inside the chosen site (geoslo.control.kurma.SERVER_CHOICES, whose comment
# gives the semantics); SC_OWN: the site choice's own server (a uniform one for "rates").
SC_OWN = 0
SC_RANDOM = 1
SC_ROUND_ROBIN = 2
SC_LEAST_OUTSTANDING = 3  # from here on a choice counts its coordinator's requests in flight
SC_P2C = 4
SC_C3 = 5

# Columns of the per-request random inputs `req` (NREQ, n).
RQ_T = 0
RQ_ROUTE = 1  # rows 1..6 are uniforms, generated in one block
RQ_SERVER = 2
RQ_USTALL = 3
RQ_RESID = 4
RQ_AUX = 5
RQ_KEEP = 6
RQ_EBASE = 7
RQ_WRITE = 8
RQ_SC = 9  # a uniform for the server choice's second draw (p2c only; drawn last)
NREQ = 10

# Float columns of pending server work `pf`.
PF_ARR = 0
PF_SVC = 1
PF_ISSUE = 2
PF_SEND = 3
PF_RTT = 4
PF_RESID = 5
PF_AUX = 6
PF_KEEP = 7
PF_USRV = 8  # the key's uniform, for a server chosen at the site when it arrives (PI_SRV -1)
PF_USC = 9  # and the server choice's second uniform
NPF = 10
# Integer columns of pending server work `pi`.
PI_SITE = 0
PI_SRV = 1
PI_SRC = 2  # -1: background replication write
PI_REPORTED = 3
PI_SEQ = 4
PI_COORD = 5  # the coordinator (client) that sent it: its row in gs / ss / res; -1: none
NPI = 6

# Integer state `st`.
ST_NPEND = 0
ST_SEQ = 1
ST_NFB = 2
ST_NBACK = 3
ST_FBSEQ = 4  # feedback events pushed so far (tie-break of equal feedback times)
ST_FBSLOTS = 5  # feedback payload slots ever used
ST_FBNFREE = 6  # free payload slots (on the stack fbi[:, FBI_FREE])
NST = 7

# Feedback events wait in a 4-ary min-heap `fh` (NFH, capacity) on (time, seq) in columns
# 0..st[ST_NFB]-1, each entry pointing to the event's payload row (slot) of `fb` (float)
# and `fbi` (int). The heap's rows are contiguous 1-D arrays and a node's 4 children
# adjacent: with 10^5-10^6 responses in flight (an overloaded LatencyAware) a pop
# touches about one cache line per level and half as many levels as a binary heap
# of rows would, which dominated the run. Seq and slot are stored as floats (exact).
# A local response (no WAN: its feedback time is its server's finish time plus the
# site's overhead, which never decreases) joins instead its server's FIFO `fq`, a list
# through fbi[., FBI_NEXT] in (time, seq) order; a pop takes the earliest of the heap's
# root and the FIFOs' heads, so the order is the same (time, seq) order.
FH_T = 0
FH_SEQ = 1
FH_SLOT = 2
NFH = 3
FB_RESP = 0  # payload
FB_QLEN = 1
FB_SVC = 2
FB_AUX = 3
FB_T = 4  # feedback time (read by the FIFOs)
NFB = 5
FBI_SRC = 0  # payload
FBI_SITE = 1
FBI_SRV = 2
FBI_FREE = 3  # stack of free payload rows
FBI_COORD = 4  # payload: the coordinator whose policy state the response updates
FBI_SEQ = 5  # sequence number (read by the FIFOs)
FBI_NEXT = 6  # the next slot of its FIFO, -1: none
NFBI = 7
# Per global server FIFO `fq` (NFQ, servers): slots of the first and last events (-1:
# empty) and the first one's key (time inf: empty), as floats, so a pop scans 2 rows.
FQ_HEAD = 0
FQ_TAIL = 1
FQ_T = 2
FQ_SEQ = 3
NFQ = 4

# Per (client, global server) policy state `gs`: LatencyAware's client is the source site's
# driver (row = source site); C3's is the coordinator (row = coordinator, see coord_off).
GS_LA_AVG = 0
GS_LA_TS = 1
GS_LA_NB = 2
GS_C3_R = 3
GS_C3_Q = 4
GS_C3_SVC = 5
GS_C3_OS = 6  # requests in flight from the coordinator (C3's os; the server choices' too)
GS_C3_RATE = 7
GS_C3_R0 = 8
GS_C3_TDEC = 9
GS_C3_SENT = 10
GS_C3_RECV = 11
# C3 as the authors' Cassandra code has it (cassandra-c3, org.apache.cassandra.c3): the
# token bucket (RateController.SimpleRateLimiter), the receive rate (SlottedRateTracker)
# and the time of the last increase; GS_C3_R0 holds Rmax and GS_C3_TDEC the last decrease
GS_C3_TOKENS = 12
GS_C3_LAST = 13  # time of the bucket's last acquire (ms)
GS_C3_RRATE = 14  # smoothed receive rate, responses per interval
GS_C3_RSLOT = 15  # the receive tracker's last slot (floor(t / interval))
GS_C3_RCOUNT = 16  # responses counted in that slot
GS_C3_TINC = 17
# per coordinator, kept in host column 0: the hosts it holds a pending-request counter for
# (HostTracker.pendingRequests, ScoreTracker's n), and its own server (-1: not a server)
GS_C3_NHOSTS = 18
GS_C3_SELF = 19
GS_C3_KNOWN = 20  # 1 once the coordinator has sent the host a read (its counter exists)
GS_SC_RR = 21  # round robin's cursor of (coordinator, site j), in row site_off[j]
NGS = 22

# Per source state `cs`.
CS_RR = 0
CS_LA_MIN = 1
CS_SC_RR = 2  # round robin's cursor of the site's own balancer (a server choice at the site)
NCS = 3

# Global policy clocks `glob`.
GL_LA_NEXT_MIN = 0
GL_DS_NEXT_SCORE = 1
GL_DS_NEXT_RESET = 2
GL_DS_LANDMARK = 3
GL_C3_NEXT_WINDOW = 4
NGL = 5

# Per (coordinator, global server) dynamic snitch state `ss`: every coordinator's snitch
# scores every host it has heard from.
SS_SCORE = 0
SS_COUNT = 1
SS_SCORED = 2  # 1 if the host had samples at the last score update
SS_MEDIAN = 3  # its weighted median at the last score update
SS_DIRTY = 4  # 1 if it has had a sample since (only then is its median recomputed)
NSS = 5
# Reservoir entries `res` (S, S, size, NRS). Column RS_HEAP of entries 0..count-1
# holds the slots in a binary min-heap on (priority, slot), so replacing the lowest
# priority costs O(log size) instead of a scan.
RS_VAL = 0
RS_W = 1
RS_PRIO = 2
RS_HEAP = 3
NRS = 4
# Reservoirs `res` are indexed (coordinator, global server, entry, column).

# Policy parameters `pp`.
PP_LA_SCALE_MS = 0
PP_LA_THRESHOLD = 1
PP_LA_RETRY_MS = 2
PP_LA_MIN_MEASURE = 3
PP_LA_UPDATE_MS = 4
PP_DS_ALPHA_PER_S = 5
PP_DS_UPDATE_MS = 6
PP_DS_RESET_MS = 7
PP_DS_BADNESS = 8
PP_C3_EWMA = 9
PP_C3_WINDOW_MS = 10
PP_C3_BETA = 11
PP_C3_GAMMA = 12
PP_C3_SMAX = 13
PP_C3_HYST_MS = 14
PP_C3_RF = 15
PP_C3_NCLIENTS = 16
PP_C3_MIN_RATE = 17
PP_LA_RF = 18
PP_DS_RF = 19
PP_DS_READ_REPAIR = 20
PP_DS_UNSCORED_ZERO = 21
PP_C3_PAPER = 22  # 1: C3 as the paper's text reads (window counters); 0: the authors' code
PP_C3_MAX_TOKENS = 23
PP_C3_RECV_ALPHA = 24
PP_C3_READ_REPAIR = 25
PP_SC = 26  # the server choice (SC_*)
PP_SC_RF = 27  # the key's replicas per site it chooses among
PP_SC_AT_SITE = 28  # 1: the destination site's balancer chooses, on arrival (not c3)
NPP = 29

# Backlog (C3 backpressure queue) float columns, followed by 3 per site.
BK_ISSUE = 0
BK_SRC = 1
BK_SERVER = 2
BK_EBASE = 3
BK_USTALL = 4
BK_RESID = 5
BK_AUX = 6
BK_KEEP = 7
BK_WRITE = 8
BK_COORD = 9
BK_REPAIR = 10  # C3: 1 if the read also sends read-repair digests (decided on arrival)
NBK = 11

RING = 64  # finish (multi-threaded servers: start) times kept per server, for C3's qlen

# Integer backend state `bq` (sites, NBQ): the site's stall timeline `stall_ms` (sites,
# capacity, 2: start, end) holds its pauses in rows BQ_LO .. BQ_HI-1 (BQ_HI 0: the site
# has no site-wide stalls), the last row a sentinel (start: the horizon drawn so far, end:
# inf); BQ_THREADS: threads per server (`free_ms` (sites, servers, threads): each thread's
# free time); BQ_QUOTA_US of every BQ_PERIOD_US: the CPU quota of each of the site's
# servers (0: none; then `free_ms[site, srv, 1]` holds the CPU the server used in the
# period of its last finish, see `_quota_finish`).
BQ_LO = 0
BQ_HI = 1
BQ_THREADS = 2
BQ_QUOTA_US = 3
BQ_PERIOD_US = 4
NBQ = 5


@_inline
def service_ms(e_base, u_stall, base_mean_ms, stall_p, stall_mean_ms, slowdown):
    """Exp(base) plus, with probability stall_p, an Exp(stall) stall; times slowdown.

    stall_p < 0 encodes the heavy tail (``ServiceParams.lognormal_sigma`` > 0): then the
    service is stall_mean_ms (the floor) + base_mean_ms * LogNormal(mean 1, log-sd
    -stall_p), its normal drawn by Box-Muller from the same two draws (sqrt(2 E) cos(2 pi
    U) is a standard normal when E ~ Exp(1) and U ~ U(0, 1)), so the call sites and the
    per-request random inputs are the same for every tail.
    """
    if stall_p < 0.0:
        sigma = -stall_p
        z = math.sqrt(2.0 * e_base) * math.cos(2.0 * math.pi * u_stall)
        return (stall_mean_ms + base_mean_ms * math.exp(sigma * z - 0.5 * sigma * sigma)) * slowdown
    s = e_base * base_mean_ms
    if u_stall < stall_p:
        u = u_stall / stall_p
        if u < 1e-300:
            u = 1e-300
        s += -math.log(u) * stall_mean_ms
    return s * slowdown


@_jit
def lindley_ms(arrival_ms, svc_ms):
    """Response (sojourn) times of one FCFS server fed in arrival order."""
    out = np.empty(arrival_ms.size)
    free = -1e300
    for k in range(arrival_ms.size):
        start = arrival_ms[k] if arrival_ms[k] > free else free
        free = start + svc_ms[k]
        out[k] = free - arrival_ms[k]
    return out


@_inline
def _first_free_thread(free_ms, site, srv, n_threads):
    """The thread of a server that frees first (the lowest on ties): FCFS into it."""
    th = 0
    best = free_ms[site, srv, 0]
    for h in range(1, n_threads):
        if free_ms[site, srv, h] < best:
            best = free_ms[site, srv, h]
            th = h
    return th


@_inline
def _stall_cursor(stall_ms, site, lo, t):
    """The first row from lo of the site's stall timeline that ends after t."""
    while stall_ms[site, lo, 1] <= t:  # the sentinel ends at inf
        lo += 1
    return lo


@_inline
def _stall_finish(stall_ms, site, k, start, work):
    """When `work` ms of service begun at `start` ends on a server of `site`, whose clock
    stops during each stall (exact: a pause freezes requests in service and queued alike).

    k: a row of the site's timeline at or before the first stall ending after start."""
    t = start
    while True:
        s0 = stall_ms[site, k, 0]
        e0 = stall_ms[site, k, 1]
        if e0 > t:
            if t < s0:
                if t + work <= s0:
                    return t + work
                work -= s0 - t
            if e0 == math.inf:
                raise RuntimeError("site stall timeline exhausted: draw it further ahead")
            t = e0
        k += 1


_GOLDEN = 0.6180339887498949


@_inline
def _quota_finish(free_ms, site, srv, start, work, quota_ms, period_ms):
    """When `work` ms of CPU begun at `start` ends on a server allowed quota_ms of CPU in
    each period_ms (Linux CFS bandwidth control: the quota refills at each period's start;
    a server that has spent it is throttled, mid-request too, until the next period).

    free_ms[site, srv, 0] is the server's last finish and free_ms[site, srv, 1] the CPU it
    had used by then in that period (updated here). Each server's periods start at a phase
    of its own (the golden-ratio sequence), as each cgroup's period timer does."""
    phase = period_ms * (((site * 64 + srv) * _GOLDEN) % 1.0)
    p0 = phase + math.floor((start - phase) / period_ms) * period_ms
    used = free_ms[site, srv, 1] if free_ms[site, srv, 0] >= p0 else 0.0
    t = start
    while True:
        p1 = p0 + period_ms
        run = min(work, quota_ms - used, p1 - t)
        if run > 0.0:
            t += run
            work -= run
            used += run
        if work <= 0.0:
            free_ms[site, srv, 1] = used
            return t
        t = p1  # throttled, or the period ended: the next one refills the quota
        p0 = p1
        used = 0.0


@_jit
def profile_kernel(
    arrival_ms, server, svc_ms, n_servers, overhead_ms, n_threads, stall_ms, quota_ms, period_ms
):
    """One site at a given arrival stream: response time (ms) of every request.

    Each server has n_threads threads fed FCFS; stall_ms (1, rows, 2) is the site's
    stall timeline ending with its sentinel (no rows: no site-wide stalls); quota_ms > 0:
    each server may use that much CPU per period_ms (`_quota_finish`)."""
    free = np.full((1, n_servers, max(n_threads, 2)), -1e300)
    out = np.empty(arrival_ms.size)
    stalls = stall_ms.shape[1] > 0
    lo = 0
    for k in range(arrival_ms.size):
        s = server[k]
        arr = arrival_ms[k]
        th = _first_free_thread(free, 0, s, n_threads) if n_threads > 1 else 0
        start = arr if arr > free[0, s, th] else free[0, s, th]
        if stalls:
            lo = _stall_cursor(stall_ms, 0, lo, arr)
            free[0, s, th] = _stall_finish(stall_ms, 0, lo, start, svc_ms[k])
        elif quota_ms > 0.0:
            free[0, s, th] = _quota_finish(free, 0, s, start, svc_ms[k], quota_ms, period_ms)
        else:
            free[0, s, th] = start + svc_ms[k]
        out[k] = free[0, s, th] - arr + overhead_ms
    return out


@_inline
def _push(pf, pi, st, arr, svc, issue, send, rtt, resid, aux, keep, site, srv, src, coord):
    n = st[ST_NPEND]
    pf[n, PF_ARR] = arr
    pf[n, PF_SVC] = svc
    pf[n, PF_ISSUE] = issue
    pf[n, PF_SEND] = send
    pf[n, PF_RTT] = rtt
    pf[n, PF_RESID] = resid
    pf[n, PF_AUX] = aux
    pf[n, PF_KEEP] = keep
    pi[n, PI_SITE] = site
    pi[n, PI_SRV] = srv
    pi[n, PI_SRC] = src
    pi[n, PI_COORD] = coord
    pi[n, PI_REPORTED] = 0
    pi[n, PI_SEQ] = st[ST_SEQ]
    st[ST_SEQ] += 1
    st[ST_NPEND] = n + 1


# ----------------------------------------------------------------------------- policies


@_inline
def _route_rates(i, u, cum_frac, n_sites):
    for j in range(n_sites - 1):
        if u < cum_frac[i, j]:
            return j
    return n_sites - 1


@_jit
def _route_global_rr(i, cs, allowed, site_off, n_servers):
    """Round robin over every server of every allowed site (one cursor per source)."""
    n_sites = n_servers.size
    total = site_off[n_sites]
    for _ in range(total):
        g = int(cs[i, CS_RR]) % total
        cs[i, CS_RR] = float((g + 1) % total)
        j = 0
        while site_off[j + 1] <= g:
            j += 1
        if allowed[i, j]:
            return j, g - site_off[j]
    return i, 0


@_inline
def _la_acceptable(gs, i, g, t, mn, pp):
    """DataStax LatencyAwarePolicy.newQueryPlan: is host g not penalised for source i?

    A host is penalised only if it has >= min_measure measurements, was measured
    within the retry period, and its average exceeds exclusion_threshold x min.
    """
    if mn < 0 or gs[i, g, GS_LA_NB] < pp[PP_LA_MIN_MEASURE]:
        return True
    if t - gs[i, g, GS_LA_TS] > pp[PP_LA_RETRY_MS]:
        return True
    return gs[i, g, GS_LA_AVG] <= pp[PP_LA_THRESHOLD] * mn


@_inline
def _la_replica(rank, u_shuffle, rf):
    """Offset (0..rf-1) of the rank-th local replica in a shuffled replica list.

    TokenAwarePolicy shuffles the key's replicas (driver 3.x default); one uniform
    encodes the permutation (its mixed-radix digits pick among the remaining ones).
    """
    u = u_shuffle
    used = 0
    pick = 0
    for step in range(rank + 1):
        left = rf - step
        r = int(u * left)
        if r >= left:
            r = left - 1
        u = u * left - r
        pick = 0
        while True:
            if (used >> pick) & 1 == 0:
                if r == 0:
                    break
                r -= 1
            pick += 1
        used |= 1 << pick
    return pick


@_jit
def _route_latency_aware(
    i, t, u_server, u_shuffle, gs, cs, pp, allowed, site_off, n_servers, order
):
    """First host of the query plan that is not penalised, else the first penalised one.

    Child plan (token-aware over DC-aware round robin, Kurma section 7: RF 3 per
    DC): the key's local replicas (shuffled), the other local hosts in ring order,
    then the hosts of the allowed remote sites by proximity (ring order from a
    rotating start). LatencyAwarePolicy moves penalised hosts to the end.
    """
    mn = cs[i, CS_LA_MIN]
    first_j = -1
    first_s = 0
    n = n_servers[i]
    rf = int(pp[PP_LA_RF])
    if rf > n:
        rf = n
    if rf < 1:
        rf = 1
    start = int(u_server * n)
    if start >= n:
        start = n - 1
    # the key's local replicas, shuffled
    for rank in range(rf):
        s = start + _la_replica(rank, u_shuffle, rf)  # (start + offset) % n, no division
        if s >= n:
            s -= n
        g = site_off[i] + s
        if _la_acceptable(gs, i, g, t, mn, pp):
            return i, s
        if first_j < 0:
            first_j = i
            first_s = s
    # the other local hosts, then remote sites by proximity
    for r in range(n_servers.size):
        j = order[i, r]
        if not allowed[i, j]:
            continue
        nj = n_servers[j]
        sj = int(u_server * nj)
        if sj >= nj:
            sj = nj - 1
        k0 = rf if j == i else 0
        for k in range(k0, nj):
            s = sj + k  # (sj + k) % nj without a division (per host of a request's plan)
            if s >= nj:
                s -= nj
            g = site_off[j] + s
            if _la_acceptable(gs, i, g, t, mn, pp):
                return j, s
            if first_j < 0:
                first_j = j
                first_s = s
    return first_j, first_s


@_inline
def _la_feedback(gs, i, g, t, x, pp):
    """HostLatencyTracker.add of the DataStax driver: the first 30% of min_measure
    measurements are ignored, then a time-weighted average (scale pp[PP_LA_SCALE_MS])."""
    nb = gs[i, g, GS_LA_NB] + 1.0
    if nb < math.floor(0.3 * pp[PP_LA_MIN_MEASURE]):
        gs[i, g, GS_LA_NB] = nb
        gs[i, g, GS_LA_TS] = t
        gs[i, g, GS_LA_AVG] = -1.0
        return
    if gs[i, g, GS_LA_AVG] < 0:
        gs[i, g, GS_LA_NB] = nb
        gs[i, g, GS_LA_TS] = t
        gs[i, g, GS_LA_AVG] = x
        return
    delay = t - gs[i, g, GS_LA_TS]
    if delay <= 0:
        return
    scaled = delay / pp[PP_LA_SCALE_MS]
    w = math.log(scaled + 1.0) / scaled
    gs[i, g, GS_LA_AVG] = (1.0 - w) * x + w * gs[i, g, GS_LA_AVG]
    gs[i, g, GS_LA_TS] = t
    gs[i, g, GS_LA_NB] = nb


@_jit
def _la_update_min(gs, cs, t, pp):
    """Tracker.updateMin: min average over hosts with enough measurements that were
    measured within the retry period; the previous min is kept if there is none."""
    for i in range(cs.shape[0]):
        mn = -1.0
        for g in range(gs.shape[1]):
            avg = gs[i, g, GS_LA_AVG]
            if gs[i, g, GS_LA_NB] < pp[PP_LA_MIN_MEASURE] or avg < 0:
                continue
            if t - gs[i, g, GS_LA_TS] > pp[PP_LA_RETRY_MS]:
                continue
            if mn < 0 or avg < mn:
                mn = avg
        if mn >= 0:
            cs[i, CS_LA_MIN] = mn


@_jit
def _route_dynamic_snitch(c, i, u_server, ss, pp, allowed, order, site_off, n_servers, buf):
    """Cassandra's DynamicEndpointSnitch at coordinator c (sortByProximityWithBadness).

    The key's replicas (rf consecutive servers of every allowed site from the key's
    start, Kurma section 7: RF 3 per DC) in the subsnitch's order: this site's first,
    then the other sites by proximity. Up to 3.11.0 (the paper's 3.9 and 2.0) a replica
    without a score ends the method: the subsnitch's order stands, so at consistency ONE
    a remote replica, never read and never scored, keeps every read local. From 3.11.1
    (CASSANDRA-13074; ``PP_DS_UNSCORED_ZERO``) it counts as 0.0. The first replica is
    read unless one's score exceeds the positionally sorted scores by more than the
    badness threshold; then they are sorted by score (stable), an unscored one counting
    as 0.0 (compareEndpoints), so it is read next and thereby measured.
    Returns (site, server). `buf` (4, >= replicas) is scratch space: an array allocated
    per request (and np.sort's) cost more than the rest of the routing.
    """
    n_sites = order.shape[1]
    rf = max(int(pp[PP_DS_RF]), 1)
    # the replicas in the subsnitch's order: scores (unscored: 0.0) in buf[0], site and
    # server in buf[2] and buf[3]
    m = 0
    for r in range(n_sites):
        j = order[i, r]
        if not allowed[i, j]:
            continue
        n = n_servers[j]
        start = int(u_server * n)
        if start >= n:
            start = n - 1
        for k in range(min(rf, n)):
            s = start + k  # (start + k) % n without a division (per replica, per request)
            if s >= n:
                s -= n
            g = site_off[j] + s
            buf[2, m] = j
            buf[3, m] = s
            if ss[c, g, SS_SCORED] > 0:
                buf[0, m] = ss[c, g, SS_SCORE]
            else:
                if pp[PP_DS_UNSCORED_ZERO] == 0:  # up to 3.11.0: the subsnitch's order
                    return int(buf[2, 0]), int(buf[3, 0])
                buf[0, m] = 0.0
            m += 1
    if m == 0:
        return i, 0
    # the scores sorted (insertion sort into buf[1]: the same values as np.sort)
    for k in range(m):
        x = buf[0, k]
        h = k
        while h > 0 and buf[1, h - 1] > x:
            buf[1, h] = buf[1, h - 1]
            h -= 1
        buf[1, h] = x
    bad = False
    for k in range(m):
        if buf[0, k] > buf[1, k] * (1.0 + pp[PP_DS_BADNESS]):
            bad = True
            break
    if not bad:
        return int(buf[2, 0]), int(buf[3, 0])
    best = 0
    for k in range(1, m):
        if buf[0, k] < buf[0, best]:
            best = k
    return int(buf[2, best]), int(buf[3, best])


@_jit
def _ds_read_repair(c, i, u_server, j, srv, t_ms, u_aux, pp, n_servers, pf, pi, st):
    """DC-local read repair (dclocal_read_repair_chance, Cassandra 2.1-3.x): digests to
    the key's other replicas in coordinator c's site, whose responses feed its snitch.

    A digest is a measurement only: it waits behind the server's queue but takes no
    service time, so it changes no other request's response (no policy's requests carry
    read-repair load in this simulator). It is marked reported, so it enters no statistic.
    """
    n = n_servers[i]
    rf = int(pp[PP_DS_RF])
    if rf > n:
        rf = n
    start = int(u_server * n)
    if start >= n:
        start = n - 1
    for k in range(rf):
        s = (start + k) % n
        if j == i and s == srv:
            continue
        u = u_aux + 0.6180339887498949 * (k + 1)  # another uniform for its reservoir entry
        u -= math.floor(u)
        _push(pf, pi, st, t_ms, 0.0, t_ms, t_ms, 0.0, 0.0, u, 2.0, i, s, i, c)
        pi[st[ST_NPEND] - 1, PI_REPORTED] = 1


@_inline
def _ds_feedback(ss, res, i, j, t_ms, x, u, landmark_ms, pp):
    """Exponentially decaying reservoir (forward decay, Codahale metrics) insert of
    coordinator i's response x from host j (receiveTiming).

    A full reservoir replaces its lowest-priority entry (the first slot among equal
    priorities) if the new priority is higher. Slots keep their place (the score
    update reads them in slot order); a heap of slots keyed by (priority, slot)
    finds the lowest one.
    """
    size = res.shape[2]
    w = math.exp(pp[PP_DS_ALPHA_PER_S] * (t_ms - landmark_ms) / 1000.0)
    prio = w / (1.0 - u)
    c = int(ss[i, j, SS_COUNT])
    ss[i, j, SS_DIRTY] = 1.0  # a full reservoir may keep its samples: recompute anyway
    if c < size:
        res[i, j, c, RS_VAL] = x
        res[i, j, c, RS_W] = w
        res[i, j, c, RS_PRIO] = prio
        # sift slot c up from heap position c
        h = c
        while h > 0:
            up = (h - 1) >> 1
            q = int(res[i, j, up, RS_HEAP])
            pq = res[i, j, q, RS_PRIO]
            if pq <= prio:
                break  # on equal priorities the parent's slot is lower than c
            res[i, j, h, RS_HEAP] = q
            h = up
        res[i, j, h, RS_HEAP] = c
        ss[i, j, SS_COUNT] = c + 1
        return
    kmin = int(res[i, j, 0, RS_HEAP])
    if not prio > res[i, j, kmin, RS_PRIO]:
        return
    res[i, j, kmin, RS_VAL] = x
    res[i, j, kmin, RS_W] = w
    res[i, j, kmin, RS_PRIO] = prio
    # sift slot kmin down from the root
    h = 0
    while True:
        a = 2 * h + 1
        if a >= size:
            break
        qa = int(res[i, j, a, RS_HEAP])
        pa = res[i, j, qa, RS_PRIO]
        b = a + 1
        if b < size:
            qb = int(res[i, j, b, RS_HEAP])
            pb = res[i, j, qb, RS_PRIO]
            if pb < pa or (pb == pa and qb < qa):
                a = b
                qa = qb
                pa = pb
        if prio < pa or (prio == pa and kmin < qa):
            break
        res[i, j, h, RS_HEAP] = qa
        h = a
    res[i, j, h, RS_HEAP] = kmin


@_jit
def _ds_update_scores(ss, res):
    """updateScores of every coordinator: score = a host's weighted median / the largest
    median of the coordinator's hosts; hosts without samples are unscored (SS_SCORED = 0),
    as hosts absent from Cassandra's score map."""
    n_coords = ss.shape[0]
    n_hosts = ss.shape[1]
    med = np.zeros(n_hosts)
    for i in range(n_coords):
        mx = 0.0
        for j in range(n_hosts):
            c = int(ss[i, j, SS_COUNT])
            med[j] = 0.0
            if c == 0:
                continue
            if ss[i, j, SS_DIRTY] == 0:  # no sample since the last update: same median
                med[j] = ss[i, j, SS_MEDIAN]
                if med[j] > mx:
                    mx = med[j]
                continue
            vals = res[i, j, :c, RS_VAL].copy()
            ws = res[i, j, :c, RS_W].copy()
            idx = np.argsort(vals, kind="mergesort")
            tot = 0.0
            for k in range(c):
                tot += ws[k]
            cum = 0.0
            m = vals[idx[0]]
            for k in range(c):
                if cum / tot <= 0.5:
                    m = vals[idx[k]]
                cum += ws[idx[k]]
            med[j] = m
            ss[i, j, SS_MEDIAN] = m
            ss[i, j, SS_DIRTY] = 0.0
            if m > mx:
                mx = m
        for j in range(n_hosts):
            ss[i, j, SS_SCORE] = med[j] / mx if mx > 0 else 0.0
            ss[i, j, SS_SCORED] = 1.0 if ss[i, j, SS_COUNT] > 0 else 0.0


@_inline
def _c3_psi(r, svc, os, q, n_clients):
    """psi = R - 1/mu + q_hat^3 / mu, q_hat = 1 + os * n + q (C3 section 4.1).

    Scalars, not gs: numba counts references of an inlined helper's array arguments
    (atomic NRT incref/decref) on every call, here once per replica per request."""
    qh = 1.0 + os * n_clients + q
    return r - svc + qh * qh * qh * svc


@_inline
def _c3_score(r_net, svc, os, q, n):
    """ScoreTracker.getScore of the authors' code: R' + (1 + q + n * os)^3 / mu, where R'
    is the EWMA of response time less service time (so R' = R - 1/mu of section 4.1)."""
    qh = 1.0 + q + n * os
    return r_net + qh * qh * qh * svc


@_inline
def _c3_tokens(tokens, last_ms, rate, t_ms, interval_ms, max_tokens):
    """RateController.SimpleRateLimiter.tryAcquire's tokens at t_ms: refilled at `rate` a
    rate interval since the last acquire (at the rate in force now), capped at max_tokens."""
    x = tokens + rate / interval_ms * (t_ms - last_ms)
    return x if x < max_tokens else max_tokens


@_inline
def _c3_receive_tick(rate, slot, count, now_slot, n, alpha):
    """RateController.SlottedRateTracker.add(n) at slot now_slot = floor(t / interval):
    returns (rate, slot, count). Within a slot responses are counted; the first call of a
    later slot folds the count into rate (alpha on the count). After a gap of 2 slots or
    more the count is folded once, and this call's n is not counted (as in the code)."""
    if now_slot - slot < 2:
        count += n
        if now_slot > slot:
            rate = alpha * count + (1.0 - alpha) * rate
            slot = now_slot
            count = 0.0
    else:
        rate = alpha * count + (1.0 - alpha) * rate
        slot = now_slot
        count = 0.0
    return rate, slot, count


@_inline
def _c3_cubic(send, recv, t_ms, t_inc, t_dec, rmax, beta, gamma, smax, hyst_ms, min_rate):
    """RateController.updateCubicSendingRate, run on every response: returns (rate, rmax,
    t_dec, t_inc). A sending rate above the receive rate is cut to beta x rate (at least
    min_rate), unless the rate grew within hyst_ms; one below it moves to the cubic
    gamma (T - K)^3 + Rmax, K = (Rmax beta / gamma)^(1/3), T since the last cut, by at
    most smax (the cubic may lie below the rate, then the rate falls)."""
    if send > recv and t_ms - t_inc > hyst_ms:
        rate = send * beta
        if rate < min_rate:
            rate = min_rate
        return rate, send, t_ms, t_inc
    if send < recv:
        k = (rmax * beta / gamma) ** (1.0 / 3.0)
        d = t_ms - t_dec - k
        rate = gamma * d * d * d + rmax
        if rate - send > smax:
            rate = send + smax
        return rate, rmax, t_dec, t_ms
    return send, rmax, t_dec, t_inc


@_jit
def _c3_self_os(ring, ring_n, site, srv, u_server, n, rf, t_ms):
    """The pending count of a coordinator's own server srv of `site` (HostTracker's
    pendingRequests of itself: the reads in that server), if it is one of the key's
    replicas (rf of the site's n servers from the key's start): the requests at its FCFS
    server at t_ms, as far as served up to the last slice end."""
    start = int(u_server * n)
    if start >= n:
        start = n - 1
    d = srv - start
    if d < 0:
        d += n
    if d >= rf:
        return 0.0  # not a replica of the key: not read
    n_ring = ring_n[site, srv]
    cap = ring.shape[2]
    pos = (n_ring - 1) % cap
    q = 0
    for _ in range(min(n_ring, cap)):
        if ring[site, srv, pos] > t_ms:
            q += 1
        else:
            break
        pos = pos - 1 if pos > 0 else cap - 1
    return float(q)


@_inline
def _route_c3(c, i, t_ms, u_server, self_os, gs, pp, allowed, site_off, n_servers):
    """C3 at coordinator c of source site i: the lowest score among the key's replicas (rf
    consecutive servers per site) whose rate limiter has a token, which it takes; (-1, -1)
    sends the request to c's backpressure queue.

    The authors' code (pp[PP_C3_PAPER] == 0; AbstractReadExecutor.pushRead over the replicas
    sorted by DynamicEndpointSnitch.compareEndpoints): the score is ScoreTracker's, n the
    hosts c holds counters for, ties go to c itself, then its site (the subsnitch's order),
    and c's own server (self_os: the reads in it) needs no token. The paper's text
    (pp[PP_C3_PAPER] == 1): psi, n the clients, a window of sends per host."""
    paper = pp[PP_C3_PAPER] > 0
    n_c = pp[PP_C3_NCLIENTS]
    if n_c <= 0:
        n_c = gs[c, 0, GS_C3_NHOSTS]
    self_g = int(gs[c, 0, GS_C3_SELF])
    interval = pp[PP_C3_WINDOW_MS]
    max_tokens = pp[PP_C3_MAX_TOKENS]
    rf = int(pp[PP_C3_RF])
    n_sites = n_servers.size
    best_j = -1
    best_s = -1
    best = 0.0
    for r in range(n_sites):
        j = i if r == 0 else (r - 1 if r - 1 < i else r)  # this site first, then the others
        if not allowed[i, j]:
            continue
        n = n_servers[j]
        start, rf_j = _key_replicas(u_server, n, rf)
        for k in range(-1, rf_j):
            if k < 0:  # c's own server first, if it is one of the key's replicas
                if j != i or self_g < 0:
                    continue
                s = self_g - site_off[i]
                d = s - start
                if d < 0:
                    d += n
                if d >= rf_j:
                    continue
            else:
                s = start + k  # (start + k) % n without a division (per replica, per request)
                if s >= n:
                    s -= n
            g = site_off[j] + s
            if g == self_g:
                if k >= 0:
                    continue
                os = self_os  # exempt from rate limiting
            else:
                if paper:
                    if gs[c, g, GS_C3_SENT] >= gs[c, g, GS_C3_RATE]:
                        continue
                elif (
                    _c3_tokens(
                        gs[c, g, GS_C3_TOKENS],
                        gs[c, g, GS_C3_LAST],
                        gs[c, g, GS_C3_RATE],
                        t_ms,
                        interval,
                        max_tokens,
                    )
                    < 1.0
                ):
                    continue
                os = gs[c, g, GS_C3_OS]
            if paper:
                psi = _c3_psi(gs[c, g, GS_C3_R], gs[c, g, GS_C3_SVC], os, gs[c, g, GS_C3_Q], n_c)
            else:
                psi = _c3_score(gs[c, g, GS_C3_R], gs[c, g, GS_C3_SVC], os, gs[c, g, GS_C3_Q], n_c)
            if best_j < 0 or psi < best:
                best = psi
                best_j = j
                best_s = s
    if best_j >= 0:
        g = site_off[best_j] + best_s
        if paper:
            gs[c, g, GS_C3_SENT] += 1.0
            gs[c, g, GS_C3_OS] += 1.0
        elif g != self_g:
            tokens = _c3_tokens(
                gs[c, g, GS_C3_TOKENS],
                gs[c, g, GS_C3_LAST],
                gs[c, g, GS_C3_RATE],
                t_ms,
                interval,
                max_tokens,
            )
            gs[c, g, GS_C3_TOKENS] = tokens - 1.0
            gs[c, g, GS_C3_LAST] = t_ms
            # _c3_count_send written out (per request)
            gs[c, g, GS_C3_OS] += 1.0
            if gs[c, g, GS_C3_KNOWN] == 0.0:
                gs[c, g, GS_C3_KNOWN] = 1.0
                gs[c, 0, GS_C3_NHOSTS] += 1.0
    return best_j, best_s


@_inline
def _key_replicas(u_server, n, rf_wanted):
    """(start, rf): the key's replicas in a site of n servers are start .. start + rf - 1
    (mod n), the first drawn by the key's uniform."""
    rf = int(rf_wanted)
    if rf > n:
        rf = n
    if rf < 1:
        rf = 1
    start = int(u_server * n)
    if start >= n:
        start = n - 1
    return start, rf


@_inline
def _round_robin(cur, start, rf, n):
    """(server, next cursor): the first replica at or after the cursor (the replicas are the
    ring arc start .. start + rf - 1: the cursor itself if it lies on the arc, else start)."""
    d = cur - start
    if d < 0:
        d += n
    s = cur if d < rf else start
    nxt = s + 1
    if nxt >= n:
        nxt = 0
    return s, nxt


@_inline
def _two_choices(u_second, start, rf, n):
    """p2c's two distinct replicas, drawn from one uniform (its remaining fraction is a
    second uniform)."""
    a = int(u_second * rf)
    if a >= rf:
        a = rf - 1
    b = int((u_second * rf - a) * (rf - 1))
    if b >= rf - 1:
        b = rf - 2
    if b >= a:
        b += 1
    sa = start + a
    if sa >= n:
        sa -= n
    sb = start + b
    if sb >= n:
        sb -= n
    return sa, sb


@_jit
def _server_in_site(sc, c, j, u_server, u_second, gs, pp, site_off, n_servers):
    """The server of site j that coordinator c's server choice ``sc`` picks among the key's
    replicas there: rf consecutive servers from the key's start (SERVER_CHOICES in
    geoslo.control.kurma says each rule). ``u_second`` is p2c's second uniform."""
    n = n_servers[j]
    start, rf = _key_replicas(u_server, n, pp[PP_SC_RF])
    off = site_off[j]
    if sc == SC_RANDOM or rf == 1:
        return start
    if sc == SC_ROUND_ROBIN:
        s, nxt = _round_robin(int(gs[c, off, GS_SC_RR]), start, rf, n)
        gs[c, off, GS_SC_RR] = nxt
        return s
    if sc == SC_P2C:
        sa, sb = _two_choices(u_second, start, rf, n)
        return sb if gs[c, off + sb, GS_C3_OS] < gs[c, off + sa, GS_C3_OS] else sa
    # least outstanding, or C3's psi: the best in ring order from the key's start
    best_s = start
    best = 0.0
    for k in range(rf):
        s = start + k
        if s >= n:
            s -= n
        g = off + s
        if sc == SC_C3:  # C3's score as its policy ranks (n: as _route_c3's)
            n_c = pp[PP_C3_NCLIENTS]
            if n_c <= 0:
                n_c = gs[c, 0, GS_C3_NHOSTS]
            v = _c3_score(gs[c, g, GS_C3_R], gs[c, g, GS_C3_SVC], gs[c, g, GS_C3_OS],
                          gs[c, g, GS_C3_Q], n_c)  # fmt: skip
        else:
            v = gs[c, g, GS_C3_OS]
        if k == 0 or v < best:
            best = v
            best_s = s
    return best_s


@_jit
def _server_at_site(sc, j, u_server, u_second, arr, ring, ring_n, cs, pp, n_servers, free_ms, bq):
    """The server of site j that the site's own balancer picks for a request arriving at
    ``arr`` (a proxy every request to the site passes: its requests in flight to a server
    are the server's queue, read from the server's last finish times). Round robin keeps
    one cursor per site; the rules are those of :func:`_server_in_site`."""
    n = n_servers[j]
    start, rf = _key_replicas(u_server, n, pp[PP_SC_RF])
    if sc == SC_RANDOM or rf == 1:
        return start
    if sc == SC_ROUND_ROBIN:
        s, nxt = _round_robin(int(cs[j, CS_SC_RR]), start, rf, n)
        cs[j, CS_SC_RR] = nxt
        return s
    m = rf  # least outstanding: every replica, in ring order from the start
    sa, sb = start, start
    if sc == SC_P2C:
        sa, sb = _two_choices(u_second, start, rf, n)
        m = 2
    cap = ring.shape[2]
    best_s = start
    best = 0
    for k in range(m):
        s = start + k
        if s >= n:
            s -= n
        if sc == SC_P2C:
            s = sa if k == 0 else sb
        # requests queued or in service at arr, as _process_servers reads C3's qlen: one
        # thread, finish times after arr, newest first; more, start times after arr
        # (queued) plus every thread if any is queued, else the threads busy at arr
        q = 0
        n_ring = ring_n[j, s]
        pos = (n_ring - 1) % cap
        for _ in range(min(n_ring, cap)):
            if ring[j, s, pos] > arr:
                q += 1
            else:
                break
            pos = pos - 1 if pos > 0 else cap - 1
        n_thr = bq[j, BQ_THREADS]
        if n_thr > 1:
            if q > 0:
                q += n_thr
            else:
                for h in range(n_thr):
                    if free_ms[j, s, h] > arr:
                        q += 1
        if k == 0 or q < best:
            best = q
            best_s = s
    return best_s


@_inline
def _c3_count_send(gs, c, g):
    """MessagingService.sendRR of a read: c's pending counter of host g (created on the
    first read it sends g, which adds g to ScoreTracker's n)."""
    gs[c, g, GS_C3_OS] += 1.0
    if gs[c, g, GS_C3_KNOWN] == 0.0:
        gs[c, g, GS_C3_KNOWN] = 1.0
        gs[c, 0, GS_C3_NHOSTS] += 1.0


@_jit
def _c3_window(gs, t, pp):
    """The paper's text (pp[PP_C3_PAPER] == 1): cubic rate control at the end of a window
    of PP_C3_WINDOW_MS (C3 section 4.3), on the window's sends and receipts."""
    beta = pp[PP_C3_BETA]
    gamma = pp[PP_C3_GAMMA]
    for i in range(gs.shape[0]):
        for g in range(gs.shape[1]):
            sent = gs[i, g, GS_C3_SENT]
            recv = gs[i, g, GS_C3_RECV]
            rate = gs[i, g, GS_C3_RATE]
            if sent > recv:
                if t - gs[i, g, GS_C3_TDEC] >= pp[PP_C3_HYST_MS]:
                    gs[i, g, GS_C3_R0] = rate
                    rate = rate * (1.0 - beta)
                    if rate < pp[PP_C3_MIN_RATE]:
                        rate = pp[PP_C3_MIN_RATE]
                    gs[i, g, GS_C3_TDEC] = t
            else:
                r0 = gs[i, g, GS_C3_R0]
                k = (beta * r0 / gamma) ** (1.0 / 3.0)
                d = t - gs[i, g, GS_C3_TDEC] - k
                target = gamma * d * d * d + r0
                if target > rate:
                    step = target - rate
                    if step > pp[PP_C3_SMAX]:
                        step = pp[PP_C3_SMAX]
                    rate = rate + step
            gs[i, g, GS_C3_RATE] = rate
            gs[i, g, GS_C3_SENT] = 0.0
            gs[i, g, GS_C3_RECV] = 0.0


@_jit
def _c3_read_repair(
    c, i, t_ms, u_server, j0, s0, u_aux, self_os, gs, pp, allowed, site_off, n_servers,
    base_rtt, sp, slowdown, pf, pi, st,
):  # fmt: skip
    """Cassandra 2.0.12's DC-local read repair under C3 (CFMetaData's
    dclocal_read_repair_chance): the read's replica list is as long as the local replicas
    (m), and pushRead takes the first m of its C3-sorted replicas after swapping the chosen
    one to the front, so digests go to the other replicas among the best m (if the chosen
    one ranked below them: to the 2nd..m-th), whatever their site; no rate limiting.

    A digest reads the row (the read's service time, from uniforms derived from u_aux) and
    counts as pending; its answer feeds C3 like a read's, and enters no statistic.
    """
    m = int(pp[PP_C3_RF])
    if m > n_servers[i]:
        m = n_servers[i]
    if m < 2:
        return
    n_c = pp[PP_C3_NCLIENTS]
    if n_c <= 0:
        n_c = gs[c, 0, GS_C3_NHOSTS]
    self_g = int(gs[c, 0, GS_C3_SELF])
    rf = int(pp[PP_C3_RF])
    n_sites = n_servers.size
    cap = n_sites * rf + 1
    score = np.empty(cap)
    host = np.empty(cap, np.int64)
    site = np.empty(cap, np.int64)
    count = 0
    for r in range(n_sites):  # candidates in _route_c3's order, inserted by score (stable)
        j = i if r == 0 else (r - 1 if r - 1 < i else r)
        if not allowed[i, j]:
            continue
        n = n_servers[j]
        start, rf_j = _key_replicas(u_server, n, rf)
        for k in range(-1, rf_j):
            if k < 0:
                if j != i or self_g < 0:
                    continue
                s = self_g - site_off[i]
                d = s - start
                if d < 0:
                    d += n
                if d >= rf_j:
                    continue
            else:
                s = start + k
                if s >= n:
                    s -= n
            g = site_off[j] + s
            if g == self_g and k >= 0:
                continue
            os = self_os if g == self_g else gs[c, g, GS_C3_OS]
            x = _c3_score(gs[c, g, GS_C3_R], gs[c, g, GS_C3_SVC], os, gs[c, g, GS_C3_Q], n_c)
            h = count
            while h > 0 and score[h - 1] > x:
                score[h] = score[h - 1]
                host[h] = host[h - 1]
                site[h] = site[h - 1]
                h -= 1
            score[h] = x
            host[h] = g
            site[h] = j
            count += 1
    g0 = site_off[j0] + s0
    rank = 0
    while rank < count and host[rank] != g0:
        rank += 1
    for q in range(1 if rank >= m else 0, m):
        if q >= count or q == rank:
            continue
        g = host[q]
        j = site[q]
        s = g - site_off[j]
        rtt = base_rtt[i, j] if j != i else 0.0
        u = u_aux + 0.6180339887498949 * (q + 1)  # other uniforms for its service time
        u -= math.floor(u)
        v = u_aux + 0.4142135623730951 * (q + 1)
        v -= math.floor(v)
        svc = service_ms(
            -math.log(1.0 - u), v, sp[j, 0, 0], sp[j, 0, 1], sp[j, 0, 2], slowdown[j, s]
        )
        _push(pf, pi, st, t_ms + rtt / 2.0, svc, t_ms, t_ms, rtt, 0.0, u, 2.0, j, s, i, c)
        pi[st[ST_NPEND] - 1, PI_REPORTED] = 1
        if g != self_g:
            _c3_count_send(gs, c, g)


# ----------------------------------------------------------------------------- recording


@_inline
def _record(
    src,
    site,
    issue,
    send,
    arr,
    finish,
    rtt,
    resid,
    keep,
    overhead_ms,
    slo_ms,
    first_sec,
    keep_prob,
    st_viol,
    st_done,
    st_sum,
    st_min,
    samples,
    nsamp,
):
    svc_part = (finish - arr) + overhead_ms
    wan = rtt + resid
    resp = svc_part + wan + (send - issue)
    if resp > slo_ms:
        st_viol[src, site] += 1
    st_done[src, site] += 1
    st_sum[src, site] += resp
    sec = int(math.floor(issue / 1000.0)) - first_sec
    if sec < 0:
        sec = 0
    if sec >= st_min.shape[2]:
        sec = st_min.shape[2] - 1
    if resp < st_min[src, site, sec]:
        st_min[src, site, sec] = resp
    if keep < keep_prob and nsamp[0] < samples.shape[0]:
        k = nsamp[0]
        samples[k, 0] = src
        samples[k, 1] = site
        samples[k, 2] = resp
        samples[k, 3] = wan
        samples[k, 4] = svc_part
        nsamp[0] = k + 1
    return resp


@_jit
def _process_servers(
    t_end,
    adaptive,
    need_qlen,
    pf,
    pi,
    st,
    free_ms,
    fh,
    fq,
    fb,
    fbi,
    ring,
    ring_n,
    site_off,
    overhead_ms,
    slo_ms,
    first_sec,
    keep_prob,
    st_viol,
    st_done,
    st_sum,
    st_min,
    samples,
    nsamp,
    cs,
    pp,
    n_servers,
    slowdown,
    stall_ms,
    bq,
):
    """Serve (Lindley) every pending request that reached its server before t_end; a request
    whose site chooses its server (PI_SRV -1) gets it on arrival (:func:`_server_at_site`).

    A multi-threaded server sends each request to its first free thread; a site with
    site-wide stalls serves on a clock that stops during each of its pauses; a server
    under a CPU quota is throttled as `_quota_finish` says."""
    n = st[ST_NPEND]
    sel = np.empty(n, np.int64)
    m = 0
    for k in range(n):
        if pf[k, PF_ARR] < t_end:
            sel[m] = k
            m += 1
    if m == 0:
        return
    sel = sel[:m]
    keys = np.empty(m)
    for k in range(m):
        keys[k] = pf[sel[k], PF_ARR]
    order = np.argsort(keys, kind="mergesort")
    n_sec = st_min.shape[2]
    n_cap = samples.shape[0]
    for r in range(m):
        k = sel[order[r]]
        site = pi[k, PI_SITE]
        srv = pi[k, PI_SRV]
        arr = pf[k, PF_ARR]
        if srv < 0:
            srv = _server_at_site(
                int(pp[PP_SC]), site, pf[k, PF_USRV], pf[k, PF_USC], arr, ring, ring_n, cs, pp,
                n_servers, free_ms, bq,
            )  # fmt: skip
            pi[k, PI_SRV] = srv
            pf[k, PF_SVC] *= slowdown[site, srv]
        n_thr = bq[site, BQ_THREADS]
        qlen = 0
        if need_qlen:
            # the requests queued or in service at arr (at most RING + threads): one
            # thread: the server's last finish times above arr; more: its last start
            # times above arr (queued; starts never decrease), plus every thread if any
            # is queued, else the threads busy at arr (written out: a helper taking the
            # rings costs their reference counting per request)
            n_ring = ring_n[site, srv]
            cap = ring.shape[2]
            pos = (n_ring - 1) % cap  # the newest, then back without a division each
            for _ in range(min(n_ring, cap)):
                if ring[site, srv, pos] > arr:
                    qlen += 1
                else:
                    break
                pos = pos - 1 if pos > 0 else cap - 1
            if n_thr > 1:
                if qlen > 0:
                    qlen += n_thr
                else:
                    for h in range(n_thr):
                        if free_ms[site, srv, h] > arr:
                            qlen += 1
        th = 0
        if n_thr > 1:
            th = _first_free_thread(free_ms, site, srv, n_thr)
        free = free_ms[site, srv, th]
        start = arr if arr > free else free
        if bq[site, BQ_HI] > 0:
            lo = _stall_cursor(stall_ms, site, bq[site, BQ_LO], arr)
            bq[site, BQ_LO] = lo  # later arrivals at this site are all >= arr
            finish = _stall_finish(stall_ms, site, lo, start, pf[k, PF_SVC])
        elif bq[site, BQ_QUOTA_US] > 0:
            finish = _quota_finish(
                free_ms, site, srv, start, pf[k, PF_SVC], bq[site, BQ_QUOTA_US] / 1000.0,
                bq[site, BQ_PERIOD_US] / 1000.0,
            )  # fmt: skip
        else:
            finish = start + pf[k, PF_SVC]
        free_ms[site, srv, th] = finish
        if need_qlen:
            ring[site, srv, ring_n[site, srv] % ring.shape[2]] = finish if n_thr == 1 else start
            ring_n[site, srv] += 1
        src = pi[k, PI_SRC]
        if src < 0:
            continue
        rtt = pf[k, PF_RTT]
        resid = pf[k, PF_RESID]
        if pi[k, PI_REPORTED] == 0:
            # _record written out: see the read path of run_chunk
            svc_part = (finish - arr) + overhead_ms[site]
            wan = rtt + resid
            issue = pf[k, PF_ISSUE]
            resp = svc_part + wan + (pf[k, PF_SEND] - issue)
            if resp > slo_ms:
                st_viol[src, site] += 1
            st_done[src, site] += 1
            st_sum[src, site] += resp
            sec = int(math.floor(issue / 1000.0)) - first_sec
            if sec < 0:
                sec = 0
            if sec >= n_sec:
                sec = n_sec - 1
            if resp < st_min[src, site, sec]:
                st_min[src, site, sec] = resp
            if pf[k, PF_KEEP] < keep_prob and nsamp[0] < n_cap:
                q = nsamp[0]
                samples[q, 0] = src
                samples[q, 1] = site
                samples[q, 2] = resp
                samples[q, 3] = wan
                samples[q, 4] = svc_part
                nsamp[0] = q + 1
        if adaptive:
            # store the event in a free payload row and push it on the feedback
            # heap (sift up, written out: hot path)
            nfree = st[ST_FBNFREE]
            if nfree > 0:
                slot = fbi[nfree - 1, FBI_FREE]
                st[ST_FBNFREE] = nfree - 1
            else:
                slot = st[ST_FBSLOTS]
                st[ST_FBSLOTS] = slot + 1
            # response seen by the client library, from send to receipt
            fb[slot, FB_RESP] = (finish - arr) + overhead_ms[site] + rtt + resid
            fb[slot, FB_QLEN] = qlen
            fb[slot, FB_SVC] = pf[k, PF_SVC]
            fb[slot, FB_AUX] = pf[k, PF_AUX]
            fbi[slot, FBI_SRC] = src
            fbi[slot, FBI_SITE] = site
            fbi[slot, FBI_SRV] = srv
            fbi[slot, FBI_COORD] = pi[k, PI_COORD]
            t_fb = finish + overhead_ms[site] + rtt / 2.0 + resid
            seq = st[ST_FBSEQ]
            st[ST_FBSEQ] = seq + 1
            fb[slot, FB_T] = t_fb
            fbi[slot, FBI_SEQ] = seq
            g = site_off[site] + srv
            tail = int(fq[FQ_TAIL, g])
            if rtt == 0.0 and resid == 0.0 and (tail < 0 or fb[tail, FB_T] <= t_fb):
                # local: append to the server's FIFO (its times never decrease)
                fbi[slot, FBI_NEXT] = -1
                if tail < 0:
                    fq[FQ_HEAD, g] = slot
                    fq[FQ_T, g] = t_fb
                    fq[FQ_SEQ, g] = seq
                else:
                    fbi[tail, FBI_NEXT] = slot
                fq[FQ_TAIL, g] = slot
                continue
            h = st[ST_NFB]
            st[ST_NFB] = h + 1
            while h > 0:
                up = (h - 1) >> 2
                if fh[FH_T, up] <= t_fb:
                    break  # on equal times the parent's seq is the smaller one
                fh[FH_T, h] = fh[FH_T, up]
                fh[FH_SEQ, h] = fh[FH_SEQ, up]
                fh[FH_SLOT, h] = fh[FH_SLOT, up]
                h = up
            fh[FH_T, h] = t_fb
            fh[FH_SEQ, h] = seq
            fh[FH_SLOT, h] = slot
    # compact: keep the unserved ones in sequence order
    w = 0
    for k in range(n):
        if pf[k, PF_ARR] >= t_end:
            if w != k:
                pf[w, :] = pf[k, :]
                pi[w, :] = pi[k, :]
            w += 1
    st[ST_NPEND] = w


@_jit
def _apply_feedback(t_end, policy, fh, fq, fb, fbi, st, gs, ss, res, glob, site_off, pp):
    """Apply, in (feedback time, sequence) order, the feedback that reached its source
    before t_end: take the earliest of the heap's root and the FIFOs' heads while due."""
    n = st[ST_NFB]
    nfree = st[ST_FBNFREE]
    n_fifo = fq.shape[1]
    while True:
        t_k = math.inf
        k_seq = 0.0
        if n > 0:
            t_k = fh[FH_T, 0]
            k_seq = fh[FH_SEQ, 0]
        best = -1  # -1: the heap's root, else the FIFO
        for q in range(n_fifo):
            qt = fq[FQ_T, q]
            if qt < t_k or (qt == t_k and fq[FQ_HEAD, q] >= 0 and fq[FQ_SEQ, q] < k_seq):
                best = q
                t_k = qt
                k_seq = fq[FQ_SEQ, q]
        if not t_k < t_end:
            break
        if best >= 0:
            slot = int(fq[FQ_HEAD, best])
            nxt = fbi[slot, FBI_NEXT]
            fq[FQ_HEAD, best] = nxt
            if nxt >= 0:
                fq[FQ_T, best] = fb[nxt, FB_T]
                fq[FQ_SEQ, best] = fbi[nxt, FBI_SEQ]
            else:
                fq[FQ_TAIL, best] = -1
                fq[FQ_T, best] = math.inf
            fbi[nfree, FBI_FREE] = slot
            nfree += 1
        else:
            slot = int(fh[FH_SLOT, 0])
            fbi[nfree, FBI_FREE] = slot
            nfree += 1
            # pop: sift the last entry down from the root (written out: hot path); seqs
            # are read on equal times only
            n -= 1
            if n > 0:
                lt = fh[FH_T, n]
                lseq = fh[FH_SEQ, n]
                lslot = fh[FH_SLOT, n]
                h = 0
                while True:
                    a = 4 * h + 1
                    if a >= n:
                        break
                    at = fh[FH_T, a]
                    last = a + 4 if a + 4 < n else n
                    for b in range(a + 1, last):
                        bt = fh[FH_T, b]
                        if bt < at or (bt == at and fh[FH_SEQ, b] < fh[FH_SEQ, a]):
                            a = b
                            at = bt
                    if lt < at or (lt == at and lseq < fh[FH_SEQ, a]):
                        break
                    fh[FH_T, h] = at
                    fh[FH_SEQ, h] = fh[FH_SEQ, a]
                    fh[FH_SLOT, h] = fh[FH_SLOT, a]
                    h = a
                fh[FH_T, h] = lt
                fh[FH_SEQ, h] = lseq
                fh[FH_SLOT, h] = lslot
        g = site_off[fbi[slot, FBI_SITE]] + fbi[slot, FBI_SRV]
        if policy == LATENCY_AWARE:
            _la_feedback(gs, fbi[slot, FBI_SRC], g, t_k, fb[slot, FB_RESP], pp)
        elif policy == DYNAMIC_SNITCH:
            c = fbi[slot, FBI_COORD]
            ms = math.floor(fb[slot, FB_RESP])  # receiveTiming takes whole milliseconds
            _ds_feedback(ss, res, c, g, t_k, ms, fb[slot, FB_AUX], glob[GL_DS_LANDMARK], pp)
        elif policy == C3:
            c = fbi[slot, FBI_COORD]
            # C3's EWMAs of response, queue length and service time, a the new sample's
            # weight (written out: an inlined helper taking gs and pp costs their reference
            # counting per response; the rate rules are helpers on scalars)
            a = pp[PP_C3_EWMA]
            resp = fb[slot, FB_RESP]
            svc = fb[slot, FB_SVC]
            if pp[PP_C3_PAPER] > 0:
                gs[c, g, GS_C3_RECV] += 1.0
                gs[c, g, GS_C3_OS] -= 1.0
            elif g == gs[c, 0, GS_C3_SELF]:
                # HostTracker.updateMetricsLocal: a read of c's own server is timed from
                # its creation (its wait too) and that time is both latency and service
                # time; no rate control, no pending count (the server's own counter)
                svc = resp
            else:
                # HostTracker.updateMetrics: receive tick, cubic update, pending count
                now_slot = math.floor(t_k / pp[PP_C3_WINDOW_MS])
                rrate, rslot, rcount = _c3_receive_tick(
                    gs[c, g, GS_C3_RRATE],
                    gs[c, g, GS_C3_RSLOT],
                    gs[c, g, GS_C3_RCOUNT],
                    now_slot,
                    1.0,
                    pp[PP_C3_RECV_ALPHA],
                )  # (getCurrentRate's add(0) right after changes nothing)
                gs[c, g, GS_C3_RRATE] = rrate
                gs[c, g, GS_C3_RSLOT] = rslot
                gs[c, g, GS_C3_RCOUNT] = rcount
                rate, rmax, tdec, tinc = _c3_cubic(
                    gs[c, g, GS_C3_RATE],
                    rrate,
                    math.floor(t_k),  # System.currentTimeMillis
                    gs[c, g, GS_C3_TINC],
                    gs[c, g, GS_C3_TDEC],
                    gs[c, g, GS_C3_R0],
                    pp[PP_C3_BETA],
                    pp[PP_C3_GAMMA],
                    pp[PP_C3_SMAX],
                    pp[PP_C3_HYST_MS],
                    pp[PP_C3_MIN_RATE],
                )
                gs[c, g, GS_C3_RATE] = rate
                gs[c, g, GS_C3_R0] = rmax
                gs[c, g, GS_C3_TDEC] = tdec
                gs[c, g, GS_C3_TINC] = tinc
                gs[c, g, GS_C3_OS] -= 1.0
                resp -= svc  # ScoreTracker keeps the EWMA of latency less service time
            gs[c, g, GS_C3_R] = a * resp + (1.0 - a) * gs[c, g, GS_C3_R]
            gs[c, g, GS_C3_Q] = a * fb[slot, FB_QLEN] + (1.0 - a) * gs[c, g, GS_C3_Q]
            gs[c, g, GS_C3_SVC] = a * svc + (1.0 - a) * gs[c, g, GS_C3_SVC]
            continue
        sc = pp[PP_SC]
        if sc < SC_LEAST_OUTSTANDING or fb[slot, FB_SVC] == 0.0:
            continue  # a read-repair digest (no service time) is not the choice's request
        c = fbi[slot, FBI_COORD]
        if sc == SC_C3:  # ScoreTracker's EWMAs, as C3's above (no rate control)
            a = pp[PP_C3_EWMA]
            svc = fb[slot, FB_SVC]
            gs[c, g, GS_C3_R] = a * (fb[slot, FB_RESP] - svc) + (1.0 - a) * gs[c, g, GS_C3_R]
            gs[c, g, GS_C3_Q] = a * fb[slot, FB_QLEN] + (1.0 - a) * gs[c, g, GS_C3_Q]
            gs[c, g, GS_C3_SVC] = a * svc + (1.0 - a) * gs[c, g, GS_C3_SVC]
        gs[c, g, GS_C3_OS] -= 1.0
    st[ST_NFB] = n
    st[ST_FBNFREE] = nfree


@_jit
def _policy_clocks(t_end, policy, gs, cs, ss, res, glob, pp):
    if policy == LATENCY_AWARE:
        while glob[GL_LA_NEXT_MIN] <= t_end:
            _la_update_min(gs, cs, glob[GL_LA_NEXT_MIN], pp)
            glob[GL_LA_NEXT_MIN] += pp[PP_LA_UPDATE_MS]
    elif policy == DYNAMIC_SNITCH:
        if glob[GL_DS_NEXT_RESET] <= t_end:
            ss[:, :, SS_COUNT] = 0.0
            glob[GL_DS_LANDMARK] = t_end
            while glob[GL_DS_NEXT_RESET] <= t_end:
                glob[GL_DS_NEXT_RESET] += pp[PP_DS_RESET_MS]
        if glob[GL_DS_NEXT_SCORE] <= t_end:
            _ds_update_scores(ss, res)
            while glob[GL_DS_NEXT_SCORE] <= t_end:
                glob[GL_DS_NEXT_SCORE] += pp[PP_DS_UPDATE_MS]
    elif policy == C3 and pp[PP_C3_PAPER] > 0:
        if glob[GL_C3_NEXT_WINDOW] <= t_end:
            _c3_window(gs, t_end, pp)
            while glob[GL_C3_NEXT_WINDOW] <= t_end:
                glob[GL_C3_NEXT_WINDOW] += pp[PP_C3_WINDOW_MS]


# ----------------------------------------------------------------------------- dispatch


@_inline
def _dispatch(
    i,
    coord,
    j,
    srv,
    t_issue,
    t_send,
    is_write,
    u_resid,
    e_base,
    u_stall,
    aux,
    keep,
    rep,
    wk,
    base_rtt,
    sp,
    slowdown,
    resid_pool,
    resid_off,
    resid_len,
    pf,
    pi,
    st,
    st_req,
    st_served,
    n_servers,
):
    """Send one request from source i (its coordinator coord) to server srv of site j (and
    replicate a write)."""
    rtt = 0.0
    resid = 0.0
    if j != i:
        rtt = base_rtt[i, j]
        ln = resid_len[i, j]
        if ln > 0:
            idx = int(u_resid * ln)
            if idx >= ln:
                idx = ln - 1
            resid = resid_pool[resid_off[i, j] + idx]
    arr = t_send + rtt / 2.0
    cls = 1 if is_write else 0
    sd = slowdown[j, srv] if srv >= 0 else 1.0  # -1: the site chooses; applied on arrival
    svc = service_ms(e_base, u_stall, sp[j, cls, 0], sp[j, cls, 1], sp[j, cls, 2], sd)
    _push(pf, pi, st, arr, svc, t_issue, t_send, rtt, resid, aux, keep, j, srv, i, coord)
    st_req[i, j] += 1
    st_served[j] += 1
    if is_write:
        for k in range(n_servers.size):
            if k == j:
                continue
            n = n_servers[k]
            s = int(rep[wk, k, 0] * n)
            if s >= n:
                s = n - 1
            svc_k = service_ms(
                rep[wk, k, 1], rep[wk, k, 2], sp[k, 1, 0], sp[k, 1, 1], sp[k, 1, 2], slowdown[k, s]
            )
            a_k = arr + base_rtt[j, k] / 2.0
            _push(pf, pi, st, a_k, svc_k, t_issue, t_send, 0.0, 0.0, 0.0, 2.0, k, s, -1, -1)
            st_served[k] += 1


@_jit
def run_chunk(
    t0_ms,
    t1_ms,
    slice_ms,
    policy,
    slo_ms,
    first_sec,
    keep_prob,
    req,
    src_start,
    rep,
    req_w,
    base_rtt,
    cum_frac,
    allowed,
    n_servers,
    site_off,
    coord_off,
    order,
    sp,
    overhead_ms,
    slowdown,
    resid_pool,
    resid_off,
    resid_len,
    pp,
    free_ms,
    pf,
    pi,
    st,
    fh,
    fq,
    fb,
    fbi,
    gs,
    cs,
    ss,
    res,
    glob,
    ring,
    ring_n,
    bk,
    bkrep,
    st_arr,
    st_req,
    st_viol,
    st_done,
    st_sum,
    st_min,
    st_served,
    samples,
    nsamp,
    stall_ms,
    bq,
):
    """Simulate [t0_ms, t1_ms): route every arrival, serve, feed back, record stats.

    Site i's coordinators (clients) are coord_off[i] .. coord_off[i + 1] - 1; a request
    goes to one of them uniformly (its route uniform, which only "rates" uses otherwise),
    whose state DynamicSnitch and C3 use and update."""
    n_sites = n_servers.size
    sc = int(pp[PP_SC]) if policy != C3 else SC_OWN  # C3 chooses both levels itself
    # at the site: the destination's balancer chooses on arrival, from the servers' queues
    at_site = pp[PP_SC_AT_SITE] > 0.5 and SC_ROUND_ROBIN <= sc <= SC_P2C
    adaptive = policy >= LATENCY_AWARE or (sc >= SC_LEAST_OUTSTANDING and not at_site)
    need_qlen = policy == C3 or sc == SC_C3 or at_site
    ptr = src_start[:n_sites].copy()
    blocked = np.zeros(coord_off[n_sites], np.bool_)
    ds_buf = np.empty((4, site_off[n_sites]))  # DynamicSnitch's scratch (its replicas)
    t = t0_ms
    while t < t1_ms:
        s_end = t + slice_ms
        if s_end > t1_ms or t1_ms - s_end < 1e-9:
            s_end = t1_ms
        # C3 backpressure queues first, in FIFO order per coordinator
        if policy == C3 and st[ST_NBACK] > 0:
            blocked[:] = False
            w = 0
            for b in range(st[ST_NBACK]):
                i = int(bk[b, BK_SRC])
                c = int(bk[b, BK_COORD])
                sent = False
                if not blocked[c]:
                    self_os = 0.0
                    if gs[c, 0, GS_C3_SELF] >= 0:
                        self_os = _c3_self_os(
                            ring,
                            ring_n,
                            i,
                            int(gs[c, 0, GS_C3_SELF]) - site_off[i],
                            bk[b, BK_SERVER],
                            n_servers[i],
                            pp[PP_C3_RF],
                            t,
                        )
                    j, srv = _route_c3(
                        c, i, t, bk[b, BK_SERVER], self_os, gs, pp, allowed, site_off, n_servers
                    )
                    if j >= 0:
                        if bk[b, BK_REPAIR] > 0.5:
                            _c3_read_repair(
                                c, i, t, bk[b, BK_SERVER], j, srv, bk[b, BK_AUX], self_os, gs, pp,
                                allowed, site_off, n_servers, base_rtt, sp, slowdown, pf, pi, st,
                            )  # fmt: skip
                        _dispatch(
                            i,
                            c,
                            j,
                            srv,
                            bk[b, BK_ISSUE],
                            t,
                            bk[b, BK_WRITE] > 0.5,
                            bk[b, BK_RESID],
                            bk[b, BK_EBASE],
                            bk[b, BK_USTALL],
                            bk[b, BK_AUX],
                            bk[b, BK_KEEP],
                            bkrep,
                            b,
                            base_rtt,
                            sp,
                            slowdown,
                            resid_pool,
                            resid_off,
                            resid_len,
                            pf,
                            pi,
                            st,
                            st_req,
                            st_served,
                            n_servers,
                        )
                        sent = True
                    else:
                        blocked[c] = True
                if not sent:
                    if w != b:
                        bk[w, :] = bk[b, :]
                        bkrep[w, :, :] = bkrep[b, :, :]
                    w += 1
            st[ST_NBACK] = w
        for i in range(n_sites):
            end = src_start[i + 1]
            while ptr[i] < end and req[RQ_T, ptr[i]] < s_end:
                k = ptr[i]
                ptr[i] += 1
                t_k = req[RQ_T, k]
                is_write = req[RQ_WRITE, k] > 0.5
                st_arr[i, 0] += 1
                if is_write:
                    st_arr[i, 1] += 1
                srv = -1
                n_c = coord_off[i + 1] - coord_off[i]
                u_c = req[RQ_ROUTE, k] * n_c
                c = int(u_c)
                if c >= n_c:
                    c = n_c - 1
                u_c -= c  # a uniform again, independent of c
                c += coord_off[i]
                if policy == RATES:
                    j = _route_rates(i, u_c, cum_frac, n_sites)
                elif policy == GLOBAL_RR:
                    j, srv = _route_global_rr(i, cs, allowed, site_off, n_servers)
                elif policy == LATENCY_AWARE:
                    j, srv = _route_latency_aware(
                        i,
                        t_k,
                        req[RQ_SERVER, k],
                        req[RQ_AUX, k],
                        gs,
                        cs,
                        pp,
                        allowed,
                        site_off,
                        n_servers,
                        order,
                    )
                elif policy == DYNAMIC_SNITCH:
                    j, srv = _route_dynamic_snitch(
                        c, i, req[RQ_SERVER, k], ss, pp, allowed, order, site_off, n_servers, ds_buf
                    )
                    if u_c < pp[PP_DS_READ_REPAIR]:
                        _ds_read_repair(
                            c,
                            i,
                            req[RQ_SERVER, k],
                            j,
                            srv,
                            t_k,
                            req[RQ_AUX, k],
                            pp,
                            n_servers,
                            pf,
                            pi,
                            st,
                        )
                else:
                    j = -1
                    repair = not is_write and u_c < pp[PP_C3_READ_REPAIR]
                    self_os = 0.0
                    if not (st[ST_NBACK] > 0 and _has_backlog(bk, st, c)):
                        if gs[c, 0, GS_C3_SELF] >= 0:
                            self_os = _c3_self_os(
                                ring,
                                ring_n,
                                i,
                                int(gs[c, 0, GS_C3_SELF]) - site_off[i],
                                req[RQ_SERVER, k],
                                n_servers[i],
                                pp[PP_C3_RF],
                                t_k,
                            )
                        j, srv = _route_c3(
                            c,
                            i,
                            t_k,
                            req[RQ_SERVER, k],
                            self_os,
                            gs,
                            pp,
                            allowed,
                            site_off,
                            n_servers,
                        )
                    if j < 0:
                        b = st[ST_NBACK]
                        bk[b, BK_ISSUE] = t_k
                        bk[b, BK_SRC] = i
                        bk[b, BK_COORD] = c
                        bk[b, BK_SERVER] = req[RQ_SERVER, k]
                        bk[b, BK_EBASE] = req[RQ_EBASE, k]
                        bk[b, BK_USTALL] = req[RQ_USTALL, k]
                        bk[b, BK_RESID] = req[RQ_RESID, k]
                        bk[b, BK_AUX] = req[RQ_AUX, k]
                        bk[b, BK_KEEP] = req[RQ_KEEP, k]
                        bk[b, BK_WRITE] = req[RQ_WRITE, k]
                        bk[b, BK_REPAIR] = 1.0 if repair else 0.0
                        if is_write:
                            bkrep[b, :, :] = rep[req_w[k], :, :]
                        st[ST_NBACK] = b + 1
                        continue
                    if repair:
                        _c3_read_repair(
                            c, i, t_k, req[RQ_SERVER, k], j, srv, req[RQ_AUX, k], self_os, gs, pp,
                            allowed, site_off, n_servers, base_rtt, sp, slowdown, pf, pi, st,
                        )  # fmt: skip
                if at_site:
                    srv = -1  # site j's balancer chooses when the request arrives
                elif sc != SC_OWN:
                    srv = _server_in_site(
                        sc, c, j, req[RQ_SERVER, k], req[RQ_SC, k], gs, pp, site_off, n_servers
                    )
                    if sc == SC_C3:
                        _c3_count_send(gs, c, site_off[j] + srv)  # C3's counters, n included
                    elif sc >= SC_LEAST_OUTSTANDING:
                        gs[c, site_off[j] + srv, GS_C3_OS] += 1.0
                if srv < 0 and not at_site:
                    n = n_servers[j]
                    srv = int(req[RQ_SERVER, k] * n)
                    if srv >= n:
                        srv = n - 1
                if not is_write:
                    # the read path written out (no helper call): passing a dozen
                    # arrays to an inlined helper costs atomic reference counting
                    # per request in numba, about half of the kernel's time
                    rtt = 0.0
                    resid = 0.0
                    if j != i:
                        rtt = base_rtt[i, j]
                        ln = resid_len[i, j]
                        if ln > 0:
                            idx = int(req[RQ_RESID, k] * ln)
                            if idx >= ln:
                                idx = ln - 1
                            resid = resid_pool[resid_off[i, j] + idx]
                    svc = service_ms(
                        req[RQ_EBASE, k],
                        req[RQ_USTALL, k],
                        sp[j, 0, 0],
                        sp[j, 0, 1],
                        sp[j, 0, 2],
                        slowdown[j, srv] if srv >= 0 else 1.0,  # -1: applied on arrival
                    )
                    n_p = st[ST_NPEND]
                    pf[n_p, PF_ARR] = t_k + rtt / 2.0
                    pf[n_p, PF_SVC] = svc
                    pf[n_p, PF_ISSUE] = t_k
                    pf[n_p, PF_SEND] = t_k
                    pf[n_p, PF_RTT] = rtt
                    pf[n_p, PF_RESID] = resid
                    pf[n_p, PF_AUX] = req[RQ_AUX, k]
                    pf[n_p, PF_KEEP] = req[RQ_KEEP, k]
                    pf[n_p, PF_USRV] = req[RQ_SERVER, k]
                    pf[n_p, PF_USC] = req[RQ_SC, k]
                    pi[n_p, PI_SITE] = j
                    pi[n_p, PI_SRV] = srv
                    pi[n_p, PI_SRC] = i
                    pi[n_p, PI_COORD] = c
                    pi[n_p, PI_REPORTED] = 0
                    pi[n_p, PI_SEQ] = st[ST_SEQ]
                    st[ST_SEQ] += 1
                    st[ST_NPEND] = n_p + 1
                    st_req[i, j] += 1
                    st_served[j] += 1
                    continue
                n_p = st[ST_NPEND]  # the write's own row, for its site's server choice
                _dispatch(
                    i,
                    c,
                    j,
                    srv,
                    t_k,
                    t_k,
                    is_write,
                    req[RQ_RESID, k],
                    req[RQ_EBASE, k],
                    req[RQ_USTALL, k],
                    req[RQ_AUX, k],
                    req[RQ_KEEP, k],
                    rep,
                    req_w[k],
                    base_rtt,
                    sp,
                    slowdown,
                    resid_pool,
                    resid_off,
                    resid_len,
                    pf,
                    pi,
                    st,
                    st_req,
                    st_served,
                    n_servers,
                )
                pf[n_p, PF_USRV] = req[RQ_SERVER, k]
                pf[n_p, PF_USC] = req[RQ_SC, k]
        _process_servers(
            s_end,
            adaptive,
            need_qlen,
            pf,
            pi,
            st,
            free_ms,
            fh,
            fq,
            fb,
            fbi,
            ring,
            ring_n,
            site_off,
            overhead_ms,
            slo_ms,
            first_sec,
            keep_prob,
            st_viol,
            st_done,
            st_sum,
            st_min,
            samples,
            nsamp,
            cs,
            pp,
            n_servers,
            slowdown,
            stall_ms,
            bq,
        )
        if adaptive:
            _apply_feedback(s_end, policy, fh, fq, fb, fbi, st, gs, ss, res, glob, site_off, pp)
            _policy_clocks(s_end, policy, gs, cs, ss, res, glob, pp)
        t = s_end


@_jit
def _has_backlog(bk, st, c):
    """Whether coordinator c holds requests in its backpressure queue."""
    for b in range(st[ST_NBACK]):
        if int(bk[b, BK_COORD]) == c:
            return True
    return False


@_jit
def settle(
    pf,
    pi,
    st,
    free_ms,
    overhead_ms,
    slo_ms,
    first_sec,
    keep_prob,
    st_viol,
    st_done,
    st_sum,
    st_min,
    samples,
    nsamp,
    ring,
    ring_n,
    cs,
    pp,
    n_servers,
    slowdown,
    stall_ms,
    bq,
):
    """Report the requests still in flight at the end of an interval.

    Their response is computed on a copy of the server state, with the work known
    now (requests of later intervals that would reach the server first are not
    known yet); the real queues are left untouched and served later in exact FCFS
    (a server their site chooses on arrival is chosen on the copy, and again then).
    """
    n = st[ST_NPEND]
    if n == 0:
        return
    free = free_ms.copy()
    ring = ring.copy()
    ring_n = ring_n.copy()
    cs = cs.copy()
    keys = pf[:n, PF_ARR].copy()
    order = np.argsort(keys, kind="mergesort")
    for r in range(n):
        k = order[r]
        site = pi[k, PI_SITE]
        srv = pi[k, PI_SRV]
        arr = pf[k, PF_ARR]
        svc = pf[k, PF_SVC]
        if srv < 0:
            srv = _server_at_site(
                int(pp[PP_SC]), site, pf[k, PF_USRV], pf[k, PF_USC], arr, ring, ring_n, cs, pp,
                n_servers, free, bq,
            )  # fmt: skip
            svc *= slowdown[site, srv]
        n_thr = bq[site, BQ_THREADS]
        th = _first_free_thread(free, site, srv, n_thr) if n_thr > 1 else 0
        start = arr if arr > free[site, srv, th] else free[site, srv, th]
        if bq[site, BQ_HI] > 0:
            # the real cursor stays: later intervals may bring earlier arrivals
            lo = _stall_cursor(stall_ms, site, bq[site, BQ_LO], arr)
            finish = _stall_finish(stall_ms, site, lo, start, svc)
        else:
            finish = start + svc
        free[site, srv, th] = finish
        ring[site, srv, ring_n[site, srv] % ring.shape[2]] = finish if n_thr == 1 else start
        ring_n[site, srv] += 1
        src = pi[k, PI_SRC]
        if src < 0 or pi[k, PI_REPORTED] != 0:
            continue
        _record(
            src,
            site,
            pf[k, PF_ISSUE],
            pf[k, PF_SEND],
            arr,
            finish,
            pf[k, PF_RTT],
            pf[k, PF_RESID],
            pf[k, PF_KEEP],
            overhead_ms[site],
            slo_ms,
            first_sec,
            keep_prob,
            st_viol,
            st_done,
            st_sum,
            st_min,
            samples,
            nsamp,
        )
        pi[k, PI_REPORTED] = 1

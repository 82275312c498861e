"""The request-level simulation environment (Kurma sections 4, 7.1).

A controller drives it like real servers: every interval it calls
``run(duration_s, rates_fraction)`` and reads back an :class:`IntervalStats`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from geoslo._warmup import notice_if_cold
from geoslo.control.kurma import SERVER_CHOICES
from geoslo.errors import InputError
from geoslo.sim.kurma import _kernels as K
from geoslo.sim.kurma._params import BackendParams
from geoslo.sim.kurma._site_stalls import LOOKAHEAD_MS, SiteStallTimeline
from geoslo.sim.kurma._wan_truth import WanResidualTruth, WanTruthParams

__all__ = [
    "IntervalStats",
    "RequestLevelSim",
    "POLICIES",
    "SERVER_CHOICE_CODES",
    "DEFAULT_POLICY_PARAMS",
]

POLICIES = {
    "rates": K.RATES,
    "global_rr": K.GLOBAL_RR,
    "latency_aware": K.LATENCY_AWARE,
    "dynamic_snitch": K.DYNAMIC_SNITCH,
    "c3": K.C3,
}

SERVER_CHOICE_CODES = dict(zip(SERVER_CHOICES, range(K.SC_RANDOM, K.SC_C3 + 1), strict=True))

# C3's outstanding counts (os) must see a local response return (~0.6 ms) before the next
# choice, or a server looks busy for a whole slice; the others update every 100 ms or more.
SLICE_MS = {"c3": 1.0}
DEFAULT_SLICE_MS = 10.0

DEFAULT_POLICY_PARAMS: dict[str, float] = {
    # simulator
    # feedback reaches the policies at slice ends; 0: SLICE_MS of the policy
    "slice_ms": 0.0,
    "reservoir_size": 20000,
    # coordinators (clients) per site, each with its own DynamicSnitch / C3 state; a
    # request goes to one of its site's at random. 0: every server (Cassandra, where
    # every node coordinates); 1: one client per site (the live testbed)
    "coordinators_per_site": 0,
    # DataStax LatencyAwarePolicy defaults (driver 3.x builder)
    "la_scale_ms": 100.0,
    "la_exclusion_threshold": 2.0,
    "la_retry_period_ms": 10000.0,
    "la_min_measure": 50,
    "la_update_rate_ms": 100.0,
    # token-aware child policy: the key's replicas in the local DC come first
    # (Kurma section 7: replication factor 3 in each datacenter)
    "la_replicas_per_site": 3,
    # Cassandra DynamicEndpointSnitch defaults (3.x, cassandra.yaml)
    "ds_alpha_per_s": 0.75,
    "ds_reservoir_size": 100,
    "ds_update_interval_ms": 100.0,
    "ds_reset_interval_ms": 600000.0,
    "ds_badness_threshold": 0.1,
    "ds_replicas_per_site": 3,  # the key's replicas in each DC (Kurma section 7: RF 3)
    "ds_read_repair_chance": 0.1,  # dclocal_read_repair_chance (table default, 2.1-3.x)
    # 0: a replica without a score keeps the subsnitch's order (up to 3.11.0: the paper's
    # 3.9); 1: it counts as 0.0 (3.11.1 on, CASSANDRA-13074)
    "ds_unscored_as_zero": 0.0,
    # C3 (Suresh et al., NSDI 2015) as the authors' Cassandra 2.0.12 code has it
    # (github.com/lalithsuresh/cassandra-c3, package org.apache.cassandra.c3)
    "c3_paper_text": 0.0,  # 1: the previous variant, the paper's text (C3_PAPER_TEXT_PARAMS)
    "c3_ewma_alpha": 0.9,  # ScoreTracker.ALPHA, the new sample's weight
    "c3_window_ms": 20.0,  # Config.c3_rate_interval_ms: the rate interval (bucket, receive)
    "c3_beta": 0.2,  # RateController.CUBIC_BETA: a cut leaves beta x the rate
    "c3_gamma": 4e-6,  # RateController.CUBIC_C (per ms^3)
    "c3_smax": 10.0,  # RateController.CUBIC_SMAX: the largest step up, tokens per interval
    "c3_hysteresis_ms": 80.0,  # CUBIC_HYSTERISIS_FACTOR 4 x the interval, from the last rise
    "c3_replicas_per_site": 3,  # the key's replicas in each DC (Kurma section 7: RF 3)
    "c3_initial_rate": 1.0,  # RateController: new SimpleRateLimiter(1, ...), per interval
    "c3_min_rate": 0.1,  # updateCubicSendingRate: Math.max(rate * CUBIC_BETA, 0.1)
    "c3_max_tokens": 200.0,  # Config.c3_rate_limiter_max_tokens (conf/cassandra.yaml: 400)
    "c3_initial_receive_rate": 100.0,  # RateController.RECEIVE_RATE_INITIAL, per interval
    "c3_receive_alpha": 0.9,  # SlottedRateTracker.ALPHA, the closed slot's count's weight
    # with this chance a read also sends digests to the next best replicas (2.0.12's
    # CFMetaData: dclocal_read_repair_chance 0.1); 0: off, as the digests' share of the
    # paper's load is unknown
    "c3_read_repair_chance": 0.0,
    # C3's n in q_hat; 0: the hosts the coordinator holds pending counters for
    # (ScoreTracker.getScore: pendingRequests.size()), the paper's text: the coordinators
    "c3_clients": 0.0,
    # the server choice inside a site chooses among the key's replicas there (§7: RF 3)
    "sc_replicas_per_site": 3,
}

# The previous C3, the paper's text where the code differs (rate windows, the old value's
# EWMA weight 0.9, n = the clients, a cut to (1 - beta) x rate with hysteresis from the
# last decrease, no exempt coordinator); the live client's C3 (geoslo.live.kurma) is this.
C3_PAPER_TEXT_PARAMS: dict[str, float] = {
    "c3_paper_text": 1.0,
    "c3_gamma": 2e-5,
    "c3_hysteresis_ms": 40.0,
    "c3_initial_rate": 1000.0,
    "c3_min_rate": 1.0,
}


@dataclass(frozen=True)
class IntervalStats:
    """What one interval produced; requests are attributed to the interval they arrive in.

    Indices: ``[src]``, ``[src, dst]``, ``[src, dst, second]``. Responses are as seen
    at the source (WAN included). Requests still in flight at the interval end are
    reported with a response computed from the work known at that time.
    """

    start_s: float
    duration_s: float
    arrivals: np.ndarray  # [src] client requests that arrived
    writes: np.ndarray  # [src] of which writes
    requests: np.ndarray  # [src, dst] sent (C3: after its backpressure queue)
    completed: np.ndarray  # [src, dst] responses recorded
    violations: np.ndarray  # [src, dst] responses > slo_ms
    response_sum_ms: np.ndarray  # [src, dst]
    min_response_ms: np.ndarray  # [src, dst, second] (inf when none)
    second_start_s: np.ndarray  # [second] start time of each whole second covered
    served: np.ndarray  # [dst] client requests + propagated replication writes
    backlog: np.ndarray  # [src] requests held in C3's backpressure queue at the end
    sample_src: np.ndarray
    sample_dst: np.ndarray
    sample_response_ms: np.ndarray
    sample_wan_ms: np.ndarray  # base RTT + residual (0 when local)
    sample_service_ms: np.ndarray  # response at the destination (overhead+wait+service)

    @property
    def violation_fraction(self) -> np.ndarray:
        """[src] fraction of the source's completed requests over the SLO."""
        done = self.completed.sum(axis=1)
        return np.divide(
            self.violations.sum(axis=1), done, out=np.zeros(done.shape), where=done > 0
        )

    @property
    def served_rps(self) -> np.ndarray:
        """[dst] served load (req/s) including propagated writes."""
        return self.served / self.duration_s


def _as_matrix(value: np.ndarray, n: int, field: str) -> np.ndarray:
    m = np.asarray(value, dtype=float)
    if m.shape != (n, n):
        raise InputError(field, f"must be a {n}x{n} matrix, got shape {m.shape}")
    if not np.all(np.isfinite(m)) or np.any(m < 0):
        raise InputError(field, "must be finite and >= 0")
    return m


class RequestLevelSim:
    """Request-level simulation of geo-distributed backends (an environment).

    Each site is a :class:`BackendParams` backend; clients at site ``i`` issue a
    Poisson stream at ``rate_traces[i][second]`` req/s; the policy sends each request
    to a site (and, for every adaptive policy, to a server). DynamicSnitch and C3 run at
    the site's coordinators (``coordinators_per_site``), each with its own state. With
    ``repeat_traces`` second ``s`` reads ``rate_traces[i][s % len]`` (a service that runs on).
    With ``wan_truth`` the residual WAN latency is per pair, correlated in time and load
    dependent (:class:`WanResidualTruth`, built from the pooled samples and ``seed``) instead
    of independent draws from one pool, which is what Kurma's model assumes.
    ``server_choice`` (one of ``SERVER_CHOICES``; None: the policy's own server) picks the
    server inside the site the policy chose; C3 picks both. ``server_choice_at`` says who
    chooses: "site", the destination site's own balancer, on the request's arrival (a proxy
    that every request to the site passes, as HAProxy's ``balance``: its requests in flight
    are the servers' queues; Kurma leaves in-site balancing to the datacenter, §3), or
    "client", the request's coordinator, with its own requests in flight (Envoy's endpoint
    policy at the client). None: "site", but "client" for "c3", whose psi needs the client's
    own feedback.
    """

    def __init__(
        self,
        *,
        site_names: Sequence[str],
        backend: BackendParams | list[BackendParams],
        rate_traces: list[np.ndarray],
        write_fraction: float | list[float] = 0.0,
        base_rtt_ms: Callable[[float], np.ndarray] | np.ndarray,
        residual_rtt_samples_ms: np.ndarray | list,
        slo_ms: float = 30.0,
        seed: int = 0,
        policy: str = "rates",
        policy_params: dict | None = None,
        repeat_traces: bool = False,
        wan_truth: WanTruthParams | None = None,
        server_choice: str | None = None,
        server_choice_at: str | None = None,
    ) -> None:
        self.site_names = list(site_names)
        n = len(self.site_names)
        if n < 1:
            raise InputError("site_names", "needs at least one site")
        self.n_sites = n
        backends = [backend] * n if isinstance(backend, BackendParams) else list(backend)
        if len(backends) != n or not all(isinstance(b, BackendParams) for b in backends):
            raise InputError("backend", f"must be a BackendParams or a list of {n}")
        self.backends = backends
        if len(rate_traces) != n:
            raise InputError("rate_traces", f"needs one trace per site ({n})")
        self._traces = [np.asarray(tr, dtype=float) for tr in rate_traces]
        self.repeat_traces = repeat_traces  # a long-running environment wraps around
        for i, tr in enumerate(self._traces):
            if tr.ndim != 1 or tr.size == 0 or np.any(~np.isfinite(tr)) or np.any(tr < 0):
                raise InputError(f"rate_traces[{i}]", "must be a 1-D array of rates >= 0")
        wf = [write_fraction] * n if np.isscalar(write_fraction) else list(write_fraction)
        if len(wf) != n or any(not 0.0 <= float(w) <= 1.0 for w in wf):
            raise InputError("write_fraction", "must be in [0, 1], one value or one per site")
        self._write_fraction = np.asarray(wf, dtype=float)
        if callable(base_rtt_ms):
            self._rtt_fn = base_rtt_ms
        else:
            fixed = _as_matrix(base_rtt_ms, n, "base_rtt_ms")
            self._rtt_fn = lambda _t: fixed
        self._resid_pool, self._resid_off, self._resid_len = _residual_pools(
            residual_rtt_samples_ms, n
        )
        self.wan_truth = None  # None: every residual from the pools (Kurma's own model)
        if wan_truth is not None:
            if np.any(self._resid_off) or np.any(self._resid_len != self._resid_pool.size):
                raise InputError("residual_rtt_samples_ms", "wan_truth needs one pooled sample")
            self.wan_truth = WanResidualTruth(n, self._resid_pool, wan_truth, seed)
            self._resid_pool = self.wan_truth.pool_ms
            self._resid_off, self._resid_len = self.wan_truth.offsets()
        self._link_rate_rps = np.zeros((n, n))
        if not slo_ms > 0:
            raise InputError("slo_ms", f"must be > 0, got {slo_ms}")
        self.slo_ms = float(slo_ms)
        if policy not in POLICIES:
            raise InputError("policy", f"must be one of {sorted(POLICIES)}, got {policy!r}")
        self.policy = policy
        self._policy_code = POLICIES[policy]
        if server_choice is not None and server_choice not in SERVER_CHOICE_CODES:
            raise InputError(
                "server_choice",
                f"must be one of {', '.join(SERVER_CHOICES)}; got {server_choice!r}",
            )
        if server_choice is not None and policy == "c3":
            raise InputError("server_choice", "C3 chooses the server itself: leave it None")
        if server_choice_at is None:
            server_choice_at = "client" if server_choice == "c3" else "site"
        if server_choice_at not in ("site", "client"):
            raise InputError(
                "server_choice_at", f"must be site or client, got {server_choice_at!r}"
            )
        if server_choice == "c3" and server_choice_at == "site":
            raise InputError("server_choice_at", "c3 ranks by the client's own feedback: client")
        self.server_choice = server_choice
        self.server_choice_at = server_choice_at
        params = dict(DEFAULT_POLICY_PARAMS)
        if (policy_params or {}).get("c3_paper_text"):
            params.update(C3_PAPER_TEXT_PARAMS)  # that variant's defaults, then the caller's
        for key, value in (policy_params or {}).items():
            if key not in params and key != "allowed":
                raise InputError(f"policy_params.{key}", "unknown parameter")
            params[key] = value
        self.policy_params = params
        self._allowed = np.ones((n, n), dtype=np.bool_)
        if "allowed" in params:
            allowed = np.asarray(params["allowed"], dtype=bool)
            if allowed.shape != (n, n) or not np.all(np.diag(allowed)):
                raise InputError("policy_params.allowed", "must be n x n with a true diagonal")
            self._allowed = allowed.copy()
        self._rng = np.random.default_rng(seed)
        self.now_s = 0.0
        self._init_state()
        self._stalls = SiteStallTimeline(self.backends, seed)  # its own streams

    # ------------------------------------------------------------------ state
    def _init_state(self) -> None:
        n = self.n_sites
        p = self.policy_params
        self._n_servers = np.array([b.servers for b in self.backends], dtype=np.int64)
        self._site_off = np.zeros(n + 1, dtype=np.int64)
        self._site_off[1:] = np.cumsum(self._n_servers)
        m = int(self._n_servers.max())
        g = int(self._site_off[-1])
        self._sp = np.zeros((n, 2, 3))
        for j, b in enumerate(self.backends):
            for c, s in enumerate((b.read, b.write)):
                self._sp[j, c] = _service_row(s)
        self._overhead = np.array([b.overhead_ms for b in self.backends])
        self._slowdown = np.ones((n, m))
        threads = np.array([b.threads for b in self.backends], dtype=np.int64)
        self._bq = backend_state(self.backends)
        # per thread; a server under a CPU quota keeps its used CPU in slot 1 (_quota_finish)
        self._free = np.full((n, m, max(int(threads.max()), 2)), -1e300)
        self._pf = np.zeros((1024, K.NPF))
        self._pi = np.zeros((1024, K.NPI), dtype=np.int64)
        self._st = np.zeros(K.NST, dtype=np.int64)
        self._fh = np.zeros((K.NFH, 1024))  # feedback heap: one row per key
        self._fq = np.zeros((K.NFQ, g))  # per server FIFOs of local feedback, empty
        self._fq[[K.FQ_HEAD, K.FQ_TAIL]] = -1.0
        self._fq[K.FQ_T] = np.inf
        self._fb = np.zeros((1024, K.NFB))
        self._fbi = np.zeros((1024, K.NFBI), dtype=np.int64)
        per_site = int(p["coordinators_per_site"])
        if per_site < 0:
            raise InputError("policy_params.coordinators_per_site", "must be >= 0")
        coords = self._n_servers if per_site == 0 else np.full(n, per_site, dtype=np.int64)
        self._coord_off = np.zeros(n + 1, dtype=np.int64)
        self._coord_off[1:] = np.cumsum(coords)
        n_coords = int(self._coord_off[-1])
        self._gs = np.zeros((n_coords, g, K.NGS))  # rows: LatencyAware's sites, C3's coordinators
        self._init_c3(p, n, g)
        self._cs = np.zeros((n, K.NCS))
        self._cs[:, K.CS_LA_MIN] = -1.0
        self._cs[:, K.CS_RR] = self._site_off[:n] % max(g, 1)  # sources start apart
        self._ss = np.zeros((n_coords, g, K.NSS))
        self._res = np.zeros((n_coords, g, int(p["ds_reservoir_size"]), K.NRS))
        self._glob = np.zeros(K.NGL)
        self._glob[K.GL_LA_NEXT_MIN] = p["la_update_rate_ms"]
        self._glob[K.GL_DS_NEXT_SCORE] = p["ds_update_interval_ms"]
        self._glob[K.GL_DS_NEXT_RESET] = p["ds_reset_interval_ms"]
        self._glob[K.GL_C3_NEXT_WINDOW] = p["c3_window_ms"]
        self._ring = np.zeros((n, m, K.RING))
        self._ring_n = np.zeros((n, m), dtype=np.int64)
        self._bk = np.zeros((16, K.NBK))
        self._bkrep = np.zeros((16, n, 3))
        self._pp = np.zeros(K.NPP)
        self._pp[K.PP_LA_SCALE_MS] = p["la_scale_ms"]
        self._pp[K.PP_LA_THRESHOLD] = p["la_exclusion_threshold"]
        self._pp[K.PP_LA_RETRY_MS] = p["la_retry_period_ms"]
        self._pp[K.PP_LA_MIN_MEASURE] = p["la_min_measure"]
        self._pp[K.PP_LA_UPDATE_MS] = p["la_update_rate_ms"]
        self._pp[K.PP_LA_RF] = p["la_replicas_per_site"]
        self._pp[K.PP_DS_ALPHA_PER_S] = p["ds_alpha_per_s"]
        self._pp[K.PP_DS_UPDATE_MS] = p["ds_update_interval_ms"]
        self._pp[K.PP_DS_RESET_MS] = p["ds_reset_interval_ms"]
        self._pp[K.PP_DS_BADNESS] = p["ds_badness_threshold"]
        self._pp[K.PP_DS_RF] = p["ds_replicas_per_site"]
        self._pp[K.PP_DS_READ_REPAIR] = p["ds_read_repair_chance"]
        self._pp[K.PP_DS_UNSCORED_ZERO] = p["ds_unscored_as_zero"]
        self._digests_per_read = 0
        if self.policy == "dynamic_snitch" and p["ds_read_repair_chance"] > 0:
            self._digests_per_read = max(int(p["ds_replicas_per_site"]), 1)  # a remote read: rf
        self._init_c3_params(p, n_coords)
        sc = SERVER_CHOICE_CODES.get(self.server_choice, K.SC_OWN)
        self._pp[K.PP_SC] = sc
        self._pp[K.PP_SC_RF] = p["sc_replicas_per_site"]
        self._pp[K.PP_SC_AT_SITE] = 1.0 if self.server_choice_at == "site" else 0.0
        if not p["slice_ms"] >= 0:
            raise InputError("policy_params.slice_ms", "must be > 0 (0: the policy's default)")
        # a client counting its requests in flight must see a local response return, as C3;
        # a site's balancer chooses exactly on arrival, whatever the slice
        counts = sc >= K.SC_LEAST_OUTSTANDING and self.server_choice_at == "client"
        timed = "c3" if counts else self.policy
        self.slice_ms = float(p["slice_ms"]) or SLICE_MS.get(timed, DEFAULT_SLICE_MS)

    def _init_c3(self, p: dict, n: int, g: int) -> None:
        """C3's state per (coordinator, host): RateController's initial rates and bucket
        (full), the EWMAs at 0 as ScoreTracker's (the paper's text: the mean service time);
        a coordinator that is a server (every node coordinates) is exempt for itself."""
        gs = self._gs
        gs[:, :, K.GS_C3_RATE] = p["c3_initial_rate"]
        gs[:, :, K.GS_C3_TOKENS] = p["c3_max_tokens"]
        gs[:, :, K.GS_C3_RRATE] = p["c3_initial_receive_rate"]
        gs[:, :, K.GS_C3_RSLOT] = -1e12  # the first tick starts a slot (lastTick 0 in Java)
        gs[:, :, K.GS_C3_TDEC] = -1e12  # "never" (Java's 0 against currentTimeMillis)
        gs[:, :, K.GS_C3_TINC] = -1e12
        gs[:, 0, K.GS_C3_SELF] = -1.0
        if p["c3_paper_text"]:
            gs[:, :, K.GS_C3_R0] = p["c3_initial_rate"]
            gs[:, :, K.GS_C3_TDEC] = -1e9
            for j in range(n):
                sl = slice(self._site_off[j], self._site_off[j + 1])
                gs[:, sl, K.GS_C3_SVC] = self.backends[j].read.mean_ms
        elif int(p["coordinators_per_site"]) == 0:  # coordinator k of site j is its server k
            for j in range(n):
                for k in range(int(self._coord_off[j]), int(self._coord_off[j + 1])):
                    own = int(self._site_off[j]) + k - int(self._coord_off[j])
                    gs[k, 0, K.GS_C3_SELF] = own
                    gs[k, own, K.GS_C3_KNOWN] = 1.0  # its own counter (ReadVerbHandler)
                    gs[k, 0, K.GS_C3_NHOSTS] = 1.0

    def _init_c3_params(self, p: dict, n_coords: int) -> None:
        pp = self._pp
        paper = bool(p["c3_paper_text"])
        pp[K.PP_C3_PAPER] = 1.0 if paper else 0.0
        # the kernel takes the new sample's weight; the paper's text weighs the old value
        pp[K.PP_C3_EWMA] = 1.0 - p["c3_ewma_alpha"] if paper else p["c3_ewma_alpha"]
        pp[K.PP_C3_WINDOW_MS] = p["c3_window_ms"]
        pp[K.PP_C3_BETA] = p["c3_beta"]
        pp[K.PP_C3_GAMMA] = p["c3_gamma"]
        pp[K.PP_C3_SMAX] = p["c3_smax"]
        pp[K.PP_C3_HYST_MS] = p["c3_hysteresis_ms"]
        pp[K.PP_C3_RF] = p["c3_replicas_per_site"]
        pp[K.PP_C3_MIN_RATE] = p["c3_min_rate"]
        pp[K.PP_C3_MAX_TOKENS] = p["c3_max_tokens"]
        pp[K.PP_C3_RECV_ALPHA] = p["c3_receive_alpha"]
        pp[K.PP_C3_READ_REPAIR] = p["c3_read_repair_chance"]
        # n in q_hat = 1 + os * n + q: c3_clients if set; else the code's (counted in the
        # kernel: 0 here) or, the paper's text, the coordinators (C3 section 4.1)
        clients = float(p.get("c3_clients") or 0.0)
        pp[K.PP_C3_NCLIENTS] = clients or (float(n_coords) if paper else 0.0)
        if self.policy == "c3" and p["c3_read_repair_chance"] > 0:
            self._digests_per_read = max(int(p["c3_replicas_per_site"]), 1)

    def set_server_slowdown(self, site: int, factors: np.ndarray) -> None:
        """Interference (section 7.1.4): service times at ``site``'s servers are
        multiplied by ``factors`` (one per server, >= 0) for requests queued from now on."""
        if not 0 <= site < self.n_sites:
            raise InputError("site", f"must be in [0, {self.n_sites}), got {site}")
        f = np.asarray(factors, dtype=float)
        n = self._n_servers[site]
        if f.shape != (n,) or np.any(~np.isfinite(f)) or np.any(f <= 0):
            raise InputError("factors", f"must be {n} finite values > 0")
        self._slowdown[site, :n] = f

    # ------------------------------------------------------------------ running
    def _fractions(self, rates_fraction: np.ndarray | None) -> np.ndarray:
        n = self.n_sites
        if rates_fraction is None:
            return np.eye(n)
        f = np.asarray(rates_fraction, dtype=float)
        if f.shape != (n, n):
            raise InputError("rates_fraction", f"must be {n}x{n}, got shape {f.shape}")
        if np.any(~np.isfinite(f)) or np.any(f < -1e-12):
            raise InputError("rates_fraction", "must be finite and >= 0")
        if np.any(np.abs(f.sum(axis=1) - 1.0) > 1e-6):
            raise InputError("rates_fraction", "every row must sum to 1")
        if np.any((f > 0) & ~self._allowed):
            raise InputError("rates_fraction", "sends to a site that is not allowed")
        return np.clip(f, 0.0, None)

    def _rtt(self, t_s: float) -> np.ndarray:
        m = _as_matrix(self._rtt_fn(t_s), self.n_sites, "base_rtt_ms")
        m = m.copy()
        np.fill_diagonal(m, 0.0)
        return m

    def _proximity_order(self, rtt: np.ndarray) -> np.ndarray:
        n = self.n_sites
        order = np.empty((n, n), dtype=np.int64)
        for i in range(n):
            key = rtt[i].copy()
            key[i] = -1.0
            order[i] = np.argsort(key, kind="stable")
        return order

    def _arrivals(self, t0_ms: float, t1_ms: float, sec: int) -> tuple:
        """Pre-generate the random inputs of every request arriving in [t0, t1)."""
        n = self.n_sites
        rng = self._rng
        times = []
        for i in range(n):
            tr = self._traces[i]
            if sec >= tr.size and not self.repeat_traces:
                raise InputError(f"rate_traces[{i}]", f"has no rate for second {sec}")
            rate = tr[sec % tr.size]
            span = t1_ms - t0_ms
            if rate <= 0:
                times.append(np.empty(0))
                continue
            mean_gap_ms = 1000.0 / rate
            expect = span / mean_gap_ms
            chunks = []
            last = t0_ms
            while True:
                k = int(expect + 6.0 * np.sqrt(expect) + 16)
                ts = last + np.cumsum(rng.standard_exponential(k) * mean_gap_ms)
                chunks.append(ts[ts < t1_ms])
                if ts[-1] >= t1_ms:
                    break
                last = ts[-1]
            times.append(np.concatenate(chunks))
        counts = np.array([t.size for t in times], dtype=np.int64)
        total = int(counts.sum())
        src_start = np.zeros(n + 1, dtype=np.int64)
        src_start[1:] = np.cumsum(counts)
        req = np.empty((K.NREQ, total))
        if total:
            np.concatenate(times, out=req[K.RQ_T])
        rng.random(out=req[K.RQ_ROUTE : K.RQ_KEEP + 1])
        rng.standard_exponential(out=req[K.RQ_EBASE])
        wfrac = np.repeat(self._write_fraction, counts)
        if np.any(self._write_fraction > 0):
            is_write = rng.random(total) < wfrac
        else:
            is_write = np.zeros(total, dtype=bool)
        req[K.RQ_WRITE] = is_write
        n_w = int(is_write.sum())
        req_w = np.full(total, -1, dtype=np.int64)
        req_w[is_write] = np.arange(n_w)
        rep = np.empty((max(n_w, 1), n, 3))
        if n_w:
            rep[:, :, 0] = rng.random((n_w, n))
            rep[:, :, 1] = rng.standard_exponential((n_w, n))
            rep[:, :, 2] = rng.random((n_w, n))
        else:
            rep[:] = 0.5
        if self.server_choice == "p2c":  # drawn last: the other draws stay as they were
            rng.random(out=req[K.RQ_SC])
        return req, src_start, rep, req_w, n_w

    def _ensure_capacity(self, extra_pending: int, extra_fb: int, extra_backlog: int) -> None:
        need = int(self._st[K.ST_NPEND]) + extra_pending
        if need > self._pf.shape[0]:
            size = max(need, 2 * self._pf.shape[0])
            self._pf = _grow(self._pf, size)
            self._pi = _grow(self._pi, size)
        need = int(self._st[K.ST_FBSLOTS]) + extra_fb  # events in the heap and the FIFOs
        if need > self._fb.shape[0]:
            size = max(need, 2 * self._fb.shape[0])
            self._fh = _grow(self._fh.T, size).T.copy()
            self._fb = _grow(self._fb, size)
            self._fbi = _grow(self._fbi, size)
        need = int(self._st[K.ST_NBACK]) + extra_backlog
        if need > self._bk.shape[0]:
            size = max(need, 2 * self._bk.shape[0])
            self._bk = _grow(self._bk, size)
            self._bkrep = _grow(self._bkrep, size)

    def run(
        self, duration_s: float, rates_fraction: np.ndarray | None = None, *, kernels=None
    ) -> IntervalStats:
        """Simulate the next ``duration_s`` seconds and return their statistics.

        With policy "rates" a request from site i goes to site j with probability
        ``rates_fraction[i, j]`` (rows sum to 1; None: all local); other policies
        ignore it. ``kernels`` swaps in the reference implementation (tests only).
        """
        if not (np.isfinite(duration_s) and duration_s > 0):
            raise InputError("duration_s", f"must be > 0, got {duration_s}")
        kern = K if kernels is None else kernels
        if kern is K:
            notice_if_cold(K)  # once per process: a first run without `geoslo warmup`
        n = self.n_sites
        frac = self._fractions(rates_fraction)
        cum = np.cumsum(frac, axis=1)
        cum[:, -1] = 1.0 + 1e-9
        t0_s = self.now_s
        t1_s = t0_s + duration_s
        first_sec = int(np.floor(t0_s + 1e-12))
        n_sec = max(int(np.ceil(t1_s - 1e-12)) - first_sec, 1)
        expected = (
            sum(
                float(self._traces[i][min(s, self._traces[i].size - 1)])
                for i in range(n)
                for s in range(first_sec, first_sec + n_sec)
            )
            * duration_s
            / n_sec
        )
        cap = int(self.policy_params["reservoir_size"])
        keep_prob = min(1.0, cap / max(expected, 1.0))
        st_arr = np.zeros((n, 2), dtype=np.int64)
        st_req = np.zeros((n, n), dtype=np.int64)
        st_viol = np.zeros((n, n), dtype=np.int64)
        st_done = np.zeros((n, n), dtype=np.int64)
        st_sum = np.zeros((n, n))
        st_min = np.full((n, n, n_sec), np.inf)
        st_served = np.zeros(n, dtype=np.int64)
        samples = np.zeros((cap, 5))
        nsamp = np.zeros(1, dtype=np.int64)
        slice_ms = self.slice_ms
        t = t0_s
        while t < t1_s - 1e-12:
            sec = int(np.floor(t + 1e-9))
            t_next = min(float(sec + 1), t1_s)
            rtt = self._rtt(float(t))
            order = self._proximity_order(rtt)
            t0_ms, t1_ms = t * 1000.0, t_next * 1000.0
            req, src_start, rep, req_w, n_w = self._arrivals(t0_ms, t1_ms, sec)
            n_req = req.shape[1]
            digests = n_req * self._digests_per_read  # DynamicSnitch's read repair
            self._ensure_capacity(n_req + n_w * (n - 1) + digests, n_req + digests, n_req)
            if self.wan_truth is not None:
                self._resid_off, self._resid_len = self.wan_truth.advance(
                    t_next - t, self._link_rate_rps
                )
                sent_before = st_req.copy()
            if any(self._stalls.active):
                busy_until = self._free.max(axis=(1, 2))
                self._stalls.extend(self._bq, np.maximum(busy_until, t1_ms) + LOOKAHEAD_MS)
            kern.run_chunk(
                t0_ms,
                t1_ms,
                slice_ms,
                self._policy_code,
                self.slo_ms,
                first_sec,
                keep_prob,
                req,
                src_start,
                rep,
                req_w,
                rtt,
                cum,
                self._allowed,
                self._n_servers,
                self._site_off,
                self._coord_off,
                order,
                self._sp,
                self._overhead,
                self._slowdown,
                self._resid_pool,
                self._resid_off,
                self._resid_len,
                self._pp,
                self._free,
                self._pf,
                self._pi,
                self._st,
                self._fh,
                self._fq,
                self._fb,
                self._fbi,
                self._gs,
                self._cs,
                self._ss,
                self._res,
                self._glob,
                self._ring,
                self._ring_n,
                self._bk,
                self._bkrep,
                st_arr,
                st_req,
                st_viol,
                st_done,
                st_sum,
                st_min,
                st_served,
                samples,
                nsamp,
                self._stalls.stall_ms,
                self._bq,
            )
            if self.wan_truth is not None:  # the rate the next second's queues see
                self._link_rate_rps = (st_req - sent_before) / (t_next - t)
            t = t_next
        kern.settle(
            self._pf,
            self._pi,
            self._st,
            self._free,
            self._overhead,
            self.slo_ms,
            first_sec,
            keep_prob,
            st_viol,
            st_done,
            st_sum,
            st_min,
            samples,
            nsamp,
            self._ring,
            self._ring_n,
            self._cs,
            self._pp,
            self._n_servers,
            self._slowdown,
            self._stalls.stall_ms,
            self._bq,
        )
        self.now_s = t1_s
        backlog = np.zeros(n, dtype=np.int64)
        nb = int(self._st[K.ST_NBACK])
        if nb:
            backlog += np.bincount(self._bk[:nb, K.BK_SRC].astype(np.int64), minlength=n)
        k = int(nsamp[0])
        return IntervalStats(
            start_s=t0_s,
            duration_s=float(duration_s),
            arrivals=st_arr[:, 0].copy(),
            writes=st_arr[:, 1].copy(),
            requests=st_req,
            completed=st_done,
            violations=st_viol,
            response_sum_ms=st_sum,
            min_response_ms=st_min,
            second_start_s=np.arange(first_sec, first_sec + n_sec, dtype=float),
            served=st_served,
            backlog=backlog,
            sample_src=samples[:k, 0].astype(np.int64),
            sample_dst=samples[:k, 1].astype(np.int64),
            sample_response_ms=samples[:k, 2].copy(),
            sample_wan_ms=samples[:k, 3].copy(),
            sample_service_ms=samples[:k, 4].copy(),
        )


def backend_state(backends: Sequence[BackendParams]) -> np.ndarray:
    """The kernel's integer backend state ``bq`` of the sites: threads per server and CPU
    quota (`_kernels.BQ_*`); the stall timeline's rows are filled by SiteStallTimeline."""
    bq = np.zeros((len(backends), K.NBQ), dtype=np.int64)
    for j, b in enumerate(backends):
        bq[j, K.BQ_THREADS] = b.threads
        bq[j, K.BQ_QUOTA_US], bq[j, K.BQ_PERIOD_US] = b.cpu_quota_us
    return bq


def _service_row(s) -> tuple[float, float, float]:
    """A service model in the kernel's three numbers (`_kernels.service_ms`): a negative
    second one encodes the lognormal tail (its log-sd), the third then being the floor."""
    if s.lognormal_sigma > 0:
        return s.base_mean_ms, -s.lognormal_sigma, s.floor_ms
    return s.base_mean_ms, s.stall_probability, s.stall_mean_ms


def _grow(a: np.ndarray, size: int) -> np.ndarray:
    out = np.zeros((size,) + a.shape[1:], dtype=a.dtype)
    out[: a.shape[0]] = a
    return out


def _residual_pools(samples, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One pool for every link, or per link pools ``samples[i][j]``."""
    off = np.zeros((n, n), dtype=np.int64)
    ln = np.zeros((n, n), dtype=np.int64)
    flat = isinstance(samples, np.ndarray) and samples.ndim == 1
    if not isinstance(samples, np.ndarray):
        flat = all(np.isscalar(x) for x in samples)
    if flat:
        pool = np.asarray(samples, dtype=float)
        if pool.size == 0 or np.any(~np.isfinite(pool)) or np.any(pool < 0):
            raise InputError("residual_rtt_samples_ms", "must be non-empty, finite, >= 0")
        ln[:] = pool.size
        return pool, off, ln
    if len(samples) != n or any(len(row) != n for row in samples):
        raise InputError("residual_rtt_samples_ms", f"per-link pools must be {n}x{n}")
    parts = []
    pos = 0
    for i in range(n):
        for j in range(n):
            p = np.asarray(samples[i][j], dtype=float).ravel()
            if np.any(~np.isfinite(p)) or np.any(p < 0):
                raise InputError(f"residual_rtt_samples_ms[{i}][{j}]", "must be finite, >= 0")
            if i != j and p.size == 0:
                raise InputError(f"residual_rtt_samples_ms[{i}][{j}]", "is empty")
            off[i, j] = pos
            ln[i, j] = p.size
            pos += p.size
            parts.append(p)
    return np.concatenate(parts), off, ln

"""Request-level simulator: kernel vs reference, conservation, load response, API."""

from __future__ import annotations

import math

import numpy as np
import pytest

import geoslo.sim.kurma as sim
from geoslo.errors import InputError
from geoslo.sim.kurma import BackendParams, RequestLevelSim, residual_wan_samples_ms
from geoslo.sim.kurma._reference import reference_kernels

RTT_MS = np.array([[0.0, 10.0, 12.0], [10.0, 0.0, 22.0], [12.0, 22.0, 0.0]])  # Table 2
FRACTIONS = np.array([[0.8, 0.1, 0.1], [0.2, 0.7, 0.1], [0.0, 0.05, 0.95]])


def build_sim(
    policy="rates",
    rate_rps=3000.0,
    write_fraction=0.0,
    seed=1,
    n_sites=3,
    server_choice=None,
    server_choice_at=None,
    **params,
) -> RequestLevelSim:
    return RequestLevelSim(
        site_names=["London", "Ireland", "Frankfurt"][:n_sites],
        backend=BackendParams(),
        rate_traces=[np.full(60, rate_rps)] * n_sites,
        write_fraction=write_fraction,
        base_rtt_ms=RTT_MS[:n_sites, :n_sites],
        residual_rtt_samples_ms=residual_wan_samples_ms(500, seed=0),
        seed=seed,
        policy=policy,
        policy_params=params or None,
        server_choice=server_choice,
        server_choice_at=server_choice_at,
    )


def _arrays(stats):
    return {
        name: getattr(stats, name)
        for name in stats.__dataclass_fields__
        if isinstance(getattr(stats, name), np.ndarray)
    }


def test_exported_names():
    assert set(sim.__all__) == {
        "BackendParams",
        "ServiceParams",
        "DEFAULT_RESIDUAL_WAN_MEAN_MS",
        "DEFAULT_RESIDUAL_WAN_SHAPE",
        "residual_wan_samples_ms",
        "RequestLevelSim",
        "WanTruthParams",
        "WanResidualTruth",
        "IntervalStats",
        "POLICIES",
        "SERVER_CHOICE_CODES",
        "DEFAULT_POLICY_PARAMS",
        "profile_site",
        "Crossings",
        "measure_crossings",
        "calibrate_backend",
        "KurmaSimEnvironment",
        "interval_measurements",
    }


@pytest.mark.parametrize("policy", list(sim.POLICIES))
def test_kernel_equals_reference_exactly(policy):
    """Same seed, same inputs: the compiled kernel and the interpreted one agree bit for bit."""
    rate = 9000.0 if policy == "c3" else 3000.0
    params = {"c3_max_tokens": 1.5, "c3_min_rate": 0.01} if policy == "c3" else {}
    compiled = build_sim(policy, rate_rps=rate, write_fraction=0.05, **params)
    interpreted = build_sim(policy, rate_rps=rate, write_fraction=0.05, **params)
    compiled.set_server_slowdown(2, np.array([3.0, 3.0, 1.0, 1.0, 1.0]))
    interpreted.set_server_slowdown(2, np.array([3.0, 3.0, 1.0, 1.0, 1.0]))
    frac = FRACTIONS if policy == "rates" else None
    ref = reference_kernels()
    for duration_s in (0.35, 0.4):
        a = _arrays(compiled.run(duration_s, frac))
        b = _arrays(interpreted.run(duration_s, frac, kernels=ref))
        for name in a:
            assert np.array_equal(a[name], b[name]), name
        assert a["completed"].sum() > 0


SITE_CHOICES = [p for p in sim.POLICIES if p != "c3"]


SERVER_CHOICES_AT = [(c, "client") for c in sim.SERVER_CHOICE_CODES] + [
    (c, "site") for c in sim.SERVER_CHOICE_CODES if c != "c3"
]


@pytest.mark.parametrize(("server_choice", "at"), SERVER_CHOICES_AT)
@pytest.mark.parametrize("policy", SITE_CHOICES)
def test_every_site_choice_with_every_server_choice_equals_the_reference(policy, server_choice, at):
    """Any site choice composes with any server choice, made by the client or by the site,
    compiled as interpreted, bit for bit (with writes, a read-repairing DynamicSnitch and a
    slowed site)."""
    rate = 12000.0 if server_choice in ("least_outstanding", "p2c", "c3") else 4000.0
    sims = [
        build_sim(policy, rate, 0.05, server_choice=server_choice, server_choice_at=at)
        for _ in range(2)
    ]
    for s in sims:
        s.set_server_slowdown(2, np.array([3.0, 3.0, 1.0, 1.0, 1.0]))
    frac = FRACTIONS if policy == "rates" else None
    a = _arrays(sims[0].run(0.3, frac))
    b = _arrays(sims[1].run(0.3, frac, kernels=reference_kernels()))
    for name in a:
        assert np.array_equal(a[name], b[name]), name
    assert a["completed"].sum() > 0


@pytest.mark.parametrize("policy", list(sim.POLICIES))
def test_conservation(policy):
    s = build_sim(policy, rate_rps=5000.0, write_fraction=0.1)
    frac = FRACTIONS if policy == "rates" else None
    backlog_before = 0
    for _ in range(3):
        st = s.run(0.5, frac)
        # every arrival is sent once (C3: possibly after its backpressure queue) ...
        assert st.requests.sum() + st.backlog.sum() == st.arrivals.sum() + backlog_before
        backlog_before = st.backlog.sum()
        # ... and answered once, in the interval it was sent
        assert np.array_equal(st.completed, st.requests)
        # served = client requests + one propagated copy of each sent write per other site
        assert st.served.sum() == st.requests.sum() + st.writes.sum() * 2 or policy == "c3"
    assert np.all(st.min_response_ms[st.completed > 0].min(axis=-1) > 0)


def test_rates_follow_fractions():
    s = build_sim("rates", rate_rps=20000.0)
    st = s.run(2.0, FRACTIONS)
    observed = st.requests / st.requests.sum(axis=1, keepdims=True)
    assert np.allclose(observed, FRACTIONS, atol=0.01)
    assert np.all(st.arrivals > 0.9 * 40000) and np.all(st.arrivals < 1.1 * 40000)


def test_idle_all_local_has_no_violations():
    st = build_sim("rates", rate_rps=1000.0).run(3.0)
    assert st.violations.sum() <= 0.002 * st.completed.sum()
    assert np.count_nonzero(st.requests - np.diag(np.diag(st.requests))) == 0


def test_violations_rise_with_load():
    fractions = []
    for rate in (20000.0, 40000.0, 50000.0):
        st = build_sim("rates", rate_rps=rate, n_sites=1, seed=3).run(8.0)
        fractions.append(st.violation_fraction[0])
    assert fractions[0] < fractions[1] < fractions[2]
    assert fractions[2] > 0.05


def test_interference_raises_violations():
    base = build_sim("rates", rate_rps=30000.0, n_sites=1, seed=5)
    slow = build_sim("rates", rate_rps=30000.0, n_sites=1, seed=5)
    slow.set_server_slowdown(0, np.array([2.0, 2.0, 1.0, 1.0, 1.0]))
    v0 = base.run(5.0).violation_fraction[0]
    v1 = slow.run(5.0).violation_fraction[0]
    assert v1 > 2 * v0


def test_min_response_tracks_base_rtt():
    """Kurma section 6: min response over a second minus min service ~ base RTT."""
    s = build_sim("rates", rate_rps=10000.0)
    st = s.run(2.0, FRACTIONS)
    lo = st.min_response_ms[1, 2]  # Ireland -> Frankfurt, 22 ms
    assert lo.shape == (2,)
    assert np.all(lo >= 22.0 + 0.5) and np.all(lo < 22.0 + 2.0)


def test_time_varying_rtt_and_samples():
    s = RequestLevelSim(
        site_names=["a", "b"],
        backend=BackendParams(),
        rate_traces=[np.full(5, 5000.0)] * 2,
        base_rtt_ms=lambda t: np.array([[0.0, 10.0 + 10.0 * (t >= 1.0)], [10.0, 0.0]]),
        residual_rtt_samples_ms=[[[], [0.0]], [[0.0], []]],
        seed=2,
    )
    st = s.run(2.0, np.array([[0.5, 0.5], [0.0, 1.0]]))
    assert st.min_response_ms[0, 1, 1] - st.min_response_ms[0, 1, 0] == pytest.approx(10, abs=1)
    remote = st.sample_dst != st.sample_src
    assert np.allclose(st.sample_response_ms, st.sample_wan_ms + st.sample_service_ms)
    assert np.all(st.sample_wan_ms[~remote] == 0) and np.all(st.sample_wan_ms[remote] >= 10)


def test_same_seed_same_result():
    a = _arrays(build_sim("latency_aware", rate_rps=8000.0, seed=9).run(1.0))
    b = _arrays(build_sim("latency_aware", rate_rps=8000.0, seed=9).run(1.0))
    assert all(np.array_equal(a[k], b[k]) for k in a)


def test_global_rr_spreads_by_server_count():
    st = build_sim("global_rr", rate_rps=6000.0).run(1.0)
    observed = st.requests / st.requests.sum(axis=1, keepdims=True)
    assert np.allclose(observed, 1.0 / 3.0, atol=0.01)


def test_dynamic_snitch_mostly_local():
    st = build_sim("dynamic_snitch", rate_rps=8000.0).run(2.0)
    assert np.all(np.diag(st.requests) > 0.8 * st.arrivals)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"policy": "nope"}, "policy"),
        ({"slo_ms": 0.0}, "slo_ms"),
        ({"write_fraction": 1.5}, "write_fraction"),
        ({"base_rtt_ms": np.zeros((2, 2))}, "base_rtt_ms"),
        ({"policy_params": {"bogus": 1}}, "policy_params.bogus"),
    ],
)
def test_bad_inputs_name_the_field(kwargs, field):
    args = dict(
        site_names=["a", "b", "c"],
        backend=BackendParams(),
        rate_traces=[np.ones(3)] * 3,
        base_rtt_ms=RTT_MS,
        residual_rtt_samples_ms=np.ones(3),
    )
    args.update(kwargs)
    with pytest.raises(InputError) as err:
        RequestLevelSim(**args)
    assert err.value.field == field


def test_bad_fractions_and_trace_end():
    s = build_sim()
    with pytest.raises(InputError, match="rates_fraction"):
        s.run(1.0, np.full((3, 3), 0.5))
    with pytest.raises(InputError, match="rates_fraction"):
        s.run(1.0, np.ones((2, 2)))
    with pytest.raises(InputError, match="rate_traces"):
        build_sim(rate_rps=10.0).run(61.0)


# ----------------------------------------------------------------------------- independent FCFS


def _fcfs_by_hand(sim: RequestLevelSim, duration_s: float, fractions: np.ndarray) -> np.ndarray:
    """Responses (ms) of every request of a "rates" run, event by event in plain Python.

    Uses the simulator's pre-drawn random numbers (drawn here from a twin with the
    same seed) but none of its kernels: route, pick a server, queue FCFS, add WAN.
    """
    from geoslo.sim.kurma import _kernels as K

    req, src_start, _, _, _ = sim._arrivals(0.0, duration_s * 1000.0, 0)
    backend = sim.backends[0]
    jobs = []  # (arrival at server, sequence, site, server, service, wan, overhead)
    for i in range(sim.n_sites):
        for k in range(src_start[i], src_start[i + 1]):
            cum = np.cumsum(fractions[i])
            # the route uniform picks one of the site's coordinators (one per server), and
            # what is left of it, a uniform again, the site
            u = req[K.RQ_ROUTE, k] * backend.servers
            j = int(np.searchsorted(cum, u - min(int(u), backend.servers - 1), side="right"))
            j = min(j, sim.n_sites - 1)
            srv = min(int(req[K.RQ_SERVER, k] * backend.servers), backend.servers - 1)
            rtt = resid = 0.0
            if j != i:
                rtt = RTT_MS[i, j]
                pool = sim._resid_pool
                resid = pool[min(int(req[K.RQ_RESID, k] * pool.size), pool.size - 1)]
            svc = req[K.RQ_EBASE, k] * backend.read.base_mean_ms
            if req[K.RQ_USTALL, k] < backend.read.stall_probability:
                u = req[K.RQ_USTALL, k] / backend.read.stall_probability
                svc += -np.log(u) * backend.read.stall_mean_ms
            t = req[K.RQ_T, k]
            jobs.append((t + rtt / 2.0, len(jobs), j, srv, svc, rtt + resid))
    free: dict[tuple[int, int], float] = {}
    responses = []
    for arrival, _, j, srv, svc, wan in sorted(jobs):
        start = max(arrival, free.get((j, srv), -np.inf))
        free[(j, srv)] = start + svc
        responses.append(start + svc - arrival + backend.overhead_ms + wan)
    return np.sort(np.array(responses))


def test_rates_kernel_matches_an_event_by_event_fcfs_queue():
    """Two sites, a few hundred requests: every response equals a hand-run FCFS queue."""
    fractions = np.array([[0.7, 0.3], [0.4, 0.6]])
    kwargs = dict(policy="rates", rate_rps=1500.0, n_sites=2, seed=4, reservoir_size=10**5)
    stats = build_sim(**kwargs).run(0.3, fractions)
    expected = _fcfs_by_hand(build_sim(**kwargs), 0.3, fractions)
    assert 500 < expected.size < 1500
    assert stats.sample_response_ms.size == expected.size
    assert np.allclose(np.sort(stats.sample_response_ms), expected, rtol=0, atol=1e-9)
    assert np.count_nonzero(stats.requests - np.diag(np.diag(stats.requests))) == 2


# ----------------------------------------------------------------------------- adaptive baselines


def _la_state(n_sites=2, servers=5, min_measure=50.0):
    from geoslo.sim.kurma import _kernels as K

    n_hosts = n_sites * servers
    gs = np.zeros((n_sites, n_hosts, K.NGS))
    gs[:, :, K.GS_LA_NB] = 1000.0
    gs[:, :, K.GS_LA_AVG] = 1.0
    gs[:, :, K.GS_LA_TS] = 0.0
    cs = np.zeros((n_sites, K.NCS))
    cs[:, K.CS_LA_MIN] = 1.0
    pp = np.zeros(K.NPP)
    pp[K.PP_LA_THRESHOLD] = 2.0
    pp[K.PP_LA_RETRY_MS] = 10000.0
    pp[K.PP_LA_MIN_MEASURE] = min_measure
    pp[K.PP_LA_SCALE_MS] = 100.0
    pp[K.PP_LA_RF] = 3
    site_off = np.arange(n_sites + 1, dtype=np.int64) * servers
    n_servers = np.full(n_sites, servers, dtype=np.int64)
    order = np.array([[0, 1], [1, 0]], dtype=np.int64)[:n_sites, :n_sites]
    allowed = np.ones((n_sites, n_sites), dtype=np.bool_)
    return gs, cs, pp, allowed, site_off, n_servers, order


@pytest.mark.parametrize("kern", ["compiled", "reference"])
def test_latency_aware_penalises_but_never_removes(kern):
    """DataStax driver semantics: a slow host goes to the end of the plan; the plan's
    first acceptable host serves; when all are penalised the first planned one does."""
    from geoslo.sim.kurma import _kernels as K

    kern = K if kern == "compiled" else reference_kernels()
    gs, cs, pp, allowed, site_off, n_servers, order = _la_state()
    route = kern._route_latency_aware
    args = (gs, cs, pp, allowed, site_off, n_servers, order)
    # u_server 0.0: the key's replicas are local servers 0, 1, 2 (shuffled by u_shuffle)
    first = {route(0, 1.0, 0.0, u, *args) for u in np.linspace(0.0, 0.999, 60)}
    assert first == {(0, 0), (0, 1), (0, 2)}
    gs[0, 0:3, K.GS_LA_AVG] = 5.0  # all replicas slower than 2 x min: penalised
    assert {route(0, 1.0, 0.0, u, *args) for u in np.linspace(0, 0.999, 20)} == {(0, 3)}
    gs[0, 0:5, K.GS_LA_AVG] = 5.0  # every local host penalised: the remote site next
    assert route(0, 1.0, 0.0, 0.5, *args)[0] == 1
    gs[0, :, K.GS_LA_AVG] = 5.0  # everything penalised: the first planned host
    assert route(0, 1.0, 0.0, 0.0, *args) == (0, 0)
    gs[0, 1, K.GS_LA_TS] = -20000.0  # not measured for more than the retry period
    assert route(0, 1.0, 0.0, 0.0, *args) == (0, 1)
    gs[0, 2, K.GS_LA_NB] = 10.0  # too few measurements: never penalised
    assert route(0, 1.0, 0.0, 0.999, *args) == (0, 2)


def test_latency_aware_replica_shuffle_is_a_permutation():
    from geoslo.sim.kurma import _kernels as K

    for u in np.linspace(0.0, 0.9999, 97):
        assert sorted(K._la_replica(r, u, 3) for r in range(3)) == [0, 1, 2]
    firsts = [K._la_replica(0, u, 3) for u in np.linspace(0.0, 0.9999, 300)]
    assert np.bincount(firsts).min() >= 90


def test_latency_aware_min_skips_stale_hosts_and_keeps_the_last_value():
    from geoslo.sim.kurma import _kernels as K

    gs, cs, pp, *_ = _la_state()
    gs[0, :, K.GS_LA_AVG] = np.arange(1.0, 11.0)
    gs[0, 0, K.GS_LA_TS] = -20000.0  # stale: its low average does not set the min
    K._la_update_min(gs, cs, 0.0, pp)
    assert cs[0, K.CS_LA_MIN] == 2.0
    gs[0, :, K.GS_LA_NB] = 10.0  # nobody qualifies: keep the previous min
    K._la_update_min(gs, cs, 0.0, pp)
    assert cs[0, K.CS_LA_MIN] == 2.0


def test_latency_aware_ignores_the_first_measurements():
    from geoslo.sim.kurma import _kernels as K

    gs, _, pp, *_ = _la_state()
    gs[:] = 0.0
    for n in range(1, 16):
        K._la_feedback(gs, 0, 0, float(n), 100.0 + n, pp)
    # 30% of min_measure (15) are ignored; the 15th starts the average
    assert gs[0, 0, K.GS_LA_NB] == 15 and gs[0, 0, K.GS_LA_AVG] == 115.0
    K._la_feedback(gs, 0, 0, 115.0, 15.0, pp)  # 100 ms later: weight ln(2) on the old one
    assert gs[0, 0, K.GS_LA_AVG] == pytest.approx((1 - np.log(2)) * 15.0 + np.log(2) * 115.0)


def test_dynamic_snitch_of_the_papers_cassandra_never_reads_a_remote_replica():
    """Cassandra 3.9 (Kurma section 7): a replica without a score keeps the subsnitch's
    order, and at consistency ONE no remote replica is ever read, so none is ever scored:
    every read stays local ("heavily favors local reads", section 7.1.1)."""
    from geoslo.sim.kurma import _kernels as K

    s = build_sim("dynamic_snitch", rate_rps=8000.0, seed=2)
    st = s.run(2.0)
    assert np.trace(st.requests) == st.requests.sum() > 0
    local = np.repeat(np.eye(3, dtype=bool), 5, axis=0).repeat(5, axis=1)
    assert (s._ss[:, :, K.SS_SCORED] > 0)[local].any()
    assert not (s._ss[:, :, K.SS_SCORED] > 0)[~local].any()


def test_dynamic_snitch_from_3_11_1_measures_remote_replicas_once_local_ones_differ():
    """Per coordinator and per host: from 3.11.1 (CASSANDRA-13074) an unscored replica
    counts as 0.0, so once the badness test sorts, remote replicas get read and scored.
    Samples are whole milliseconds (receiveTiming), so idle local replicas (under 1 ms)
    all score alike and nothing sorts; under load their queues tell them apart."""
    from geoslo.sim.kurma import _kernels as K

    idle = build_sim("dynamic_snitch", rate_rps=8000.0, seed=2, ds_unscored_as_zero=1.0)
    st = idle.run(1.0)
    assert np.trace(st.requests) == st.requests.sum()
    s = build_sim("dynamic_snitch", rate_rps=40000.0, seed=2, ds_unscored_as_zero=1.0)
    st = s.run(1.0)
    remote = st.requests.sum() - np.trace(st.requests)
    assert remote > 0
    scored = s._ss[:, :, K.SS_SCORED] > 0
    assert scored.shape == (15, 15)  # 5 coordinators per site x every server
    remote_scored = [scored[c, [g for g in range(15) if g // 5 != c // 5]].sum() for c in range(15)]
    # a coordinator explores once its local replicas' medians differ by over 10%
    assert sum(k > 0 for k in remote_scored) >= 3  # by their own reads


def test_dynamic_snitch_scores_kept_between_updates_equal_scores_recomputed():
    """updateScores keeps a host's median until it has a new sample (SS_DIRTY): after a
    loaded run that scored remote hosts, recomputing every median from its reservoir
    gives the same scores, bit for bit."""
    from geoslo.sim.kurma import _kernels as K

    s = build_sim("dynamic_snitch", rate_rps=40000.0, seed=2, ds_unscored_as_zero=1.0)
    s.run(1.05)  # ends 50 ms after an update: some hosts have new samples, some not
    kept, fresh = s._ss.copy(), s._ss.copy()
    assert ((kept[:, :, K.SS_DIRTY] == 0) & (kept[:, :, K.SS_COUNT] > 0)).any()
    fresh[:, :, K.SS_DIRTY] = 1.0
    K._ds_update_scores(kept, s._res)
    K._ds_update_scores(fresh, s._res)
    assert np.array_equal(kept[:, :, K.SS_SCORE], fresh[:, :, K.SS_SCORE])
    assert np.array_equal(kept[:, :, K.SS_MEDIAN], fresh[:, :, K.SS_MEDIAN])


def test_dynamic_snitch_read_repair_measures_local_replicas_and_adds_no_request():
    """DC-local read repair (chance 1 here): every read's other local replicas answer a
    digest that feeds the coordinator's snitch; digests are neither requests nor load."""
    from geoslo.sim.kurma import _kernels as K

    s = build_sim("dynamic_snitch", rate_rps=3000.0, seed=2, ds_read_repair_chance=1.0)
    plain = build_sim("dynamic_snitch", rate_rps=3000.0, seed=2, ds_read_repair_chance=0.0)
    st, st0 = s.run(0.2), plain.run(0.2)  # short: the reservoirs (100) are not full
    assert np.array_equal(st.completed, st.requests) and st.served.sum() == st.requests.sum()
    assert st0.arrivals.sum() == st.arrivals.sum()
    samples, samples0 = s._ss[:, :, K.SS_COUNT], plain._ss[:, :, K.SS_COUNT]
    local = [[g for g in range(15) if g // 5 == c // 5] for c in range(15)]
    assert all((samples[c, local[c]] > 0).all() for c in range(15))
    # a read's 2 other local replicas answer digests: about 3 samples a read, not 1
    assert samples.sum() > 2.5 * samples0.sum()


@pytest.mark.parametrize(
    ("n_sites", "unscored_as_zero", "avoids"),
    [(1, 0.0, True), (3, 0.0, False), (3, 1.0, True)],
    ids=["one-site", "three-sites-3.9", "three-sites-3.11.1"],
)
def test_dynamic_snitch_avoids_a_slow_local_replica_once_every_replica_is_scored(
    n_sites, unscored_as_zero, avoids
):
    """Per host scores: with one of London's servers ten times slower, the snitch reads
    its other replicas, so London's violations fall far below AllLocal's. Up to 3.11.0
    that needs every replica scored: with remote sites, never read, it never sorts
    (the early exit CASSANDRA-13074 removed)."""
    slow = np.array([10.0, 1.0, 1.0, 1.0, 1.0])
    fractions = {}
    for policy in ("dynamic_snitch", "rates"):
        s = build_sim(
            policy, rate_rps=8000.0, seed=3, n_sites=n_sites, ds_unscored_as_zero=unscored_as_zero
        )
        s.set_server_slowdown(0, slow)
        s.run(1.0)
        fractions[policy] = s.run(2.0).violation_fraction[0]
    assert fractions["rates"] > 0.05
    if avoids:
        assert fractions["dynamic_snitch"] < 0.3 * fractions["rates"]
    else:
        assert fractions["dynamic_snitch"] > 0.7 * fractions["rates"]


def test_c3_keeps_one_state_per_coordinator_and_counts_the_hosts_it_reads_from():
    """Every coordinator (5 per site) ranks replicas from its own responses and pending
    counts; n in q_hat is the hosts it holds counters for (ScoreTracker: its own server
    from the start, then every host it has sent a read), the coordinators in the paper's
    text, or c3_clients."""
    from geoslo.sim.kurma import _kernels as K

    s = build_sim("c3", rate_rps=8000.0, seed=2)
    assert s._pp[K.PP_C3_NCLIENTS] == 0 and s._gs.shape[0] == 15
    assert np.array_equal(s._gs[:, 0, K.GS_C3_NHOSTS], np.ones(15))
    s.run(1.0)
    known = s._gs[:, :, K.GS_C3_KNOWN]
    assert np.array_equal(s._gs[:, 0, K.GS_C3_NHOSTS], known.sum(axis=1))
    assert (known.sum(axis=1) == 15).sum() > 0  # remote replicas too (scored 0 until heard)
    r = s._gs[:, :5, K.GS_C3_R]  # London's servers as each coordinator saw them
    assert not np.allclose(r[:5], r[:5].mean(axis=0))  # London's coordinators differ
    one = build_sim("c3", rate_rps=8000.0, seed=2, coordinators_per_site=1)
    assert one._gs.shape[0] == 3 and np.all(one._gs[:, 0, K.GS_C3_SELF] == -1)  # no server
    paper = build_sim("c3", c3_paper_text=1.0)
    assert paper._pp[K.PP_C3_NCLIENTS] == 15 and paper._pp[K.PP_C3_PAPER] == 1
    assert build_sim("c3", c3_clients=7.0)._pp[K.PP_C3_NCLIENTS] == 7


def test_c3_keeps_most_reads_local_when_idle():
    """Local responses return in under a millisecond: with its slice at 1 ms, C3's
    outstanding counts see them, and most reads stay local at low load."""
    st = build_sim("c3", rate_rps=3000.0, seed=2).run(2.0)
    assert np.trace(st.requests) > 0.8 * st.requests.sum()


def _ds_state(n_coords=2, n_hosts=4):
    from geoslo.sim.kurma import _kernels as K

    ss = np.zeros((n_coords, n_hosts, K.NSS))
    pp = np.zeros(K.NPP)
    pp[K.PP_DS_BADNESS] = 0.1
    pp[K.PP_DS_RF] = 2
    order = np.array([[0, 1], [1, 0]], dtype=np.int64)
    allowed = np.ones((2, 2), dtype=np.bool_)
    site_off = np.array([0, 2, 4], dtype=np.int64)
    n_servers = np.array([2, 2], dtype=np.int64)
    return ss, pp, allowed, order, site_off, n_servers


@pytest.mark.parametrize("kern", ["compiled", "reference"])
def test_dynamic_snitch_sorts_the_keys_replicas_by_score_when_one_is_bad(kern):
    from geoslo.sim.kurma import _kernels as K

    kern = K if kern == "compiled" else reference_kernels()
    ss, pp, allowed, order, site_off, n_servers = _ds_state()

    def route(c=0, u_server=0.0):
        return tuple(kern._route_dynamic_snitch(c, 0, u_server, ss, pp, *rest))

    rest = (allowed, order, site_off, n_servers, np.empty((4, 4)))
    assert route() == (0, 0)  # nothing scored: the subsnitch's first replica
    ss[0, 0, :3] = (1.0, 10, 1.0)
    ss[0, 1, :3] = (1.05, 10, 1.0)  # within the threshold of host 0: proximity order holds
    assert route() == (0, 0)
    ss[0, 0, K.SS_SCORE] = 1.2  # host 0 over 1.1 x host 1, but site 1's are unscored:
    assert route() == (0, 0)  # up to 3.11.0 the subsnitch's order stands
    pp[K.PP_DS_UNSCORED_ZERO] = 1.0  # from 3.11.1 by score, unscored count 0
    assert route() == (1, 0)  # the first unscored host, remote site 1
    ss[0, 2, :3] = (0.9, 10, 1.0)
    ss[0, 3, :3] = (0.95, 10, 1.0)
    assert route() == (1, 0)  # every host scored: the lowest score
    ss[0, 2, K.SS_SCORE], ss[0, 3, K.SS_SCORE] = 3.0, 2.0
    assert route() == (0, 1)
    assert route(c=1) == (0, 0)  # another coordinator's state is its own
    # a key whose replicas start at server 1: (0, 1), (0, 0), (1, 1), (1, 0) in order,
    # scores 1.05, 1.2, 2.0, 3.0 already sorted: the first one
    assert route(u_server=0.6) == (0, 1)


def _feedback_queues(events, to_fifo):
    """fh/fq/fb/fbi/st holding `events` (time, seq, src, host) as the kernel's feedback
    queues: those with `to_fifo` in their host's FIFO, the others in the heap."""
    from geoslo.sim.kurma import _kernels as K

    n = len(events)
    fh = np.zeros((K.NFH, n))
    fq = np.zeros((K.NFQ, 10))
    fq[[K.FQ_HEAD, K.FQ_TAIL]], fq[K.FQ_T] = -1.0, np.inf
    fb = np.zeros((n, K.NFB))
    fbi = np.zeros((n, K.NFBI), dtype=np.int64)
    in_heap = 0
    # in key order: a sorted array is a min-heap of any arity, and each FIFO is in order
    for slot, ((t, seq, src, host), fifo) in enumerate(sorted(zip(events, to_fifo, strict=True))):
        fb[slot, K.FB_T], fbi[slot, K.FBI_SEQ] = t, seq
        fb[slot, K.FB_RESP] = 10.0 + 7.0 * seq  # order-sensitive averages
        fbi[slot, K.FBI_SRC] = src
        fbi[slot, K.FBI_SRV] = host
        if not fifo:
            fh[:, in_heap] = (t, seq, slot)
            in_heap += 1
            continue
        fbi[slot, K.FBI_NEXT] = -1
        tail = int(fq[K.FQ_TAIL, host])
        if tail < 0:
            fq[[K.FQ_HEAD, K.FQ_T, K.FQ_SEQ], host] = (slot, t, seq)
        else:
            fbi[tail, K.FBI_NEXT] = slot
        fq[K.FQ_TAIL, host] = slot
    st = np.zeros(K.NST, dtype=np.int64)
    st[K.ST_NFB] = in_heap
    st[K.ST_FBSLOTS] = st[K.ST_FBSEQ] = n
    return fh, fq, fb, fbi, st


def _is_heap(fh, n):
    """The kernel's 4-ary heap invariant on (time, seq)."""
    from geoslo.sim.kurma import _kernels as K

    key = [(fh[K.FH_T, h], fh[K.FH_SEQ, h]) for h in range(n)]
    return all(key[(h - 1) // 4] < key[h] for h in range(1, n))


@pytest.mark.parametrize("fifo_share", [0.0, 0.6], ids=["heap", "heap-and-fifos"])
@pytest.mark.parametrize("kern", ["compiled", "reference"])
def test_feedback_heap_applies_due_events_in_time_then_sequence_order(kern, fifo_share):
    """Due events are applied in (time, seq) order, whether they wait in the heap or in
    the servers' FIFOs (many equal times across both)."""
    from geoslo.sim.kurma import _kernels as K

    kern = K if kern == "compiled" else reference_kernels()
    rng = np.random.default_rng(3)
    times = rng.integers(0, 40, 300).astype(float)  # many equal times
    events = [(t, seq, int(rng.integers(2)), int(rng.integers(10))) for seq, t in enumerate(times)]
    to_fifo = rng.random(len(events)) < fifo_share
    fh, fq, fb, fbi, st = _feedback_queues(events, to_fifo)
    gs, _, pp, *_ = _la_state(min_measure=5.0)
    gs[:] = 0.0
    expected = gs.copy()
    site_off = np.array([0, 5, 10], dtype=np.int64)
    ss, res = np.zeros((2, 2, K.NSS)), np.zeros((2, 2, 4, K.NRS))
    args = (K.LATENCY_AWARE, fh, fq, fb, fbi, st, gs, ss, res, np.zeros(K.NGL), site_off, pp)
    applied_before = -np.inf
    for t_end in (20.0, 20.0, 1e9):  # the second call finds nothing due
        kern._apply_feedback(t_end, *args)
        for t, seq, src, host in sorted(events):
            if applied_before <= t < t_end:
                K._la_feedback(expected, src, host, t, 10.0 + 7.0 * seq, pp)
        applied_before = t_end
        n = st[K.ST_NFB]
        assert n == sum(t >= t_end and not f for t, f in zip(times, to_fifo, strict=True))
        assert _is_heap(fh, n)
        assert np.array_equal(gs, expected)
    assert st[K.ST_FBNFREE] == len(events)
    assert sorted(fbi[: len(events), K.FBI_FREE]) == list(range(len(events)))
    assert np.all(fq[[K.FQ_HEAD, K.FQ_TAIL]] == -1) and np.all(fq[K.FQ_T] == np.inf)


def test_feedback_heap_stays_valid_under_overload():
    """Many responses in flight: the heap invariant holds, the FIFOs are in (time, seq)
    order and payload rows are not lost."""
    from geoslo.sim.kurma import _kernels as K

    s = build_sim("latency_aware", rate_rps=40000.0, seed=4)
    s.run(1.0)
    n = int(s._st[K.ST_NFB])
    assert n > 100 and _is_heap(s._fh, n)
    in_heap = s._fh[K.FH_SLOT, :n].astype(np.int64).tolist()
    in_fifos = []
    for g in range(s._fq.shape[1]):  # local events wait in their server's FIFO
        slot, keys = int(s._fq[K.FQ_HEAD, g]), []
        while slot >= 0:
            in_fifos.append(slot)
            keys.append((s._fb[slot, K.FB_T], s._fbi[slot, K.FBI_SEQ]))
            slot = int(s._fbi[slot, K.FBI_NEXT])
        assert keys == sorted(keys) and (not keys or s._fq[K.FQ_T, g] == keys[0][0])
    used = set(in_heap + in_fifos)
    free = set(s._fbi[: s._st[K.ST_FBNFREE], K.FBI_FREE].tolist())
    assert len(in_fifos) > 1000 and len(used) == n + len(in_fifos) and not used & free
    assert used | free == set(range(int(s._st[K.ST_FBSLOTS])))


def _ds_insert_by_scan(res, count, t_ms, x, u, alpha_per_s):
    """Codahale's ExponentiallyDecayingReservoir insert, by a scan for the lowest priority."""
    w = math.exp(alpha_per_s * (t_ms - 0.0) / 1000.0)
    prio = w / (1.0 - u)
    if count < res.shape[0]:
        res[count] = (x, w, prio)
        return count + 1
    kmin = int(np.argmin(res[:, 2]))  # the first of equal priorities
    if prio > res[kmin, 2]:
        res[kmin] = (x, w, prio)
    return count


@pytest.mark.parametrize("kern", ["compiled", "reference"])
def test_dynamic_snitch_reservoir_heap_equals_a_scan(kern):
    from geoslo.sim.kurma import _kernels as K

    kern = K if kern == "compiled" else reference_kernels()
    size = 16
    ss = np.zeros((1, 1, K.NSS))
    res = np.zeros((1, 1, size, K.NRS))
    pp = np.zeros(K.NPP)
    pp[K.PP_DS_ALPHA_PER_S] = 0.75
    ref = np.zeros((size, 3))
    count = 0
    rng = np.random.default_rng(5)
    for k in range(2000):
        if k == 1000:  # reset, as every ds_reset_interval_ms
            ss[0, 0, K.SS_COUNT] = 0.0
            count = 0
        t_ms = float(k // 50)  # equal weights within a block
        u = float(rng.integers(4)) / 4.0  # equal priorities are common
        kern._ds_feedback(ss, res, 0, 0, t_ms, float(k), u, 0.0, pp)
        count = _ds_insert_by_scan(ref, count, t_ms, float(k), u, 0.75)
        assert ss[0, 0, K.SS_COUNT] == count
        assert np.array_equal(res[0, 0, :count, :3], ref[:count])


# ----------------------------------------------------------------------------- server choice


def _sc_state(in_flight, psi_r=None, rf=3):
    """One coordinator, one site of len(in_flight) servers: its in-flight counts per server
    (and C3's response EWMA, else equal)."""
    from geoslo.sim.kurma import _kernels as K

    n = len(in_flight)
    gs = np.zeros((1, n, K.NGS))
    gs[0, :, K.GS_C3_OS] = in_flight
    gs[0, :, K.GS_C3_SVC] = 0.1
    gs[0, :, K.GS_C3_R] = psi_r if psi_r is not None else 1.0
    pp = np.zeros(K.NPP)
    pp[K.PP_SC_RF] = rf
    pp[K.PP_C3_NCLIENTS] = 1.0
    return gs, pp, np.array([0, n]), np.array([n])


@pytest.mark.parametrize("kern", ["compiled", "reference"])
@pytest.mark.parametrize(
    ("choice", "u_server", "u_second", "in_flight", "expected"),
    [
        ("random", 0.5, 0.0, [0, 0, 9, 0, 0], 2),  # the key's start, whatever is in flight
        ("least_outstanding", 0.5, 0.0, [0, 0, 9, 4, 2], 4),  # replicas 2, 3, 4
        ("least_outstanding", 0.9, 0.0, [1, 3, 0, 0, 5], 0),  # replicas 4, 0, 1 (wraps)
        ("least_outstanding", 0.5, 0.0, [0, 0, 2, 2, 2], 2),  # ties: the first from the start
        ("p2c", 0.5, 0.1, [0, 0, 5, 1, 0], 3),  # draws replica 0 (srv 2), then 1 (srv 3)
        ("p2c", 0.5, 0.1, [0, 0, 1, 5, 0], 2),
        ("p2c", 0.5, 0.1, [0, 0, 3, 3, 0], 2),  # ties: the first drawn
        ("p2c", 0.5, 0.9, [0, 0, 0, 9, 9], 4),  # draws replica 2, then 1: never replica 0
        ("c3", 0.5, 0.0, [0, 0, 3, 0, 1], 3),  # psi grows with os: the idle replica
    ],
)
def test_server_choice_picks_among_the_keys_replicas(
    kern, choice, u_server, u_second, in_flight, expected
):
    from geoslo.sim.kurma import _kernels as K

    kern = K if kern == "compiled" else reference_kernels()
    gs, pp, off, n = _sc_state(in_flight)
    code = sim.SERVER_CHOICE_CODES[choice]
    assert kern._server_in_site(code, 0, 0, u_server, u_second, gs, pp, off, n) == expected


@pytest.mark.parametrize("kern", ["compiled", "reference"])
def test_round_robin_walks_the_site_and_skips_servers_without_the_key(kern):
    from geoslo.sim.kurma import _kernels as K

    kern = K if kern == "compiled" else reference_kernels()
    code = sim.SERVER_CHOICE_CODES["round_robin"]
    gs, pp, off, n = _sc_state([0] * 5, rf=5)  # every server holds the key: 0, 1, 2, 3, 4, 0
    got = [kern._server_in_site(code, 0, 0, 0.7, 0.0, gs, pp, off, n) for _ in range(6)]
    assert got == [0, 1, 2, 3, 4, 0]
    gs, pp, off, n = _sc_state([0] * 5, rf=2)  # keys on (3, 4), (0, 1), (3, 4): cursor 0, 2, 1
    got = [kern._server_in_site(code, 0, 0, u, 0.0, gs, pp, off, n) for u in (0.7, 0.1, 0.7)]
    assert got == [3, 0, 3]


def test_c3_server_choice_ranks_by_response_ewma_too():
    from geoslo.sim.kurma import _kernels as K

    gs, pp, off, n = _sc_state([0, 0, 0, 0, 0], psi_r=np.array([1.0, 1.0, 9.0, 2.0, 1.5]))
    assert K._server_in_site(K.SC_C3, 0, 0, 0.5, 0.0, gs, pp, off, n) == 4


@pytest.mark.parametrize(
    ("server_choice", "at"),
    [("least_outstanding", "client"), ("p2c", "client"), ("c3", "client")]
    + [("least_outstanding", "site"), ("p2c", "site")],
)
def test_load_aware_server_choices_dodge_slowed_servers(server_choice, at):
    """A site with two of five servers 4x slower at 60% of its capacity: a choice that
    counts requests in flight misses the SLO less than random choice and answers faster on
    average (same seed, same arrivals); random's queues at the slow servers run away."""
    outcome = {}
    for choice in ("random", server_choice):
        s = build_sim(
            "rates", rate_rps=25000.0, n_sites=1, seed=2, server_choice=choice, server_choice_at=at
        )
        s.set_server_slowdown(0, np.array([4.0, 4.0, 1.0, 1.0, 1.0]))
        stats = s.run(3.0)
        mean_ms = stats.response_sum_ms.sum() / stats.completed.sum()
        outcome[choice] = (stats.violation_fraction[0], mean_ms)
    assert outcome[server_choice][0] < 0.5 * outcome["random"][0]
    assert outcome[server_choice][1] < outcome["random"][1]


def _site_state(queues, rf=3):
    """Site 0 of len(queues) servers whose last finish times put queues[s] requests after
    t = 100 ms (in service or queued)."""
    from geoslo.sim.kurma import _kernels as K

    n = len(queues)
    ring = np.zeros((1, n, K.RING))
    ring_n = np.zeros((1, n), dtype=np.int64)
    for s, q in enumerate(queues):
        finishes = [50.0, 90.0] + [100.0 + 5 * k for k in range(1, q + 1)]
        ring[0, s, : len(finishes)] = finishes
        ring_n[0, s] = len(finishes)
    pp = np.zeros(K.NPP)
    pp[K.PP_SC_RF] = rf
    bq = np.zeros((1, K.NBQ), dtype=np.int64)
    bq[0, K.BQ_THREADS] = 1
    free = np.full((1, n, 1), -1e300)
    return ring, ring_n, np.zeros((1, K.NCS)), pp, np.array([n]), free, bq


@pytest.mark.parametrize("kern", ["compiled", "reference"])
@pytest.mark.parametrize(
    ("choice", "u_server", "u_second", "queues", "expected"),
    [
        ("random", 0.5, 0.0, [0, 0, 9, 0, 0], 2),
        ("least_outstanding", 0.5, 0.0, [0, 0, 9, 4, 2], 4),
        ("least_outstanding", 0.9, 0.0, [1, 3, 0, 0, 5], 0),  # wraps: replicas 4, 0, 1
        ("least_outstanding", 0.5, 0.0, [0, 0, 2, 2, 2], 2),
        ("p2c", 0.5, 0.1, [0, 0, 5, 1, 0], 3),
        ("p2c", 0.5, 0.9, [0, 0, 0, 9, 9], 4),
    ],
)
def test_a_sites_balancer_reads_the_servers_queues_on_arrival(
    kern, choice, u_server, u_second, queues, expected
):
    from geoslo.sim.kurma import _kernels as K

    kern = K if kern == "compiled" else reference_kernels()
    ring, ring_n, cs, pp, n, free, bq = _site_state(queues)
    code = sim.SERVER_CHOICE_CODES[choice]
    got = kern._server_at_site(
        code, 0, u_server, u_second, 100.0, ring, ring_n, cs, pp, n, free, bq
    )
    assert got == expected


def test_c3_is_chosen_by_the_client():
    with pytest.raises(InputError, match="server_choice_at"):
        build_sim(server_choice="c3", server_choice_at="site")

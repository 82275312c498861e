"""The backend's three tails (issue 37, item 4) and the measured CPU quota of the live twin
(item 7): kernel vs reference, what each tail does to the queues, and each calibrated
backend's Fig. 4 anchors."""

from __future__ import annotations

import numpy as np
import pytest

import geoslo.sim.kurma as sim
from geoslo.errors import ConfigError
from geoslo.sim.kurma import BackendParams, RequestLevelSim, ServiceParams, residual_wan_samples_ms
from geoslo.sim.kurma import _kernels as K
from geoslo.sim.kurma._env import _service_row
from geoslo.sim.kurma._profile import _services
from geoslo.sim.kurma._reference import reference_kernels

RTT_MS = np.array([[0.0, 10.0, 12.0], [10.0, 0.0, 22.0], [12.0, 22.0, 0.0]])  # Table 2
FRACTIONS = np.array([[0.8, 0.1, 0.1], [0.2, 0.7, 0.1], [0.0, 0.05, 0.95]])
NEW_TAILS = ("site_stalls", "heavy_tail_threads", "cpu_quota")
# The live testbed's server: ~0.33 ms of CPU a read, 10% of each 10-ms period (docs/live.md)
LIVE_LIKE_CPU = ServiceParams(base_mean_ms=0.33, lognormal_sigma=0.2)


def backend_of(tail, **overrides):
    if tail == "cpu_quota":
        return BackendParams.cpu_quota(LIVE_LIKE_CPU, 0.1, 10.0, **overrides)
    return BackendParams.for_tail(tail, **overrides)


def build_sim(backend, policy="rates", rate_rps=3000.0, n_sites=3, slo_ms=30.0, **params):
    return RequestLevelSim(
        site_names=["London", "Ireland", "Frankfurt"][:n_sites],
        backend=backend,
        rate_traces=[np.full(60, rate_rps)] * n_sites,
        write_fraction=0.05,
        base_rtt_ms=RTT_MS[:n_sites, :n_sites],
        residual_rtt_samples_ms=residual_wan_samples_ms(500, seed=0),
        slo_ms=slo_ms,
        seed=1,
        policy=policy,
        policy_params=params or None,
    )


def _arrays(stats):
    return {
        name: getattr(stats, name)
        for name in stats.__dataclass_fields__
        if isinstance(getattr(stats, name), np.ndarray)
    }


def one_site_stall(start_ms, length_ms):
    """A site's timeline in the kernel's layout: one pause, then the sentinel."""
    return np.array([[[start_ms, start_ms + length_ms], [1e9, np.inf]]])


@pytest.mark.parametrize("policy", list(sim.POLICIES))
@pytest.mark.parametrize("tail", NEW_TAILS)
def test_kernel_equals_reference_exactly_for_each_tail(tail, policy):
    """Same inputs: compiled and interpreted kernels agree bit for bit on every tail
    (stalls busy enough to hit queued requests: 20 pauses/s of 5 ms)."""
    stressed = {"site_stall_rate_per_s": 20.0, "site_stall_mean_ms": 5.0}
    backend = backend_of(tail, **(stressed if tail == "site_stalls" else {}))
    rate = 9000.0 if policy == "c3" else 3000.0
    rate = 600.0 if tail == "cpu_quota" else rate  # the 5 servers' capacity: 1,515 req/s
    params = {"c3_initial_rate": 20.0} if policy == "c3" else {}
    compiled = build_sim(backend, policy, rate_rps=rate, **params)
    interpreted = build_sim(backend, policy, rate_rps=rate, **params)
    frac = FRACTIONS if policy == "rates" else None
    ref = reference_kernels()
    for duration_s in (0.35, 0.4):
        a = _arrays(compiled.run(duration_s, frac))
        b = _arrays(interpreted.run(duration_s, frac, kernels=ref))
        for name in a:
            assert np.array_equal(a[name], b[name]), name
        assert a["completed"].sum() > 0


@pytest.mark.parametrize("kern", [K, reference_kernels()], ids=["kernel", "reference"])
def test_a_site_stall_freezes_every_server_with_its_queued_and_running_requests(kern):
    """A pause at [1, 11) ms: the request in service on server 0 and the one queued behind
    it, one arriving during the pause on server 1, one on server 2 after it."""
    arrival_ms = np.array([0.0, 0.2, 5.0, 20.0])
    server = np.array([0, 0, 1, 2])
    svc_ms = np.array([2.0, 1.0, 1.0, 1.0])
    out = kern.profile_kernel(
        arrival_ms, server, svc_ms, 5, 0.0, 1, one_site_stall(1.0, 10.0), 0.0, 1.0
    )
    finish_ms = out + arrival_ms
    # 1 ms done before the pause, 1 ms after it; the queued one after that
    assert finish_ms.tolist() == [12.0, 13.0, 12.0, 21.0]


def test_site_stalls_delay_requests_on_every_server_of_the_site():
    """One 30-ms pause at 200 ms in a lightly loaded site: the requests arriving in its
    first ~19 ms, on any of the 5 servers, answer after 15 ms (one server only: a fifth)."""
    backend = BackendParams.site_stalls()
    rate_rps = 10000.0
    s = build_sim(backend, rate_rps=rate_rps, n_sites=1, slo_ms=15.0)
    s._stalls._next[0] = (200.0, 230.0)  # the site's first pause, then none for 1e9 s
    s._stalls._gap_mean_ms[0] = 1e12
    st = s.run(0.5)
    # arriving t ms into the pause: done after 30 - t + the queue built ahead of it
    # (rho_server * t) + 0.5 ms of overhead, over 15 ms while t < 15.5 / (1 - rho_server)
    rho_server = rate_rps / backend.servers * backend.read.mean_ms / 1000.0
    expected = rate_rps * 15.5 / (1.0 - rho_server) / 1000.0
    assert 0.8 * expected < st.violations.sum() < 1.25 * expected


@pytest.mark.parametrize("kern", [K, reference_kernels()], ids=["kernel", "reference"])
def test_a_read_stage_of_t_threads_serves_t_long_requests_concurrently(kern):
    threads = 4
    arrival_ms = np.array([0.0, 0.1, 0.2, 0.3, 0.4])
    svc_ms = np.full(5, 100.0)
    no_stalls = np.zeros((1, 0, 2))
    out = kern.profile_kernel(
        arrival_ms, np.zeros(5, np.int64), svc_ms, 1, 0.0, threads, no_stalls, 0.0, 1.0
    )
    finish_ms = out + arrival_ms
    assert np.allclose(finish_ms[:threads], arrival_ms[:threads] + 100.0)  # side by side
    assert finish_ms[threads] == pytest.approx(200.0)  # into the first thread to free


@pytest.mark.parametrize("kern", [K, reference_kernels()], ids=["kernel", "reference"])
def test_a_server_under_a_cpu_quota_serves_in_bursts_at_each_period(kern):
    """1 ms of CPU per 10-ms period (the golden-ratio phase of server 0 of site 0 is 0): an
    idle server with quota left serves at CPU speed; one that spent it waits for the next
    period, mid-request too; an unused quota is not carried over."""
    arrival_ms = np.array([0.0, 0.1, 0.2, 35.0, 41.5])
    svc_ms = np.array([0.4, 0.4, 0.4, 0.3, 0.3])
    out = kern.profile_kernel(
        arrival_ms, np.zeros(5, np.int64), svc_ms, 1, 0.0, 1, np.zeros((1, 0, 2)), 1.0, 10.0
    )
    finish_ms = out + arrival_ms
    # 0.4 + 0.4 by 0.8 ms; the third has 0.2 ms left: throttled at 1.0, 0.2 more at 10.2;
    # a new period at 30 (unused); 41.5 in the period from 40: fresh quota
    assert finish_ms == pytest.approx([0.4, 0.8, 10.2, 35.3, 41.8])


def test_a_cpu_quota_caps_a_servers_throughput_at_its_share_of_a_cpu():
    """Saturated, a server under a 10% quota completes 1 ms of CPU a 10-ms period however
    its requests' CPU times vary; below saturation the answers come in bursts (the response
    times of a server at 60% of its capacity stay within a few periods)."""
    backend = BackendParams.cpu_quota(LIVE_LIKE_CPU, 0.1, 10.0, servers=1, overhead_ms=0.0)
    assert backend.read_capacity_rps == pytest.approx(1000.0 * 0.1 / 0.33)
    assert backend.cpu_quota_us == (1000, 10000)
    saturated = sim.profile_site(backend, 3.0 * backend.read_capacity_rps, 0.0, 20.0, seed=3)
    assert saturated.max() > 5_000.0  # the queue grows: arrivals at 3x what the quota serves
    moderate = sim.profile_site(backend, 0.6 * backend.read_capacity_rps, 0.0, 60.0, seed=3)
    assert np.percentile(moderate, 50) < 10.0 and np.percentile(moderate, 99) < 60.0
    exponential = BackendParams(
        servers=1, read=ServiceParams(base_mean_ms=3.3), write=ServiceParams(base_mean_ms=3.3)
    )
    heavier = sim.profile_site(exponential, 0.6 * exponential.read_capacity_rps, 0.0, 60.0, seed=3)
    assert np.percentile(heavier, 99) > 1.5 * np.percentile(moderate, 99)


def test_heavy_tail_service_is_lognormal_above_its_floor():
    """The kernel's draw (Box-Muller from the request's two draws) and the profile's agree,
    and log(service - floor) has the stated log-sd and median."""
    svc = BackendParams.heavy_tail_threads().read
    rng = np.random.default_rng(0)
    e_base, u = rng.standard_exponential(200_000), rng.random(200_000)
    draws = _services(svc, e_base, u)
    row = _service_row(svc)
    kernel = [K.service_ms(e_base[k], u[k], *row, 1.0) for k in range(100)]
    assert np.allclose(kernel, draws[:100], rtol=1e-12)
    assert draws.min() >= svc.floor_ms
    logs = np.log(draws - svc.floor_ms)
    assert np.std(logs) == pytest.approx(svc.lognormal_sigma, rel=0.02)
    median = svc.base_mean_ms * np.exp(-0.5 * svc.lognormal_sigma**2)
    assert np.exp(np.median(logs)) == pytest.approx(median, rel=0.05)


@pytest.mark.parametrize("tail", BackendParams.TAILS)
def test_named_backends_keep_the_capacity_anchor(tail):
    backend = BackendParams.for_tail(tail)
    assert backend.tail == tail
    assert backend.read_capacity_rps == pytest.approx(55e3, rel=1e-3)
    assert getattr(BackendParams, tail)() == backend
    assert BackendParams.server_stalls() == BackendParams()


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"tail": "nope"}, "tail"),
        ({"threads": 4}, "threads"),
        ({"tail": "site_stalls"}, "site_stall_rate_per_s"),
        ({"site_stall_rate_per_s": 1.0, "site_stall_mean_ms": 5.0}, "site_stall_rate_per_s"),
        ({"tail": "heavy_tail_threads"}, "read.lognormal_sigma"),
        ({"site_stall_length_shape": 0.0}, "site_stall_length_shape"),
        ({"tail": "cpu_quota"}, "cpu_quota_fraction"),
        ({"cpu_quota_fraction": 0.1, "cpu_quota_period_ms": 10.0}, "cpu_quota_fraction"),
        (
            {"tail": "cpu_quota", "cpu_quota_fraction": 1.5, "cpu_quota_period_ms": 10.0},
            "cpu_quota_fraction",
        ),
    ],
)
def test_bad_tails_name_the_field(kwargs, field):
    with pytest.raises(ConfigError) as err:
        BackendParams(**kwargs)
    assert err.value.field == field


def test_lognormal_service_has_no_stalls():
    with pytest.raises(ConfigError, match="stall_probability"):
        ServiceParams(
            base_mean_ms=1.0, stall_probability=0.1, stall_mean_ms=5.0, lognormal_sigma=1.0
        )


def serve_one_server(kern, arrival_ms, svc_ms, threads, stall_ms):
    """Run requests through `_process_servers` on one server of one site; return the queue
    lengths they saw on arrival (as C3 reads them) and their finish times."""
    n = arrival_ms.size
    pf = np.zeros((n, K.NPF))
    pf[:, K.PF_ARR] = arrival_ms
    pf[:, K.PF_SVC] = svc_ms
    pf[:, K.PF_ISSUE] = pf[:, K.PF_SEND] = arrival_ms
    pi = np.zeros((n, K.NPI), dtype=np.int64)
    pi[:, K.PI_SEQ] = np.arange(n)
    st = np.zeros(K.NST, dtype=np.int64)
    st[K.ST_NPEND] = n
    fq = np.zeros((K.NFQ, 1))
    fq[[K.FQ_HEAD, K.FQ_TAIL]] = -1.0
    fq[K.FQ_T] = np.inf
    fb, fbi = np.zeros((n, K.NFB)), np.zeros((n, K.NFBI), dtype=np.int64)
    bq = np.zeros((1, K.NBQ), dtype=np.int64)
    bq[0, [K.BQ_HI, K.BQ_THREADS]] = stall_ms.shape[1], threads
    kern._process_servers(
        1e9, True, True, pf, pi, st, np.full((1, 1, threads), -1e300), np.zeros((K.NFH, n)),
        fq, fb, fbi, np.zeros((1, 1, K.RING)), np.zeros((1, 1), dtype=np.int64),
        np.array([0, 1]), np.zeros(1), 30.0, 0, 0.0, np.zeros((1, 1), dtype=np.int64),
        np.zeros((1, 1), dtype=np.int64), np.zeros((1, 1)), np.full((1, 1, 1), np.inf),
        np.zeros((1, 5)), np.zeros(1, dtype=np.int64), np.zeros((1, K.NCS)), np.zeros(K.NPP),
        np.array([1]), np.ones((1, 1)), stall_ms, bq,
    )  # fmt: skip
    return fb[:, K.FB_QLEN].tolist(), (fb[:, K.FB_RESP] + arrival_ms).tolist()


@pytest.mark.parametrize("kern", [K, reference_kernels()], ids=["kernel", "reference"])
def test_queue_length_counts_queued_and_running_requests_on_every_tail(kern):
    """What C3 reads: the requests queued or in service at the server on arrival."""
    arrival_ms = np.array([0.0, 1.0, 2.0, 3.0, 12.0])
    svc_ms = np.array([10.0, 10.0, 10.0, 1.0, 1.0])
    # two threads: the third waits for the first to free at 10, the fourth for the second
    qlen, finish_ms = serve_one_server(kern, arrival_ms, svc_ms, 2, np.zeros((1, 0, 2)))
    assert qlen == [0, 1, 2, 3, 1]
    assert finish_ms == [10.0, 11.0, 20.0, 12.0, 13.0]
    # one thread, frozen over [5, 8): the pause holds every request queued behind
    qlen, finish_ms = serve_one_server(kern, arrival_ms, svc_ms, 1, one_site_stall(5.0, 3.0))
    assert qlen == [0, 1, 2, 3, 4]
    assert finish_ms == [13.0, 23.0, 33.0, 34.0, 35.0]

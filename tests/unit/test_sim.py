"""Request-level simulator: kernel vs reference, conservation, load response, API."""

from __future__ import annotations

import numpy as np
import pytest

import geoslo.sim as sim
from geoslo.errors import InputError
from geoslo.sim import BackendParams, RequestLevelSim, residual_wan_samples_ms
from geoslo.sim._reference import reference_kernels

RTT_MS = np.array([[0.0, 10.0, 12.0], [10.0, 0.0, 22.0], [12.0, 22.0, 0.0]])  # Table 2
FRACTIONS = np.array([[0.8, 0.1, 0.1], [0.2, 0.7, 0.1], [0.0, 0.05, 0.95]])


def build_sim(
    policy="rates", rate_rps=3000.0, write_fraction=0.0, seed=1, n_sites=3, **params
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
        "IntervalStats",
        "POLICIES",
        "DEFAULT_POLICY_PARAMS",
        "profile_site",
        "Crossings",
        "measure_crossings",
        "calibrate_backend",
    }


@pytest.mark.parametrize("policy", list(sim.POLICIES))
def test_kernel_equals_reference_exactly(policy):
    """Same seed, same inputs: the compiled kernel and the interpreted one agree bit for bit."""
    rate = 9000.0 if policy == "c3" else 3000.0
    params = {"c3_initial_rate": 20.0} if policy == "c3" else {}
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

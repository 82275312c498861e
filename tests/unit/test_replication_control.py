"""The geo-replication controller's pure parts (Dürango et al., CDC 2016, §IV): arrival
models and Kalman filter, the MPC's plan, the image integral, the baselines."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from geoslo.control.replication import (
    FifoPolicy,
    Measurement,
    PrioPolicy,
    ReplicationConfig,
    ReplicationController,
    ShareMpc,
    StaticPolicy,
    Weights,
)
from geoslo.control.replication.loop import next_integral
from geoslo.errors import ConfigError
from geoslo.models import (
    ArrivalModel,
    arrivals_from_buffers,
    image_arrivals,
    kalman_step,
    predicted_arrivals,
)


def test_arrivals_are_the_buffer_change_plus_what_was_sent():
    assert arrivals_from_buffers([10, 0, 5], [12, 3, 0], [8, 1, 5]).tolist() == [10, 4, 0]


def test_random_walk_filter_settles_on_a_constant_arrival():
    model = ArrivalModel("random-walk")
    state = model.initial(0.0)
    for _ in range(30):
        state = kalman_step(model, state, 80.0)
    assert predicted_arrivals(model, state, 5) == pytest.approx([80.0] * 5, abs=0.5)


def test_local_trend_filter_extrapolates_a_ramp():
    model = ArrivalModel("local-trend", process_noise_mb=1.0, measurement_noise_mb=1.0)
    state = model.initial(0.0)
    for k in range(60):
        state = kalman_step(model, state, 10.0 + 2.0 * k)  # +2 MB per interval
    ahead = predicted_arrivals(model, state, 3)
    assert ahead == pytest.approx([10.0 + 2.0 * 60, 10.0 + 2.0 * 61, 10.0 + 2.0 * 62], abs=1.0)


def test_predicted_arrivals_are_never_negative():
    model = ArrivalModel("local-trend")
    state = model.initial(0.0)
    for k in range(20):
        state = kalman_step(model, state, max(100.0 - 10 * k, 0.0))
    assert np.all(predicted_arrivals(model, state, 30) >= 0)


@pytest.mark.parametrize(
    ("now_s", "expected_intervals"),
    [(0.0, [60]), (590.0, [1, 61]), (595.0, [0, 60]), (600.0, [0, 60]), (1190.0, [1, 61])],
)
def test_images_arrive_every_period_from_the_first_period(now_s, expected_intervals):
    arrivals = image_arrivals(now_s, 10.0, 62, 375.0, 600.0)
    assert np.flatnonzero(arrivals).tolist() == expected_intervals
    assert set(arrivals[arrivals > 0]) == {375.0}


def test_arrival_model_rejects_unknown_kinds_and_bad_noise():
    with pytest.raises(ConfigError, match="kind"):
        ArrivalModel("seasonal")
    with pytest.raises(ConfigError, match="process_noise_mb"):
        ArrivalModel(process_noise_mb=0.0)


def test_integral_grows_with_the_image_backlog_and_restarts_when_it_empties():
    assert next_integral(100.0, 50.0) == 150.0
    assert next_integral(100.0, 0.0) == 0.0


def _plan(buffers_mb, arrivals_mb, config=None, previous=(1 / 3, 1 / 3, 1 / 3), integral=0.0):
    config = config or ReplicationConfig()
    arrivals = np.tile(np.asarray(arrivals_mb, float), (config.horizon, 1))
    return ShareMpc(config).solve(
        np.asarray(buffers_mb, float), arrivals, np.asarray(previous), integral
    )


def test_the_backlogged_stream_gets_the_link():
    plan = _plan([800.0, 0.0, 0.0], [40.0, 10.0, 0.0])
    assert plan.status == "solved"
    assert plan.shares[0, 0] > 0.9


def test_buffers_are_weighed_by_their_penalties():
    # equal backlogs: the application (q = 600) is served before replication (q = 250)
    plan = _plan([600.0, 600.0, 0.0], [60.0, 60.0, 0.0])
    assert plan.shares[0, 0] > plan.shares[0, 1]


def test_the_plan_follows_the_buffer_dynamics():
    config = ReplicationConfig()
    arrivals = np.array([70.0, 40.0, 0.0])
    plan = _plan([300.0, 200.0, 375.0], arrivals, config)
    x = np.array([300.0, 200.0, 375.0])
    for j in range(config.horizon):
        x = np.maximum(x + arrivals - config.capacity_mb * plan.shares[j], 0.0)
        assert plan.buffers_mb[j] == pytest.approx(x, abs=0.5)


def test_a_waiting_image_gains_share_as_its_integral_grows():
    # Experiment 1's weights: the image loses to the application's backlog until it has
    # waited long enough (the integral's quadratic penalty, mpc.py)
    shares = [
        _plan([1500.0, 0.0, 375.0], [125.0, 0.0, 0.0], integral=i).shares[0, 2]
        for i in (0.0, 30_000.0, 100_000.0)
    ]
    assert shares[0] < shares[1] < shares[2]
    assert shares[2] > 0.3


def test_moves_are_penalised():
    calm = ReplicationConfig(weights=Weights(moves=(1e10, 1e10, 1e10)))
    eager = _plan([800.0, 0.0, 0.0], [40.0, 10.0, 0.0])
    slow = _plan([800.0, 0.0, 0.0], [40.0, 10.0, 0.0], calm)
    assert 1 / 3 < slow.shares[0, 0] < eager.shares[0, 0] - 0.2  # a smaller first move
    assert slow.shares[1, 0] > slow.shares[0, 0]  # the move spread over steps


@settings(max_examples=40, deadline=None)
@given(
    buffers=st.lists(st.floats(0, 5000), min_size=3, max_size=3),
    arrivals=st.lists(st.floats(0, 200), min_size=3, max_size=3),
    previous=st.lists(st.floats(0, 1), min_size=3, max_size=3),
    integral=st.floats(0, 1e5),
)
def test_plans_are_valid_shares(buffers, arrivals, previous, integral):
    previous = np.asarray(previous) / max(1.0, sum(previous))
    plan = _plan(buffers, arrivals, previous=previous, integral=integral)
    assert plan.status in ("solved", "solved inaccurate")
    assert np.all(plan.shares >= 0)
    assert np.all(plan.shares.sum(axis=1) <= 1 + 1e-3)
    assert np.all(plan.buffers_mb >= 0)


def test_the_controller_warm_starts_and_tracks_the_integral():
    controller = ReplicationController(ReplicationConfig())
    measurement = Measurement(np.array([200.0, 50.0, 375.0]), np.zeros(3), np.array([90, 40, 0]))
    first = controller.step(measurement, 610.0)
    second = controller.step(measurement, 620.0)
    assert second.integral_mb == 750.0 and first.integral_mb == 375.0
    assert second.shares.sum() <= 1 + 1e-6
    assert second.filters[0].mean[0] > first.filters[0].mean[0]  # towards 90 MB


def test_baselines():
    config = ReplicationConfig()
    m = Measurement(np.zeros(3), np.zeros(3), np.zeros(3))
    assert FifoPolicy().allocate(m, 0).shares == pytest.approx((1 / 3,) * 3)
    static = StaticPolicy.drbd(config).allocate(m, 0)
    assert static.shares == pytest.approx((0.65, 0.30, 0.05))  # 375 MB / 600 s = 5 Mbps
    assert PrioPolicy().allocate(m, 0).mode == "priority"
    with pytest.raises(ConfigError):
        StaticPolicy((0.8, 0.3, 0.0))

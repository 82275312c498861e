"""The geo-replication controller's pure parts (Dürango et al., CDC 2016, §IV): arrival
models and Kalman filter, the MPC's plan, the image integral, the baselines."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy.linalg import solve_triangular
from scipy.optimize import nnls
from typer.testing import CliRunner

from geoslo.cli import app
from geoslo.control.replication import (
    FifoPolicy,
    Measurement,
    MpcPolicy,
    PolicyLoop,
    PrioPolicy,
    ReplicationConfig,
    ReplicationController,
    ReplicationObservation,
    ShareMpc,
    StaticPolicy,
    Weights,
    mpc,
)
from geoslo.control.replication.baselines import POLICIES, policy_loop
from geoslo.control.replication.decide import decide, next_integral
from geoslo.control.replication.example import example_state
from geoslo.control.replication.validation import decision_to_dict
from geoslo.errors import ConfigError
from geoslo.experiments.replication._workloads import experiment_2
from geoslo.models import (
    ArrivalModel,
    FilterState,
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


@pytest.mark.parametrize("kind", ["random-walk", "local-trend"])
@pytest.mark.parametrize("slope", [3.0, -3.0])
def test_predicted_arrivals_are_g_f_to_the_j_plus_1_z(kind, slope):
    model = ArrivalModel(kind)
    state = FilterState(np.array([50.0, slope][: model.order]), np.eye(model.order))
    f, g = model.transition(), model.observation()[0]
    ahead = [g @ np.linalg.matrix_power(f, j + 1) @ state.mean for j in range(30)]
    assert predicted_arrivals(model, state, 30) == pytest.approx(np.maximum(ahead, 0.0))


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
    eager = ReplicationConfig(weights=Weights(moves=(1e3, 1e3, 1e3)))
    plan = _plan([800.0, 0.0, 0.0], [40.0, 10.0, 0.0], eager)
    assert plan.outcome.status == "optimal"
    assert plan.shares[0, 0] > 0.9
    smooth = _plan([800.0, 0.0, 0.0], [40.0, 10.0, 0.0])  # the paper's r: step by step
    assert np.all(np.diff(smooth.shares[:5, 0]) > 0) and smooth.shares[:, 0].max() > 0.7
    assert smooth.buffers_mb[-1, 0] < 1.0  # drained within the horizon


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
    calm = ReplicationConfig(weights=Weights(moves=(1e8, 1e8, 1e8)))
    eager = _plan([800.0, 0.0, 0.0], [40.0, 10.0, 0.0])
    slow = _plan([800.0, 0.0, 0.0], [40.0, 10.0, 0.0], calm)
    assert 1 / 3 < slow.shares[0, 0] < eager.shares[0, 0] - 0.1  # a smaller first move
    assert slow.shares[1, 0] > slow.shares[0, 0]  # the move spread over steps


@settings(max_examples=40, deadline=None)
@example(  # ended "solved inaccurate" before the cold re-solve (mpc.RETRY_RHO)
    buffers=[739.0, 0.0, 4162.0], arrivals=[0.0, 2e-05, 1.0], previous=[0, 0, 0], integral=0.0
)
@given(
    buffers=st.lists(st.floats(0, 5000), min_size=3, max_size=3),
    arrivals=st.lists(st.floats(0, 200), min_size=3, max_size=3),
    previous=st.lists(st.floats(0, 1), min_size=3, max_size=3),
    integral=st.floats(0, 1e5),
)
def test_plans_are_valid_shares(buffers, arrivals, previous, integral):
    previous = np.asarray(previous) / max(1.0, sum(previous))
    plan = _plan(buffers, arrivals, previous=previous, integral=integral)
    assert plan.outcome.status == "optimal"
    assert np.all(plan.shares >= 0)
    assert np.all(plan.shares.sum(axis=1) <= 1 + 1e-3)
    assert np.all(plan.buffers_mb >= 0)


def test_the_controller_warm_starts_and_tracks_the_integral():
    controller = ReplicationController(ReplicationConfig())
    measurement = Measurement(np.array([200.0, 50.0, 375.0]), np.zeros(3), np.array([90, 40, 0]))
    first = controller.step(ReplicationObservation(610.0, measurement))
    second = controller.step(ReplicationObservation(620.0, measurement))
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


# --- issue 15: finite buffer limits, the solver's status, the units of r, J --------------
# With buffers in MB the QP did not converge when a limit was active (OSQP stopped at its
# iteration limit, shares up to 0.34 from the optimum), the loop applied those shares
# anyway, r (1e6) was inert, and `objective` left out J's constant.


def _reference_plan(config, buffers_mb, arrivals_mb, previous, integral_mb):
    """The same QP condensed to the shares and slacks (buffers eliminated through the
    dynamics (1)) and solved exactly as a least-distance program by NNLS (Lawson and
    Hanson, ch. 23): an active-set method independent of OSQP's ADMM. Returns the plan's
    shares and buffers (MB)."""
    h, c, w = config.horizon, config.capacity_mb, config.weights
    n_u = 3 * h
    limits = np.asarray(config.buffer_limits_mb, float) / c
    slacks = bool(np.any(np.isfinite(limits)))
    n = n_u * (2 if slacks else 1)
    # x = cum - L u (flattened j*3 + i); i_vm = i0 + T (cum_vm - L_vm u); moves = D u - d0
    cum = (np.asarray(buffers_mb) / c + np.cumsum(np.asarray(arrivals_mb) / c, axis=0)).ravel()
    lower = np.tril(np.ones((h, h)))
    big_l = np.hstack([np.kron(lower, np.eye(3)), np.zeros((n_u, n - n_u))])
    vm = big_l[2::3]
    d = np.kron(np.eye(h) - np.eye(h, k=-1), np.eye(3))
    big_d = np.hstack([d, np.zeros((n_u, n - n_u))])
    d0 = np.concatenate([previous, np.zeros(n_u - 3)])
    terms = [  # (weight per row, A, b): weight * (A z - b)^2
        (np.tile(w.buffer, h), -big_l, -cum),
        (np.tile(w.moves, h), big_d, d0),
        (np.full(h, w.integral), -lower @ vm, -(integral_mb / c + lower @ cum[2::3])),
    ]
    linear = np.zeros(n)
    if slacks:
        s = np.hstack([np.zeros((n_u, n_u)), np.eye(n_u)])
        terms.append((np.full(n_u, mpc.SLACK_WEIGHT * max(w.buffer)), s, np.zeros(n_u)))
        linear[n_u:] = mpc.SLACK_LINEAR * max(w.buffer)
    scale = max(*w.buffer, *w.moves, w.integral)
    p = sum(2 * (a.T * wt) @ a for wt, a, _ in terms) / scale
    q = (linear - sum(2 * (a.T * wt) @ b for wt, a, b in terms)) / scale
    u_part = np.hstack([np.eye(n_u), np.zeros((n_u, n - n_u))])
    rows = [-u_part, np.kron(np.eye(h), np.ones((1, 3))) @ u_part, big_l]
    rhs = [np.zeros(n_u), np.ones(h), cum]
    if slacks:
        finite = np.tile(np.isfinite(limits), h)
        rows += [(-big_l - s)[finite], -s]
        rhs += [(np.tile(limits, h) - cum)[finite], np.zeros(n_u)]
    g, g_rhs = np.vstack(rows), np.concatenate(rhs)
    # min 1/2 z'Pz + q'z, G z <= g  ->  w = R z + L^-1 q, min |w| s.t. -G R^-1 w >= ...
    chol = np.linalg.cholesky(p)
    g_r = solve_triangular(chol, g.T, lower=True).T  # G R^-1
    q_l = solve_triangular(chol, q, lower=True)
    e, f = -g_r, -(g_rhs + g_r @ q_l)
    y, _ = nnls(np.vstack([e.T, f]), np.eye(n + 1)[-1], maxiter=50 * n)
    residual = np.vstack([e.T, f]) @ y - np.eye(n + 1)[-1]
    w_opt = -residual[:n] / residual[n]
    z = solve_triangular(chol.T, w_opt - q_l, lower=False)
    assert np.max(g @ z - g_rhs) < 1e-9  # the reference itself is feasible
    shares = z[:n_u].reshape(h, 3)
    buffers = (cum - big_l @ z).reshape(h, 3) * c
    return shares, buffers


def _limited_states():
    """Experiment 1's example interval with five sets of limits and an overloaded
    interval under Experiment 2's weights, each limit active at the optimum (before the
    fix, 5 of these 6 stopped at OSQP's iteration limit)."""
    base = example_state()
    cases = [
        ((300.0, 200.0, 400.0), (420.0, 180.0, 290.0)),
        ((500.0, 100.0, 1000.0), (420.0, 180.0, 290.0)),
        ((200.0, 200.0, 200.0), (100.0, 50.0, 375.0)),
        ((400.0, 150.0, 300.0), (600.0, 300.0, 100.0)),
        ((1000.0, 1000.0, 300.0), (420.0, 180.0, 290.0)),
    ]
    for limits_mb, buffers_mb in cases:
        config = replace(base.config, buffer_limits_mb=limits_mb)
        measurement = replace(base.measurement, buffers_mb=np.array(buffers_mb))
        yield replace(base, config=config, measurement=measurement)
    exp2 = experiment_2().config  # its weights: q up to 3e4, r = 5e6 (§V-D)
    for limits_mb, buffers_mb in [((400.0, 400.0, 500.0), (1500.0, 1400.0, 800.0))]:
        config = replace(exp2, buffer_limits_mb=limits_mb)
        measurement = replace(base.measurement, buffers_mb=np.array(buffers_mb))
        filters = (config.arrival_model.initial(105.0), config.arrival_model.initial(40.0))
        yield replace(base, config=config, measurement=measurement, filters=filters)


@pytest.mark.parametrize(
    "state", list(_limited_states()), ids=lambda s: str(s.config.buffer_limits_mb)
)
def test_with_active_buffer_limits_the_mpc_converges_to_the_optimum(state):
    decision = decide(state)
    assert decision.outcome.status == "optimal" and not decision.held
    config = state.config
    shares, buffers = _reference_plan(
        config,
        state.measurement.buffers_mb,
        decision.predicted_arrivals_mb,
        state.shares,
        decision.integral_mb,
    )
    limits = np.asarray(config.buffer_limits_mb)
    assert np.max(buffers - limits) > -1e-3 * config.capacity_mb  # a limit is active
    assert decision.planned_shares == pytest.approx(shares, abs=1e-4)
    # the predicted buffers are the plan's own: the dynamics (1) from the planned shares
    x = state.measurement.buffers_mb.astype(float)
    for j in range(config.horizon):
        x = x + decision.predicted_arrivals_mb[j] - config.capacity_mb * decision.planned_shares[j]
        assert decision.predicted_buffers_mb[j] == pytest.approx(x, abs=0.05)  # MB
    # `objective` is the whole J (7), constant included: the reference plan's J
    expected = mpc.plan_cost(config, shares, buffers, state.shares, decision.integral_mb)
    assert decision.outcome.objective == pytest.approx(expected, rel=1e-4)


def test_objective_is_the_whole_cost_j():
    # a plan that keeps the shares in force and buffers nothing: J is r * 0 + q * 0 + the
    # integral alone; a move from the shares in force costs r * move^2 even in the first
    # step (the constant r * u_prev^2 of the expanded square is part of J)
    config = ReplicationConfig(weights=Weights(buffer=(0.0, 0.0, 0.0), integral=0.0))
    plan = _plan([0.0, 0.0, 0.0], [0.0, 0.0, 0.0], config, previous=(0.5, 0.3, 0.2))
    assert plan.outcome.status == "optimal"
    # x >= 0 with no arrivals forces every share to 0: J = r * (0.5^2 + 0.3^2 + 0.2^2)
    assert plan.outcome.objective == pytest.approx(1e6 * (0.25 + 0.09 + 0.04), rel=1e-6)


def test_r_trades_share_moves_against_buffers():
    """§IV: r penalises share moves "to avoid ... the dynamics of the TCP window". With
    buffers in units of C the paper's weights put r in range: the first move shrinks
    steadily as r grows, from a jump to the backlogged stream to holding the shares."""
    state = example_state()  # shares in force 0.56/0.32/0.12; the application overloaded
    moves = []
    for r in np.logspace(4, 10, 7):
        weights = replace(state.config.weights, moves=(r, r, r))
        decision = decide(replace(state, config=replace(state.config, weights=weights)))
        assert decision.outcome.status == "optimal"
        moves.append(float(np.abs(decision.shares - state.shares).sum()))
    assert all(a > b for a, b in zip(moves[:-1], moves[1:], strict=True)), moves  # strictly smaller
    assert moves[0] > 0.5 and moves[-1] < 0.02  # from a jump to nearly holding
    at_paper_r = moves[2]  # r = 1e6, §V-C
    assert 0.05 < at_paper_r < 0.5  # neither inert nor frozen


def test_a_failed_solve_keeps_the_shares_in_force_and_says_so(monkeypatch, caplog):
    monkeypatch.setitem(mpc.OSQP_SETTINGS, "max_iter", 1)  # no plan within one iteration
    state = example_state()
    controller = ReplicationController(state.config, state.filters, state.shares, 0.0)
    with caplog.at_level("WARNING", logger="geoslo.control.replication.loop"):
        decision = controller.step(ReplicationObservation(state.now_s, state.measurement))
    assert decision.outcome.status == "failed" and decision.held
    assert decision.outcome.solver_status == "maximum iterations reached"
    assert decision.shares == pytest.approx(state.shares)  # kept, not the iterate's
    assert controller.shares == pytest.approx(state.shares)
    assert np.isfinite(decision.outcome.objective) and decision.outcome.decide_ms > 0
    assert "keeping the shares in force" in caplog.text
    policy = MpcPolicy(state.config)
    allocation = policy.allocate(state.measurement, state.now_s)
    assert allocation.shares == pytest.approx(tuple(policy.controller.shares))


def test_the_command_line_exits_3_and_writes_the_kept_shares_when_the_solve_fails(
    tmp_path, monkeypatch
):
    from geoslo.control.replication.validation import state_to_dict

    state = tmp_path / "state.json"
    state.write_text(json.dumps(state_to_dict(example_state())))
    out = tmp_path / "shares.json"
    runner = CliRunner()
    monkeypatch.setitem(mpc.OSQP_SETTINGS, "max_iter", 1)
    result = runner.invoke(app, ["replication", "decide", "-i", str(state), "-o", str(out)])
    assert result.exit_code == 3, result.output
    assert "failed" in result.output and "maximum iterations reached" in result.output
    written = json.loads(out.read_text())
    assert written["status"] == "failed" and "held" not in written
    assert written["solver_status"] == "maximum iterations reached"
    assert np.isfinite(written["objective"]) and written["decide_ms"] > 0
    assert written["shares"] == pytest.approx(json.loads(state.read_text())["shares"])


# --- issue 16: decide is the pure step, the loop keeps the state, one Outcome ------------


def _observations(count: int, config: ReplicationConfig):
    """An overloaded application and an image in flight, interval after interval."""
    for k in range(count):
        now_s = config.image_period_s + k * config.interval_s
        buffers = np.array([200.0 + 30 * k, 50.0, max(375.0 - 60 * k, 0.0)])
        measurement = Measurement(buffers, np.array([70.0, 40.0, 60.0]), np.array([95, 40, 0]))
        yield ReplicationObservation(now_s, measurement)


def test_the_loop_is_decide_on_the_state_it_keeps():
    config = ReplicationConfig()
    loop = ReplicationController(config)
    for observation in _observations(6, config):
        state = replace(
            example_state(),
            config=config,
            now_s=observation.now_s,
            measurement=observation.measurement,
            shares=loop.shares.copy(),
            filters=loop.filters,
            integral_mb=loop.integral_mb,
        )
        cold = decide(state)  # a fresh QP; the loop's is warm
        warm = loop.step(observation)
        assert warm.outcome.status == cold.outcome.status == "optimal"
        assert warm.shares == pytest.approx(cold.shares, abs=1e-4)
        assert loop.shares == pytest.approx(warm.shares) and loop.integral_mb == cold.integral_mb
        assert loop.filters[0].mean == pytest.approx(cold.filters[0].mean)
        assert warm.outcome.objective == pytest.approx(cold.outcome.objective, rel=1e-4)
    assert loop.integral_mb > 0  # the image was waiting all along


def test_decide_refuses_a_solver_built_for_another_configuration():
    state = example_state()
    other = ShareMpc(replace(state.config, horizon=10))
    with pytest.raises(ConfigError, match="solver"):
        decide(state, other)


@pytest.mark.parametrize(
    ("name", "mode", "shares"),
    [
        ("FIFO", "shares", (1 / 3, 1 / 3, 1 / 3)),
        ("STATIC", "shares", (0.65, 0.30, 0.05)),
        ("PRIO", "priority", None),
    ],
)
def test_fixed_policies_run_as_loops_of_the_same_shape(name, mode, shares):
    loop = policy_loop(name, ReplicationConfig())
    assert isinstance(loop, PolicyLoop) and loop.name == name
    observation = next(_observations(1, ReplicationConfig()))
    decision = loop.step(observation)
    assert decision.allocation.mode == mode and not decision.held
    assert decision.outcome.status == "feasible" and decision.outcome.solver_status == name
    assert decision.outcome.objective is None and decision.planned_shares is None
    if shares is not None:
        assert decision.shares == pytest.approx(shares)
    record = decision_to_dict(decision)
    assert record["status"] == "feasible"
    if mode == "priority":
        assert record["priority"] == ["application", "replication", "vm_image"]
        assert "shares" not in record
    json.dumps(record, allow_nan=False)


def test_policy_loop_knows_the_four_policies_and_names_a_wrong_one():
    assert POLICIES == ("MPC", "FIFO", "STATIC", "PRIO")
    assert isinstance(policy_loop("MPC", ReplicationConfig()), ReplicationController)
    with pytest.raises(ConfigError, match="policy"):
        policy_loop("LIFO", ReplicationConfig())

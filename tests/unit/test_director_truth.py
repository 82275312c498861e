"""The Director's simulated servers off the model's form (issue 23): write contention,
lasting per-server capacity, slowdowns lasting minutes; and the model's error study."""

from dataclasses import replace

import numpy as np
import pytest

from geoslo.experiments.director._model_error import (
    model_error,
    truth_violation_probability,
    violation_at_fill,
)
from geoslo.experiments.director._simulated import Scale, run_hotspot, train_models
from geoslo.experiments.director._truth_report import check_truth, periods_over_fraction
from geoslo.sim.director import (
    ServerPerformance,
    SimSettings,
    Workload,
    round_robin_layout,
    simulate,
)
from geoslo.sim.director._engine import _LastingState, _late, _p99_ms

LINEAR = ServerPerformance()
CONTENDED = ServerPerformance.contended()


def test_the_default_truth_is_linear_and_the_contended_one_is_not():
    assert LINEAR.is_linear and not CONTENDED.is_linear
    assert LINEAR.work(1000.0, 100.0) == pytest.approx(1300.0)
    # contention: a put costs put_cost * (1 + puts / contention_put_rps)
    assert CONTENDED.work(1000.0, 100.0) == pytest.approx(1000.0 + 3 * 100 * 1.1)
    doubled = CONTENDED.work(0.0, 2000.0) - CONTENDED.work(0.0, 1000.0)
    assert doubled > 2 * (CONTENDED.work(0.0, 1000.0) - CONTENDED.work(0.0, 0.0)) - 1e-9


@pytest.mark.parametrize("perf", [LINEAR, CONTENDED], ids=["linear", "contended"])
@pytest.mark.parametrize("read", [0.5, 0.8, 0.95, 1.0])
def test_capacity_solves_the_quadratic_work_for_the_noiseless_p99(perf, read):
    capacity = perf.capacity_rps(read, 100.0, 99.0)
    rho = perf.utilisation(capacity * read, capacity * (1 - read))
    assert perf.tail(100.0, rho) == pytest.approx(0.01, rel=1e-6)


def test_the_fleet_noise_of_the_linear_truth_is_the_old_draw():
    """The benchmark's draws for the linear truth are unchanged (same seed, same model)."""
    a = LINEAR.fleet_noise(10, 20, np.random.default_rng(4))
    b = LINEAR.draw_noise(200, np.random.default_rng(4))
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


def test_slowdowns_last_minutes_and_hold_their_stationary_share():
    perf = replace(LINEAR, slowdown_probability=0.02, slowdown_mean_s=200.0)
    rng = np.random.default_rng(0)
    slow = perf.draw_slow(2000, rng)
    history = []
    for _ in range(300):
        slow = perf.step_slow(slow, rng)
        history.append(slow)
    history = np.array(history)
    assert history.mean() == pytest.approx(perf.slow_fraction, abs=0.01)
    # a slow server is still slow a period later far more often than the share: correlated
    still = (history[1:] & history[:-1]).sum() / history[:-1].sum()
    assert still == pytest.approx(1 - perf.slowdown_end_probability, abs=0.02)
    assert still > 5 * perf.slow_fraction


def test_a_server_keeps_its_lasting_factor_by_name_and_is_forgotten_when_removed():
    perf = replace(LINEAR, server_capacity_sigma=0.3)
    state, rng = _LastingState(), np.random.default_rng(1)
    first = state.factors(["a", "b"], perf, rng)
    again = state.factors(["b", "a", "c"], perf, rng)
    assert again[0] == first[1] and again[1] == first[0] and first[0] != first[1]
    state.factors(["c"], perf, rng)
    assert set(state.server_factor) == {"c"}
    assert np.array_equal(_LastingState().factors(["a"], LINEAR, rng), [1.0])


@pytest.mark.parametrize("fanout", [1, 2, 3])
def test_the_p99_over_all_grid_rows_at_once_is_the_row_by_row_one(fanout):
    rng = np.random.default_rng(fanout)
    membership = (rng.random((6, 9)) < 0.4).astype(float)
    grid = np.sort(rng.random((40, 6)), axis=0)[::-1]  # tails fall as the threshold grows
    get = rng.random(9) * 100
    rows = np.array([float(get @ _late(membership, row, fanout)) for row in grid])
    assert np.allclose(_late(membership, grid, fanout) @ get, rows, rtol=1e-12, atol=0)
    assert _p99_ms(get, membership, grid, fanout) > 0


def test_the_truth_s_violation_share_is_its_hiccups_idle_and_everything_overloaded():
    idle = truth_violation_probability(CONTENDED, np.zeros(1), np.zeros(1), seed=2)[0]
    assert idle == pytest.approx(CONTENDED.hiccup_probability, abs=0.02)  # hiccups only
    assert truth_violation_probability(CONTENDED, np.full(1, 2e4), np.zeros(1))[0] == 1.0


def test_the_model_is_exact_on_the_linear_truth_and_extrapolates_badly_on_the_contended():
    """The control: the logistic model has the linear truth's form, so its boundary is the
    truth's crossing at every mix. On the contended truth the boundary is a line through
    the benchmarked mixes of a curve, so read-only load (not benchmarked) is over-allowed."""
    linear = model_error(LINEAR, train_models(LINEAR, seed=3).steady, seed=3)
    boundary = np.array(
        [train_models(LINEAR, 3).steady.capacity_rps(f) for f in linear.read_fractions]
    )
    assert np.all(np.abs(boundary / linear.crossings_rps() - 1) < 0.02)
    model = train_models(CONTENDED, seed=3).steady
    contended = model_error(CONTENDED, model, seed=3)
    read_only = contended.read_fractions == 1.0
    assert model.capacity_rps(1.0) > 1.05 * contended.crossings_rps()[read_only][0]


def test_servers_filled_by_the_model_are_late_more_often_on_the_contended_truth():
    fill = 1 / 1.1
    linear = violation_at_fill(LINEAR, train_models(LINEAR, 5).steady, 0.95, fill, seed=5)
    contended = violation_at_fill(CONTENDED, train_models(CONTENDED, 5).steady, 0.95, fill, 5)
    assert contended > linear + 0.05


def test_same_seed_same_run_on_the_contended_truth():
    workload = Workload(np.full(300, 8000.0), np.full(8, 1 / 8))
    layout = round_robin_layout(8, 2, 2, 0)
    settings = SimSettings(seed=7, performance=CONTENDED, charge_interval_s=60)

    class _Idle:
        def step(self, observation):
            return None

    runs = [simulate(workload, layout, np.full(8, 1e6), _Idle(), settings, 4e6) for _ in "ab"]
    assert np.array_equal(runs[0].late_fraction, runs[1].late_fraction)
    assert np.array_equal(runs[0].p99_ms, runs[1].p99_ms, equal_nan=True)
    other = simulate(workload, layout, np.full(8, 1e6), _Idle(), replace(settings, seed=8), 4e6)
    assert not np.array_equal(other.late_fraction, runs[0].late_fraction)


def test_the_truth_checks_read_their_numbers():
    numbers = {
        "linear_max_error_pct": 0.5,
        "runs": {"diurnal-contended": {"periods_over_fraction": 0.04}},
    }
    assert all(check_truth(numbers).values())
    numbers["runs"]["diurnal-contended"]["periods_over_fraction"] = 0.2
    assert not all(check_truth(numbers).values())


def test_the_hotspot_runs_on_the_truth_it_is_given():
    scale = Scale.quick()
    models = train_models(CONTENDED, 0)
    result, _ = run_hotspot(scale, models, 0.1, 2, CONTENDED)
    assert 0.0 <= periods_over_fraction(result) <= 1.0
    same, _ = run_hotspot(scale, models, 0.1, 2, LINEAR)
    assert not np.array_equal(result.late_fraction, same.late_fraction)

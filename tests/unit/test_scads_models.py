"""The SCADS Director's steady-state and copy-duration models (FAST 2011, §5.4)."""

from __future__ import annotations

import numpy as np
import pytest

from geoslo.errors import InputError
from geoslo.models import (
    PAPER_MIXES_READ_FRACTION,
    CopyDurationModel,
    SteadyStateModel,
    fit_copy_duration,
    fit_steady_state,
    mix_crossing_samples,
)

# A server whose cost per request is 1 unit for a get and 4 for a put, with 1000 units/s.
GET_COST, PUT_COST, BUDGET = 1.0, 4.0, 1000.0


def true_crossing_rps(read_fraction: float) -> float:
    return BUDGET / (GET_COST * read_fraction + PUT_COST * (1.0 - read_fraction))


@pytest.fixture(scope="module")
def model() -> SteadyStateModel:
    crossings = [true_crossing_rps(f) for f in PAPER_MIXES_READ_FRACTION]
    gets, puts, violated = mix_crossing_samples(PAPER_MIXES_READ_FRACTION, crossings)
    return fit_steady_state(gets, puts, violated)


@pytest.mark.parametrize("read_fraction", [*PAPER_MIXES_READ_FRACTION, 0.7, 0.99])
def test_the_boundary_falls_at_each_mix_crossing(model, read_fraction):
    """Trained at four mixes, the linear boundary also holds between and beyond them."""
    expected = true_crossing_rps(read_fraction)
    assert model.capacity_rps(read_fraction) == pytest.approx(expected, rel=0.1)
    get, put = read_fraction * expected, (1.0 - read_fraction) * expected
    assert model.meets_slo(0.8 * get, 0.8 * put)
    assert not model.meets_slo(1.25 * get, 1.25 * put)


def test_headroom_says_how_far_a_server_is_from_the_boundary(model):
    get, put = 300.0, 30.0
    room = model.headroom(get, put)
    assert room > 1.0  # underloaded
    assert model.violation_probability(room * get, room * put) == pytest.approx(0.5, abs=1e-6)
    assert model.headroom(3 * get * room, 3 * put * room) < 1.0  # overloaded
    assert model.headroom(0.0, 0.0) == np.inf


def test_vectorised_predictions_match_scalar_ones(model):
    gets, puts = np.array([100.0, 900.0]), np.array([10.0, 100.0])
    assert list(model.meets_slo(gets, puts)) == [
        model.meets_slo(g, p) for g, p in zip(gets, puts, strict=True)
    ]


def test_dict_round_trip(model):
    assert SteadyStateModel.from_dict(model.to_dict()) == model


@pytest.mark.parametrize(
    ("gets", "puts", "violated", "field"),
    [
        ([1.0, 2.0], [1.0, 2.0], [0, 0], "violated"),  # one class only
        ([1.0, 2.0], [1.0, 2.0], [0, 1, 1], "violated"),
        ([1.0, -2.0], [1.0, 2.0], [0, 1], "get_rps"),
        ([], [], [], "get_rps"),
    ],
)
def test_bad_training_data_names_the_field(gets, puts, violated, field):
    with pytest.raises(InputError, match=field):
        fit_steady_state(gets, puts, violated)


# ------------------------------------------------------------------ copy duration

TRUE_COPY = (1.0, -2e-8, 0.0, -2e-4, -1e-7, -8e-4, -1e-6)


def test_the_copy_rate_factor_is_recovered_from_noisy_benchmarks():
    rng = np.random.default_rng(3)
    n = 200
    rate = rng.uniform(1e6, 8e6, n)
    gets, puts = rng.uniform(0, 1500, n), rng.uniform(0, 200, n)
    truth = CopyDurationModel(TRUE_COPY)
    observed = np.array([truth.factor(r, g, p) for r, g, p in zip(rate, gets, puts, strict=True)])
    fitted = fit_copy_duration(rate, gets, puts, observed + rng.normal(0, 0.01, n))
    for r, g, p in ((2e6, 100.0, 10.0), (6e6, 1200.0, 150.0)):
        assert fitted.factor(r, g, p) == pytest.approx(truth.factor(r, g, p), abs=0.02)


def test_duration_is_size_over_the_achieved_rate():
    model = CopyDurationModel((0.5, 0, 0, 0, 0, 0, 0))
    assert model.duration_s(4e6, 1e6, 0.0, 0.0) == pytest.approx(8.0)
    slow = CopyDurationModel((-1.0, 0, 0, 0, 0, 0, 0))
    assert slow.factor(1e6, 0.0, 0.0) == slow.min_factor  # clipped, never zero or negative
    fast = CopyDurationModel((3.0, 0, 0, 0, 0, 0, 0))
    assert fast.factor(1e6, 0.0, 0.0) == 1.0  # never faster than specified
    with pytest.raises(InputError, match="specified_bytes_per_s"):
        model.duration_s(1.0, 0.0, 0.0, 0.0)


def test_copy_model_round_trip_and_checks():
    model = CopyDurationModel(TRUE_COPY)
    assert CopyDurationModel.from_dict(model.to_dict()) == model
    with pytest.raises(InputError, match="coefficients"):
        CopyDurationModel.from_dict({"coefficients": [1.0, 2.0]})
    with pytest.raises(InputError, match="observed_factor"):
        fit_copy_duration([1e6] * 3, [1.0] * 3, [1.0] * 3, [0.9] * 3)  # fewer runs than terms

"""SLO curves, surfaces, M/M/c and curve substitution (Kurma §4, §7.1.1, §7.1.4)."""

import numpy as np
import pytest

from geoslo.dist import LatencyDistribution
from geoslo.errors import InputError
from geoslo.models import (
    ServiceProfile,
    SloCurve,
    best_fitting_curve,
    build_slo_surface,
    erlang_c,
    mmc_sojourn_tail,
    mmc_violation_surface,
    profile_backend,
    profile_loads,
)
from geoslo.models._slo_curves import isotonic_increasing


def exponential_profile(loads_rps, mean_ms_at, write_fractions=(0.0,)):
    """A profile whose response at load x is exponential with mean ``mean_ms_at(x, w)``."""
    rows = tuple(
        tuple(LatencyDistribution.exponential(mean_ms_at(x, w), step_ms=0.05) for x in loads_rps)
        for w in write_fractions
    )
    return ServiceProfile(np.array(write_fractions), np.array(loads_rps, float), rows, 0.0)


@pytest.mark.parametrize(
    ("load", "expected"),
    [(0.0, 0.0), (50.0, 0.05), (100.0, 0.1), (150.0, 0.3), (200.0, 0.5), (201.0, 1.0)],
)
def test_slo_curve_is_linear_between_points_and_saturates_above(load, expected):
    curve = SloCurve(np.array([0.0, 100.0, 200.0]), np.array([0.0, 0.1, 0.5]))
    assert curve(load) == pytest.approx(expected)


def test_slo_curve_load_at_inverts_the_curve():
    curve = SloCurve(np.array([0.0, 100.0, 200.0]), np.array([0.0, 0.1, 0.5]))
    assert curve.load_at(0.05) == pytest.approx(50.0)
    assert curve.load_at(0.3) == pytest.approx(150.0)


def test_slo_curve_rejects_a_grid_that_is_not_increasing():
    with pytest.raises(InputError, match="increasing"):
        SloCurve(np.array([0.0, 100.0, 100.0]), np.array([0.0, 0.1, 0.2]))


def test_profile_loads_are_denser_near_saturation():
    loads = profile_loads(1000.0, n_points=10)
    gaps = np.diff(loads)
    assert loads[0] == pytest.approx(50.0)
    assert loads[-1] == pytest.approx(950.0)
    assert np.all(gaps[1:] < gaps[:-1])


def test_profile_backend_keeps_every_distribution_and_the_minimum():
    calls = []

    def measure(load, write_fraction):
        calls.append((load, write_fraction))
        return np.array([1.0, 2.0, 3.0]) + load / 100

    profile = profile_backend(measure, [100.0, 200.0], write_fractions=(0.0, 0.1))
    assert calls == [(100.0, 0.0), (200.0, 0.0), (100.0, 0.1), (200.0, 0.1)]
    assert profile.min_service_ms == pytest.approx(2.0)
    assert profile.distributions[1][1].mean_ms() == pytest.approx(4.0, abs=0.05)


def test_profile_backend_run_by_a_map_gives_the_same_profile():
    def measure(load, write_fraction):
        return np.linspace(1.0, 9.0, 50) * (1 + write_fraction) + load / 100

    mapped = []

    def map_points(point, jobs):
        mapped.append(len(jobs))
        return [point(*job) for job in reversed(jobs)][::-1]  # any order of running

    loads, mixes = [100.0, 200.0, 300.0], (0.0, 0.2)
    serial = profile_backend(measure, loads, mixes)
    by_map = profile_backend(measure, loads, mixes, map_points=map_points)
    assert mapped == [6]
    assert by_map.min_service_ms == serial.min_service_ms
    for row_a, row_b in zip(serial.distributions, by_map.distributions, strict=True):
        assert [d.mean_ms() for d in row_a] == [d.mean_ms() for d in row_b]
    assert by_map.distributions[1][2].mean_ms() > by_map.distributions[0][2].mean_ms()


def test_local_curve_is_the_tail_of_the_profiled_distribution():
    profile = exponential_profile([10.0, 20.0, 30.0], lambda x, w: x / 2)
    surface = build_slo_surface(profile, slo_ms=30.0)
    curve = surface.curve(0)
    for load, mean in [(10.0, 5.0), (20.0, 10.0), (30.0, 15.0)]:
        assert curve(load) == pytest.approx(np.exp(-30.0 / mean), abs=0.01)


def test_remote_curve_adds_residual_and_shifts_by_the_base_delay():
    profile = exponential_profile([10.0, 20.0], lambda x, w: 4.0)
    residual = LatencyDistribution.point(1.0, step_ms=0.05)
    surface = build_slo_surface(profile, 30.0, residual_rtt=residual, base_rtt_ms=range(0, 26))
    for base in (5, 13, 22):
        expected = np.exp(-(30.0 - base - 1.0) / 4.0)
        assert surface.curve(base)(10.0) == pytest.approx(expected, abs=0.01)
    assert surface.curve(22)(10.0) > surface.curve(5)(10.0) > surface.curve(0)(10.0)


def test_surface_selects_the_nearest_whole_ms_and_interpolates_the_write_mix():
    profile = exponential_profile(
        [10.0, 20.0], lambda x, w: 2.0 + 20 * w, write_fractions=(0.0, 0.2)
    )
    surface = build_slo_surface(profile, 30.0, base_rtt_ms=range(0, 30))
    low, high = surface.curve(0, 0.0)(10.0), surface.curve(0, 0.2)(10.0)
    assert surface.curve(0, 0.1)(10.0) == pytest.approx((low + high) / 2)
    assert surface.curve(12.4)(10.0) == surface.curve(12)(10.0)


@pytest.mark.parametrize(
    ("values", "expected"),
    [([0, 1, 2], [0, 1, 2]), ([0, 2, 1, 3], [0, 1.5, 1.5, 3]), ([3, 2, 1], [2, 2, 2])],
)
def test_isotonic_fit_pools_adjacent_violators(values, expected):
    assert isotonic_increasing(np.array(values, float)) == pytest.approx(expected)


def test_a_pooled_value_is_the_weighted_mean_of_its_points():
    # a light first point (few responses, one stall) moves the pool a quarter as much
    fitted = isotonic_increasing(np.array([3.0, 1.0, 4.0]), np.array([1.0, 3.0, 1.0]))
    assert fitted == pytest.approx([1.5, 1.5, 4.0])
    with pytest.raises(InputError):
        isotonic_increasing(np.array([1.0, 2.0]), np.array([1.0, 0.0]))


def test_surface_curves_never_decrease_with_load():
    means = {10.0: 8.0, 20.0: 4.0, 30.0: 9.0}  # a noisy profile: 20 looks better than 10
    surface = build_slo_surface(exponential_profile(list(means), lambda x, w: means[x]), 30.0)
    assert np.all(np.diff(surface.curve(0).violation_fraction) >= 0)


@pytest.mark.parametrize(
    ("servers", "erlangs", "expected"), [(1, 0.5, 0.5), (2, 1.0, 1 / 3), (3, 3.0, 1.0)]
)
def test_erlang_c_matches_closed_forms(servers, erlangs, expected):
    assert erlang_c(servers, erlangs) == pytest.approx(expected)


def test_mm1_sojourn_is_exponential_with_rate_mu_minus_lambda():
    t_ms = np.array([0.0, 1.0, 5.0])
    tail = mmc_sojourn_tail(1, service_rate_per_s=1000.0, arrival_rps=600.0, threshold_ms=t_ms)
    assert tail == pytest.approx(np.exp(-400.0 * t_ms / 1e3))


def test_mmc_sojourn_tail_agrees_with_a_simulated_queue():
    rng = np.random.default_rng(3)
    c, mu, lam, n = 3, 100.0, 240.0, 200_000
    arrivals = np.cumsum(rng.exponential(1 / lam, n))
    service = rng.exponential(1 / mu, n)
    free = np.zeros(c)
    sojourn = np.empty(n)
    for k in range(n):
        s = int(np.argmin(free))
        start = max(arrivals[k], free[s])
        free[s] = start + service[k]
        sojourn[k] = free[s] - arrivals[k]
    for t_ms in (10.0, 30.0):
        expected = float(mmc_sojourn_tail(c, mu, lam, t_ms))
        assert np.mean(sojourn * 1e3 > t_ms) == pytest.approx(expected, abs=0.01)


def test_mmc_surface_is_one_beyond_saturation_and_worse_when_remote():
    surface = mmc_violation_surface(
        10, 100.0, np.array([500.0, 990.0, 1000.0]), 30.0, np.array([0, 20])
    )
    assert surface[:, 2] == pytest.approx([1.0, 1.0])
    assert np.all(surface[1] >= surface[0])


def test_best_fitting_curve_finds_the_curve_that_generated_the_points():
    grid = np.array([0.0, 50.0, 100.0])
    family = [SloCurve(grid, np.array([0.0, 0.01 * k, 0.1 * k])) for k in range(1, 5)]
    loads = np.array([20.0, 60.0, 90.0])
    index, errors = best_fitting_curve(family, loads, family[2](loads) + 0.001)
    assert index == 2
    assert errors.shape == (4,)


def test_profile_distribution_between_points_has_the_interpolated_tail():
    profile = exponential_profile([10.0, 20.0], lambda x, w: x / 2)
    between = profile.distribution_at(12.5)
    low, high = (profile.distributions[0][k].tail_probability(8.0) for k in (0, 1))
    assert between.tail_probability(8.0) == pytest.approx(0.75 * low + 0.25 * high)
    assert profile.distribution_at(99.0).mean_ms() == pytest.approx(10.0, abs=0.05)

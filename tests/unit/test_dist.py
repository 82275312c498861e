"""Unit tests of geoslo.dist: constructors, queries, algebra, input errors."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
import scipy.stats

import geoslo.dist
from geoslo.dist import MAX_LATTICE_POINTS, LatencyDistribution, minimum, mixture, order_statistic
from geoslo.errors import InputError

D = LatencyDistribution


def lattice(offset_ms: float, step_ms: float, masses: list[float]) -> LatencyDistribution:
    """Builder: a distribution with the given (unnormalised) masses."""
    return D.from_pmf(offset_ms, step_ms, masses)


def test_exported_names() -> None:
    assert sorted(geoslo.dist.__all__) == sorted(
        ["LatencyDistribution", "MAX_LATTICE_POINTS", "minimum", "mixture", "order_statistic"]
    )
    for name in geoslo.dist.__all__:
        assert hasattr(geoslo.dist, name)


# ------------------------------------------------------------------ constructors

# (name, builder, mean_ms, std_ms); tolerances scale with the step (0.1 ms).
PARAMETRIC_CASES = [
    ("exponential", lambda: D.exponential(10.0), 10.0, 10.0),
    ("exponential shifted", lambda: D.exponential(4.0, shift_ms=22.0), 26.0, 4.0),
    ("gamma", lambda: D.gamma(2.0, 3.0), 6.0, math.sqrt(18.0)),
    ("lognormal", lambda: D.lognormal(5.0, 0.5), 5.0 * math.exp(0.125), None),
    ("uniform", lambda: D.uniform(2.0, 8.0), 5.0, 6.0 / math.sqrt(12.0)),
    ("point", lambda: D.point(22.3), 22.3, 0.0),
    ("coarse step", lambda: D.gamma(4.0, 2.5, step_ms=1.0), 10.0, 5.0),
]


@pytest.mark.parametrize(("name", "build", "mean_ms", "std_ms"), PARAMETRIC_CASES)
def test_parametric_moments(name, build, mean_ms, std_ms) -> None:
    dist = build()
    assert dist.pmf.sum() == pytest.approx(1.0, abs=1e-12)
    assert np.all(dist.pmf > 0.0) or dist.pmf.size > 2  # ends are positive
    assert dist.pmf[0] > 0.0 and dist.pmf[-1] > 0.0
    # Rounding to the nearest point moves the mean by O(step^2) (and a density
    # jump at an edge by < step/4); the std by < step.
    assert dist.mean_ms() == pytest.approx(mean_ms, abs=0.3 * dist.step_ms)
    if std_ms is not None:
        assert dist.std_ms() == pytest.approx(std_ms, abs=dist.step_ms)
    else:
        sigma = 0.5
        exact = 5.0 * math.sqrt((math.exp(sigma**2) - 1.0) * math.exp(sigma**2))
        assert dist.std_ms() == pytest.approx(exact, abs=dist.step_ms)


def test_lognormal_matches_lognormal_of_scipy() -> None:
    dist = D.lognormal(5.0, 0.5, step_ms=0.05)
    rv = scipy.stats.lognorm(s=0.5, scale=5.0)
    x = dist.support_ms[:-1]
    np.testing.assert_allclose(dist.cdf(x), rv.cdf(x + 0.025), atol=1e-9)


@pytest.mark.parametrize("mean_ms", [1.0, 10.0, 250.0])
def test_exponential_tail_is_closed_form_at_half_step(mean_ms: float) -> None:
    step_ms = 0.1
    dist = D.exponential(mean_ms, step_ms=step_ms)
    t = dist.support_ms[::7][:-1]
    exact = np.exp(-(t + step_ms / 2) / mean_ms)
    np.testing.assert_allclose(dist.tail_probability(t), exact, rtol=1e-6, atol=1e-12)
    # against the continuous tail at t: within one step of discretisation error
    between = np.exp(-(t + step_ms) / mean_ms), np.exp(-t / mean_ms)
    assert np.all(dist.tail_probability(t) >= between[0] - 1e-12)
    assert np.all(dist.tail_probability(t) <= between[1] + 1e-12)


def test_from_samples_rounds_to_nearest_point() -> None:
    dist = D.from_samples([1.0, 2.04, 3.06, 3.06], step_ms=0.1)
    assert dist.offset_ms == pytest.approx(1.0)
    assert dist.pmf.size == 22  # 1.0 .. 3.1
    assert dist.pmf[0] == pytest.approx(0.25)
    assert dist.pmf[10] == pytest.approx(0.25)  # 2.04 -> 2.0
    assert dist.pmf[-1] == pytest.approx(0.5)  # 3.06 -> 3.1


def test_from_samples_allows_negative_latencies() -> None:
    dist = D.from_samples([-2.0, -1.0, 3.0], step_ms=1.0)
    assert dist.offset_ms == -2.0
    assert dist.mean_ms() == pytest.approx(0.0)


def test_from_pmf_normalises_and_drops_zero_ends() -> None:
    dist = lattice(10.0, 0.5, [0.0, 0.0, 2.0, 0.0, 6.0, 0.0])
    assert dist.offset_ms == 11.0
    np.testing.assert_allclose(dist.pmf, [0.25, 0.0, 0.75])
    assert dist.mean_ms() == pytest.approx(11.75)


def test_pmf_is_read_only_and_not_shared_with_caller() -> None:
    masses = np.array([1.0, 1.0])
    dist = D.from_pmf(0.0, 1.0, masses)
    masses[0] = 100.0
    assert dist.pmf[0] == 0.5
    with pytest.raises(ValueError):
        dist.pmf[0] = 1.0
    with pytest.raises(AttributeError):
        dist.offset_ms = 3.0  # type: ignore[misc]


def test_equality_and_hash() -> None:
    a, b = lattice(0.0, 1.0, [1, 2]), lattice(0.0, 1.0, [2, 4])
    assert a == b and hash(a) == hash(b)
    assert a != lattice(1.0, 1.0, [1, 2])


# ----------------------------------------------------------------------- queries


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("fraction", [0.0, 0.01, 0.25, 0.5, 0.9, 0.95, 0.99, 1.0])
def test_quantile_matches_numpy_inverted_cdf(seed: int, fraction: float) -> None:
    rng = np.random.default_rng(seed)
    samples_ms = 0.5 * rng.integers(0, 200, size=501)  # exactly on the 0.5 ms lattice
    dist = D.from_samples(samples_ms, step_ms=0.5)
    expected = np.quantile(samples_ms, fraction, method="inverted_cdf")
    assert dist.quantile_ms(fraction) == pytest.approx(expected)


def test_quantile_vectorised_and_cdf_shapes() -> None:
    dist = D.exponential(10.0)
    fractions = np.array([0.5, 0.9, 0.99])
    q = dist.quantile_ms(fractions)
    assert q.shape == (3,) and np.all(np.diff(q) > 0)
    assert isinstance(dist.cdf(5.0), float)
    assert dist.cdf(np.zeros((2, 3))).shape == (2, 3)
    assert dist.tail_probability(np.inf) == 0.0 and dist.tail_probability(-np.inf) == 1.0


def test_cdf_and_tail_are_exact_on_lattice() -> None:
    dist = lattice(1.0, 0.5, [1, 2, 3, 4])  # atoms 1.0, 1.5, 2.0, 2.5
    table = [(0.99, 0.0), (1.0, 0.1), (1.2, 0.1), (1.5, 0.3), (2.49, 0.6), (2.5, 1.0), (9.0, 1.0)]
    for x_ms, cdf in table:
        assert dist.cdf(x_ms) == pytest.approx(cdf)
        assert dist.tail_probability(x_ms) == pytest.approx(1.0 - cdf)


def test_small_tail_keeps_relative_precision() -> None:
    dist = lattice(0.0, 1.0, [1.0, 1e-15])
    assert dist.tail_probability(0.0) == pytest.approx(1e-15, rel=1e-9)


# ----------------------------------------------------------------------- algebra


def test_kurma_remote_response_time() -> None:
    """Service time + residual WAN latency + base delay (Kurma §4.2)."""
    service = D.gamma(2.0, 4.0)
    residual = D.exponential(1.5)
    base_ms = 24.0
    remote = service + residual + base_ms
    assert remote.mean_ms() == pytest.approx(service.mean_ms() + residual.mean_ms() + base_ms)
    assert remote.quantile_ms(0.5) > base_ms + service.quantile_ms(0.5)
    slo_ms = 50.0
    p_violation = remote.tail_probability(slo_ms)
    assert service.tail_probability(slo_ms - base_ms) < p_violation < 1.0


@pytest.mark.parametrize(("n_a", "n_b"), [(1, 5), (30, 40), (2000, 2000), (5000, 17)])
def test_convolution_matches_numpy(n_a: int, n_b: int) -> None:
    rng = np.random.default_rng(n_a + n_b)
    a = lattice(0.3, 0.1, rng.random(n_a))
    b = lattice(-1.0, 0.1, rng.random(n_b))
    total = a + b
    expected = np.convolve(a.pmf, b.pmf)
    np.testing.assert_allclose(total.pmf, expected / expected.sum(), atol=1e-14)
    assert total.offset_ms == pytest.approx(-0.7)
    assert np.all(total.pmf >= 0.0)


def test_convolution_of_exponentials_is_gamma() -> None:
    e = D.exponential(5.0, step_ms=0.05)
    total = e + e
    t = np.array([5.0, 10.0, 20.0, 40.0])
    exact = scipy.stats.gamma(a=2.0, scale=5.0).sf(t)
    np.testing.assert_allclose(total.tail_probability(t), exact, rtol=0.02)


@pytest.mark.parametrize("k", [1, 2, 4, 10])
def test_min_of_k_exponentials_is_exponential(k: int) -> None:
    mean_ms, step_ms = 20.0, 0.01
    m = D.exponential(mean_ms, step_ms=step_ms).minimum_of(k)
    assert m.mean_ms() == pytest.approx(mean_ms / k, abs=step_ms)
    t = np.array([1.0, 5.0, 10.0])
    np.testing.assert_allclose(m.tail_probability(t), np.exp(-k * t / mean_ms), rtol=k * 1e-3)


def test_minimum_of_congruent_components_is_tail_product() -> None:
    a = D.exponential(10.0, shift_ms=3.0)
    b = D.gamma(3.0, 2.0)
    m = minimum([a, b])
    t = np.arange(0.0, 40.0, 0.1)
    np.testing.assert_allclose(
        m.tail_probability(t), a.tail_probability(t) * b.tail_probability(t), atol=1e-12
    )


def test_minimum_off_lattice_regrids_keeping_mean() -> None:
    a = lattice(0.0, 1.0, [1, 1, 1, 1])  # 0, 1, 2, 3
    b = lattice(0.25, 0.5, [1, 1])  # 0.25, 0.75 (other step, other offset)
    m = minimum([a, b])
    # exact: min is 0 w.p. 1/4, else b's value; mean = 0.75 * 0.5
    assert m.mean_ms() == pytest.approx(0.375)
    assert m.step_ms == 1.0
    assert (m.offset_ms - a.offset_ms) % 1.0 == pytest.approx(0.0)


def test_mixture_regrids_and_keeps_mean() -> None:
    a = D.exponential(10.0)
    b = D.point(30.04)  # off the 0.1 ms lattice
    mix = mixture([a, b], [3.0, 1.0])
    assert mix.mean_ms() == pytest.approx(0.75 * a.mean_ms() + 0.25 * 30.04, abs=1e-9)
    assert mix.cdf(30.0) == pytest.approx(0.75 * a.cdf(30.0) + 0.25 * 0.6, abs=1e-9)


def test_shift_and_number_addition() -> None:
    dist = D.uniform(1.0, 2.0)
    assert (dist + 5.0).mean_ms() == pytest.approx(dist.mean_ms() + 5.0)
    assert (5 + dist) == dist.shift(5.0)
    assert sum([dist, dist]).mean_ms() == pytest.approx(2 * dist.mean_ms())
    assert dist.shift(-3.0).offset_ms == pytest.approx(dist.offset_ms - 3.0)


def test_add_monte_carlo_off_grid_rounds_to_requested_step() -> None:
    a = D.exponential(5.0, step_ms=0.1)
    b = D.uniform(0.0, 3.0, step_ms=0.25)
    mc = a.add_monte_carlo(b, 20_000, seed=3, step_ms=0.5)
    assert mc.step_ms == 0.5
    assert mc.mean_ms() == pytest.approx(a.mean_ms() + b.mean_ms(), abs=0.2)


def test_sample_is_reproducible_and_on_lattice() -> None:
    dist = D.gamma(2.0, 3.0, shift_ms=1.0)
    first, again = dist.sample(1000, seed=7), dist.sample(1000, seed=7)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, dist.sample(1000, seed=8))
    k = (first - dist.offset_ms) / dist.step_ms
    np.testing.assert_allclose(k, np.rint(k), atol=1e-6)
    assert dist.sample(0, seed=1).shape == (0,)


def test_trimmed_drops_tiny_ends() -> None:
    dist = lattice(0.0, 1.0, [1e-14, 0.5, 0.5, 1e-13, 1e-14])
    trimmed = dist.trimmed(1e-12)
    assert trimmed.offset_ms == 1.0
    assert trimmed.pmf.size == 2
    assert dist.trimmed(0.0) is dist


# -------------------------------------------------------------------- bad input

E = D.exponential(10.0)

BAD_INPUT_CASES = [
    ("empty samples", lambda: D.from_samples([]), "samples_ms"),
    ("NaN sample", lambda: D.from_samples([1.0, math.nan]), "samples_ms"),
    ("inf sample", lambda: D.from_samples([math.inf]), "samples_ms"),
    ("text samples", lambda: D.from_samples(["a"]), "samples_ms"),
    ("zero step", lambda: D.from_samples([1.0], step_ms=0.0), "step_ms"),
    ("NaN step", lambda: D.point(1.0, step_ms=math.nan), "step_ms"),
    ("negative pmf", lambda: D.from_pmf(0.0, 1.0, [0.5, -0.1]), "pmf"),
    ("zero pmf", lambda: D.from_pmf(0.0, 1.0, [0.0, 0.0]), "pmf"),
    ("2-D pmf", lambda: D.from_pmf(0.0, 1.0, [[1.0]]), "pmf"),
    ("inf offset", lambda: D.from_pmf(math.inf, 1.0, [1.0]), "offset_ms"),
    ("zero mean", lambda: D.exponential(0.0), "mean_ms"),
    ("negative sigma", lambda: D.lognormal(5.0, -1.0), "sigma"),
    ("zero shape", lambda: D.gamma(0.0, 1.0), "shape"),
    ("high below low", lambda: D.uniform(3.0, 2.0), "high_ms"),
    ("unbounded, no tail", lambda: D.from_scipy(scipy.stats.norm(), tail_mass=0.0), "tail_mass"),
    ("not scipy", lambda: D.from_scipy(object()), "frozen_rv"),
    ("huge sample span", lambda: D.from_samples([0.0, 1e6], step_ms=1e-3), "step_ms"),
    ("heavy tail", lambda: D.lognormal(10.0, 3.0, step_ms=0.01), "step_ms"),
    ("fraction > 1", lambda: E.quantile_ms(1.5), "fraction"),
    ("NaN fraction", lambda: E.quantile_ms(math.nan), "fraction"),
    ("NaN threshold", lambda: E.tail_probability(math.nan), "threshold_ms"),
    ("NaN in thresholds", lambda: E.tail_probability(np.array([1.0, np.nan])), "threshold_ms"),
    ("NaN cdf", lambda: E.cdf(math.nan), "x_ms"),
    ("NaN shift", lambda: E.shift(math.nan), "delta_ms"),
    ("steps differ", lambda: E + D.exponential(10.0, step_ms=0.2), "other.step_ms"),
    ("convolve non-dist", lambda: E.convolve(3.0), "other"),
    ("k = 0", lambda: E.minimum_of(0), "k"),
    ("k float", lambda: E.minimum_of(2.5), "k"),
    ("negative n", lambda: E.sample(-1, seed=0), "n"),
    ("zero MC samples", lambda: E.add_monte_carlo(E, 0, seed=0), "n_samples"),
    ("trim half", lambda: E.trimmed(0.5), "tail_mass"),
    ("no components", lambda: minimum([]), "components"),
    ("non-dist component", lambda: mixture([E, 1.0], [1, 1]), "components[1]"),
    ("weights length", lambda: mixture([E, E], [1.0]), "weights"),
    ("negative weight", lambda: mixture([E, E], [1.0, -1.0]), "weights"),
]


@pytest.mark.parametrize(("name", "call", "field"), BAD_INPUT_CASES)
def test_bad_input_raises_input_error_naming_field(name, call, field) -> None:
    with pytest.raises(InputError) as info:
        call()
    assert info.value.field == field
    assert str(info.value).startswith(f"{field}: ")


def test_lattice_guard_message_says_what_to_do() -> None:
    with pytest.raises(InputError, match="larger step_ms"):
        D.from_pmf(0.0, 1.0, np.ones(MAX_LATTICE_POINTS + 1))


# ------------------------------------------------------------------ performance


def _best_time_s(fn, repeat: int = 7) -> float:
    fn()
    best = math.inf
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def test_hot_queries_are_fast() -> None:
    """Loose bounds (20x the targets) so a busy machine does not fail them."""
    rng = np.random.default_rng(0)
    a, b = lattice(0.0, 0.1, rng.random(2000)), lattice(5.0, 0.1, rng.random(2000))
    thresholds = np.linspace(0.0, 250.0, 100)
    assert _best_time_s(lambda: a.tail_probability(thresholds)) < 2e-3
    assert _best_time_s(lambda: a + b) < 20e-3


def test_order_statistic_spans_minimum_to_maximum_and_matches_sampling():
    rng = np.random.default_rng(4)
    parts = [
        LatencyDistribution.from_samples(rng.exponential(scale, 40_000) + shift, 0.5)
        for scale, shift in ((5.0, 1.0), (10.0, 3.0), (3.0, 2.0))
    ]
    fastest, low = order_statistic(parts, 1), minimum(parts)
    assert fastest.offset_ms == low.offset_ms
    assert np.allclose(fastest.pmf, low.pmf, atol=1e-12)
    slowest = order_statistic(parts, 3)
    grid = np.arange(0.0, 200.0, 0.5)
    product = np.prod([p.cdf(grid) for p in parts], axis=0)
    assert np.allclose(slowest.cdf(grid), product, atol=1e-12)
    draws = np.sort(np.column_stack([p.sample(200_000, k) for k, p in enumerate(parts)]), axis=1)
    quorum = order_statistic(parts, 2)
    assert abs(quorum.mean_ms() - draws[:, 1].mean()) < 0.05
    assert abs(quorum.quantile_ms(0.99) - np.percentile(draws[:, 1], 99)) <= 0.5


def test_order_statistic_rejects_k_beyond_the_components():
    d = LatencyDistribution.point(1.0)
    with pytest.raises(InputError, match="k"):
        order_statistic([d, d], 3)

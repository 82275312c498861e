"""Property tests of the algebra of lattice latency distributions (geoslo.dist)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from geoslo.dist import LatencyDistribution, minimum, mixture
from geoslo.dist._lattice import SNAP_STEPS

# Per-test settings, not a profile: loading a profile would change other modules' tests.
modest = settings(max_examples=50, deadline=None)

STEPS_MS = [0.05, 0.1, 0.25, 1.0]


@st.composite
def distributions(draw, step_ms: float | None = None, max_points: int = 40):
    """A lattice distribution with integer masses (some zero), on a random offset."""
    step = draw(st.sampled_from(STEPS_MS)) if step_ms is None else step_ms
    offset_ms = draw(st.floats(-50.0, 200.0, allow_nan=False))
    masses = draw(
        st.lists(st.integers(0, 1000), min_size=1, max_size=max_points).filter(lambda m: sum(m) > 0)
    )
    return LatencyDistribution.from_pmf(offset_ms, step, masses)


@st.composite
def same_step_pairs(draw, max_points: int = 40):
    step = draw(st.sampled_from(STEPS_MS))
    return (
        draw(distributions(step_ms=step, max_points=max_points)),
        draw(distributions(step_ms=step, max_points=max_points)),
    )


thresholds = st.floats(-100.0, 300.0, allow_nan=False)
fractions = st.floats(0.0, 1.0, allow_nan=False)


def _scale(*dists: LatencyDistribution) -> float:
    return 1.0 + max(abs(d.offset_ms) + d.step_ms * d.pmf.size for d in dists)


@modest
@given(same_step_pairs(max_points=500))
def test_mean_of_sum_is_sum_of_means(pair) -> None:
    a, b = pair
    total = a + b
    assert math.isclose(total.mean_ms(), a.mean_ms() + b.mean_ms(), abs_tol=1e-9 * _scale(a, b))
    assert math.isclose(total.pmf.sum(), 1.0, abs_tol=1e-12)
    assert np.all(total.pmf >= 0.0)


@modest
@given(same_step_pairs())
def test_sum_is_commutative(pair) -> None:
    a, b = pair
    ab, ba = a + b, b + a
    assert math.isclose(ab.offset_ms, ba.offset_ms, abs_tol=1e-9)
    np.testing.assert_allclose(ab.pmf, ba.pmf, atol=1e-15)


@modest
@given(distributions(), st.floats(-100.0, 100.0, allow_nan=False), thresholds)
def test_tail_of_shift_is_shifted_tail(dist, delta_ms, t_ms) -> None:
    shifted = dist.shift(delta_ms)
    assert math.isclose(
        shifted.tail_probability(t_ms + delta_ms), dist.tail_probability(t_ms), abs_tol=1e-12
    )


@modest
@given(distributions(), fractions, fractions)
def test_quantile_is_monotone_and_smallest(dist, f1, f2) -> None:
    low, high = sorted((f1, f2))
    q_low, q_high = dist.quantile_ms(low), dist.quantile_ms(high)
    assert q_low <= q_high
    # q is a lattice point with cdf >= fraction, and the point below it is not
    assert dist.cdf(q_high) >= high - 1e-9
    if q_high > dist.offset_ms:
        assert dist.cdf(q_high - dist.step_ms) < high + 1e-9


@modest
@given(distributions(), st.lists(thresholds, min_size=2, max_size=20))
def test_cdf_is_monotone_and_tail_is_its_complement(dist, xs) -> None:
    x = np.sort(np.array(xs))
    cdf = dist.cdf(x)
    assert np.all(np.diff(cdf) >= 0.0)
    assert np.all((cdf >= 0.0) & (cdf <= 1.0))
    np.testing.assert_allclose(dist.tail_probability(x), 1.0 - cdf, atol=1e-12)


@modest
@given(distributions(), st.integers(1, 8), st.lists(thresholds, min_size=1, max_size=10))
def test_min_of_k_has_tail_to_the_k(dist, k, xs) -> None:
    x = np.array(xs)
    m = dist.minimum_of(k)
    np.testing.assert_allclose(m.tail_probability(x), dist.tail_probability(x) ** k, atol=1e-12)
    np.testing.assert_allclose(
        minimum([dist] * k).tail_probability(x), m.tail_probability(x), atol=1e-12
    )


@modest
@given(
    st.lists(distributions(), min_size=1, max_size=4),
    st.lists(st.floats(0.01, 10.0), min_size=4, max_size=4),
)
def test_mixture_mean_is_weighted_mean(dists, weights) -> None:
    w = np.array(weights[: len(dists)])
    mix = mixture(dists, w)
    expected = float(np.dot(w / w.sum(), [d.mean_ms() for d in dists]))
    snap_ms = SNAP_STEPS * dists[0].step_ms
    assert math.isclose(mix.mean_ms(), expected, abs_tol=1e-9 * _scale(*dists) + snap_ms)
    assert mix.step_ms == dists[0].step_ms


@modest
@given(same_step_pairs(), st.integers(0, 2**32 - 1))
def test_monte_carlo_sum_agrees_with_exact_convolution(pair, seed) -> None:
    a, b = pair
    n_samples = 5000
    exact, estimate = a + b, a.add_monte_carlo(b, n_samples, seed=seed)
    x = exact.support_ms
    # Dvoretzky-Kiefer-Wolfowitz: sup |F_n - F| <= eps with probability 1 - 1e-6
    eps = math.sqrt(math.log(2.0 / 1e-6) / (2.0 * n_samples))
    assert np.max(np.abs(estimate.cdf(x) - exact.cdf(x))) <= eps


@modest
@given(distributions(), st.integers(0, 2**32 - 1), st.integers(0, 200))
def test_sample_with_same_seed_is_identical(dist, seed, n) -> None:
    first = dist.sample(n, seed=seed)
    np.testing.assert_array_equal(first, dist.sample(n, seed=seed))
    if n:
        assert first.min() >= dist.offset_ms - 1e-9
        assert first.max() <= dist.support_ms[-1] + 1e-9


@modest
@given(distributions(), distributions())
def test_minimum_of_two_has_exact_mean_on_any_lattices(a, b) -> None:
    """Exact minimum, then mean-preserving re-grid: equals brute force over all pairs."""
    pairs_min = np.minimum.outer(a.support_ms, b.support_ms)
    expected = float(np.sum(np.outer(a.pmf, b.pmf) * pairs_min))
    m = minimum([a, b])
    # atoms within SNAP_STEPS of a lattice point are snapped onto it, not split
    snap_ms = SNAP_STEPS * a.step_ms
    assert math.isclose(m.mean_ms(), expected, abs_tol=1e-9 * _scale(a, b) + snap_ms)
    assert m.step_ms == a.step_ms

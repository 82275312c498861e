"""SiteClient's random numbers drawn a block at a time (issue 17 §3: no call into numpy a
request): the same numbers as numpy's, deterministic by seed, other methods passed through."""

from __future__ import annotations

import numpy as np
import pytest

from geoslo.live._backend import ServiceWork
from geoslo.live.kurma._client import DRAW_BLOCK, _Draws
from geoslo.live.kurma._policies import RatesPolicy


@pytest.mark.parametrize("n_draws", [1, DRAW_BLOCK - 1, DRAW_BLOCK, DRAW_BLOCK + 1, 3 * DRAW_BLOCK])
def test_uniforms_are_numpys_in_blocks(n_draws):
    draws = _Draws(np.random.default_rng(5))
    reference = np.random.default_rng(5)
    expected = np.concatenate(
        [reference.random(DRAW_BLOCK) for _ in range(-(-n_draws // DRAW_BLOCK))]
    )[:n_draws]
    got = [draws.random() for _ in range(n_draws)]
    assert all(type(x) is float for x in got)
    np.testing.assert_array_equal(got, expected)


def test_the_same_seed_gives_the_same_mixed_sequence_and_another_seed_does_not():
    def sequence(seed: int) -> list[float]:
        draws = _Draws(np.random.default_rng(seed))
        work = ServiceWork(mean_ms=2.0)
        policy = RatesPolicy(0, [2, 3], follows_plan=True)
        policy.set_fractions(np.array([0.6, 0.4]))
        out = []
        for k in range(3000):
            out.append(policy.choose(draws, float(k)))
            out.append(work.draw_s(draws))
            if k % 500 == 0:
                out.append(int(draws.integers(10)))  # a method served by the generator
        return out

    assert sequence(1) == sequence(1)
    assert sequence(1) != sequence(2)


def test_exponentials_have_the_mean_of_a_standard_exponential():
    draws = _Draws(np.random.default_rng(0))
    values = np.array([draws.standard_exponential() for _ in range(20_000)])
    assert values.min() >= 0
    assert values.mean() == pytest.approx(1.0, abs=0.03)  # 5 standard errors of 20,000


def test_other_methods_are_the_generators():
    rng = np.random.default_rng(0)
    draws = _Draws(rng)
    assert draws.generator is rng
    assert draws.permutation.__self__ is rng

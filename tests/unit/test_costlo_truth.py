"""A ground truth CosTLO's estimator does not assume (issue 23): slow episodes that a
re-sent request meets again, relay overhead, a varying transfer rate, PUTs' own network.
The estimator is the paper's (§5.3), unchanged; these tests check the simulator's new
behaviour and that it exposes the assumption, with margins."""

import numpy as np
import pytest

from geoslo.control.costlo import Configuration, GetTuple, Slo
from geoslo.experiments.costlo import truth_text
from geoslo.experiments.costlo._study import Settings, build_study
from geoslo.experiments.costlo._truth import CIRCULAR, DEPARTING, probes
from geoslo.sim.costlo import (
    GroundTruth,
    SlowEpisodes,
    build_world,
    get_operations,
    measure_storage,
)
from geoslo.sim.costlo._behaviour import EpisodeDraw

OPERATIONS = 40_000


def episodes(slow_fraction: float = 0.02, mean_episode_ms: float = 1_000.0) -> SlowEpisodes:
    return SlowEpisodes(slow_fraction, mean_episode_ms, delay_median_ms=50.0, delay_sigma=0.5)


@pytest.mark.parametrize(
    ("interval_ms", "still_slow_low", "still_slow_high"),
    [
        (0.0, 1.0, 1.0),  # the same instant: the same state
        (50.0, 0.93, 0.97),  # exp(-50/1000 - 0.02 * 50/(0.98 * 1000)) = 0.950
        (20_000.0, 0.0, 0.06),  # long after: back to the stationary 2%
    ],
)
def test_an_episode_persists_as_the_markov_chain_says(interval_ms, still_slow_low, still_slow_high):
    e = episodes()
    rng = np.random.default_rng(0)
    now = EpisodeDraw(np.ones(50_000, bool), np.full(50_000, 7.0))
    later = e.later(rng, now, interval_ms)
    assert still_slow_low <= later.slow.mean() <= still_slow_high
    kept = later.slow & (later.delay_ms == 7.0)
    assert kept.sum() == later.slow.sum()  # still in the episode: the same delay


def test_the_stationary_share_is_kept_over_time():
    e = episodes(slow_fraction=0.05)
    rng = np.random.default_rng(1)
    now = e.stationary(rng, 200_000)
    assert abs(now.slow.mean() - 0.05) < 0.003
    assert abs(e.later(rng, now, 300.0).slow.mean() - 0.05) < 0.003


@pytest.fixture(scope="module")
def worlds():
    return build_world(3, 4), build_world(3, 4, truth=GroundTruth())


def _p(values_ms, q):
    return float(np.percentile(values_ms, q))


def test_a_single_request_keeps_its_marginal_latency(worlds):
    """Episodes take the isolated spikes' rate and size: one request barely changes."""
    circular, departing = worlds
    serving, second = circular.serving_and_second(0)
    c = get_operations(circular, 0, serving, second, Configuration(), OPERATIONS, 5).latency_ms
    d = get_operations(departing, 0, serving, second, Configuration(), OPERATIONS, 5).latency_ms
    assert abs(_p(d, 50) / _p(c, 50) - 1.0) < 0.03
    assert abs(_p(d, 99) / _p(c, 99) - 1.0) < 0.12


def test_a_request_resent_to_the_same_copy_helps_less(worlds):
    """At a zero timeout, two requests to one copy over one path: on the departing truth
    they meet the same episodes, so the tail falls less than on the circular truth."""
    circular, departing = worlds
    serving, second = circular.serving_and_second(0)
    two = Configuration(serving=GetTuple(1, 2))
    gains = []
    for world in worlds:
        one = get_operations(world, 0, serving, second, Configuration(), OPERATIONS, 9)
        both = get_operations(world, 0, serving, second, two, OPERATIONS, 9)
        gains.append(_p(one.latency_ms, 99.5) - _p(both.latency_ms, 99.5))
    assert gains[1] < 0.7 * gains[0], gains


def test_relaying_costs_the_vm_overhead(worlds):
    circular, departing = worlds
    serving, second = circular.serving_and_second(0)
    relayed = Configuration(serving=GetTuple(1, 1, True))
    c = get_operations(circular, 0, serving, second, relayed, OPERATIONS, 2).latency_ms
    d = get_operations(departing, 0, serving, second, relayed, OPERATIONS, 2).latency_ms
    assert 0.7 < np.median(d) - np.median(c) < 2.5  # GroundTruth's 1.5 ms median overhead


def test_a_larger_object_spreads_the_latency(worlds):
    circular, departing = worlds
    serving, second = circular.serving_and_second(0)
    spread = []
    for world in worlds:
        ms = get_operations(
            world, 0, serving, second, Configuration(), OPERATIONS, 4, 256e3
        ).latency_ms
        spread.append(_p(ms, 90) - _p(ms, 50))
    assert spread[1] > spread[0] + 5.0, spread


def test_puts_cross_their_own_network(worlds):
    """The agents' PUT pairs see a slower data-centre network than their GET pairs on the
    departing truth (twice the body), and the same one on the circular truth."""
    ratios = []
    for world in worlds:
        pairs = measure_storage(world, 0, 5_000, seed=1)
        put_ms = np.median(pairs.put_distinct_objects.network_ms)
        ratios.append(put_ms / np.median(pairs.get_distinct_objects.network_ms))
    assert abs(ratios[0] - 1.0) < 0.1, ratios
    assert 1.7 < ratios[1] < 2.3, ratios


def test_the_estimator_errs_where_it_assumes_independence():
    """The paper's estimator on each world's agents: the GET re-sent to the same copy is
    under-estimated on the departing truth, and not on the circular one (median of 4
    prefixes' p99 errors)."""
    settings = Settings(prefixes=4, measured_operations=OPERATIONS)
    errors = {}
    for name, truth in ((CIRCULAR, None), (DEPARTING, GroundTruth())):
        study = build_study(settings, 2, truth)
        per_prefix = []
        for i in study.prefixes:
            context = study.context(i, Slo())
            probe = next(p for p in probes(context) if p.name == "GET re-sent to the same copy")
            measured = study.measure(i, probe.configuration, 11 + i)
            estimated = context.readers[0].get.distribution(probe.configuration)
            per_prefix.append(float(estimated.quantile_ms(0.99)) / _p(measured, 99) - 1.0)
        errors[name] = float(np.median(per_prefix))
    assert abs(errors[CIRCULAR]) < 0.04, errors
    assert errors[DEPARTING] < errors[CIRCULAR] - 0.03, errors


def test_same_seed_same_result_with_the_truth(worlds):
    _, departing = worlds
    serving, second = departing.serving_and_second(1)
    c = Configuration(serving=GetTuple(2, 2, True), second=GetTuple(1, 1), get_timeout_ms=40.0)
    a = get_operations(departing, 1, serving, second, c, 1_000, 3).latency_ms
    b = get_operations(departing, 1, serving, second, c, 1_000, 3).latency_ms
    assert np.array_equal(a, b)


def test_the_truth_prose_states_the_runs_numbers():
    """No number in the text is fixed: change the results and the text follows."""
    per_truth = {
        t: {
            "median_abs_p99_error_pct": v,
            "vm_median_abs_p99_error_pct": v + 1.25,
            "slo_ms": 40.0,
            "met_fraction": m,
            "within_5ms_fraction": m + 0.1,
            "measured_minus_estimated_ms": v / 2,
            "total_overhead_pct": 3.5 + v,
        }
        for t, v, m in ((CIRCULAR, 1.75, 0.61), (DEPARTING, 8.25, 0.13))
    }
    rows = [
        {
            "truth": t,
            "probe": "GET re-sent to the same copy",
            "median_p50_error_pct": -1.5 * k,
            "median_p99_error_pct": -4.5 * k,
            "median_abs_p99_error_pct": 4.5 * k,
        }
        for t, k in ((CIRCULAR, 1), (DEPARTING, 3))
    ]
    text = truth_text(
        {
            "prefixes": 17,
            "persistent_fraction": 0.35,
            "mean_episode_ms": 1500.0,
            "per_truth": per_truth,
            "estimate_rows": rows,
            "selection_rows": [
                {"truth": t, "slo_ms": 40.0, "met_fraction": m, "serving_resend_fraction": 0.45}
                for t, m in ((CIRCULAR, 0.61), (DEPARTING, 0.13))
            ],
        }
    )
    for shown in (
        "17 prefixes",
        "35%",
        "1.5 s",
        "-13.5%",
        "-4.5%",
        "9.5%",
        "61%",
        "13%",
        "+4.1 ms",
    ):
        assert shown in text, shown
    assert "**breaks**" in text

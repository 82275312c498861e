"""The ground truth the replication MPC's model does not assume (issue 23): heavy-tailed
message sizes on the simulated link, the trace's bursts on the application's rate, and the
MPC's prediction error measured against what arrived."""

from __future__ import annotations

import numpy as np
import pytest

from geoslo.control.replication import FifoPolicy, MpcPolicy
from geoslo.errors import ConfigError
from geoslo.experiments.replication import experiment_2
from geoslo.experiments.replication._ground_truth import (
    bursty_experiment,
    prediction_error,
    trace_modulation,
)
from geoslo.sim.replication import LinkSettings, LinkWorkload, pareto_sums_mb, simulate_link


def test_pareto_sums_match_a_message_by_message_reference():
    counts = np.array([0, 3, 1, 0, 5])
    fast = pareto_sums_mb(counts, 0.0625, 1.5, np.random.default_rng(7))
    rng = np.random.default_rng(7)
    sizes = (rng.pareto(1.5, counts.sum()) + 1.0) * 0.0625 * 0.5 / 1.5
    slow, k = [], 0
    for n in counts:
        slow.append(sizes[k : k + n].sum())
        k += n
    assert fast == pytest.approx(slow)
    assert fast[0] == 0.0 and fast[3] == 0.0


def test_heavy_tailed_messages_keep_the_mean_rate_and_have_a_heavy_tail():
    sums = pareto_sums_mb(np.full(20_000, 10), 0.0625, 1.5, np.random.default_rng(1))
    assert sums.mean() == pytest.approx(0.625, rel=0.1)  # 10 messages of 64 KB on average
    assert sums.max() > 20 * 0.625  # a step with one message of tens of times the mean


@pytest.mark.parametrize("tail", [1.0, 0.5, float("nan")])
def test_a_tail_index_of_one_or_less_is_refused_by_name(tail):
    with pytest.raises(ConfigError) as caught:
        LinkSettings(message_tail_index=tail)
    assert caught.value.field == "message_tail_index"


def test_the_trace_modulation_keeps_the_mean_and_brings_real_bursts():
    m = trace_modulation(7200)
    assert m.mean() == pytest.approx(1.0) and np.all(m >= 0)
    per_10s = m.reshape(-1, 10).mean(axis=1)
    assert 0.05 < per_10s.std() < 0.5  # bursts, not a new level
    assert np.corrcoef(per_10s[:-1], per_10s[1:])[0, 1] > 0.5  # correlated, unlike Poisson
    base = experiment_2()
    bursty = bursty_experiment(base)
    assert bursty.application_mbps.mean() == pytest.approx(base.application_mbps.mean())
    assert np.array_equal(bursty.replication_mbps, base.replication_mbps)


def _short_run(policy, tail):
    rates = np.r_[np.full(300, 40.0), np.full(300, 60.0)]
    workload = LinkWorkload(rates, np.full(600, 20.0))
    return simulate_link(workload, policy, LinkSettings(step_s=0.5, message_tail_index=tail))


def test_the_mpc_run_keeps_its_predictions_and_the_fixed_policies_none():
    assert _short_run(FifoPolicy(), None).predicted_mb.shape == (0, 2)
    run = _short_run(MpcPolicy(experiment_2().config), None)
    assert run.predicted_mb.shape == (59, 2) and run.predicted_sd_mb.shape == (59, 2)
    assert np.all(run.predicted_sd_mb > 0)
    error = prediction_error(run, 10.0, 0)
    # Poisson arrivals of 40 then 60 Mbps: 50 then 75 MB per interval; the one jump costs
    assert error.mean_arrival_mb == pytest.approx(62.5, rel=0.05)
    assert 0.0 < error.rmse_fraction < 0.15


def test_heavy_tails_raise_the_mpcs_prediction_error():
    config = experiment_2().config
    poisson = prediction_error(_short_run(MpcPolicy(config), None), 10.0, 1)
    heavy = prediction_error(_short_run(MpcPolicy(config), 1.1), 10.0, 1)
    assert heavy.rmse_mb > 1.5 * poisson.rmse_mb

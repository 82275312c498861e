"""The pure parts of the Director's live experiments: what a run's records become
(stabilisation, percentile windows, units, measured rates, allocations) and the load
generator's schedule. No processes."""

from __future__ import annotations

import numpy as np
import pytest

from geoslo.experiments.director import LiveRun, LiveSettings
from geoslo.experiments.director._live_report import live_allocations
from geoslo.experiments.director._metrics import stabilised_s
from geoslo.experiments.director._simulated import Models
from geoslo.live.director import LoadResult, LoadSpec
from geoslo.live.director._loadgen import _schedule
from geoslo.models import CopyDurationModel, SteadyStateModel
from geoslo.workload import RateTrace


def test_stabilised_counts_from_the_spike_to_the_last_bad_period():
    p99 = np.array([50, 150, 150, 50, 50.0])  # periods of 20 s
    assert stabilised_s(p99, start_s=20, period_s=20, threshold_ms=100) == 40.0
    assert stabilised_s(p99, start_s=60, period_s=20, threshold_ms=100) == 0.0
    assert stabilised_s(p99, start_s=30, period_s=20, threshold_ms=100) == 30.0


def _run(issue_s, latency_ms, is_put, bins, ticks, servers, duration_s=6, period_s=2.0):
    n = len(issue_s)
    load = LoadResult(
        issue_s=np.asarray(issue_s, float),
        latency_ms=np.asarray(latency_ms, float),
        is_put=np.asarray(is_put, bool),
        bin=np.asarray(bins, np.int64),
        ok=np.ones(n, bool),
        max_late_ms=0.0,
        late_p99_ms=0.0,
        scheduled=n,
    )
    model = SteadyStateModel(-10.0, 0.1, 0.1)  # boundary: 100 req/s of either kind
    models = Models(model, CopyDurationModel((1.0,) + (0.0,) * 6), np.array([100.0]), (0.95,))
    return LiveRun(
        settings=LiveSettings(bins=2),
        models=models,
        duration_s=duration_s,
        period_s=period_s,
        hot_bin=None,
        period_end_s=np.arange(1, duration_s // period_s + 1) * period_s,
        p99_ms=np.zeros(int(duration_s // period_s)),
        tick_s=np.asarray(ticks, float),
        servers=tuple(servers),
        hot_replicas=np.zeros(len(ticks)),
        load=load,
        decisions=0,
        actions={},
        failed_actions=0,
        cancelled_actions=0,
    )


def test_units_count_each_server_once_per_interval_it_was_in_use():
    run = _run([], [], [], [], [0, 1, 2, 3, 4, 5], [("a",), ("a", "b"), ("a",)] * 2)
    assert run.units(3.0) == 4  # {a, b} in [0, 3) and in [3, 6)
    assert run.units(6.0) == 2


def test_measured_rates_are_per_period_and_bin():
    run = _run([0.1, 0.5, 1.9, 2.5, 5.0], [1] * 5, [0, 0, 1, 0, 0], [0, 1, 1, 0, 1], [0], [()])
    gets, puts = run.measured_rates()
    assert gets.tolist() == [[0.5, 0.5], [0.5, 0.0], [0.0, 0.5]]
    assert puts.tolist() == [[0.0, 0.5], [0.0, 0.0], [0.0, 0.0]]


def test_percentile_windows_use_every_get_and_scale_with_the_period():
    issue = np.repeat(np.arange(6), 100) + 0.5
    latency = np.full(600, 5.0)
    latency[:3] = 500.0  # three late gets in the first second
    run = _run(issue, latency, np.zeros(600, bool), np.zeros(600), [0], [()])
    met = run.percentiles_met()
    assert sorted(met) == [2, 6, 30]  # period x 1, 3, 15
    assert met[2]["worst_late_fraction"] == pytest.approx(3 / 200)
    assert met[2]["percentile"] == 98.0 and met[6]["percentile"] == 99.5


def test_allocations_come_from_each_intervals_busiest_period():
    # 2 bins; period 2 s, interval 4 s: periods 0-1, then 2 (of 6 s)
    issue = np.concatenate([np.full(200, 0.5), np.full(240, 2.5), np.full(100, 4.5)])
    bins = np.concatenate([np.zeros(200), np.tile([0, 1], 120), np.ones(100)])
    run = _run(issue, np.ones(540), np.zeros(540, bool), bins, [0], [()])
    allocation = live_allocations(run, 4.0)
    # interval 0's busiest period is the second: 60 gets/s on each bin, and each of a
    # bin's 2 replicas serves all of them (fanout 2). Under a boundary of 100 req/s a
    # server holds one replica: 4 servers. Interval 1: 50 gets/s on bin 1 alone: 2.
    assert allocation.ideal_servers.tolist() == [4, 2]


def test_schedule_scrambles_keys_and_the_spike_reads():
    spec = LoadSpec(
        RateTrace(np.full(20, 500.0)),
        read_fraction=0.5,
        hot_trace=RateTrace(np.full(20, 200.0)),
        hot_key=900,
        key_range=(0, 500),
        seed=3,
    )
    times, keys, is_put = _schedule(spec, keys=1000)
    assert np.all(np.diff(times) >= 0)
    hot = keys == 900
    assert hot.sum() > 3000 and not is_put[hot].any()  # a flash crowd reads
    assert 0.4 < is_put[~hot].mean() < 0.6
    assert keys[~hot].max() < 500
    counts = np.bincount(keys[~hot], minlength=500)
    popular = np.argsort(counts)[-20:]
    assert len(set(popular * 10 // 500)) > 3  # the 20 most popular keys span the 10 bins

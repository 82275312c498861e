"""The pure parts of the Director's reproduction on Redis Cluster: per-period p99s and
server counts, the crossing between two benchmark rates, per-bin rates and interval peaks,
§5.7's rows and the acceptance checks (no processes)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from geoslo.experiments.director._cluster import (
    ClusterRun,
    ClusterSettings,
    between_crossing_rps,
    interval_peaks,
    per_period_bin_rates,
)
from geoslo.experiments.director._cluster_report import (
    _per_period_increase,
    check_cluster,
    period_p99_ms,
    period_rows,
    run_summary,
    server_periods,
)
from geoslo.experiments.director._workloads import HotspotShape
from geoslo.live.director import LoadResult


def _load(issue_s, latency_ms, is_put=None, ok=None, bins=None) -> LoadResult:
    issue_s = np.asarray(issue_s, dtype=float)
    n = issue_s.size
    return LoadResult(
        issue_s=issue_s,
        latency_ms=np.asarray(latency_ms, dtype=float),
        is_put=np.zeros(n, bool) if is_put is None else np.asarray(is_put, bool),
        bin=np.zeros(n, np.int64) if bins is None else np.asarray(bins, np.int64),
        ok=np.ones(n, bool) if ok is None else np.asarray(ok, bool),
        max_late_ms=0.0,
        late_p99_ms=0.0,
        scheduled=n,
    )


def _run(
    latency_per_period_ms,
    period_s=10.0,
    servers=2,
    hot_copies=(1, 1),
    workload="hotspot",
    policy="director",
    per_period=100,
) -> ClusterRun:
    """A run whose gets have one latency per period (``per_period`` evenly spread)."""
    issue, latency = [], []
    for k, ms in enumerate(latency_per_period_ms):
        issue += list(k * period_s + (np.arange(per_period) + 0.5) * period_s / per_period)
        latency += [ms] * per_period
    duration = int(len(latency_per_period_ms) * period_s)
    ticks = np.arange(duration, dtype=float)
    copies = np.full(duration, hot_copies[0])
    copies[duration // 2 :] = hot_copies[1]
    return ClusterRun(
        workload=workload,
        policy=policy,
        period_s=period_s,
        duration_s=duration,
        threshold_ms=100.0,
        hot_bin=3,
        tick_s=ticks,
        servers=np.full(duration, servers),
        serving=np.full(duration, servers),
        hot_copies=copies,
        migrated_bytes=np.linspace(0, 2e6, duration),
        load=_load(issue, latency),
        decision_s=(5.0, 25.0),
        decide_ms=(1.5, 2.5),
    )


@pytest.mark.parametrize(
    ("latencies_ms", "ok", "expected"),
    [
        ([1.0] * 98 + [50.0] * 2, [True] * 100, 50.0),  # the top 1% decides
        ([1.0] * 100, [True] * 98 + [False] * 2, 5000.0),  # a failed get counts as 5 s
        ([3.0] * 10, [True] * 10, 3.0),
    ],
)
def test_period_p99_counts_failed_requests_as_the_timeout(latencies_ms, ok, expected):
    issue = np.linspace(0.0, 9.9, len(latencies_ms))
    p99 = period_p99_ms(issue, np.asarray(latencies_ms), np.asarray(ok), 10.0, 2)
    assert p99[0] == pytest.approx(expected, rel=1e-3)
    assert math.isnan(p99[1])  # no request in the second period


@pytest.mark.parametrize(
    ("ticks", "counts", "expected"),
    [
        ([0, 1, 2, 3], [1, 3, 2, 2], [3, 2]),  # the most at any tick of the period
        ([0, 3], [4, 5], [4, 5]),
        ([0, 1], [2, 2], [2, 0]),  # no tick in the second period
    ],
)
def test_server_periods_takes_the_most_servers_of_each_period(ticks, counts, expected):
    out = server_periods(np.asarray(ticks, float), np.asarray(counts), 2.0, 2)
    assert out.tolist() == expected


def test_per_period_increase_of_a_cumulative_count():
    out = _per_period_increase(np.array([0.5, 1.5, 2.5, 3.5]), [0.0, 10.0, 10.0, 25.0], 2.0, 2)
    assert out.tolist() == [10.0, 15.0]


@pytest.mark.parametrize(
    ("rates", "p99", "expected"),
    [
        ([100, 400, 900], [10, 50, 500], math.sqrt(400 * 900)),
        ([100, 400], [150, 500], 100.0),  # already over at the first rate
        ([100, 400], [10, 20], math.nan),
    ],
)
def test_crossing_between_the_last_rate_under_and_the_first_over(rates, p99, expected):
    got = between_crossing_rps(np.asarray(rates, float), np.asarray(p99, float), 100.0)
    assert (math.isnan(got) and math.isnan(expected)) or got == pytest.approx(expected)


def test_per_period_bin_rates_and_interval_peaks():
    period = np.array([0, 0, 0, 1, 2, 2])
    bins = np.array([1, 1, 2, 1, 5, 5])
    is_put = np.array([False, False, True, False, False, True])
    gets, puts = per_period_bin_rates(period, bins, is_put, 2.0)
    assert gets[0, 1] == 1.0 and puts[0, 2] == 0.5 and gets[2, 5] == 0.5 and puts[2, 5] == 0.5
    peak_get, peak_put = interval_peaks(gets, puts, 2)  # intervals: periods 0-1, then 2
    assert peak_get.shape == (2, gets.shape[1])
    assert peak_get[0, 1] == 1.0  # period 0 is the busier of the first interval
    assert peak_put[1, 5] == 0.5


def test_period_rows_carry_latency_servers_migration_and_decisions():
    run = _run([10.0, 300.0, 20.0], period_s=10.0, servers=3)
    rows = period_rows(run, ideal=np.array([2, 3, 2]))
    assert [round(r.get_p99_ms) for r in rows] == [10, 300, 20]
    assert [r.ideal for r in rows] == [2, 3, 2]
    assert [r.servers for r in rows] == [3, 3, 3]
    assert rows[0].decide_ms == 1.5 and rows[1].decide_ms is None and rows[2].decide_ms == 2.5
    assert sum(r.migrated_mb for r in rows) == pytest.approx(2.0)
    assert rows[1].as_dict(100.0)["over SLO"] is True


def test_run_summary_counts_periods_over_the_slo_since_a_time():
    run = _run([300.0, 300.0, 20.0, 20.0], period_s=10.0, servers=2)
    rows = period_rows(run)
    assert run_summary(run, rows)["get p99 over SLO (periods)"] == 2
    assert run_summary(run, rows, since_s=10.0)["get p99 over SLO (periods)"] == 1
    assert run_summary(run, rows)["server-periods"] == 8


def _settings() -> ClusterSettings:
    return ClusterSettings(shape=HotspotShape(flat_s=10, ramp_s=10, hold_s=20), period_s=10.0)


@pytest.mark.parametrize(
    ("director_ms", "none_ms", "copies", "day_servers", "passed"),
    [
        ([20, 20, 20, 20], [20, 300, 300, 300], (1, 2), 2, True),
        ([20, 300, 300, 20], [20, 300, 300, 300], (1, 2), 2, False),  # not half as many
        ([20, 20, 20, 20], [20, 20, 20, 300], (1, 2), 2, False),  # the spike did no harm
        ([20, 20, 20, 20], [20, 300, 300, 300], (1, 1), 2, False),  # no extra copy
        ([20, 20, 20, 20], [20, 300, 300, 300], (1, 2), 3, False),  # as many as fixed-100%
    ],
)
def test_acceptance_checks(director_ms, none_ms, copies, day_servers, passed):
    settings = _settings()
    hotspot = {
        "director": _run(director_ms, hot_copies=copies),
        "no controller": _run(none_ms, policy="no controller"),
    }
    rows = {name: period_rows(run) for name, run in hotspot.items()}
    diurnal = {
        "director": _run([20] * 6, servers=day_servers, workload="diurnal"),
        "fixed-100%": _run([20] * 6, servers=3, workload="diurnal", policy="fixed-100%"),
    }
    day_rows = {name: period_rows(run) for name, run in diurnal.items()}
    checks = check_cluster(hotspot, rows, diurnal, day_rows, settings)
    assert all(checks.values()) is passed


@pytest.mark.parametrize(
    ("errors", "text"),
    [
        ({}, ""),
        ({"TimeoutError": 2, "AttributeError": 9}, "AttributeError 9, TimeoutError 2"),
    ],
)
def test_failures_by_error_most_first(errors, text):
    from geoslo.experiments.director._cluster_report import _errors_text

    assert _errors_text(errors) == text

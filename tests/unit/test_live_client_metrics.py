"""The client's Prometheus metrics and the agent's reading of them (Kurma §6: requests and
SLO violations per destination, from a histogram with a bucket at the SLO)."""

from __future__ import annotations

import numpy as np
import pytest

from geoslo.errors import InputError
from geoslo.live.kurma._client_metrics import ClientMetrics, ClientTotals, read_exposition

SITES = ("Toronto", "Montreal", "Washington-DC")


def test_the_reading_counts_violations_over_the_slo_and_failures():
    metrics = ClientMetrics(SITES, slo_ms=30.0)
    for ms in (1.0, 29.9, 30.0, 30.1, 250.0, 9000.0):
        metrics.observe_ms(1, ms)
    metrics.observe_ms(0, 0.5)
    metrics.errors[2] += 1
    metrics.wan_bytes[1] += 1200
    metrics.arrivals += 7
    metrics.writes += 2
    totals = read_exposition(metrics.exposition(), SITES, 30.0)
    assert totals.requests.tolist() == [1, 6, 1]
    assert totals.violations.tolist() == [0, 3, 1]  # 30.1, 250 and 9000 ms; the failure
    assert totals.errors.tolist() == [0, 0, 1]
    assert totals.wan_bytes.tolist() == [0, 1200, 0]
    assert (totals.arrivals, totals.writes) == (7, 2)


def test_differences_of_readings_are_the_interval_counts():
    metrics = ClientMetrics(SITES, slo_ms=30.0)
    metrics.observe_ms(0, 40.0)
    first = metrics.totals()
    metrics.observe_ms(0, 1.0)
    metrics.observe_ms(2, 50.0)
    interval = metrics.totals() - first
    assert interval.requests.tolist() == [1, 0, 1]
    assert interval.violations.tolist() == [0, 0, 1]
    assert (first - first).requests.tolist() == ClientTotals.zero(3).requests.tolist()


def test_another_clients_histogram_is_read_by_its_labels():
    """A client in another language serves the same names: its own bucket layout, an
    unknown site and extra series are ignored; the SLO bucket is what counts."""
    text = """\
# TYPE geoslo_kurma_client_response_seconds histogram
geoslo_kurma_client_response_seconds_bucket{dst="Montreal",le="0.01"} 90
geoslo_kurma_client_response_seconds_bucket{dst="Montreal",le="0.03"} 95
geoslo_kurma_client_response_seconds_bucket{dst="Montreal",le="+Inf"} 100
geoslo_kurma_client_response_seconds_count{dst="Montreal"} 100
geoslo_kurma_client_response_seconds_sum{dst="Montreal"} 1.5
geoslo_kurma_client_response_seconds_count{dst="Lisbon"} 9
# TYPE go_goroutines gauge
go_goroutines 12
"""
    totals = read_exposition(text, SITES, 30.0)
    assert totals.requests.tolist() == [0, 100, 0]
    assert totals.violations.tolist() == [0, 5, 0]


def test_a_histogram_without_a_bucket_at_the_slo_is_refused():
    metrics = ClientMetrics(SITES, slo_ms=25.0)
    metrics.observe_ms(0, 1.0)
    with pytest.raises(InputError, match="no bucket at the SLO"):
        read_exposition(metrics.exposition(), SITES, 30.0)


def test_the_slo_is_one_of_the_buckets_whatever_its_value():
    for slo_ms in (30.0, 17.5, 100 / 3, 4000.0):
        metrics = ClientMetrics(SITES, slo_ms)
        metrics.observe_ms(0, slo_ms)  # at the SLO: within it
        metrics.observe_ms(0, slo_ms * 1.0001)
        assert np.array_equal(metrics.totals().violations, [1, 0, 0])

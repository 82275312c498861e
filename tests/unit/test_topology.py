"""Unit tests of geoslo.topology: sites, prices, base-RTT schedules, links, the IBM table."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

import geoslo.topology as topo
from geoslo.errors import DataError, InputError
from geoslo.topology import (
    KURMA_RTT_RANGES_MS,
    BaseRttSchedule,
    Prices,
    Site,
    Topology,
    WanLink,
    ibm_rtt_history,
    ibm_topology,
    kurma_topology,
    load_ibm_latency,
    routing_changes,
)
from geoslo.workload import find_data_dir

try:
    SHARED = find_data_dir()
except DataError:
    SHARED = None
needs_shared = pytest.mark.skipif(
    SHARED is None or not (SHARED / "wan").is_dir(), reason="shared/data not found"
)
IBM_HEADER = "published,window,src_region,dst_region,avg_latency_ms\n"


class FakeDistribution:
    """Stands in for a geoslo.dist.LatencyDistribution: only ``sample`` is used."""

    def sample(self, n, seed):
        return np.zeros(n)


def site(name: str, capacity_rps: float = 100.0) -> Site:
    return Site(name, capacity_rps)


def link(src: str, dst: str, rtt_ms: float) -> WanLink:
    return WanLink(src, dst, BaseRttSchedule.constant(rtt_ms))


@pytest.fixture
def no_shared(tmp_path, monkeypatch):
    empty = tmp_path / "empty-data"
    empty.mkdir()
    monkeypatch.setenv("GEOSLO_DATA_DIR", str(empty))


def test_exported_names():
    assert set(topo.__all__) == {
        "KURMA_RTT_RANGES_MS",
        "BaseRttSchedule",
        "Prices",
        "Site",
        "Topology",
        "WanLink",
        "ibm_regions",
        "ibm_routing_changes",
        "ibm_rtt_history",
        "ibm_topology",
        "kurma_topology",
        "load_ibm_latency",
        "routing_changes",
        "CloudRegion",
        "ClientPrefix",
        "StoragePrices",
        "cloud_regions",
        "client_prefixes",
        "great_circle_km",
        "propagation_rtt_ms",
    }
    assert all(hasattr(topo, name) for name in topo.__all__)


# ---------------------------------------------------------------- sites and prices


def test_site_defaults_follow_kurma():
    s = Site("London", 900.0)
    assert (s.servers, s.vm_price_usd_per_hour) == (5, 0.133)
    assert s.capacity_per_server_rps == pytest.approx(180.0)
    assert Site("x", 10.0, servers=np.int64(2)).servers == 2


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"capacity_rps": -1.0}, "capacity_rps"),
        ({"capacity_rps": np.nan}, "capacity_rps"),
        ({"capacity_rps": "many"}, "capacity_rps"),
        ({"name": ""}, "name"),
        ({"name": 3}, "name"),
        ({"servers": -1}, "servers"),
        ({"servers": 2.5}, "servers"),
        ({"servers": True}, "servers"),
        ({"vm_price_usd_per_hour": -0.1}, "vm_price_usd_per_hour"),
    ],
)
def test_site_validation(kwargs, field):
    with pytest.raises(InputError) as caught:
        Site(**({"name": "a", "capacity_rps": 1.0} | kwargs))
    assert caught.value.field == field


def test_prices_defaults_and_costs():
    prices = Prices()
    assert (prices.vm_usd_per_hour, prices.wan_usd_per_gb, prices.bytes_per_request) == (
        0.133,
        0.01,
        375,
    )
    assert prices.wan_usd_per_request == pytest.approx(375 * 0.01 / 1e9)
    assert prices.wan_usd(1e9) == pytest.approx(3.75)
    assert prices.vm_usd(24) == pytest.approx(24 * 0.133)


@pytest.mark.parametrize("field", ["vm_usd_per_hour", "wan_usd_per_gb", "bytes_per_request"])
def test_prices_reject_negative(field):
    with pytest.raises(InputError) as caught:
        Prices(**{field: -1.0})
    assert caught.value.field == field


# ---------------------------------------------------------------- base RTT schedules


SCHEDULE = BaseRttSchedule(np.array([0.0, 10.0, 25.0]), np.array([9.0, 12.0, 10.0]))


@pytest.mark.parametrize(
    "t_s, rtt_ms",
    [(-5.0, 9.0), (0.0, 9.0), (9.99, 9.0), (10.0, 12.0), (24.0, 12.0), (25.0, 10.0), (1e9, 10.0)],
)
def test_schedule_is_piecewise_constant(t_s, rtt_ms):
    assert SCHEDULE.at(t_s) == rtt_ms
    assert isinstance(SCHEDULE.at(t_s), float)


def test_schedule_vectorised_and_range():
    times = np.array([[0.0, 10.0], [30.0, 5.0]])
    assert SCHEDULE.at(times).tolist() == [[9.0, 12.0], [10.0, 9.0]]
    assert (SCHEDULE.min_ms, SCHEDULE.max_ms) == (9.0, 12.0)
    constant = BaseRttSchedule.constant(22.5)
    assert constant.at(np.arange(5.0)).tolist() == [22.5] * 5
    assert constant.min_ms == constant.max_ms == 22.5
    assert not SCHEDULE.rtt_ms.flags.writeable


@pytest.mark.parametrize(
    "times, rtts, field",
    [
        ([0.0, 0.0], [1.0, 2.0], "change_times_s"),
        ([5.0, 1.0], [1.0, 2.0], "change_times_s"),
        ([0.0, 1.0], [1.0], "rtt_ms"),
        ([0.0], [-1.0], "rtt_ms"),
        ([0.0], [np.nan], "rtt_ms"),
        ([], [], "change_times_s"),
    ],
)
def test_schedule_validation(times, rtts, field):
    with pytest.raises(InputError) as caught:
        BaseRttSchedule(np.array(times), np.array(rtts))
    assert caught.value.field == field


@pytest.mark.parametrize("low_ms, high_ms", [(9.0, 10.0), (11.0, 14.0), (22.0, 27.0), (5.0, 5.0)])
def test_routing_changes_stay_in_the_observed_range(low_ms, high_ms):
    duration_s, mean_interval_s = 100_000.0, 500.0
    schedule = routing_changes(low_ms, high_ms, mean_interval_s, duration_s, seed=4)
    assert schedule.change_times_s[0] == 0.0
    assert schedule.change_times_s[-1] < duration_s
    assert low_ms <= schedule.min_ms <= schedule.max_ms <= high_ms
    expected = duration_s / mean_interval_s
    n_changes = schedule.change_times_s.size - 1
    assert abs(n_changes - expected) < 5 * np.sqrt(expected)
    assert schedule == routing_changes(low_ms, high_ms, mean_interval_s, duration_s, seed=4)


def test_routing_changes_differ_by_seed_and_cover_rare_changes():
    a = routing_changes(9.0, 10.0, 600.0, 3600.0, seed=1)
    b = routing_changes(9.0, 10.0, 600.0, 3600.0, seed=2)
    assert a != b
    rare = routing_changes(9.0, 10.0, 1e9, 60.0, seed=0)
    assert rare.change_times_s.tolist() == [0.0]


@pytest.mark.parametrize(
    "args, field",
    [
        ((-1.0, 10.0, 60.0, 100.0), "low_ms"),
        ((10.0, 9.0, 60.0, 100.0), "high_ms"),
        ((9.0, 10.0, 0.0, 100.0), "mean_interval_s"),
        ((9.0, 10.0, 60.0, 0.0), "duration_s"),
    ],
)
def test_routing_changes_validation(args, field):
    with pytest.raises(InputError) as caught:
        routing_changes(*args, seed=0)
    assert caught.value.field == field


# ---------------------------------------------------------------- links and topologies


def test_wan_link_accepts_a_number_and_a_distribution():
    plain = WanLink("a", "b", 12.0)
    assert plain.base_rtt == BaseRttSchedule.constant(12.0)
    with_residual = WanLink("a", "b", 12.0, FakeDistribution())
    back = with_residual.reversed()
    assert (back.src, back.dst) == ("b", "a") and back.residual_rtt_ms is not None


@pytest.mark.parametrize(
    "args, field",
    [
        (("a", "a", 1.0), "dst"),
        (("", "b", 1.0), "src"),
        (("a", "b", -1.0), "rtt_ms"),
        (("a", "b", "fast"), "base_rtt"),
        (("a", "b", 1.0, 5.0), "residual_rtt_ms"),
    ],
)
def test_wan_link_validation(args, field):
    with pytest.raises(InputError) as caught:
        WanLink(*args)
    assert caught.value.field == field


def three_sites(*links: WanLink) -> Topology:
    return Topology((site("L"), site("I"), site("F")), links)


def test_topology_lookup():
    t = three_sites(link("L", "I", 9.5))
    assert t.names == ("L", "I", "F")
    assert [t.index(n) for n in t.names] == [0, 1, 2]
    assert t.site("F").name == "F"
    assert t.link("I", "L").src == "I" and t.link("I", "L").base_rtt.at(0.0) == 9.5
    assert t.prices == Prices()
    with pytest.raises(InputError, match="unknown site 'X'"):
        t.index("X")
    with pytest.raises(InputError, match="no link"):
        t.link("L", "F")


def test_base_rtt_matrix_symmetric_asymmetric_and_missing():
    t = three_sites(link("L", "I", 9.0), link("L", "F", 12.0), link("F", "L", 13.0))
    matrix = t.base_rtt_matrix_ms(0.0)
    assert np.all(np.diag(matrix) == 0.0)
    assert matrix[0, 1] == matrix[1, 0] == 9.0
    assert (matrix[0, 2], matrix[2, 0]) == (12.0, 13.0)
    assert np.isinf(matrix[1, 2]) and np.isinf(matrix[2, 1])


def test_base_rtt_matrix_over_time():
    changing = WanLink("L", "I", SCHEDULE)
    t = three_sites(changing)
    stack = t.base_rtt_matrix_ms(np.array([0.0, 10.0, 30.0]))
    assert stack.shape == (3, 3, 3)
    assert stack[:, 0, 1].tolist() == [9.0, 12.0, 10.0]
    assert np.array_equal(stack[:, 0, 1], stack[:, 1, 0])


@pytest.mark.parametrize(
    "sites, links, field",
    [
        ((), (), "sites"),
        ((site("a"), site("a")), (), "sites"),
        ((site("a"), "b"), (), "sites[1]"),
        ((site("a"), site("b")), (link("a", "c", 1.0),), "links[0].dst"),
        ((site("a"), site("b")), (link("a", "b", 1.0), link("a", "b", 2.0)), "links[1]"),
    ],
)
def test_topology_validation(sites, links, field):
    with pytest.raises(InputError) as caught:
        Topology(sites, links)
    assert caught.value.field == field


def test_kurma_topology_static_and_changing():
    static = kurma_topology(1000.0)
    assert static.names == ("London", "Ireland", "Frankfurt")
    matrix = static.base_rtt_matrix_ms()
    assert np.allclose(matrix, matrix.T)
    changing = kurma_topology([1.0, 2.0, 3.0], routing_mean_interval_s=300.0, seed=1)
    assert [s.capacity_rps for s in changing.sites] == [1.0, 2.0, 3.0]
    stack = changing.base_rtt_matrix_ms(np.arange(0.0, 86400.0, 60.0))
    for (src, dst), (low, high) in KURMA_RTT_RANGES_MS.items():
        i, j = static.index(src), static.index(dst)
        assert static.base_rtt_matrix_ms()[i, j] == pytest.approx((low + high) / 2)
        assert np.all((stack[:, i, j] >= low) & (stack[:, i, j] <= high))
        assert np.unique(stack[:, i, j]).size > 10
    with pytest.raises(InputError, match="capacity_rps"):
        kurma_topology([1.0, 2.0])


# ---------------------------------------------------------------- IBM Cloud latencies


def test_ibm_latest_matrix_embedded(no_shared):
    regions, rtt_ms = load_ibm_latency()
    assert len(regions) == 13 and "London" in regions and "Frankfurt" in regions
    assert rtt_ms.shape == (13, 13)
    assert np.all(np.diag(rtt_ms) == 0.0)
    off = rtt_ms[~np.eye(13, dtype=bool)]
    assert np.all(np.isfinite(off)) and np.all(off > 0)


@pytest.mark.parametrize(
    "published", ["2024-01-01", dt.date(2024, 1, 1), np.datetime64("2024-01-01")]
)
def test_ibm_matrix_on_or_before_a_date(no_shared, published):
    regions, rtt_ms = load_ibm_latency(published)
    dates, history = ibm_rtt_history("London", "Frankfurt")
    before = dates[dates <= np.datetime64("2024-01-01")]
    i, j = regions.index("London"), regions.index("Frankfurt")
    assert rtt_ms[i, j] == history[dates == before[-1]][0]
    assert len(regions) < 13  # regions joined later
    assert np.all(np.isfinite(rtt_ms))


@pytest.mark.parametrize(
    "published, match", [("2000-01-01", "before the first"), ("last week", "YYYY-MM-DD")]
)
def test_ibm_rejects_bad_dates(no_shared, published, match):
    with pytest.raises(InputError, match=match) as caught:
        load_ibm_latency(published)
    assert caught.value.field == "published"


def test_ibm_history(no_shared):
    dates, rtt_ms = ibm_rtt_history("dallas", "Sao Paulo")
    assert dates.dtype == np.dtype("datetime64[D]")
    assert np.all(np.diff(dates) > np.timedelta64(0, "D"))
    assert dates.size == rtt_ms.size > 100
    assert np.all(rtt_ms > 0)
    later, _ = ibm_rtt_history("Chennai", "Tokyo")
    assert later[0] > dates[0]


@pytest.mark.parametrize(
    "src, dst, field",
    [("Atlantis", "London", "src"), ("London", "Mars", "dst"), ("Tokyo", "tokyo", "dst")],
)
def test_ibm_history_rejects_bad_regions(no_shared, src, dst, field):
    with pytest.raises(InputError) as caught:
        ibm_rtt_history(src, dst)
    assert caught.value.field == field


def test_ibm_topology(no_shared):
    t = ibm_topology(["London", "Frankfurt", "Madrid"], 500.0)
    regions, rtt_ms = load_ibm_latency()
    matrix = t.base_rtt_matrix_ms()
    for a in range(3):
        for b in range(3):
            expected = rtt_ms[regions.index(t.names[a]), regions.index(t.names[b])]
            assert matrix[a, b] == expected
    with pytest.raises(InputError, match="not measured"):
        ibm_topology(["London", "Chennai"], 1.0, published="2023-04-01")


@pytest.mark.parametrize(
    "text, match",
    [
        ("a,b\n", "header must be"),
        (IBM_HEADER + "2023-03-12,w,A,B\n", "line 2 has 4 fields"),
        (IBM_HEADER + "2023-03-12,w,A,B,fast\n", "line 2: avg_latency_ms 'fast'"),
        (IBM_HEADER + "2023-03-12,w,A,B,-3\n", "must be finite and >= 0"),
        (IBM_HEADER + "12/03/2023,w,A,B,3\n", "not a YYYY-MM-DD date"),
        (IBM_HEADER + "2023-03-12,w,A,A,3\n", "a region to itself"),
        (IBM_HEADER + "2023-03-12,w,A,B,3\n2023-03-12,w,A,B,4\n", "given twice"),
        (IBM_HEADER, "no data rows"),
    ],
)
def test_malformed_ibm_csv(tmp_path, monkeypatch, text, match):
    (tmp_path / "wan").mkdir()
    path = tmp_path / "wan" / "ibm-cloud-inter-region-latency.csv"
    path.write_text(text)
    monkeypatch.setenv("GEOSLO_DATA_DIR", str(tmp_path))
    with pytest.raises(DataError, match=match) as caught:
        load_ibm_latency()
    assert str(path) in str(caught.value)


def test_small_ibm_csv_from_the_data_dir(tmp_path, monkeypatch):
    (tmp_path / "wan").mkdir()
    rows = [
        "2023-01-01,w,A,B,10.5",
        "2023-01-01,w,B,A,11",
        "2023-02-01,w,A,B,12",
        "2023-02-01,w,B,A,12",
        "2023-02-01,w,A,C,30",
        "2023-02-01,w,C,A,31",
    ]
    (tmp_path / "wan" / "ibm-cloud-inter-region-latency.csv").write_text(
        IBM_HEADER + "\n".join(rows) + "\n"
    )
    monkeypatch.setenv("GEOSLO_DATA_DIR", str(tmp_path))
    regions, rtt_ms = load_ibm_latency("2023-01-15")
    assert regions == ["A", "B"]
    assert rtt_ms.tolist() == [[0.0, 10.5], [11.0, 0.0]]
    regions, rtt_ms = load_ibm_latency()
    assert regions == ["A", "B", "C"] and rtt_ms[2, 0] == 31.0 and np.isnan(rtt_ms[1, 2])
    dates, history = ibm_rtt_history("A", "B")
    assert history.tolist() == [10.5, 12.0]
    assert dates.tolist() == [dt.date(2023, 1, 1), dt.date(2023, 2, 1)]


@needs_shared
def test_embedded_ibm_matches_the_shared_csv(monkeypatch, tmp_path):
    shared = [load_ibm_latency(p) for p in (None, "2023-06-01", "2025-01-01")]
    history = ibm_rtt_history("Washington DC", "London")
    monkeypatch.setenv("GEOSLO_DATA_DIR", str(tmp_path))
    for (regions, rtt_ms), published in zip(
        shared, (None, "2023-06-01", "2025-01-01"), strict=True
    ):
        embedded_regions, embedded_rtt_ms = load_ibm_latency(published)
        assert embedded_regions == regions
        assert np.array_equal(embedded_rtt_ms, rtt_ms)
    embedded_history = ibm_rtt_history("Washington DC", "London")
    assert np.array_equal(embedded_history[0], history[0])
    assert np.array_equal(embedded_history[1], history[1])


def test_ibm_routing_changes_walk_the_pairs_measured_series_at_poisson_times():
    dates, series = topo.ibm_rtt_history("London", "Madrid")
    schedule = topo.ibm_routing_changes("Madrid", "London", 120.0, 7200.0, seed=4)
    assert schedule.change_times_s[0] == 0.0
    assert 30 < schedule.change_times_s.size < 100  # about 7200 / 120 = 60 routes
    # the routes are the pair's weekly averages in publication order, from some week on
    k = np.arange(schedule.rtt_ms.size)
    assert any(
        np.array_equal(schedule.rtt_ms, series[(start + k) % series.size])
        for start in range(series.size)
    )
    both = topo.ibm_routing_changes("London", "Madrid", 120.0, 7200.0, seed=4)
    assert both == schedule  # one path: the same schedule both ways

"""The pure parts of the site namespaces and the toxiproxy injector (no processes)."""

from __future__ import annotations

import ipaddress

import pytest

from geoslo.errors import TestbedError
from geoslo.live._sites import SITES_NETWORK, _site, free_subnets
from geoslo.live._toxiproxy import (
    LatencyToxic,
    path_toxics,
    slowdown_extra_rtt_ms,
    stall_toxics,
)


def _draws(toxic: LatencyToxic) -> list[int]:
    """Every delay toxiproxy's ``latency + Int63n(2 jitter) - jitter`` can give, in ms."""
    if toxic.jitter_ms == 0:
        return [toxic.latency_ms]
    return [toxic.latency_ms + j - toxic.jitter_ms for j in range(2 * toxic.jitter_ms)]


@pytest.mark.parametrize(
    ("rtt_ms", "residual_ms", "up", "down", "mean_residual_ms", "max_residual_ms"),
    [
        (20, 0.0, (10, 0), (10, 0), 0.0, 0),
        (20, 0.5, (10, 0), (11, 1), 0.5, 1),
        (20, 1.0, (11, 1), (11, 1), 1.0, 2),
        (20, 2.0, (11, 1), (12, 2), 2.0, 4),
        (20, 1.5, (10, 0), (12, 2), 1.5, 3),
        (25, 0.5, (12, 0), (14, 1), 0.5, 1),
        (20.4, 0.6, (10, 0), (11, 1), 0.5, 1),  # whole ms RTT, residual to 0.5 ms
    ],
)
def test_path_toxics_split_the_rtt_and_add_a_residual_from_zero(
    rtt_ms, residual_ms, up, down, mean_residual_ms, max_residual_ms
):
    upstream, downstream = path_toxics(rtt_ms, residual_ms)
    assert (upstream.stream, downstream.stream) == ("upstream", "downstream")
    assert (upstream.latency_ms, upstream.jitter_ms) == up
    assert (downstream.latency_ms, downstream.jitter_ms) == down
    base = round(rtt_ms)
    totals = [u + d for u in _draws(upstream) for d in _draws(downstream)]
    assert min(totals) == base and max(totals) == base + max_residual_ms
    assert sum(totals) / len(totals) == pytest.approx(base + mean_residual_ms)
    assert upstream.mean_ms + downstream.mean_ms == pytest.approx(base + mean_residual_ms)


def test_path_toxics_refuse_negative_delays():
    with pytest.raises(ValueError):
        path_toxics(-1, 0)
    with pytest.raises(ValueError):
        path_toxics(10, -0.5)


@pytest.mark.parametrize(("extra_ms", "up", "down"), [(60, 30, 30), (61, 30, 31), (0, 0, 0)])
def test_a_stall_adds_its_rtt_half_each_way(extra_ms, up, down):
    upstream, downstream = stall_toxics(extra_ms)
    assert (upstream.latency_ms, downstream.latency_ms) == (up, down)
    assert upstream.name != downstream.name and upstream.name.startswith("stall")
    assert upstream.body()["attributes"] == {"latency": up, "jitter": 0}


@pytest.mark.parametrize(("rtt_ms", "factor", "extra_ms"), [(20, 1, 0), (20, 3, 40), (30, 1.5, 15)])
def test_a_k_times_slowdown_is_k_minus_one_rtts_more(rtt_ms, factor, extra_ms):
    assert slowdown_extra_rtt_ms(rtt_ms, factor) == pytest.approx(extra_ms)


def test_a_slowdown_below_one_is_refused():
    with pytest.raises(ValueError):
        slowdown_extra_rtt_ms(20, 0.5)


def _ip(text: str) -> ipaddress.IPv4Address:
    return ipaddress.ip_address(text)


@pytest.mark.parametrize(
    ("used", "count", "expected"),
    [
        (set(), 2, ["10.80.0.0/30", "10.80.0.4/30"]),
        ({_ip("10.80.0.1")}, 1, ["10.80.0.4/30"]),
        ({_ip("10.80.0.2"), _ip("10.80.0.5")}, 2, ["10.80.0.8/30", "10.80.0.12/30"]),
        ({_ip("10.77.0.1"), _ip("127.0.0.1")}, 1, ["10.80.0.0/30"]),
    ],
)
def test_free_subnets_skip_those_an_interface_holds(used, count, expected):
    assert [str(s) for s in free_subnets(used, count)] == expected


def test_free_subnets_say_when_none_is_left():
    every = {s.network_address + 1 for s in SITES_NETWORK.subnets(new_prefix=30)}
    with pytest.raises(TestbedError):
        free_subnets(every, 1)


def test_a_sites_names_come_from_its_subnet_index():
    site = _site("oregon", ipaddress.ip_network("10.80.1.4/30"), "geoslo-site", 42)
    assert (site.namespace, site.root_dev, site.site_dev) == (
        "geoslo-site-42-65",
        "g80r65",
        "g80s65",
    )
    assert (site.root_ip, site.site_ip) == ("10.80.1.5", "10.80.1.6")
    assert len(site.root_dev) <= 15  # IFNAMSIZ - 1, for the last of 16384 subnets too
    assert len(f"g80r{2**14 - 1}") <= 15

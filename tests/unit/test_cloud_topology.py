"""The embedded S3/Azure regions and PlanetLab-like clients of CosTLO (§2, §4.1, §6) and
the propagation-delay model built on them."""

import json
import math

import numpy as np
import pytest

from geoslo.errors import DataError, InputError
from geoslo.topology import (
    ClientPrefix,
    CloudRegion,
    StoragePrices,
    client_prefixes,
    cloud_regions,
    great_circle_km,
    propagation_rtt_ms,
)


def test_the_2015_regions_are_8_s3_and_13_azure_with_unique_names():
    regions = cloud_regions()
    assert len(cloud_regions(("s3",))) == 8
    assert len(cloud_regions(("azure",))) == 13
    assert len(regions) == 21
    assert len({region.name for region in regions}) == 21
    for region in regions:
        assert isinstance(region, CloudRegion)
        assert region.name.startswith(f"{region.provider}:")
    assert "s3:us-east-1" in {region.name for region in regions}
    assert "azure:eastus" in {region.name for region in regions}


def test_every_price_is_positive_and_the_ratios_are_realistic():
    regions = {region.name: region for region in cloud_regions()}
    for region in regions.values():
        for field in (
            "storage_usd_per_gb_month",
            "get_usd_per_10k",
            "put_usd_per_1k",
            "vm_usd_per_hour",
            "egress_usd_per_gb",
        ):
            assert getattr(region.prices, field) > 0, (region.name, field)
    virginia, sao_paulo = regions["s3:us-east-1"].prices, regions["s3:sa-east-1"].prices
    assert sao_paulo.egress_usd_per_gb > virginia.egress_usd_per_gb
    assert sao_paulo.storage_usd_per_gb_month > virginia.storage_usd_per_gb_month
    # Azure charges per transaction of either kind, far less than S3 per GET and per PUT.
    azure = regions["azure:eastus"].prices
    assert azure.get_usd_per_10k < virginia.get_usd_per_10k / 5
    assert azure.put_usd_per_1k < virginia.put_usd_per_1k / 5


def test_the_provider_filter_rejects_unknown_providers():
    assert {r.provider for r in cloud_regions(("azure",))} == {"azure"}
    with pytest.raises(InputError, match="gcs"):
        cloud_regions(("s3", "gcs"))


def test_haversine_matches_known_distances():
    london_new_york_km = great_circle_km(51.5074, -0.1278, 40.7128, -74.0060)
    assert isinstance(london_new_york_km, float)
    assert london_new_york_km == pytest.approx(5570, rel=0.01)
    assert great_circle_km(12.3, 45.6, 12.3, 45.6) == 0.0
    # A quarter of a meridian.
    assert great_circle_km(0, 0, 90, 0) == pytest.approx(math.pi * 6371 / 2)
    assert great_circle_km(-33.9, 151.2, 35.7, 139.7) == pytest.approx(
        great_circle_km(35.7, 139.7, -33.9, 151.2)
    )


def test_haversine_broadcasts_like_numpy():
    lat = np.array([0.0, 10.0, 20.0])
    lon = np.array([0.0, 5.0, 50.0, 100.0])
    distance_km = great_circle_km(lat[:, None], lon[None, :], 0.0, 0.0)
    assert isinstance(distance_km, np.ndarray)
    assert distance_km.shape == (3, 4)
    assert distance_km[0, 0] == 0.0
    assert distance_km[1, 2] == pytest.approx(great_circle_km(10.0, 50.0, 0.0, 0.0))


def test_rtt_is_light_in_fibre_over_an_inflated_route():
    assert propagation_rtt_ms(1000.0, route_inflation=2.0) == pytest.approx(20.0)
    assert propagation_rtt_ms(1000.0, route_inflation=1.0) == pytest.approx(10.0)
    assert propagation_rtt_ms(0.0) == 0.0
    rtt_ms = propagation_rtt_ms(np.array([100.0, 500.0]))
    assert isinstance(rtt_ms, np.ndarray)
    np.testing.assert_allclose(rtt_ms, [2.0, 10.0])
    with pytest.raises(InputError, match="route_inflation"):
        propagation_rtt_ms(100.0, route_inflation=0.5)
    with pytest.raises(InputError, match="distance_km"):
        propagation_rtt_ms(-1.0)


def test_120_unique_client_prefixes_with_valid_coordinates_spread_over_the_world():
    prefixes = client_prefixes()
    assert len(prefixes) == 120
    assert len({prefix.name for prefix in prefixes}) == 120
    for prefix in prefixes:
        assert isinstance(prefix, ClientPrefix)
        assert -90 <= prefix.latitude <= 90
        assert -180 <= prefix.longitude <= 180
        assert 0.5 <= prefix.access_ms <= 15
        assert len(prefix.country) == 2 and prefix.country.isupper()
    assert sum(prefix.latitude < 0 for prefix in prefixes) >= 8  # some in the south
    assert len({prefix.country for prefix in prefixes}) >= 30
    assert "us-kansas" in {prefix.name for prefix in prefixes}  # CosTLO §3's example


def test_a_limit_takes_a_leading_slice_that_is_still_spread_out():
    first = client_prefixes(12)
    assert first == client_prefixes()[:12]
    assert len({prefix.country for prefix in first}) >= 4
    assert client_prefixes(0) == ()
    with pytest.raises(InputError, match="limit"):
        client_prefixes(121)
    with pytest.raises(InputError, match="limit"):
        client_prefixes(-1)


def _fig6_gaps_ms() -> tuple[np.ndarray, np.ndarray]:
    """Per prefix: RTT to the 2nd closest region of S3+Azure, and to the 2nd closest S3
    region, each minus the RTT to the closest S3 region (propagation only)."""
    prefixes, regions = client_prefixes(), cloud_regions()
    lat = np.array([p.latitude for p in prefixes])[:, None]
    lon = np.array([p.longitude for p in prefixes])[:, None]
    rtt_ms = propagation_rtt_ms(
        great_circle_km(
            lat,
            lon,
            np.array([r.latitude for r in regions]),
            np.array([r.longitude for r in regions]),
        )
    )
    s3 = np.array([r.provider == "s3" for r in regions])
    s3_sorted, all_sorted = np.sort(rtt_ms[:, s3], axis=1), np.sort(rtt_ms, axis=1)
    return all_sorted[:, 1] - s3_sorted[:, 0], s3_sorted[:, 1] - s3_sorted[:, 0]


def test_a_second_provider_is_near_where_the_second_s3_region_is_far():
    """CosTLO Fig. 6: across providers the 2nd closest data center is within 25 ms of the
    closest S3 one for most clients, while the 2nd closest S3 one is much farther."""
    across_ms, within_s3_ms = _fig6_gaps_ms()
    assert np.mean(across_ms <= 25) >= 0.7
    assert np.mean(within_s3_ms > 25) >= 0.7
    assert np.mean((across_ms <= 25) & (within_s3_ms > 25)) >= 0.7
    assert np.median(within_s3_ms) > 40
    assert np.median(across_ms) <= 0


def test_storage_prices_reject_negative_values():
    with pytest.raises(InputError, match="egress_usd_per_gb"):
        StoragePrices(0.03, 0.004, 0.005, 0.026, -0.09)


def _region_row(**changes):
    row = {
        "name": "s3:test-1",
        "provider": "s3",
        "city": "Nowhere",
        "latitude": 10.0,
        "longitude": 20.0,
        "prices": {
            "storage_usd_per_gb_month": 0.03,
            "get_usd_per_10k": 0.004,
            "put_usd_per_1k": 0.005,
            "vm_usd_per_hour": 0.026,
            "egress_usd_per_gb": 0.09,
        },
    }
    row.update(changes)
    return row


def test_a_well_formed_file_elsewhere_loads(tmp_path):
    path = tmp_path / "regions.json"
    path.write_text(json.dumps({"source": "test", "regions": [_region_row()]}))
    (region,) = cloud_regions(path=path)
    assert region.name == "s3:test-1"
    assert region.prices.egress_usd_per_gb == 0.09


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("{not json", "not valid JSON"),
        (json.dumps({"source": "x"}), '"regions" list'),
        (json.dumps({"regions": []}), "empty"),
        (json.dumps({"regions": [_region_row(latitude=95.0)]}), "latitude"),
        (json.dumps({"regions": [_region_row(provider="gcs")]}), "provider"),
        (json.dumps({"regions": [_region_row(prices={"vm_usd_per_hour": 1})]}), "prices"),
        (json.dumps({"regions": [{"name": "s3:x"}]}), r"regions\[0\]"),
        (json.dumps({"regions": [_region_row(), _region_row()]}), "more than once"),
    ],
)
def test_a_malformed_regions_file_raises_data_error(tmp_path, content, match):
    path = tmp_path / "regions.json"
    path.write_text(content)
    with pytest.raises(DataError, match=match):
        cloud_regions(path=path)


def test_a_malformed_or_missing_prefixes_file_raises_data_error(tmp_path):
    path = tmp_path / "prefixes.json"
    row = {"name": "x", "city": "y", "country": "USA", "latitude": 1, "longitude": 2}
    path.write_text(json.dumps({"prefixes": [{**row, "access_ms": 1.0}]}))
    with pytest.raises(DataError, match="country"):
        client_prefixes(path=path)
    with pytest.raises(DataError, match="no such file"):
        client_prefixes(path=tmp_path / "absent.json")

"""The CosTLO testbed's named regions (pure: no processes): `--regions` and the roles."""

from __future__ import annotations

from pathlib import Path

import pytest

from geoslo.errors import InputError
from geoslo.live.costlo import CostloCluster, region_rtts
from geoslo.live.costlo._cluster import _upgraded


def test_ibm_regions_are_the_first_ones_rtt_away_and_names_take_their_own():
    assert region_rtts("Toronto,Montreal,Washington-DC", serving_rtt_ms=2.0) == {
        "toronto": 2.0,
        "montreal": 11.0,
        "washington-dc": 19.0,
    }
    assert region_rtts("near=1.5, far=40") == {"near": 1.5, "far": 40.0}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("toronto", "need 2 to 6 regions"),
        ("a=1,b=2,c=3,d=4,e=5,f=6,g=7", "need 2 to 6 regions"),
        ("a=1,a=2", "named twice"),
        ("a=1,b=soon", "not a number"),
        ("a=1,b=-3", "RTT must be in"),
        ("a=1,montreal", "must then be an IBM region"),
        ("toronto,atlantis", "give NAME=RTT_MS"),
        ("9lives=1,b=2", "a letter first"),
    ],
)
def test_a_bad_region_list_is_refused_with_the_reason(spec, message):
    with pytest.raises(InputError, match=message):
        region_rtts(spec)


def cluster(rtts_ms: dict[str, float]) -> CostloCluster:
    names = list(rtts_ms)
    return CostloCluster(
        Path("/nonexistent"),
        rtts_ms,
        {n: [7000 + k] for k, n in enumerate(names)},
        {n: 7100 + k for k, n in enumerate(names)},
        {n: 7200 + k for k, n in enumerate(names)},
        paths={n: [7300 + k] for k, n in enumerate(names)},
        path_relays={n: 7400 + k for k, n in enumerate(names)},
    )


def test_the_roles_name_the_first_region_and_the_closest_other():
    bed = cluster({"toronto": 2.0, "washington-dc": 19.0, "montreal": 11.0})
    assert (bed.name("serving"), bed.name("second")) == ("toronto", "montreal")
    regions = bed.regions()
    assert regions.serving.server_ports == (7300,) and regions.second.server_ports == (7302,)
    assert bed.regions("washington-dc").second.server_ports == (7301,)
    assert bed.server_name("second", 0) == "redis-montreal-0"
    with pytest.raises(InputError, match="no region 'dallas'"):
        bed.name("dallas")


def test_a_state_file_from_before_named_regions_still_loads():
    old = {
        "state_dir": "/x",
        "second_rtt_ms": 10.0,
        "serving_rtt_ms": 2.0,
        "servers": {"serving": [1], "second": [2]},
        "relays": {"serving": 3, "second": 4},
        "locks": {"serving": 5, "second": 6},
        "wan_servers": [7],
        "wan_relay": 8,
        "local_servers": [9],
        "local_relay": 10,
        "processes": [{"name": "toxiproxy", "pid": 1, "port": 11}],
    }
    bed = CostloCluster(**{**_upgraded(old), "state_dir": Path("/x")})
    assert bed.rtts_ms == {"serving": 2.0, "second": 10.0}
    assert bed.regions().serving.server_ports == (9,) and bed.regions().second.relay_port == 8

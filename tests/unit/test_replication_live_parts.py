"""The live link's pure parts (docs/replication-live.md): the tc lines built for shares and
the parsing of tc's statistics. No processes."""

from __future__ import annotations

import pytest

from geoslo.errors import ConfigError
from geoslo.live.replication import (
    LinkSpec,
    change_lines,
    class_bytes,
    class_rates,
    cumulative_mb,
    destination_ports,
    images_started,
    rebuild_lines,
    setup_lines,
    validate_shares,
)


def test_setup_builds_one_class_per_stream_with_the_link_as_ceiling():
    lines = setup_lines("gtx1", 20e6, (0.5, 0.3, 0.2), destination_ports((5001, 5002, 5003)))
    assert lines[0] == "qdisc add dev gtx1 root handle 1: htb default 30"
    assert "classid 1:1 htb rate 20000000bit ceil 20000000bit" in lines[1]
    assert "classid 1:10 htb rate 10000000bit ceil 20000000bit" in lines[2]
    assert "classid 1:30 htb rate 4000000bit ceil 20000000bit" in lines[4]
    assert lines[5].endswith("match ip dport 5001 0xffff flowid 1:10")
    assert lines[7].endswith("match ip dport 5003 0xffff flowid 1:30")


def test_a_zero_share_keeps_htbs_smallest_rate():
    (first, *_) = change_lines("gtx1", 20e6, (0.0, 0.5, 0.5))
    expected = "class change dev gtx1 parent 1:1 classid 1:10 htb rate 8000bit ceil 20000000bit"
    assert first == expected + " prio 0"


@pytest.mark.parametrize("shares", [(0.5, 0.5, 0.5), (-0.1, 0.5, 0.5), (0.5, 0.5)])
def test_bad_shares_are_refused(shares):
    with pytest.raises(ConfigError, match="shares"):
        validate_shares(shares)


def test_class_statistics_are_parsed():
    text = """class htb 1:1 root rate 20Mbit ceil 20Mbit burst 1600b cburst 1600b
 Sent 30082132 bytes 20461 pkt (dropped 0, overlimits 0 requeues 0)
 backlog 0b 0p requeues 0
class htb 1:10 parent 1:1 prio 0 rate 12Mbit ceil 20Mbit burst 1599b cburst 1600b
 Sent 12087184 bytes 8200 pkt (dropped 0, overlimits 0 requeues 0)
class htb 1:30 parent 1:1 leaf 30: prio 0 rate 8Kbit ceil 20Mbit burst 1600b cburst 1600b
 Sent 0 bytes 0 pkt (dropped 0, overlimits 0 requeues 0)
"""
    assert class_bytes(text) == {"1:1": 30082132, "1:10": 12087184, "1:30": 0}
    assert class_rates(text) == {"1:10": (12e6, 0), "1:30": (8e3, 0)}


def test_priority_is_a_fresh_qdisc_with_the_classes_in_order():
    lines = rebuild_lines("gtx1", 20e6, (0, 0, 0), destination_ports((5001, 5002, 5003)), order=(1, 0, 2))
    assert lines[0] == "qdisc del dev gtx1 root"
    assert lines[1] == "qdisc add dev gtx1 root handle 1: htb default 30"
    assert lines[3].endswith("classid 1:20 htb rate 8000bit ceil 20000000bit prio 0 quantum 1514")
    assert lines[4].endswith("classid 1:10 htb rate 8000bit ceil 20000000bit prio 1 quantum 1514")
    assert lines[5].endswith("classid 1:30 htb rate 8000bit ceil 20000000bit prio 2 quantum 1514")
    assert lines[6].endswith("match ip dport 5001 0xffff flowid 1:10")
    with pytest.raises(ConfigError, match="order"):
        rebuild_lines("gtx1", 20e6, (0, 0, 0), destination_ports((5001, 5002, 5003)), order=(0, 0, 2))


def test_rates_as_tc_rounds_them_are_parsed():
    text = "class htb 1:20 parent 1:1 prio 2 rate 5560Kbit ceil 20Mbit burst 1600b cburst 1600b"
    assert class_rates(text) == {"1:20": (5.56e6, 2)}


@pytest.mark.parametrize(
    ("levels_mbps", "t_s", "expected_mb"),
    [
        ((8.0,), 0.0, 0.0),
        ((8.0,), 2.5, 2.5),  # 1 MB/s
        ((16.0, 8.0), 4.0, 8.0),  # the first level, held 4 s: 2 MB/s
        ((16.0, 8.0), 6.0, 10.0),  # then 1 MB/s
        ((16.0, 8.0), 8.0, 12.0),  # one cycle
        ((16.0, 8.0), 13.0, 12.0 + 8.0 + 1.0),  # and on again
        ((0.0, 8.0), 5.0, 1.0),
    ],
)
def test_the_generator_feeds_the_levels_in_turn(levels_mbps, t_s, expected_mb):
    assert cumulative_mb(levels_mbps, 4.0, t_s) == pytest.approx(expected_mb)


@pytest.mark.parametrize(
    ("t_s", "images"), [(0.0, 0), (7.9, 0), (8.0, 1), (15.99, 1), (16.0, 2), (100.0, 12)]
)
def test_images_arrive_from_the_first_period_on(t_s, images):
    assert images_started(t_s, 8.0) == images


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("capacity_mbps", 0.0),
        ("tick_s", float("nan")),
        ("application_mbps", ()),
        ("replication_mbps", (1.0, -2.0)),
    ],
)
def test_a_bad_link_spec_names_its_field(field, value):
    with pytest.raises(ConfigError, match=field):
        LinkSpec(**{field: value})


def _testbed_service(controller: dict, environment: dict):
    from geoslo.runtime.replication import SYSTEM

    settings = SYSTEM.controller_settings.model_validate(controller)
    table = SYSTEM.environments["testbed"].model_validate({"kind": "testbed", **environment})
    return SYSTEM.build(settings, table, 1.0)


def test_the_testbed_environment_takes_the_link_and_the_controllers_image_schedule():
    service = _testbed_service(
        {"capacity_mbps": 20.0, "image_mb": 4.0, "image_period_s": 8.0},
        {"application_mbps": [10.0], "namespace_prefix": "geoslo-x"},
    )
    spec = service.environment.spec
    assert not service.environment.simulated and service.environment.link is None  # not started
    assert spec.capacity_mbps == 20.0 and spec.application_mbps == (10.0,)
    assert (spec.image_mb, spec.image_period_s, spec.namespace_prefix) == (4.0, 8.0, "geoslo-x")


@pytest.mark.parametrize(
    ("controller", "environment", "field"),
    [
        ({"capacity_mbps": 30.0}, {}, "environment.capacity_mbps"),  # the link is 20
        ({}, {}, "environment.capacity_mbps"),  # the controller's 100, the link's 20
    ],
)
def test_a_testbed_link_unlike_the_controllers_is_refused_by_name(controller, environment, field):
    with pytest.raises(ConfigError) as caught:
        _testbed_service(controller, environment)
    assert caught.value.field == field


@pytest.mark.parametrize(
    ("key", "value"),
    [("namespace_prefix", "Bad/Name"), ("capacity_mbps", 0.0), ("application_mbps", [])],
)
def test_the_testbed_table_refuses_bad_values(key, value):
    from pydantic import ValidationError

    from geoslo.runtime.replication import TestbedSettings

    with pytest.raises(ValidationError, match=key):
        TestbedSettings.model_validate({"kind": "testbed", key: value})

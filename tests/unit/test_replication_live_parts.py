"""The live link's pure parts (docs/replication-live.md): the tc lines built for shares and
the parsing of tc's statistics. No processes."""

from __future__ import annotations

import pytest

from geoslo.errors import ConfigError
from geoslo.experiments.replication import LiveSettings, check_live, experiment_1, live_schedule
from geoslo.live.replication import (
    STREAM_MATCHES,
    AckedBytes,
    LinkSpec,
    PortMatch,
    change_lines,
    class_bytes,
    class_rates,
    cumulative_mb,
    destination_ports,
    full_link_goodput_mbps,
    images_started,
    parse_ss,
    rebuild_lines,
    reply_bytes,
    setup_lines,
    validate_shares,
)
from geoslo.live.replication._sockets import stream_of

DST = destination_ports((5001, 5002, 5003))  # the calibration link's three receivers


def test_setup_builds_one_class_per_stream_with_the_link_as_ceiling():
    lines = setup_lines("gtx1", 20e6, (0.5, 0.3, 0.2), DST)
    assert lines[0] == "qdisc add dev gtx1 root handle 1: htb default 0"  # the rest: direct
    assert "parent 1: classid 1:1 htb rate 20000000bit ceil 20000000bit" in lines[1]
    assert "parent 1:1 classid 1:10 htb rate 10000000bit ceil 20000000bit" in lines[2]
    assert "parent 1:1 classid 1:30 htb rate 4000000bit ceil 20000000bit" in lines[4]
    assert lines[5].endswith("match ip dport 5001 0xffff flowid 1:10")
    assert lines[6].endswith("match ip6 dport 5001 0xffff flowid 1:10")
    assert lines[9].endswith("match ip dport 5003 0xffff flowid 1:30")


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
    lines = rebuild_lines("gtx1", 20e6, (0, 0, 0), DST, order=(1, 0, 2))
    assert lines[0] == "qdisc del dev gtx1 root"
    assert lines[1] == "qdisc add dev gtx1 root handle 1: htb default 0"
    assert lines[3].endswith("classid 1:20 htb rate 8000bit ceil 20000000bit prio 0 quantum 1514")
    assert lines[4].endswith("classid 1:10 htb rate 8000bit ceil 20000000bit prio 1 quantum 1514")
    assert lines[5].endswith("classid 1:30 htb rate 8000bit ceil 20000000bit prio 2 quantum 1514")
    assert lines[6].endswith("match ip dport 5001 0xffff flowid 1:10")
    with pytest.raises(ConfigError, match="order"):
        rebuild_lines("gtx1", 20e6, (0, 0, 0), DST, order=(0, 0, 2))


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
        ("value_bytes", 10),
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
    assert not service.environment.simulated and service.environment.sites is None  # not started
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


# --- the real traffic's counters -------------------------------------------------------------

SS_TEXT = """\
0      872520 10.78.0.1:6379 10.78.0.2:34188
\t bbr wscale:10,10 rto:212 mss:1448 bytes_sent:3362256 bytes_acked:3328952 bytes_received:4200
0      0      127.0.0.1:6380 127.0.0.1:51000
\t cubic bytes_sent:100 bytes_acked:100
0      4096   10.78.0.1:6380 10.78.0.2:37802
\t bbr bytes_acked:2580836 notsent:813776
0      0      10.78.0.1:41234 10.78.0.2:873
\t cubic mss:1448
"""


def test_ss_gives_each_sockets_queue_and_acknowledged_bytes():
    sockets = parse_ss(SS_TEXT)
    assert [(s.local_port, s.peer_port, s.send_queue_bytes, s.acked_bytes) for s in sockets] == [
        (6379, 34188, 872520, 3328952),
        (6380, 51000, 0, 100),
        (6380, 37802, 4096, 2580836),
        (41234, 873, 0, 0),  # ss leaves bytes_acked out while it is 0
    ]
    assert [s.crosses for s in sockets] == [True, False, True, True]


def test_sockets_are_told_apart_as_the_htb_filters_do():
    sockets = [s for s in parse_ss(SS_TEXT) if s.crosses]
    assert [stream_of(s, STREAM_MATCHES) for s in sockets] == [0, 1, 2]


def test_acknowledged_bytes_add_up_over_sockets_that_come_and_go():
    first = parse_ss("0 0 10.0.0.1:873 10.0.0.2:873\n\t bytes_acked:100\n")
    later = parse_ss("0 0 10.0.0.1:873 10.0.0.2:873\n\t bytes_acked:250\n")
    again = parse_ss("0 0 10.0.0.1:873 10.0.0.2:873\n\t bytes_acked:40\n")  # a new connection
    matches = (PortMatch("dport", 1), PortMatch("dport", 2), PortMatch("sport", 873))
    acked = AckedBytes()
    assert acked.update(first, matches)[2] == 100
    assert acked.update(later, matches)[2] == 250
    assert acked.update([], matches)[2] == 250  # it closed: what it acknowledged stays
    assert acked.update(again, matches)[2] == 290


def test_a_stream_is_matched_by_source_or_destination_port():
    lines = setup_lines("gtx1", 20e6, (0.5, 0.3, 0.2), STREAM_MATCHES)
    assert lines[5].endswith("match ip protocol 6 0xff match ip sport 6379 0xffff flowid 1:10")
    assert lines[7].endswith("match ip sport 6380 0xffff flowid 1:20")
    assert lines[9].endswith("match ip dport 873 0xffff flowid 1:30")
    with pytest.raises(ConfigError, match="direction"):
        PortMatch("src", 80)
    with pytest.raises(ConfigError, match="port"):
        PortMatch("dport", 70000)


def test_a_reply_on_the_wire_is_its_value_and_header():
    assert reply_bytes(65_536) == len(b"$65536\r\n") + 65_536 + 2


def _host_service(tmp_path, **environment):
    from geoslo.runtime.replication import SYSTEM

    table = {
        "kind": "host",
        "interface": "eth9",
        "application": {"address": "10.0.0.5:6379"},
        "master": {"address": "127.0.0.1:6380"},
        "replica": {"address": "10.1.0.7:6380"},
        "spool_dir": str(tmp_path),
        "image_destination": "rsync://backup@10.1.0.7/images",
        **environment,
    }
    settings = SYSTEM.controller_settings.model_validate({"capacity_mbps": 50.0})
    return SYSTEM.build(settings, SYSTEM.environments["host"].model_validate(table), 1.0)


def test_the_host_environment_takes_addresses_ports_and_the_spool(tmp_path):
    env = _host_service(tmp_path, image_port=22).environment
    spec = env.spec
    assert (spec.dev, spec.capacity_mbps) == ("eth9", 50.0)
    assert (spec.application.host, spec.application.port) == ("10.0.0.5", 6379)
    assert spec.matches[1] == PortMatch("sport", 6380, "10.1.0.7")  # the replica's address
    assert spec.matches[2] == PortMatch("dport", 22, "10.1.0.7/32")  # the backup's
    assert spec.spool_dir == tmp_path


@pytest.mark.parametrize(
    ("environment", "field"),
    [
        ({"spool_dir": "/nonexistent/spool"}, "environment.spool_dir"),
        ({"application": {"address": "nohost"}}, "environment.application.address"),
        ({"rsync_password_file": "/nonexistent/pw"}, "environment.rsync_password_file"),
        ({"master": {"address": "127.0.0.1:6380", "password_file": "/no/pw"}},
         "environment.master.password_file"),
    ],
)  # fmt: skip
def test_a_bad_host_environment_is_refused_by_name(tmp_path, environment, field):
    with pytest.raises(ConfigError) as caught:
        _host_service(tmp_path, **environment)
    assert caught.value.field == field


def test_the_live_schedule_is_experiment_1_scaled_to_the_link():
    settings = LiveSettings()
    schedule = live_schedule(settings)
    paper = experiment_1()
    assert schedule.duration_s == paper.duration_s // settings.compression
    assert schedule.application_mbps.mean() == pytest.approx(
        paper.application_mbps.mean() * settings.capacity_mbps / 100.0
    )
    config = schedule.config
    assert (config.capacity_mbps, config.interval_s) == (20.0, 1.0)
    assert config.image_mb == pytest.approx(375.0 * 0.2 / 60)  # 1.25 MB
    assert config.image_period_s == pytest.approx(10.0)
    rho = 20.0 * 1.0 / (100.0 * 10.0)
    assert config.weights == paper.config.weights  # the MPC counts buffers in intervals of C
    assert config.arrival_model.process_noise_mb == pytest.approx(
        paper.config.arrival_model.process_noise_mb * rho
    )
    assert live_schedule(LiveSettings.quick()).duration_s == 108  # 60%: the overload and after


ORDERED = {"MPC": 1.0, "STATIC": 2.0, "FIFO": 3.0}  # MB of application data buffered


def _results(app_mb: dict, within=1.0, peak=0.96, images=(9, 9)) -> dict:
    return {
        "policies": {
            name: {
                "live": {"app_mean_mb": app},
                "images_due_done": images[0],
                "images_due": images[1],
                "dynamics_within_fraction": within,
                "full_link_goodput_fraction": peak,
            }
            for name, app in app_mb.items()
        }
    }


@pytest.mark.parametrize(
    ("results", "failed"),
    [
        (_results(ORDERED), set()),
        (_results({**ORDERED, "MPC": 2.5}), {"MPC buffers less application data than STATIC"}),
        (_results(ORDERED, images=(7, 9)),
         {"MPC finishes every image taken a horizon or more before the end"}),
        (_results(ORDERED, peak=0.7),
         {"a full link carries 85-102% of C (median goodput, every policy)"}),
        (_results(ORDERED, within=0.9),
         {f"{p}: backlogs obey eq. (3) in >= 95% of intervals, each stream" for p in ORDERED}),
    ],
)  # fmt: skip
def test_the_live_checks_can_fail(results, failed):
    checks = check_live(results)
    assert {name for name, passed in checks.items() if not passed} == failed


@pytest.mark.parametrize(
    ("backlog_mb", "sent_mb", "expected_mbps"),
    [
        ([5.0, 5.0, 5.0], [0.0, 2.4, 2.3], [19.2, 18.4]),  # full all along: every interval
        ([5.0, 0.5, 5.0], [0.0, 2.4, 2.3], []),  # drained in between: neither counts
        ([0.0, 0.0, 0.0], [0.0, 0.5, 0.5], []),  # idle: the link's C is not what it sent
    ],
)
def test_c_is_measured_only_from_intervals_in_which_the_link_was_full(
    backlog_mb, sent_mb, expected_mbps
):
    goodput = full_link_goodput_mbps([0.0, 1.0, 2.0], backlog_mb, sent_mb, 20.0)
    assert goodput.tolist() == pytest.approx(expected_mbps)

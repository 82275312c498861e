"""The MPC's host mode does no harm (docs/replication-live.md, "On your own machines"): the
filters it installs, how sockets are told apart by port and destination (IPv4 and IPv6),
and the lines that put an interface's own qdisc back. No processes."""

from __future__ import annotations

import pytest

from geoslo.errors import ConfigError, TestbedError
from geoslo.live.replication import (
    PortMatch,
    parse_ss,
    restore_lines,
    setup_lines,
    state_path,
)
from geoslo.live.replication._sockets import stream_of

SSH_TO_BACKUP = PortMatch("dport", 22, "10.1.0.7")
MATCHES = (PortMatch("sport", 6379), PortMatch("sport", 6380, "fd00:1::7"), SSH_TO_BACKUP)


def _filters(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("filter")]


def test_only_the_named_streams_are_classified_and_local_prefixes_come_first():
    lines = setup_lines("eth9", 50e6, (0.6, 0.3, 0.1), MATCHES, None, ("10.0.0.0/16", "fd00::/64"))
    assert lines[0].endswith("htb default 0")  # no default class: the rest goes direct
    assert _filters(lines) == [
        "filter add dev eth9 parent 1: protocol ip prio 1 u32 match ip dst 10.0.0.0/16 flowid 1:0",
        "filter add dev eth9 parent 1: protocol ipv6 prio 2 u32 match ip6 dst fd00::/64 flowid 1:0",
        "filter add dev eth9 parent 1: protocol ip prio 3 u32 match ip protocol 6 0xff "
        "match ip sport 6379 0xffff flowid 1:10",
        "filter add dev eth9 parent 1: protocol ipv6 prio 4 u32 match ip6 protocol 6 0xff "
        "match ip6 sport 6379 0xffff flowid 1:10",
        "filter add dev eth9 parent 1: protocol ipv6 prio 4 u32 match ip6 protocol 6 0xff "
        "match ip6 sport 6380 0xffff match ip6 dst fd00:1::7/128 flowid 1:20",
        "filter add dev eth9 parent 1: protocol ip prio 3 u32 match ip protocol 6 0xff "
        "match ip dport 22 0xffff match ip dst 10.1.0.7/32 flowid 1:30",
    ]


@pytest.mark.parametrize(
    ("local_ip", "local_port", "peer_ip", "peer_port", "stream"),
    [
        ("10.0.0.5", 6379, "10.2.0.9", 40000, 0),  # a reply to a remote client
        ("fd00:1::5", 6379, "fd00:2::9", 40000, 0),  # the same over IPv6
        ("fd00:1::5", 6380, "fd00:1::7", 50000, 1),  # the master's stream to its replica
        ("fd00:1::5", 6380, "fd00:1::8", 50000, None),  # the same port to another host
        ("10.0.0.5", 41000, "10.1.0.7", 22, 2),  # rsync over SSH to the backup
        ("10.0.0.5", 41001, "10.3.0.1", 22, None),  # SSH elsewhere: not an image
    ],
)
def test_sockets_are_told_apart_by_port_and_destination(
    local_ip, local_port, peer_ip, peer_port, stream
):
    text = f"0 0 {_ss(local_ip)}:{local_port} {_ss(peer_ip)}:{peer_port}\n"
    (sock,) = parse_ss(text)
    assert (sock.local_ip, sock.peer_ip) == (local_ip, peer_ip)
    assert stream_of(sock, MATCHES) == stream


def _ss(ip: str) -> str:
    return f"[{ip}]" if ":" in ip else ip


def test_ipv6_loopback_does_not_cross_the_link():
    sockets = parse_ss("0 0 [::1]:6380 [::1]:51000\n0 0 [fd00::1]:6380 [fd00::2]:51000\n")
    assert [s.crosses for s in sockets] == [False, True]


@pytest.mark.parametrize(
    ("destination", "field"),
    [("10.1.0.300", "destination"), ("backup.example", "destination")],
)
def test_a_bad_destination_is_refused_by_name(destination, field):
    with pytest.raises(ConfigError) as caught:
        PortMatch("dport", 22, destination)
    assert caught.value.field == field


def test_a_bad_local_prefix_is_refused_before_any_line():
    with pytest.raises(ConfigError, match="local_prefixes"):
        setup_lines("eth9", 50e6, (0.6, 0.3, 0.1), MATCHES, None, ("10.0.0.0/33",))


# --- the interface's own qdisc ----------------------------------------------------------------

OPERATOR_HTB = (
    "qdisc htb 1: root refcnt 2 r2q 10 default 0x30 direct_packets_stat 0 ver 3.17 "
    "direct_qlen 1000\nqdisc pfifo 10: parent 1:10 limit 50p\n"
)
OPERATOR_CLASSES = (
    "class htb 1:10 parent 1:1 leaf 10: prio 1 quantum 3000 rate 5Mbit ceil 20Mbit "
    "linklayer ethernet burst 1600b/1 mpu 0b cburst 1600b/1 mpu 0b level 0\n"
    "class htb 1:1 root rate 20Mbit ceil 20Mbit linklayer ethernet burst 1600b/1 mpu 0b "
    "cburst 1600b/1 mpu 0b level 7\n"
)


def test_the_kernels_default_root_comes_back_by_deleting_geoslos():
    assert restore_lines("eth0", "qdisc noqueue 0: root refcnt 2\n", "", "") == []
    mq = "qdisc mq 0: root\nqdisc fq_codel 0: parent :1 limit 10240p flows 1024\n"
    assert restore_lines("eth0", mq, "", "") == []


def test_an_operators_htb_is_rebuilt_parents_first_with_its_parameters():
    assert restore_lines("eth0", OPERATOR_HTB, OPERATOR_CLASSES, "") == [
        "qdisc add dev eth0 root handle 1: htb r2q 10 default 0x30 direct_qlen 1000",
        "class add dev eth0 parent 1: classid 1:1 htb rate 20Mbit ceil 20Mbit burst 1600b "
        "cburst 1600b",
        "class add dev eth0 parent 1:1 classid 1:10 htb prio 1 quantum 3000 rate 5Mbit "
        "ceil 20Mbit burst 1600b cburst 1600b",
        "qdisc add dev eth0 parent 1:10 handle 10: pfifo limit 50",
    ]


def test_an_operators_tbf_is_rebuilt():
    tbf = "qdisc tbf 8001: root refcnt 2 rate 20Mbit burst 10Kb/1 mpu 0b lat 36.9ms\n"
    its_class = "class tbf 8001:1 parent 8001:\n"
    assert restore_lines("eth0", tbf, its_class, "") == [
        "qdisc add dev eth0 root handle 8001: tbf rate 20Mbit burst 10Kb latency 36.9ms"
    ]


@pytest.mark.parametrize(
    ("qdiscs", "filters", "problem"),
    [
        ("qdisc cake 8001: root refcnt 2 bandwidth 20Mbit\n", "", "cake 8001:"),
        (OPERATOR_HTB, "filter parent 1: protocol ip pref 1 u32 chain 0\n", "filters"),
    ],
)
def test_what_cannot_be_put_back_is_refused_before_anything_changes(qdiscs, filters, problem):
    with pytest.raises(TestbedError, match=problem):
        restore_lines("eth0", qdiscs, OPERATOR_CLASSES, filters)


def test_the_saved_qdisc_has_one_file_per_interface_and_namespace(tmp_path):
    assert state_path(tmp_path, "eth0").name == "qdisc-host-eth0.json"
    assert state_path(tmp_path, "eth0", "site-a").name == "qdisc-site-a-eth0.json"


# --- the host config ------------------------------------------------------------------------


def _host_spec(tmp_path, **environment):
    from geoslo.runtime.replication import SYSTEM

    table = {
        "kind": "host",
        "interface": "eth9",
        "application": {"address": "10.0.0.5:6379"},
        "master": {"address": "127.0.0.1:6380"},
        "replica": {"address": "10.1.0.7:6390"},
        "spool_dir": str(tmp_path),
        "image_destination": "backup@[fd00:1::9]:/srv/images",
        "image_port": 22,
        "replication_port": 6390,
        **environment,
    }
    settings = SYSTEM.controller_settings.model_validate({"capacity_mbps": 50.0})
    environment = SYSTEM.environments["host"].model_validate(table)
    return SYSTEM.build(settings, environment, 1.0).environment.spec


def test_each_stream_goes_to_its_peer_by_default_and_local_prefixes_are_kept(tmp_path):
    spec = _host_spec(tmp_path, local_prefixes=["10.0.0.0/16"], qdisc_state_dir=str(tmp_path))
    assert spec.matches == (
        PortMatch("sport", 6379),  # replies to any client beyond the local prefixes
        PortMatch("sport", 6390, "10.1.0.7/32"),  # a replica on a non-default port
        PortMatch("dport", 22, "fd00:1::9/128"),  # rsync over SSH to the backup, IPv6
    )
    assert spec.local_prefixes == ("10.0.0.0/16",)
    assert spec.qdisc_state_dir == tmp_path


@pytest.mark.parametrize(
    ("environment", "field"),
    [
        ({"local_prefixes": ["10.0.0.0/16", "nowhere"]}, "environment.local_prefixes[1]"),
        ({"image_peer": "10.1.0.7/40"}, "environment.image_peer"),
        ({"local_prefixes": ["10.1.0.0/16"]}, "environment.local_prefixes"),  # the replica's
    ],
)
def test_a_bad_prefix_in_the_host_config_is_refused_by_name(tmp_path, environment, field):
    with pytest.raises(ConfigError) as caught:
        _host_spec(tmp_path, **environment)
    assert caught.value.field == field

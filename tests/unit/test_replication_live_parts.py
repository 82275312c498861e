"""The live link's pure parts (docs/replication-live.md): the tc lines built for shares and
the parsing of tc's statistics. No processes."""

from __future__ import annotations

import pytest

from geoslo.errors import ConfigError
from geoslo.live.replication import change_lines, class_bytes, setup_lines, validate_shares


def test_setup_builds_one_class_per_stream_with_the_link_as_ceiling():
    lines = setup_lines("gtx1", 20e6, (0.5, 0.3, 0.2), (5001, 5002, 5003))
    assert lines[0] == "qdisc add dev gtx1 root handle 1: htb default 30"
    assert "classid 1:1 htb rate 20000000bit ceil 20000000bit" in lines[1]
    assert "classid 1:10 htb rate 10000000bit ceil 20000000bit" in lines[2]
    assert "classid 1:30 htb rate 4000000bit ceil 20000000bit" in lines[4]
    assert lines[5].endswith("match ip dport 5001 0xffff flowid 1:10")
    assert lines[7].endswith("match ip dport 5003 0xffff flowid 1:30")


def test_a_zero_share_keeps_htbs_smallest_rate():
    (first, *_) = change_lines("gtx1", 20e6, (0.0, 0.5, 0.5))
    assert (
        first == "class change dev gtx1 parent 1:1 classid 1:10 htb rate 8000bit ceil 20000000bit"
    )


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

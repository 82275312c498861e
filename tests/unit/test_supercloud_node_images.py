"""Which image follows which server when a reconfiguration replaces servers (issue 22,
SoCC 2016 §4.1): pure bookkeeping, no processes."""

from __future__ import annotations

from geoslo.live.supercloud.zookeeper._images import ImageMove, pair_moves


def test_a_departed_servers_image_goes_to_a_newcomer_in_id_order():
    owners = {"node-1": 1, "node-2": 2, "node-3": 3}
    # 1 and 3 left, 9 and 10 joined: in id order 1 -> 9, 3 -> 10
    assert pair_moves(owners, {2: "east", 9: "west", 10: "west"}) == [("node-1", 9), ("node-3", 10)]


def test_nothing_moves_while_newcomers_only_joined_or_nothing_changed():
    owners = {"node-1": 1, "node-2": 2, "node-3": 3}
    assert pair_moves(owners, {1: "e", 2: "e", 3: "e", 9: "w"}) == []  # added before removing
    assert pair_moves(owners, {1: "e", 2: "e", 3: "e"}) == []


def test_a_move_with_no_reads_counted_has_no_local_fraction():
    assert ImageMove("node-1", "e", "w", 0.0, 64, 16).local_read_fraction == 0.75
    assert ImageMove("node-1", "e", "w", 0.0, 0, 0).local_read_fraction != 0.0  # nan

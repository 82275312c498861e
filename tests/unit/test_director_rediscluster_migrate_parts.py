"""Pure planning of slot migrations on Redis Cluster: batches, rebalancing, repair decisions
(docs/director-live.md, "Slot migration and its safety")."""

from __future__ import annotations

import pytest

from geoslo.live.director.rediscluster._engine import SLOTS, parse_cluster_nodes
from geoslo.live.director.rediscluster._migrate import (
    Orphan,
    RepairStep,
    batch_bytes_for_rate,
    config_epochs,
    decide_repairs,
    epochs_settled,
    find_orphans,
    plan_batches,
    plan_rebalance,
)

A, B, C = "a" * 40, "b" * 40, "c" * 40


def node_line(node_id: str, port: int, epoch: int, *slots: str, myself: bool = True) -> str:
    """One ``CLUSTER NODES`` line as redis-server 7.0 writes it."""
    flags = "myself,master" if myself else "master"
    return (
        f"{node_id} 127.0.0.1:{port}@{port + 10000} {flags} - 0 1700000000000 {epoch} "
        f"connected {' '.join(slots)}"
    ).rstrip()


def selves(*lines: str):
    return [parse_cluster_nodes(line)[0] for line in lines]


@pytest.mark.parametrize(
    ("sizes_bytes", "batch_bytes", "expected"),
    [
        ([], 100, []),
        ([10, 10, 10], 100, [[0, 1, 2]]),
        ([60, 60, 60], 100, [[0], [1], [2]]),
        ([40, 60, 1, 99], 100, [[0, 1], [2, 3]]),
        ([500, 10], 100, [[0], [1]]),  # a key larger than a batch goes alone
        ([0, 0, 0], 1, [[0, 1, 2]]),
    ],
)
def test_batches_hold_at_most_the_batch_bytes_and_keep_the_key_order(
    sizes_bytes, batch_bytes, expected
):
    keys = [f"k{i}".encode() for i in range(len(sizes_bytes))]
    batches = plan_batches(list(zip(keys, sizes_bytes, strict=True)), batch_bytes)
    assert batches == [[keys[i] for i in batch] for batch in expected]


@pytest.mark.parametrize(
    ("rate_bytes_per_s", "max_batch_bytes", "expected_bytes"),
    [
        (4_000_000, 64 * 1024, 64 * 1024),  # §5.7's 4 MB/s: capped
        (200_000, 64 * 1024, 10_000),  # 50 ms of the rate
        (10, 64 * 1024, 1),  # at least one byte: one key per batch
    ],
)
def test_batch_bytes_follow_the_rate_up_to_the_cap(
    rate_bytes_per_s, max_batch_bytes, expected_bytes
):
    assert batch_bytes_for_rate(rate_bytes_per_s, max_batch_bytes) == expected_bytes


def spread(owned, moves):
    """Slot owners after applying ``moves`` to ``owned``."""
    owners = {s: n for n, slots in owned.items() for s in slots}
    for source, target, slots in moves:
        for slot in slots:
            assert owners[slot] == source
            owners[slot] = target
    counts: dict[str, int] = {}
    for node in owners.values():
        counts[node] = counts.get(node, 0) + 1
    return counts


@pytest.mark.parametrize(
    ("owned", "joining", "leaving", "expected_counts"),
    [
        ({A: range(0, 8192), B: range(8192, SLOTS)}, [C], [], {A: 5462, B: 5461, C: 5461}),
        (
            {A: range(0, 5462), B: range(5462, 10923), C: range(10923, SLOTS)},
            [],
            [B],
            {A: 8192, C: 8192},
        ),
        ({A: range(0, 10), B: range(10, 20)}, [], [], {A: 10, B: 10}),  # already even
        ({A: range(0, 20), B: []}, [], [], {A: 10, B: 10}),  # an empty master receives
    ],
)
def test_a_rebalance_spreads_the_slots_evenly_over_the_masters_left(
    owned, joining, leaving, expected_counts
):
    owned = {n: list(s) for n, s in owned.items()}
    moves = plan_rebalance(owned, joining, leaving)
    assert spread(owned, moves) == {n: c for n, c in expected_counts.items() if c}
    assert all(source not in joining and target not in leaving for source, target, _ in moves)


def test_a_rebalance_moves_only_the_excess_from_the_end_of_a_range():
    moves = plan_rebalance({A: list(range(0, 8)), B: list(range(8, 16))}, joining=[C])
    # C's share is 5: A keeps 0..5 (6 slots, the first master gets the remainder's slot)
    assert moves == [(A, C, [6, 7]), (B, C, [13, 14, 15])]


def test_a_rebalance_without_masters_left_is_refused():
    with pytest.raises(ValueError, match="no master would be left"):
        plan_rebalance({A: [1, 2]}, leaving=[A])


def test_config_epochs_are_read_from_every_line():
    text = "\n".join([node_line(A, 7000, 3, "0-100"), node_line(B, 7001, 9, myself=False)])
    assert config_epochs(text) == {A: 3, B: 9}


@pytest.mark.parametrize(
    ("target_current", "own", "settled"),
    [
        (9, {A: 3, B: 9}, True),  # the target knows the greatest: its bump makes 10
        (8, {A: 3, B: 9}, False),  # B's 9 has not reached it: its bump would tie B at 9
        (9, {A: 9, B: 9, C: 2}, False),  # a collision gossip has yet to resolve
        (0, {}, True),
    ],
)
def test_a_target_takes_slots_only_once_it_knows_the_greatest_epoch(target_current, own, settled):
    assert epochs_settled(target_current, own) is settled


# Two masters own all slots; slot 100 is half-way from A to B in most cases below.
HALF = f"[100->-{B}]"
IMPORT = f"[100-<-{A}]"


@pytest.mark.parametrize(
    ("a_slots", "b_slots", "epochs", "keys", "expected"),
    [
        # both markers, no key on the target yet: no key left A, roll back
        (["0-8191", HALF], ["8192-16383", IMPORT], {A: 1, B: 2}, {(A, 100): 5}, "roll-back A"),
        # both markers, some keys already on the target: finish to B
        (
            ["0-8191", HALF],
            ["8192-16383", IMPORT],
            {A: 1, B: 2},
            {(A, 100): 3, (B, 100): 2},
            "finish A B",
        ),
        # the target already took the slot (higher epoch) but A kept its marker
        (["0-8191", HALF], ["100", "8192-16383"], {A: 1, B: 5}, {}, "finish A B"),
        # only the target's marker (the crash came between the two SETSLOTs)
        (["0-8191"], ["8192-16383", IMPORT], {A: 1, B: 2}, {(A, 100): 7}, "roll-back A"),
        # only the source's marker (the target restarted before persisting its own)
        (["0-8191", HALF], ["8192-16383"], {A: 1, B: 2}, {(B, 100): 1}, "finish A B"),
    ],
)
def test_a_half_migrated_slot_finishes_when_a_key_reached_the_target_else_rolls_back(
    a_slots, b_slots, epochs, keys, expected
):
    views = selves(node_line(A, 7000, epochs[A], *a_slots), node_line(B, 7001, epochs[B], *b_slots))
    steps = decide_repairs(views, epochs, keys)
    assert len(steps) == 1
    kind, source, *target = expected.split()
    names = {"A": A, "B": B}
    assert (steps[0].slot, steps[0].kind, steps[0].source) == (100, kind, names[source])
    assert steps[0].target == (names[target[0]] if target else None)


@pytest.mark.parametrize(
    ("a_slots", "b_slots", "epochs", "expected"),
    [
        # a kill inside MIGRATE: the batch on both, A (restarted) still owns the slot and
        # acknowledges writes to those keys: A's copy wins (the old rule kept B's)
        (["0-8191", HALF], ["8192-16383", IMPORT], {A: 1, B: 2}, "finish A"),
        # B took the slot with a greater epoch: B's copy wins
        (["0-8191", HALF], ["100", "8192-16383"], {A: 1, B: 5}, "finish B"),
        # both claim it: the greater epoch (how Redis settles it) is the owner
        (["0-8191", HALF], ["100", "8192-16383"], {A: 6, B: 5}, "finish A"),
        # no key reached B: roll back, A keeps its copies
        (["0-8191", HALF], ["8192-16383", IMPORT], {A: 1, B: 2}, "roll-back A"),
    ],
)
def test_a_key_on_both_nodes_keeps_the_copy_of_the_slots_owner(a_slots, b_slots, epochs, expected):
    kind, keep = expected.split()
    keys = {(A, 100): 4, (B, 100): 4 if kind == "finish" else 0}
    views = selves(node_line(A, 7000, epochs[A], *a_slots), node_line(B, 7001, epochs[B], *b_slots))
    (step,) = decide_repairs(views, epochs, keys)
    assert (step.slot, step.kind, step.keep) == (100, kind, {"A": A, "B": B}[keep])


def test_keys_on_a_master_that_does_not_own_their_slot_are_orphans_of_the_owner():
    views = selves(node_line(A, 7000, 1, "0-8191"), node_line(B, 7001, 2, "8192-16382"))
    keys = {(A, 5): 3, (B, 5): 2, (B, 9000): 7, (A, 9000): 1, (A, 16383): 4, (B, 6): 0}
    assert find_orphans(views, {A: 1, B: 2}, keys) == [Orphan(5, B, A, 2), Orphan(9000, A, B, 1)]


def test_a_slot_no_master_owns_goes_to_the_master_holding_most_of_its_keys():
    views = selves(node_line(A, 7000, 1, "0-99", "101-8191"), node_line(B, 7001, 2, "8192-16382"))
    steps = decide_repairs(views, {A: 1, B: 2}, {(A, 100): 1, (B, 100): 4})
    assert steps == [
        RepairStep(100, "assign", None, B, "no master owns it"),
        RepairStep(16383, "assign", None, None, "no master owns it"),
    ]


def test_a_consistent_cluster_needs_no_repair():
    views = selves(node_line(A, 7000, 1, "0-8191"), node_line(B, 7001, 2, "8192-16383"))
    assert decide_repairs(views, {A: 1, B: 2}, {(A, 5): 3, (B, 9000): 1}) == []

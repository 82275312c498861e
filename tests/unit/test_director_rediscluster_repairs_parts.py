"""The Director's migrations journal and its repair policy, without processes
(docs/director-live.md, "Repair")."""

from __future__ import annotations

import json

import pytest

from geoslo.errors import InputError
from geoslo.live.director.rediscluster._migrate import RepairReport, RepairStep
from geoslo.live.director.rediscluster._repairs import (
    MIGRATIONS_FILE,
    JournalRepairs,
    RepairPending,
    describe_report,
    open_moves,
    parse_seed_nodes,
    slot_ranges_text,
)

A, B = "a" * 40, "b" * 40


def begin(move: int, *ranges: tuple[int, int]) -> str:
    return json.dumps({"event": "begin", "move": move, "slots": [list(r) for r in ranges]})


def end(move: int) -> str:
    return json.dumps({"event": "end", "move": move, "how": "done"})


@pytest.mark.parametrize(
    ("lines", "expected", "bad"),
    [
        ([], {}, 0),
        ([begin(1, (0, 2))], {1: {0, 1, 2}}, 0),
        ([begin(1, (0, 2)), end(1)], {}, 0),
        ([begin(1, (0, 0)), begin(2, (5, 6), (9, 9)), end(1)], {2: {5, 6, 9}}, 0),
        ([begin(1, (0, 0)), '{"event": "left-open", "move": 1, "why": "x"}'], {1: {0}}, 0),
        ([begin(1, (3, 3)), '{"event": "end", "mo'], {1: {3}}, 1),  # torn by a crash
        ([end(7), ""], {}, 0),
    ],
)
def test_the_open_moves_are_those_begun_and_not_ended(lines, expected, bad):
    moves, unreadable = open_moves(lines)
    assert ({m: set(s) for m, s in moves.items()}, unreadable) == (expected, bad)


def test_slot_ranges_are_written_compactly():
    assert slot_ranges_text([5, 0, 1, 2, 9, 8]) == "0-2, 5, 8-9"


def test_a_report_groups_consecutive_slots_with_the_same_decision():
    finish = [RepairStep(s, "finish", A, B, "the target holds some of its keys", A) for s in (0, 1)]
    steps = (*finish, RepairStep(7, "roll-back", A, None, "no key reached the target", A))
    lines = describe_report(RepairReport(steps, 12, 0, dry_run=True))
    assert lines == [
        f"slots 0-1: finish {A[:8]} -> {B[:8]} (the target holds some of its keys; "
        f"a key on both keeps {A[:8]}'s copy)",
        f"slot 7: roll back to {A[:8]} (no key reached the target)",
    ]
    assert describe_report(RepairReport((), 0, 0, dry_run=True)) == ["nothing to repair"]


def test_a_failed_move_stays_open_and_its_slots_refuse_moves_until_repaired(tmp_path):
    repairs = JournalRepairs(tmp_path)
    with repairs.moving(A, B, range(0, 4)) as move:
        move.closed("done")
    with pytest.raises(ConnectionError), repairs.moving(A, B, range(4, 8)):
        raise ConnectionError("the source died")
    assert repairs.pending_slots() == set(range(4, 8))
    with pytest.raises(RepairPending, match="slots 6-7 await repair"), repairs.moving(B, A, [6, 7]):
        pass
    with repairs.moving(B, A, [0]) as move:  # other slots move on
        move.closed("done")
    # a controller started later finds the failed move in the journal, and only it
    assert {m: set(s) for m, s in repairs.journal.open_moves().items()} == {2: set(range(4, 8))}
    lines = (tmp_path / MIGRATIONS_FILE).read_text().splitlines()
    assert [json.loads(line)["event"] for line in lines] == [
        "begin", "end", "begin", "left-open", "begin", "end",
    ]  # fmt: skip


def test_a_move_cancelled_and_rolled_back_is_closed(tmp_path):
    repairs = JournalRepairs(tmp_path)
    with pytest.raises(KeyboardInterrupt), repairs.moving(A, B, [1]) as move:
        move.closed("rolled-back")
        raise KeyboardInterrupt  # re-raised after the roll-back, as the cancel is
    assert repairs.pending_slots() == set() and repairs.journal.open_moves() == {}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:7000", [("127.0.0.1", 7000)]),
        ("a:1, b:65535", [("a", 1), ("b", 65535)]),
        ("[::1]:7000", [("::1", 7000)]),
    ],
)
def test_seed_nodes_are_host_port_pairs(text, expected):
    assert parse_seed_nodes(text) == expected


@pytest.mark.parametrize("text", ["localhost", ":7000", "h:0", "h:65536", "h:x", "h:1,"])
def test_a_malformed_seed_node_is_refused_naming_the_option(text):
    with pytest.raises(InputError, match="--seed-nodes: expected host:port"):
        parse_seed_nodes(text)

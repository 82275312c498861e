"""The Supercloud scheduler (SoCC 2016, §3): the evaluation functions against hand
computations, the search's maximum / threshold / fewest-migrations rules against a brute
force over labelled placements, the loop's pacing, and the JSON contract (exit 2)."""

from __future__ import annotations

import copy
import itertools
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from geoslo.cli import app
from geoslo.control.supercloud import (
    FrontEnd,
    Node,
    Placement,
    PlacementObservation,
    PlacementState,
    candidate_count,
    decide,
    score_placement,
)
from geoslo.control.supercloud.example import example_state
from geoslo.control.supercloud.loop import PlacementLoop
from geoslo.control.supercloud.validation import parse_state, plan_to_dict, state_to_dict
from geoslo.errors import InputError

SITES = ("a", "b", "c")
RTT = np.array([[0.0, 10.0, 40.0], [10.0, 0.0, 30.0], [40.0, 30.0, 0.0]])


def _state(front_ends, nodes, leader="n1", evaluation="zookeeper", threshold=0.0, **weights):
    placement = Placement(tuple(Node(f"n{k + 1}", s) for k, s in enumerate(nodes)), leader)
    return PlacementState(
        SITES, RTT, tuple(front_ends), placement, evaluation, threshold=threshold, **weights
    )


def test_single_vm_score_is_minus_the_request_weighted_rtt() -> None:
    state = _state([FrontEnd("a", 3, 1), FrontEnd("c", 2)], ["b"], evaluation="single_vm")
    assert score_placement(state, state.current) == pytest.approx(-(4 * 10 + 2 * 30))


def test_zookeeper_score_follows_the_r_and_w_formulas() -> None:
    # Leader n1 at a, followers at b and c; one front-end at c: 5 reads, 2 writes.
    state = _state([FrontEnd("c", 5, 2)], ["a", "b", "c"], read_weight=2.0, write_weight=3.0)
    read = (40 + 30 + 0) / 3  # R_i = W_i^(1): mean RTT to the three nodes
    forward = (0 + 10 + 40) / 3  # W_i^(2): mean RTT from a node to the leader
    broadcast = 2 * np.median([10, 40])  # W_i^(3)
    expected = -(2.0 * read * 5 + 3.0 * (read + forward + broadcast) * 2)
    assert score_placement(state, state.current) == pytest.approx(expected)


def _brute_force(state: PlacementState):
    """Every labelled placement: the best score and the fewest moves among the best."""
    names = [n.name for n in state.current.nodes]
    best, fewest = -np.inf, None
    for sites in itertools.product(state.sites, repeat=len(names)):
        placement = Placement(
            tuple(Node(n, s) for n, s in zip(names, sites, strict=True)), state.current.leader
        )
        score = score_placement(state, placement)
        moves = sum(
            a.site != b.site for a, b in zip(state.current.nodes, placement.nodes, strict=True)
        )
        if score > best + 1e-9:
            best, fewest = score, moves
        elif abs(score - best) <= 1e-9:
            fewest = min(fewest, moves)
    return best, fewest


@pytest.mark.parametrize("seed", range(6))
def test_search_finds_the_best_score_with_the_fewest_migrations(seed) -> None:
    rng = np.random.default_rng(seed)
    front_ends = [
        FrontEnd(s, float(rng.integers(0, 50)), float(rng.integers(0, 10))) for s in SITES
    ]
    nodes = list(rng.choice(SITES, 4))
    state = _state(front_ends, nodes, leader=f"n{rng.integers(1, 5)}")
    plan = decide(state)
    best, fewest = _brute_force(state)
    assert plan.score == pytest.approx(best)
    assert len(plan.migrations) == fewest
    assert score_placement(state, plan.placement) == pytest.approx(plan.score)
    moved = {m.node for m in plan.migrations}
    for old, new in zip(state.current.nodes, plan.placement.nodes, strict=True):
        assert (old.site != new.site) == (old.name in moved)


def test_threshold_keeps_the_current_placement_unless_beaten_by_t() -> None:
    state = _state([FrontEnd("a", 10, 1), FrontEnd("c", 12, 1)], ["a", "a", "a"])
    free = decide(state)
    gain = free.score - free.current_score
    assert gain > 0 and free.migrations
    assert decide(_state(state.front_ends, ["a"] * 3, threshold=gain * 1.01)).migrations == ()
    assert decide(_state(state.front_ends, ["a"] * 3, threshold=gain * 0.99)).migrations


def test_the_whole_ensemble_follows_the_busier_region() -> None:
    for busy, other in (("a", "c"), ("c", "a")):
        state = _state([FrontEnd(busy, 900, 100), FrontEnd(other, 90, 10)], ["a", "a", "c"])
        plan = decide(state)
        assert {n.site for n in plan.placement.nodes} == {busy}


def test_candidates_are_leader_sites_times_follower_multisets() -> None:
    assert candidate_count(10, 5) == 10 * 715
    assert decide(example_state(10, 5)).candidates_evaluated == 7150


def _seen(now_s: float, state: PlacementState, current=None, busy=False):
    return PlacementObservation(now_s, state.front_ends, current or state.current, busy)


def test_the_loop_decides_once_a_minute_and_never_during_a_migration() -> None:
    state = _state([FrontEnd("c", 900, 100)], ["a", "a", "a"])
    loop = PlacementLoop(state, threshold_fraction=0.0, interval_s=60)
    assert loop.step(_seen(0, state, busy=True)) is None
    plan = loop.step(_seen(1, state))
    assert plan is not None and len(plan.migrations) == 3
    assert loop.step(_seen(30, state)) is None
    assert loop.step(_seen(61, state, plan.placement)) is None  # already best
    assert loop.last_plan is not None and loop.last_plan.migrations == ()


@pytest.mark.parametrize(
    ("threshold_fraction", "moves"),
    [
        (0.0, True),  # any gain moves the ensemble
        (0.85, True),  # all in c: 40,000 -> 4,000 ms x requests, a 90% cut
        (0.95, False),  # the same plan, but a 95% cut is asked for
    ],
)
def test_the_loops_threshold_is_a_fraction_of_the_current_score(threshold_fraction, moves) -> None:
    state = _state([FrontEnd("a", 100), FrontEnd("c", 900, 100)], ["a", "a", "a"])
    loop = PlacementLoop(state, threshold_fraction=threshold_fraction)
    assert (loop.step(_seen(0, state)) is not None) == moves
    assert loop.last_plan.outcome.status == "optimal"


@pytest.mark.parametrize(
    ("nodes", "threshold", "objective_is"),
    [
        (["a", "a", "a"], 0.0, "score"),  # moves: the objective is the new placement's f
        (["a", "a", "a"], 1e12, "current_score"),  # kept by T: the current placement's f
        (["c", "c", "c"], 0.0, "current_score"),  # already best
    ],
)
def test_every_plan_has_an_optimal_outcome_with_its_score(nodes, threshold, objective_is):
    plan = decide(_state([FrontEnd("c", 900, 100)], nodes, threshold=threshold))
    assert plan.outcome.status == "optimal" and plan.outcome.applicable
    assert plan.outcome.solver_status == "exhaustive"
    assert plan.outcome.objective == getattr(plan, objective_is) == plan.score
    assert plan.outcome.decide_ms >= 0


def good() -> dict:
    return state_to_dict(example_state())


def _ensemble(data: dict, nodes: int, more_sites: int) -> None:
    """``nodes`` nodes in Tokyo, and ``more_sites`` more sites 1 ms from everything."""
    data["placement"] = {
        "nodes": [{"name": f"n{k}", "site": "Tokyo"} for k in range(nodes)],
        "leader": "n0",
    }
    data["sites"] += [f"extra{k}" for k in range(more_sites)]
    n = len(data["sites"])
    data["rtt_ms"] = [[1.0] * n for _ in range(n)]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda d: d.update(sites=["x", "x"]), "sites"),
        (lambda d: d["rtt_ms"][0].append(3), "rtt_ms[0]"),
        (lambda d: d["rtt_ms"].pop(), "rtt_ms"),
        (lambda d: d["rtt_ms"][1].__setitem__(0, -1), "rtt_ms[1][0]"),
        (lambda d: d["workload"][0].update(site="mars"), "workload[0].site"),
        (lambda d: d["workload"][1].update(reads=-2), "workload[1].reads"),
        (lambda d: d["placement"].update(leader="zk9"), "placement.leader"),
        (lambda d: d["placement"]["nodes"][1].update(name="zk1"), "placement.nodes"),
        (lambda d: d["evaluation"].update(function="cassandra"), "evaluation.function"),
        (lambda d: d["evaluation"].update(alpha=1), "evaluation.alpha"),
        (lambda d: d.update(threshold=-1), "threshold"),
        (lambda d: d.pop("placement"), "placement"),
        (lambda d: d["evaluation"].update(function="single_vm"), "placement.nodes"),
        # Ranges (issue 15): huge numbers are refused by name instead of crashing the search.
        (lambda d: d["rtt_ms"][0].__setitem__(1, 1e308), "rtt_ms[0][1]"),
        (lambda d: d["rtt_ms"][1].__setitem__(0, 1000.5), "rtt_ms[1][0]"),
        (lambda d: d["workload"][0].update(reads=1e308), "workload[0].reads"),
        (lambda d: d["workload"][1].update(writes=10**400), "workload[1].writes"),
        (lambda d: d["evaluation"].update(read_weight=1e308), "evaluation.read_weight"),
        (lambda d: d["evaluation"].update(write_weight=-1), "evaluation.write_weight"),
        (lambda d: d.update(threshold=1e308), "threshold"),
        (lambda d: d.update(workload=d["workload"] * 51), "workload"),
        (lambda d: d.update(sites=[f"s{k}" for k in range(101)]), "sites"),
        (lambda d: _ensemble(d, nodes=10, more_sites=0), "placement.nodes"),
        (lambda d: _ensemble(d, nodes=9, more_sites=20), "placement.nodes"),  # 8.8e8 candidates
    ],
)
def test_bad_input_names_its_field(change, field) -> None:
    data = copy.deepcopy(good())
    change(data)
    with pytest.raises(InputError) as raised:
        parse_state(data)
    assert raised.value.field == field


def test_the_command_line_decides_and_rejects_bad_input_with_exit_2(tmp_path) -> None:
    runner = CliRunner()
    state = tmp_path / "state.json"
    assert runner.invoke(app, ["supercloud", "example", "-o", str(state)]).exit_code == 0
    done = runner.invoke(app, ["supercloud", "decide", "-i", str(state)])
    assert done.exit_code == 0
    plan = json.loads(done.stdout)
    expected = plan_to_dict(decide(parse_state(json.loads(state.read_text()))))
    assert plan.pop("decide_ms") >= 0 and expected.pop("decide_ms") >= 0
    assert plan == expected
    assert (plan["status"], plan["solver_status"]) == ("optimal", "exhaustive")
    assert plan["objective"] == plan["score"]
    assert {n["site"] for n in plan["placement"]["nodes"]} == {"Tokyo"}
    data = json.loads(state.read_text())
    data["threshold"] = "high"
    state.write_text(json.dumps(data))
    bad = runner.invoke(app, ["supercloud", "decide", "-i", str(state)])
    assert bad.exit_code == 2
    assert "threshold" in bad.output and len(bad.output.strip().splitlines()) == 1
    assert runner.invoke(app, ["supercloud", "example", "--sites", "40"]).exit_code == 2


# --- Single VM (§3.1) against a brute force of its own (issue 15, section 2) ---------------


def _random_single_vm_state(seed: int) -> PlacementState:
    """N sites with a random symmetric RTT matrix, front-ends at some of them, one VM."""
    rng = np.random.default_rng(seed)
    n_sites = int(rng.integers(1, 7))
    sites = tuple(f"s{k}" for k in range(n_sites))
    rtt_ms = rng.uniform(1.0, 200.0, (n_sites, n_sites))
    rtt_ms = (rtt_ms + rtt_ms.T) / 2
    np.fill_diagonal(rtt_ms, rng.uniform(0.0, 2.0, n_sites))
    front_ends = tuple(
        FrontEnd(str(site), float(rng.integers(0, 500)), float(rng.integers(0, 100)))
        for site in rng.choice(sites, int(rng.integers(1, 2 * n_sites + 1)))
    )
    current = Placement((Node("vm", str(rng.choice(sites))),), "vm")
    threshold = float(rng.choice([0.0, rng.uniform(0.0, 5_000.0)]))
    return PlacementState(sites, rtt_ms, front_ends, current, "single_vm", threshold=threshold)


def _single_vm_brute_force(state: PlacementState) -> str:
    """§3.1 by hand: the site minimising sum_i s_i L(d_i, p), if it beats the current by T."""

    def cost_ms(site: str) -> float:
        column = state.sites.index(site)
        return sum(
            (f.reads + f.writes) * state.rtt_ms[state.sites.index(f.site), column]
            for f in state.front_ends
        )

    here = state.current.nodes[0].site
    best = min(state.sites, key=lambda s: (cost_ms(s), s != here))  # ties: stay put
    return best if cost_ms(best) <= cost_ms(here) - state.threshold + 1e-9 else here


@pytest.mark.parametrize("seed", range(40))
def test_single_vm_decide_matches_a_brute_force_over_sites(seed) -> None:
    state = _random_single_vm_state(seed)
    plan = decide(state)
    expected_site = _single_vm_brute_force(state)
    assert plan.placement.nodes[0].site == expected_site
    assert plan.candidates_evaluated == len(state.sites)
    assert len(plan.migrations) == (plan.placement.nodes[0].site != state.current.nodes[0].site)


def test_single_vm_goes_to_the_site_nearest_its_requests() -> None:
    state = _state([FrontEnd("c", 40, 10), FrontEnd("a", 5)], ["a"], evaluation="single_vm")
    plan = decide(state)
    assert plan.placement.nodes[0].site == "c"
    assert plan.score == pytest.approx(-(5 * 40))
    assert plan.current_score == pytest.approx(-(50 * 40))
    assert [(m.node, m.from_site, m.to_site) for m in plan.migrations] == [("n1", "a", "c")]


def test_single_vm_through_the_command_line(tmp_path) -> None:
    data = good()
    data["evaluation"] = {"function": "single_vm"}
    data["placement"] = {"nodes": [{"name": "vm", "site": "Washington DC"}]}
    state = tmp_path / "single.json"
    state.write_text(json.dumps(data))
    done = CliRunner().invoke(app, ["supercloud", "decide", "-i", str(state)])
    assert done.exit_code == 0, done.output
    plan = json.loads(done.stdout)
    assert plan["placement"]["nodes"] == [{"name": "vm", "site": "Tokyo"}]  # the busier region
    assert plan["migrations"] == [{"node": "vm", "from": "Washington DC", "to": "Tokyo"}]
    assert plan["candidates_evaluated"] == len(data["sites"])


def test_a_one_node_zookeeper_ensemble_is_searched_too() -> None:
    state = _state([FrontEnd("b", 7, 3), FrontEnd("c", 1)], ["c"])
    plan = decide(state)
    best, fewest = _brute_force(state)
    assert plan.score == pytest.approx(best) and len(plan.migrations) == fewest == 1


def test_the_loop_decides_on_the_rtts_it_measured_not_the_templates() -> None:
    """All load at b, nodes at a: with the template's L the ensemble moves to b; when the
    measured RTTs say b is now far from everything and a close to it, it stays."""
    state = _state([FrontEnd("b", 900, 100)], ["a", "a", "a"])
    moved = PlacementLoop(state, threshold_fraction=0.1).step(_seen(0, state))
    assert moved is not None and {n.site for n in moved.placement.nodes} == {"b"}
    measured = RTT.copy()
    measured[0, 1] = measured[1, 0] = 1.0  # a and b
    measured[np.diag_indices(len(SITES))] = 1.0
    seen = PlacementObservation(0, state.front_ends, state.current, False, measured)
    assert PlacementLoop(state, threshold_fraction=0.1).step(seen) is None


def test_the_loop_refuses_measured_rtts_of_the_wrong_shape() -> None:
    state = _state([FrontEnd("b", 900, 100)], ["a", "a", "a"])
    seen = PlacementObservation(0, state.front_ends, state.current, False, np.zeros((2, 2)))
    with pytest.raises(InputError, match="rtt_ms"):
        PlacementLoop(state).step(seen)

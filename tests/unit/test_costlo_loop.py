"""CosTLO's loop (§5.2: re-measure, re-select per prefix each epoch) and its example, on
the control package's illustrative measurements (no simulator, no processes)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from geoslo.control.costlo import (
    CostloLoop,
    EpochObservation,
    PrefixObservation,
    RegionObservation,
    SearchLimits,
    Slo,
    decide,
    example_dict,
    example_problem,
    parse_problem,
    prefix_problem,
)
from geoslo.control.costlo.types import worst_status

SAMPLES = 1_000  # enough for the inference, small enough to keep the tests fast


def observation(prefix_sites: tuple[int, ...] = (0, 3), seed: int = 0) -> EpochObservation:
    """One epoch: each client site's regions as the example measures them, merged by
    region name (a region measured for two sites has pings to both)."""
    regions: dict[str, RegionObservation] = {}
    prefixes = []
    for site in prefix_sites:
        problem = example_problem(seed, site, SAMPLES)
        name = f"site-{site}"
        prefixes.append(PrefixObservation(name, problem.serving.name, problem.workload))
        for r in (problem.serving, *problem.candidates):
            known = regions.get(r.name)
            pings = {**(known.ping_ms if known else {}), name: r.ping_ms}
            regions[r.name] = RegionObservation(r.name, r.prices, r.storage, pings, r.relay_rps)
    return EpochObservation(tuple(regions.values()), tuple(prefixes))


def without_pings(obs: EpochObservation, prefix: str) -> EpochObservation:
    """``obs`` with the serving region's pings to ``prefix`` lost."""
    serving = next(p.serving_region for p in obs.prefixes if p.name == prefix)
    regions = tuple(
        replace(r, ping_ms={k: v for k, v in r.ping_ms.items() if k != prefix})
        if r.name == serving
        else r
        for r in obs.regions
    )
    return EpochObservation(regions, obs.prefixes)


@pytest.fixture(scope="module")
def epoch() -> EpochObservation:
    return observation()


@pytest.mark.parametrize(
    ("statuses", "worst"),
    [
        (["optimal"], "optimal"),
        (["feasible", "optimal"], "feasible"),
        (["feasible", "time_limit", "feasible"], "time_limit"),
        (["infeasible", "time_limit"], "infeasible"),
        (["feasible", "failed", "infeasible"], "failed"),
    ],
)
def test_worst_status(statuses, worst):
    assert worst_status(statuses) == worst


def test_a_step_selects_every_prefix_as_decide_does(epoch):
    loop = CostloLoop(Slo(get_ms=40.0))
    plan = loop.step(epoch)
    assert plan.epoch == 1 and set(plan.selections) == {"site-0", "site-3"}
    for prefix in epoch.prefixes:
        alone = decide(prefix_problem(epoch, prefix, Slo(get_ms=40.0), SearchLimits()))
        assert plan.configurations[prefix.name] == alone.configuration
        assert plan.statuses[prefix.name] == alone.outcome.status == "feasible"
    total = sum(s.cost.total_usd for s in plan.selections.values())
    assert plan.outcome.status == "feasible"
    assert plan.outcome.objective == pytest.approx(total)
    assert plan.outcome.solver_status == "feasible=2"
    assert plan.outcome.decide_ms > 0 and loop.plan is plan


def test_the_second_region_is_the_closest_other_one(epoch):
    plan = CostloLoop(Slo(get_ms=30.0)).step(epoch)
    for prefix in epoch.prefixes:
        others = [
            r for r in epoch.regions if r.name != prefix.serving_region and prefix.name in r.ping_ms
        ]
        closest = min(others, key=lambda r: float(np.median(r.ping_ms[prefix.name])))
        assert plan.selections[prefix.name].second_region == closest.name


def test_a_failed_prefix_holds_its_configuration_and_the_others_move_on(epoch):
    loop = CostloLoop(Slo(get_ms=40.0))
    first = loop.step(epoch)
    loop.slo = Slo(get_ms=1_000.0)  # the next epoch needs no redundancy
    second = loop.step(without_pings(epoch, "site-0"))
    assert second.epoch == 2 and second.held == ("site-0",)
    assert second.statuses == {"site-0": "failed", "site-3": "feasible"}
    assert second.selections["site-0"] is first.selections["site-0"]
    assert "has no pings" in second.errors["site-0"]
    assert second.configurations["site-3"] != first.configurations["site-3"]  # re-selected
    assert second.outcome.status == "feasible"  # usable: site-0 holds, site-3 moves on
    assert second.outcome.solver_status == "failed=1,feasible=1"
    assert second.outcome.objective == pytest.approx(
        sum(s.cost.total_usd for s in second.selections.values())
    )


def test_a_plan_is_failed_only_when_every_prefix_failed(epoch):
    loop = CostloLoop()
    first = loop.step(epoch)
    plan = loop.step(without_pings(without_pings(epoch, "site-0"), "site-3"))
    assert plan.outcome.status == "failed" and not plan.outcome.applicable
    assert set(plan.held) == {"site-0", "site-3"}
    assert plan.configurations == first.configurations


def test_a_prefix_that_fails_first_has_nothing_to_hold(epoch):
    plan = CostloLoop().step(without_pings(epoch, "site-3"))
    assert set(plan.selections) == {"site-0"} and plan.held == ()
    assert plan.statuses["site-3"] == "failed"


def test_an_impossible_slo_is_infeasible_and_returns_the_best_found(epoch):
    only_serving = SearchLimits(allow_second_region=False, allow_copies=False, allow_relay=False)
    plan = CostloLoop(Slo(get_ms=0.0), only_serving).step(epoch)
    assert plan.outcome.status == "infeasible"
    assert set(plan.selections) == {"site-0", "site-3"}


def test_no_prefix_is_nothing_to_do(epoch):
    assert CostloLoop().step(EpochObservation(epoch.regions, ())) is None


def test_the_example_is_seeded_and_a_valid_problem():
    a, b = example_dict(seed=4, prefix=7, samples=50), example_dict(seed=4, prefix=7, samples=50)
    assert a == b and example_dict(seed=5, prefix=7, samples=50) != a
    problem = parse_problem(a)
    assert problem.serving.name.startswith("s3:") and len(problem.candidates) == 3
    second = problem.second()
    assert second.name == a["regions"][1]["name"]  # the closest other region comes first

"""The simulated ensemble as the placement loop's environment (Supercloud, SoCC 2016 §5.1):
the follow-the-sun load, one interval per observe(), migrations started by apply(), and
the plans §5.2.2's reconfiguration procedures can carry out on the live ensemble."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from geoslo.control.supercloud import Migration, Placement, PlacementObservation
from geoslo.control.supercloud.example import example_state
from geoslo.control.supercloud.loop import PlacementLoop
from geoslo.errors import InputError
from geoslo.live.supercloud.zookeeper import PlanRefusedError, ReconfigStep, plan_steps
from geoslo.sim.supercloud import FollowTheSun, SupercloudSimEnvironment, follow_the_sun_rps

SITES = ("Washington DC", "Tokyo")
HOUR_S = 3600.0


def _env(interval_s: float = 600.0, start=("Washington DC",) * 3, **workload):
    return SupercloudSimEnvironment(SITES, start, interval_s, FollowTheSun(**workload))


@pytest.mark.parametrize(
    ("sites", "shift_h"),
    [(2, 12.0), (3, 8.0), (4, 6.0)],  # §5.1: two regions 12 h apart; more share the day
)
def test_each_sites_load_is_the_first_sites_shifted_by_a_day_over_sites(sites, shift_h):
    load = FollowTheSun(peak_rps=500.0)
    for start_h in (0.0, 5.0, 17.0):
        now = follow_the_sun_rps(load, start_h * HOUR_S, 600.0, sites)
        later = follow_the_sun_rps(load, (start_h + shift_h) * HOUR_S, 600.0, sites)
        assert now[1] == pytest.approx(later[0])
        assert 0 < now.min() and now.max() <= 500.0


def test_observe_reports_one_interval_of_each_sites_reads_and_writes() -> None:
    env = _env(interval_s=600.0, read_fraction=0.8)
    seen = asyncio.run(env.observe())
    offered = follow_the_sun_rps(env.workload, 0.0, 600.0, 2)
    assert seen.now_s == env.now_s == 600.0 and not seen.busy
    for front_end, rps in zip(seen.front_ends, offered, strict=True):
        assert front_end.reads + front_end.writes == pytest.approx(rps * 600.0)
        assert front_end.reads == pytest.approx(4 * front_end.writes)
    assert asyncio.run(env.observe()).now_s == 1200.0
    assert env.mean_latency_ms() > 0


def test_apply_starts_the_migrations_and_the_ensemble_is_busy_until_they_end() -> None:
    env = _env(interval_s=60.0)
    asyncio.run(env.observe())
    state = example_state()
    loop = PlacementLoop(state, threshold_fraction=0.0)
    start = env.start_placement
    seen = PlacementObservation(60.0, state.front_ends, start, False)  # Tokyo the busier
    plan = loop.step(seen)
    assert plan is not None and {n.site for n in plan.placement.nodes} == {"Tokyo"}
    asyncio.run(env.apply(plan))
    cost_s = env.ensemble.settings.migration.cost().total_s
    assert env.ensemble.placement == plan.placement
    busy_intervals = 0
    while (seen := asyncio.run(env.observe())).busy:
        busy_intervals += 1
        with pytest.raises(InputError, match="still running"):
            asyncio.run(env.apply(plan))
    assert busy_intervals == int(np.ceil(cost_s / 60.0)) - 1
    assert env.migrations == 3


class _Moves:
    def __init__(self, *migrations: Migration) -> None:
        self.migrations = migrations


def test_a_long_run_keeps_bounded_state() -> None:
    env = _env(interval_s=60.0)

    async def run() -> None:
        for _ in range(300):
            seen = await env.observe()
            if not seen.busy:  # zk1 back and forth, as soon as the last move has ended
                here = seen.current.site_of("zk1")
                there = SITES[1] if here == SITES[0] else SITES[0]
                await env.apply(_Moves(Migration("zk1", here, there)))

    asyncio.run(run())
    assert env.migrations > 5 and len(env.ensemble._moves) <= 1
    assert len(env.ensemble.migration_log) <= 100


# --- §5.2.2's procedures as a plan's reconfigurations (live ensemble) ------------------

A, B = "virginia", "tokyo"
START = {1: A, 2: B, 3: A}  # §5.2.2: leader 3 and follower 1 in Virginia, follower 2 in Tokyo


def _fresh():
    ids = {A: iter((5, 7, 9)), B: iter((4, 6, 8))}
    return lambda site: next(ids[site])


@pytest.mark.parametrize(
    ("members", "leader", "moves", "steps"),
    [
        (START, 3, [], ()),
        (  # §5.2.2's 2-step: the leader alone moves
            START, 3, [("zk3", A, B)],
            (ReconfigStep("add a server in tokyo", (4,)),
             ReconfigStep("remove the original leader", (), (3,))),
        ),
        (  # the 3-step's first two steps: every Virginia node moves
            START, 3, [("zk1", A, B), ("zk3", A, B)],
            (ReconfigStep("add 2 servers in tokyo", (4, 6)),
             ReconfigStep("remove every server in virginia", (), (1, 3))),
        ),
        (  # the 3-step's last step: one follower moves
            {2: B, 4: B, 6: B}, 6, [("zk4", B, A)],
            (ReconfigStep("add a server in virginia, remove a follower in tokyo", (5,), (4,)),),
        ),
        (  # a whole Tokyo ensemble back to Virginia
            {2: B, 4: B, 6: B}, 6, [("zk2", B, A), ("zk4", B, A), ("zk6", B, A)],
            (ReconfigStep("add 3 servers in virginia", (5, 7, 9)),
             ReconfigStep("remove every server in tokyo", (), (2, 4, 6))),
        ),
    ],
)  # fmt: skip
def test_the_plans_of_the_2_step_and_3_step_procedures(members, leader, moves, steps):
    migrations = tuple(Migration(*m) for m in moves)
    assert plan_steps(members, leader, migrations, _fresh()) == steps


@pytest.mark.parametrize(
    ("members", "leader", "moves", "why"),
    [
        (START, 3, [("zk1", A, B), ("zk2", B, A)], "2 routes"),
        ({1: A, 3: A, 5: A, 2: B}, 5, [("zk3", A, B), ("zk5", A, B)], "2 of the 3 nodes"),
        (START, 3, [("zk9", A, B)], "not a member"),
        (START, 3, [("zk2", A, B)], "zk2 is in tokyo"),
        (START, 3, [("vm", A, B)], "not a member"),
    ],
)
def test_other_plans_are_refused_naming_why_and_issue_22(members, leader, moves, why):
    migrations = tuple(Migration(*m) for m in moves)
    with pytest.raises(PlanRefusedError, match=why) as refused:
        plan_steps(members, leader, migrations, _fresh())
    assert "issue 22" in str(refused.value)


def test_the_start_placement_is_the_first_observed() -> None:
    env = _env(start=("Tokyo", "Washington DC"))
    assert env.start_placement == Placement(env.ensemble.placement.nodes, "zk1")
    assert asyncio.run(env.observe()).current == env.start_placement
    with pytest.raises(InputError, match="start_sites"):
        _env(start=("Osaka",))

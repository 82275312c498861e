"""Invariants of a plan's reconfigurations (Supercloud, SoCC 2016 §3's plans carried out by
§5.2.2's dynamic reconfiguration): on random ensembles and well-formed plans, every step
keeps a quorum with as many failures as the ensemble tolerated, the ensemble ends on the
planned sites with the leader in the planned site, and the checker does catch bad steps."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from geoslo.control.supercloud import Migration
from geoslo.live.supercloud.zookeeper._plan_steps import ReconfigStep, node_name, plan_steps
from geoslo.live.supercloud.zookeeper._reconfig_model import UnsafeStepsError, check_steps

SITES = ("virginia", "tokyo", "frankfurt", "sydney")


class _FreshIds:
    """The lowest id above ``above`` not used in this plan (a member's or one given
    before); remembers each one's site."""

    def __init__(self, members: dict[int, str]) -> None:
        self.sites = dict(members)

    def __call__(self, site: str, above: int) -> int:
        new = next(i for i in range(above + 1, above + 2 + len(self.sites)) if i not in self.sites)
        self.sites[new] = site
        return new


@st.composite
def plans(draw):
    """(members, leader id, migrations, leader site or None): 3-7 servers over 2-4 sites,
    any subset of them moving, each to any other site, in any order."""
    sites = SITES[: draw(st.integers(2, 4))]
    ids = draw(st.lists(st.integers(1, 40), min_size=3, max_size=7, unique=True))
    members = {i: draw(st.sampled_from(sites)) for i in ids}
    leader = draw(st.sampled_from(ids))
    moving = draw(st.lists(st.sampled_from(ids), unique=True))
    migrations = tuple(
        Migration(node_name(i), members[i], draw(st.sampled_from(_other(sites, members[i]))))
        for i in moving
    )
    final_sites = _planned_sites(members, migrations)
    leader_site = draw(st.none() | st.sampled_from(sorted(set(final_sites))))
    return members, leader, migrations, leader_site


def _other(sites: tuple[str, ...], site: str) -> list[str]:
    return [s for s in sites if s != site]


def _planned_sites(members: dict[int, str], migrations: tuple[Migration, ...]) -> list[str]:
    moved = {m.node: m.to_site for m in migrations}
    return sorted(moved.get(node_name(i), site) for i, site in members.items())


def _expected_leader_site(members, leader, migrations, leader_site) -> str:
    if leader_site is not None:
        return leader_site
    moved = {m.node: m.to_site for m in migrations}
    return moved.get(node_name(leader), members[leader])


@settings(max_examples=400, deadline=None)
@given(plan=plans())
def test_every_step_keeps_a_quorum_and_the_plan_ends_as_planned(plan) -> None:
    members, leader, migrations, leader_site = plan
    fresh = _FreshIds(members)
    steps = plan_steps(members, leader, migrations, fresh, leader_site)
    final, final_leader = check_steps(members, leader, steps, fresh.sites.__getitem__)
    assert sorted(final.values()) == _planned_sites(members, migrations)
    target = _expected_leader_site(members, leader, migrations, leader_site)
    assert final[final_leader] == target
    removed = {i for step in steps for i in step.leaving}
    migrated = {i for i in members if node_name(i) in {m.node for m in migrations}}
    leader_stays = leader not in migrated and members[leader] == target
    if leader_stays:  # never removed, so it still leads
        assert leader not in removed and final_leader == leader
    extra = removed - migrated - {leader}  # a follower of the target replaced in place
    assert len(extra) <= (0 if leader_stays else 1)
    assert all(members[i] == target for i in extra)
    assert migrated <= removed and len(steps) <= 3
    assert all(step.name and (step.joining or step.leaving) for step in steps)


@settings(max_examples=100, deadline=None)
@given(plan=plans())
def test_the_properties_catch_a_plan_missing_its_first_step(plan) -> None:
    """Without the step that adds the servers (first when the leader moves), the replay
    loses the quorum or ends on other sites than planned: the test above would fail."""
    members, leader, migrations, leader_site = plan
    fresh = _FreshIds(members)
    steps = plan_steps(members, leader, migrations, fresh, leader_site)
    if len(steps) < 2:
        return  # the leader stays: one reconfig, nothing to drop
    try:
        final, _ = check_steps(members, leader, steps[1:], fresh.sites.__getitem__)
    except UnsafeStepsError:
        return
    assert sorted(final.values()) != _planned_sites(members, migrations)


# --- the checker fails on bad sequences ---------------------------------------------------

V, T = "virginia", "tokyo"
START = {1: V, 2: T, 3: V}  # §5.2.2: leader 3 and follower 1 in Virginia, follower 2 in Tokyo
SITE_OF = {**START, 4: T, 5: V, 6: T, 7: V}.__getitem__


@pytest.mark.parametrize(
    ("steps", "why"),
    [
        ([ReconfigStep("remove two of three", (), (1, 3))], "from 3 to 1 voting servers"),
        ([ReconfigStep("remove before adding", (), (3,))], "from 3 to 2 voting servers"),
        (
            [ReconfigStep("add one", (4,)), ReconfigStep("remove three of four", (), (1, 2, 3))],
            "step 2 .* from 4 to 1",
        ),
        ([ReconfigStep("add a member", (2,))], r"adds \[2\], already members"),
        ([ReconfigStep("remove a stranger", (), (9,))], r"removes \[9\], not members"),
        ([ReconfigStep("nothing")], "changes nothing"),
    ],
)
def test_the_checker_refuses_steps_that_could_lose_the_quorum(steps, why) -> None:
    with pytest.raises(UnsafeStepsError, match=why):
        check_steps(START, 3, steps, SITE_OF)


def test_removing_the_leader_without_adding_in_the_target_site_leaves_it_elsewhere() -> None:
    """The 2-step with its new server in the wrong site: the quorum holds, but the highest
    id (the new leader) is in Virginia, so the property test's leader check would fail."""
    steps = [ReconfigStep("add a server in virginia", (5,)), ReconfigStep("remove", (), (3,))]
    members, leader = check_steps(START, 3, steps, SITE_OF)
    assert members[leader] == V
    steps = [ReconfigStep("add a server in tokyo", (4,)), ReconfigStep("remove", (), (3,))]
    members, leader = check_steps(START, 3, steps, SITE_OF)
    assert members[leader] == T and Counter(members.values()) == Counter({T: 2, V: 1})


def test_more_failures_than_tolerated_fail_even_the_paper_steps() -> None:
    steps = [ReconfigStep("add a server in tokyo", (4,)), ReconfigStep("remove", (), (3,))]
    check_steps(START, 3, steps, SITE_OF)
    with pytest.raises(UnsafeStepsError, match="with 2 down"):
        check_steps(START, 3, steps, SITE_OF, failures=2)

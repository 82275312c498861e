"""The placement loop on a live ZooKeeper ensemble over three sites (issue 22): RTTs measured
by probes across the emulated WAN, and a plan the scheduler made from them carried out by
reconfiguration until the ensemble itself reports the planned placement. Real ZooKeeper,
real namespaces, the project's delay proxy; skipped where the testbed cannot run."""

from __future__ import annotations

import asyncio
from collections import Counter

import numpy as np
import pytest

from geoslo.control.supercloud import PlacementState
from geoslo.control.supercloud.loop import PlacementLoop
from geoslo.live.supercloud.zookeeper import ZkLiveSettings
from geoslo.live.supercloud.zookeeper._environment import SupercloudTestbedEnvironment
from geoslo.live.supercloud.zookeeper._run import cannot_run_reason

pytestmark = pytest.mark.integration

SITES = ("east", "west", "south")
RTT_MS = ((0.0, 30.0, 50.0), (30.0, 0.0, 70.0), (50.0, 70.0, 0.0))


@pytest.fixture
def testbed_ok() -> None:
    reason = cannot_run_reason()
    if reason:
        pytest.skip(f"live ZooKeeper testbed: {reason}")


async def settled(env: SupercloudTestbedEnvironment, timeout_s: float):
    """The first observation after the reconfiguration in progress has ended."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        await asyncio.sleep(1.0)
        seen = await env.observe()
        if not seen.busy:
            return seen
    raise AssertionError(f"the reconfiguration did not end within {timeout_s:.0f} s")


@pytest.mark.timeout(240)
def test_three_sites_rtts_are_measured_and_a_plan_moves_the_ensemble(testbed_ok, tmp_path):
    settings = ZkLiveSettings(sites=SITES, site_rtt_ms=RTT_MS)
    threads = {"east": 1, "west": 1, "south": 6}  # south asks for the most
    env = SupercloudTestbedEnvironment(
        settings, threads, 3.0, tmp_path / "zk", start_sites=("east", "east", "west")
    )

    async def scenario():
        await env.start()
        try:
            first = await env.observe()
            await asyncio.sleep(4.0)
            seen = await env.observe()
            template = PlacementState(env.sites, env.rtt_ms, (), env.start_placement)
            plan = PlacementLoop(template, threshold_fraction=0.0, interval_s=3.0).step(seen)
            assert plan is not None, "the scheduler kept the start placement"
            await env.apply(plan)
            return first, plan, await settled(env, 150.0)
        finally:
            await env.close()

    first, plan, final = asyncio.run(scenario())
    configured = np.asarray(RTT_MS)
    off = ~np.eye(3, dtype=bool)
    # the least of 3 echoes through the delay proxy: the RTT set, plus the proxy's timers,
    # which fire late on a busy machine (36.0 ms on the 30 ms link beside other jobs, 45.6 ms
    # in a fresh clone's -n 3 run). Never below the link; under two of its RTTs (a probe
    # that timed two round trips, or the one-way delay, would be outside these bounds).
    assert np.all(first.rtt_ms[off] >= configured[off] - 1.0), first.rtt_ms
    assert np.all(first.rtt_ms[off] < 2.0 * configured[off]), first.rtt_ms
    assert Counter(n.site for n in first.current.nodes) == Counter(["east", "east", "west"])
    # the plan, as the ensemble itself reports it after the reconfiguration
    assert any(m.to_site == "south" for m in plan.migrations)
    sites = Counter(n.site for n in final.current.nodes)
    assert sites == Counter(n.site for n in plan.placement.nodes)
    leader_site = final.current.site_of(final.current.leader)
    assert leader_site == plan.placement.site_of(plan.placement.leader)


@pytest.mark.slow  # a whole compressed day, end to end
@pytest.mark.timeout(300)
def test_a_compressed_day_following_the_sun_moves_the_live_ensemble(testbed_ok, tmp_path):
    """A 60 s day over Washington DC and Tokyo (§5.1's regions, their measured RTT): the
    scheduler reconfigures the ensemble as the load moves with the sun, every
    reconfiguration finishes, and every site's clients kept working."""
    from geoslo.experiments.supercloud._live_sun import (
        FOLLOW,
        LiveSunSettings,
        run_live_ensemble,
    )

    settings = LiveSunSettings(hour_s=2.5, interval_s=2.5)
    run = run_live_ensemble(settings, FOLLOW, tmp_path / "day", progress=lambda line: None)
    assert run.failures == [] and run.refused == 0
    assert run.reconfigurations and all(r["ok"] for r in run.reconfigurations)
    assert len({p["leader"] for p in run.placements}) > 1  # the leader followed the load
    per_second = run.per_second(settings.day_s)
    assert all(rows.size for rows in run.ops.values())
    assert (per_second[5:] > 0).mean() > 0.9  # served in nearly every second


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_six_moves_on_three_ids_a_site_recycle_the_ids(testbed_ok, tmp_path):
    """Issue 39, item 5, live: two sites of 3 ids each (6 in all) and the whole ensemble
    moved to the other site six times (every node not there moves, the leader with them,
    so whichever voter ZooKeeper hands the leadership to is in the planned site). Ids that
    only grow would have run out at the second move; recycled, each move ends with the
    ensemble reporting its 3 members and its leader in the planned site."""
    from types import SimpleNamespace

    from geoslo.control.supercloud import Migration, Node, Placement

    settings = ZkLiveSettings(sites=("east", "west"), site_rtt_ms=((0.0, 20.0), (20.0, 0.0)))
    env = SupercloudTestbedEnvironment(
        settings, {"east": 1, "west": 1}, 2.0, tmp_path / "zk", ids_per_site=3,
        start_sites=("east", "east", "west"),
    )  # fmt: skip

    async def scenario() -> list[tuple[str, tuple[int, ...]]]:
        await env.start()
        seen, found = await env.observe(), []
        try:
            for _ in range(6):
                now = seen.current
                there = next(s for s in env.sites if s != now.site_of(now.leader))
                moves = tuple(
                    Migration(n.name, n.site, there) for n in now.nodes if n.site != there
                )
                moved = tuple(Node(n.name, there) for n in now.nodes)
                plan = SimpleNamespace(placement=Placement(moved, now.leader), migrations=moves)
                await env.apply(plan)
                seen = await settled(env, 150.0)
                found.append((seen.current.site_of(seen.current.leader), env.members))
                assert found[-1][0] == there, found
        finally:
            await env.close()
        return found

    found = asyncio.run(scenario())
    assert [site for site, _ in found] == ["west", "east"] * 3
    assert all(len(members) == 3 and max(members) <= 6 for _, members in found), found

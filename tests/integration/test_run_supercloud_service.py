"""``geoslo run``'s Supercloud service end to end (SoCC 2016 §5.1 loop, §5.2.2 testbed): the
placement loop on the simulated ensemble and on a live ZooKeeper ensemble moved by dynamic
reconfiguration, each also as a dry run (observed and decided, never applied).

The runtime's own loop (``geoslo run``) is not committed yet, so a small loop here does
what it does each interval: observe, step, apply (or, dry, only record the plan)."""

from __future__ import annotations

import asyncio
import os
import subprocess
from dataclasses import replace

import pytest

from geoslo.control.supercloud import Migration
from geoslo.live._processes import process_alive
from geoslo.live.supercloud.zookeeper import PlanRefusedError, cannot_run_reason
from geoslo.runtime.supercloud import SYSTEM, ControllerSettings

pytestmark = pytest.mark.integration


async def _serve(service, intervals: int, dry_run: bool, wait_s: float = 0.0) -> list:
    """``intervals`` rounds of observe -> step -> apply; the (observation, plan) pairs."""
    seen = []
    await service.environment.start()
    try:
        for _ in range(intervals):
            if wait_s:
                await asyncio.sleep(wait_s)
            observation = await service.environment.observe()
            plan = service.controller.step(observation)
            seen.append((observation, plan))
            if plan is not None and not dry_run:
                await service.environment.apply(plan)
    finally:
        await service.environment.close()
    return seen


def _simulated(interval_s: float):
    environment = SYSTEM.environments["simulator"].model_validate({"kind": "simulator"})
    return SYSTEM.build(ControllerSettings(), environment, interval_s)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("dry_run", [False, True])
def test_the_simulator_service_follows_the_sun_for_two_days(dry_run) -> None:
    service = _simulated(600.0)
    seen = asyncio.run(_serve(service, 2 * 24 * 6, dry_run))
    plans = [(o, p) for o, p in seen if p is not None]
    placements = {o.current for o, _ in seen}
    if dry_run:  # decided every interval, nothing moved: every plan is the same move
        assert len(placements) == 1 and service.environment.migrations == 0
        assert len(plans) > 10
    else:  # §5.1: the whole ensemble moves to the busier region, twice a day at most
        assert 2 <= len(plans) <= 8
        assert service.environment.migrations == sum(len(p.migrations) for _, p in plans)
        assert len(placements) >= 3
    for observation, plan in plans:
        assert plan.outcome.status == "optimal" and plan.score > plan.current_score
        assert len({n.site for n in plan.placement.nodes}) == 1  # the whole ensemble
        if not dry_run:  # (the dry run's split start can favour the other site's pair)
            busier = max(observation.front_ends, key=lambda f: f.reads + f.writes).site
            assert plan.placement.nodes[0].site == busier


@pytest.fixture
def testbed_ok() -> None:
    reason = cannot_run_reason()
    if reason:
        pytest.skip(f"live ZooKeeper testbed: {reason}")


def _testbed(tmp_path):
    table = {"kind": "testbed", "state_dir": str(tmp_path / "zk")}
    environment = SYSTEM.environments["testbed"].model_validate(table)
    return SYSTEM.build(ControllerSettings(), environment, 3.0)


def _namespaces() -> str:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


@pytest.mark.timeout(150)
def test_the_live_ensemble_moves_to_the_busier_site_by_reconfiguration(testbed_ok, tmp_path):
    service = _testbed(tmp_path)
    env = service.environment
    seen = asyncio.run(_serve(service, 6, dry_run=False, wait_s=service.interval_s))
    plans = [p for _, p in seen if p is not None]
    # Tokyo has 4x Virginia's sessions: every Virginia node moves there (§5.2.2's 3-step's
    # first two steps), once; the ensemble itself then reports three Tokyo members.
    assert len(plans) == 1 and {m.from_site for m in plans[0].migrations} == {"virginia"}
    assert env.applied == [("add 2 servers in tokyo", "remove every server in virginia")]
    first, last = seen[0][0], seen[-1][0]
    assert {n.site for n in first.current.nodes} == {"virginia", "tokyo"}
    assert [n.site for n in last.current.nodes] == ["tokyo"] * 3
    assert last.current.leader in {n.name for n in last.current.nodes}
    tokyo = {f.site: f.reads + f.writes for f in last.front_ends}
    assert tokyo["tokyo"] > 2 * tokyo["virginia"] > 0
    started = [*env._started.others, *env._started.servers.values()]
    assert started and not any(process_alive(p.pid) for p in started)  # close() waited
    assert f"geoslo-zk-{os.getpid()}-" not in _namespaces()


@pytest.mark.timeout(120)
def test_the_live_dry_run_decides_without_moving_and_refusals_change_nothing(
    testbed_ok, tmp_path
) -> None:
    service = _testbed(tmp_path)
    env = service.environment

    async def run() -> list:
        await env.start()
        try:
            seen = []
            for _ in range(3):
                await asyncio.sleep(service.interval_s)
                observation = await env.observe()
                seen.append((observation, service.controller.step(observation)))
            both_ways = (
                Migration("zk1", "virginia", "tokyo"),
                Migration("zk2", "tokyo", "virginia"),
            )
            with pytest.raises(PlanRefusedError, match="issue 22"):
                await env.apply(replace(seen[0][1], migrations=both_ways))
            seen.append((await env.observe(), None))
            return seen
        finally:
            await env.close()

    seen = asyncio.run(run())
    assert seen[0][1] is not None  # the loop decided to move ...
    assert len({o.current for o, _ in seen}) == 1  # ... and nothing moved
    assert env.applied == []

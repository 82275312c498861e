"""The nodes' VM images under the placement loop (issue 22, SoCC 2016 §4.1): when the
scheduler moves the live ensemble, each node's image follows it, and with proactive
propagation (§4.1.3) its first reads at the new site are served there; with the
mechanism removed (on demand) they cross the WAN. Real ZooKeeper, real image store
processes, real namespaces; skipped where the testbed cannot run."""

from __future__ import annotations

import asyncio

import pytest

from geoslo.control.supercloud import PlacementState
from geoslo.control.supercloud.loop import PlacementLoop
from geoslo.live.supercloud.zookeeper import ZkLiveSettings
from geoslo.live.supercloud.zookeeper._environment import SupercloudTestbedEnvironment
from geoslo.live.supercloud.zookeeper._images import ImageSettings
from geoslo.live.supercloud.zookeeper._run import cannot_run_reason

pytestmark = pytest.mark.integration

SITES = ("east", "west")
RTT_MS = ((0.0, 40.0), (40.0, 0.0))


@pytest.fixture
def testbed_ok() -> None:
    reason = cannot_run_reason()
    if reason:
        pytest.skip(f"live ZooKeeper testbed: {reason}")


async def wait_for(what: str, probe, timeout_s: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not probe():
        if loop.time() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout_s:.0f} s")
        await asyncio.sleep(0.5)


def move_the_ensemble(policy: str, state_dir) -> tuple[list, list]:
    """Start in east with every session in west, let the scheduler move the ensemble;
    the images' moves and the members' sites after it."""
    settings = ZkLiveSettings(sites=SITES, site_rtt_ms=RTT_MS)
    env = SupercloudTestbedEnvironment(
        settings, {"east": 0, "west": 6}, 3.0, state_dir,
        start_sites=("east",) * 3, images=ImageSettings(policy=policy),
    )  # fmt: skip

    async def scenario():
        await env.start()
        try:
            await env.observe()
            await asyncio.sleep(6.0)  # the VMs work at east; proactive pushes meanwhile
            seen = await env.observe()
            template = PlacementState(env.sites, env.rtt_ms, (), env.start_placement)
            plan = PlacementLoop(template, threshold_fraction=0.0, interval_s=3.0).step(seen)
            assert plan is not None, "the scheduler kept the ensemble in east"
            await env.apply(plan)

            async def observed() -> None:
                seen = await env.observe()
                sites.append([n.site for n in seen.current.nodes])

            sites: list = []
            await wait_for("the move", lambda: env.reconfigurations, 150.0)
            await observed()  # the images follow the members the ensemble reports
            await wait_for("the images' first reads", lambda: len(env.images.moves) == 3, 60.0)
            return list(env.images.moves), sites
        finally:
            await env.close()

    return asyncio.run(scenario())


@pytest.mark.slow  # a follow-the-sun day of image moves
@pytest.mark.timeout(600)
def test_each_image_follows_its_node_and_proactive_propagation_serves_it_there(
    testbed_ok, tmp_path
):
    moves, sites = move_the_ensemble("proactive", tmp_path / "proactive")
    assert sites[-1] == ["west"] * 3
    assert sorted(m.image for m in moves) == ["node-1", "node-2", "node-3"]
    assert all((m.from_site, m.to_site) == ("east", "west") for m in moves)
    proactive = [m.local_read_fraction for m in moves]
    # the mechanism removed: each block is fetched on its first read at the new site
    on_demand = [m.local_read_fraction for m in move_the_ensemble("on_demand", tmp_path / "od")[0]]
    print(f"first reads served at the new site: proactive {proactive}, on demand {on_demand}")
    assert min(proactive) >= 0.75, proactive
    assert max(on_demand) <= 0.5, on_demand

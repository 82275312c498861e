"""`geoslo run` drives CosTLO's loop (§5.2) on the simulated clouds and on real Redis
servers with injected stalls, with and without --dry-run; and the testbed's client library
issues exactly the configuration a plan hands it."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from _engines import skip_without_engine
from _run import events, processes_mentioning, run_in_process, run_service, write_config
from geoslo.control.costlo import Configuration, CostloLoop, EpochPlan, GetTuple, SearchLimits, Slo
from geoslo.live._processes import process_alive
from geoslo.live.costlo import CostloTestbedEnvironment

pytestmark = [pytest.mark.integration, pytest.mark.timeout(360)]

SIMULATOR = """\
system = "costlo"
[environment]
kind = "simulator"
prefixes = [0, 3]
samples = 1000
operations = 10000
[controller]
get_slo_ms = 30.0
[service]
listen = "127.0.0.1:0"
intervals = 3
"""

TESTBED = """\
system = "costlo"
interval_s = 2.0
[environment]
kind = "testbed"
engine = "{engine}"
state_dir = "{state_dir}"
servers_per_region = 2
objects = 100
agent_pairs = 60
rate_rps = 40.0
[controller]
get_slo_ms = 5.0
[service]
listen = "127.0.0.1:0"
intervals = 3
observe_timeout_s = 90.0
"""
# An observation on S3 costs this process about 3 ms of CPU per GET (botocore's): the
# pairs, pings and the end-host's load are kept small and the timeout wide, so that the
# run holds when other tests share the cores.


def run(tmp_path: Path, text: str, *flags: str) -> list[dict]:
    """`geoslo run` on ``text`` (a config) to its end (exit 0); its JSON log records."""
    return run_service(write_config(tmp_path, text, "costlo.toml"), *flags, timeout_s=330).records


@pytest.mark.parametrize("flags", [(), ("--dry-run",)], ids=["apply", "dry-run"])
def test_run_on_the_simulator(tmp_path, flags):
    lines = run(tmp_path, SIMULATOR, *flags)
    intervals = events(lines, "interval")
    assert [i["interval"] for i in intervals] == [1, 2, 3]
    assert all(i["status"] == "feasible" and not i["errors"] for i in intervals)
    assert all(i["objective"] > 0 for i in intervals)  # USD per month of both prefixes
    plans = events(lines, "dry_run")
    if flags:
        assert len(plans) == 3
        assert len(plans[0]["plan"]["prefixes"]) == 2  # one configuration per prefix
    else:
        assert not plans and all(i["applied"] for i in intervals)


@pytest.mark.parametrize("dry_run", [False, True], ids=["apply", "dry-run"])
def test_the_service_loop_puts_configurations_in_force_unless_dry(tmp_path, dry_run):
    """Through ServiceLoop, to look at the simulated clouds afterwards: applied, the last
    plan's configurations are what the clients use; dry, none was ever put in force."""
    config = write_config(tmp_path, SIMULATOR, "costlo.toml")
    service, plans, records = run_in_process(config, dry_run=dry_run)
    decided = [plan for plan in plans if plan is not None]
    assert len(decided) == 3 and decided[-1].configurations
    if dry_run:
        assert service.environment.in_force == {}
        assert len([r for r in records if r["event"] == "dry_run"]) == 3
    else:
        assert service.environment.in_force == dict(decided[-1].configurations)


def _recorded_pids(state_dir: Path) -> list[int]:
    return [p["pid"] for p in json.loads((state_dir / "cluster.json").read_text())["processes"]]


@pytest.mark.parametrize(
    "engine, flags",
    [  # a dry run and the S3 engine: the slow set (the simulator's run has a dry run;
        # test_cli_testbed and test_costlo_user_s3 run the S3 engine briefly)
        pytest.param("redis", (), id="apply"),
        pytest.param("redis", ("--dry-run",), id="dry-run", marks=pytest.mark.slow),
        pytest.param("s3", (), id="s3-apply", marks=pytest.mark.slow),  # 50-120 s
    ],
)
def test_run_on_the_testbed_stops_everything_it_started(tmp_path, needs_redis, engine, flags):
    skip_without_engine(engine)
    state_dir = tmp_path / "state"
    lines = run(tmp_path, TESTBED.format(state_dir=state_dir, engine=engine), *flags)
    intervals = events(lines, "interval")
    assert [i["interval"] for i in intervals] == [1, 2, 3]
    outcomes = (
        [(i["status"], i["errors"]) for i in intervals],
        [e["error"] for e in events(lines, "error")],
    )
    assert all(i["status"] in ("feasible", "infeasible") for i in intervals), outcomes
    assert all(not i["errors"] for i in intervals), outcomes
    assert len(events(lines, "dry_run")) == (3 if flags else 0)
    assert len(list(state_dir.glob(f"{engine}-serving-*.log"))) == 2  # it did start them
    # and they have all exited (the servers', relays' and lock services' commands name it)
    assert processes_mentioning(str(state_dir)) == []
    assert not (state_dir / "sites-netns.json").exists(), "a namespace was left behind"


async def _applied(env: CostloTestbedEnvironment, configuration: Configuration) -> list:
    """Observe once, apply a plan holding ``configuration``, and the next epoch's GETs."""
    loop = CostloLoop(Slo(get_ms=5.0), SearchLimits(max_copies=2, allow_second_region=False))
    plan = loop.step(await env.observe())
    selection = replace(plan.selections["local"], configuration=configuration)
    await env.apply(EpochPlan(2, {"local": selection}, {"local": "feasible"}, plan.outcome))
    await env.observe()  # GETs under the old client, and the switch
    await asyncio.sleep(1.0)
    await env.observe()
    return env.last_records


def test_the_client_library_issues_the_plans_configuration(tmp_path, needs_redis):
    always_two_copies = Configuration(serving=GetTuple(2, 1), get_timeout_ms=0.0)

    async def scenario() -> tuple[list, list[int]]:
        env = CostloTestbedEnvironment(
            tmp_path / "state", servers_per_region=2, objects=50, agent_pairs=50
        )
        await env.start()
        try:
            pids = _recorded_pids(tmp_path / "state")
            records = await _applied(env, always_two_copies)
            assert env.configuration == always_two_copies
        finally:
            await env.close()
        return records, pids

    records, pids = asyncio.run(scenario())
    assert len(records) > 20
    assert all(r.storage_requests == 2 and r.redundant for r in records)
    assert np.mean([r.winner is not None for r in records]) == 1.0
    assert pids and not any(process_alive(pid) for pid in pids)  # close() waited for them


# the S3 engine's whole testbed under geoslo run (test_cli_testbed and test_costlo_user_s3
# cover the engine briefly)
@pytest.mark.slow
def test_the_s3_testbed_observes_every_region_and_serves_the_plans_second(tmp_path):
    """On S3 every region's agent measures pairs and pings, the loop takes the closest
    other region as the second (§5.2), and the client reaches the plan's second region:
    with the serving region's gateways stopped, GETs are answered from it, no sooner than
    its RTT."""
    skip_without_engine("s3")
    regions = {"home": 2.0, "far": 30.0, "near": 10.0}
    both = Configuration(second=GetTuple(1, 1), get_timeout_ms=0.0)

    async def scenario():
        env = CostloTestbedEnvironment(
            tmp_path / "state", servers_per_region=2, objects=50, agent_pairs=50,
            pings_per_region=30, rate_rps=20.0, engine="s3", regions=regions,
        )  # fmt: skip
        await env.start()
        try:
            observation = await env.observe()
            plan = CostloLoop(Slo(get_ms=5.0), SearchLimits(max_copies=2)).step(observation)
            chosen = plan.selections["local"].second_region
            far = replace(plan.selections["local"], configuration=both, second_region="far")
            await env.apply(EpochPlan(2, {"local": far}, {"local": "feasible"}, plan.outcome))
            await env.observe()  # the GETs so far, of either client
            servers = [env.cluster.server_name("serving", k) for k in range(2)]
            for name in servers:
                env.cluster.pause(name)
            try:
                await asyncio.sleep(1.5)
            finally:
                for name in servers:
                    env.cluster.resume(name)
            await env.observe()
            return observation, chosen, env.last_records
        finally:
            await env.close()

    observation, chosen, records = asyncio.run(scenario())
    pings = {r.name: float(np.median(r.ping_ms["local"])) for r in observation.regions}
    assert list(pings) == ["home", "far", "near"] and pings["home"] < pings["near"] < pings["far"]
    assert chosen == "near"  # the closest other region by the measured pings
    from_second = [r for r in records if r.winner and r.winner.startswith("second")]
    assert len(from_second) >= 5, records
    assert min(r.latency_ms for r in from_second) >= 30.0  # far's RTT, not near's

"""CosTLO's `geoslo run` system: its tables, the service it builds, and the simulator
environment driven by the loop in-process (one epoch per observe, §5.2)."""

from __future__ import annotations

import asyncio
import json
import tomllib

import pytest

from geoslo.control.costlo import CostloLoop, EpochPlan, Slo
from geoslo.control.costlo.example import EXAMPLE_WORKLOAD
from geoslo.errors import InputError
from geoslo.runtime import parse_config
from geoslo.runtime._metrics import named
from geoslo.runtime.costlo import (
    DEFAULT_INTERVAL_S,
    EXAMPLE_CONFIG,
    SYSTEM,
    observation_gauges,
    plan_gauges,
    plan_record,
)
from geoslo.sim.costlo import CostloSimEnvironment

S3_REGION = (
    '[[environment.regions]]\nname = "east"\nendpoint_url = "http://127.0.0.1:9000"\n'
    'bucket = "photos"'
)

FTP_REGION = S3_REGION.replace("http://", "ftp://")


def config(environment: str = 'kind = "simulator"', controller: str = "") -> dict:
    text = f'system = "costlo"\n[environment]\n{environment}\n[controller]\n{controller}\n'
    return tomllib.loads(text)


def test_the_example_config_runs_the_simulator_weekly():
    run = parse_config(tomllib.loads(EXAMPLE_CONFIG))
    assert run.system is SYSTEM and run.environment.kind == "simulator"
    assert run.interval_s == DEFAULT_INTERVAL_S == 7 * 24 * 3600.0  # §5.2: a week
    assert run.controller.get_slo_ms == 50.0 and run.controller.percentile == 99.0


@pytest.mark.parametrize(
    ("environment", "controller", "message"),
    [
        ('kind = "simulator"', "get_slo = 30", "controller.get_slo: unknown key"),
        ('kind = "simulator"', "percentile = 100", "controller.percentile: must be < 100"),
        ('kind = "simulator"', "max_copies = 6", "controller.max_copies: must be <= 5"),
        ('kind = "simulator"', 'application = "social"', "controller.application: must be one"),
        ('kind = "simulator"\nprefixes = []', "", "environment.prefixes: must hold at least 1"),
        ('kind = "simulator"\nsamples = 5', "", "environment.samples: must be >= 10"),
        ('kind = "testbed"\nservers_per_region = 1', "", "environment.servers_per_region"),
        ('kind = "testbed"\nworld_seed = 1', "", "environment.world_seed: unknown key"),
        ('kind = "cloud"', "", "environment.kind"),
        ('kind = "s3"', "", "environment.regions"),
        (
            f'kind = "s3"\n{S3_REGION.replace("http://", "ftp://")}',
            "",
            "environment.regions[0].endpoint_url: 'ftp:",
        ),
        (
            f'kind = "s3"\n{S3_REGION}\nsecret_key = "x"',
            "",
            "environment.regions[0].secret_key: unknown",
        ),
    ],
)
def test_bad_tables_name_the_key(environment, controller, message):
    with pytest.raises(InputError) as caught:
        parse_config(config(environment, controller))
    assert str(caught.value).startswith(message), str(caught.value)


def test_the_users_s3_is_chosen_for_without_relays_and_its_keys_named():
    run = parse_config(config(f'kind = "s3"\nprefix = "office"\n{S3_REGION}'))
    service = SYSTEM.build(run.controller, run.environment, 3600.0)
    environment = service.controller.limits, service.environment
    assert not environment[0].allow_relay  # the operator runs no relay VMs
    (region,) = environment[1].regions
    assert region.address == ("127.0.0.1", 9000) and region.endpoints.s3.access_key is None
    assert environment[1].prefix == "office" and environment[1].probe_prefix == "geoslo-probe/"


def test_the_testbed_search_holds_one_copy_per_server_at_most():
    run = parse_config(config('kind = "testbed"\nservers_per_region = 2', "max_copies = 4"))
    service = SYSTEM.build(run.controller, run.environment, 10.0)
    assert service.controller.limits.max_copies == 2
    assert not service.environment.simulated and service.environment.servers_per_region == 2


def test_the_simulator_service_is_the_loop_on_the_simulated_clouds():
    run = parse_config(config('kind = "simulator"\nprefixes = [0, 3]', "get_slo_ms = 30"))
    service = SYSTEM.build(run.controller, run.environment, run.interval_s)
    assert isinstance(service.controller, CostloLoop) and service.controller.slo.get_ms == 30.0
    assert isinstance(service.environment, CostloSimEnvironment) and service.environment.simulated
    assert service.environment.prefixes == (0, 3)


async def epochs(env: CostloSimEnvironment, loop: CostloLoop, n: int) -> list:
    """n epochs of observe, step, apply: (observation, plan) each."""
    await env.start()
    out = []
    try:
        for _ in range(n):
            observation = await env.observe()
            plan = loop.step(observation)
            await env.apply(plan)
            out.append((observation, plan))
    finally:
        await env.close()
    return out


@pytest.fixture(scope="module")
def simulated():
    env = CostloSimEnvironment(EXAMPLE_WORKLOAD, prefixes=(0, 3), samples=1_000, operations=20_000)
    return env, asyncio.run(epochs(env, CostloLoop(Slo(get_ms=30.0)), 3))


def test_the_agents_sample_a_bounded_epoch(simulated):
    env, runs = simulated
    observation, _ = runs[0]
    assert [p.name for p in observation.prefixes] == [env.world.prefixes[p].name for p in (0, 3)]
    for region in observation.regions:
        assert region.storage.get_same_object.network_ms.shape == (1_000, 2)
        assert all(pings.shape == (1_000,) for pings in region.ping_ms.values())


def test_the_applied_configuration_cuts_the_measured_inflation(simulated):
    """Epoch 1 measures the baseline (nothing applied yet); from epoch 2 on the clients
    issue the selected configurations, which bound the inflation near the 30 ms SLO."""
    env, runs = simulated
    first, later = runs[0][0], runs[-1][0]
    for before, after in zip(first.prefixes, later.prefixes, strict=True):
        assert before.measured_inflation_ms > 45.0  # the baseline misses the SLO
        assert after.measured_inflation_ms < 40.0  # 30 ms + a finite sample's scatter
    assert env.in_force == runs[-1][1].configurations


def test_every_epoch_is_a_new_plan_with_its_own_measurements(simulated):
    _, runs = simulated
    plans: list[EpochPlan] = [plan for _, plan in runs]
    assert [p.epoch for p in plans] == [1, 2, 3]
    assert all(p.outcome.status == "feasible" for p in plans)
    first, second = runs[0][0].regions[0], runs[1][0].regions[0]
    assert (
        first.storage.get_same_object.service_ms != second.storage.get_same_object.service_ms
    ).any()


def test_gauges_and_record_are_numbers_and_json(simulated):
    _, runs = simulated
    observation, plan = runs[-1]
    gauges = named([*plan_gauges(plan), *observation_gauges(observation)])
    assert all(isinstance(v, float) for v in gauges.values())
    assert any(k.startswith("measured_inflation_ms:") for k in gauges)
    record = json.loads(json.dumps(plan_record(plan)))
    assert record["outcome"]["status"] == "feasible" and len(record["prefixes"]) == 2


def test_a_plan_for_an_unknown_prefix_is_refused(simulated):
    env, runs = simulated
    plan = runs[0][1]
    stranger = EpochPlan(
        plan.epoch, {"nowhere": next(iter(plan.selections.values()))}, {}, plan.outcome
    )

    async def apply() -> None:
        await env.apply(stranger)

    with pytest.raises(InputError, match="unknown prefixes"):
        asyncio.run(apply())

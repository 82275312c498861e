"""``geoslo run``'s Supercloud system: the configuration tables (paper defaults, unknown keys
and out-of-range numbers refused), the service it builds, and the placement loop stepping
on the simulated ensemble's observations (SoCC 2016 §5.1)."""

from __future__ import annotations

import asyncio
import tomllib

import pytest
from pydantic import ValidationError

from geoslo.control.supercloud.loop import PlacementLoop
from geoslo.errors import ConfigError
from geoslo.runtime._metrics import named
from geoslo.runtime.supercloud import SYSTEM, ControllerSettings, SimulatorSettings

EXAMPLE = tomllib.loads(SYSTEM.example_config)


def _build(environment: dict | None = None, controller: dict | None = None, interval_s=60.0):
    env = SYSTEM.environments["simulator"].model_validate(
        {**EXAMPLE["environment"], **(environment or {})}
    )
    ctl = SYSTEM.controller_settings.model_validate(controller or {})
    return SYSTEM.build(ctl, env, interval_s)


def test_the_example_config_is_the_papers_defaults() -> None:
    assert EXAMPLE["system"] == SYSTEM.name == "supercloud"
    assert EXAMPLE["interval_s"] == SYSTEM.default_interval_s == 60.0  # §5.1
    assert SimulatorSettings.model_validate(EXAMPLE["environment"]) == SimulatorSettings(
        kind="simulator"
    )
    assert ControllerSettings.model_validate(EXAMPLE["controller"]) == ControllerSettings()
    assert set(SYSTEM.environments) == {"simulator", "testbed", "ensemble", "vm"}


@pytest.mark.parametrize(
    ("table", "change", "key"),
    [
        ("controller", {"threshold_fraction": 1.5}, "threshold_fraction"),
        ("controller", {"threshold_fraction": -0.1}, "threshold_fraction"),
        ("controller", {"evaluation": "tsp"}, "evaluation"),
        ("controller", {"threshold": 3}, "threshold"),
        ("environment", {"read_fraction": 2}, "read_fraction"),
        ("environment", {"start_sites": []}, "start_sites"),
        ("environment", {"rtt_ms": 100}, "rtt_ms"),  # a testbed key under the simulator
        ("testbed", {"virginia_threads": -1}, "virginia_threads"),
        ("testbed", {"sites": ["Tokyo"]}, "sites"),
    ],
)
def test_bad_tables_are_refused_naming_the_key(table, change, key) -> None:
    if table == "controller":
        model, base = ControllerSettings, {}
    elif table == "environment":
        model, base = SimulatorSettings, EXAMPLE["environment"]
    else:
        model, base = SYSTEM.environments["testbed"], {"kind": "testbed"}
    with pytest.raises(ValidationError) as refused:
        model.model_validate({**base, **change})
    assert refused.value.errors()[0]["loc"][0] == key


def test_the_service_is_the_placement_loop_on_the_simulated_ensemble() -> None:
    service = _build(interval_s=600.0)
    assert isinstance(service.controller, PlacementLoop)
    assert service.environment.simulated and service.interval_s == 600.0
    assert service.controller.template.sites == service.environment.sites
    assert service.controller.threshold_fraction == 0.1


@pytest.mark.parametrize(
    ("environment", "controller", "key"),
    [
        (
            {"sites": ["Washington DC", "Atlantis"], "start_sites": ["Atlantis"]},
            {},
            "environment.sites",
        ),
        ({"start_sites": ["Tokyo", "Osaka"]}, {}, "environment.start_sites[1]"),
        ({}, {"evaluation": "single_vm"}, "environment.start_sites"),  # 3 nodes, one VM
    ],
)
def test_inconsistent_settings_are_refused_when_built(environment, controller, key) -> None:
    with pytest.raises(ConfigError) as refused:
        _build(environment, controller)
    assert refused.value.field == key


def test_the_testbed_is_built_without_starting_anything() -> None:
    testbed = SYSTEM.environments["testbed"].model_validate({"kind": "testbed"})
    service = SYSTEM.build(ControllerSettings(), testbed, 5.0)
    env = service.environment
    assert not env.simulated and env.sites == ("virginia", "tokyo")
    assert service.controller.template.rtt_ms[0, 1] == 100.0
    assert {n.site for n in env.start_placement.nodes} == {"virginia", "tokyo"}
    with pytest.raises(ConfigError, match="zookeeper"):
        SYSTEM.build(ControllerSettings(evaluation="single_vm"), testbed, 5.0)


async def _run(service, intervals: int) -> list:
    plans = []
    for _ in range(intervals):
        observation = await service.environment.observe()
        plan = service.controller.step(observation)
        if plan is not None:
            plans.append((observation, plan))
            await service.environment.apply(plan)
    return plans


def test_a_day_of_the_service_follows_the_sun_with_gauges_and_records() -> None:
    service = _build(interval_s=600.0)
    plans = asyncio.run(_run(service, 24 * 6))
    assert 1 <= len(plans) <= 4  # the ensemble follows the busier region, not the noise
    for observation, plan in plans:
        assert plan.outcome.status == "optimal" and plan.migrations
        busier = max(observation.front_ends, key=lambda f: f.reads + f.writes).site
        assert plan.placement.site_of(plan.placement.leader) == busier
        gauges = named(service.plan_gauges(plan))
        assert gauges["migrations"] == len(plan.migrations)
        assert gauges["score_ms_requests"] == plan.score > plan.current_score
        record = service.plan_record(plan)
        assert record["status"] == "optimal" and record["objective"] == plan.score
        seen = named(service.observation_gauges(observation))
        assert sum(v for k, v in seen.items() if k.startswith("nodes:")) == 3
        assert seen["busy"] == 0.0
    assert service.environment.migrations == sum(len(p.migrations) for _, p in plans)

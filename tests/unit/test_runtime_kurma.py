"""``geoslo run``'s Kurma system: the configuration tables (paper defaults, unknown keys and
out-of-range numbers refused), and the service on the simulator environment: every interval a
plan with an applicable status, the routing it carries put in force (Kurma §6, §7.1)."""

from __future__ import annotations

import asyncio
import time
import tomllib

import numpy as np
import pytest
from pydantic import ValidationError

from geoslo.control.kurma import KurmaController, Routing
from geoslo.runtime._metrics import named
from geoslo.runtime.kurma import SYSTEM, ControllerSettings, SimulatorSettings, TestbedSettings
from geoslo.sim.kurma import KurmaSimEnvironment

EXAMPLE = tomllib.loads(SYSTEM.example_config)
SMALL_PROFILE = {"profile_points": 8, "profile_seconds": 5.0}  # a fast, coarse model


def _build(environment: dict | None = None, controller: dict | None = None):
    env = SimulatorSettings.model_validate({**EXAMPLE["environment"], **(environment or {})})
    ctl = ControllerSettings.model_validate({**SMALL_PROFILE, **(controller or {})})
    return SYSTEM.build(ctl, env, SYSTEM.default_interval_s)


def test_the_example_config_is_the_papers_defaults() -> None:
    assert EXAMPLE["system"] == SYSTEM.name == "kurma"
    assert EXAMPLE["interval_s"] == SYSTEM.default_interval_s == 2.5  # §6
    assert SimulatorSettings.model_validate(EXAMPLE["environment"]) == SimulatorSettings(
        kind="simulator"
    )
    controller = ControllerSettings.model_validate(EXAMPLE["controller"])
    assert controller == ControllerSettings()
    assert (controller.slo_ms, controller.slo_violation_target) == (30.0, 0.05)  # §7
    assert controller.quantum_fraction == 0.01  # §5.2
    assert set(SYSTEM.environments) == {"simulator", "testbed", "agent"}


@pytest.mark.parametrize(
    ("model", "change", "key"),
    [
        (ControllerSettings, {"objective": "speed"}, "objective"),
        (ControllerSettings, {"slo_violation_target": 1.0}, "slo_violation_target"),
        (ControllerSettings, {"quantum_fraction": 0}, "quantum_fraction"),
        (ControllerSettings, {"slo": 30}, "slo"),
        (SimulatorSettings, {"trace": "trace3"}, "trace"),
        (SimulatorSettings, {"server_choice": "fastest"}, "server_choice"),
        (SimulatorSettings, {"servers_per_site": 2}, "servers_per_site"),  # a testbed key
        (TestbedSettings, {"sites": ["London"]}, "sites"),
        (TestbedSettings, {"load_fraction": [0.5, -0.1]}, "load_fraction"),
        (TestbedSettings, {"servers_per_site": 9}, "servers_per_site"),
    ],
)
def test_bad_tables_are_refused_naming_the_key(model, change, key) -> None:
    base = {"kind": "simulator"} if model is SimulatorSettings else {}
    if model is TestbedSettings:
        base = {"kind": "testbed"}
    with pytest.raises(ValidationError) as refused:
        model.model_validate({**base, **change})
    assert key in str(refused.value)


async def _run(service, intervals: int) -> list[tuple]:
    """The runtime's order, without its clock: observe, step, apply."""
    env = service.environment
    await env.start()
    steps = []
    try:
        for _ in range(intervals):
            observation = await env.observe()
            routing = service.controller.step(observation)
            if routing is not None:
                await env.apply(routing)
            steps.append((observation, routing, env.fractions.copy()))
    finally:
        await env.close()
    return steps


@pytest.mark.parametrize("objective", ["perf", "cost"])
def test_the_service_plans_every_interval_and_puts_the_routing_in_force(objective) -> None:
    started = time.perf_counter()
    service = _build(controller={"objective": objective})
    build_s = time.perf_counter() - started
    assert isinstance(service.controller, KurmaController)
    assert isinstance(service.environment, KurmaSimEnvironment)
    assert service.environment.simulated
    steps = asyncio.run(_run(service, 6))
    print(f"kurma simulator service built in {build_s:.2f} s")
    for observation, routing, in_force in steps:
        assert isinstance(routing, Routing) and routing.outcome.applicable
        assert observation.arrivals.sum() > 0 and observation.requests.sum() > 0
        assert np.array_equal(in_force, routing.fractions)
        assert np.allclose(in_force.sum(axis=1), 1.0)
    # Trace-1: the busiest site sheds load once the controller has measured it
    assert steps[-1][2][0, 1:].sum() > 0
    gauges = named(service.plan_gauges(steps[-1][1]))
    assert gauges["rate_rps:London->Ireland"] == steps[-1][1].plan.rates_rps[0, 1]
    observed = named(service.observation_gauges(steps[-1][0]))
    assert observed["model_build_s"] > 0 and observed["demand_rps:London"] > 0
    record = service.plan_record(steps[-1][1])
    assert record["status"] in ("optimal", "time_limit", "infeasible")
    assert record["formulation"] == objective


def test_the_environment_runs_past_the_end_of_its_trace() -> None:
    service = _build()
    env = service.environment
    env.sim._traces = [t[:3] for t in env.sim._traces]  # 3 s of trace, 4 intervals
    steps = asyncio.run(_run(service, 4))
    assert all(o.arrivals.sum() > 0 for o, _, _ in steps)


def test_the_simulator_serves_and_profiles_under_the_configured_server_choice() -> None:
    """Issue 37: the sites' balancer picks the server, and Kurma's curves are profiled under
    it: they say fewer violations near saturation than the random choice's."""
    service = _build(environment={"server_choice": "least_outstanding"})
    assert service.environment.sim.server_choice == "least_outstanding"
    assert service.environment.sim.server_choice_at == "site"
    random = _build()
    for site in range(len(random.controller.model.sites)):
        ours = service.controller.model.surfaces[site].curve(0.0)
        theirs = random.controller.model.surfaces[site].curve(0.0)
        load = 0.85 * float(random.controller.model.capacity_rps[site])
        assert ours(load) < theirs(load)
    steps = asyncio.run(_run(service, 2))
    assert all(isinstance(routing, Routing) for _, routing, _ in steps)

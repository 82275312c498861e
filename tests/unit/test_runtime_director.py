"""The Director's `geoslo run` wiring (geoslo.runtime.director): its tables, defaults and
the service it builds (no processes)."""

from __future__ import annotations

import asyncio
import tomllib

import pytest

from geoslo.control.director import DirectorConfig, DirectorLoop
from geoslo.errors import ConfigError, InputError
from geoslo.runtime._config import parse_config
from geoslo.runtime._metrics import named
from geoslo.runtime.director import SYSTEM, DirectorSettings
from geoslo.sim.director import DirectorSimEnvironment

SMALL_SIMULATOR = {
    "kind": "simulator",
    "bins": 20,
    "servers": 3,
    "flat_rps": 5000.0,
    "flat_s": 10,
    "ramp_s": 10,
    "hold_s": 20,
}


def config(environment: dict, controller: dict | None = None, **top):
    data = {"system": "director", "environment": environment, **top}
    if controller is not None:
        data["controller"] = controller
    return parse_config(data)


def test_the_example_config_parses_with_the_papers_defaults():
    parsed = parse_config(tomllib.loads(SYSTEM.example_config))
    assert parsed.environment.kind == "simulator" and parsed.interval_s == 1.0
    assert parsed.controller.director_config() == DirectorConfig()  # §5.7's Table, §6


def test_the_controller_table_has_every_director_config_field():
    fields = set(DirectorSettings.model_fields)
    assert set(DirectorConfig.__dataclass_fields__) <= fields


@pytest.mark.parametrize(
    "controller, key",
    [
        ({"alpha_up": 0.0}, "alpha_up"),
        ({"standbys": -1}, "standbys"),
        ({"read_fanout": 3}, "read_fanout"),  # more than replicas
        ({"nope": 1}, "nope"),
    ],
)
def test_bad_controller_keys_are_named(controller, key):
    with pytest.raises((InputError, ConfigError), match=key):
        parsed = config(SMALL_SIMULATOR, controller)
        SYSTEM.build(parsed.controller, parsed.environment, parsed.interval_s)


def test_the_testbed_needs_a_fitted_model():
    parsed = config({"kind": "testbed"})
    with pytest.raises(ConfigError, match="controller.steady_state"):
        SYSTEM.build(parsed.controller, parsed.environment, parsed.interval_s)


def test_the_simulator_steps_whole_seconds():
    parsed = config(SMALL_SIMULATOR, interval_s=1.5)
    with pytest.raises(ConfigError, match="interval_s"):
        SYSTEM.build(parsed.controller, parsed.environment, parsed.interval_s)


def test_the_built_service_runs_the_loop_on_the_simulated_store():
    parsed = config(SMALL_SIMULATOR, {"period_s": 5.0}, interval_s=5.0)
    service = SYSTEM.build(parsed.controller, parsed.environment, parsed.interval_s)
    assert isinstance(service.controller, DirectorLoop)
    assert isinstance(service.environment, DirectorSimEnvironment) and service.environment.simulated

    async def run() -> list:
        await service.environment.start()
        steps = []
        for _ in range(12):
            observation = await service.environment.observe()
            gauges = named(service.observation_gauges(observation))
            assert gauges["servers"] == len(observation.servers)
            step = service.controller.step(observation)
            if step is not None:
                steps.append(step)
                await service.environment.apply(step)
        await service.environment.close()
        return steps

    steps = asyncio.run(run())
    decided = [s for s in steps if s.decided]
    # At most one a period after the first histogram, none while copies run (§5.3).
    assert 2 <= len(decided) <= 11
    record = service.plan_record(decided[0])
    assert record["outcome"]["status"] in ("feasible", "infeasible") and record["decided"]
    assert named(service.plan_gauges(decided[0]))["servers_after_plan"] >= 1

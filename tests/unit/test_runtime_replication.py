"""The replication system under ``geoslo run``: the steppable link is ``simulate_link``
one interval at a time (the same numbers), and the plan's gauges and record."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from geoslo.control import Outcome
from geoslo.control.replication import Allocation, Decision, FifoPolicy, StaticPolicy
from geoslo.runtime._metrics import named
from geoslo.runtime.replication import (
    SYSTEM,
    ReplicationSettings,
    SimulatorSettings,
    plan_gauges,
    plan_record,
)
from geoslo.sim.replication import (
    LinkSettings,
    LinkStepper,
    LinkWorkload,
    ReplicationSimEnvironment,
    simulate_link,
)
from geoslo.sim.replication._link import _message_arrivals


class Recording:
    """A policy that remembers what it measured."""

    def __init__(self, inner) -> None:
        self.inner, self.name, self.measurements = inner, inner.name, []

    def allocate(self, measurement, now_s):
        self.measurements.append((now_s, measurement))
        return self.inner.allocate(measurement, now_s)


@pytest.mark.parametrize(
    "policy", [FifoPolicy(), StaticPolicy((0.5, 0.2, 0.3))], ids=["fifo", "static"]
)
def test_the_stepper_is_simulate_link_one_interval_at_a_time(policy):
    settings = LinkSettings(image_period_s=60.0, seed=3)  # images overlap: 375 MB take > 60 s
    duration_s = 600
    workload = LinkWorkload(np.full(duration_s, 70.0), np.full(duration_s, 30.0))
    recording = Recording(policy)
    run = simulate_link(workload, recording, settings)
    rng = np.random.default_rng(settings.seed)  # the same draws, in the same order
    arrivals = np.column_stack(
        [
            _message_arrivals(rates, settings, rng)
            for rates in (workload.application_mbps, workload.replication_mbps)
        ]
    )
    stepper, allocation = LinkStepper(settings), Allocation("shares")
    n = stepper.steps_per_interval
    stepped = []
    for k in range(len(arrivals) // n):
        measurement = stepper.advance(arrivals[k * n : (k + 1) * n], allocation)
        stepped.append((stepper.time_s, measurement))
        allocation = policy.allocate(measurement, stepper.time_s)
    assert len(stepped) == len(recording.measurements) + 1  # the last interval is not consulted
    for (now_s, ours), (then_s, theirs) in zip(stepped, recording.measurements, strict=False):
        assert now_s == pytest.approx(then_s)
        for name in ("buffers_mb", "sent_mb", "arrived_mb"):
            np.testing.assert_array_equal(getattr(ours, name), getattr(theirs, name))
    np.testing.assert_array_equal(stepper.backlog_mb, run.buffers_mb[-1])


def test_the_environment_cycles_its_levels():
    settings = LinkSettings(step_s=1.0, seed=1)
    link = ReplicationSimEnvironment(settings, [80.0, 0.0], [0.0], level_period_s=10.0)
    arrived = [asyncio.run(link.observe()).measurement.arrived_mb[0] for _ in range(4)]
    assert arrived[0] > 50 and arrived[2] > 50  # 80 Mbps for 10 s is 100 MB
    assert arrived[1] == 0 and arrived[3] == 0


def test_plan_gauges_and_record_name_the_streams():
    shares = Decision(
        Allocation("shares", (0.6, 0.3, 0.1)), Outcome("optimal", "solved", 12.5, 1.2)
    )
    assert named(plan_gauges(shares)) == {
        "share_fraction:application": 0.6,
        "share_fraction:replication": 0.3,
        "share_fraction:vm_image": 0.1,
    }
    assert plan_record(shares)["shares"]["vm_image"] == 0.1
    assert plan_record(shares)["outcome"]["solver_status"] == "solved"
    priority = Decision(Allocation("priority", order=(1, 0, 2)), Outcome("feasible", "PRIO"))
    assert named(plan_gauges(priority))["priority_rank:replication"] == 0
    assert plan_record(priority)["order"] == ["replication", "application", "vm_image"]


@pytest.mark.parametrize("policy", ["mpc", "fifo", "static", "prio"])
def test_every_policy_runs_as_a_service(policy):
    service = SYSTEM.build(
        ReplicationSettings(policy=policy), SimulatorSettings(kind="simulator", step_s=1.0), 10.0
    )
    observation = asyncio.run(service.environment.observe())
    plan = service.controller.step(observation)
    assert plan.outcome.applicable
    asyncio.run(service.environment.apply(plan))
    assert service.environment.allocation == plan.allocation

"""The runtime loop on the real simulated link: a failed observation, decision or
application keeps the plan in force, counts the error and the loop goes on; the step runs
off the event loop; a dry run applies nothing; stop() ends after the current interval."""

from __future__ import annotations

import asyncio
import io
import json
import time
from dataclasses import replace

from geoslo.control import Outcome
from geoslo.control.replication import Allocation, Decision
from geoslo.runtime import Service, ServiceLog, ServiceLoop, ServiceSettings
from geoslo.runtime.replication import SYSTEM, ReplicationSettings, SimulatorSettings

EQUAL = Allocation("shares")


def replication_service(policy: str = "mpc", step_s: float = 1.0, seed: int = 0) -> Service:
    """The replication MPC on the simulated link (overloaded: it has to move the shares)."""
    return SYSTEM.build(
        ReplicationSettings(policy=policy),
        SimulatorSettings(
            kind="simulator",
            seed=seed,
            application_mbps=[80.0],
            replication_mbps=[30.0],
            step_s=step_s,
        ),
        10.0,
    )


class FaultyEnvironment:
    """The real simulator, with an observation that raises or hangs, or an application that
    raises, on chosen intervals (counted from 1)."""

    def __init__(self, inner, observe_raises=(), observe_hangs=(), apply_raises=()) -> None:
        self.inner = inner
        self.simulated = inner.simulated
        self.observe_raises, self.observe_hangs = set(observe_raises), set(observe_hangs)
        self.apply_raises = set(apply_raises)
        self.observed = 0
        self.closed = False

    async def start(self) -> None:
        await self.inner.start()

    async def observe(self):
        self.observed += 1
        if self.observed in self.observe_raises:
            raise ConnectionError("the link's counters did not answer")
        if self.observed in self.observe_hangs:
            await asyncio.sleep(3600)
        return await self.inner.observe()

    async def apply(self, plan) -> None:
        if self.observed in self.apply_raises:
            raise OSError("tc refused the class change")
        await self.inner.apply(plan)

    async def close(self) -> None:
        self.closed = True
        await self.inner.close()


class FaultyController:
    """The real controller; on chosen steps it raises, or ends ``failed`` with a plan that
    would move everything to the application (so applying it would show)."""

    def __init__(self, inner, raises_on=(), fails_on=()) -> None:
        self.inner = inner
        self.raises_on, self.fails_on = set(raises_on), set(fails_on)
        self.steps = 0

    def step(self, observation):
        self.steps += 1
        if self.steps in self.raises_on:
            raise FloatingPointError("the solver's workspace is corrupt")
        if self.steps in self.fails_on:
            return Decision(Allocation("shares", (1.0, 0.0, 0.0)), Outcome("failed", "test"))
        return self.inner.step(observation)


def sample(loop: ServiceLoop, name: str, **labels: str) -> float:
    value = loop.metrics.registry.get_sample_value(name, {"system": "replication", **labels})
    return 0.0 if value is None else value


async def run_then_stop(loop: ServiceLoop, after_s: float) -> None:
    task = asyncio.create_task(loop.run())
    await asyncio.sleep(after_s)
    loop.stop()
    await task


def records(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_each_failure_keeps_the_plan_in_force_counts_its_kind_and_the_loop_goes_on():
    service = replication_service()
    link = service.environment
    env = FaultyEnvironment(link, observe_raises={3}, observe_hangs={5}, apply_raises={9})
    controller = FaultyController(service.controller, raises_on={5}, fails_on={6})
    # controller steps lag the intervals by the failed observations (3 and 5): step 5 is
    # interval 7, step 6 is interval 8
    service = replace(service, environment=env, controller=controller)
    stream = io.StringIO()
    settings = ServiceSettings(observe_timeout_s=0.3)
    loop = ServiceLoop(service, settings, ServiceLog("replication", stream))
    expected = {3: ["observe"], 5: ["observe"], 7: ["decide"], 8: ["decide"], 9: ["apply"]}

    async def run() -> list[tuple]:
        await env.start()
        seen = []
        for _ in range(12):
            before = link.allocation
            report = await loop.run_interval()
            seen.append((report, before, link.allocation))
        return seen

    seen = asyncio.run(run())
    moved = 0
    for report, before, after in seen:
        assert report.errors == expected.get(report.interval, []), report
        if report.errors:
            assert after == before, report  # the plan in force stays
            assert not report.applied
        else:
            assert report.applied and report.status == "optimal"
            moved += after != before
    assert moved >= 3  # the MPC does move the shares when nothing fails
    assert seen[7][0].status == "failed"
    assert sample(loop, "geoslo_errors_total", kind="observe") == 2
    assert sample(loop, "geoslo_errors_total", kind="decide") == 2
    assert sample(loop, "geoslo_errors_total", kind="apply") == 1
    assert sample(loop, "geoslo_intervals_total") == 12
    assert sample(loop, "geoslo_plans_total", status="failed") == 1
    assert sample(loop, "geoslo_decision_seconds_count") == 9  # every step that returned
    errors = [r for r in records(stream) if r["event"] == "error"]
    assert [(r["interval"], r["kind"]) for r in errors] == [
        (3, "observe"),
        (5, "observe"),
        (7, "decide"),
        (8, "decide"),
        (9, "apply"),
    ]
    assert "within 0.3 s" in errors[1]["error"]
    intervals = [r for r in records(stream) if r["event"] == "interval"]
    assert [r["interval"] for r in intervals] == list(range(1, 13))
    assert {"time", "system", "interval", "status", "decide_ms", "errors"} <= set(intervals[0])


def test_run_survives_bad_intervals_to_the_end_and_closes_the_environment():
    service = replication_service()
    env = FaultyEnvironment(service.environment, observe_raises={1, 2, 4}, apply_raises={6})
    service = replace(service, environment=env)
    loop = ServiceLoop(
        service, ServiceSettings(intervals=10), ServiceLog("replication", io.StringIO())
    )
    asyncio.run(loop.run())
    assert loop.interval == 10 and loop.failed_intervals == 4
    assert env.closed


def test_the_step_runs_off_the_event_loop():
    """A slow solve leaves the event loop free (Kurma's instance served nothing during it)."""

    class SlowController:
        def __init__(self, inner) -> None:
            self.inner = inner

        def step(self, observation):
            time.sleep(0.5)  # a solver holding the CPU in C, as OSQP or HiGHS do
            return self.inner.step(observation)

    service = replication_service()
    service = replace(service, controller=SlowController(service.controller))
    loop = ServiceLoop(service, ServiceSettings(), ServiceLog("replication", io.StringIO()))

    async def run() -> int:
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticker = asyncio.create_task(tick())
        await loop.run_interval()
        ticker.cancel()
        return ticks

    assert asyncio.run(run()) >= 10  # 0 if the step blocked the loop


def test_a_dry_run_applies_nothing_and_logs_every_plan():
    service = replication_service()
    link = service.environment
    stream = io.StringIO()
    loop = ServiceLoop(
        service, ServiceSettings(intervals=30), ServiceLog("replication", stream), dry_run=True
    )
    asyncio.run(loop.run())
    assert link.intervals == 30  # observed for real
    assert link.allocation == EQUAL  # never applied
    plans = [r["plan"] for r in records(stream) if r["event"] == "dry_run"]
    assert len(plans) == 30
    proposed = {tuple(round(s, 6) for s in p["shares"].values()) for p in plans}
    assert len(proposed) > 1  # plans that would have moved the shares
    assert all(p["outcome"]["status"] == "optimal" for p in plans)


def test_stop_ends_after_the_current_interval():
    service = replication_service()
    loop = ServiceLoop(service, ServiceSettings(), ServiceLog("replication", io.StringIO()))

    class StopAtThree(FaultyEnvironment):
        async def observe(self):
            observation = await super().observe()
            if self.observed == 3:
                loop.stop()
            return observation

    env = StopAtThree(service.environment)
    loop.environment = env
    asyncio.run(loop.run())
    assert loop.interval == 3 and env.observed == 3 and env.closed
    assert service.environment.allocation != EQUAL  # interval 3 was finished (applied)


class RealTime(FaultyEnvironment):
    """The simulated link observed as if in real time (the loop waits between intervals)."""

    def __init__(self, inner) -> None:
        super().__init__(inner)
        self.simulated = False


def test_real_time_environments_are_observed_once_per_interval_and_stop_wakes_the_wait():
    service = replication_service()
    service = replace(service, environment=RealTime(service.environment), interval_s=0.25)
    loop = ServiceLoop(
        service, ServiceSettings(intervals=3), ServiceLog("replication", io.StringIO())
    )
    started = time.monotonic()
    asyncio.run(loop.run())
    assert time.monotonic() - started >= 0.75  # each of three intervals waits its 0.25 s

    service = replace(service, interval_s=60.0)
    loop = ServiceLoop(service, ServiceSettings(), ServiceLog("replication", io.StringIO()))

    started = time.monotonic()
    asyncio.run(run_then_stop(loop, after_s=0.3))
    assert loop.interval == 0  # stopped during the first interval's wait: nothing observed
    assert time.monotonic() - started < 30  # not the 60 s interval


class SelfPaced(FaultyEnvironment):
    """The simulated link behind an observe() that waits for its own point (a round every
    ``every_s`` of wall time, as a Kurma agent's): the loop must not wait as well."""

    self_paced = True

    def __init__(self, inner, every_s: float) -> None:
        super().__init__(inner)
        self.simulated = False
        self.every_s = every_s
        self.points: list[float] = []

    async def observe(self):
        now = time.monotonic()
        await asyncio.sleep(self.every_s - now % self.every_s)
        self.points.append(time.monotonic())
        return await super().observe()


def test_a_self_paced_environment_sets_the_pace_and_stop_ends_its_wait():
    service = replication_service()
    env = SelfPaced(service.environment, every_s=0.5)
    service = replace(service, environment=env, interval_s=0.5)
    # shorter than a wait (0.5 s), longer than an observe on a busy machine (0.05 s failed once)
    settings = ServiceSettings(intervals=4, observe_timeout_s=0.2)
    loop = ServiceLoop(service, settings, ServiceLog("replication", io.StringIO()))
    asyncio.run(loop.run())
    assert loop.failed_intervals == 0  # the wait for the point is not an observe timeout
    gaps = [b - a for a, b in zip(env.points, env.points[1:], strict=False)]
    assert len(env.points) == 4 and all(gap < 0.9 for gap in gaps)  # no point skipped

    env = SelfPaced(replication_service().environment, every_s=60.0)
    service = replace(service, environment=env, interval_s=60.0)
    loop = ServiceLoop(service, ServiceSettings(), ServiceLog("replication", io.StringIO()))

    started = time.monotonic()
    asyncio.run(run_then_stop(loop, after_s=0.3))
    assert time.monotonic() - started < 30 and env.closed  # not the 60 s wait
    assert loop.failed_intervals == 0 and env.points == []


def test_a_solve_interrupted_by_sigint_stops_the_loop():
    """OSQP hooks SIGINT during its solves and reports ``interrupted``: the loop takes that
    as the operator's Ctrl-C and stops after the interval."""

    class Interrupted:
        def step(self, observation):
            return Decision(EQUAL, Outcome("failed", "interrupted"))

    service = replace(replication_service(), controller=Interrupted())
    stream = io.StringIO()
    loop = ServiceLoop(service, ServiceSettings(), ServiceLog("replication", stream))
    asyncio.run(loop.run())
    assert loop.interval == 1
    stopping = [r for r in records(stream) if r["event"] == "stopping"]
    assert stopping == [stopping[0]] and stopping[0]["via"] == "solver"


def test_observe_and_apply_may_take_the_services_own_limits_unless_the_config_sets_them():
    # the Director on a cluster: a period each
    service = replace(replication_service(), observe_timeout_s=6.0, apply_timeout_s=7.0)
    log = ServiceLog("replication", io.StringIO())
    loop = ServiceLoop(service, ServiceSettings(), log)
    assert (loop.observe_timeout_s, loop.apply_timeout_s) == (6.0, 7.0)
    settings = ServiceSettings(observe_timeout_s=1.5, apply_timeout_s=2.0)
    loop = ServiceLoop(service, settings, log)
    assert (loop.observe_timeout_s, loop.apply_timeout_s) == (1.5, 2.0)
    plain = replication_service()
    loop = ServiceLoop(plain, ServiceSettings(), log)
    assert loop.observe_timeout_s == loop.apply_timeout_s == plain.interval_s

"""``geoslo run``'s Supercloud service end to end (SoCC 2016 §5.1 loop, §5.2.2 testbed): the
placement loop on the simulated ensemble and on a live ZooKeeper ensemble moved by dynamic
reconfiguration, each applied and as a dry run (observed and decided, never applied).

Through the command line where the log and /metrics tell the outcome; through
``ServiceLoop`` (the loop the command runs) where a test looks at the environment or at what
the controller saw afterwards."""

from __future__ import annotations

import asyncio
import io
from dataclasses import replace

import pytest

from _run import Running, gauges, parse_log, processes_mentioning, run_service, write_config
from geoslo.control.supercloud import Migration
from geoslo.live._netns import namespaces
from geoslo.live.supercloud.zookeeper import cannot_run_reason
from geoslo.runtime import ServiceLog, ServiceLoop, ServiceSettings
from geoslo.runtime.supercloud import SYSTEM, ControllerSettings

pytestmark = pytest.mark.integration

TWO_DAYS = 2 * 24 * 6  # intervals of 10 minutes

SIMULATOR = f"""\
system = "supercloud"
interval_s = 600.0
[environment]
kind = "simulator"
[service]
listen = "127.0.0.1:0"
intervals = {TWO_DAYS}
"""

# The simulator's default start (§5.1's Global start): two nodes in Washington, one in Tokyo.
START = {"zk1": "Washington DC", "zk2": "Washington DC", "zk3": "Tokyo"}

TESTBED = """\
system = "supercloud"
interval_s = 3.0
[environment]
kind = "testbed"
state_dir = "{state_dir}"
[service]
listen = "127.0.0.1:0"
intervals = {intervals}
"""


class Recorded:
    """The placement loop, keeping each (observation, plan) it saw and decided; ``rewrite``
    may change a plan before the runtime gets it."""

    def __init__(self, inner, rewrite=None) -> None:
        self.inner, self.rewrite, self.seen = inner, rewrite, []

    def step(self, observation):
        plan = self.inner.step(observation)
        if plan is not None and self.rewrite is not None:
            plan = self.rewrite(plan)
        self.seen.append((observation, plan))
        return plan


def _serve(service, intervals: int, dry_run: bool, rewrite=None) -> tuple[Recorded, list[dict]]:
    """``ServiceLoop`` over ``service`` for ``intervals``; the recorder and the log's records."""
    recorded = Recorded(service.controller, rewrite)
    stream = io.StringIO()
    loop = ServiceLoop(
        replace(service, controller=recorded),
        ServiceSettings(intervals=intervals),
        ServiceLog("supercloud", stream),
        dry_run=dry_run,
    )
    asyncio.run(loop.run())
    assert loop.interval == intervals
    records, other = parse_log(stream.getvalue())
    assert other == ""
    return recorded, records


def _decided(records: list[dict]) -> list[dict]:
    return [r for r in records if r["event"] == "interval" and r["status"] != "no_plan"]


# --- the simulator ------------------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("flags", [(), ("--dry-run",)], ids=["apply", "dry-run"])
def test_run_on_the_simulator(tmp_path, flags) -> None:
    run = run_service(write_config(tmp_path, SIMULATOR), *flags)
    intervals = run.events("interval")
    assert len(intervals) == TWO_DAYS and not any(i["errors"] for i in intervals)
    decided = _decided(run.records)
    assert all(i["status"] == "optimal" and i["applied"] for i in decided)
    plans = [record["plan"] for record in run.events("dry_run")]
    if flags:  # decided every interval; nothing moved: every move starts from the start
        assert len(plans) == len(decided) == TWO_DAYS
        moves = [m for plan in plans for m in plan["migrations"]]
        assert {(m["node"], m["from"]) for m in moves} == set(START.items())
        assert all(p["improvement"] > 0 for p in plans)
        # ... towards the busier region of the hour, all the nodes together
        assert {m["to"] for m in moves} == set(START.values())
        assert all(len({n["site"] for n in p["placement"]["nodes"]}) == 1 for p in plans)
    else:  # §5.1: the whole ensemble moves to the busier region, twice a day at most
        assert 2 <= len(decided) <= 8 and plans == []


@pytest.mark.timeout(60)
@pytest.mark.parametrize("dry_run", [False, True], ids=["apply", "dry-run"])
def test_the_service_loop_follows_the_sun_for_two_days(dry_run) -> None:
    environment = SYSTEM.environments["simulator"].model_validate({"kind": "simulator"})
    service = SYSTEM.build(ControllerSettings(), environment, 600.0)
    recorded, _ = _serve(service, TWO_DAYS, dry_run)
    seen = recorded.seen
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


# --- the live ZooKeeper ensemble (root) ---------------------------------------------------


@pytest.fixture
def testbed_ok() -> None:
    reason = cannot_run_reason()
    if reason:
        pytest.skip(f"live ZooKeeper testbed: {reason}")


def _nothing_left(state_dir, pid: int) -> None:
    """Every process the service (``pid``) started has exited, its namespaces are gone."""
    assert processes_mentioning(str(state_dir)) == []
    assert not [n for n in namespaces() if n.startswith(f"geoslo-zk-{pid}-")]


def _moved_to_tokyo(base_url: str) -> dict | None:
    """The observation gauges once the ensemble itself reports three Tokyo members and
    no reconfiguration runs."""
    observed = gauges(base_url, "observation")
    if observed.get("nodes:tokyo") == 3 and "nodes:virginia" not in observed:
        return observed if observed.get("busy") == 0 else None
    return None


@pytest.mark.timeout(120)
def test_run_on_the_testbed_moves_the_ensemble_to_the_busier_site(testbed_ok, tmp_path):
    state_dir = tmp_path / "zk"
    config = write_config(tmp_path, TESTBED.format(state_dir=state_dir, intervals=0))
    run = Running(config, wait_s=90)
    try:
        base_url = run.base_url()
        observed = run.wait_for(lambda: _moved_to_tokyo(base_url), "three Tokyo members")
        plan = gauges(base_url, "plan")
        assert run.stop() == 0
    finally:
        run.close()
    result = run.result()
    # Tokyo has 4x Virginia's sessions: every Virginia node moves there (§5.2.2's 3-step's
    # first two steps), once; the ensemble itself then reports three Tokyo members.
    decided = _decided(result.records)
    assert len(decided) == 1 and decided[0]["status"] == "optimal" and decided[0]["applied"]
    assert not any(i["errors"] for i in result.events("interval"))
    assert plan["migrations"] == 2 and plan["nodes:tokyo"] == 3 and "nodes:virginia" not in plan
    tokyo = observed["reads:tokyo"] + observed["writes:tokyo"]
    virginia = observed["reads:virginia"] + observed["writes:virginia"]
    assert tokyo > 2 * virginia > 0
    assert result.events("stopped")[0]["failed_intervals"] == 0
    _nothing_left(state_dir, run.process.pid)


@pytest.mark.timeout(90)
def test_dry_run_on_the_testbed_decides_every_interval_and_moves_nothing(testbed_ok, tmp_path):
    state_dir = tmp_path / "zk"
    config = write_config(tmp_path, TESTBED.format(state_dir=state_dir, intervals=3))
    service = Running(config, "--dry-run", wait_s=80)
    try:
        run = service.finish()
    finally:
        service.close()
    assert run.returncode == 0, run.other
    intervals = run.events("interval")
    assert len(intervals) == 3 and not any(i["errors"] for i in intervals)
    assert all(i["status"] == "optimal" and i["applied"] for i in intervals)
    # A move carried out would make the next interval busy (no plan) and then settled;
    # instead each interval sees the start and decides the same move again.
    plans = [record["plan"] for record in run.events("dry_run")]
    assert len(plans) == 3 and all(p["migrations"] == plans[0]["migrations"] for p in plans)
    assert {m["from"] for m in plans[0]["migrations"]} == {"virginia"}
    assert {node["site"] for node in plans[0]["placement"]["nodes"]} == {"tokyo"}
    _nothing_left(state_dir, service.process.pid)


@pytest.mark.timeout(90)
def test_a_refused_plan_counts_an_apply_error_and_changes_nothing(testbed_ok, tmp_path):
    """A malformed plan (a node that is not a member of the ensemble): the environment
    refuses it, the runtime counts it and goes on, the ensemble stays."""
    malformed = (Migration("zk9", "virginia", "tokyo"),)
    table = {"kind": "testbed", "state_dir": str(tmp_path / "zk")}
    environment = SYSTEM.environments["testbed"].model_validate(table)
    service = SYSTEM.build(ControllerSettings(), environment, 3.0)
    recorded, records = _serve(
        service, 2, dry_run=False, rewrite=lambda plan: replace(plan, migrations=malformed)
    )
    errors = [r for r in records if r["event"] == "error"]
    assert [e["kind"] for e in errors] == ["apply", "apply"]
    assert all("nothing changed" in e["error"] and "zk9" in e["error"] for e in errors)
    assert service.environment.applied == []
    assert len({observation.current for observation, _ in recorded.seen}) == 1

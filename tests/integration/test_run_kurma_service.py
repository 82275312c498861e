"""`geoslo run` with Kurma on the simulator and on the live testbed (real Redis servers behind
the WAN emulator, open-loop clients per site), for a few intervals, with and without --dry-run.

The testbed's sites are one Redis server each with 4 ms requests (M/M/1: the 5% point of a
30 ms SLO is 150 req/s); London's clients offer 200 req/s, the others 50, so London is past
its 5% point and the plan redirects. Assertions are outcomes with wide margins (a busy machine
slows the clients and the WAN emulator), never the harness's punctuality."""

from __future__ import annotations

import json

import numpy as np
import pytest

from _run import processes_mentioning, run_in_process, run_service, write_config
from geoslo.control import APPLICABLE_STATUSES

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]

SIMULATOR = """\
system = "kurma"
[environment]
kind = "simulator"
[controller]
objective = "cost"
profile_points = 8
profile_seconds = 5.0
[service]
listen = "127.0.0.1:0"
intervals = 8
"""

TESTBED = """\
system = "kurma"
[environment]
kind = "testbed"
state_dir = "{state_dir}"
servers_per_site = 1
service_mean_ms = 4.0
load_fraction = [0.8, 0.2, 0.2]
[controller]
objective = "perf"
[service]
listen = "127.0.0.1:0"
intervals = {intervals}
"""
LONDON_RPS = 200.0  # 0.8 x one server of 4 ms requests


@pytest.mark.parametrize("flags", [(), ("--dry-run",)], ids=["apply", "dry-run"])
def test_run_on_the_simulator(tmp_path, flags):
    run = run_service(write_config(tmp_path, SIMULATOR), *flags)
    intervals = run.events("interval")
    assert len(intervals) == 8
    assert all(i["status"] in APPLICABLE_STATUSES and i["applied"] for i in intervals)
    assert all(i["objective"] is not None and i["decide_ms"] > 0 for i in intervals)
    assert run.events("stopped")[0]["failed_intervals"] == 0
    plans = [record["plan"] for record in run.events("dry_run")]
    if flags:  # every plan logged: where each site sends its requests, rows of fractions
        assert len(plans) == 8
        for plan in plans:
            assert len(plan["fractions"]) == len(plan["sites"]) > 1
            assert [sum(row) for row in plan["fractions"]] == pytest.approx([1.0] * 3, abs=1e-4)
    else:
        assert plans == []


@pytest.mark.parametrize("dry_run", [False, True], ids=["apply", "dry-run"])
def test_the_service_loop_puts_the_routing_in_force_unless_dry(tmp_path, dry_run):
    """Through ServiceLoop, to look at the simulator afterwards: applied, the last plan's
    fractions are in force; dry, every site still serves its own requests (the start)."""
    config = write_config(tmp_path, SIMULATOR)
    service, plans, records = run_in_process(config, dry_run=dry_run)
    decided = [plan for plan in plans if plan is not None]
    assert len(decided) == 8
    assert not np.allclose(decided[-1].fractions, np.eye(3))  # the plan redirects
    in_force = service.environment.fractions
    if dry_run:
        assert np.array_equal(in_force, np.eye(3))
        assert len([r for r in records if r["event"] == "dry_run"]) == 8
    else:
        assert np.allclose(in_force, decided[-1].fractions)


@pytest.mark.usefixtures("needs_redis")
@pytest.mark.parametrize("flags", [(), ("--dry-run",)], ids=["apply", "dry-run"])
def test_run_on_the_testbed(tmp_path, flags):
    state_dir = tmp_path / "testbed"
    config = write_config(tmp_path, TESTBED.format(state_dir=state_dir, intervals=5))
    run = run_service(config, *flags)
    intervals = run.events("interval")
    assert len(intervals) == 5
    assert all(i["status"] in APPLICABLE_STATUSES for i in intervals), intervals
    assert all(i["applied"] for i in intervals)
    # London is past its 5% point: once its demand is measured the plan expects violations
    assert max(i["objective"] for i in intervals[1:]) > 0
    plans = [record["plan"] for record in run.events("dry_run")]
    if flags:
        assert len(plans) == 5
        london_rps = [sum(plan["rates_rps"][0]) for plan in plans[1:]]  # measured demand
        assert all(0.3 * LONDON_RPS < rps < 2 * LONDON_RPS for rps in london_rps), london_rps
        assert all(plan["sites"] == ["London", "Ireland", "Frankfurt"] for plan in plans)
    else:
        assert plans == []
    recorded = json.loads((state_dir / "testbed.json").read_text())
    assert recorded["processes"] == []  # close() stopped every process it started
    assert processes_mentioning(str(state_dir)) == []
    assert (state_dir / "redis-london-0.log").exists()  # the servers did run

"""`geoslo run` with Kurma on the simulator and on the live testbed (real Redis servers behind
the WAN emulator, open-loop clients per site), for a few intervals, with and without --dry-run.

The testbed's sites are one Redis server each with 4 ms requests (M/M/1: the 5% point of a
30 ms SLO is 150 req/s); London's clients offer 200 req/s, the others 50, so London is past
its 5% point and the plan redirects. Assertions are outcomes with wide margins (a busy machine
slows the clients and the WAN emulator), never the harness's punctuality."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from geoslo.control import APPLICABLE_STATUSES
from geoslo.live._processes import find_program

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


def geoslo_run(config: Path, *flags: str) -> list[dict]:
    """Run `geoslo run CONFIG` to its end; its JSON log lines."""
    done = subprocess.run(
        [sys.executable, "-m", "geoslo", "run", str(config), *flags],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONWARNINGS": "error"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]


def events(lines: list[dict], name: str) -> list[dict]:
    return [line for line in lines if line["event"] == name]


def processes_mentioning(text: str) -> list[int]:
    """PIDs of live processes whose command line names ``text`` (read-only, /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def test_run_on_the_simulator(tmp_path):
    config = tmp_path / "kurma.toml"
    config.write_text(SIMULATOR)
    lines = geoslo_run(config)
    intervals = events(lines, "interval")
    assert len(intervals) == 8
    assert all(i["status"] in APPLICABLE_STATUSES and i["applied"] for i in intervals)
    assert all(i["objective"] is not None and i["decide_ms"] > 0 for i in intervals)
    assert events(lines, "stopped")[0]["failed_intervals"] == 0


@pytest.fixture
def redis_server():
    try:
        find_program("redis-server", "redis-server")
    except Exception as missing:  # noqa: BLE001 - any reason it cannot be found
        pytest.skip(f"redis-server is not installed: {missing}")


@pytest.mark.parametrize("dry_run", [False, True], ids=["apply", "dry-run"])
def test_run_on_the_testbed(tmp_path, redis_server, dry_run):
    state_dir = tmp_path / "testbed"
    config = tmp_path / "kurma.toml"
    config.write_text(TESTBED.format(state_dir=state_dir, intervals=5))
    lines = geoslo_run(config, *(["--dry-run"] if dry_run else []))
    intervals = events(lines, "interval")
    assert len(intervals) == 5
    assert all(i["status"] in APPLICABLE_STATUSES for i in intervals), intervals
    assert all(i["applied"] for i in intervals)
    # London is past its 5% point: once its demand is measured the plan expects violations
    assert max(i["objective"] for i in intervals[1:]) > 0
    if dry_run:
        plans = [line["plan"] for line in events(lines, "dry_run")]
        assert len(plans) == 5
        london_rps = [sum(plan["rates_rps"][0]) for plan in plans[1:]]  # measured demand
        assert all(0.3 * LONDON_RPS < rps < 2 * LONDON_RPS for rps in london_rps), london_rps
        assert all(plan["sites"] == ["London", "Ireland", "Frankfurt"] for plan in plans)
    recorded = json.loads((state_dir / "testbed.json").read_text())
    assert recorded["processes"] == []  # close() stopped every process it started
    assert processes_mentioning(str(state_dir)) == []
    assert (state_dir / "redis-london-0.log").exists()  # the servers did run

"""SIGTERM to `geoslo reproduce kurma --live` mid-run: it stops the testbed and every
process it started (Redis servers, WAN injector, agents, generators) before it exits.
Real processes; nothing is mocked."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        shutil.which("redis-server") is None, reason="redis-server is not installed"
    ),
]


def descendants(pid: int) -> set[int]:
    """Every process below ``pid``, from /proc (children of children included)."""
    parent_of = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue  # ended while we looked
            parent_of[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parent_of.items() if parent in frontier}
        found |= frontier
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_sigterm_mid_replay_stops_everything_it_started(tmp_path):
    out = tmp_path / "report"
    started: set[int] = set()
    command = [sys.executable, "-m", "geoslo", "reproduce", "kurma", "--live", "--quick"]
    log = tmp_path / "reproduce.log"
    with open(log, "wb") as sink:
        proc = subprocess.Popen(
            [*command, "--output", str(out)],
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # as from a user's shell: its own group; we signal one PID
        )
    try:
        # profiling has begun: servers, injector, agents and generators all run
        deadline = time.time() + 240
        while not list((out / "run" / "profile").glob("loadgen-*.json")):
            assert proc.poll() is None, log.read_text()[-2000:]
            assert time.time() < deadline, "profiling never started"
            time.sleep(0.5)
        time.sleep(3)
        started |= descendants(proc.pid)
        assert len(started) >= 6, started  # at least servers, generators and agents
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=120) != 0, log.read_text()[-2000:]
        still = sorted(pid for pid in started if alive(pid))
        assert still == [], f"left running after SIGTERM: {still}"
    finally:  # on failure, leave nothing behind either
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for pid in started:  # all started by this test, through the command
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        testbed = out / "run" / "testbed"
        if testbed.exists():
            subprocess.run([sys.executable, "-m", "geoslo", "testbed", "down", "--state-dir",
                            str(testbed)], capture_output=True, timeout=120)  # fmt: skip

"""Experiment 1 compressed onto the real link end to end (``live_report``,
docs/replication-live.md), in the suite's short form: its first 30% (54 s on the link,
the application's overload included) under the MPC, FIFO and STATIC (PRIO's strict
priority is checked on its own in test_replication_live.py). Asserts the issue's bar on
the measurements: the backlogs obey eq. (3), the link carries about C when full, the MPC
buffers less application data than STATIC and FIFO while its images finish; and that the
run cleans up, at its end and at SIGTERM mid-run. Needs root (about a minute and a half:
the policies run at once)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from geoslo.experiments.replication import LiveSettings, live_report
from geoslo.live._netns import namespaces
from geoslo.live.replication import cannot_run_reason

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

SUITE_SETTINGS = LiveSettings(fraction=0.3, policies=("MPC", "FIFO", "STATIC"))


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    reason = cannot_run_reason()
    if reason:
        pytest.skip(reason)
    out = tmp_path_factory.mktemp("replication-live")
    index = live_report(SUITE_SETTINGS, out, progress=lambda line: None)
    return index, json.loads((out / "results.json").read_text())


def test_the_short_live_reproduction_passes_its_checks(report):
    index, results = report
    assert set(results["policies"]) == {"MPC", "FIFO", "STATIC"}
    failed = [check for check, ok in results["checks"].items() if not ok]
    assert results["checks"] and failed == [], (failed, results["policies"]["MPC"])
    assert (index.parent / "index.html").exists() and (index.parent / "live_buffers.png").exists()


def test_every_policy_measured_real_traffic(report):
    _, results = report
    for name, p in results["policies"].items():
        assert p["requests"] > 300, name  # the reader's GETs, each answered or counted
        assert p["unanswered"] < 0.5 * p["requests"], name  # FIFO ends with ~20% queued
        assert p["live"]["images_started"] >= 5, name  # one every 10 s for 54 s
        assert p["full_link_intervals"] >= 5, name  # the overload filled the link
        assert sum(p["htb_class_bytes"].get(c, 0) for c in ("1:10", "1:20", "1:30")) > 50e6


def test_the_run_leaves_no_namespace(report):
    assert not [n for n in namespaces() if "geoslo-rlive" in n]


def test_sigterm_takes_every_policys_testbed_down_at_the_next_interval(tmp_path):
    """The policies run at once, one thread each: SIGTERM must stop them all at their next
    interval (each taking its testbed down), not after the rest of the run (108 s here)."""
    reason = cannot_run_reason()
    if reason:
        pytest.skip(reason)
    command = [sys.executable, "-m", "geoslo", "reproduce", "replication", "--live", "--quick",
               "--output", str(tmp_path / "report")]  # fmt: skip
    log = tmp_path / "reproduce.log"
    with open(log, "wb") as sink:
        proc = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while len(_namespaces_of(proc.pid)) < 8:  # a sender and a receiver per policy
            assert proc.poll() is None, log.read_text()[-2000:]
            assert time.monotonic() < deadline, "the testbeds never came up"
            time.sleep(0.2)
        time.sleep(5)  # every policy's controller is running
        os.kill(proc.pid, signal.SIGTERM)
        signalled = time.monotonic()
        assert proc.wait(timeout=120) != 0, log.read_text()[-2000:]
        assert time.monotonic() - signalled < 40, "the runs went on after SIGTERM"
        assert _namespaces_of(proc.pid) == []
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _namespaces_of(pid: int) -> list[str]:
    return [n for n in namespaces() if n.startswith("geoslo-rlive-") and n.endswith(f"-{pid}")]

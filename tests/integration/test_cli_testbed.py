"""`geoslo testbed up/status/down` against real processes."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from geoslo.cli import app
from geoslo.live.kurma import Testbed

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server not installed"),
]


def run(*args: str):
    return CliRunner().invoke(app, list(args))


def run_geoslo(*args: str) -> subprocess.CompletedProcess:
    """The command line as a user runs it: its own process, its real exit status."""
    command = [sys.executable, "-m", "geoslo", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def printed_ports(output: str) -> list[int]:
    """Every port the status lines name: each process's, and each site's Redis list."""
    ports = [int(p) for p in re.findall(r" port (\d+)", output)]
    for listed in re.findall(r": redis ([\d,]+)", output):
        ports += [int(p) for p in listed.split(",")]
    return ports


def answers(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(5.0)
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_up_status_down(tmp_path):
    state = str(tmp_path / "bed")
    try:
        up = run("testbed", "up", "--sites", "London,ireland", "--servers-per-site", "1",
                 "--state-dir", state)  # fmt: skip
        assert up.exit_code == 0, up.output
        assert "redis-london-0" in up.output and "wan" in up.output
        status = run("testbed", "status", "--state-dir", state)
        assert status.exit_code == 0 and status.output.count(" up") == 3
        # nothing is printed that nothing serves (the agents' metrics ports were)
        for output in (up.output, status.output):
            assert "metrics" not in output
            ports = printed_ports(output)
            assert len(ports) == 5  # 3 processes, 2 Redis servers listed by site
            assert [p for p in ports if not answers(p)] == []
        again = run("testbed", "up", "--state-dir", state)
        assert again.exit_code == 1 and "testbed down" in again.output
    finally:
        down = run("testbed", "down", "--state-dir", state)
    assert down.exit_code == 0 and "stopped 3" in down.output
    assert not Testbed.load(tmp_path / "bed").running()
    after = run_geoslo("testbed", "status", "--state-dir", state)
    assert after.returncode == 1, after
    assert "not (fully) running" in after.stderr
    assert "internal error" not in after.stdout + after.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (("--sites", "london,paris"), "unknown site 'paris'"),
        (("--sites", "london"), "at least two sites"),
        (("--sites", "london,London"), "named twice"),
        (("--servers-per-site", "0"), "servers_per_site"),
        (("--service-mean-ms", "-1"), "service_mean_ms"),
    ],
)
def test_bad_options_fail_with_one_line(tmp_path, args, message):
    result = run("testbed", "up", *args, "--state-dir", str(tmp_path / "bed"))
    assert result.exit_code == 2
    assert message in result.output


def test_status_without_a_testbed(tmp_path):
    result = run("testbed", "status", "--state-dir", str(tmp_path / "none"))
    assert result.exit_code == 1 and "no testbed recorded" in result.output

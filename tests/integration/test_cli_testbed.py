"""`geoslo testbed up/status/down` against real processes."""

from __future__ import annotations

import shutil

import pytest
from typer.testing import CliRunner

from geoslo.cli import app
from geoslo.live import Testbed

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server not installed"),
]


def run(*args: str):
    return CliRunner().invoke(app, list(args))


def test_up_status_down(tmp_path):
    state = str(tmp_path / "bed")
    try:
        up = run("testbed", "up", "--sites", "London,ireland", "--servers-per-site", "1",
                 "--state-dir", state)  # fmt: skip
        assert up.exit_code == 0, up.output
        assert "redis-london-0" in up.output and "wan" in up.output
        status = run("testbed", "status", "--state-dir", state)
        assert status.exit_code == 0 and status.output.count(" up") == 3
        again = run("testbed", "up", "--state-dir", state)
        assert again.exit_code == 1 and "testbed down" in again.output
    finally:
        down = run("testbed", "down", "--state-dir", state)
    assert down.exit_code == 0 and "stopped 3" in down.output
    assert not Testbed.load(tmp_path / "bed").running()
    assert run("testbed", "status", "--state-dir", state).exit_code == 1


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

"""deploy/ checked by the real tools (issue 42, item 7): promtool on the alert rules and the
dashboard's queries, systemd-analyze on the unit and its drop-ins, a container builder on
the Dockerfile. A missing tool is a skip that says which and how to get it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def tool(name: str, get_it: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed ({get_it})")
    return path


def run(command: list[str], timeout_s: float = 120, **options) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, **options)


def test_promtool_checks_the_alert_rules():
    promtool = tool("promtool", "apt-get install prometheus")
    checked = run([promtool, "check", "rules", str(DEPLOY / "prometheus" / "geoslo-alerts.yml")])
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS" in checked.stdout and "lint" not in checked.stdout + checked.stderr


def test_the_alerts_fire_on_the_series_they_are_for():
    """deploy/prometheus/geoslo-alerts.test.yml: a Kurma service deciding slower than its
    interval, failing an observation and stalling; a replication service that keeps up."""
    promtool = tool("promtool", "apt-get install prometheus")
    tested = run([promtool, "test", "rules", "geoslo-alerts.test.yml"], cwd=DEPLOY / "prometheus")
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_promtool_parses_every_dashboard_query(tmp_path):
    """Each panel's query as a recording rule, Grafana's variables given values."""
    promtool = tool("promtool", "apt-get install prometheus")
    dashboard = json.loads((DEPLOY / "grafana" / "geoslo-dashboard.json").read_text())
    values = {"$__rate_interval": "5m", "$system": "kurma", "$instance": ".*"}
    rules = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", ()):
            expr = target["expr"]
            for variable, value in values.items():
                expr = expr.replace(variable, value)
            rules.append({"record": f"panel_{panel['id']}_{target['refId']}", "expr": expr})
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    checked = run([promtool, "check", "rules", str(path)])
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.parametrize("drop_in", [None, "mpc-host.conf", "testbed-root.conf"])
def test_systemd_analyze_verifies_the_unit(tmp_path, drop_in):
    """The template as instance geoslo@kurma-agent, ExecStart pointed at this environment's
    geoslo (verify refuses a command that does not exist), with each drop-in."""
    analyze = tool("systemd-analyze", "apt-get install systemd")
    geoslo = Path(sys.executable).with_name("geoslo")
    if not geoslo.exists():
        pytest.skip(f"no geoslo command beside {sys.executable} (pip install -e .)")
    unit = (DEPLOY / "systemd" / "geoslo@.service").read_text()
    assert "/opt/geoslo/bin/geoslo" in unit
    (tmp_path / "geoslo@.service").write_text(unit.replace("/opt/geoslo/bin/geoslo", str(geoslo)))
    instance = tmp_path / "geoslo@kurma-agent.service"
    instance.symlink_to("geoslo@.service")
    if drop_in is not None:
        folder = tmp_path / "geoslo@kurma-agent.service.d"
        folder.mkdir()
        shutil.copy(DEPLOY / "systemd" / drop_in, folder / drop_in)
    verified = run([analyze, "verify", str(instance)], env={"SYSTEMD_LOG_LEVEL": "notice"})
    assert verified.returncode == 0, verified.stderr
    assert verified.stdout + verified.stderr == ""  # no warning either (unknown keys...)


def _working_builder() -> list[str]:
    """A builder that answers: docker or podman whose engine runs, or buildah."""
    for name, probe in [("docker", ["info"]), ("podman", ["info"]), ("buildah", ["info"])]:
        path = shutil.which(name)
        if path is None:
            continue
        answer = run([path, *probe], timeout_s=30)
        if answer.returncode == 0:
            return [path, "bud"] if name == "buildah" else [path, "build"]
    found = [n for n in ("docker", "podman", "buildah") if shutil.which(n)]
    reason = (
        f"{', '.join(found)} found but no engine answers (docker info fails: no daemon)"
        if found
        else "no container builder (docker, podman, buildah)"
    )
    pytest.skip(f"cannot build deploy/Dockerfile: {reason}")


@pytest.mark.slow
def test_the_image_builds_and_its_geoslo_answers():
    """Builds the image (the warm-up included: minutes), then runs `geoslo --help` in it."""
    builder = _working_builder()
    tag = "geoslo-deploy-test:latest"
    built = run([*builder, "-f", str(DEPLOY / "Dockerfile"), "-t", tag, str(ROOT)], timeout_s=1800)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    engine = builder[0]
    if Path(engine).name == "buildah":
        return
    answered = run([engine, "run", "--rm", "--entrypoint", "geoslo", tag, "--help"])
    assert answered.returncode == 0 and "run" in answered.stdout, answered.stderr
